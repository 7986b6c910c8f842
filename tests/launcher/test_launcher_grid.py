"""Pure unit tests of the launcher's experiment descriptions and command generation (Python 3.8 ok)."""
import argparse
import importlib
import math
import os
import pkgutil
import shlex
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import experiments
from pbt.launcher import Experiment, ParamGrid, ParamList, RunDescription
from pbt.launcher.backends import BACKENDS, get_backend, processes, slurm
from pbt.launcher.backends.slurm import SlurmOptions, render_batch_script, sbatch_argv
from pbt.launcher.run import launcher_argparser, load_run_description
from pbt.errors import ConfigError, PbtError
from pbt.restart import build_restart_argv, format_value

PY = "/usr/bin/python-test"


def members_of(exp: Experiment, train_dir: str = "/runs", python: Any = PY) -> List[Any]:
    return RunDescription("r", [exp]).members(train_dir, python=python)


# --- ParamGrid ---------------------------------------------------------------------------------


def test_grid_is_the_cartesian_product_first_entry_slowest() -> None:
    grid = ParamGrid([("a", [1, 2]), ("b", ["x", "y", "z"])])
    assert len(grid) == 6
    assert list(grid.generate_params()) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"},
        {"a": 2, "b": "x"}, {"a": 2, "b": "y"}, {"a": 2, "b": "z"},
    ]


def test_tied_parameters_vary_together() -> None:
    grid = ParamGrid([(("a", "b"), [(1, 2), (3, 4)]), ("c", [0, 1])])
    assert len(grid) == 4
    assert list(grid.generate_params()) == [
        {"a": 1, "b": 2, "c": 0}, {"a": 1, "b": 2, "c": 1},
        {"a": 3, "b": 4, "c": 0}, {"a": 3, "b": 4, "c": 1},
    ]
    assert grid.keys == ["a", "b", "c"]


def test_population_from_range() -> None:
    grid = ParamGrid([("pbt.policy_idx", range(8))])
    assert [p["pbt.policy_idx"] for p in grid.generate_params()] == list(range(8))


def test_randomize_is_a_seeded_permutation() -> None:
    grid = ParamGrid([("a", range(5)), ("b", range(3))])
    ordered = list(grid.generate_params())
    shuffled = list(grid.generate_params(randomize=True, seed=1))
    assert shuffled == list(grid.generate_params(randomize=True, seed=1))
    assert sorted(map(repr, shuffled)) == sorted(map(repr, ordered))
    assert shuffled != ordered


@pytest.mark.parametrize(
    "grid, message",
    [
        ([("a", [1]), ("a", [2])], "appears in entries"),
        ([(("a", "b"), [1])], "tuples of 2 items"),
        ([(("a", "b"), [(1, 2, 3)])], "tuples of 2 items"),
        ([("a", [])], "empty"),
        ([("a", "abc")], "pass a list"),
        ([("a", 5)], "not a list or range"),
        ([("", [1])], "non-empty strings"),
        ([("a", [1], "extra")], "pair"),
    ],
)
def test_bad_grids_raise_config_error(grid: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ParamGrid(grid)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=4))
def test_grid_size_and_uniqueness_property(sizes: List[int]) -> None:
    grid = ParamGrid([(f"k{i}", list(range(n))) for i, n in enumerate(sizes)])
    combos = list(grid.generate_params())
    expected = 1
    for n in sizes:
        expected *= n
    assert len(grid) == len(combos) == expected
    assert len({tuple(sorted(c.items())) for c in combos}) == expected


def test_param_list() -> None:
    params = [{"p1": 1, "p2": "a"}, {"p2": "b", "p4": "test"}]
    assert list(ParamList(params).generate_params()) == params
    with pytest.raises(ConfigError):
        ParamList([{1: 2}])  # type: ignore[dict-item]


# --- values and commands -----------------------------------------------------------------------


