"""PbtMember under faults, without torch: start over only when told to (nothing deleted), no second
initial mutation after a crash, a read-only or full workspace (real tmpfs mounts) under
pbt.on_write_error=retry|fail, and a clear error for an unwritable workspace at start-up."""
import logging
import os
from pathlib import Path

import pytest

from conftest import decide_only
from faults_util import fill, remount, tmpfs
from pbt.errors import ConfigError, WorkspaceError
from pbt.member import PbtMember
from pbt.storage import Workspace

SCHEME = {"train.params.config.learning_rate": "mutate_float", "train.params.config.gamma": "mutate_discount"}


def make_cfg(ws, **pbt):
    block = {"enabled": True, "policy_idx": 1, "num_policies": 2, "workspace": str(ws), "interval_steps": 1000,
             "mutation": dict(SCHEME), "mutation_rate": 1.0, "start_after": 0, "initial_delay": 0,
             "heartbeat_interval": 0.2, "heartbeat_timeout": 2.0}
    block.update(pbt)
    return {"seed": 3, "checkpoint": "", "experiment": "exp",
            "train": {"params": {"config": {"learning_rate": 1e-3, "gamma": 0.99}}}, "pbt": block}


def started(tmp_path: Path, ws: Path, **pbt) -> PbtMember:
    member = PbtMember(make_cfg(ws, **pbt), tmp_path / "run", [])
    member.startup()
    return member


def initial_mutations(ws: Workspace, idx: int = 1) -> int:
    return sum(1 for e in ws.read_lineage(idx) if e.reason == "initial mutation of a fresh member")


def test_resume_false_refuses_and_overwrite_moves_the_old_member_aside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    member = started(tmp_path, ws)
    member.workspace.publish(1, 1000, -1.0, member.params, b"first run's checkpoint")
    member.close()
    with pytest.raises(ConfigError, match=r"pbt.resume=false but policy 1 already has records.*pbt.overwrite=true"):
        started(tmp_path, ws, resume=False)
    with pytest.raises(ConfigError, match="only applies with pbt.resume=false"):
        PbtMember(make_cfg(ws, overwrite=True), tmp_path / "run", [])
    fresh = started(tmp_path, ws, resume=False, overwrite=True)
    old = [p for p in ws.iterdir() if p.name.startswith("001.old-")]
    assert len(old) == 1 and (old[0] / "000001.yaml").exists() and (old[0] / "000001.pth").exists()
    assert (old[0] / "lineage.jsonl").exists() and not (old[0] / "lock").exists()
    assert [p.name for p in ws.iterdir() if p.name.startswith("best1.old-")]
    assert fresh.workspace.newest_iteration() is None and initial_mutations(fresh.workspace) == 1
    assert (ws / "001" / "lock").exists()
    fresh.close()
    assert not (ws / "001" / "lock").exists()


def test_member_killed_before_its_first_record_keeps_its_initial_hyperparameters(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    first = started(tmp_path, ws)
    params = dict(first.params)
    first.liveness.stop_thread()  # "killed": no close, the lock stays behind with this PID
    again = started(tmp_path, ws)  # same PID here, like an exec restart; a new PID takes over (test_liveness)
    assert again.params == params
    assert initial_mutations(again.workspace) == 1
    again.close()


@pytest.mark.faults
def test_unwritable_workspace_is_a_clear_error_at_startup(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(WorkspaceError, match="cannot create workspace directory .*pbt.workspace"):
        PbtMember(make_cfg(blocker / "ws"), tmp_path / "run", [])
    with tmpfs(tmp_path / "ro", size="1m") as mnt:
        (mnt / "001").mkdir()
        (mnt / "best1").mkdir()
        remount(mnt, "ro")
        with pytest.raises(WorkspaceError, match="cannot create workspace directory .*Read-only file system"):
            PbtMember(make_cfg(mnt / "new"), tmp_path / "run", [])
        member = PbtMember(make_cfg(mnt), tmp_path / "run", [])  # directories exist: the probe finds out
        with pytest.raises(WorkspaceError, match=r"pbt.workspace=.* is not writable: .*Read-only file system.*mounted "
                                                 r"read-write"):
            member.startup()


def publish_bytes(member: PbtMember, size: int) -> None:
    """Make ``member.workspace.save`` publish ``size`` bytes (the real one torch.saves a state)."""
    workspace = member.workspace

    def save(iteration, frame, objective, params, state, episode_returns=(), frames_since_replace=0, **record):
        return workspace.publish(iteration, frame, objective, params, b"x" * size, episode_returns,
                                 frames_since_replace, **record)

    workspace.save = save  # type: ignore[assignment]




@pytest.mark.faults
@pytest.mark.parametrize("fault", ["read-only", "disk full"])
def test_write_errors_retry_at_the_next_interval_or_fail(tmp_path: Path, caplog, fault: str) -> None:
    with tmpfs(tmp_path / "ws", size="512k") as mnt:
        member = started(tmp_path, mnt)
        failing = started(tmp_path, mnt, policy_idx=0, on_write_error="fail")
        for m in (member, failing):
            publish_bytes(m, 30_000)
            m.started(0)
        assert decide_only(member, 0, 0.0, {}, []) is not None
        if fault == "read-only":
            remount(mnt, "ro")
        else:
            fill(mnt / "filler")
        with caplog.at_level(logging.INFO, logger="pbt.member"):
            assert decide_only(member, 1000, -1.0, {}, []) is None  # logged; training goes on
            member.append_lineage(member.entry("keep", "kept while failing", 1, 1000, {}, {}, objective=-1.0))
            if fault == "read-only":  # (a full disk may still take a short line in a block's slack)
                assert member.lineage.pending  # kept in memory, not lost
            with pytest.raises(WorkspaceError):
                decide_only(failing, 1000, -1.0, {}, [])
            if fault == "read-only":
                remount(mnt, "rw")
            else:
                os.unlink(str(mnt / "filler"))
            assert decide_only(member, 2000, -1.0, {}, []) is not None
        assert "could not publish iteration 1" in caplog.text and "pbt.on_write_error=retry" in caplog.text
        assert ("Read-only file system" if fault == "read-only" else "No space left on device") in caplog.text
        assert "writable again" in caplog.text
        assert not member.lineage.pending
        assert any(e.reason == "kept while failing" for e in member.workspace.read_lineage())
        assert member.workspace.newest_iteration() == 2
        member.close()
        failing.close()
