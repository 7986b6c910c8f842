"""Retention with planted files in a member's own directory (issue 25, item 2): it ranks only records
that parse (up to what the member published), and never deletes the newest intact record or a
checkpoint a kept record names. No torch: runs on Python 3.8."""
import json
from pathlib import Path
from typing import List

from pbt.storage import Workspace
from pbt.storage.retention import RetentionPolicy


def files(directory: Path) -> List[str]:
    return sorted(p.name for p in directory.iterdir())


def test_empty_files_with_high_iterations_never_push_real_records_out(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1)
    own = tmp_path / "000"
    for k in range(25):
        (own / f"{900000 + k:06d}.yaml").write_bytes(b"")
    for it in range(4):
        ws.publish(it, it * 10, float(it), {}, b"ckpt%d" % it)
        ws.cleanup()
        newest = ws.latest_record(0, verify=True)
        assert newest is not None and newest.iteration == it  # the record just published survives
    assert {"000003.yaml", "000003.pth", "000000.yaml", "000000.pth"} <= set(files(own))
    assert Workspace(tmp_path, 0, 1).newest_iteration(verify=True) == 3  # a restart resumes, not frame 0


def test_parseable_records_planted_above_the_members_own_are_not_ranked(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1, retention=RetentionPolicy(keep_records=2, max_records=3))
    own = tmp_path / "000"
    ws.publish(0, 0, 1.0, {}, b"c0")
    template = json.loads((own / "000000.yaml").read_text())
    for k in range(5):
        it = 500 + k
        planted = dict(template, iteration=it, checkpoint=f"{it:06d}.pth")
        (own / f"{it:06d}.yaml").write_text(json.dumps(planted))
        (own / f"{it:06d}.pth").write_bytes(b"planted")
    for it in range(1, 5):
        ws.publish(it, it * 10, float(it), {}, b"ckpt%d" % it)
        ws.cleanup()
    names = files(own)
    assert [n for n in names if n.startswith("0000")] == ["000003.pth", "000003.yaml", "000004.pth", "000004.yaml"]
    assert len([n for n in names if n.startswith("0005")]) == 10  # not ours to delete either


def test_a_checkpoint_named_by_a_kept_record_is_never_deleted(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1, retention=RetentionPolicy(keep_records=1, max_records=1))
    for it in range(3):
        ws.publish(it, it * 10, float(it), {}, b"ckpt%d" % it)
    own = tmp_path / "000"
    # the newest record names an older checkpoint (as a hand-edited or older writer's record may)
    newest = json.loads((own / "000002.yaml").read_text())
    newest.update(checkpoint="000000.pth", checksum=json.loads((own / "000000.yaml").read_text())["checksum"])
    (own / "000002.yaml").write_text(json.dumps(newest))
    ws.cleanup()
    assert files(own) == ["000000.pth", "000002.pth", "000002.yaml"]
    record = ws.latest_record(0, verify=True)
    assert record is not None and record.iteration == 2
