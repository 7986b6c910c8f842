"""pbt.status on a real population's workspace (tests/pbt_population.py), on a copy of it with torn
files planted, and its command line (once and --watch)."""
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, worker_env
from pbt_population import CRIPPLED, N, population

from pbt.keys import short_keys
from pbt.storage import LineageEntry, Record
from pbt.storage.liveness import Beat
from pbt.tools.status import render_text
from pbt.tools.snapshot import MemberView, read_snapshot


@pytest.fixture(scope="session")
def pop(tmp_path_factory):
    return population(tmp_path_factory)


@pytest.mark.training
def test_status_table_of_a_real_population(pop):
    snapshot = read_snapshot(pop.workspace)
    assert [m.policy_idx for m in snapshot.members] == list(range(N))
    assert not snapshot.skipped
    # Ranked: exactly the members whose newest record has an objective, 1..k by objective. (How many
    # that is depends on timing: a member changed in its last intervals ends with none.)
    known = sorted((m for m in snapshot.members if m.objective is not None), key=lambda m: (-m.objective, m.policy_idx))
    assert known and [m.rank for m in known] == list(range(1, len(known) + 1))
    assert all(m.rank is None for m in snapshot.members if m.objective is None)
    best = snapshot.best
    assert best.objective == max(m.objective for m in snapshot.members if m.objective is not None)
    replaced = snapshot.member(CRIPPLED)
    assert replaced.restarts >= 1 and replaced.last_replace is not None
    text = render_text(snapshot, width=220)
    assert f"best: policy {best.policy_idx}" in text
    assert f"{replaced.last_replace.donor}@it{replaced.last_replace.iteration}" in text
    for view in snapshot.members:
        assert f"learning_rate={view.params['train.params.config.learning_rate']:.4g}" in text
    # 80 columns: hyperparameters move to their own table, one column per member.
    narrow = render_text(snapshot, width=80)
    assert "hyperparameters in force" in narrow and "learning_rate" in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 80


