"""The selection ablation's curve bookkeeping (benchmarks/ablation_curve.py): which saved policy
stands for which point of the budget; and a smaller population's no-PBT arm cut from a larger
one's (benchmarks/ablation.py)."""

import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import ablation  # noqa: E402
import ablation_curve  # noqa: E402


def saves(run_dir: Path, epochs: range, final_frame: int) -> None:
    nn = run_dir / "nn"
    nn.mkdir(parents=True)
    for epoch in epochs:
        (nn / f"last_m_ep_{epoch}_rew_-1.5.pth").write_bytes(b"x")
    (nn / f"last_m_frame_{final_frame}_rew__0.3_.pth").write_bytes(b"x")


def test_each_curve_step_is_the_newest_save_at_or_before_it(tmp_path: Path) -> None:
    # 1.2M frames of 16,384 per epoch, saved every 6 epochs: 98,304 frames apart; the run ends at epoch 74
    saves(tmp_path, range(6, 74, 6), 74 * 16384)
    found = ablation_curve.epoch_checkpoints(tmp_path, 16384)
    assert sorted(found)[:2] == [98304, 196608] and max(found) == 74 * 16384
    assert [ablation_curve.curve_checkpoint(found, s, 1_200_000)[0] for s in ablation_curve.QUARTERS] == [
        18 * 16384,
        36 * 16384,
        54 * 16384,
        74 * 16384,
    ]
    assert ablation_curve.curve_checkpoint(found, 12, 1_200_000)[1].name.startswith("last_m_frame_")
    assert ablation_curve.final_checkpoint(tmp_path).name.startswith("last_m_frame_")
    assert ablation_curve.curve_checkpoint({}, 3, 1_200_000) is None


def test_a_step_before_the_first_save_has_no_policy(tmp_path: Path) -> None:
    saves(tmp_path, range(10, 74, 10), 74 * 16384)
    assert ablation_curve.curve_checkpoint(ablation_curve.epoch_checkpoints(tmp_path, 16384), 1, 1_200_000) is None


def test_a_smaller_no_pbt_arm_is_the_first_members_of_a_larger_one() -> None:
    larger = {
        "scores": [0.5, 0.02, 0.7, 0.3],
        "seconds": 100.0,
        "training_scores": [0.4, 0.0, 0.6, 0.2],
        "curve": {
            "steps": [3, 12],
            "frames": [1, 2],
            "scores": [[0.1, 0.0, 0.2, 0.9], [0.5, 0.02, 0.7, 0.3]],
            "best": [0.9, 0.7],
            "mean": [0.3, 0.38],
        },
    }
    cut = ablation.reused_no_pbt(larger, 2)
    assert cut["scores"] == [0.5, 0.02] and cut["best"] == 0.5 and math.isclose(cut["mean"], 0.26)
    assert cut["stuck"] == [1] and cut["training_scores"] == [0.4, 0.0] and cut["reused"]
    assert cut["curve"]["best"] == [0.1, 0.5] and cut["curve"]["scores"][0] == [0.1, 0.0]


def test_fine_target_is_the_first_epoch_save_that_reached_it(tmp_path: Path, monkeypatch) -> None:
    # saves every epoch of 8,192 frames; looks every 6 epochs: the target is first reached at the look
    # at epoch 54, and between the looks at 48 and 54 member 1 reaches it at epoch 51
    for i in range(2):
        saves(tmp_path / "pbt" / f"threshold_{i}_pbt00{i}", range(1, 74), 600_000)
    score = {(1, 51): 0.2, (1, 52): 0.1, (0, 53): 0.3}

    def play(paths, task, episodes, log_path, overrides=()):
        out = {}
        for p in paths:
            member = int(p.parent.parent.name.split("_")[1])
            epoch = int(p.name.split("_")[3]) if "_ep_" in p.name else 74
            out[str(p)] = score.get((member, epoch), 0.25 if epoch >= 54 else 0.0)
        return out

    monkeypatch.setattr(ablation_curve, "play_batch", play)
    curve = {"steps": [3, 6, 9, 12], "best": [0.0, 0.0, 0.25, 0.25]}
    args = (tmp_path / "pbt", "threshold", 2, 600_000, 8192, curve, 0.2, "Reacher", 64, tmp_path / "t.log")
    coarse = ablation_curve.frames_to_target(*args)
    assert coarse["step"] == 9 and coarse["frames"] == 54 * 8192 and "fine" not in coarse
    fine = ablation_curve.frames_to_target(*args, fine=True)
    assert fine["step"] == 9 and fine["frames"] == 51 * 8192 and math.isclose(fine["fraction"], 51 * 8192 / 600_000)
    assert fine["fine"]["frames"] == [f * 8192 for f in range(49, 54)]
    assert fine["fine"]["best"] == [0.0, 0.0, 0.2, 0.1, 0.3]
