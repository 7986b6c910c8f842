#!/usr/bin/env bash
# The GPU checks of the device machine (one NVIDIA GPU, no network), in one run: the GPU paths the
# CPU tests prove by other means (benchmarks/gpu_paths.py), the per-step cost of objective tracking
# on CUDA (benchmarks/objective_sync.py), and a real 2-member PBT population on cuda:0 whose agents
# are torch.compile'd: in-place exploits load donor weights into compiled agents, then member 0 is
# started again and resumes from its workspace checkpoint into a compiled agent.
# Needs torch and the project's Python dependencies importable (PYTHONPATH); logs go to $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT="${OUT:-$(mktemp -d)}"
cd "$(dirname "$0")/.."
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name())"
python3 benchmarks/gpu_paths.py 2>&1 | tee "$OUT/gpu_paths.log" || status=1
python3 benchmarks/objective_sync.py --envs 4096 16384 --steps 200 --device cuda 2>&1 | tee "$OUT/objective_sync.log" || status=1

W="$(mktemp -d)"
common=(task=Pendulum sim_device=cuda:0 rl_device=cuda:0 num_envs=128 torch_threads=4 train_dir="$W/runs"
        experiment=gpu pbt=pbt_default pbt/selection=dexpbt pbt.dbg_mode=true pbt.significance=null
        pbt.replace_threshold_frac_std=0 pbt.replace_threshold_frac_absolute=0 pbt.num_policies=2
        pbt.workspace="$W/ws" pbt.interval_steps=131072 pbt.start_after=0 pbt.initial_delay=0 pbt.ready_after=0
        pbt.initial_mutation=false train.params.config.torch_compile=True)
python3 -m pbt.train "${common[@]}" pbt.policy_idx=0 max_frames=655360 > "$OUT/member0.log" 2>&1 &
python3 -m pbt.train "${common[@]}" pbt.policy_idx=1 max_frames=655360 train.params.config.learning_rate=1e-7 \
  > "$OUT/member1.log" 2>&1 &
wait %1 || status=1
wait %2 || status=1
python3 -m pbt.train "${common[@]}" pbt.policy_idx=0 max_frames=917504 > "$OUT/member0_resumed.log" 2>&1 || status=1
for f in member0 member1 member0_resumed; do
  echo "== $f: $(grep -c 'exploit' "$OUT/$f.log") exploit lines; $(grep -m1 -o 'resum[a-z]* [^.]*' "$OUT/$f.log")"
  grep -E "SUMMARY|Error|Traceback" "$OUT/$f.log" | tail -3
done
python3 - "$W/ws" <<'PYEOF'
import sys
from pbt.storage import WorkspaceReader
reader = WorkspaceReader(sys.argv[1])
for idx in (0, 1):
    entries = reader.read_lineage(idx)
    print(idx, [(e.iteration, e.action, e.donor, getattr(e, "mode", None)) for e in entries])
PYEOF
echo "gpu_check status $status"
exit $status
