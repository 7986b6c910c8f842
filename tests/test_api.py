"""The docs' "From Python" example (docs/guides/python.md) (pbt.api.run_population), run as printed: a real population
of three processes, read back from its workspace."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, worker_env


@pytest.mark.training
def test_the_readme_python_example_runs_a_population(tmp_path: Path) -> None:
    text = (REPO / "docs" / "guides" / "python.md").read_text()
    match = re.search(r"<!-- docs example: api -->\s*```python\n(.*?)```", text, re.S)
    assert match, "docs/guides/python.md has no 'From Python' example"
    (tmp_path / "example.py").write_text(match.group(1))
    proc = subprocess.run([sys.executable, "example.py"], cwd=str(tmp_path), env=worker_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    winner = re.search(r"^winner: (\d) (\S+) (\S+\.pth)$", proc.stdout, re.M)
    assert winner, proc.stdout[-3000:]
    assert Path(winner.group(3)).is_file()
    rows = re.findall(r"^(\d|None) (\d) (\S+) (\d+) (\d+)$", proc.stdout, re.M)
    assert sorted(int(r[1]) for r in rows) == [0, 1, 2]
    assert all(int(r[3]) >= 120000 for r in rows)  # every member trained its budget
    ranked = [float(r[2]) for r in rows if r[0] != "None"]
    assert ranked == sorted(ranked, reverse=True) and float(winner.group(2)) == ranked[0]
