"""End to end: 4 real worker processes on CPU share a workspace; crippled members are replaced.

The population is tests/pbt_population.py's (run once per session, shared with the observability
tests). Member 3 exploits in place, member 2 by exec restart; for each, asserted from the workspace
and lineage (and the worker's log for the restored weights): every member wrote records, a
replacement happened, the replaced member's weights right after the exploit equal the donor
checkpoint's, its optimizer runs at the new learning rate, its hyperparameters are within their
bounds, its frame count is its own, and every process exited 0 (checked by the fixture).
"""
import re

import pytest

from pbt_population import MAX_FRAMES, MODES, N, population

torch = pytest.importorskip("torch")

from pbt.storage.checkpoints import model_fingerprint  # noqa: E402
from pbt.mutation import EPS_CLIP_RANGE, MINI_EPOCHS_RANGE  # noqa: E402
from pbt.storage import Workspace  # noqa: E402

RESTORED = {
    "exec": r"restored (?P<path>\S+) \(frame (?P<frame>\d+), epoch \d+, lr (?P<lr>\S+), weights (?P<weights>\w+)\)",
    "inplace": r"exploited in place in [\d.]+ ms \(frame (?P<frame>\d+), epoch \d+, lr (?P<lr>\S+), "
               r"weights (?P<weights>\w+)\)",
}


@pytest.fixture(scope="module")
def pop(tmp_path_factory):
    return population(tmp_path_factory)


@pytest.mark.training
def test_every_member_published_and_started_with_one_initial_mutation(pop):
    workspace = Workspace(pop.workspace, 0, N)
    for idx in range(N):
        assert workspace.latest_record(idx) is not None, f"member {idx} wrote no record"
        lineage = workspace.read_lineage(idx)
        reasons = [e.reason for e in lineage]
        assert reasons[0] == "initial mutation of a fresh member" and reasons.count(reasons[0]) == 1
        # Never an exploit on the last epoch: nothing would be left to train with.
        assert all(e.action == "keep" for e in lineage if e.frame >= MAX_FRAMES)


@pytest.mark.training
@pytest.mark.parametrize("member", sorted(MODES))
def test_crippled_member_takes_the_donors_weights(pop, member):
    mode = MODES[member]
    workspace = Workspace(pop.workspace, 0, N)
    event = next(e for e in workspace.read_lineage(member) if e.action == "replace")
    donor, donor_iter = event.donor, event.donor_iteration
    assert donor != member and event.mode == mode
    assert event.donor_objective > event.objective

    # Right after the exploit the agent holds exactly the donor checkpoint's weights, at its own frame.
    donor_state = workspace.load_checkpoint(workspace.latest_record(donor, max_iteration=donor_iter), donor)
    restored = [m for m in re.finditer(RESTORED[mode], pop.logs[member]) if int(m["frame"]) == event.frame]
    assert restored, pop.logs[member][-3000:]
    match = restored[0]
    if mode == "exec":
        assert match["path"].endswith("restart_checkpoint.pth")
    assert match["weights"] == model_fingerprint(donor_state["model"])[:16]

    # The optimizer runs at the new learning rate from the first minibatch on; bounds hold.
    after = event.params_after
    assert float(match["lr"]) == pytest.approx(after["train.params.config.learning_rate"], rel=1e-5)
    assert after != event.params_before  # at least one hyperparameter changed (pbt.min_mutations=1)
    assert EPS_CLIP_RANGE[0] <= after["train.params.config.e_clip"] <= EPS_CLIP_RANGE[1]
    assert MINI_EPOCHS_RANGE[0] <= after["train.params.config.mini_epochs"] <= MINI_EPOCHS_RANGE[1]
    assert 0 < after["train.params.config.gamma"] < 1 and 0 < after["train.params.config.tau"] < 1
    assert all(v > 0 for k, v in after.items() if k.endswith(("learning_rate", "grad_norm", "critic_coef")))

    # It trains on with the recorded hyperparameters and its own frame count.
    later = [workspace.latest_record(member, max_iteration=i) for i in range(event.iteration + 1, 100)]
    later = [r for r in later if r is not None and r.iteration > event.iteration]
    assert later and later[0].params == after and later[0].frame > event.frame


def test_no_exploit_on_the_last_epoch(monkeypatch):
    """A decision to replace that falls on the last epoch is logged as kept and not carried out
    (an in-place replace there reset the score buffers and the run ended without a result)."""
    import contextlib
    from types import SimpleNamespace

    from pbt.rl_games.a2c import ContinuousPpoAdapter
    from pbt.iteration import Iteration, kept
    from pbt.rl_games.exploit import Exploiter
    from pbt.selection import Decision
    from pbt.storage.record import Record

    donor = Record(policy_idx=1, iteration=3, frame=100, objective=1.0, params={"k": 2.0}, checkpoint="000003.pth",
                   checksum="0" * 64)
    decision = Decision("replace", donor, "replace: donor leads", {"k": 1.0}, {"k": 2.0})
    logged, acted = [], []
    algo = SimpleNamespace(get_full_state_weights=lambda: {}, epoch_num=7, frame=100,
                           model=SimpleNamespace(state_dict=lambda: {}))
    it = Iteration(decision, 100, 0.5, 0.0, {}, {})
    member = SimpleNamespace(iteration=lambda *a, **k: contextlib.nullcontext(it), curriculum=None,
                             record=lambda it, outcome: logged.append((outcome.action, outcome.reason)))
    exploiter = Exploiter(member, ContinuousPpoAdapter(algo),  # type: ignore[arg-type]
                          score=SimpleNamespace(recent=[], mixed=False, effect_pending=None))  # type: ignore[arg-type]
    monkeypatch.setattr(exploiter, "exploit_inplace", lambda *a: acted.append("inplace") or kept(decision, "k"))
    monkeypatch.setattr(exploiter, "restart_mode", lambda d: ("inplace", ""))

    exploiter.iterate(100, 0.5, final=True)
    assert acted == [] and logged == [("keep", "replace: donor leads; not acted on: training ends this epoch")]
    exploiter.iterate(100, 0.5, final=False)
    assert acted == ["inplace"]
