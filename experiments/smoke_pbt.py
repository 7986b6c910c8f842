"""The README's main job: a 4-member PBT population on the built-in Pendulum, on CPU, in about a minute.

    python -m launcher.run --run=experiments.smoke_pbt

The members start from a deliberately uneven spread: each has its own constant learning rate, from
3e-3 (learns fast) down to 1e-5 (hardly learns in 400k frames), tied to its seed. PBT acts from the
start (start_after=0, initial_delay=0) and every 40k frames; a member is ready to be replaced or to
be a donor after 80k frames of its own. So within the first few iterations a bad member takes a
leader's weights (an exploit, action "replace" in its lineage), usually more than once per run; the
launcher's summary at the end says who gave and who took. The rules are DexPBT's
(``pbt/selection=dexpbt``, significance test on, nothing forced), with the worst 2 of 4 allowed to
act instead of 1.
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

NUM_POLICIES = 4
LEARNING_RATES = [3e-3, 1e-3, 1e-4, 1e-5]

_cmd = (
    "python -m pbt.train task=Pendulum pbt=pbt_default pbt/selection=dexpbt "
    "num_envs=256 max_frames=400000 "
    "train.params.config.lr_schedule=constant "
    "pbt.interval_steps=40000 pbt.start_after=0 pbt.initial_delay=0 pbt.ready_after=80000 "
    # the worst 2 of 4 may act (default: the worst 1), so a member whose objective is not known yet
    # (just replaced) does not shield the worst one
    "pbt.replace_fraction_worst=0.5 "
    # heartbeats every 2 s instead of 30 s: the launcher's live frames/s of a one-minute run
    "pbt.heartbeat_interval=2 "
    "sim_device=cpu rl_device=cpu torch_threads=1"
)


def make_run_description(seed_base: int = 1000) -> RunDescription:
    """The population with seeds seed_base + i (benchmarks/main_job.py runs it with other seeds)."""
    # One axis of tied keys: member i gets seed seed_base+i and the i-th learning rate.
    params = ParamGrid([
        (("pbt.policy_idx", "seed", "train.params.config.learning_rate"),
         [(i, seed_base + i, lr) for i, lr in enumerate(LEARNING_RATES)]),
    ])
    return RunDescription("smoke_pbt", experiments=[Experiment("pendulum", _cmd, params)])


RUN_DESCRIPTION = make_run_description()
