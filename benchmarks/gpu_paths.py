"""The GPU paths of issue 30 on a real CUDA device, without rl_games, Hydra or Isaac Gym (only torch
and this repository): what the CPU tests prove by other means, confirmed where it runs.

1. checkpoints holding CUDA tensors load onto the CPU through both loaders (torch's weights-only one,
   and the allow-list unpickler torch < 2.6 gets);
2. a ``torch.compile``d model (inductor) writes uncompiled names; its state loads into an uncompiled
   and a compiled model, which then compute the same outputs;
3. TRPO's double backward through a compiled model fails (why TRPO refuses ``torch_compile``);
4. rank 0's agent is broadcast as CPU copies (``spmd.cpu_copies`` of CUDA state);
5. objective tracking issues no synchronising CUDA call per step (``torch.cuda.set_sync_debug_mode``
   set to "error" while the steps run), and one read afterwards agrees with the per-step path.

    python benchmarks/gpu_paths.py   # prints PASS/FAIL per check; exit status 1 if any failed
"""
import io
import os
import sys
import traceback
from pathlib import Path
from typing import Callable, List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

DEVICE = os.environ.get("GPU_PATHS_DEVICE", "cuda")  # cpu: a dry run of the script itself
CUDA = DEVICE.startswith("cuda")


def policy() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ELU(), torch.nn.Linear(64, 2)).to(DEVICE)


def check_checkpoints() -> str:
    from pbt.storage.checkpoints import deserialize_checkpoint, serialize_state

    model = policy()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(4, 8, device=DEVICE)).sum().backward()
    optimizer.step()
    data = serialize_state({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "frame": 1})
    loaded = deserialize_checkpoint(data, "cuda checkpoint")
    kept = torch.serialization.safe_globals
    del torch.serialization.safe_globals  # what torch < 2.5 lacks: the allow-list unpickler loads it
    try:
        fallback = deserialize_checkpoint(data, "cuda checkpoint (torch < 2.6 path)")
    finally:
        torch.serialization.safe_globals = kept
    for state in (loaded, fallback):
        for name, tensor in model.state_dict().items():
            assert state["model"][name].device.type == "cpu" and torch.equal(state["model"][name], tensor.cpu())
    return f"{len(data)} bytes with CUDA tensors: both loaders give CPU tensors equal to the GPU's"


def check_compile() -> str:
    from pbt.rl_games.agent import live_state_dict, plain_state_dict

    source = torch.compile(policy())
    x = torch.randn(16, 8, device=DEVICE)
    expected = source(x)
    raw = source.state_dict()
    assert all(k.startswith("_orig_mod.") for k in raw)
    plain = plain_state_dict(raw)
    uncompiled = policy()
    uncompiled.load_state_dict(plain)
    compiled = torch.compile(policy())
    compiled.load_state_dict(live_state_dict(plain, compiled))
    torch.testing.assert_close(uncompiled(x), expected)
    torch.testing.assert_close(compiled(x), expected)
    return "inductor-compiled state loads into uncompiled and compiled models (same outputs)"


def check_trpo_compile_refusal_is_needed() -> str:
    model = torch.compile(policy())
    x = torch.randn(32, 8, device=DEVICE)
    params = list(model.parameters())
    try:
        out = model(x)
        kl = (out - out.detach()).pow(2).mean()
        grads = torch.autograd.grad(kl, params, create_graph=True)
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.autograd.grad(flat @ torch.ones_like(flat), params)
    except RuntimeError as exc:
        return f"double backward through a compiled model fails as expected: {str(exc).splitlines()[0][:160]}"
    return "WARNING: double backward through a compiled model worked on this torch; the refusal may be lifted"


def check_cpu_copies() -> str:
    from pbt.rl_games.trpo.spmd import cpu_copies

    model = policy()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 8, device=DEVICE)).sum().backward()
    optimizer.step()
    sent = cpu_copies({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    buffer = io.BytesIO()
    torch.save(sent, buffer)
    assert b"cuda" not in buffer.getvalue()
    return "the broadcast payload of a CUDA agent pickles with no CUDA tensor in it"


def check_objective_syncs() -> str:
    from pbt.objective import MemberObjective

    envs = 4096
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    steps = []
    for _ in range(64):
        done = (torch.rand(envs, device=DEVICE, generator=gen) < 0.2).nonzero(as_tuple=False)  # rl_games' sync
        steps.append(({"episode_return": torch.randn(envs, device=DEVICE, generator=gen),
                       "true_objective": torch.randn(envs, device=DEVICE, generator=gen)}, done))
    deferred = MemberObjective("true_objective", "episode_return", envs)
    if CUDA:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
    try:
        for infos, done in steps:
            deferred.update(infos, done)
    finally:
        if CUDA:
            torch.cuda.set_sync_debug_mode("default")
    reference = MemberObjective("true_objective", "episode_return", envs)
    for infos, done in steps:
        reference.update(infos, done.reshape(-1).tolist())
    assert deferred.value is not None and abs(deferred.value - reference.value) < 1e-5
    assert list(deferred.recent) == list(reference.recent)
    return f"64 steps of {envs} envs under sync debug mode 'error': no sync; the read agrees ({deferred.value:.5f})"


CHECKS: List[Tuple[str, Callable[[], str]]] = [
    ("checkpoints", check_checkpoints), ("compile", check_compile),
    ("trpo_compile", check_trpo_compile_refusal_is_needed), ("cpu_copies", check_cpu_copies),
    ("objective_syncs", check_objective_syncs),
]


def main() -> int:
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if CUDA else DEVICE}")
    failed = 0
    for name, check in CHECKS:
        try:
            print(f"PASS {name}: {check()}", flush=True)
        except Exception:  # noqa: BLE001 - report every check
            failed += 1
            print(f"FAIL {name}:\n{traceback.format_exc()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
