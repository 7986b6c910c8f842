"""Real PBT populations on an ``s3://`` workspace served by a real SeaweedFS: members train, exploit,
survive a SIGKILL (resume from their newest intact record), and ride out the server being stopped
mid-run (they keep training, retry at each interval, catch up when it returns, lose nothing);
``pbt.status`` and ``pbt.analyze`` read the workspace by its URL. Heavy: run under
``flock /tmp/heavy.lock``."""
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest

from conftest import worker_env
from faults_util import EPOCH_FRAMES, Worker, log_match, wait_for, worker_cmd
from pbt.storage import WorkspaceReader
from seaweed_server import SeaweedServer

pytestmark = [pytest.mark.training, pytest.mark.s3]

INTERVAL = 4 * EPOCH_FRAMES
CRIPPLED = 2


def newest(url: str, idx: int) -> Optional[Tuple[int, int]]:
    try:
        record = WorkspaceReader(url).latest_record(idx, verify=True)
    except Exception:  # noqa: BLE001 - the server may be down: no answer yet
        return None
    return None if record is None else (record.iteration, record.frame)


def s3_cmd(idx: int, n: int, url: str, runs: Path, *extra: str, max_frames: int) -> List[str]:
    cmd = worker_cmd(idx, n, Path("unused"), runs, *extra, max_frames=max_frames, interval=INTERVAL)
    return [f"pbt.workspace={url}" if c.startswith("pbt.workspace=") else c for c in cmd]


def exit_cleanly(workers: List[Worker]) -> None:
    codes = [w.wait(600) for w in workers]
    assert codes == [0] * len(workers), "\n\n".join(w.log()[-3000:] for w in workers)


