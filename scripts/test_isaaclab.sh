#!/usr/bin/env bash
# Isaac Lab 3.0 tasks for real, kit-less on CPU (Newton physics): a Python 3.12 venv with
# isaaclab==3.0.0 (pins torch 2.11.0; ~8 GB, ~5 min the first time, reused afterwards), rl-games and
# gym beside it, the project, a cartpole asset from the newton wheel, then pytest tests/isaaclab.
#   ISAACLAB_VENV   the venv (default ${TMPDIR:-/tmp}/pbt-isaaclab-venv; reused when it has isaaclab 3.0.0)
#   PY312           the Python 3.12 to create it with (default: pyenv's 3.12, else python3.12)
#   WARP_CACHE_PATH Warp's kernel cache (default: inside the venv, so kernels compile once, ~35 s)
# Extra arguments go to pytest (e.g. -k single).
set -euo pipefail
cd "$(dirname "$0")/.."
PY312="${PY312:-}"
if [ -z "$PY312" ]; then
  if command -v pyenv >/dev/null 2>&1 && pyenv prefix 3.12 >/dev/null 2>&1; then
    PY312="$(pyenv prefix 3.12)/bin/python"
  elif command -v python3.12 >/dev/null 2>&1; then
    PY312="$(command -v python3.12)"
  else
    echo "Python 3.12 not found (isaaclab 3.0 needs it): pyenv install 3.12, or set PY312=/path/to/python3.12" >&2
    exit 1
  fi
fi
VENV="${ISAACLAB_VENV:-${TMPDIR:-/tmp}/pbt-isaaclab-venv}"
PY="$VENV/bin/python"
# pip, quiet (this machine's pip config names local indexes that may not exist: drop those warnings).
pip_install() { "$PY" -m pip install --quiet "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
has_isaaclab() {
  [ -x "$PY" ] && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('isaaclab') != '3.0.0')" 2>/dev/null
}
if ! has_isaaclab; then
  [ -x "$PY" ] || "$PY312" -m venv "$VENV"
  pip_install --upgrade pip
  pip_install "isaaclab==3.0.0" "rl-games==1.6.5" "gym==0.26.2"
fi
"$PY" -c "import sys; assert sys.version_info[:2] == (3, 12), sys.version"
# The project itself (editable: the tests run this checkout), with its test extra.
pip_install -e ".[test]"

export WARP_CACHE_PATH="${WARP_CACHE_PATH:-$VENV/warp-cache}"
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/pbt-isaaclab.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
# Isaac Lab's own assets live on NVIDIA's servers; the newton wheel ships a cartpole with Isaac Lab's
# joint names whose defaultPrim names no prim (cartPole vs cartpole): write a corrected copy.
export PBT_ISAACLAB_CARTPOLE_USD="$("$PY" -m pbt.tasks.isaaclab_assets cartpole "$SCRATCH")"
export PBT_ISAACLAB_SCRATCH="$SCRATCH"
# -m "": every tier of tests/isaaclab (the isaaclab-marked ones and the pure ones beside them).
"$PY" -m pytest -q -p no:cacheprovider -m "" tests/isaaclab "$@"
