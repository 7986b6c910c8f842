"""An elastic PBT population on the built-in Pendulum, on CPU: it starts with 2 members and grows
while it runs.

    python -m launcher.run --run=experiments.pendulum_elastic --backend=processes --num_gpus=0
    # from a second shell, while it runs: 2 more members, at policy indices 2 and 3
    python -m launcher.run --run=experiments.pendulum_elastic --backend=processes --num_gpus=0 --add=2

``pbt.num_policies=auto``: each member ranks the members that published within the last
``pbt.elastic_window`` PBT intervals (or whose heartbeat says they are training), so a member that
finishes or dies drops out of the others' ranking. A member added while the population has
objectives starts from the best member's weights and frame count with mutated hyperparameters
(``pbt.join=best``; ``pbt.join=fresh`` starts it from scratch) and trains to the same ``max_frames``.
"""
from pbt.launcher import Experiment, ParamGrid, RunDescription

_cmd = (
    "python -m pbt.train task=Pendulum pbt=pbt_default pbt.num_policies=auto pbt.elastic_window=3 "
    "num_envs=256 max_frames=2000000 train.params.config.lr_schedule=constant "
    "pbt.interval_steps=50000 pbt.start_after=0 pbt.initial_delay=0 pbt.ready_after=100000 "
    "pbt.heartbeat_interval=2 sim_device=cpu rl_device=cpu torch_threads=1"
)

RUN_DESCRIPTION = RunDescription("pendulum_elastic", experiments=[
    Experiment("pendulum", _cmd, ParamGrid([(("pbt.policy_idx", "seed"), [(0, 100), (1, 101)])])),
])
