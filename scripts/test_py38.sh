#!/usr/bin/env bash
# The torch-free core (config, mutation, selection, workspace records, restart, launcher) on
# Python 3.8, Isaac Gym's Python: a throwaway venv with pytest, pyyaml and hypothesis only.
# Extra arguments go to pytest.
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
# The tests marked core (tests/tiers.py applies the marker: the module imports only the standard
# library, pytest, PyYAML and hypothesis, and the test starts no training, S3, Slurm or Isaac Lab
# process); without torch the other modules are not even collected. Every tier of them: -m core.
PYTHONPATH="$PWD" "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m core "$@"
