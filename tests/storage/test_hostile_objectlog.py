"""The object-store log (pbt/storage/objectlog.py) with names and sizes a peer planted (issue 25,
item 6): sequence numbers outside the fixed format and range, and parts beyond a gap, are ignored
(the writer's own parts stay ten digits and readable); compaction GETs are capped. An in-memory
store stands in for S3 (the real one: tests/storage/s3/). No torch: runs on Python 3.8."""
from typing import Dict, List, Optional, Tuple

import pytest

from pbt.storage.backend import NotFound, Refused
from pbt.storage.objectlog import MAX_PART_BYTES, ObjectLog, log_dir, parse_log_names


class MemoryStore:
    def __init__(self) -> None:
        self.objects: Dict[str, bytes] = {}
        self.gets: List[Tuple[str, Optional[int]]] = []

    def list_objects(self, prefix: str, fresh: bool = True) -> List[Tuple[str, int]]:
        return sorted((k, len(v)) for k, v in self.objects.items() if k.startswith(prefix))

    def get(self, key: str, max_bytes: Optional[int] = None) -> bytes:
        self.gets.append((key, max_bytes))
        if key not in self.objects:
            raise NotFound(key)
        if max_bytes is not None and len(self.objects[key]) > max_bytes:
            raise Refused(f"{key}: over {max_bytes}")
        return self.objects[key]

    def create_exclusive(self, key: str, data: bytes) -> bool:
        if key in self.objects:
            return False
        self.objects[key] = data
        return True

    def put_atomic(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def path(self, key: str) -> str:
        return f"mem://{key}"

    def refuse(self, key: str, reason: str) -> Exception:
        return Refused(f"{key}: {reason}")


KEY = "000/lineage.jsonl"


@pytest.mark.parametrize("planted", ["p9999999999", "p0000000500", "b9999999999", "p00000000001", "px000000001"])
def test_a_planted_sequence_number_never_stops_the_log(planted: str) -> None:
    store = MemoryStore()
    store.objects[f"{log_dir(KEY)}/{planted}"] = b""
    log = ObjectLog(store, compact_every=4)
    lines = [b'{"iteration": %d}\n' % i for i in range(40)]
    for line in lines:
        log.append(KEY, line)  # died at the 16th append: "other processes keep writing"
        assert ObjectLog(store).read(KEY, 1 << 20).count(b"\n") == lines.index(line) + 1
    assert ObjectLog(store).read(KEY, 1 << 20) == b"".join(lines)
    ours = [name.rpartition("/")[2] for name in store.objects if not name.endswith("/" + planted)]
    assert ours and all(len(name) == 11 for name in ours)  # ten-digit sequence numbers
    assert f"{log_dir(KEY)}/{planted}" in store.objects  # not ours: ignored, not deleted


def test_parts_beyond_a_gap_or_bases_beyond_the_range_are_ignored() -> None:
    base, live, covered = parse_log_names(["b0000000003", "p0000000004", "p0000000005", "p0000000009",
                                          "b9999999999", "p0000000002"])
    assert (base, live, covered) == (3, [4, 5], ["p0000000002"])


def test_compaction_never_downloads_a_huge_part_whole() -> None:
    store = MemoryStore()
    log = ObjectLog(store, compact_every=3)
    log.append(KEY, b"a\n")
    store.objects[f"{log_dir(KEY)}/p0000000001"] = b"x" * (MAX_PART_BYTES + 1)  # planted in the sequence
    log.append(KEY, b"b\n")
    log.append(KEY, b"c\n")  # the third part: compaction is tried, and refused on the huge part
    assert all(cap is not None for _, cap in store.gets)
    assert all(not name.rpartition("/")[2].startswith("b") for name in store.objects)  # nothing folded
    assert f"{log_dir(KEY)}/p0000000000" in store.objects  # nothing lost
