"""The S3 store against a real SeaweedFS: the Store protocol, conditional creation, capped reads,
refusals, the one-listing scan and its request budget, the lineage log without append."""
import threading
from typing import List

import pytest

from pbt.errors import ConfigError, WorkspaceError
from pbt.write_errors import is_io_error
from pbt.storage import NotFound, Refused
from pbt.storage.backend import exists, holds_prefix, move
from pbt.storage.objectlog import COMPACT_EVERY
from pbt.storage.reader import open_store
from pbt.storage.s3 import S3Store
from pbt.storage.s3_client import parse_s3_url


def bucket_and_prefix(url: str):  # noqa: ANN201
    return parse_s3_url(url)


def plant(raw, url: str, key: str, data: bytes) -> None:  # noqa: ANN001
    bucket, prefix = parse_s3_url(url)
    raw.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=data)


@pytest.mark.s3
def test_open_store_picks_the_s3_store_for_an_s3_url(s3_url: str) -> None:
    store = open_store(s3_url)
    assert isinstance(store, S3Store)
    assert store.path("000/lock") == f"{s3_url}/000/lock"


@pytest.mark.parametrize("url, fragment", [
    ("s3://ab/ws", "not a valid bucket name"),
    ("s3://Upper/ws", "not a valid bucket name"),
    ("s3://bucket/a/../b", "'..'"),
    ("s3:///ws", "not a valid bucket name"),
])
def test_bad_s3_urls_are_config_errors_saying_how_to_write_them(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="s3://"):
        S3Store(url)
    with pytest.raises(ConfigError) as info:
        S3Store(url)
    assert fragment in str(info.value)


@pytest.mark.s3
def test_put_get_list_stat_delete_round_trip(s3_url: str) -> None:
    store = S3Store(s3_url)
    store.put_atomic("000/000001.yaml", b"a: 1\n")
    store.put_atomic("000/sub/x", b"x")
    store.put_atomic("best0/y", b"")
    assert store.get("000/000001.yaml") == b"a: 1\n"
    assert store.get("best0/y", 10) == b""  # an empty object read with a cap
    assert sorted(store.list("")) == ["000", "best0"]
    assert sorted(store.list("000")) == ["000001.yaml", "sub"]
    assert store.list("nothing") == []
    info = store.stat("000/000001.yaml")
    assert info is not None and info.size == 5 and info.regular and info.version
    assert store.stat("000/missing") is None
    assert holds_prefix(store, "000") and not holds_prefix(store, "000/000001.yaml")
    assert exists(store, "000") and exists(store, "000/sub/x") and not exists(store, "001")
    store.put_atomic("000/000001.yaml", b"a: 2\n")
    assert store.stat("000/000001.yaml").version != info.version  # type: ignore[union-attr]
    store.delete("000/000001.yaml")
    store.delete("000/000001.yaml")  # a missing one is fine
    with pytest.raises(NotFound):
        store.get("000/000001.yaml")


@pytest.mark.s3
def test_create_exclusive_has_exactly_one_winner_among_racing_threads(s3_url: str) -> None:
    store = S3Store(s3_url)
    results: List[bool] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        results.append(store.create_exclusive("000/lock", f"{i}".encode()))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    winner = results.index(True)  # noqa: F841 - the stored bytes are one racer's, whole
    assert store.get("000/lock") in {f"{i}".encode() for i in range(8)}


@pytest.mark.s3
def test_a_capped_read_is_refused_from_the_headers_without_reading_the_body(s3_url: str, raw) -> None:  # noqa: ANN001
    store = S3Store(s3_url)
    plant(raw, s3_url, "000/000001.pth", b"\0" * 5_000_000)
    with pytest.raises(Refused, match="5000000 bytes, more than the 1000"):
        store.get("000/000001.pth", 1000)
    assert store.bytes_received == 0
    assert store.get("000/000001.pth", 5_000_000)[:1] == b"\0"


@pytest.mark.parametrize("key", ["000/../x", "000/./x", "000//x", "000/a\x00b", "000/a\nb", "x" * 256])
@pytest.mark.s3
def test_foreign_names_are_refused_before_any_request(s3_url: str, key: str) -> None:
    store = S3Store(s3_url)
    for op in (lambda: store.get(key), lambda: store.put_atomic(key, b"1"), lambda: store.stat(key),
               lambda: store.create_exclusive(key, b"1")):
        with pytest.raises(Refused, match="bad name"):
            op()
    assert sum(store.requests.values()) == 0


