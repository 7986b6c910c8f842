"""PBT on the built-in 2-link Reacher: slow to learn and strongly hyperparameter-dependent, with a
large seed variance, so start_after is long enough for members to show their worth before PBT
may replace them (docs/performance_notes.md).

    python -m launcher.run --run=experiments.reacher_pbt --backend=processes --num_gpus=0
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 8

_cmd = (
    "python -m pbt.train task=Reacher pbt=pbt_default "
    "num_envs=1024 max_frames=30000000 "
    "pbt.interval_steps=1000000 pbt.start_after=3000000 pbt.ready_after=3000000 pbt.initial_delay=6000000"
)

_params = ParamGrid([(("pbt.policy_idx", "seed"), [(i, 3000 + i) for i in range(NUM_POLICIES)])])

RUN_DESCRIPTION = RunDescription("reacher_pbt", experiments=[Experiment("reacher", _cmd, _params)])
