"""The test tiers (markers described in pyproject.toml), kept honest by the test run itself:

- a test that starts a training program, an S3 server, a Slurm command or a filesystem mount as a
  process without its tier marker fails at that call, before anything starts, naming the marker;
  by default (the quick tier) every marked test is deselected, so the sessions' shared trainings
  (``trained_pendulum``, the observability population) start cold and an unmarked user is caught;
- ``core`` is applied here, never by hand: the test module imports nothing beyond the standard
  library, pytest, PyYAML and hypothesis (tests/import_needs.py), and the test is in no tier whose
  processes or servers need more; without torch (the Python 3.8 leg) only core modules are collected.
"""
import importlib.util
import multiprocessing.process
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set

import pytest

from import_needs import REPO, is_core

TIERS = ("training", "faults", "slurm", "s3", "isaaclab", "slow")
"""The markers the quick tier (pyproject's addopts ``-m``) leaves out; ``core`` only selects."""
TRAINING_MODULES = frozenset({"pbt.train", "pbt.play", "pbt.replay", "pbt.tools.play", "pbt.tools.replay",
                              "launcher.run", "pbt.launcher.run", "torch.distributed.run", "torch.distributed.launch"})
"""``python -m`` targets that train or play for real; launcher.run when its run description trains."""
PROGRAMS: Dict[str, str] = {
    **{name: "training" for name in ("pbt-train", "pbt-launch", "pbt-play", "pbt-replay", "torchrun")},
    "weed": "s3",
    **{name: "slurm" for name in ("sbatch", "srun", "salloc", "squeue", "scontrol", "sinfo", "scancel", "sacct",
                                  "slurmctld", "slurmd", "munged", "slurm_test_cluster.sh")},
    "mount": "faults", "umount": "faults",
}
"""Program (basename) -> the marker a test that starts it needs."""
WRAPPERS = frozenset({"timeout", "env", "nice", "setsid", "stdbuf", "bash", "sh", "exec", "sudo"})
"""Programs that run the program named after their options (``timeout 60 python -m ...``)."""
FIXTURE_TIERS = {"trained_pendulum": "training", "seaweed": "s3"}
"""Session fixtures that start a process once: every test using one needs its marker, also the
tests that get the cached value (they would start it when run alone)."""
NOT_CORE_TIERS = ("training", "s3", "slurm", "isaaclab")
"""Tiers whose processes or servers need torch, boto3, a cluster or Isaac Lab."""

_running: List[Optional[pytest.Item]] = []  # None while a test tears down
_originals: List[Any] = []  # Popen.__init__ and Process.start while patched
_configs: List[pytest.Config] = []  # nested sessions (pytester) patch once
_deselected: List[int] = [0]


def _commands(args: Any) -> Iterator[List[str]]:
    """The argv lists a Popen ``args`` runs: a sequence, or a shell line split at ``&& || ; |``."""
    if isinstance(args, (str, bytes, os.PathLike)):
        line = os.fsdecode(args)
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                argv = shlex.split(part)
            except ValueError:
                argv = part.split()
            if argv:
                yield argv
    elif isinstance(args, Sequence):
        yield [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]


_WRAPPER_OPTION = re.compile(r"-.*|[^=/]+=.*|[\d.]+[smhd]?")
"""An option, a VAR=value or a duration (timeout's) before the wrapped program."""


def _program(argv: List[str]) -> Optional[str]:
    """What ``argv`` runs, wrappers skipped: ``python -m <module>``, a script path or a program name."""
    i = 0
    while i < len(argv):
        name = os.path.basename(argv[i])
        if name in WRAPPERS:
            i += 1
            while i < len(argv) and _WRAPPER_OPTION.fullmatch(argv[i]):
                i += 1
            continue
        if re.fullmatch(r"python[\d.]*", name):
            rest = argv[i + 1:]
            while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
                rest = rest[1:]
            if len(rest) >= 2 and rest[0] == "-m":
                return f"-m {rest[1]}"
            return None if not rest or rest[0] == "-c" else os.path.basename(rest[0])
        return name
    return None


_TRAINING_TEXT = re.compile(r"\bpbt[.-](train|play|replay)\b|\bpbt-launch\b|\btorchrun\b")


def _run_description_trains(argv: List[str], cwd: Optional[str], env: Optional[Dict[str, str]]) -> bool:
    """Whether ``python -m launcher.run --run=X`` starts training: X's source names a training program
    (fake workers do not). A run description the launcher cannot find either starts nothing; one
    found but unreadable counts as training."""
    run = next((a.split("=", 1)[1] for a in argv if a.startswith("--run=")), None)
    if run is None and "--run" in argv[:-1]:
        run = argv[argv.index("--run") + 1]
    if run is None:
        return True
    base = Path(cwd or os.getcwd())
    if run.endswith(".py") or os.sep in run:
        candidates = [base / run]
    else:
        paths = (env if env is not None else os.environ).get("PYTHONPATH", "")
        folders = [Path(p) for p in paths.split(os.pathsep) if p] + [base, REPO]
        candidates = [folder / (run.replace(".", os.sep) + ".py") for folder in folders]
        try:  # an installed run description
            spec = importlib.util.find_spec(run)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            candidates.append(Path(spec.origin))
    for candidate in candidates:
        if candidate.is_file():
            try:
                return bool(_TRAINING_TEXT.search(candidate.read_text(errors="replace")))
            except OSError:
                return True
    return False


