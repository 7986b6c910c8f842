"""The docs' 'bring your own task' example (docs/guides/tasks.md), extracted from the page and run as written."""
import re

import pytest

from conftest import REPO, parse_summary, run_train


def readme_example() -> str:
    text = (REPO / "docs" / "guides" / "tasks.md").read_text()
    match = re.search(r"<!-- docs example: my_task.py -->\s*```python\n(.*?)```", text, re.S)
    assert match, "docs/guides/tasks.md lost its task example"
    return match.group(1)


def readme_command() -> list:
    text = (REPO / "docs" / "guides" / "tasks.md").read_text()
    match = re.search(r"PYTHONPATH=\. python -m pbt.train (task=my_task:PointMass[^\n]*)", text)
    assert match, "docs/guides/tasks.md lost its task example command"
    return match.group(1).split()


@pytest.mark.training
def test_readme_task_example_trains_and_learns(tmp_path):
    (tmp_path / "my_task.py").write_text(readme_example())
    args = readme_command()
    assert "max_frames=200000" in args
    trained = run_train(args + [f"train_dir={tmp_path / 'runs'}", "experiment=trained"], tmp_path,
                        extra_pythonpath=str(tmp_path))
    assert trained.returncode == 0, trained.stderr[-3000:]
    early = run_train([a for a in args if not a.startswith("max_frames")] +
                      ["max_frames=30000", f"train_dir={tmp_path / 'runs'}", "experiment=early"], tmp_path,
                      extra_pythonpath=str(tmp_path))
    assert early.returncode == 0, early.stderr[-3000:]
    before, after = parse_summary(early.stdout)["reward"], parse_summary(trained.stdout)["reward"]
    assert after > before + 0.3 * abs(before), (before, after)


@pytest.mark.training
def test_import_path_errors_are_clear(tmp_path):
    proc = run_train(["task=no_such_module_xyz:Task"], tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "cannot import module 'no_such_module_xyz'" in proc.stderr + proc.stdout
    (tmp_path / "my_task.py").write_text(readme_example())
    proc = run_train(["task=my_task:PointMas"], tmp_path, timeout=60, extra_pythonpath=str(tmp_path))
    assert proc.returncode != 0
    assert "Did you mean 'PointMass'?" in proc.stderr + proc.stdout
