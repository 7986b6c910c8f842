"""Shared helpers for the tests."""
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

import pytest

from seaweed_server import SeaweedServer
from tiers import (  # noqa: F401 - the tier checks and the core marker (tests/tiers.py), as this conftest's hooks
    pytest_collection_modifyitems, pytest_configure, pytest_deselected, pytest_ignore_collect, pytest_report_header,
    pytest_runtest_protocol, pytest_runtest_setup, pytest_runtest_teardown, pytest_terminal_summary, pytest_unconfigure)

if TYPE_CHECKING:
    from pbt.config import PbtConfig

REPO = Path(__file__).resolve().parent.parent
SUMMARY_RE = re.compile(
    r"SUMMARY frames=(?P<frames>\d+) wall_time=(?P<wall>[\d.]+)s fps=(?P<fps>\d+) "
    r"mean_reward=(?P<reward>\S+) objective=(?P<objective>\S+)"
)

#: The worker's minibatch line (pbt.rl_games.runner): size, " (auto)", envs, steps, samples, minibatches.
MINIBATCH_LINE = re.compile(
    r"minibatch_size=(\d+)( \(auto\))?: (\d+) envs x (\d+) steps = (\d+) samples in (\d+) minibatches"
)


def bash_commands(text: str) -> List[str]:
    """The commands of a page's ```bash blocks: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        commands += [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return commands


def compose_config(overrides: List[str]) -> Any:
    """The composed Hydra config ``pbt.train`` would build from ``overrides`` (in-process agents)."""
    from hydra import compose, initialize_config_dir

    from pbt.resolvers import register_resolvers
    from pbt.tasks.registry import rewrite_task_overrides

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        return compose(config_name="config", overrides=rewrite_task_overrides(overrides))


def decide_only(member: Any, frame: int, objective: Optional[float], state: Dict[str, Any], returns: List[float],
                mixed: bool = False) -> Any:
    """A member's decide step alone (a PBT iteration without its act and record steps): the
    Decision, or None when the workspace could not be written."""
    with member.iteration(frame, objective, state, returns, mixed) as it:
        return None if it is None else it.decision


def donor_led(entry: Any) -> bool:
    """Whether a replace's donor (a lineage entry's) led when its weights were taken. The entry keeps
    the newest objectives; at equal experience (pairwise) the ranking compared the donor's objective
    moved by the member's own progress since the pair's iteration, and the reason gives that number
    (threshold: "leader 2 objective -37.89", DexPBT: "candidate 2 objective -37.89")."""
    if entry.donor_objective is None or entry.objective is None:
        return False
    compared = re.search(rf"(?:leader|candidate) {entry.donor} objective (-?[\d.e+-]+|inf)", entry.reason)
    if compared is not None:
        return float(compared.group(1)) > entry.objective
    return bool(entry.donor_objective > entry.objective)


def worker_env(extra_pythonpath: Optional[str] = None) -> Dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO)] + ([extra_pythonpath] if extra_pythonpath else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_train(args: List[str], cwd: Path, timeout: float = 240, extra_pythonpath: Optional[str] = None
              ) -> subprocess.CompletedProcess:
    """Run ``python -m pbt.train <args>`` in ``cwd`` and return the completed process."""
    return subprocess.run([sys.executable, "-m", "pbt.train", *args], cwd=str(cwd), env=worker_env(extra_pythonpath),
                          capture_output=True, text=True, timeout=timeout)


def parse_summary(output: str) -> Dict[str, float]:
    match = SUMMARY_RE.search(output)
    assert match, f"no SUMMARY line in output:\n{output[-3000:]}"
    out = {k: float(v) if v != "n/a" else float("nan") for k, v in match.groupdict().items()}
    return out


@pytest.fixture
def repo() -> Path:
    return REPO


TRAIN_COMMON = ["task=Pendulum", "sim_device=cpu", "rl_device=cpu", "torch_threads=1"]


@pytest.fixture(scope="session")
def trained_pendulum(tmp_path_factory) -> Dict[str, object]:
    """One 1M-frame Pendulum training per session, shared by the learning test and the play test:
    {"proc": CompletedProcess, "summary": parsed SUMMARY, "checkpoint": Path of rl_games' last save}."""
    root = tmp_path_factory.mktemp("trained_pendulum")
    proc = run_train([*TRAIN_COMMON, "max_frames=1000000", f"train_dir={root / 'runs'}", "experiment=trained"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checkpoints = sorted((root / "runs" / "trained" / "nn").glob("last_*.pth"))
    assert checkpoints, list((root / "runs").rglob("*"))
    return {"proc": proc, "summary": parse_summary(proc.stdout + proc.stderr), "checkpoint": checkpoints[-1],
            "root": root}


# ---- a real S3 server (SeaweedFS) for the s3:// workspace tests (tests/storage/s3/) -------------

_BUCKETS = itertools.count()


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One SeaweedFS per session (tests/seaweed_server.py); its AWS variables set for the session."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed"))
    server.start()
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())  # the S3Store under test reads the standard AWS variables
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_url(seaweed: SeaweedServer) -> str:
    """``s3://<fresh bucket>/ws``: a workspace no other test touches."""
    bucket = seaweed.make_bucket(f"pbt-{os.getpid()}-{next(_BUCKETS)}")
    return f"s3://{bucket}/ws"


@pytest.fixture
def raw(seaweed: SeaweedServer):  # noqa: ANN201 - a boto3 client, to plant what a hostile peer would
    return seaweed.client()


def pbt_config(values: Dict[str, object]) -> "PbtConfig":
    """A PbtConfig from a test's flat values, leaving out the keys its selection ignores: the
    decision tests share one set of values across strategies (a real member refuses such keys at
    start-up; tests/selection/test_selection_config.py tests that)."""
    from pbt.config import PbtConfig, STRATEGY_ONLY_GATES, strategy_of

    selection = values.get("selection", PbtConfig.selection)
    kept = {k: v for k, v in values.items()
            if strategy_of(k) in (None, selection) and not (k in STRATEGY_ONLY_GATES and STRATEGY_ONLY_GATES[k] != selection)}
    return PbtConfig.from_mapping(kept)
