"""PBT on the built-in Cartpole: 8 members (CPU is fine).

    python -m launcher.run --run=experiments.cartpole_pbt --backend=processes --num_gpus=0
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 8

_cmd = (
    "python -m pbt.train task=Cartpole pbt=pbt_default "
    "num_envs=512 max_frames=20000000 "
    "pbt.interval_steps=1000000 pbt.start_after=2000000 pbt.ready_after=2000000 pbt.initial_delay=4000000"
)

_params = ParamGrid([(("pbt.policy_idx", "seed"), [(i, 2000 + i) for i in range(NUM_POLICIES)])])

RUN_DESCRIPTION = RunDescription("cartpole_pbt", experiments=[Experiment("cartpole", _cmd, _params)])
