"""DexPBT's AllegroKuka reorientation experiment (IsaacGymEnvs ``allegro_kuka_reorientation_pbt_lstm.py``).

8 members of the LSTM policy on AllegroKukaLSTM (its default env is reorientation), 10^10 frames each. Needs Isaac Gym +
IsaacGymEnvs (Python 3.8) and NVIDIA GPUs. On a 4-GPU machine, two members per GPU:

    python -m launcher.run --run=experiments.isaacgym_allegro_kuka_pbt --backend=processes \\
        --max_parallel=8 --num_gpus=4 --experiments_per_gpu=2

On Slurm, one GPU per member, requeued at the time limit:

    python -m launcher.run --run=experiments.isaacgym_allegro_kuka_pbt --backend=slurm \\
        --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=8 --slurm_timeout=24:00:00

Upstream parameters: seed=-1, PBT every 2e7 frames, start_after 1e8, initial_delay 2e8, the worst
30% may be replaced, the allegro_kuka mutation scheme (which also mutates reward-shaping
coefficients: the task reports a separate true_objective, the success count).
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 8

_cmd = (
    "python -m pbt.train task=isaacgym/AllegroKukaLSTM headless=True seed=-1 "
    "max_frames=10000000000 "
    "pbt=pbt_default pbt/selection=dexpbt pbt/mutation=allegro_kuka_mutation "
    "pbt.interval_steps=20000000 pbt.start_after=100000000 pbt.ready_after=100000000 pbt.initial_delay=200000000 "
    "pbt.replace_fraction_worst=0.3"
)

_params = ParamGrid([("pbt.policy_idx", range(NUM_POLICIES))])

RUN_DESCRIPTION = RunDescription(
    "isaacgym_allegro_kuka_pbt", experiments=[Experiment("allegro_kuka_reorientation", _cmd, _params)]
)
