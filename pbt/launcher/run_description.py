"""Declarative experiment definitions: ``ParamGrid`` -> ``Experiment`` -> ``RunDescription`` -> members.

An experiment module (see ``experiments/``) defines ``RUN_DESCRIPTION``::

    RUN_DESCRIPTION = RunDescription(
        "pendulum_pbt",
        experiments=[
            Experiment(
                "pendulum",
                "python -m pbt.train task=Pendulum pbt=pbt_default",
                ParamGrid([("pbt.policy_idx", range(8))]),
            )
        ],
    )

``RunDescription.members(train_dir)`` turns it into one ``Member`` per process: its exact argv
(Hydra ``key=value`` overrides), its log file, and the directories it uses::

    <train_dir>/<run_name>/<experiment>/workspace/            shared PBT workspace (pbt.workspace=)
    <train_dir>/<run_name>/<experiment>/<experiment>_NN.../    the member's run dir (train_dir=, experiment=)
    <train_dir>/<run_name>/<experiment>/logs/<member>.log     the member's stdout and stderr

This module is pure (no processes, no files): it is what ``tests/launcher/test_launcher_grid.py`` tests.
Override values are written by :func:`pbt.restart.format_value`, as a restart writes them.
"""

import itertools
import os
import random
import re
import shlex
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

from pbt.config import ELASTIC
from pbt.errors import ConfigError
from pbt.restart import format_override, format_value, split_override_key

# Keys the launcher manages for every member (unless the command or the grid already sets them).
WORKSPACE_KEY = "pbt.workspace"
TRAIN_DIR_KEY = "train_dir"
EXPERIMENT_KEY = "experiment"
POLICY_IDX_KEY = "pbt.policy_idx"
NUM_POLICIES_KEY = "pbt.num_policies"
SEED_KEY = "seed"

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PYTHON_NAMES = ("python", "python3")

GridKey = Union[str, Tuple[str, ...]]


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise ConfigError(
            f"{what} {name!r} is not a valid name: it becomes a directory name, so use letters, "
            f"digits, '.', '_' and '-' only (starting with a letter or digit), e.g. 'pendulum_pbt'."
        )


def _override_key(token: str) -> Optional[str]:
    """The key of a ``key=value`` override token (``+key=``/``++key=``/``~key`` prefixes dropped)."""
    if "=" not in token or token.startswith("-"):
        return None
    return split_override_key(token)[1] or None


