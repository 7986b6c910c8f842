"""Every command the documentation shows (README.md and the site's pages under docs/), accounted for.

Each command of a ```bash block is either run here as printed (``HERE``: by the training-tier test
below, with only the placeholders a user fills in substituted: ``pbt.policy_idx=i``, ``$PWD``), run
as printed by another test (named), or cannot run on the machines that test this project, with the
reason (Isaac Gym, Isaac Lab, several GPUs, Slurm, an S3 server: each has its own tier or none). A
command added to a page without an entry here fails the quick tier, and so does an entry that no
longer matches a command. The Isaac Gym translations are composed for real (Hydra, the same
rewrites as ``pbt.train``), the Isaac Lab ones mapped, since neither simulator runs here.
"""
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from conftest import REPO, bash_commands, parse_summary, worker_env

HERE = "here"
DOCS = REPO / "docs"


def pages() -> List[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def doc_commands() -> List[Tuple[str, str]]:
    """(page relative to the repository, command) for every documented command."""
    return [(str(page.relative_to(REPO)), line) for page in pages() for line in bash_commands(page.read_text())]


#: (page, a regex the command matches from its start, how it is tested). First match wins.
ACCOUNTS: List[Tuple[str, str, str]] = [
    # -- the two commands and the tiers
    ("README.md", r"pip install torch==2\.13\.0 && pip install -e \. && pbt-launch", "tests/launcher/test_first_run.py::test_main_job_as_printed_in_the_readme_shows_pbt_working"),
    ("docs/get-started.md", r"pip install torch==2\.13\.0 && pip install -e \. && pbt-launch", "tests/launcher/test_first_run.py::test_main_job_as_printed_in_the_readme_shows_pbt_working"),
    ("", r"pip install torch==2\.13\.0 && pip install -e \"\.\[test", "tests/test_tiers.py::test_the_readme_and_ci_run_the_tiers_the_same_way"),
    ("", r'python -m pytest -m "" -n 2 --dist loadfile$', "tests/test_tiers.py::test_the_readme_and_ci_run_the_tiers_the_same_way"),
    ("docs/get-started.md", r"python -m pbt\.train task=Pendulum max_frames=1000000", HERE),
    # -- guides run by tests/test_readme_examples.py and other tests
    ("docs/guides/population-by-hand.md", r"python -m pbt\.train task=Pendulum pbt=pbt_default pbt\.policy_idx=i", "tests/test_readme_examples.py::test_hand_run_population_exploits_as_printed"),
    ("docs/guides/selection.md", r"python -m pbt\.train task=Pendulum pbt=pbt_default pbt/search_space=ppo_design_doc", "tests/test_readme_examples.py::test_search_space_fixed_values_apply_as_printed"),
    ("docs/reference/configuration-overview.md", r"python -m pbt\.train task=Reacher pbt=pbt_default pbt/mutation=reacher_shaping", "tests/test_readme_examples.py::test_reward_shaping_guard_as_printed"),
    ("docs/guides/trpo.md", r"python -m pbt\.train task=Pendulum train=PendulumTRPO num_envs=64 max_frames=20000 \+train", "tests/test_readme_examples.py::test_trpo_skrl_keys_as_printed"),
    ("docs/guides/tasks.md", r"PYTHONPATH=\. python -m pbt\.train task=my_task:PointMass", "tests/tasks/test_user_task.py::test_readme_task_example_trains_and_learns"),
    ("docs/guides/selection.md", r"python -m pbt\.train task=(Pendulum|Reacher) pbt=pbt_default pbt/selection=", HERE),
    ("docs/guides/selection.md", r"python -m pbt\.train task=Pendulum pbt=pbt_default pbt\.eval_episodes=16 ", HERE),
    ("docs/guides/selection.md", r"python -m pbt\.train task=Reacher pbt=evaluated_lockstep ", HERE),
    ("docs/guides/network.md", r"python -m pbt\.train task=Reacher pbt=pbt_default pbt/mutation=agilerl", HERE),
    ("docs/guides/network.md", r"python -m pbt\.train task=Pendulum train=PendulumTRPO task\.env\.observeVelocity=False", "tests/test_readme_examples.py::test_recurrent_network_evolution_as_printed"),
    ("docs/guides/curriculum.md", r"python -m pbt\.train task=Reacher pbt=pbt_default pbt/curriculum=reacher_goal", "tests/test_readme_examples.py::test_curriculum_example_as_printed"),
    ("docs/guides/trpo.md", r"(python -m pbt\.train|torchrun) ", HERE),
    ("docs/coming-from/agilerl.md", r"python -m pbt\.train task=Reacher", HERE),
    ("docs/coming-from/ray-tune.md", r"python -m pbt\.train task=Pendulum", HERE),
    ("docs/coming-from/skrl.md", r"python -m pbt\.train task=Cartpole", HERE),
    ("docs/guides/elastic.md", r"python -m launcher\.run --run=experiments\.pendulum_elastic", "tests/launcher/test_launcher_elastic.py (the same experiment module, and --add, with a test's train_dir)"),
    # -- cannot run here
    ("docs/coming-from/isaacgymenvs.md", r"python -m pbt\.train ", "cannot: Isaac Gym (Python 3.8, an NVIDIA GPU); composed by test_isaacgymenvs_translations_compose"),
    ("", r"python -m launcher\.run --run=experiments\.isaacgym_", "cannot: Isaac Gym on 4 GPUs (or a Slurm GPU partition); the launcher's backends are tested with the smoke experiment"),
    ("docs/coming-from/isaaclab.md", r"python -m pbt\.train task=isaaclab/", "cannot: Isaac Lab (Python 3.12, its own install); mapped by test_isaaclab_translations_map, trained by the isaaclab tier (scripts/test_isaaclab.sh)"),
    ("docs/guides/tasks.md", r"(for i in|python -m pbt\.train task=isaaclab/|done$)", "cannot: Isaac Lab (the isaaclab tier, scripts/test_isaaclab.sh, trains Isaac-Cartpole-Direct)"),
    ("docs/isaaclab.md", r"", "cannot: Isaac Lab's own Python 3.12 install (the isaaclab tier, scripts/test_isaaclab.sh, runs these steps)"),
    ("docs/guides/launcher-and-slurm.md", r"python -m launcher\.run --run=experiments\.smoke_pbt --backend=slurm", "tests/launcher/test_launcher_slurm.py::test_cpu_only_jobs_run_with_cpus_per_job (the slurm tier, on a real single-node Slurm)"),
    ("docs/guides/launcher-and-slurm.md", r"python -m pbt\.train -m hydra/launcher=submitit_slurm", "tests/launcher/test_launcher_slurm.py::test_hydra_submitit_multirun_population (the slurm tier)"),
    ("docs/guides/object-storage.md", r"", "cannot as printed: a SeaweedFS server and AWS variables; the s3 tier runs a population, status and analyze on a local SeaweedFS (tests/storage/s3/)"),
    ("docs/guides/observability.md", r"python -m pbt\.", "cannot as printed: <workspace> is yours; tests/tools/ run status, analyze, replay and play on a real population's workspace"),
    ("", r"tensorboard ", "cannot: TensorBoard's server (the summaries are tested in tests/rl_games/test_tensorboard.py)"),
    ("docs/analysis_commands.md", r"", "cannot as printed: the record of how docs/images were made (paths of the machine that made them)"),
]


def account(page: str, command: str) -> Tuple[str, str]:
    """(the matching rule's regex, its account) for one command; AssertionError when none matches."""
    for rule_page, pattern, how in ACCOUNTS:
        if (not rule_page or rule_page == page) and re.match(pattern, command):
            return pattern, how
    raise AssertionError(f"{page}: no entry in tests/test_docs_commands.py ACCOUNTS for: {command}")


def test_every_documented_command_is_accounted_for() -> None:
    commands = doc_commands()
    assert len(commands) > 50
    used = set()
    for page, command in commands:
        pattern, how = account(page, command)
        used.add(pattern)
        if how.startswith("tests/"):
            path, _, name = how.split(" ")[0].partition("::")
            assert (REPO / path).is_file(), how
            if name:
                assert f"def {name}(" in (REPO / path).read_text(), how
    stale = [(page, pattern) for page, pattern, _ in ACCOUNTS if pattern not in used]
    assert not stale, f"entries that match no documented command any more: {stale}"


#: What a command's output must also show (beyond training to its max_frames), by page.
EXPECTED_OUTPUT: Dict[str, List[str]] = {
    "docs/coming-from/skrl.md": ["skrl's name of rl_games' horizon_length", "skrl's name of rl_games' gamma",
                                 "skrl's name of rl_games' tau"],
}


def here_commands() -> List[Tuple[str, str]]:
    return [(page, command) for page, command in doc_commands() if account(page, command)[1] == HERE]


def as_argv(command: str, workdir: Path) -> List[str]:
    """The command as argv with this interpreter; ``pbt.policy_idx=i`` is member 0, ``$PWD`` the workdir."""
    argv = shlex.split(command.replace("$PWD", str(workdir)))
    if argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    else:
        assert argv[0] == "python", command
        argv = [sys.executable, *argv[1:]]
    return [arg.replace("pbt.policy_idx=i", "pbt.policy_idx=0") for arg in argv]


@pytest.mark.training
@pytest.mark.parametrize("page, command", here_commands(), ids=lambda v: v if v.endswith(".md") else None)
def test_runs_as_printed(page: str, command: str, tmp_path: Path) -> None:
    """One member (``i`` = 0) or one worker, as printed; it must train to its max_frames."""
    assert "max_frames=" in command, f"{page}: a command run here sets max_frames: {command}"
    proc = subprocess.run(as_argv(command, tmp_path), cwd=str(tmp_path), env=worker_env(), capture_output=True,
                          text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{page}: {command}\n{output[-4000:]}"
    max_frames = int(re.search(r"max_frames=(\d+)", command).group(1))
    assert parse_summary(output)["frames"] >= max_frames, output[-2000:]
    for expected in EXPECTED_OUTPUT.get(page, []):
        assert expected in output, (expected, output[-2000:])
    if page == "docs/coming-from/ray-tune.md":  # Ray's hyperparam_mutations and nothing else mutate
        from pbt.storage import WorkspaceReader

        (startup, *_) = WorkspaceReader(tmp_path / "ws_ray", 4).read_lineage(0)
        prefix = "train.params.config."
        assert sorted(startup.params_after) == sorted(
            prefix + k for k in ("tau", "e_clip", "learning_rate", "mini_epochs", "minibatch_size"))


# -- what cannot run here, checked as far as it can be ----------------------------------------------


def page_commands(page: str, prefix: str) -> List[str]:
    return [c for p, c in doc_commands() if p == page and c.startswith(prefix)]


def test_isaacgymenvs_translations_compose() -> None:
    """The IsaacGymEnvs page's commands, composed as pbt.train composes them (no Isaac Gym needed to
    compose): the task, its env group, the strategy and DexPBT's numbers; IsaacGymEnvs' own spelling
    is refused saying how to write it here."""
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.config import PbtConfig
    from pbt.errors import TaskError
    from pbt.overrides import prepare

    commands = page_commands("docs/coming-from/isaacgymenvs.md", "python -m pbt.train ")
    assert len(commands) == 2
    for command in commands:
        overrides = prepare(shlex.split(command)[3:])
        with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        plain: Dict = OmegaConf.to_container(cfg, resolve=False)
        assert plain["task"]["kind"] == "isaacgym" and plain["task"]["name"] == "AllegroKukaLSTM"
        assert plain["task"]["groups"] == {"env": "reorientation"}
        pbt = PbtConfig.from_mapping(OmegaConf.to_container(cfg.pbt, resolve=True))
        assert pbt.selection == "dexpbt" and pbt.num_policies == 8 and pbt.policy_idx == 0
    original = (DOCS / "coming-from" / "isaacgymenvs.md").read_text()
    upstream = re.search(r"```text\n(python -m isaacgymenvs\.train .*?)\n```", original, re.S).group(1)
    args = [a for a in shlex.split(upstream)[3:]]
    with pytest.raises(TaskError, match=r"Unknown task 'AllegroKukaLSTM'.*task=isaacgym/<Name>"):
        prepare(args)
    fixed = [a.replace("task=AllegroKukaLSTM", "task=isaacgym/AllegroKukaLSTM") for a in args]
    with pytest.raises(Exception, match=r"pbt\.replace_fraction_worst is a setting of pbt/selection=dexpbt"):
        prepare(fixed)  # DexPBT's key under the default strategy: refused, saying which to add


def test_isaaclab_translations_map() -> None:
    """The Isaac Lab page's commands: their agent.pbt.* keys mapped as task=isaaclab/ maps them."""
    from pbt.tasks.isaaclab_pbt import pbt_overrides, split_agent_pbt

    plain, full = page_commands("docs/coming-from/isaaclab.md", "python -m pbt.train ")
    cli, rest = split_agent_pbt(shlex.split(plain)[3:])
    out = pbt_overrides({}, cli)
    for expected in ("pbt=pbt_default", "pbt.selection=threshold", "pbt.num_policies=8", "pbt.policy_idx=0",
                     "pbt.workspace=/tmp/pbt/pbt_workspace", "pbt.initial_mutation=false"):
        assert expected in out, (expected, out)
    assert not any(o.startswith(("pbt.mutation_rate", "pbt.change_min", "pbt.threshold_abs=")) for o in out)
    cli, rest = split_agent_pbt(shlex.split(full)[3:])
    out = pbt_overrides({}, cli) + rest
    for expected in ("pbt.mutation_rate=0.25", "pbt.change_min=1.1", "pbt.change_max=2.0", "pbt.threshold_abs=0.05",
                     "pbt.interval_steps=100000", "pbt.objective=Episode_Reward/success", "pbt.significance=null",
                     "pbt.min_mutations=0", "pbt.equal_experience=false", "pbt.max_lead=null",
                     "pbt.restart_mode=exec", "pbt.wait_for_effect=false"):
        assert expected in out, (expected, out)
