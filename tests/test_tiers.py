"""The tier checks of tests/tiers.py: what needs which marker, that an unmarked test fails before
the process starts (and a marked one starts it), and which test modules are core (Python 3.8 leg)."""
import multiprocessing
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import tiers
from import_needs import REPO, is_core, needed_packages

PY = sys.executable


@pytest.mark.parametrize("args, expected", [
    ([PY, "-m", "pbt.train", "task=Pendulum"], {"training"}),
    (["timeout", "60", "python3.8", "-u", "-m", "pbt.replay", "schedule.yaml"], {"training"}),
    ("cd /tmp && python -m pbt.play checkpoint=x.pth", {"training"}),
    (["bash", "-c", "exec python -m pbt.train task=Pendulum"], {"training"}),
    (["torchrun", "--nproc_per_node=2", "-m", "pbt.train"], {"training"}),
    (["/usr/local/bin/pbt-train", "task=Pendulum"], {"training"}),
    (["/root/.local/bin/weed", "server", "-dir=/tmp/x"], {"s3"}),
    (["bash", "scripts/slurm_test_cluster.sh", "start"], {"slurm"}),
    (["sbatch", "--array=0-3", "job.sh"], {"slurm"}),
    (["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", "/tmp/ws"], {"faults"}),
    ([PY, "-c", "import pbt.train"], set()),  # imports, trains nothing
    ([PY, "-m", "pbt.status", "/tmp/ws"], set()),
    ([PY, "fake_worker.py", "train_dir=/tmp/mount", "experiment=weed"], set()),
    (["git", "ls-files"], set()),
])
def test_what_each_command_needs(args: object, expected: set) -> None:
    assert set(tiers.required_markers(args)) == expected


def test_the_launcher_needs_training_only_for_a_run_description_that_trains(tmp_path: Path) -> None:
    (tmp_path / "real_run.py").write_text('CMD = "python -m pbt.train task=Pendulum"\n')
    (tmp_path / "fake_run.py").write_text('CMD = "python fake_worker.py mode=ok"\n')
    launcher = [PY, "-m", "launcher.run", "--backend=processes"]
    env = {"PYTHONPATH": str(tmp_path)}
    assert set(tiers.required_markers(launcher + ["--run=real_run"], env=env)) == {"training"}
    assert set(tiers.required_markers(launcher + ["--run=fake_run"], env=env)) == set()
    assert set(tiers.required_markers(launcher + [f"--run={tmp_path / 'fake_run.py'}"])) == set()
    installed = [PY, "-m", "pbt.launcher.run", "--backend=processes"]  # the same launcher, installed name
    assert set(tiers.required_markers(installed + ["--run=real_run"], env=env)) == {"training"}
    assert set(tiers.required_markers(installed + ["--run=fake_run"], env=env)) == set()
    assert set(tiers.required_markers(launcher + ["--run=experiments.smoke_pbt"], cwd=str(REPO))) == {"training"}
    # one the launcher cannot find either starts nothing (it is refused); no --run: counts as training
    assert set(tiers.required_markers(launcher + ["--run=no_such_run_module"], env=env)) == set()
    assert set(tiers.required_markers(launcher, env=env)) == {"training"}


def _cluster_script(tmp_path: Path) -> Path:
    """A harmless script whose name is the Slurm test cluster's: it only touches a file."""
    script = tmp_path / "slurm_test_cluster.sh"
    script.write_text(f"touch {tmp_path / 'ran'}\n")
    return script


def test_an_unmarked_test_fails_before_the_process_starts(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"test_tiers.py::test_an_unmarked.*@pytest\.mark\.slurm"):
        subprocess.run(["bash", str(_cluster_script(tmp_path))], check=True)
    assert not (tmp_path / "ran").exists()
    with pytest.raises(pytest.fail.Exception, match=r"`python -m pbt.train` \(a training process\) without its tier "
                                                    r"marker: add @pytest\.mark\.training"):
        subprocess.Popen([PY, "-m", "pbt.train", "task=Pendulum"])


def test_a_test_with_the_marker_starts_the_process(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    request.node.add_marker("slurm")  # as if decorated: the check reads the running test's markers
    subprocess.run(["bash", str(_cluster_script(tmp_path))], check=True)
    assert (tmp_path / "ran").exists()


def _fake_training_entry() -> None:
    pass


def test_a_training_function_started_as_a_process_needs_the_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fake_training_entry, "__module__", "pbt.train")
    process = multiprocessing.get_context("spawn").Process(target=_fake_training_entry)
    with pytest.raises(pytest.fail.Exception, match=r"@pytest\.mark\.training"):
        process.start()
    assert process.pid is None


