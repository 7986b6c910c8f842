"""The guard on reward-shaping mutation (DexPBT: "If the reward is used as a target objective, PBT
obviously can't be allowed to modify the reward shaping coefficient").

A task declares which of its config keys shape its reward (:class:`RewardShaping`, built by
:func:`pbt.tasks.registry.reward_shaping`). When the mutation scheme or the search space touches one
of them while members are ranked by the shaped episode return (``pbt.objective=episode_return``, or
``true_objective`` on a task that does not report one, which falls back to the return), a member
could win by changing its own reward rather than by solving the task; :func:`check_reward_shaping`
refuses that start-up unless ``pbt.allow_reward_shaping_mutation=true`` accepts the risk.

Pure, standard library only (Python 3.8).
"""

import fnmatch
import logging
from dataclasses import dataclass
from typing import Iterable, List, Optional, Tuple

from pbt.errors import ConfigError
from pbt.mutation.explore import ExploreConfig

EPISODE_RETURN = "episode_return"
TRUE_OBJECTIVE = "true_objective"
ALLOW_KEY = "pbt.allow_reward_shaping_mutation"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewardShaping:
    """What a task says about its reward."""

    task: str
    """The task's name, for messages."""
    keys: Tuple[str, ...] = ()
    """Full config keys that shape the reward (``task.env.actionCost``), or shell-style patterns of
    them (``task.env.rewards.*.weight``); matched case-insensitively."""
    reports_true_objective: bool = False
    """Whether the task puts ``true_objective`` in its extras (else ``pbt.objective=true_objective``
    falls back to the episode return)."""

    def shapes(self, key: str) -> bool:
        """True when ``key`` is one of the declared reward-shaping keys."""
        low = key.lower()
        return any(fnmatch.fnmatchcase(low, pattern.lower()) for pattern in self.keys)


def shaped_objective(objective: str, shaping: RewardShaping) -> Optional[str]:
    """Why ``objective`` is the shaped episode return, or None when it is something else."""
    if objective == EPISODE_RETURN:
        return f"pbt.objective={EPISODE_RETURN} is the episode return of the shaped reward"
    if objective == TRUE_OBJECTIVE and not shaping.reports_true_objective:
        return (
            f"pbt.objective={TRUE_OBJECTIVE}, which task {shaping.task} does not report, falls back to the "
            "episode return of the shaped reward"
        )
    return None


def check_reward_shaping(touched: Iterable[str], objective: str, shaping: RewardShaping, allow: bool) -> List[str]:
    """The reward-shaping keys among ``touched`` (the scheme's and the search space's keys).

    ConfigError when there are any, ``objective`` is the shaped return and ``allow`` is False,
    saying why and how to go on."""
    keys = sorted(k for k in set(touched) if shaping.shapes(k))
    why = shaped_objective(objective, shaping)
    if not keys or why is None or allow:
        return keys
    if shaping.reports_true_objective:
        own = f"pbt.objective={TRUE_OBJECTIVE} (task {shaping.task} reports its own objective)"
    else:
        own = (
            f"a task objective: task {shaping.task} reports no true_objective; add "
            f"extras['{TRUE_OBJECTIVE}'] to its step and declare reports_true_objective = True"
        )
    raise ConfigError(
        f"PBT would mutate reward-shaping key(s) {', '.join(keys)} of task {shaping.task} while ranking members "
        f"by the reward they shape: {why}. A member could then win by changing its own reward (e.g. a lower "
        "penalty) instead of solving the task better (DexPBT: do not mutate reward-shaping coefficients while "
        f"ranking by the shaped reward). Rank by {own}; or by a key the env reports "
        f"(pbt.objective=episode.<key>); or take the key(s) out of the mutation scheme and search space; or "
        f"accept the risk with {ALLOW_KEY}=true."
    )


def guard_reward_shaping(explore: ExploreConfig, objective: str, shaping: RewardShaping, allow: bool) -> None:
    """:func:`check_reward_shaping` on the scheme's and the search space's keys at a member's start-up:
    refuses, or logs the reward-shaping keys it mutates (a warning when the risk was accepted with
    ``pbt.allow_reward_shaping_mutation=true``)."""
    keys = check_reward_shaping(list(explore.mutation) + list(explore.search_space.dims), objective, shaping, allow)
    if not keys:
        return
    why = shaped_objective(objective, shaping)
    if why is not None:
        log.warning(
            "PBT mutates reward-shaping key(s) %s while %s (accepted: %s=true)", ", ".join(keys), why, ALLOW_KEY
        )
    else:
        log.info(
            "PBT mutates reward-shaping key(s) %s of task %s; members are ranked by pbt.objective=%s, "
            "which they do not shape",
            ", ".join(keys),
            shaping.task,
            objective,
        )