@pytest.mark.s3
def test_listed_names_with_control_characters_are_refused_and_left_out(s3_url: str, raw) -> None:  # noqa: ANN001
    store = S3Store(s3_url)
    plant(raw, s3_url, "000/ok.yaml", b"1")
    plant(raw, s3_url, "000/bad\x01name", b"1")
    assert store.list("000") == ["ok.yaml"]
    with store.scan():
        assert store.list("000") == ["ok.yaml"]


def test_an_unreachable_server_is_an_io_error_the_member_rides_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    store = S3Store("s3://pbt-nowhere/ws")
    with pytest.raises(WorkspaceError, match="cannot reach the object store at http://127.0.0.1:9") as info:
        store.put_atomic("000/000001.yaml", b"1")
    assert is_io_error(info.value)


@pytest.mark.s3
def test_a_missing_bucket_says_how_to_create_it(s3_url: str) -> None:
    store = S3Store("s3://pbt-no-such-bucket/ws")
    with pytest.raises(WorkspaceError, match=r"does not exist.*aws s3 mb s3://pbt-no-such-bucket") as info:
        store.put_atomic("000/x", b"1")
    assert is_io_error(info.value)


@pytest.mark.s3
def test_a_move_copies_a_prefix_server_side_and_refuses_an_existing_target(s3_url: str) -> None:
    store = S3Store(s3_url)
    store.put_atomic("000/a", b"1")
    store.put_atomic("000/d/b", b"2")
    move(store, "000", "000.old-1")
    assert not exists(store, "000") and store.requests["copy_object"] == 2
    assert store.get("000.old-1/a") == b"1" and store.get("000.old-1/d/b") == b"2"
    store.put_atomic("001/a", b"3")
    with pytest.raises(WorkspaceError, match="the target exists"):
        move(store, "001", "000.old-1")


@pytest.mark.s3
def test_a_scan_answers_list_and_stat_from_one_listing_and_skips_unchanged_small_objects(s3_url: str) -> None:
    writer = S3Store(s3_url)
    for idx in range(6):
        writer.put_atomic(f"{idx:03d}/000001.pth", b"w" * 100)
        writer.put_atomic(f"{idx:03d}/000001.yaml", b"r: 1\n")
    reader = S3Store(s3_url)

    def one_pass() -> None:
        with reader.scan():
            for idx in range(6):
                assert reader.list(f"{idx:03d}") == ["000001.pth", "000001.yaml"]
                assert reader.stat(f"{idx:03d}/000001.pth").size == 100  # type: ignore[union-attr]
                assert reader.get(f"{idx:03d}/000001.yaml", 1000) == b"r: 1\n"

    one_pass()
    assert reader.requests == {"list_objects_v2": 1, "get_object": 6}
    reader.requests.clear()
    writer.put_atomic("003/000001.yaml", b"r: 2\n")
    with reader.scan():
        assert reader.get("003/000001.yaml", 1000) == b"r: 2\n"
        assert reader.get("004/000001.yaml", 1000) == b"r: 1\n"
    assert reader.requests == {"list_objects_v2": 1, "get_object": 1}  # only the changed one is fetched


@pytest.mark.s3
def test_a_scan_asks_the_server_for_what_its_listing_lacks(s3_url: str) -> None:
    store = S3Store(s3_url)
    with store.scan():
        other = S3Store(s3_url)
        other.put_atomic("000/000001.pth", b"c")  # written after the listing was taken
        info = store.stat("000/000001.pth")
    assert info is not None and info.size == 1


@pytest.mark.s3
def test_a_scan_is_private_to_its_thread(s3_url: str) -> None:
    store = S3Store(s3_url)
    with store.scan():
        S3Store(s3_url).put_atomic("000/heartbeat", b"{}")
        seen: List[List[str]] = []
        thread = threading.Thread(target=lambda: seen.append(store.list("000")))
        thread.start()
        thread.join()
        assert seen == [["heartbeat"]]  # the heartbeat thread never sees the scan's old listing
        assert store.list("000") == []


