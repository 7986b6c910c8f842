"""The PBT objective of a member, gathered from the env's infos each step (no torch import).

``objective`` names a trainer statistic (:data:`TRAINER_STATISTICS`: ``episode_return``,
``episode_length``) or a dotted key into the infos dict (``true_objective``, ``episode.success``:
a scalar the env reports under ``infos["episode"]``, Isaac Lab style). Either is tracked the same way:

* a per-env vector: the entries of envs that just finished an episode are that episode's objective
  (IsaacGymEnvs' ``true_objective`` convention). The objective is the mean over envs of each env's
  last finished episode, known once every env finished one episode (DexPBT's rule);
* a scalar: a population statistic the env computed itself; its latest value is the objective.

When the env never reports the key, the objective falls back to the mean episode reward over the
last ``games_to_track`` episodes (rl_games' ``game_rewards``).

Which episodes count: tasks start each env's first episode at a random step (desynchronised
resets), so an env's first episode in a process is partial and never counts. After new weights in
the running agent (a donor's, a rollback, a network change) the objective is measured anew from the
episodes that finish from then on (they ran partly on the new weights; the share grows with every
episode, and after one episode per env none of the old weights' steps are left). A change of
learning hyperparameters alone keeps the episodes: the policy they measure did not change.

When it is known: once at least half of the envs (``ceil(num_envs / 2)``) have a counted episode, the
objective is the mean over those envs of each one's last counted episode (every env once all of
them have one). After an in-place change that takes about half an episode length; after a start or
an exec restart, when first episodes are partial, about one and a half. So a member's objective is
known again within one PBT interval of a change whenever the interval holds that many steps (the
built-in tasks at their defaults: 200-500 step episodes, 1e7-frame intervals, thousands of steps).
While it still includes an episode begun on the old weights it is ``mixed``: the member's record
carries it, but its objective history does not (peers compare at equal experience on the history).

Whether it shows the last change (:attr:`ObjectiveTracker.effect_pending`): after any change (new
weights, or learning hyperparameters alone) once every env has finished an episode since; about half
of the objective's steps then ran after the change, where right after a mutation none did. A member
does not mutate again before that (``pbt.wait_for_effect``), so it is not judged on its former setting.
"""

import math
from collections import deque
from typing import AbstractSet, Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

#: How many recent per-episode objectives a member keeps for its record.
EPISODE_HISTORY = 256

#: Names ``pbt.objective`` may give besides the env's info keys: what rl_games' ``game_rewards`` and
#: ``game_lengths`` meters average, taken per finished episode (the worker adds them to the infos).
TRAINER_STATISTICS: Dict[str, str] = {
    "episode_return": "mean episode return (undiscounted, unshaped reward sum: rl_games' game_rewards)",
    "episode_length": "mean episode length in env steps (rl_games' game_lengths)",
}


def objective_choices(info_keys: Sequence[str]) -> str:
    """What ``pbt.objective`` may name, for error messages: the trainer statistics, then the env's keys."""
    stats = "; ".join(f"{name}: {what}" for name, what in TRAINER_STATISTICS.items())
    env = [key for key in info_keys if key not in TRAINER_STATISTICS]
    return (
        f"trainer statistics: {stats}. Env info keys (dotted for nested dicts, e.g. episode.<key>): "
        f"{', '.join(env) or 'none reported'}"
    )


def lookup(infos: Any, dotted_key: str) -> Any:
    """``infos['a']['b']`` for ``'a.b'``; a key that itself contains dots is tried whole first."""
    if not isinstance(infos, Mapping):
        return None
    if dotted_key in infos:
        return infos[dotted_key]
    head, sep, rest = dotted_key.partition(".")
    if sep and head in infos:
        return lookup(infos[head], rest)
    return None


def _size(value: Any) -> int:
    if hasattr(value, "numel"):  # torch
        return int(value.numel())
    if hasattr(value, "size") and not callable(value.size):  # numpy
        return int(value.size)
    if isinstance(value, (list, tuple)):
        return len(value)
    return 1


def _take(value: Any, indices: Sequence[int]) -> Optional[List[float]]:
    """``[value[i] for i in indices]`` as floats, converting only those entries."""
    if not indices:
        return []
    if hasattr(value, "detach"):  # torch: one gather, one transfer
        flat = value.detach().reshape(-1)
        picked = flat[flat.new_tensor(indices, dtype=__import__("torch").long)]
        return [float(v) for v in picked.float().cpu().tolist()]
    values = as_floats(value)
    return None if values is None else [values[i] for i in indices]


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "detach") and hasattr(value, "device")


def _same_device(tensors: List[Any]) -> List[Any]:
    """``tensors`` on the first one's device (moved only where they are not)."""
    device = tensors[0].device if tensors else None
    return [t if t.device == device else t.to(device) for t in tensors]


#: Steps kept on the device before they are copied over anyway (bounds memory when nobody reads).
MAX_PENDING_STEPS = 1024