# Booleans are ``true``/``false``, as a restart writes them (the launcher used to write ``True``).
@pytest.mark.parametrize(
    "value, text",
    [(True, "true"), (False, "false"), (None, "null"), (3, "3"), (0.001, "0.001"), (1e-05, "1e-05"),
     ("cpu", "cpu"), ([1, 2], "[1,2]"), ((0.5, True), "[0.5,true]")],
)
def test_format_value(value: Any, text: str) -> None:
    assert format_value(value) == text
    exp = Experiment("v", "python t.py", ParamList([{"x": value}]))
    assert members_of(exp)[0].argv[2] == f"x={text}"  # the launcher writes the same text


# Values a grid may hold: bools, floats like 1e-5, lists, strings with spaces or quotes, None.
OVERRIDE_VALUES = [True, False, None, 0, -3, 1e-5, 3e-4, 0.1, 2.5e10, float("inf"), "cpu", "two words",
                   "it's", 'say "hi"', "a=b,c", "", "1e-5", "true", "/abs/path with space", [1, 2.5, "a b"],
                   (0.5, True), []]


def _launcher_override(key: str, value: Any) -> str:
    (member,) = members_of(Experiment("v", "python t.py", ParamList([{key: value}])))
    return member.argv[2]


@pytest.mark.parametrize("value", OVERRIDE_VALUES, ids=repr)
def test_launcher_and_restart_write_the_same_override(value: Any) -> None:
    key = "train.params.config.x"
    restart = build_restart_argv([], {key: value}, checkpoint=None)[-1]
    assert _launcher_override(key, value) == restart == f"{key}={format_value(value)}"


@pytest.mark.parametrize("value", OVERRIDE_VALUES, ids=repr)
def test_hydra_reads_back_a_launcher_override(value: Any) -> None:
    parser_module = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    parsed = parser_module.OverridesParser.create().parse_overrides([_launcher_override("x", value)])[0].value()
    expected = list(value) if isinstance(value, tuple) else value
    assert parsed == expected and type(parsed) is type(expected)
    if isinstance(value, float) and math.isinf(value):
        assert math.isinf(parsed)


def test_hydra_composes_a_member_command(tmp_path: Path) -> None:
    """The launcher's whole argv (grid values and the keys it manages) composed by Hydra."""
    hydra = pytest.importorskip("hydra")
    (tmp_path / "config.yaml").write_text("lr: 0.1\nflag: false\nname: x\nlist: []\nnone: 1\ntrain_dir: ''\n"
                                          "experiment: ''\npbt:\n  policy_idx: 0\n  num_policies: 1\n  workspace: ''\n")
    values = {"lr": 1e-5, "flag": True, "name": "it's \"a\" name", "list": [1, "a b"], "none": None}
    grid = ParamList([dict(values, **{"pbt.policy_idx": i}) for i in range(2)])
    members = members_of(Experiment("pop", "python -m pbt.train pbt.x=1", grid), str(tmp_path / "runs dir"))
    with hydra.initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = hydra.compose("config", overrides=[a for a in members[1].argv[3:] if a != "pbt.x=1"])
    assert {k: cfg[k] for k in values} == values
    assert cfg.pbt.policy_idx == 1 and cfg.pbt.num_policies == 2
    assert cfg.pbt.workspace == str(tmp_path / "runs dir" / "r" / "pop" / "workspace")
    assert cfg.train_dir == str(tmp_path / "runs dir" / "r" / "pop") and cfg.experiment == "pop_01"


def test_pbt_members_get_workspace_train_dir_experiment_and_population_size() -> None:
    exp = Experiment("pop", "python -m pbt.train task=Pendulum pbt=pbt_default", ParamGrid([("pbt.policy_idx", range(8))]))
    members = members_of(exp, "/runs")
    assert len(members) == 8
    for i, m in enumerate(members):
        assert m.argv == [
            PY, "-m", "pbt.train", "task=Pendulum", "pbt=pbt_default", f"pbt.policy_idx={i}",
            "train_dir=/runs/r/pop", f"experiment=pop_{i:02d}", "pbt.workspace=/runs/r/pop/workspace",
            "pbt.num_policies=8",
        ]
        assert m.name == f"pop_{i:02d}"
        assert m.workspace == "/runs/r/pop/workspace"
        assert m.log_path == f"/runs/r/pop/logs/pop_{i:02d}.log"
    assert len({m.name for m in members}) == 8  # runs don't collide


