"""The core modules never import torch (nor need numpy): they must run on Isaac Gym's Python 3.8."""
import subprocess
import sys

from conftest import REPO

CORE = ["pbt", "pbt.config", "pbt.keys", "pbt.sections", "pbt.procfs", "pbt.mutation", "pbt.selection",
        "pbt.storage", "pbt.storage.liveness", "pbt.storage.checkpoints", "pbt.restart", "pbt.member", "pbt.peers", "pbt.write_errors",
        "pbt.elastic", "pbt.selection.membership", "pbt.selection.pb2", "pbt.selection.pb2_data", "pbt.selection.pb2_model",
        "pbt.selection.mfpbt",
        "pbt.objective", "pbt.tasks", "pbt.tasks.registry", "pbt.tasks.base", "pbt.tasks.isaacgym",
        "pbt.tools.snapshot", "pbt.launcher.run", "pbt.launcher.run_description", "pbt.launcher.backends.processes",
        "pbt.launcher.backends.slurm", "pbt.api", "pbt.tools.reference", "launcher", "launcher.run"]


def test_core_modules_do_not_import_torch():
    code = ("import importlib, sys\n"
            f"for m in {CORE!r}:\n"
            "    importlib.import_module(m)\n"
            "bad = sorted(m for m in ('torch', 'numpy', 'rl_games', 'sklearn', 'scipy') if m in sys.modules)\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
