"""The store helpers that make one workspace operation out of a store's native requests: a
directory store renames in one step, a flat object store (no directories: an in-memory stand-in
for S3 here, the real one in tests/storage/s3/) copies each object and deletes the originals.
No torch: runs on Python 3.8."""
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pbt.errors import WorkspaceError
from pbt.storage.backend import DirectoryStore, NotFound, ObjectInfo, exists, holds_prefix, move
from pbt.storage.local import LocalStore


class FlatStore:
    """Keys and bytes, nothing else: what an object store offers (no directories, no rename)."""

    def __init__(self) -> None:
        self.objects: Dict[str, bytes] = {}
        self.copies: List[str] = []

    def list(self, prefix: str) -> List[str]:
        start = f"{prefix}/" if prefix else ""
        return sorted({k[len(start) :].split("/")[0] for k in self.objects if k.startswith(start)})

    def stat(self, key: str) -> Optional[ObjectInfo]:
        return ObjectInfo(len(self.objects[key]), 0.0) if key in self.objects else None

    def get(self, key: str, max_bytes: Optional[int] = None) -> bytes:
        if key not in self.objects:
            raise NotFound(key)
        return self.objects[key]

    def copy(self, src: str, dst: str) -> None:
        self.copies.append(src)
        self.objects[dst] = self.get(src)

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def path(self, key: str) -> str:
        return f"mem://{key}"


def test_a_flat_store_has_no_directories_and_moves_a_prefix_object_by_object() -> None:
    store = FlatStore()
    store.objects = {"000/a": b"1", "000/log/p1": b"2", "0001/x": b"other prefix"}
    assert not isinstance(store, DirectoryStore)
    assert holds_prefix(store, "000") and exists(store, "000") and exists(store, "000/log/p1")  # type: ignore[arg-type]
    assert not exists(store, "001") and not holds_prefix(store, "000/a")  # type: ignore[arg-type]
    move(store, "000", "000.old-1")  # type: ignore[arg-type]
    assert store.objects == {"000.old-1/a": b"1", "000.old-1/log/p1": b"2", "0001/x": b"other prefix"}
    assert sorted(store.copies) == ["000/a", "000/log/p1"]  # only what was under the prefix


def test_a_move_never_overwrites_its_target() -> None:
    store = FlatStore()
    store.objects = {"000/a": b"1", "000.old-1/a": b"old"}
    with pytest.raises(WorkspaceError, match="the target exists"):
        move(store, "000", "000.old-1")  # type: ignore[arg-type]
    assert store.objects == {"000/a": b"1", "000.old-1/a": b"old"} and not store.copies


def test_a_move_of_one_object_copies_that_object_only() -> None:
    store = FlatStore()
    store.objects = {"000/lineage.jsonl": b"x", "000/lineage.jsonl.d/p1": b"y"}
    move(store, "000/lineage.jsonl", "000/lineage.jsonl.foreign-1")  # type: ignore[arg-type]
    assert store.objects == {"000/lineage.jsonl.foreign-1": b"x", "000/lineage.jsonl.d/p1": b"y"}


def test_a_directory_store_renames_a_directory_in_one_step(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.ensure_dir("000")
    store.put_atomic("000/a", b"1")
    assert isinstance(store, DirectoryStore) and holds_prefix(store, "000") and not holds_prefix(store, "000/a")
    move(store, "000", "000.old-1")
    assert not exists(store, "000") and (tmp_path / "000.old-1" / "a").read_bytes() == b"1"
    store.ensure_dir("001")
    with pytest.raises(WorkspaceError, match="the target exists"):
        move(store, "001", "000.old-1")


def test_a_local_copy_is_a_new_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put_atomic("a", b"1")
    store.copy("a", "b")
    store.put_atomic("a", b"2")
    assert store.get("b") == b"1"


def test_a_local_root_exists_only_as_a_directory_or_file_and_a_refused_path_does_not_exist(tmp_path: Path) -> None:
    assert not exists(LocalStore(tmp_path / "missing"), "")
    assert exists(LocalStore(tmp_path), "")
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a").write_bytes(b"1")
    (tmp_path / "link").symlink_to(tmp_path / "real")  # a member directory a peer made a symlink
    store = LocalStore(tmp_path)
    assert exists(store, "real/a") and not exists(store, "link/a")  # never followed, never an error


def test_open_reader_says_whether_the_workspace_is_missing_or_a_file(tmp_path: Path) -> None:
    from pbt.tools.snapshot import open_reader

    with pytest.raises(WorkspaceError, match="does not exist"):
        open_reader(tmp_path / "missing")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(WorkspaceError, match="is a file, not a workspace directory"):
        open_reader(tmp_path / "file")
