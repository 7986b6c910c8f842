"""TRPO with network mutations (pbt/mutation=agilerl): surgery swaps the model, and TRPO's update
must follow it (its policy parameter list and its value optimizer), or the policy step
differentiates the old model's parameters and the policy never changes again."""
import pytest

torch = pytest.importorskip("torch")

from test_agent import build  # noqa: E402

from pbt.mutation.network import ADD_UNITS, NetworkChange, NetworkSpec  # noqa: E402
from pbt.rl_games import surgery  # noqa: E402
from pbt.rl_games.trpo import optim  # noqa: E402


def owned_by(params, model) -> bool:
    ids = {id(p) for p in model.parameters()}
    return bool(params) and all(id(p) in ids for p in params)


@pytest.mark.parametrize("how", ["mutated", "a donor's adopted"])
def test_the_policy_keeps_learning_after_an_architecture_change(tmp_path, how: str) -> None:
    algo = build([], tmp_path / "runs").algo
    old_model, undo = algo.model, None
    before = surgery.current_spec(algo)
    change = NetworkChange("architecture", before, NetworkSpec((24, 16), before.activation), ADD_UNITS, layer=0, seed=3)
    if how == "mutated":
        surgery.apply_change(algo, change)
    else:
        undo = surgery.swap_in(algo, change.after)
    assert surgery.current_spec(algo).units == (24, 16)
    assert owned_by(algo.policy_params, algo.model) and owned_by(algo.value_params, algo.model)
    stepped = [p for group in algo.optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in stepped} == {id(p) for p in algo.value_params}  # TRPO steps the policy itself
    policy = optim.flat(algo.policy_params).detach().clone()
    value = optim.flat(algo.value_params).detach().clone()
    algo.train_epoch()
    assert algo.last_step["accepted"], algo.last_step
    assert not torch.equal(optim.flat(algo.policy_params).detach(), policy)
    assert not torch.equal(optim.flat(algo.value_params).detach(), value)
    if undo is not None:  # the donor's checkpoint did not fit: back to the old model, TRPO with it
        undo()
        assert algo.model is old_model
        assert owned_by(algo.policy_params, old_model) and owned_by(algo.value_params, old_model)
