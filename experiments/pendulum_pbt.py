"""PBT on the built-in Pendulum swing-up: 8 members (CPU is fine; a GPU helps with more envs).

    python -m launcher.run --run=experiments.pendulum_pbt --backend=processes --num_gpus=0
    python -m launcher.run --run=experiments.pendulum_pbt --backend=processes --num_gpus=1 --experiments_per_gpu=8
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 8

_cmd = (
    "python -m pbt.train task=Pendulum pbt=pbt_default "
    "num_envs=512 max_frames=20000000 "
    "pbt.interval_steps=1000000 pbt.start_after=2000000 pbt.ready_after=2000000 pbt.initial_delay=4000000"
)

_params = ParamGrid([(("pbt.policy_idx", "seed"), [(i, 1000 + i) for i in range(NUM_POLICIES)])])

RUN_DESCRIPTION = RunDescription("pendulum_pbt", experiments=[Experiment("pendulum", _cmd, _params)])
