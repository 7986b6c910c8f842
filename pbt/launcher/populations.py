"""The PBT populations of a run, as the launcher sees them: which members share which workspace.

Read from the members' commands only (no files): ``launcher.progress`` and ``launcher.summary`` read
each population's workspace through :mod:`pbt.tools.snapshot`, which never writes to it.
"""

import os
import shlex
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from pbt.launcher.run_description import POLICY_IDX_KEY, WORKSPACE_KEY, Member
from pbt.restart import split_override_key
from pbt.storage.s3_client import is_s3_url

MAX_FRAMES_KEY = "max_frames"
TASK_KEY = "task"

# Overrides of a member's command that say nothing about how to rebuild its policy for pbt.play.
_NOT_FOR_PLAY = ("train_dir", "experiment", "max_frames", "seed", "checkpoint")


def overrides(argv: Sequence[str]) -> Dict[str, str]:
    """``key -> value`` of the Hydra ``key=value`` overrides in ``argv`` (the last one wins)."""
    found: Dict[str, str] = {}
    for token in argv:
        if "=" not in token or token.startswith("-"):
            continue
        key = split_override_key(token)[1]
        if key:
            found[key] = token.split("=", 1)[1]
    return found


def _int_or_none(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


@dataclass
class Population:
    """One PBT experiment of a run: its workspace and its members by policy index."""

    experiment: str
    workspace: str
    members: Dict[int, Member]

    @property
    def experiment_dir(self) -> str:
        return next(iter(self.members.values())).experiment_dir

    def max_frames(self, policy_idx: int) -> Optional[int]:
        """The member's ``max_frames=`` override; None when its command does not set it."""
        member = self.members.get(policy_idx)
        return None if member is None else _int_or_none(overrides(member.argv).get(MAX_FRAMES_KEY))

    def play_command(
        self, checkpoint: str, policy_idx: int, episodes: int = 100, training_keys: Sequence[str] = ()
    ) -> str:
        """``pbt-play checkpoint=... <the member's task and network overrides> episodes=K``.

        ``training_keys``: keys PBT tunes (a record's params), which say nothing about the policy."""
        member = self.members.get(policy_idx) or next(iter(self.members.values()))
        kept = []
        for token in member.argv:
            if "=" not in token or token.startswith("-"):
                continue
            key = split_override_key(token)[1]
            if (
                key == "pbt"
                or key.startswith("pbt.")
                or key.startswith("hydra")
                or key in _NOT_FOR_PLAY
                or key in training_keys
            ):
                continue
            kept.append(token)
        words = ["pbt-play", f"checkpoint={checkpoint}"] + kept + [f"episodes={episodes}"]
        return " ".join(shlex.quote(w) for w in words)


def populations(members: Sequence[Member]) -> List[Population]:
    """The PBT populations among ``members``, in order of first appearance.

    A member belongs to a population when the launcher gave it a workspace, or its command sets
    ``pbt.workspace=`` itself (a relative path is taken from the launcher's working directory).
    """
    found: Dict[str, Population] = {}
    for member in members:
        values = overrides(member.argv)
        workspace = member.workspace or values.get(WORKSPACE_KEY)
        if not workspace:
            continue
        workspace = workspace if is_s3_url(workspace) else os.path.abspath(workspace)  # a URL is absolute
        idx = _int_or_none(values.get(POLICY_IDX_KEY))
        population = found.setdefault(workspace, Population(member.experiment, workspace, {}))
        population.members[member.index if idx is None else idx] = member
    return list(found.values())