def as_floats(value: Any) -> Optional[List[float]]:
    """A per-env value (torch tensor, numpy array, list or scalar) as a flat list of floats; None otherwise."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().float().cpu().reshape(-1).tolist()
    elif hasattr(value, "tolist"):  # numpy
        value = value.reshape(-1).tolist() if hasattr(value, "reshape") else value.tolist()
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, (list, tuple)):
        return [float(v) for v in value]
    return None


class ObjectiveTracker:
    """Tracks one member's objective from the infos of every step.

    With torch tensors (the done indices rl_games found and the env's values, on the GPU in Isaac
    Gym or Isaac Lab) a step only gathers the finished envs' entries on their device and keeps them:
    no host synchronisation per step. They are copied over in one transfer when anything is read
    (:attr:`value`, :attr:`ready`, :attr:`recent`, :attr:`mixed`: once per epoch) or after
    ``MAX_PENDING_STEPS``. Lists and numpy arrays are taken at once."""

    def __init__(self, key: str, num_envs: int) -> None:
        self.key = key
        self.num_envs = num_envs
        self.needed = (num_envs + 1) // 2
        """Envs with a counted episode before the objective is known (see the module docstring)."""
        self.seen = False
        self.seen_keys: List[str] = []
        self.episodes = [0] * num_envs
        """Episodes each env finished in this process (its first is partial)."""
        self.envs_done_twice = 0
        #: Steps not yet copied from the device: (done indices, gathered values or None, scalar?).
        self._pending: List[Any] = []
        self._forget()
        self.after_change = False
        """Whether the weights changed in this process (see :attr:`mixed`)."""
        self.unfinished_since_change = [False] * num_envs
        """Envs that have not finished an episode since the last change (see :attr:`effect_pending`)."""
        self.num_unfinished = 0

    def reset(self) -> None:
        """New weights in the running agent: forget the objective measured so far; episodes that
        finish from now on count (an env's first, partial episode still never does)."""
        self._flush()  # the pending steps ran on the old weights: counted, then forgotten
        self._forget()
        self.after_change = True
        self._mark_change()

    def note_change(self) -> None:
        """New learning hyperparameters, same weights: the objective is kept, but it shows the change
        only once every env has finished an episode since (:attr:`effect_pending`)."""
        self._flush()  # the pending steps ran before the change
        self._mark_change()

    def _mark_change(self) -> None:
        self.unfinished_since_change = [True] * self.num_envs
        self.num_unfinished = self.num_envs

    @property
    def effect_pending(self) -> Optional[Tuple[int, int]]:
        """(envs that finished an episode since the last change, all envs) while some have not;
        None once every env has, or when nothing changed in this process."""
        self._flush()
        if not self.num_unfinished:
            return None
        return self.num_envs - self.num_unfinished, self.num_envs

    def _forget(self) -> None:
        self.last_per_env: List[float] = [math.nan] * self.num_envs
        self.counted = [False] * self.num_envs
        self.num_counted = 0
        self.valued = [False] * self.num_envs
        self.num_valued = 0
        self.scalar: Optional[float] = None
        self._recent: Deque[float] = deque(maxlen=EPISODE_HISTORY)
        self.since_reset = [0] * self.num_envs

    @property
    def mixed(self) -> bool:
        """True while the objective includes an episode that began before the last change of
        weights (an env's first counted episode since then): known, but not the new weights' alone."""
        self._flush()
        return self.after_change and any(v and n < 2 for v, n in zip(self.valued, self.since_reset))

    @property
    def settled(self) -> bool:
        """True once every env finished two episodes in this process: whether the task reports
        the key is then plain."""
        self._flush()
        return self.envs_done_twice >= self.num_envs

    @property
    def ready(self) -> bool:
        """True once enough envs have a counted episode (see the module docstring)."""
        self._flush()
        return self.num_counted >= self.needed

    @property
    def recent(self) -> Deque[float]:
        """The latest per-episode objectives, oldest first."""
        self._flush()
        return self._recent

    def update(self, infos: Any, done_indices: Any) -> None:
        """Feed one step's infos and the indices of the envs whose episode just ended (a sequence of
        ints, or a torch tensor of them: then nothing is copied to the host now)."""
        value = lookup(infos, self.key)
        if value is None and not self.seen_keys and isinstance(infos, Mapping):
            self.seen_keys = sorted(str(k) for k in infos)
        if value is not None:
            self.seen = True
        if _is_tensor(done_indices) and (value is None or self._keeps_on_device(value)):
            self._defer(done_indices.detach().reshape(-1), value)
            return
        self._flush()  # in order: what is pending happened before this step
        if _is_tensor(done_indices):
            done_indices = [int(i) for i in done_indices.reshape(-1).tolist()]
        counted = self._count_episodes(done_indices)
        if value is None:
            return
        if _size(value) == 1 and self.num_envs != 1:
            self._record_scalar(as_floats(value))
            return
        # Only the entries of counted episodes matter: convert those, not all num_envs.
        done = [i for i in counted if i < _size(value)]
        self._record(done, _take(value, done), set(done))

    def _keeps_on_device(self, value: Any) -> bool:
        """A tensor the step can gather from without a check on the host: a scalar, or one entry per env."""
        return _is_tensor(value) and (_size(value) == 1 or _size(value) >= self.num_envs)

    def _defer(self, done: Any, value: Any) -> None:
        if value is None:
            self._pending.append((done, None, False))
        elif _size(value) == 1 and self.num_envs != 1:
            self._pending.append((done, value.detach().reshape(-1).clone(), True))
        else:
            flat = value.detach().reshape(-1)
            index = done if done.device == flat.device else done.to(flat.device, non_blocking=True)
            # A gather (a copy: the env may overwrite its buffer next step), queued on the device.
            self._pending.append((done, flat[index], False))
        if len(self._pending) >= MAX_PENDING_STEPS:
            self._flush()

    def _flush(self) -> None:
        """Copy the pending steps over (one transfer for indices, one for values) and apply them."""
        if not self._pending:
            return
        import torch

        pending, self._pending = self._pending, []
        dones = _same_device([done.long() for done, _, _ in pending])
        values = _same_device([v.double() for _, v, _ in pending if v is not None])
        done_host = torch.cat(dones).tolist()  # concatenated on the device: one copy each
        value_host = torch.cat(values).tolist() if values else []
        at_done = at_value = 0
        for done, gathered, scalar in pending:
            indices = done_host[at_done : at_done + done.numel()]
            at_done += done.numel()
            counted = self._count_episodes(indices)
            if gathered is None:
                continue
            taken = value_host[at_value : at_value + gathered.numel()]
            at_value += gathered.numel()
            if scalar:
                self._record_scalar(taken)
            else:
                self._record(indices, taken, set(counted))

    def _count_episodes(self, done_indices: Sequence[int]) -> List[int]:
        """Count the finished episodes; return the envs whose episode counts (not its first)."""
        counted: List[int] = []
        for i in done_indices:
            if 0 <= i < self.num_envs:
                if self.unfinished_since_change[i]:
                    self.unfinished_since_change[i] = False
                    self.num_unfinished -= 1
                self.episodes[i] += 1
                self.since_reset[i] += 1
                if self.episodes[i] == 2:
                    self.envs_done_twice += 1
                if self.episodes[i] >= 2:
                    counted.append(i)
                    if not self.counted[i]:
                        self.counted[i] = True
                        self.num_counted += 1
        return counted

    def _record_scalar(self, values: Optional[List[float]]) -> None:
        if values:
            self.scalar = values[0]
            self._recent.append(values[0])

    def _record(self, done: Sequence[int], values: Optional[List[float]], counted: AbstractSet[int]) -> None:
        """The values of the envs in ``done`` (aligned), kept for those whose episode counts."""
        if values is None:
            return
        for i, v in zip(done, values):
            if i not in counted:
                continue
            self.last_per_env[i] = v
            self._recent.append(v)
            if not self.valued[i]:
                self.valued[i] = True
                self.num_valued += 1

    @property
    def value(self) -> Optional[float]:
        """The env-reported objective, or None while unknown (too few counted episodes)."""
        if not self.ready:
            return None
        if self.scalar is not None:
            return self.scalar
        if self.num_valued < self.needed:
            return None
        return math.fsum(v for v, known in zip(self.last_per_env, self.valued) if known) / self.num_valued


class MemberObjective:
    """What PBT ranks a member by: the task's ``key`` when it reports it, else each finished episode's
    return (``fallback_key``), tracked side by side until the task shows which it reports."""

    def __init__(self, key: str, fallback_key: str, num_envs: int) -> None:
        self.reported = ObjectiveTracker(key, num_envs)
        self.returns = ObjectiveTracker(fallback_key, num_envs)

    def update(self, infos: Any, done_indices: Any) -> None:
        self.reported.update(infos, done_indices)
        self.returns.update(infos, done_indices)

    @property
    def scoring(self) -> ObjectiveTracker:
        """The tracker PBT ranks by."""
        return self.reported if self.reported.seen else self.returns

    @property
    def value(self) -> Optional[float]:
        """The objective over each env's last counted episode (None while too few envs have one)."""
        return self.scoring.value

    @property
    def recent(self) -> List[float]:
        """The latest per-episode objectives (published with a member's record)."""
        return list(self.scoring.recent)

    @property
    def mixed(self) -> bool:
        """The objective still includes episodes begun before the last change of weights."""
        return self.scoring.mixed

    @property
    def effect_pending(self) -> Optional[Tuple[int, int]]:
        """Whether the objective does not show the last change yet (:attr:`ObjectiveTracker.effect_pending`)."""
        return self.scoring.effect_pending

    def note_change(self) -> None:
        """New learning hyperparameters in the running agent (the weights stay)."""
        self.reported.note_change()
        self.returns.note_change()

    def reset(self) -> None:
        """New weights in the running agent: measure the objective anew (which key the task
        reports, and each env's count of episodes, stay)."""
        self.reported.reset()
        self.returns.reset()
