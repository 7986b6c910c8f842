"""Soak test (not in CI): a real PBT population on CPU whose workers are killed at random, for minutes.

N workers (``python -m pbt.train``, Pendulum, small) share one workspace. Every few seconds one of
them, chosen at random, is killed with SIGKILL (some of them SIGSTOP-ped first while a checkpoint or
record temp file is on disk, i.e. in the middle of a write) or SIGTERM, and started again at once
with the same command. Meanwhile a scanner thread plays an extra peer: it reads every member's newest
record and verifies its checkpoint's sha256, over and over. At the end every worker gets SIGTERM.

Reported (JSON and log):

* kills (by kind) and kills survived: the restarted worker resumed from exactly the newest intact
  record its member had when it was killed (same iteration and frame), never from scratch;
* records lost: restarts that resumed from an older record than the newest one the scanner had
  already seen intact before the kill, or that started over (must be 0);
* torn reads: records the scanner got whose checkpoint failed its checksum while the record file
  itself was unchanged (must be 0);
* workspace bytes and files over time, against the bound documented in pbt/storage/retention.py;
* unexpected exits (a worker that died without being killed), with the tail of its log.

    python benchmarks/soak.py --workers 4 --minutes 2            # quick check
    python benchmarks/soak.py --workers 8 --minutes 10 --out benchmarks/results/soak_8x10.json
    python benchmarks/soak.py --workers 4 --minutes 3 --hostile  # and a hostile peer beside them

``--hostile``: the population gets one more member index, played by ``benchmarks/hostile_peer.py``,
a process that keeps planting every attack of issue 11 (code-running and numpy object-dtype
checkpoints under a leader record, FIFOs, symlinks to a sentinel directory outside the workspace,
3 GiB sparse files, NUL names, block-nested YAML, symlinked best directories and lineages of the
honest members). Also reported: honest members crashed, refusals logged by the honest members,
files outside the workspace changed and whether any planted code ran (all 0 but refusals).

Exit status 0 when nothing was lost or torn and no worker died on its own, 1 otherwise.
"""
import argparse
import json
import logging
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pbt.errors import CorruptRecordError  # noqa: E402
from pbt.storage import Workspace  # noqa: E402
from pbt.storage.reader import read_record  # noqa: E402
from pbt.storage.retention import DEFAULT_MAX_RECORDS  # noqa: E402

log = logging.getLogger("soak")

