"""A member's objective history: an objective measured partly on the weights before a change is
published (peers rank the member's newest record by it) but kept out of the history peers pair on."""
from pathlib import Path

from test_refusals import member_with_fake_checkpoints
from conftest import decide_only

from pbt.selection.experience import known


def test_a_mixed_objective_is_published_but_not_kept_in_the_history(tmp_path: Path) -> None:
    member = member_with_fake_checkpoints(tmp_path, tmp_path / "ws", dbg_mode=False, start_after=10 ** 9)
    try:
        decide_only(member, 1000, 1.0, {}, [1.0])
        second = decide_only(member, 2000, 0.5, {}, [0.5], True)  # just after new weights: partly the old ones
        assert second is not None
        record = member.workspace.latest_record(0)
        assert record is not None and record.objective == 0.5 and known(record) == {1: 1.0, 2: 0.5}
        decide_only(member, 3000, 2.0, {}, [2.0])
        newest = member.workspace.latest_record(0)
        assert newest is not None and newest.history == {1: 1.0, 2: None, 3: 2.0}
        assert known(newest) == {1: 1.0, 3: 2.0}
    finally:
        member.close()