def test_a_user_of_a_shared_training_fixture_needs_the_marker_also_when_it_is_cached() -> None:
    item = SimpleNamespace(nodeid="tests/x.py::test_x", fixturenames=["tmp_path", "trained_pendulum"],
                           iter_markers=lambda: iter(()))
    with pytest.raises(pytest.fail.Exception, match=r"the trained_pendulum fixture.*@pytest\.mark\.training"):
        tiers.pytest_runtest_setup(item)  # type: ignore[arg-type]


def test_the_quick_tier_leaves_out_every_tier_marker(pytestconfig: pytest.Config) -> None:
    registered = {line.split(":", 1)[0] for line in pytestconfig.getini("markers")}
    assert set(tiers.TIERS) | {"core"} <= registered
    assert tiers._quick_expression(pytestconfig) == "not ({})".format(" or ".join(tiers.TIERS))
    assert "--strict-markers" in pytestconfig.getini("addopts")


def test_this_module_is_core(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("core") is not None


@pytest.mark.parametrize("source, needs", [
    ("import json\nimport torch.nn\n", {"torch"}),
    ("import pytest\nnp = pytest.importorskip('numpy')\n", {"pytest", "numpy"}),
    ("def test_x():\n    import torch\n", set()),  # runs with the test, not on import
    ("try:\n    import torch\nexcept ImportError:\n    torch = None\n", set()),  # optional
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n", set()),
    ("from conftest import REPO\n", {"pytest"}),  # the test helpers' own needs
    ("from pbt.member import PbtMember\n", {"yaml"}),
    ("from pbt.rl_games.runner import minibatch_size\n", None),  # the torch side: more than the core
])
def test_the_packages_a_test_module_needs_on_import(tmp_path: Path, source: str, needs: object) -> None:
    path = tmp_path / "test_probe.py"
    path.write_text(source)
    found = needed_packages(path)
    if needs is None:
        assert not is_core(path) and found - {"pytest", "yaml", "hypothesis"}, found
    else:
        assert found == needs


def test_the_core_modules_the_import_check_names_are_core() -> None:
    from test_core_imports import CORE  # checked at run time there: no torch, numpy or rl_games

    cache: dict = {}
    for module in CORE:
        base = REPO.joinpath(*module.split("."))
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        assert is_core(path, cache), (module, needed_packages(path, cache))


def test_the_readme_and_ci_run_the_tiers_the_same_way() -> None:
    readme = (REPO / "README.md").read_text()
    blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)]
    assert any(b.endswith("&& python -m pytest") for b in blocks), "the README's quick-tier command"
    every_tier = 'python -m pytest -m "" -n 2 --dist loadfile'  # two test files at a time (pytest-xdist)
    assert every_tier in blocks, "the README's every-tier command"
    ci = (REPO / ".ci" / "run").read_text()
    assert f"{every_tier} " in ci, ".ci/run runs every tier, as the README says"
    assert re.search(r"-m core\b", (REPO / "scripts" / "test_py38.sh").read_text()), "the Python 3.8 leg: -m core"


SESSION_CLEANUP = '''
import subprocess
import pytest

@pytest.fixture(scope="session")
def cluster():
    yield
    subprocess.run(["bash", {script!r}], check=True)  # stops what the marked test started

@pytest.mark.slurm
def test_a_marked_user(cluster):
    pass

def test_an_unmarked_test_that_happens_to_run_last():
    pass
'''


def test_a_session_fixtures_cleanup_does_not_fail_the_last_test(tmp_path: Path) -> None:
    """A session fixture's finalizer runs in the teardown of whichever test is last: its process
    cleans up what a checked setup started, so it needs no marker from that test."""
    script = _cluster_script(tmp_path)
    (tmp_path / "test_last.py").write_text(SESSION_CLEANUP.format(script=str(script)))
    result = subprocess.run([PY, "-m", "pytest", "-p", "tiers", "-p", "no:cacheprovider", "-q", "-W",
                             "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path / "test_last.py")],
                            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO / "tests")),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    assert result.returncode == 0, result.stdout
    assert "2 passed" in result.stdout and (tmp_path / "ran").exists()


def test_the_conftest_installs_every_hook_of_the_tier_checks() -> None:
    """conftest.py imports tiers' hooks by name: a hook added to tiers.py but not imported is dead."""
    import conftest

    hooks = {name for name in vars(tiers) if name.startswith("pytest_")}
    assert hooks and hooks <= set(vars(conftest)), sorted(hooks - set(vars(conftest)))
