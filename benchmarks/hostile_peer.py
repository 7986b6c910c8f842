"""A hostile peer: keeps planting into a shared PBT workspace everything issue 11 lists, so the honest
members beside it can be checked to never run code, crash, hang or touch a file outside the workspace.

It plays member ``--attacker`` (its directory, a leader record whose checkpoint is each kind of
attack, garbage records, FIFOs, symlinks, sparse huge files, NUL names) and tampers with the victims'
best and lineage files (a symlink to a directory or file outside the workspace in their place).
Records of the victims are never touched. Used by ``benchmarks/soak.py --hostile`` and
``tests/faults/test_faults_files.py``; ``plant_*`` functions are importable.

    python benchmarks/hostile_peer.py WORKSPACE --attacker 3 --victims 0 1 2 --outside DIR --marker FILE
"""
import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import pickle
import random
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

log = logging.getLogger("hostile_peer")

SPARSE_BYTES = 3 * 1024 ** 3


class Payload:
    """Unpickled, it would run ``touch <marker>``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def _binunicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + len(data).to_bytes(4, "little") + data


def _dtype(spec: str, state: bytes) -> bytes:
    return b"cnumpy\ndtype\n" + _binunicode(spec) + b"\x89\x88\x87R(" + state + b"tb"


def _torch_zip(pickle_bytes: bytes) -> bytes:
    """A torch zip checkpoint whose data.pkl is ``pickle_bytes`` (the layout torch.save writes)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickle_bytes)
        archive.writestr("archive/byteorder", b"little")
        archive.writestr("archive/version", b"3\n")
        archive.writestr("archive/.data/serialization_id", b"0" * 40)
    return out.getvalue()


def numpy_object_dtype_checkpoint() -> bytes:
    """A structured numpy dtype with an object field, then a scalar of it from 8 attacker bytes: a
    weights-only load that allowed numpy's reconstructors built it, and the next use dereferenced
    0x4141414141414141."""
    obj = _dtype("O8", b"K\x03" + _binunicode("|") + b"NNN" + b"J\xff\xff\xff\xff" * 2 + b"K\x3f")
    fields = b"}" + _binunicode("a") + obj + b"K\x00\x86s"
    void = _dtype("V8", b"K\x03" + _binunicode("|") + b"N" + _binunicode("a") + b"\x85" + fields + b"K\x08K\x01K\x00")
    data = (b"\x80\x02}" + _binunicode("x") + b"cnumpy._core.multiarray\nscalar\n" + void
            + b"c_codecs\nencode\n" + _binunicode("A" * 8) + _binunicode("latin1") + b"\x86R\x86Rs"
            + _binunicode("model") + b"}s.")
    return _torch_zip(data)


def pickle_checkpoint(marker: str) -> bytes:
    return _torch_zip(pickle.dumps({"model": Payload(marker)}, protocol=2))


def record_text(idx: int, iteration: int, checkpoint: str, checksum: str, objective: object = 1e9,
                overrides: Optional[Dict[str, object]] = None) -> bytes:
    data: Dict[str, object] = {"policy_idx": idx, "iteration": iteration, "frame": 4096 * (iteration + 1),
                               "objective": objective, "params": {"train.params.config.learning_rate": 3e-4},
                               "checkpoint": checkpoint, "checksum": checksum, "time": time.time(),
                               "episode_returns": [float(objective)] * 64 if isinstance(objective, float) else [],
                               "frames_since_replace": 10 ** 9, "version": 1}
    data.update(overrides or {})
    return json.dumps(data).encode()


def _parent(path: Path) -> None:
    if not path.parent.is_symlink():
        path.parent.mkdir(parents=True, exist_ok=True)


