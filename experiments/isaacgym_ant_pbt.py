"""DexPBT's Ant experiment (IsaacGymEnvs ``pbt/experiments/ant_pbt.py``): 3 members on Isaac Gym Ant.

Needs Isaac Gym + IsaacGymEnvs (Python 3.8) and an NVIDIA GPU. On one GPU:

    python -m launcher.run --run=experiments.isaacgym_ant_pbt --backend=processes \\
        --num_gpus=1 --experiments_per_gpu=3

Upstream parameters: 2048 envs, 10000 iterations (here as frames: 10000 x 2048 envs x horizon 16),
seed=-1 (each member random), PBT every 5M frames after 10M, the Ant mutation scheme. Ant reports no
true_objective, so PBT ranks by the return that the scheme's reward weights shape, as upstream does:
pbt.allow_reward_shaping_mutation=true accepts that (start-up refuses it otherwise).
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 3
_NUM_ENVS = 2048
_MAX_FRAMES = 10000 * _NUM_ENVS * 16

_cmd = (
    f"python -m pbt.train task=isaacgym/Ant headless=True seed=-1 "
    f"num_envs={_NUM_ENVS} max_frames={_MAX_FRAMES} train.params.config.save_frequency=2000 "
    f"pbt=pbt_default pbt/selection=dexpbt pbt/mutation=ant_mutation pbt.allow_reward_shaping_mutation=true "
    f"pbt.interval_steps=5000000 pbt.start_after=10000000 pbt.ready_after=10000000 pbt.initial_delay=10000000"
)

_params = ParamGrid([("pbt.policy_idx", range(NUM_POLICIES))])

RUN_DESCRIPTION = RunDescription("isaacgym_ant_pbt", experiments=[Experiment("ant", _cmd, _params)])
