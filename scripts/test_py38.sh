#!/usr/bin/env bash
# The torch-free core (config, mutation, selection, workspace records, restart, launcher) on
# Python 3.8, Isaac Gym's Python: a throwaway venv with pytest, pyyaml and hypothesis only.
set -euo pipefail
cd "$(dirname "$0")/.."
PY38="${PY38:-}"
if [ -z "$PY38" ]; then
  if command -v pyenv >/dev/null 2>&1 && pyenv prefix 3.8 >/dev/null 2>&1; then
    PY38="$(pyenv prefix 3.8)/bin/python"
  elif command -v python3.8 >/dev/null 2>&1; then
    PY38="$(command -v python3.8)"
  else
    echo "Python 3.8 not found: install it (pyenv install 3.8) or set PY38=/path/to/python3.8" >&2
    exit 1
  fi
fi
VENV="${VENV38:-${TMPDIR:-/tmp}/pbt-py38-venv}"
[ -x "$VENV/bin/python" ] || "$PY38" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet pytest pyyaml hypothesis
"$VENV/bin/python" -c "import sys; assert sys.version_info[:2] == (3, 8), sys.version"
PYTHONPATH="$PWD" "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_config.py tests/mutation tests/selection tests/test_objective.py \
  tests/storage/test_workspace.py tests/storage/test_liveness.py tests/storage/test_hostile_records.py tests/storage/test_lock_race.py tests/test_restart.py tests/member/test_member.py \
  tests/member/test_donors.py tests/member/test_refusals.py tests/faults/test_faults_member.py tests/test_structure.py \
  tests/launcher/test_launcher_grid.py tests/launcher/test_launcher_elastic.py tests/launcher/test_slurm_checks.py tests/launcher/test_launcher_processes.py tests/launcher/test_progress.py tests/test_core_imports.py
