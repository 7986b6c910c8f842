"""The benchmark scripts that import the ablation script's helpers start: a helper renamed or moved
in ``benchmarks/ablation.py`` or ``benchmarks/ablation_curve.py`` breaks its importers only when they
run, which is rarely (each takes minutes to hours), so ``--help`` checks their imports here."""
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPTS = ["ablation.py", "curriculum.py", "network_mutation.py", "setting_sweep.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_starts(script: str) -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], cwd=str(REPO),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]