def test_relative_train_dir_becomes_absolute(tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(str(tmp_path))
    try:
        exp = Experiment("pop", "python -m pbt.train pbt=pbt_default", ParamGrid([("pbt.policy_idx", range(2))]))
        members = members_of(exp, "rel")
    finally:
        os.chdir(cwd)
    assert f"pbt.workspace={tmp_path}/rel/r/pop/workspace" in members[0].argv


def test_two_experiments_two_workspaces() -> None:
    grid = ParamGrid([("pbt.policy_idx", range(2))])
    description = RunDescription("r", [Experiment("a", "python t.py pbt=x", grid), Experiment("b", "python t.py pbt=x", grid)])
    members = description.members("/t", python=None)
    assert [m.workspace for m in members] == ["/t/r/a/workspace"] * 2 + ["/t/r/b/workspace"] * 2
    assert members[0].argv[0] == "python"  # python=None keeps the command as written


def test_non_pbt_experiment_gets_no_workspace() -> None:
    exp = Experiment("seeds", "python -m pbt.train task=Pendulum", ParamGrid([("seed", [1, 2])]))
    members = members_of(exp)
    for m in members:
        assert not any(a.startswith("pbt.") and "=" in a for a in m.argv)
        assert m.workspace is None
        assert "train_dir=/runs/r/seeds" in m.argv and f"experiment={m.name}" in m.argv


def test_grid_value_replaces_the_same_key_in_the_command() -> None:
    exp = Experiment("pop", "python -m pbt.train seed=1 pbt=pbt_default", ParamGrid([(("pbt.policy_idx", "seed"), [(0, 10), (1, 11)])]))
    members = members_of(exp)
    assert [a for a in members[1].argv if a.startswith("seed=")] == ["seed=11"]


def test_keys_set_by_the_user_are_not_added_twice() -> None:
    exp = Experiment(
        "pop",
        "python -m pbt.train pbt=pbt_default pbt.workspace=/shared/ws experiment=mine train_dir=/elsewhere pbt.num_policies=2",
        ParamGrid([("pbt.policy_idx", range(2))]),
    )
    for m in members_of(exp):
        keys = [a.split("=", 1)[0] for a in m.argv if "=" in a]
        assert len(keys) == len(set(keys))
        assert "pbt.workspace=/shared/ws" in m.argv


def test_quoting_round_trips_through_the_shell() -> None:
    exp = Experiment("q", "python run.py", ParamList([{"name": "two words", "expr": "a'b"}]), env_vars={"A": "1 2"})
    (m,) = members_of(exp)
    assert shlex.split(m.cmd) == m.argv
    assert shlex.split(m.shell_cmd) == ["env", "A=1 2"] + m.argv


def test_experiment_name_and_run_name_must_be_safe() -> None:
    with pytest.raises(ConfigError, match="valid name"):
        Experiment("a/b", "python x.py")
    with pytest.raises(ConfigError, match="valid name"):
        RunDescription("bad name", [Experiment("a", "python x.py")])
    with pytest.raises(ConfigError, match="unique"):
        RunDescription("r", [Experiment("a", "python x.py"), Experiment("a", "python y.py")])
    with pytest.raises(ConfigError, match="empty command"):
        Experiment("a", "  ")
    with pytest.raises(ConfigError, match="quotes"):
        Experiment("a", "python 'x.py")


@pytest.mark.parametrize(
    "cmd, grid, message",
    [
        ("python t.py pbt=on", [("pbt.policy_idx", [0, 0])], "0..N-1, each once"),
        ("python t.py pbt=on", [("pbt.policy_idx", [1, 2])], "0..N-1, each once"),
        ("python t.py pbt=on", [("pbt.policy_idx", range(2)), ("seed", [1, 2])], "0..N-1, each once"),
        ("python t.py pbt=on pbt.num_policies=8", [("pbt.policy_idx", range(4))], "pbt.num_policies=8"),
        ("python t.py pbt=on", [("seed", [1, 2])], "not every member sets pbt.policy_idx"),
        ("python t.py pbt=on pbt.policy_idx=0", [("seed", [1, 2])], "fixes pbt.policy_idx"),
    ],
)
def test_population_mistakes_are_caught_before_launch(cmd: str, grid: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        members_of(Experiment("pop", cmd, ParamGrid(grid)))


def test_newline_in_an_argument_is_rejected() -> None:
    with pytest.raises(ConfigError, match="newline"):
        members_of(Experiment("n", "python t.py", ParamList([{"a": "x\ny"}])))


def test_errors_derive_from_pbt_error() -> None:
    assert issubclass(ConfigError, PbtError)


# --- the shipped experiment modules --------------------------------------------------------------


def _experiment_modules() -> List[str]:
    return sorted(f"experiments.{m.name}" for m in pkgutil.iter_modules(experiments.__path__))


def test_expected_experiment_modules_exist() -> None:
    names = set(_experiment_modules())
    for name in ("smoke_pbt", "pendulum_pbt", "cartpole_pbt", "mujoco_halfcheetah_pbt", "isaacgym_ant_pbt", "isaacgym_allegro_kuka_pbt"):
        assert f"experiments.{name}" in names


@pytest.mark.parametrize("module", _experiment_modules())
def test_every_experiment_module_describes_populations(module: str) -> None:
    description = load_run_description(module)
    members = description.members("/runs")
    assert members
    for m in members:
        assert m.argv[1:3] == ["-m", "pbt.train"]
        assert m.workspace is not None and "pbt=pbt_default" in m.argv
    smoke = importlib.import_module("experiments.smoke_pbt").RUN_DESCRIPTION.members("/runs")
    assert len(smoke) == 4 and "task=Pendulum" in smoke[0].argv and "sim_device=cpu" in smoke[0].argv


def test_run_module_given_as_a_path() -> None:
    assert load_run_description("experiments/smoke_pbt.py").run_name == "smoke_pbt"


def test_module_without_run_description(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty_run.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="RUN_DESCRIPTION"):
        load_run_description("empty_run")


# --- command line and sbatch generation ----------------------------------------------------------


def test_cli_defaults() -> None:
    args = launcher_argparser().parse_args(["--run=experiments.smoke_pbt"])
    assert args.backend == "processes" and args.experiments_per_gpu == -1 and args.max_parallel == 0
    args = launcher_argparser().parse_args(["--run=x", "--backend=slurm", "--slurm_print_only", "--slurm_requeue=False"])
    assert args.slurm_print_only is True and args.slurm_requeue is False


def test_each_backend_declares_its_own_options() -> None:
    assert BACKENDS == {"processes": processes, "slurm": slurm}
    assert get_backend("slurm") is slurm
    with pytest.raises(ConfigError, match="Did you mean 'slurm'"):
        get_backend("slurn")
    parser = launcher_argparser()
    groups = {g.title: {a.dest for a in g._group_actions} for g in parser._action_groups}
    assert groups["processes backend"] == {"pause_between", "num_gpus", "experiments_per_gpu", "max_restarts",
                                           "restart_delay", "kill_timeout", "progress", "progress_interval", "summary"}
    assert all(dest.startswith("slurm_") for dest in groups["slurm backend"]) and len(groups["slurm backend"]) == 12
    for name, backend in BACKENDS.items():
        own = argparse.ArgumentParser()
        backend.add_cli_args(own)
        assert {a.dest for a in own._actions} - {"help"} == groups[f"{name} backend"]


def test_cli_defaults_are_the_backends_defaults() -> None:
    args = launcher_argparser().parse_args(["--run=x"])
    assert processes.options_from_args(args) == processes.ProcessesOptions()
    assert slurm.options_from_args(args) == SlurmOptions()
    args = launcher_argparser().parse_args(["--run=x", "--max_parallel=3", "--num_gpus=2", "--experiments_per_gpu=1",
                                            "--slurm_sbatch_args=--qos high", "--slurm_timeout= 1:00:00 "])
    assert processes.options_from_args(args) == processes.ProcessesOptions(max_parallel=3, num_gpus=2, experiments_per_gpu=1)
    options = slurm.options_from_args(args)
    assert options.max_parallel == 3 and options.extra_args == ["--qos", "high"] and options.timeout == "1:00:00"


def _slurm_options(**kwargs: Any) -> SlurmOptions:
    base: Dict[str, Any] = {"workdir": "/work"}
    base.update(kwargs)
    return SlurmOptions(**base)


def test_sbatch_argv_one_array_task_per_member() -> None:
    argv = sbatch_argv("run", "pop", 8, "/t/run/pop/slurm", _slurm_options(partition="gpu", gpus_per_job=2, cpus_per_gpu=6, timeout="24:00:00"))
    assert argv[0] == "sbatch" and argv[-1] == "/t/run/pop/slurm/sbatch.sh"
    for option in ("--array=0-7", "--gres=gpu:2", "--cpus-per-task=12", "--partition=gpu", "--time=24:00:00",
                   "--requeue", "--signal=B:USR1@60", "--chdir=/work", "--output=/t/run/pop/slurm/%A_%a.out"):
        assert option in argv


def test_sbatch_argv_cpu_jobs_limits_and_extra_args() -> None:
    argv = sbatch_argv("run", "pop", 4, "/s", _slurm_options(gpus_per_job=0, cpus_per_gpu=2, max_parallel=2, requeue=False, sbatch_args="--account=me --qos 'high prio'"))
    assert "--array=0-3%2" in argv and "--cpus-per-task=2" in argv and "--no-requeue" in argv
    assert not any(a.startswith(("--gres", "--time", "--partition", "--signal")) for a in argv)
    assert argv[-4:-1] == ["--account=me", "--qos", "high prio"]


def test_slurm_options_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        SlurmOptions(sbatch_template=str(tmp_path / "nope.sh"))
    with pytest.raises(ConfigError):
        SlurmOptions(gpus_per_job=-1)


def test_batch_script_runs_the_member_and_requeues_on_usr1(tmp_path: Path) -> None:
    script = render_batch_script("#!/bin/bash\nmodule load cuda\n", "/s/commands.txt", "/s/logs.txt", requeue=True)
    assert script.startswith("#!/bin/bash\nmodule load cuda\n")
    assert 'sed -n "${PBT_LINE}p" "$PBT_COMMANDS_FILE"' in script
    assert 'bash -c "$PBT_CMD"' in script
    assert "trap pbt_requeue USR1" in script and 'scontrol requeue "$SLURM_JOB_ID"' in script
    path = tmp_path / "s.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)  # valid bash
    no_requeue = render_batch_script("module load x", "/c", "/l", requeue=False)
    assert no_requeue.startswith("#!/bin/bash\n") and "trap pbt_requeue" not in no_requeue


def test_batch_script_picks_the_array_tasks_command(tmp_path: Path) -> None:
    """Run the rendered script with bash, as Slurm would, for array task 1."""
    out = tmp_path / "out"
    commands = tmp_path / "commands.txt"
    logs = tmp_path / "logs.txt"
    commands.write_text(f"echo zero > {out}\necho one > {out}\n")
    logs.write_text(f"{tmp_path}/l0.log\n{tmp_path}/sub/l1.log\n")
    script = tmp_path / "s.sh"
    script.write_text(render_batch_script("#!/bin/bash\n", str(commands), str(logs), requeue=True))
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_JOB_ID="7", SLURM_JOB_ID="8")
    subprocess.run(["bash", str(script)], check=True, env=env)
    assert out.read_text() == "one\n"
    assert "exited with status 0" in (tmp_path / "sub" / "l1.log").read_text()
    env["SLURM_ARRAY_TASK_ID"] = "5"
    assert subprocess.run(["bash", str(script)], env=env, stderr=subprocess.PIPE).returncode == 2