@pytest.mark.training
def test_status_survives_torn_files(pop, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(pop.workspace, ws)
    good = read_snapshot(ws)
    # A record being written (torn), newer than member 0's real newest one.
    (ws / "000" / "999999.yaml").write_text('{"policy_idx": 0,\n "iteration": 99')
    # A lineage line whose writer was killed mid-line.
    with open(ws / "001" / "lineage.jsonl", "a") as f:
        f.write('{"action": "replace", "donor": 2, "fra')
    # A heartbeat torn mid-write, and a fresh one.
    (ws / "002" / "heartbeat").write_text('{"time": 17')
    (ws / "003" / "heartbeat").write_bytes(_beat(time.time(), frame=10**9).to_json())
    # A member directory with nothing readable yet.
    (ws / "004").mkdir()
    (ws / "004" / "000001.yaml").write_bytes(b"\x00\xff garbage")
    snapshot = read_snapshot(ws)
    assert len(snapshot.skipped) >= 2
    assert snapshot.member(0).record.iteration == good.member(0).record.iteration
    assert snapshot.member(1).lineage == good.member(1).lineage
    assert snapshot.member(2).heartbeat is None
    assert snapshot.member(3).liveness(time.time()) == "alive" and snapshot.member(3).frame == 10**9
    assert snapshot.member(4).record is None
    text = render_text(snapshot, width=220)
    assert "skipped" in text and "no record" in text
    assert render_text(snapshot, width=80)


@pytest.mark.training
def test_status_cli_once_and_watch(pop, tmp_path):
    env = dict(worker_env(), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "pbt.status", str(pop.workspace)], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "PBT population" in proc.stdout and "hyperparameters" in proc.stdout
    # SIGINT back to its default in the child: a test run started in the background (nohup, `&`)
    # ignores SIGINT, the child would inherit that and Python would then never raise KeyboardInterrupt.
    watch = subprocess.Popen([sys.executable, "-m", "pbt.status", str(pop.workspace), "--watch", "--interval", "0.2"],
                             cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # Interrupt once the watch loop runs (it says so on stderr), not after a fixed delay: on a loaded
    # machine the process may still be importing. Off a terminal, the frame is printed on exit.
    said = ""
    for line in watch.stderr:
        said += line
        if line.startswith("Watching "):
            break
    watch.send_signal(signal.SIGINT)
    out, err = watch.communicate(timeout=300)
    assert watch.returncode == 0, said + err
    assert "PBT population" in out
    missing = subprocess.run([sys.executable, "-m", "pbt.status", str(tmp_path / "nope")], cwd=str(REPO), env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert not (tmp_path / "nope").exists()  # a reader never creates a workspace


def _record(t: float) -> Record:
    return Record(policy_idx=0, iteration=3, frame=300, objective=1.0, params={}, checkpoint="000003.pth",
                  checksum="0" * 64, time=t)


def _beat(t: float, state: str = "running", frame=None) -> Beat:
    return Beat(pid=1, host="host", token="token", time=t, frame=frame, state=state, policy_idx=0)


def test_liveness_from_heartbeat_or_records():
    now = 10_000.0
    lineage = [LineageEntry(policy_idx=0, iteration=i, frame=i, action="keep", time=now - 1000 + 60 * i)
               for i in range(5)]  # every 60 s
    assert MemberView(0, _record(now - 100), lineage).liveness(now, stale_after=120) == "alive"
    assert MemberView(0, _record(now - 100), lineage[:1]).liveness(now, stale_after=60) == "stale"
    # Records every 60 s: a member is stale only after 3 intervals (180 s) without a new one.
    assert MemberView(0, _record(now - 170), lineage).liveness(now, stale_after=30) == "alive"
    assert MemberView(0, _record(now - 200), lineage).liveness(now, stale_after=30) == "stale"
    # A heartbeat wins over the records' times.
    assert MemberView(0, _record(now - 5000), lineage, _beat(now - 5)).liveness(now, 30) == "alive"
    assert MemberView(0, _record(now), lineage, _beat(now - 500)).liveness(now, 30) == "stale"
    assert MemberView(0, None, []).liveness(now) == "unknown"
    # A record dated far in the future (a clock far off, or a lie) is no sign of life.
    assert MemberView(0, _record(now + 1e6), lineage[:1]).liveness(now, stale_after=60) == "stale"
    assert MemberView(0, _record(now - 5), lineage[:1], _beat(now + 1e6)).liveness(now, 60) == "stale"
    # A member that finished (or was stopped) says so in its last heartbeat: not stale, not alive.
    assert MemberView(0, _record(now - 5000), lineage, _beat(now - 4000, "finished")).liveness(now) \
        == "finished"
    assert MemberView(0, None, [], _beat(now, "running")).liveness(now) == "alive"
    assert MemberView(0, None, [], _beat(now, "stopped")).liveness(now) == "stopped"


def test_stale_default_is_the_members_heartbeat_timeout():
    # One liveness rule: status calls a member stale when the members themselves would.
    from pbt.config import LivenessConfig
    from pbt.tools.snapshot import DEFAULT_STALE_AFTER

    assert DEFAULT_STALE_AFTER == LivenessConfig().heartbeat_timeout
    now = 10_000.0
    assert MemberView(0, None, [], _beat(now - DEFAULT_STALE_AFTER + 1)).liveness(now) == "alive"
    assert MemberView(0, None, [], _beat(now - DEFAULT_STALE_AFTER - 1)).liveness(now) == "stale"


def test_short_keys_resolve_clashes():
    keys = ["train.params.config.gamma", "task.env.gamma", "train.params.config.tau"]
    assert short_keys(keys) == {"train.params.config.gamma": "config.gamma", "task.env.gamma": "env.gamma",
                                "train.params.config.tau": "tau"}


def test_status_works_without_torch():
    code = ("import sys, pbt.status, pbt.analyze, pbt.tools.snapshot, pbt.tools.status, pbt.tools.analyze\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), env=worker_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr



def test_an_mfpbt_members_sub_population_comes_from_its_newest_action():
    from types import SimpleNamespace

    from pbt.tools.status import _subpopulation

    acted = SimpleNamespace(reason="replace: bottom quarter ...; sub-population 2 (frequency 25, members [4, 5])")
    assert _subpopulation(SimpleNamespace(last_event=acted, last_replace=None)) == "2 (every 25)"
    other = SimpleNamespace(reason="replace: top member 3 ...")
    assert _subpopulation(SimpleNamespace(last_event=other, last_replace=None)) == ""
    assert _subpopulation(SimpleNamespace(last_event=None, last_replace=None)) == ""
