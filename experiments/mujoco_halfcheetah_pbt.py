"""PBT on MuJoCo HalfCheetah through envpool (``pip install envpool gymnasium[mujoco]``): 4 members.

    python -m launcher.run --run=experiments.mujoco_halfcheetah_pbt --backend=processes --num_gpus=0
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 4

_cmd = (
    "python -m pbt.train task=envpool/HalfCheetah-v4 pbt=pbt_default "
    "num_envs=64 max_frames=10000000 "
    "pbt.interval_steps=500000 pbt.start_after=1000000 pbt.ready_after=1000000 pbt.initial_delay=2000000"
)

_params = ParamGrid([(("pbt.policy_idx", "seed"), [(i, 4000 + i) for i in range(NUM_POLICIES)])])

RUN_DESCRIPTION = RunDescription("mujoco_halfcheetah_pbt", experiments=[Experiment("halfcheetah", _cmd, _params)])
