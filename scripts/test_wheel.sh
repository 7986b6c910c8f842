#!/usr/bin/env bash
# The installed package, not the checkout: build the wheel, install it (non-editable) into a fresh
# venv, and from an empty directory outside the checkout run the main job through the console
# scripts: pbt-launch (a 4-member population), pbt-status, pbt-analyze, pbt-play, pbt-replay.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="$(mktemp -d "${TMPDIR:-/tmp}/pbt-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
python -m pip wheel --quiet --no-deps --wheel-dir "$WORK/dist" .
python -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install --quiet torch==2.13.0
"$PY" -m pip install --quiet "$WORK"/dist/pbt_rl-*.whl
mkdir "$WORK/run"
cd "$WORK/run"  # outside the checkout: only the installed package can be imported
BIN="$WORK/venv/bin"
"$PY" - <<'PYEOF'
import pathlib, pbt, pbt.resolvers
site = pathlib.Path(pbt.__file__).resolve().parent
assert "site-packages" in str(site), site
assert pathlib.Path(pbt.resolvers.CONFIG_DIR) == site / "configs", pbt.resolvers.CONFIG_DIR
for generic in ("launcher", "experiments", "configs"):  # nothing but pbt in site-packages
    assert not (site.parent / generic).exists(), generic
PYEOF
"$BIN/pbt-launch" --run=experiments.smoke_pbt --train_dir=td --progress=plain
WS=td/smoke_pbt/pendulum/workspace
"$BIN/pbt-status" "$WS"
"$BIN/pbt-analyze" "$WS" --out analysis
CKPT="$(ls analysis/best/checkpoint.pth)"
"$BIN/pbt-play" checkpoint="$CKPT" task=Pendulum num_envs=64 episodes=10 sim_device=cpu rl_device=cpu torch_threads=1 | tee play.log
grep -q "PLAY episodes=10" play.log
"$BIN/pbt-replay" analysis/best/schedule.yaml task=Pendulum num_envs=64 max_frames=20000 sim_device=cpu rl_device=cpu \
  torch_threads=1 train_dir=replay_runs experiment=replayed
"$BIN/pbt-train" task=Pendulum max_frames=10000 num_envs=64 sim_device=cpu rl_device=cpu torch_threads=1 train_dir=single
echo "wheel: OK"