@pytest.mark.s3
def test_an_appended_log_reads_back_in_order_and_stays_a_bounded_number_of_objects(s3_url: str) -> None:
    store = S3Store(s3_url)
    lines = [f'{{"n": {i}}}\n'.encode() for i in range(3 * COMPACT_EVERY + 5)]
    for line in lines:
        store.append("000/lineage.jsonl", line)
    assert store.read_appended("000/lineage.jsonl", 1 << 20) == b"".join(lines)
    objects = store.list_objects("000/lineage.jsonl")
    assert len(objects) <= COMPACT_EVERY + 1
    resumed = S3Store(s3_url)  # a restarted member continues the sequence
    resumed.append("000/lineage.jsonl", b'{"n": "last"}\n')
    assert store.read_appended("000/lineage.jsonl", 1 << 20) == b"".join(lines) + b'{"n": "last"}\n'


@pytest.mark.s3
def test_a_log_left_mid_compaction_reads_back_without_duplicates(s3_url: str, raw) -> None:  # noqa: ANN001
    store = S3Store(s3_url)
    for i in range(3):
        store.append("000/lineage.jsonl", f"{i}\n".encode())
    # A writer killed after writing the base but before deleting the parts it covers:
    plant(raw, s3_url, "000/lineage.jsonl.d/b0000000002", b"0\n1\n2\n")
    store2 = S3Store(s3_url)
    store2.append("000/lineage.jsonl", b"3\n")
    assert store2.read_appended("000/lineage.jsonl", 1 << 20) == b"0\n1\n2\n3\n"


@pytest.mark.s3
def test_a_plain_log_object_copied_from_a_filesystem_is_read_first(s3_url: str, raw) -> None:  # noqa: ANN001
    plant(raw, s3_url, "000/lineage.jsonl", b"old\n")
    store = S3Store(s3_url)
    store.append("000/lineage.jsonl", b"new\n")
    assert store.read_appended("000/lineage.jsonl", 1 << 20) == b"old\nnew\n"


@pytest.mark.s3
def test_a_log_over_its_cap_is_refused(s3_url: str) -> None:
    store = S3Store(s3_url)
    store.append("000/lineage.jsonl", b"x" * 100 + b"\n")
    with pytest.raises(Refused, match="more than the 50"):
        store.read_appended("000/lineage.jsonl", 50)
    with pytest.raises(NotFound):
        store.read_appended("001/lineage.jsonl", 50)


@pytest.mark.s3
def test_a_log_compacted_after_the_scans_listing_still_reads_back_whole(s3_url: str) -> None:
    writer = S3Store(s3_url)
    lines = [f"{i}\n".encode() for i in range(COMPACT_EVERY - 1)]
    for line in lines:
        writer.append("000/lineage.jsonl", line)
    reader = S3Store(s3_url)
    with reader.scan():
        writer.append("000/lineage.jsonl", b"last\n")  # the 16th part: its writer compacts the log now
        assert reader.read_appended("000/lineage.jsonl", 1 << 20) == b"".join(lines) + b"last\n"


@pytest.mark.s3
def test_a_fixed_size_population_prefetches_only_its_own_member_directories(s3_url: str) -> None:
    writer = S3Store(s3_url)
    for idx in list(range(2)) + list(range(100, 140)):  # 40 planted member directories
        writer.put_atomic(f"{idx:03d}/000001.yaml", b"r: 1\n")
        writer.put_atomic(f"{idx:03d}/heartbeat", b"{}")
    reader = S3Store(s3_url)
    with reader.scan(2):
        pass
    assert reader.requests == {"list_objects_v2": 1, "get_object": 4}  # was 84: every planted directory


def test_directory_emulation_is_the_local_stores_alone(tmp_path) -> None:  # noqa: ANN001
    """The Store protocol holds what an object store offers natively; making directories and removing
    killed writers' temp files belong to the store that has directories (DirectoryStore)."""
    from pbt.storage.backend import DirectoryStore, Store, ensure_dir, remove_stale_temps
    from pbt.storage.local import LocalStore

    s3 = S3Store("s3://bucket-name/ws")
    assert not {"ensure_dir", "remove_stale_temps"} & set(vars(Store)) and not isinstance(s3, DirectoryStore)
    ensure_dir(s3, "000")  # nothing to do, and no request made
    assert remove_stale_temps(s3, "000", 0.0) == []
    local = LocalStore(tmp_path)
    assert isinstance(local, DirectoryStore)
    ensure_dir(local, "000")
    assert (tmp_path / "000").is_dir()