@pytest.fixture
def own_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedServer]:
    """A server of this test's own (it is stopped mid-run), its variables set for the workers."""
    server = SeaweedServer(tmp_path / "seaweed")
    server.start()
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.faults
def test_population_trains_exploits_survives_a_kill_and_is_analyzed_on_s3(own_server: SeaweedServer,
                                                                          tmp_path: Path) -> None:
    url = f"s3://{own_server.make_bucket('pbt-population')}/run1"
    runs = tmp_path / "runs"
    n, frames = 3, 200_000
    extra = ["pbt.ready_after=0"]
    crippled = ["train.params.config.lr_schedule=constant", "train.params.config.learning_rate=1e-7"]
    cmds = [s3_cmd(i, n, url, runs, *extra, *(crippled if i == CRIPPLED else []), max_frames=frames) for i in range(n)]
    # Member 0 is killed while it trains: its first run has no budget to finish before the kill on a
    # loaded machine (it once did, released its lock, and the restart had nothing to take over); the
    # restart trains to the population's budget from the record it resumes.
    first = [s3_cmd(0, n, url, runs, *extra, max_frames=100_000_000)] + cmds[1:]
    workers = [Worker(cmd, tmp_path / f"w{i}.log", tmp_path) for i, cmd in enumerate(first)]
    try:
        before = wait_for("member 0's third record", lambda: (newest(url, 0) or (0, 0))[0] >= 3 and newest(url, 0),
                          240, workers=workers)
        workers[0].kill(signal.SIGKILL)
        workers[0].wait()
        intact = newest(url, 0)
        assert intact is not None and intact[0] >= before[0]
        workers[0] = Worker(cmds[0], tmp_path / "w0-again.log", tmp_path)
        resumed = wait_for("the killed member to resume", lambda: log_match(
            workers[0], r"resumes from its iteration (\d+) \(frame (\d+)\)"), 120, workers=[workers[0]])
        assert (int(resumed.group(1)), int(resumed.group(2))) == intact
        assert log_match(workers[0], r"taking over the lock of pid \d+ .*no longer running"), workers[0].log()[-3000:]
        exit_cleanly(workers)
    finally:
        for worker in workers:
            worker.stop()

    reader = WorkspaceReader(url)
    replaced = [e for e in reader.read_lineage(CRIPPLED) if e.action == "replace"]
    assert replaced, f"the crippled member was never replaced:\n{workers[CRIPPLED].log()[-3000:]}"
    assert all(e.donor != CRIPPLED for e in replaced)
    learner = [e.objective for e in reader.read_lineage(1) if e.objective is not None]
    assert len(learner) >= 5 and max(learner[-3:]) > learner[0] + 100, learner  # Pendulum: -1300 -> better
    assert "checksum mismatch" not in "".join(p.read_text() for p in tmp_path.glob("w*.log"))

    env = worker_env()
    status = subprocess.run([sys.executable, "-m", "pbt.status", url], capture_output=True, text=True, env=env,
                            cwd=str(tmp_path), timeout=120)
    assert status.returncode == 0, status.stderr
    assert url in status.stdout and "finished" in status.stdout, status.stdout
    out = tmp_path / "analysis"
    analysis = subprocess.run([sys.executable, "-m", "pbt.analyze", url, "--out", str(out)], capture_output=True,
                              text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert analysis.returncode == 0, analysis.stderr[-3000:]
    assert (out / "best" / "checkpoint.pth").stat().st_size > 0
    assert url in (out / "report.md").read_text()


@pytest.mark.faults
def test_members_ride_out_a_server_outage_and_catch_up(own_server: SeaweedServer, tmp_path: Path) -> None:
    url = f"s3://{own_server.make_bucket('pbt-outage')}/run"
    runs = tmp_path / "runs"
    n = 2
    # Long runs, stopped by SIGTERM once they caught up: the outage never races the end of training.
    workers = [Worker(s3_cmd(i, n, url, runs, max_frames=100_000_000), tmp_path / f"w{i}.log", tmp_path)
               for i in range(n)]
    try:
        wait_for("two records of each member",
                 lambda: all((newest(url, i) or (0, 0))[0] >= 2 for i in range(n)), 240, workers=workers)
        before = {i: newest(url, i) for i in range(n)}
        own_server.stop()
        # Down for as long as it takes each member to fail a PBT iteration while it keeps training.
        for worker in workers:
            wait_for("a failed publish during the outage",
                     lambda w=worker: log_match(w, r"could not publish iteration \d+: .*cannot reach the object store"),
                     240, workers=workers)
        own_server.start()
        for worker in workers:
            wait_for("publishing again after the outage",
                     lambda w=worker: log_match(w, r"the workspace is writable again; published iteration \d+"),
                     240, workers=workers)
        caught_up = {i: newest(url, i) for i in range(n)}
        wait_for("one more record of each member after the catch-up",
                 lambda: all((newest(url, i) or (0, 0))[0] > caught_up[i][0] for i in range(n)),  # type: ignore[index]
                 240, workers=workers)
        for worker in workers:
            worker.kill(signal.SIGTERM)
        codes = [w.wait(120) for w in workers]
        assert codes == [128 + signal.SIGTERM] * n, "\n\n".join(w.log()[-3000:] for w in workers)
    finally:
        for worker in workers:
            worker.stop()
    reader = WorkspaceReader(url)
    for idx in range(n):
        log_text = workers[idx].log()
        saved = re.search(r"SIGTERM: saved the current state as iteration (\d+) \(frame (\d+)\)", log_text)
        assert saved, log_text[-3000:]
        final = reader.latest_record(idx, verify=True)
        assert final is not None and (final.iteration, final.frame) == (int(saved.group(1)), int(saved.group(2)))
        assert final.frame > before[idx][1]  # type: ignore[index]  # it trained on through the outage
        lineage = reader.read_lineage(idx)
        iterations = [e.iteration for e in lineage]
        assert iterations == sorted(iterations), iterations  # in order, across the outage
        lines = [e.to_json_line() for e in lineage]
        assert len(set(lines)) == len(lines)  # nothing written twice by the retries
        assert max(iterations) > before[idx][0]  # type: ignore[index]
        assert "Traceback" not in log_text, log_text[-3000:]


def test_an_elastic_population_on_s3(s3_url: str, tmp_path: Path) -> None:
    from member.test_elastic_population import run_elastic

    run_elastic(tmp_path, s3_url)