class ParamGenerator:
    """Something that yields parameter dicts, one per member."""

    def generate_params(self, randomize: bool = False, seed: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        raise NotImplementedError


class ParamList(ParamGenerator):
    """An explicit list of parameter dicts: ``ParamList([{"lr": 1e-3}, {"lr": 3e-4, "gamma": 0.98}])``."""

    def __init__(self, combinations: Iterable[Dict[str, Any]]) -> None:
        self.combinations: List[Dict[str, Any]] = [dict(c) for c in combinations]
        for combination in self.combinations:
            for key in combination:
                if not isinstance(key, str) or not key:
                    raise ConfigError(
                        f"ParamList key {key!r} is not a non-empty string; use dotted config keys like 'pbt.policy_idx'."
                    )

    def generate_params(self, randomize: bool = False, seed: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        combinations = list(self.combinations)
        if randomize:
            random.Random(seed).shuffle(combinations)
        for combination in combinations:
            yield dict(combination)

    def __len__(self) -> int:
        return len(self.combinations)


class ParamGrid(ParamGenerator):
    """The cartesian product of parameter values, in order (the first entry varies slowest).

    Each entry is ``(key, values)``, or ``((key_a, key_b, ...), [(a1, b1, ...), (a2, b2, ...)])`` to tie
    several keys together (they vary as one axis of the grid)::

        ParamGrid([("pbt.policy_idx", range(8))])                         # a population of 8
        ParamGrid([("seed", [1, 2]), ("train.params.config.gamma", [0.99, 0.995])])  # 4 members
        ParamGrid([(("pbt.policy_idx", "seed"), [(0, 10), (1, 11)])])     # 2 members, tied
    """

    def __init__(self, grid: Sequence[Tuple[GridKey, Iterable[Any]]]) -> None:
        self.axes: List[Tuple[Tuple[str, ...], List[Tuple[Any, ...]]]] = []
        seen: Dict[str, int] = {}
        for position, entry in enumerate(grid):
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ConfigError(
                    f"ParamGrid entry #{position} is {entry!r}; each entry must be a pair (key, values) "
                    f"or ((key_a, key_b), [(a, b), ...]) for tied keys."
                )
            key, values = entry
            tied = isinstance(key, (tuple, list))
            keys: Tuple[str, ...] = tuple(key) if isinstance(key, (tuple, list)) else (key,)
            if not keys or not all(isinstance(k, str) and k for k in keys):
                raise ConfigError(
                    f"ParamGrid entry #{position} has key {key!r}; keys must be non-empty strings like 'pbt.policy_idx'."
                )
            for k in keys:
                if k in seen:
                    raise ConfigError(
                        f"ParamGrid key {k!r} appears in entries #{seen[k]} and #{position}; give each key "
                        f"once (tie keys that must change together: (('a', 'b'), [(1, 2), (3, 4)]))."
                    )
                seen[k] = position
            if isinstance(values, (str, bytes)):
                raise ConfigError(
                    f"ParamGrid values for {key!r} are the string {values!r}; pass a list of values, e.g. [{values!r}]."
                )
            try:
                value_list = list(values)
            except TypeError:
                raise ConfigError(
                    f"ParamGrid values for {key!r} are {values!r}, which is not a list or range; pass e.g. [1, 2] or range(8)."
                ) from None
            if not value_list:
                raise ConfigError(
                    f"ParamGrid values for {key!r} are empty, so the grid has no members; give at least one value."
                )
            rows: List[Tuple[Any, ...]] = []
            for value in value_list:
                if tied:
                    if not isinstance(value, (tuple, list)) or len(value) != len(keys):
                        raise ConfigError(
                            f"ParamGrid tied keys {keys} need values that are tuples of {len(keys)} items; got {value!r}."
                        )
                    rows.append(tuple(value))
                else:
                    rows.append((value,))
            self.axes.append((keys, rows))

    def __len__(self) -> int:
        size = 1
        for _, rows in self.axes:
            size *= len(rows)
        return size if self.axes else 0

    @property
    def keys(self) -> List[str]:
        return [k for keys, _ in self.axes for k in keys]

    def generate_params(self, randomize: bool = False, seed: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        combos = list(itertools.product(*[rows for _, rows in self.axes])) if self.axes else []
        if randomize:
            random.Random(seed).shuffle(combos)
        for combo in combos:
            params: Dict[str, Any] = {}
            for (keys, _), row in zip(self.axes, combo):
                params.update(zip(keys, row))
            yield params


class Experiment:
    """One command line run once per parameter combination; for PBT, one population.

    Args:
        name: directory name of the experiment (and prefix of its members' names).
        cmd: the base command, e.g. ``"python -m pbt.train task=Pendulum pbt=pbt_default"``.
            A leading ``python``/``python3`` is replaced by the launcher's own interpreter.
        param_generator: a ``ParamGrid``/``ParamList``, or an iterable of parameter dicts
            (e.g. ``grid.generate_params()``). Empty: a single member running ``cmd`` as is.
        env_vars: extra environment variables for every member.
        pbt: whether the launcher adds ``pbt.workspace=`` (and ``pbt.num_policies=``) to each member;
            None (default): when the command or the grid mentions ``pbt``.
    """

    def __init__(
        self,
        name: str,
        cmd: str,
        param_generator: Union[ParamGenerator, Iterable[Dict[str, Any]], None] = None,
        env_vars: Optional[Dict[str, str]] = None,
        pbt: Optional[bool] = None,
    ) -> None:
        _check_name("Experiment name", name)
        if not isinstance(cmd, str) or not cmd.strip():
            raise ConfigError(
                f"Experiment {name!r} has an empty command; give the worker command, e.g. 'python -m pbt.train task=Pendulum'."
            )
        try:
            self.base_argv: List[str] = shlex.split(cmd)
        except ValueError as exc:
            raise ConfigError(f"Experiment {name!r}: cannot split command {cmd!r} ({exc}); check its quotes.") from None
        self.name = name
        self.cmd = cmd
        if param_generator is None:
            self.params: List[Dict[str, Any]] = [{}]
        elif isinstance(param_generator, ParamGenerator):
            self.params = list(param_generator.generate_params(randomize=False))
        else:
            self.params = [dict(p) for p in param_generator]
        if not self.params:
            raise ConfigError(f"Experiment {name!r} has no parameter combinations; check its ParamGrid.")
        self.env_vars: Dict[str, str] = {str(k): str(v) for k, v in (env_vars or {}).items()}
        self.pbt = pbt

    def __repr__(self) -> str:
        return f"Experiment({self.name!r}, {self.cmd!r}, {len(self.params)} members)"

    def is_pbt(self) -> bool:
        if self.pbt is not None:
            return self.pbt
        keys = [_override_key(t) for t in self.base_argv] + [k for p in self.params for k in p]
        return any(k is not None and (k == "pbt" or k.startswith("pbt.")) for k in keys)


@dataclass(repr=False, eq=False)
class Member:
    """One process of a run: its exact command, environment, directories and log file."""

    experiment: str
    index: int
    name: str
    params: Dict[str, Any]
    argv: List[str]
    env: Dict[str, str]
    experiment_dir: str
    workspace: Optional[str]
    log_path: str

    @property
    def cmd(self) -> str:
        """The command as one shell-quoted line (what is printed and written to Slurm's commands file)."""
        return " ".join(shlex.quote(a) for a in self.argv)

    @property
    def shell_cmd(self) -> str:
        """``cmd`` with the member's extra environment variables in front (``env K=V ...``)."""
        if not self.env:
            return self.cmd
        prefix = ["env"] + [f"{k}={v}" for k, v in sorted(self.env.items())]
        return " ".join(shlex.quote(a) for a in prefix) + " " + self.cmd

    def to_dict(self) -> Dict[str, Any]:
        return {
            "experiment": self.experiment,
            "index": self.index,
            "name": self.name,
            "params": {k: format_value(v) for k, v in self.params.items()},
            "argv": list(self.argv),
            "env": dict(self.env),
            "experiment_dir": self.experiment_dir,
            "workspace": self.workspace,
            "log_path": self.log_path,
        }

    def __repr__(self) -> str:
        return f"Member({self.name!r}, {self.cmd!r})"


class RunDescription:
    """A named set of experiments launched together: ``RunDescription(run_name, experiments=[...])``."""

    def __init__(self, run_name: str, experiments: Sequence[Experiment]) -> None:
        _check_name("Run name", run_name)
        experiments = list(experiments)
        if not experiments:
            raise ConfigError(f"RunDescription {run_name!r} has no experiments; pass experiments=[Experiment(...)].")
        names = [e.name for e in experiments]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(
                f"RunDescription {run_name!r} has several experiments named {duplicates}; experiment names must be unique."
            )
        self.run_name = run_name
        self.experiments = experiments

    def run_dir(self, train_dir: str) -> str:
        return os.path.join(os.path.abspath(train_dir), self.run_name)

    def members(self, train_dir: str, python: Optional[str] = sys.executable) -> List[Member]:
        """Every member of every experiment, in order.

        Args:
            train_dir: root directory of all runs; made absolute (members may run in another cwd).
            python: interpreter that replaces a leading ``python``/``python3`` in the commands
                (None: keep the command as written).
        """
        run_dir = self.run_dir(train_dir)
        members: List[Member] = []
        for experiment in self.experiments:
            members.extend(_experiment_members(experiment, run_dir, python))
        return members


def _experiment_members(experiment: Experiment, run_dir: str, python: Optional[str]) -> List[Member]:
    exp_dir = os.path.join(run_dir, experiment.name)
    base = list(experiment.base_argv)
    if python and base and base[0] in _PYTHON_NAMES:
        base[0] = python
    base_keys = {k for k in (_override_key(t) for t in base) if k}
    is_pbt = experiment.is_pbt()
    workspace = os.path.join(exp_dir, "workspace") if is_pbt else None
    if is_pbt:
        _check_population(experiment, base_keys)
    count = len(experiment.params)
    members: List[Member] = []
    for index, params in enumerate(experiment.params):
        name = f"{experiment.name}_{index:02d}"
        keys = base_keys | set(params)
        # Overrides the grid sets replace the same keys in the base command.
        argv = [t for t in base if _override_key(t) not in params]
        # The same formatter as a restart (pbt.restart), so both write a value as the same text.
        argv += [format_override(k, v) for k, v in params.items()]
        managed: List[Tuple[str, Any]] = [(TRAIN_DIR_KEY, exp_dir), (EXPERIMENT_KEY, name)]
        if is_pbt:
            managed.append((WORKSPACE_KEY, workspace or ""))
            managed.append((NUM_POLICIES_KEY, count))
        argv += [format_override(k, v) for k, v in managed if k not in keys]
        for token in argv:
            if "\n" in token or "\r" in token:
                raise ConfigError(
                    f"Experiment {experiment.name!r}: argument {token!r} contains a newline; remove it (commands are stored one per line)."
                )
        members.append(
            Member(
                experiment=experiment.name,
                index=index,
                name=name,
                params=dict(params),
                argv=argv,
                env=dict(experiment.env_vars),
                experiment_dir=exp_dir,
                workspace=workspace if WORKSPACE_KEY not in keys else None,
                log_path=os.path.join(exp_dir, "logs", f"{name}.log"),
            )
        )
    return members


def _check_population(experiment: Experiment, base_keys: Set[str]) -> None:
    """A PBT experiment is one population: policy_idx 0..N-1, each once, N == pbt.num_policies."""
    if POLICY_IDX_KEY in base_keys:
        if len(experiment.params) > 1:
            raise ConfigError(
                f"Experiment {experiment.name!r} fixes {POLICY_IDX_KEY} in its command but has {len(experiment.params)} "
                f"members; vary it in the grid instead: ParamGrid([('{POLICY_IDX_KEY}', range(N))])."
            )
        return
    indices = [p.get(POLICY_IDX_KEY) for p in experiment.params]
    if any(i is None for i in indices):
        if len(experiment.params) > 1:
            raise ConfigError(
                f"Experiment {experiment.name!r} is a PBT experiment with {len(experiment.params)} members but not every "
                f"member sets {POLICY_IDX_KEY}; add ('{POLICY_IDX_KEY}', range(N)) to its ParamGrid."
            )
        return
    try:
        as_ints = sorted(int(i) for i in indices if i is not None)  # none is None (returned above)
    except (TypeError, ValueError):
        raise ConfigError(
            f"Experiment {experiment.name!r}: {POLICY_IDX_KEY} values {indices} must be integers."
        ) from None
    if as_ints != list(range(len(indices))):
        raise ConfigError(
            f"Experiment {experiment.name!r}: {POLICY_IDX_KEY} values {indices} must be 0..N-1, each once (one population "
            f"per Experiment). To run several populations, give each its own Experiment (its own workspace)."
        )
    declared = [p.get(NUM_POLICIES_KEY) for p in experiment.params if NUM_POLICIES_KEY in p]
    base_num = [t.split("=", 1)[1] for t in experiment.base_argv if _override_key(t) == NUM_POLICIES_KEY]
    for value in declared + base_num:
        if str(value) != str(len(indices)) and str(value) != ELASTIC:
            raise ConfigError(
                f"Experiment {experiment.name!r} sets {NUM_POLICIES_KEY}={value} but its grid starts {len(indices)} members; "
                f"make them equal (or drop {NUM_POLICIES_KEY}: the launcher sets it), or set it to {ELASTIC} for "
                "an elastic population."
            )


def is_elastic(member: Member) -> bool:
    """True when the member belongs to an elastic population (``pbt.num_policies=auto``)."""
    values = [t.split("=", 1)[1] for t in member.argv if _override_key(t) == NUM_POLICIES_KEY]
    return bool(values) and values[-1] == ELASTIC


def policy_index(member: Member) -> Optional[int]:
    """The member's ``pbt.policy_idx`` (None: its command does not set a whole number)."""
    values = [t.split("=", 1)[1] for t in member.argv if _override_key(t) == POLICY_IDX_KEY]
    try:
        return int(values[-1]) if values else None
    except ValueError:
        return None


def added_members(members: Sequence[Member], taken: Iterable[int], count: int) -> List[Member]:
    """``count`` new members of the elastic population ``members`` (one experiment's): copies of its
    member with the highest policy index, at the next indices above every index in ``taken`` and
    in ``members``; a ``seed=`` in the command moves by as much as the index. Pure."""
    if count < 1:
        raise ConfigError(f"--add={count}: give the number of members to add, >= 1.")
    indexed = [(policy_index(m), m) for m in members]
    if not members or any(i is None for i, _ in indexed) or not all(is_elastic(m) for m in members):
        name = members[0].experiment if members else "?"
        raise ConfigError(
            f"experiment {name!r} is not an elastic PBT population: --add needs every member's command to set "
            f"{POLICY_IDX_KEY} and {NUM_POLICIES_KEY}={ELASTIC} (add {NUM_POLICIES_KEY}={ELASTIC} to its command; "
            "a fixed-size population ranks exactly N members)."
        )
    known = [(i, m) for i, m in indexed if i is not None]  # all of them (checked above)
    top_idx, template = max(known, key=lambda pair: pair[0])
    start = max(set(taken) | {i for i, _ in known}) + 1
    added: List[Member] = []
    for idx in range(start, start + count):
        changes: Dict[str, Any] = {POLICY_IDX_KEY: idx, EXPERIMENT_KEY: f"{template.experiment}_{idx:02d}"}
        seed = [t.split("=", 1)[1] for t in template.argv if _override_key(t) == SEED_KEY]
        if seed and seed[-1].lstrip("-").isdigit():
            changes[SEED_KEY] = int(seed[-1]) + idx - top_idx
        argv = [
            format_override(_override_key(t) or "", changes[_override_key(t) or ""])
            if _override_key(t) in changes
            else t
            for t in template.argv
        ]
        params = {k: changes.get(k, v) for k, v in template.params.items()}
        name = changes[EXPERIMENT_KEY]
        added.append(
            Member(
                experiment=template.experiment,
                index=idx,
                name=name,
                params=params,
                argv=argv,
                env=dict(template.env),
                experiment_dir=template.experiment_dir,
                workspace=template.workspace,
                log_path=os.path.join(os.path.dirname(template.log_path), f"{name}.log"),
            )
        )
    return added