def _put(path: Path, data: bytes) -> None:
    _parent(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.plant")
    tmp.write_bytes(data)
    os.replace(str(tmp), str(path))


def _clear(path: Path) -> None:
    if os.path.lexists(str(path)):
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                _clear(child)
            path.rmdir()
        else:
            path.unlink()


def _place(path: Path, make: Callable[[Path], None]) -> None:
    _parent(path)
    _clear(path)
    make(path)


JUNK_FIRST = 900000
"""Iteration of the first junk record planted into a victim's directory (a soak leaves them out)."""


class Planter:
    """Plants one attack per call to :meth:`step`, cycling through all of them (in random order)."""

    def __init__(self, ws: Path, attacker: int, victims: Sequence[int], outside: Path, marker: Path,
                 seed: int = 0) -> None:
        self.ws, self.attacker, self.victims = ws, attacker, list(victims)
        self.outside, self.marker = outside, marker
        self.rng = random.Random(seed)
        self.iteration = 10 ** 5
        self.planted = 0
        self.dir = ws / f"{attacker:03d}"
        self.attacks: List[Callable[[], None]] = [
            self.leader_pickle, self.leader_numpy_dtype, self.leader_fifo, self.leader_symlink, self.leader_sparse,
            self.leader_nul_name, self.leader_directory, self.deep_block_yaml, self.deep_flow_yaml,
            self.random_record, self.mistyped_record, self.fifo_record, self.fifo_heartbeat, self.fifo_lock,
            self.symlinked_lineage, self.symlinked_own_dir, self.victim_best_symlink, self.victim_lineage_symlink,
            self.overflow_record, self.overflow_heartbeat, self.victim_lineage_overflow, self.victim_junk_records,
            self.future_record, self.huge_network_record,
        ]
        self.order: List[Callable[[], None]] = []

    def step(self) -> str:
        if not self.order:
            self.order = list(self.attacks)
            self.rng.shuffle(self.order)
        attack = self.order.pop()
        try:
            attack()
        except OSError as exc:  # a victim moved things meanwhile: try another next time
            log.debug("planting %s failed: %s", attack.__name__, exc)
        self.planted += 1
        self.prune()
        return attack.__name__

    def prune(self, keep: int = 40) -> None:
        """Remove its own older plantings, so its directory stays small (the attack is in each file)."""
        if self.dir.is_symlink() or not self.dir.is_dir():
            return
        for path in self.dir.iterdir():
            stem = path.name.split(".")[0]
            if stem.isdigit() and int(stem) < self.iteration - keep:
                with contextlib.suppress(OSError):
                    _clear(path)

    def _leader(self, name: str, make: Callable[[Path], None], checksum: str = "0" * 64) -> None:
        self.iteration += 1
        _place(self.dir / name, make)
        _put(self.dir / f"{self.iteration:06d}.yaml", record_text(self.attacker, self.iteration, name, checksum))

    def _leader_bytes(self, data: bytes) -> None:
        name = f"{self.iteration + 1:06d}.pth"
        self._leader(name, lambda p: _put(p, data), hashlib.sha256(data).hexdigest())

    def leader_pickle(self) -> None:
        self._leader_bytes(pickle_checkpoint(str(self.marker)))

    def leader_numpy_dtype(self) -> None:
        self._leader_bytes(numpy_object_dtype_checkpoint())

    def leader_fifo(self) -> None:
        self._leader(f"{self.iteration + 1:06d}.pth", lambda p: os.mkfifo(str(p)))

    def leader_symlink(self) -> None:
        self._leader(f"{self.iteration + 1:06d}.pth", lambda p: os.symlink(str(self.outside / "rcfile"), str(p)))

    def leader_sparse(self) -> None:
        def make(path: Path) -> None:
            with open(str(path), "wb") as fobj:
                fobj.truncate(SPARSE_BYTES)
        self._leader(f"{self.iteration + 1:06d}.pth", make)

    def leader_nul_name(self) -> None:
        self.iteration += 1
        _put(self.dir / f"{self.iteration:06d}.yaml", record_text(self.attacker, self.iteration, "0\x00.pth", "0" * 64))

    def leader_directory(self) -> None:
        self._leader(f"{self.iteration + 1:06d}.pth", lambda p: p.mkdir())

    def deep_block_yaml(self) -> None:
        self.iteration += 1
        _put(self.dir / f"{self.iteration:06d}.yaml", b"- " * 50000 + b"x\n")

    def deep_flow_yaml(self) -> None:
        self.iteration += 1
        _put(self.dir / f"{self.iteration:06d}.yaml", b"[" * 100000 + b"]" * 100000)

    def random_record(self) -> None:
        self.iteration += 1
        _put(self.dir / f"{self.iteration:06d}.yaml", os.urandom(self.rng.randint(0, 4096)))

    def mistyped_record(self) -> None:
        self.iteration += 1
        bad = self.rng.choice([{"objective": "1_000"}, {"objective": True}, {"iteration": 3.9},
                               {"policy_idx": 1.7}, {"params": [["a", 1]]}, {"frame": -5},
                               {"episode_returns": ["x"]}])
        _put(self.dir / f"{self.iteration:06d}.yaml",
             record_text(self.attacker, self.iteration, f"{self.iteration:06d}.pth", "0" * 64, overrides=bad))

    def fifo_record(self) -> None:
        self.iteration += 1
        _place(self.dir / f"{self.iteration:06d}.yaml", lambda p: os.mkfifo(str(p)))

    def fifo_heartbeat(self) -> None:
        _place(self.dir / "heartbeat", lambda p: os.mkfifo(str(p)))

    def fifo_lock(self) -> None:
        _place(self.dir / "lock", lambda p: os.mkfifo(str(p)))

    def symlinked_lineage(self) -> None:
        _place(self.dir / "lineage.jsonl", lambda p: os.symlink(str(self.outside / "rcfile"), str(p)))

    def symlinked_own_dir(self) -> None:
        best = self.ws / f"best{self.attacker}"
        _place(best, lambda p: os.symlink(str(self.outside / "dir"), str(p)))

    def victim_best_symlink(self) -> None:
        best = self.ws / f"best{self.rng.choice(self.victims)}"
        if best.is_dir() and not best.is_symlink():
            os.rename(str(best), f"{best}.stolen-{self.planted}")
        _place(best, lambda p: os.symlink(str(self.outside / "dir"), str(p)))

    def victim_lineage_symlink(self) -> None:
        lineage = self.ws / f"{self.rng.choice(self.victims):03d}" / "lineage.jsonl"
        if lineage.parent.is_dir():
            if lineage.exists() and not lineage.is_symlink():
                os.rename(str(lineage), f"{lineage}.stolen-{self.planted}")
            _place(lineage, lambda p: os.symlink(str(self.outside / "rcfile"), str(p)))


    # -- numbers and names (issue 25) ------------------------------------------------------------

    def overflow_record(self) -> None:
        """A leader whose numbers overflow a float (or any statistic over them)."""
        self.iteration += 1
        bad = self.rng.choice([{"objective": 10 ** 400}, {"time": 10 ** 400}, {"episode_returns": [1.0, 10 ** 400]},
                               {"episode_returns": [1e308] * 8}, {"history": {"1": 1e308, "2": 1e308}},
                               {"frame": 2 ** 62 - 1}])
        _put(self.dir / f"{self.iteration:06d}.yaml",
             record_text(self.attacker, self.iteration, f"{self.iteration:06d}.pth", "0" * 64, overrides=bad))

    def overflow_heartbeat(self) -> None:
        _put(self.dir / "heartbeat", self.rng.choice([
            b'{"pid": Infinity, "host": "h", "token": "t", "time": 1.0}',
            b'{"pid": 1, "host": "h", "token": "t", "time": 1e400, "state": "running"}',
            b'{"pid": 1, "host": "h", "token": "t", "time": 1' + b"0" * 400 + b'}']))

    def victim_lineage_overflow(self) -> None:
        """One line of overflowing numbers appended to a victim's lineage (its own lines stay)."""
        lineage = self.ws / f"{self.rng.choice(self.victims):03d}" / "lineage.jsonl"
        if lineage.is_file() and not lineage.is_symlink():
            with open(str(lineage), "ab") as fobj:
                fobj.write(b'{"policy_idx": 0, "iteration": 1' + b"0" * 400 + b', "time": 1e20, "action": "keep"}\n')

    def victim_junk_records(self) -> None:
        """25 empty record files named above a victim's own, which retention used to rank first."""
        victim = self.ws / f"{self.rng.choice(self.victims):03d}"
        if victim.is_dir() and not victim.is_symlink():
            for k in range(25):
                _put(victim / f"{JUNK_FIRST + k:06d}.yaml", b"")

    def future_record(self) -> None:
        """A leader dated far in the future, with a frame count no member could have trained."""
        self.iteration += 1
        _put(self.dir / f"{self.iteration:06d}.yaml", record_text(
            self.attacker, self.iteration, f"{self.iteration:06d}.pth", "0" * 64,
            overrides={"time": time.time() + 1e7, "frame": 2 ** 53}))

    def huge_network_record(self) -> None:
        """A leader naming a network of 2 x 65536 units (a 16 GiB build)."""
        self.iteration += 1
        _put(self.dir / f"{self.iteration:06d}.yaml", record_text(
            self.attacker, self.iteration, f"{self.iteration:06d}.pth", "0" * 64,
            overrides={"network": {"units": [65536, 65536], "activation": "relu"}}))


def make_outside(outside: Path) -> None:
    """A sentinel directory outside the workspace, which the symlinks point into."""
    (outside / "dir").mkdir(parents=True, exist_ok=True)
    (outside / "rcfile").write_text("# a shell start-up file\n")
    for i in range(3):
        (outside / "dir" / f"file{i}").write_text(f"precious {i}\n")


def tree_digest(root: Path) -> str:
    """sha256 over every name, type, size, mode and content under ``root`` (symlinks not followed)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(str(root))):
        dirnames.sort()
        for name in sorted(filenames + dirnames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest.update(f"{os.path.relpath(path, str(root))}:{st.st_mode}:{st.st_size}:{st.st_mtime_ns}".encode())
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as fobj:
                    digest.update(fobj.read())
    return digest.hexdigest()


def main(argv: Sequence[str] = ()) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workspace")
    p.add_argument("--attacker", type=int, required=True)
    p.add_argument("--victims", type=int, nargs="+", required=True)
    p.add_argument("--outside", required=True)
    p.add_argument("--marker", required=True)
    p.add_argument("--every", type=float, default=0.2, help="seconds between two plantings")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count_file", default=None, help="write the number of plantings here as they happen")
    args = p.parse_args(list(argv) or None)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][hostile_peer] %(message)s")
    if not Path(args.outside).exists():
        make_outside(Path(args.outside))
    planter = Planter(Path(args.workspace), args.attacker, args.victims, Path(args.outside), Path(args.marker),
                      args.seed)
    while True:
        planter.step()
        if args.count_file:
            _put(Path(args.count_file), str(planter.planted).encode())
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
