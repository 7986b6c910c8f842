"""PBT evolves TRPO: 3 real TRPO worker processes share a workspace with the TRPO mutation scheme.

Member 2 is crippled (max_kl_divergence=1e-7: its policy barely moves). It is replaced in place by a
donor: right after the exploit it holds the donor checkpoint's weights, its record carries mutated
TRPO hyperparameters, and the new trust region is in force in the running agent (the update's KL,
logged as trpo/kl, jumps from about 1e-7 to the donor's scale). About two minutes on 2 cores.
"""
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from conftest import worker_env

torch = pytest.importorskip("torch")

from pbt.storage import Workspace  # noqa: E402
from pbt.storage.checkpoints import model_fingerprint  # noqa: E402

N = 3
CRIPPLED = 2
TINY_KL = 1e-7
INTERVAL = 32_768
MAX_FRAMES = 229_376
TRPO_KEYS = ("max_kl_divergence", "damping", "value_learning_rate", "learning_epochs", "gamma", "tau")
EXPLOITED = r"exploited in place in [\d.]+ ms \(frame (?P<frame>\d+), epoch \d+, lr (?P<lr>\S+), weights (?P<weights>\w+)\)"


def member_cmd(idx: int, root: Path) -> List[str]:
    cmd = [sys.executable, "-m", "pbt.train", "task=Pendulum", "train=PendulumTRPO", "pbt=pbt_default",
           "pbt/mutation=trpo", f"pbt.policy_idx={idx}", f"pbt.num_policies={N}", f"pbt.workspace={root / 'ws'}",
           f"pbt.interval_steps={INTERVAL}", "pbt.start_after=0", "pbt.initial_delay=0", "pbt.ready_after=0",
           f"max_frames={MAX_FRAMES}", "num_envs=128", "sim_device=cpu",
           "rl_device=cpu", "torch_threads=1", "experiment=trpo", f"train_dir={root / 'runs'}",
           "train.params.network.mlp.units=[32,32]"]
    if idx == CRIPPLED:
        cmd.append(f"train.params.config.max_kl_divergence={TINY_KL}")
    return cmd


@pytest.fixture(scope="module")
def population(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trpo_population")
    procs = []
    for idx in range(N):
        log = open(root / f"worker{idx}.log", "w")
        procs.append((subprocess.Popen(member_cmd(idx, root), cwd=str(root), env=worker_env(), stdout=log,
                                       stderr=subprocess.STDOUT), log))
    codes = []
    for proc, log in procs:
        codes.append(proc.wait(timeout=600))
        log.close()
    assert codes == [0] * N, "\n\n".join((root / f"worker{i}.log").read_text()[-2000:] for i in range(N))
    return root


def scalars(root: Path, idx: int, tag: str) -> List[tuple]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(root / "runs" / f"trpo_pbt{idx:03d}" / "summaries"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


@pytest.mark.training
def test_a_crippled_trpo_member_is_replaced_in_place_with_mutated_trpo_settings(population: Path) -> None:
    workspace = Workspace(population / "ws", 0, N)
    for idx in range(N):
        assert workspace.latest_record(idx) is not None
    event = next(e for e in workspace.read_lineage(CRIPPLED) if e.action == "replace")
    assert event.mode == "inplace" and event.donor != CRIPPLED
    assert event.donor_objective > event.objective
    before, after = event.params_before, event.params_after
    keys = ["train.params.config." + k for k in TRPO_KEYS]
    assert set(keys) <= set(after)
    assert before["train.params.config.max_kl_divergence"] < 10 * TINY_KL  # (its initial mutation may scale it)
    assert after["train.params.config.max_kl_divergence"] > 1e-4  # the donor's, maybe mutated
    assert all(after[k] > 0 for k in keys) and 0 < after["train.params.config.gamma"] < 1

    # Right after the exploit: the donor checkpoint's weights, at the member's own frame.
    log = (population / f"worker{CRIPPLED}.log").read_text()
    donor_state = workspace.load_checkpoint(workspace.latest_record(event.donor, max_iteration=event.donor_iteration),
                                            event.donor)
    match = next(m for m in re.finditer(EXPLOITED, log) if int(m["frame"]) == event.frame)
    assert match["weights"] == model_fingerprint(donor_state["model"])[:16]
    assert float(match["lr"]) == pytest.approx(after["train.params.config.value_learning_rate"], rel=1e-5)

    # The trust region in force: the policy step's KL before and after the exploit (an update is logged
    # at the frame count before its rollout: the first one after the exploit at the exploit's frame).
    kls = scalars(population, CRIPPLED, "trpo/kl")
    # Until the member's next change of hyperparameters (a later exploit or mutation).
    changes = [e.frame for e in workspace.read_lineage(CRIPPLED) if e.frame > event.frame and e.action != "keep"]
    until = min(changes, default=float("inf"))
    early = [kl for frame, kl in kls if frame < event.frame]
    late = [kl for frame, kl in kls if event.frame <= frame < until]
    assert early and late, kls
    assert max(early) < 10 * TINY_KL and max(late) > 1000 * TINY_KL
    assert max(late) < after["train.params.config.max_kl_divergence"]

    later = [r for r in (workspace.latest_record(CRIPPLED, max_iteration=i) for i in range(event.iteration + 1, 50))
             if r is not None and r.iteration > event.iteration]
    assert later and later[0].params == after and later[0].frame > event.frame


@pytest.mark.training
def test_analyze_and_replay_read_a_trpo_workspace(population: Path) -> None:
    import yaml

    report = population / "report"
    analyze = subprocess.run([sys.executable, "-m", "pbt.analyze", str(population / "ws"), "--out", str(report)],
                             cwd=str(population), env=worker_env(), capture_output=True, text=True, timeout=300)
    assert analyze.returncode == 0, analyze.stderr[-3000:]
    schedule = yaml.safe_load((report / "best" / "schedule.yaml").read_text())
    assert "train.params.config.max_kl_divergence" in schedule["steps"][0]["params"]
    replay = subprocess.run([sys.executable, "-m", "pbt.replay", str(report / "best" / "schedule.yaml"),
                             "task=Pendulum", "train=PendulumTRPO", "num_envs=128", "max_frames=16384",
                             "train.params.network.mlp.units=[32,32]", "sim_device=cpu", "rl_device=cpu",
                             "torch_threads=1", f"train_dir={population / 'runs'}", "experiment=replay"],
                            cwd=str(population), env=worker_env(), capture_output=True, text=True, timeout=300)
    out = replay.stdout + replay.stderr
    assert replay.returncode == 0, out[-3000:]
    assert "REPLAY done" in out and "SUMMARY frames=16384" in out
