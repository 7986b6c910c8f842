"""One PBT iteration on an ``s3://`` workspace (a local SeaweedFS) vs a local-disk workspace.

A workspace is filled with N members (a record, a 132 kB checkpoint, a heartbeat and a lineage
entry each). Then, per repeat, every peer publishes a new record (the usual case: between two of
member 0's iterations each peer has published once), and member 0 runs the storage part of its
iteration as ``pbt/member.py`` does: publish its checkpoint and record, then inside one
``store.scan()``: scan every peer's newest record, read every peer's heartbeat, refresh its best
copy (copy the leader's checkpoint when it changed), apply retention; then append a lineage entry.
Milliseconds (median of the repeats), requests by S3 operation and bytes sent/received are
recorded for member 0 only; the population's requests per iteration are N times that.

Request cost uses AWS S3 Standard prices (us-east-1: PUT, COPY, POST, LIST $0.005 per 1000
requests; GET and all other requests $0.0004 per 1000).

    python benchmarks/s3_iteration.py --members 8 64 512 --repeats 5 --out benchmarks/results/s3_iteration.json
"""
import argparse
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from pbt.storage import LineageEntry, LocalStore, Store, Workspace  # noqa: E402
from pbt.storage.liveness import MemberLiveness, peer_status  # noqa: E402
from pbt.storage.s3 import S3Store  # noqa: E402
from seaweed_server import SeaweedServer  # noqa: E402

CHECKPOINT_BYTES = 132 * 1024
PRICE_PER_1000 = {"put_object": 0.005, "copy_object": 0.005, "list_objects_v2": 0.005, "get_object": 0.0004,
                  "head_object": 0.0004, "delete_object": 0.0}
"""USD per 1000 requests, AWS S3 Standard, us-east-1 (DELETE is free)."""


def checkpoint(idx: int, iteration: int) -> bytes:
    head = f"{idx}:{iteration}:".encode()
    return head + b"\x01" * (CHECKPOINT_BYTES - len(head))


def fill(make_store, members: int) -> None:  # noqa: ANN001
    for idx in range(members):
        ws = Workspace(make_store(), idx, members)
        ws.publish(1, 1000, float(idx), {"lr": 1e-3}, checkpoint(idx, 1))
        ws.append_lineage(LineageEntry(idx, 0, 0, "keep", reason="startup"))
        MemberLiveness(ws.store, ws.own_key, idx, 30.0, 600.0).beat()


def peers_publish(make_store, members: int, iteration: int) -> None:  # noqa: ANN001
    store = make_store()
    for idx in range(1, members):
        Workspace(store, idx, members).publish(iteration, iteration * 1000, float(idx + iteration), {"lr": 1e-3},
                                               checkpoint(idx, iteration))
        MemberLiveness(store, f"{idx:03d}", idx, 30.0, 600.0).beat()


def iteration(ws: Workspace, it: int) -> None:
    """The storage calls of one PBT iteration of member 0 (pbt/member.py: iterate)."""
    own = ws.publish(it, it * 1000, 0.0, {"lr": 1e-3}, checkpoint(0, it))
    with ws.store.scan():
        peers = ws.latest_records(max_iteration=it)
        peers[0] = own
        for idx in range(1, ws.num_policies):
            peer_status(ws.store, ws.member_key(idx), 600.0)
        best = max(peers.values(), key=lambda r: r.objective)
        ws.update_best(best)
        ws.cleanup(peers)
    ws.append_lineage(LineageEntry(0, it, it * 1000, "keep", reason="benchmark"))


class DelayedClient:
    """A boto3 client whose every request first waits ``seconds``: a remote endpoint's round trip
    on top of the loopback server (``--rtt_ms``; the wait releases the GIL, as a socket wait does)."""

    def __init__(self, client: Any, seconds: float) -> None:
        self._client = client
        self._seconds = seconds

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def delayed(*args: Any, **kwargs: Any) -> Any:
            time.sleep(self._seconds)
            return attr(*args, **kwargs)

        return delayed


def measure(make_store, members: int, repeats: int, rtt_ms: float = 0.0) -> Dict[str, Any]:  # noqa: ANN001
    fill(make_store, members)
    store: Store = make_store()
    if rtt_ms > 0 and isinstance(store, S3Store):  # only the measured member's requests wait
        store._client = DelayedClient(store.client, rtt_ms / 1000.0)
    ws = Workspace(store, 0, members)
    iteration(ws, 2)  # warm: the first scan fetches every record once
    times: List[float] = []
    requests: Dict[str, int] = {}
    sent = received = 0
    for rep in range(repeats):
        peers_publish(make_store, members, 3 + rep)
        if isinstance(store, S3Store):
            store.requests.clear()
            store.bytes_sent = store.bytes_received = 0
        start = time.perf_counter()
        iteration(ws, 3 + rep)
        times.append((time.perf_counter() - start) * 1000)
        if isinstance(store, S3Store):
            requests, sent, received = dict(store.requests), store.bytes_sent, store.bytes_received
    result: Dict[str, Any] = {"members": members, "ms_median": round(statistics.median(times), 1),
                              "ms_all": [round(t, 1) for t in times]}
    if isinstance(store, S3Store):
        per_member = sum(requests.values())
        cost = sum(PRICE_PER_1000.get(op, 0.0004) * n for op, n in requests.items()) / 1000
        result.update(requests=requests, requests_total=per_member, bytes_sent=sent, bytes_received=received,
                      population_requests_per_iteration=per_member * members,
                      population_usd_per_iteration=round(cost * members, 6))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--local-max", type=int, default=512, help="largest N also measured on local disk")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rtt_ms", type=float, default=0.0,
                        help="add this round trip to each of the measured member's requests (a remote endpoint)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results: Dict[str, Any] = {"machine": platform.platform(), "python": platform.python_version(),
                               "rtt_ms": args.rtt_ms,
                               "checkpoint_bytes": CHECKPOINT_BYTES, "s3": [], "local": []}
    with tempfile.TemporaryDirectory() as scratch:
        server = SeaweedServer(Path(scratch) / "seaweed")
        server.start()
        import os
        os.environ.update(server.env())
        try:
            for n in args.members:
                bucket = server.make_bucket(f"pbt-bench-{n}")
                url = f"s3://{bucket}/ws"
                results["s3"].append(measure(lambda: S3Store(url), n, args.repeats, args.rtt_ms))
                print(json.dumps(results["s3"][-1]), flush=True)
                if n <= args.local_max:
                    root = Path(scratch) / f"local-{n}"
                    results["local"].append(measure(lambda: LocalStore(root), n, args.repeats))
                    print(json.dumps(results["local"][-1]), flush=True)
        finally:
            server.stop()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
