"""Smoke test: a 4-member PBT population on the built-in Pendulum, on CPU, in about a minute.

    python -m launcher.run --run=experiments.smoke_pbt --backend=processes --num_gpus=0

PBT acts from the start (start_after=0, initial_delay=0) so a short run goes through several PBT
iterations; the numbers are for checking the machinery, not for learning a good policy.
"""
from launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 4

_cmd = (
    "python -m pbt.train task=Pendulum pbt=pbt_default "
    "num_envs=256 max_frames=500000 "
    "pbt.interval_steps=100000 pbt.start_after=0 pbt.initial_delay=0 pbt.ready_after=100000 "
    "sim_device=cpu rl_device=cpu torch_threads=1"
)

# Tie a seed to each member so the population starts from different initial weights.
_params = ParamGrid([(("pbt.policy_idx", "seed"), [(i, 1000 + i) for i in range(NUM_POLICIES)])])

RUN_DESCRIPTION = RunDescription("smoke_pbt", experiments=[Experiment("pendulum", _cmd, _params)])
