"""Many real processes race to take over one stale or unreadable lock: exactly one wins, every
round (issue 11: an unreadable lock used to be deleted by a second taker after the first had
replaced it, and both acquire() calls succeeded)."""
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import List

import pytest

from pbt.storage import LocalStore
from pbt.storage.liveness import LockedError, MemberLiveness

RACERS = 6
ROUNDS = 5


def _racer(root: str, start: "multiprocessing.synchronize.Event", done: "multiprocessing.synchronize.Event",
           results: "multiprocessing.Queue") -> None:
    store = LocalStore(root)
    liveness = MemberLiveness(store, "000", 0, heartbeat_interval=0.05, heartbeat_timeout=3600)
    start.wait()
    try:
        liveness.acquire()
    except LockedError:
        results.put(("refused", os.getpid()))
        return
    results.put(("won", os.getpid()))
    done.wait()  # hold the lock (alive) until every racer has decided
    liveness.release()


def _plant(lock: Path, kind: str) -> None:
    if kind == "unreadable":
        lock.write_bytes(b"")
    else:  # a lock of a process on this host that no longer runs
        lock.write_text(json.dumps({"pid": 999_999, "host": os.uname().nodename, "token": "dead",
                                    "proc_start": "1", "time": time.time() - 3600}))
    old = time.time() - 3600
    os.utime(str(lock), (old, old))


@pytest.mark.parametrize("kind", ["unreadable", "dead owner"])
def test_exactly_one_of_many_racing_processes_takes_over(tmp_path: Path, kind: str) -> None:
    ctx = multiprocessing.get_context("fork")
    for round_ in range(ROUNDS):
        root = tmp_path / f"round{round_}"
        (root / "000").mkdir(parents=True)
        _plant(root / "000" / "lock", kind)
        start, done, results = ctx.Event(), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(str(root), start, done, results)) for _ in range(RACERS)]
        for proc in procs:
            proc.start()
        start.set()
        outcomes: List[str] = [results.get(timeout=120)[0] for _ in procs]
        done.set()
        for proc in procs:
            proc.join(60)
            assert proc.exitcode == 0
        assert outcomes.count("won") == 1, (round_, outcomes)
        assert outcomes.count("refused") == RACERS - 1, (round_, outcomes)
        assert not [n for n in os.listdir(str(root / "000")) if n.startswith("lock.takeover")]
