"""Run a PBT population from Python (scripts, notebooks) and read its outcome.

    from pbt.api import run_population

    result = run_population("pendulum_demo", task="Pendulum", num_policies=4,
                            overrides=["max_frames=400000", "pbt.interval_steps=40000"])
    print(result.exit_code, result.best)
    for row in result.table():
        print(row)

The members run as local processes (the launcher's ``processes`` backend, exactly as
``pbt-launch`` starts them); the call returns when all of them finished. Running the same call
again on the same ``train_dir`` resumes the population. No torch in this process.
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from pbt.launcher.populations import populations
from pbt.launcher.run import configure_logging, launch_description, launcher_argparser
from pbt.launcher.run_description import Experiment, ParamList, RunDescription
from pbt.launcher.summary import Winner, donations, find_winner
from pbt.tools.snapshot import Snapshot, read_snapshot

MemberOverrides = Callable[[int], Dict[str, Any]]
"""``policy_idx -> {key: value}``: what differs between members (each gets ``seed=1000+idx`` unless set)."""


@dataclass
class PopulationResult:
    """The outcome of :func:`run_population`."""

    exit_code: int
    """The launcher's exit status: 0 when every member finished."""
    workspace: Path
    """The population's shared workspace (``pbt-status``/``pbt-analyze`` read it)."""
    snapshot: Snapshot
    """The workspace as read after the members finished: records, lineages, heartbeats, ranks."""

    @property
    def best(self) -> Optional[Winner]:
        """The best-ranked member, its objective and a checkpoint of its weights (None: no objective yet)."""
        return find_winner(self.snapshot)

    def table(self) -> List[Dict[str, Any]]:
        """One row per member, best first: rank, policy_idx, objective, frames, given (times other
        members took its weights), taken (times it took a leader's), params (its hyperparameters)."""
        given = donations(self.snapshot)
        rows = []
        for view in self.snapshot.members:
            rows.append(
                {
                    "rank": view.rank,
                    "policy_idx": view.policy_idx,
                    "objective": view.objective,
                    "frames": view.frame,
                    "given": given.get(view.policy_idx, 0),
                    "taken": sum(1 for entry in view.lineage if entry.action == "replace"),
                    "params": dict(view.record.params) if view.record is not None else {},
                }
            )
        return sorted(rows, key=lambda r: (r["rank"] is None, r["rank"] or 0, r["policy_idx"]))


def run_population(
    name: str,
    task: str = "Pendulum",
    num_policies: int = 4,
    overrides: Sequence[str] = (),
    member_overrides: Optional[MemberOverrides] = None,
    train_dir: str = "runs",
    launcher_options: Sequence[str] = ("--progress=off",),
) -> PopulationResult:
    """Train a PBT population of ``num_policies`` members on ``task`` and return its outcome.

    Args:
        name: the run's name; its directory is ``<train_dir>/<name>``.
        task: a built-in task, ``module:Class`` or an ``isaacgym/``/``isaaclab/`` task (as ``task=``).
        overrides: Hydra ``key=value`` overrides shared by every member (``pbt.*``, ``train.*``, ...).
        member_overrides: what differs between members; default: the seed (``1000 + policy_idx``).
        launcher_options: extra ``pbt-launch`` options (``--max_parallel=2``, ``--num_gpus=2``, ...).

    Raises:
        PbtError: bad input (an unknown key fails in the members and gives a non-zero ``exit_code``).
    """
    cmd = " ".join(
        ["python -m pbt.train", f"task={task}", "pbt=pbt_default", f"pbt.num_policies={num_policies}", *overrides]
    )
    rows = []
    for idx in range(num_policies):
        row = {"pbt.policy_idx": idx, "seed": 1000 + idx}
        row.update(member_overrides(idx) if member_overrides is not None else {})
        rows.append(row)
    description = RunDescription(name, experiments=[Experiment("population", cmd, ParamList(rows))])
    args = launcher_argparser().parse_args(["--run=<python>", f"--train_dir={train_dir}", *launcher_options])
    configure_logging(args.log_level)
    code = launch_description(description, args)
    members = description.members(train_dir, python=sys.executable)
    workspace = Path(populations(members)[0].workspace)
    return PopulationResult(code, workspace, read_snapshot(workspace))