CHECKPOINT_TMP = re.compile(r"\.\d{6}\.(pth|yaml)\..*\.tmp$")
RESUMED = re.compile(r"resumes from its iteration (\d+) \(frame (\d+)\)")
FRESH = ("initial mutation of a fresh member", "has no record yet but a lineage")
"""A restart that had no record to resume from (killed before its first one)."""


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workers", type=int, default=4, help="population size N (one process each)")
    p.add_argument("--minutes", type=float, default=2.0, help="how long to keep killing workers")
    p.add_argument("--kill_every", type=float, default=4.0,
                   help="mean seconds between two kills (uniform in [0.5x, 1.5x])")
    p.add_argument("--mid_write_fraction", type=float, default=0.3,
                   help="fraction of SIGKILLs aimed at the middle of a checkpoint/record write")
    p.add_argument("--sigterm_fraction", type=float, default=0.1,
                   help="fraction of kills that are SIGTERM (save and exit) instead of SIGKILL")
    p.add_argument("--num_envs", type=int, default=128)
    p.add_argument("--interval_steps", type=int, default=8192, help="pbt.interval_steps (frames)")
    p.add_argument("--restart_mode", default="inplace", choices=["inplace", "exec"], help="pbt.restart_mode")
    p.add_argument("--sample_every", type=float, default=2.0, help="seconds between workspace size samples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="directory for the workspace and logs (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--out", default=None, help="write the report as JSON here")
    p.add_argument("--hostile", action="store_true", help="run benchmarks/hostile_peer.py beside the population")
    p.add_argument("--plant_every", type=float, default=0.1, help="seconds between two plantings (--hostile)")
    return p.parse_args(argv)


class Scanner(threading.Thread):
    """An extra peer that verifies every member's newest record, continuously."""

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(daemon=True, name="scanner")
        self.n = n  # honest members 0..n-1 (a hostile peer's records are not the scanner's business)
        self.workspace = Workspace(root, 0, n)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.verified = 0
        self.raced = 0  # record replaced or deleted between reading it and its checkpoint: detected, fine
        self.torn: List[str] = []
        self.seen: Dict[int, Tuple[int, int]] = {}  # member -> newest (iteration, frame) seen intact

    def run(self) -> None:
        while not self.stop.is_set():
            for idx, record in self.workspace.latest_records().items():
                try:
                    self.workspace.read_checkpoint_bytes(record)
                except CorruptRecordError as exc:
                    path = self.workspace.member_dir(idx) / f"{record.iteration:06d}.yaml"
                    try:
                        unchanged = read_record(path) == record
                    except CorruptRecordError:
                        unchanged = False
                    with self.lock:
                        if unchanged and "checksum mismatch" in str(exc):
                            self.torn.append(str(exc))
                        else:
                            self.raced += 1
                    continue
                with self.lock:
                    self.verified += 1
                    key = (record.iteration, record.frame)
                    if key > self.seen.get(idx, (-1, -1)):
                        self.seen[idx] = key
            time.sleep(0.02)

    def newest_seen(self, idx: int) -> Optional[Tuple[int, int]]:
        with self.lock:
            return self.seen.get(idx)


class Member:
    """One worker process of the population, restarted after every kill."""

    def __init__(self, idx: int, args: argparse.Namespace, ws: Path, runs: Path, logs: Path) -> None:
        self.idx = idx
        self.logs = logs
        self.starts = 0
        self.proc: Optional[subprocess.Popen] = None
        self.log_path: Optional[Path] = None
        self.cmd = [sys.executable, "-m", "pbt.train", "task=Pendulum", "pbt=pbt_default", f"pbt.policy_idx={idx}",
                    f"pbt.num_policies={args.workers + int(args.hostile)}", f"pbt.workspace={ws}",
                    f"pbt.interval_steps={args.interval_steps}", "pbt.start_after=0", "pbt.initial_delay=0",
                    f"pbt.ready_after={5 * args.interval_steps}", "pbt.significance=null",
                    f"pbt.restart_mode={args.restart_mode}", "pbt.heartbeat_interval=1", "pbt.heartbeat_timeout=30",
                    "max_frames=1000000000", f"num_envs={args.num_envs}", "sim_device=cpu", "rl_device=cpu",
                    "torch_threads=1", f"seed={args.seed * 100 + idx}", "experiment=soak", f"train_dir={runs}"]
        self.env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                        OMP_NUM_THREADS="1")

    def start(self) -> None:
        self.starts += 1
        self.log_path = self.logs / f"member{self.idx}_start{self.starts:03d}.log"
        with open(str(self.log_path), "wb") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=str(self.logs), env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def workspace_usage(root: Path, n: Optional[int] = None) -> Tuple[int, int, int]:
    """(bytes, files, largest checkpoint bytes) under the workspace (``n``: only members 0..n-1's
    directories and best copies, leaving out what a hostile peer planted)."""
    total = files = largest = 0
    honest = None if n is None else {f"{i:03d}" for i in range(n)} | {f"best{i}" for i in range(n)}
    for dirpath, _, names in os.walk(str(root)):
        top = os.path.relpath(dirpath, str(root)).split(os.sep)[0]
        if honest is not None and top not in honest:
            continue
        for name in names:
            try:
                size = os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            total += size
            files += 1
            if name.endswith(".pth"):
                largest = max(largest, size)
    return total, files, largest


def kill_mid_write(member: Member, member_dir: Path, timeout: float = 5.0) -> bool:
    """SIGSTOP the worker when a checkpoint/record temp file appears; SIGKILL it if the file is still
    there once it is stopped (the write is unfinished). False if no write was caught in time."""
    assert member.proc is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and member.alive():
        try:
            names = os.listdir(str(member_dir))
        except OSError:
            names = []
        if any(CHECKPOINT_TMP.search(n) for n in names):
            os.kill(member.proc.pid, signal.SIGSTOP)
            time.sleep(0.02)
            if any(CHECKPOINT_TMP.search(n) for n in os.listdir(str(member_dir))):
                os.kill(member.proc.pid, signal.SIGKILL)
                return True
            os.kill(member.proc.pid, signal.SIGCONT)
        time.sleep(0.0005)
    return False


def start_hostile(args: argparse.Namespace, ws: Path, workdir: Path, n: int) -> Dict[str, Any]:
    """Start benchmarks/hostile_peer.py as member n, with a sentinel directory outside the workspace."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import hostile_peer

    outside, marker, count = workdir / "outside", workdir / "pwned", workdir / "planted"
    hostile_peer.make_outside(outside)
    files = {str(p): p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    cmd = [sys.executable, str(REPO / "benchmarks" / "hostile_peer.py"), str(ws), "--attacker", str(n), "--victims",
           *[str(i) for i in range(n)], "--outside", str(outside), "--marker", str(marker), "--every",
           str(args.plant_every), "--seed", str(args.seed), "--count_file", str(count)]
    with open(str(workdir / "logs" / "hostile_peer.log"), "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    return {"proc": proc, "outside": outside, "files": files, "marker": marker, "count": count,
            "digest": hostile_peer.tree_digest(outside)}


def hostile_report(hostile: Dict[str, Any], logs: Path) -> Dict[str, Any]:
    """What the hostile peer achieved: refusals (fine), files outside changed and code run (never)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import hostile_peer

    outside: Path = hostile["outside"]
    now = {str(p): p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    touched = sorted(set(now) ^ set(hostile["files"]) | {k for k in now if hostile["files"].get(k) != now[k]})
    refusals = 0
    for path in logs.glob("member*.log"):
        refusals += len(re.findall(r"refused \(", path.read_text(errors="replace")))
    count = hostile["count"].read_text().strip() if hostile["count"].exists() else "0"
    return {"plantings": int(count or 0), "refusals_logged": refusals, "outside_files_touched": len(touched),
            "outside_unchanged": hostile_peer.tree_digest(outside) == hostile["digest"],
            "code_ran": hostile["marker"].exists(), "touched_examples": touched[:5]}


def newest_intact(root: Path, idx: int, n: int) -> Optional[Tuple[int, int]]:
    record = Workspace(root, idx, n).latest_record(idx, verify=True)
    return None if record is None else (record.iteration, record.frame)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    rng = random.Random(args.seed)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="pbt_soak_"))
    ws, runs, logs = workdir / "workspace", workdir / "runs", workdir / "logs"
    for d in (ws, runs, logs):
        d.mkdir(parents=True, exist_ok=True)
    n = args.workers
    members = [Member(i, args, ws, runs, logs) for i in range(n)]
    for member in members:
        member.start()
    scanner = Scanner(ws, n)
    scanner.start()
    hostile = start_hostile(args, ws, workdir, n) if args.hostile else None
    kills: List[Dict[str, Any]] = []
    pending: List[Dict[str, Any]] = []  # kills whose restart has not shown where it resumed yet
    unexpected: List[Dict[str, Any]] = []
    samples: List[Dict[str, float]] = []
    largest = 0
    t0 = time.monotonic()
    next_kill = t0 + 10.0 + rng.uniform(0.5, 1.5) * args.kill_every  # let the population get going
    next_sample = t0
    end = t0 + args.minutes * 60
    log.info("soak: %d workers, %.1f min, a kill every ~%.1f s; work dir %s", n, args.minutes, args.kill_every, workdir)
    try:
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                total, files, big = workspace_usage(ws, n)
                largest = max(largest, big)
                samples.append({"t": round(now - t0, 1), "bytes": total, "files": files})
                next_sample = now + args.sample_every
            for member in members:
                if member.proc is not None and member.proc.poll() is not None and not any(
                        k["member"] == member.idx and k["restarted"] is False for k in kills):
                    code = member.proc.returncode
                    unexpected.append({"member": member.idx, "code": code, "log_tail": member.log_text()[-2000:]})
                    log.error("member %d exited on its own with %s; restarting it", member.idx, code)
                    member.start()
            for kill in list(pending):
                member = members[kill["member"]]
                match = RESUMED.search(member.log_text())
                if match:
                    kill["resumed"] = [int(match.group(1)), int(match.group(2))]
                    pending.remove(kill)
                elif any(t in member.log_text() for t in FRESH) or not member.alive():
                    kill["resumed"] = None
                    pending.remove(kill)
            if now >= next_kill:
                ready = [m for m in members if m.alive() and not any(k["member"] == m.idx for k in pending)]
                if ready:
                    member = rng.choice(ready)
                    assert member.proc is not None
                    roll = rng.random()
                    kind = "SIGTERM" if roll < args.sigterm_fraction else (
                        "SIGKILL mid-write" if roll < args.sigterm_fraction + args.mid_write_fraction else "SIGKILL")
                    seen_before = scanner.newest_seen(member.idx)
                    if kind == "SIGKILL mid-write" and not kill_mid_write(member, ws / f"{member.idx:03d}"):
                        kind = "SIGKILL"  # no write caught in time: an ordinary random kill
                    if member.alive():
                        os.kill(member.proc.pid, signal.SIGTERM if kind == "SIGTERM" else signal.SIGKILL)
                    try:
                        code = member.proc.wait(60)
                    except subprocess.TimeoutExpired:
                        os.kill(member.proc.pid, signal.SIGKILL)
                        code = member.proc.wait(60)
                    intact = newest_intact(ws, member.idx, n)
                    kill = {"t": round(now - t0, 1), "member": member.idx, "kind": kind, "exit": code,
                            "seen_before": list(seen_before) if seen_before else None,
                            "intact_after": list(intact) if intact else None, "restarted": False}
                    kills.append(kill)
                    member.start()
                    kill["restarted"] = True
                    pending.append(kill)
                    log.info("t=%5.1f s: %s member %d (exit %s); newest intact record %s; restarted", now - t0, kind,
                             member.idx, code, intact)
                next_kill = time.monotonic() + rng.uniform(0.5, 1.5) * args.kill_every
            time.sleep(0.05)
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:  # let the last restarts show where they resumed
            for kill in list(pending):
                member = members[kill["member"]]
                match = RESUMED.search(member.log_text())
                if match or not member.alive():
                    kill["resumed"] = [int(match.group(1)), int(match.group(2))] if match else None
                    pending.remove(kill)
            time.sleep(0.2)
    finally:
        if hostile is not None:
            hostile["proc"].kill()
            hostile["proc"].wait(30)
        for member in members:
            if member.alive():
                os.kill(member.proc.pid, signal.SIGTERM)  # type: ignore[union-attr]
        for member in members:
            if member.proc is not None:
                try:
                    member.proc.wait(60)
                except subprocess.TimeoutExpired:
                    member.proc.kill()
                    member.proc.wait()
        scanner.stop.set()
        scanner.join(30)

    total, files, big = workspace_usage(ws, n)
    largest = max(largest, big)
    samples.append({"t": round(time.monotonic() - t0, 1), "bytes": total, "files": files})
    final_exits = [{"member": m.idx, "code": m.proc.returncode, "log_tail": m.log_text()[-2000:]}
                   for m in members if m.proc is not None
                   and m.proc.returncode not in (0, 128 + signal.SIGTERM, -signal.SIGTERM)]
    survived = lost = 0
    for kill in kills:
        resumed = kill.get("resumed")
        expected, seen = kill["intact_after"], kill["seen_before"]
        known = [tuple(x) for x in (expected, seen) if x is not None]
        if not known:  # killed before its first record: nothing to lose
            kill["lost"], kill["survived"] = False, True
        else:
            kill["lost"] = resumed is None or tuple(resumed) < max(known)
            kill["survived"] = resumed is not None and expected is not None and resumed == expected
        lost += kill["lost"]
        survived += kill["survived"]
    from hostile_peer import JUNK_FIRST  # benchmarks/ (this script's directory)

    damaged = 0
    for idx in range(n):
        member_ws = Workspace(ws, idx, n)
        for path in sorted((ws / f"{idx:03d}").glob("*.yaml")):
            if path.stem.isdigit() and int(path.stem) >= JUNK_FIRST:  # planted by a hostile peer, not ours
                continue
            try:
                member_ws.read_checkpoint_bytes(read_record(path))
            except CorruptRecordError as exc:
                damaged += 1
                log.error("damaged record on disk at the end: %s", exc)
    # the bound of pbt/storage/retention.py: member dirs + best copies + lineage/records (generous 64 kB each).
    bound = n * (DEFAULT_MAX_RECORDS + 2) * largest + n * 2 * largest + n * 64 * 1024 * (DEFAULT_MAX_RECORDS + 4)
    by_kind: Dict[str, int] = {}
    for kill in kills:
        by_kind[kill["kind"]] = by_kind.get(kill["kind"], 0) + 1
    report = {
        "workers": n, "minutes": args.minutes, "kill_every_s": args.kill_every, "restart_mode": args.restart_mode,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "kills": len(kills), "kills_by_kind": by_kind, "kills_survived": survived, "records_lost": lost,
        "torn_reads": len(scanner.torn), "torn_examples": scanner.torn[:3], "verified_reads": scanner.verified,
        "raced_reads_detected": scanner.raced, "damaged_records_at_end": damaged,
        "unexpected_exits": unexpected, "workspace_bytes_max": max(s["bytes"] for s in samples),
        "workspace_bytes_final": samples[-1]["bytes"], "workspace_files_max": max(s["files"] for s in samples),
        "largest_checkpoint_bytes": largest, "workspace_bytes_bound": bound,
        "within_bound": max(s["bytes"] for s in samples) <= bound, "samples": samples, "kill_log": kills,
        "workdir": str(workdir), "final_exits_not_clean": final_exits,
    }
    if hostile is not None:
        report["hostile"] = hostile_report(hostile, logs)
    if not args.keep and not args.workdir:
        shutil.rmtree(str(workdir), ignore_errors=True)
    return report


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] %(message)s")
    args = parse_args(argv)
    report = run(args)
    log.info("kills: %d %s; survived (resumed from the newest intact record): %d; records lost: %d; torn reads: %d "
             "(of %d verified reads; %d races detected and retried); damaged records at the end: %d; unexpected "
             "exits: %d", report["kills"], report["kills_by_kind"], report["kills_survived"], report["records_lost"],
             report["torn_reads"], report["verified_reads"], report["raced_reads_detected"],
             report["damaged_records_at_end"], len(report["unexpected_exits"]))
    if "hostile" in report:
        h = report["hostile"]
        log.info("hostile peer: %d plantings; honest members crashed: %d; refusals logged: %d; files outside the "
                 "workspace touched: %d; planted code ran: %s", h["plantings"], len(report["unexpected_exits"]),
                 h["refusals_logged"], h["outside_files_touched"], h["code_ran"])
    log.info("workspace: max %.1f MB, final %.1f MB, max %d files; bound %.1f MB (largest checkpoint %d kB): %s",
             report["workspace_bytes_max"] / 1e6, report["workspace_bytes_final"] / 1e6, report["workspace_files_max"],
             report["workspace_bytes_bound"] / 1e6, report["largest_checkpoint_bytes"] // 1024,
             "within" if report["within_bound"] else "EXCEEDED")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
        log.info("report written to %s", args.out)
    bad = (report["records_lost"] or report["torn_reads"] or report["damaged_records_at_end"]
           or report["unexpected_exits"] or not report["within_bound"])
    if "hostile" in report:
        bad = bad or report["hostile"]["outside_files_touched"] or report["hostile"]["code_ran"] or (
            not report["hostile"]["outside_unchanged"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