def required_markers(args: Any, cwd: Any = None, env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Marker -> what needs it, for the process ``subprocess.Popen(args, cwd=cwd, env=env)`` would start."""
    needed: Dict[str, str] = {}
    for argv in _commands(args):
        if len(argv) > 2 and os.path.basename(argv[0]) in ("bash", "sh") and argv[1] == "-c":
            for marker, what in required_markers(argv[2], cwd, env).items():
                needed.setdefault(marker, what)
            continue
        program = _program(argv)
        if program is None:
            continue
        if program in ("-m launcher.run", "-m pbt.launcher.run"):
            if _run_description_trains(argv, os.fsdecode(cwd) if cwd is not None else None, env):
                needed.setdefault("training", "`python -m launcher.run` on a run description that trains")
        elif program.startswith("-m "):
            if program[3:] in TRAINING_MODULES:
                needed.setdefault("training", f"`python {program}` (a training process)")
        elif program in PROGRAMS:
            needed.setdefault(PROGRAMS[program], f"`{program}`")
    return needed


def check(item: pytest.Item, needed: Dict[str, str]) -> None:
    """Fail the running test unless it carries every marker in ``needed``."""
    have = {mark.name for mark in item.iter_markers()}
    missing = {marker: what for marker, what in needed.items() if marker not in have}
    if missing:
        lines = [f"{item.nodeid} starts {what} without its tier marker: add @pytest.mark.{marker} to the test "
                 f"(or `pytestmark = pytest.mark.{marker}` to its module)" for marker, what in sorted(missing.items())]
        pytest.fail("\n".join(lines) + "\n(the tiers are described in pyproject.toml, [tool.pytest.ini_options])",
                    pytrace=False)


def _current() -> Optional[pytest.Item]:
    """The test whose setup or call is running; None in teardown, whose processes clean up what a
    checked setup started (a session fixture's finalizer runs in whichever test happens to be last)."""
    return _running[-1] if _running else None


def _check_args(args: Any, kwargs: Dict[str, Any]) -> None:
    item = _current()
    if item is not None:
        check(item, required_markers(args, kwargs.get("cwd"), kwargs.get("env")))


def _install() -> None:
    original_init = subprocess.Popen.__init__
    original_start = multiprocessing.process.BaseProcess.start

    def checked_init(self: subprocess.Popen, *args: Any, **kwargs: Any) -> None:
        _check_args(args[0] if args else kwargs.get("args"), kwargs)
        original_init(self, *args, **kwargs)

    def checked_start(self: multiprocessing.process.BaseProcess) -> None:
        target = getattr(self, "_target", None)
        module = getattr(target, "__module__", None) or ""
        item = _current()
        if item is not None and module in TRAINING_MODULES:
            check(item, {"training": f"{module}.{getattr(target, '__name__', '?')} (a training process)"})
        original_start(self)

    subprocess.Popen.__init__ = checked_init  # type: ignore[method-assign]  # the enforcement itself
    multiprocessing.process.BaseProcess.start = checked_start  # type: ignore[method-assign]
    _originals[:] = [original_init, original_start]


def pytest_configure(config: pytest.Config) -> None:
    if not _configs:
        _install()
    _configs.append(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    _configs.remove(config)
    if not _configs:
        subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start = _originals  # type: ignore[method-assign]
        del _originals[:]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Any:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Any:
    _running.append(None)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    fixtures = getattr(item, "fixturenames", ())
    check(item, {marker: f"the {name} fixture" for name, marker in FIXTURE_TIERS.items() if name in fixtures})


def _torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


_NEEDS_CACHE: Dict[Path, Set[str]] = {}
_ignored: List[str] = []


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> Optional[bool]:
    """Without torch, collect only the core test modules (the others cannot even be imported)."""
    name = collection_path.name
    if collection_path.suffix == ".py" and name.startswith("test_") and not _torch_installed():
        if not is_core(collection_path, _NEEDS_CACHE):
            _ignored.append(name)
            return True
    return None


def is_core_item(item: pytest.Item, path: Path) -> bool:
    return (path.suffix == ".py" and is_core(path, _NEEDS_CACHE)
            and not any(item.get_closest_marker(tier) for tier in NOT_CORE_TIERS))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("core") is not None:
            raise pytest.UsageError(f"{item.nodeid}: `core` is applied by tests/tiers.py from the test's "
                                    "imports and tiers; remove the marker")
        module = getattr(item, "module", None)
        path = Path(getattr(module, "__file__", "") or item.path)
        if is_core_item(item, path):
            item.add_marker("core")


def pytest_deselected(items: List[pytest.Item]) -> None:
    _deselected[0] += sum(1 for item in items if any(item.get_closest_marker(tier) for tier in TIERS))


def _quick_expression(config: pytest.Config) -> Optional[str]:
    """The ``-m`` expression pyproject's addopts gives (the quick tier), if any."""
    args = config.getini("addopts")
    for flag, value in zip(args, args[1:]):
        if flag == "-m":
            return value
    return None


def pytest_report_header(config: pytest.Config) -> List[str]:
    lines = []
    if config.option.markexpr and config.option.markexpr == _quick_expression(config):
        lines.append("tiers: the quick tier (pyproject addopts); all tiers: python -m pytest -m \"\"")
    if not _torch_installed():
        lines.append("tiers: torch is not installed: only the core test modules are collected")
    return lines


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _ignored:
        terminalreporter.write_line(f"{len(_ignored)} test modules that need torch or more were not collected "
                                    "(torch is not installed)")
    if _deselected[0] and config.option.markexpr == _quick_expression(config):
        terminalreporter.write_line(f"{_deselected[0]} tests of the slower tiers ({', '.join(TIERS)}) were "
                                    "deselected: `python -m pytest -m \"\"` runs every tier")
