"""The partially observed Pendulum (env.observeVelocity=False): the same dynamics, the velocity left out."""
import pytest

torch = pytest.importorskip("torch")

from pbt.tasks.pendulum import Pendulum  # noqa: E402


def test_without_velocity_the_observation_is_cos_and_sin_of_the_same_state() -> None:
    full = Pendulum({"seed": 3, "env": {"numEnvs": 6}})
    partial = Pendulum({"seed": 3, "env": {"numEnvs": 6, "observeVelocity": False}})
    assert (full.num_obs, partial.num_obs) == (3, 2) and Pendulum.num_obs == 3
    obs_full, obs_partial = full.reset()["obs"], partial.reset()["obs"]
    actions = torch.linspace(-1, 1, 6).reshape(6, 1)
    for _ in range(5):
        assert obs_partial.shape == (6, 2)
        assert torch.equal(obs_partial, obs_full[:, :2])
        (obs_full, r_full, *_), (obs_partial, r_partial, *_) = full.step(actions), partial.step(actions)
        obs_full, obs_partial = obs_full["obs"], obs_partial["obs"]
        assert torch.equal(r_full, r_partial)
    assert torch.allclose(obs_partial.pow(2).sum(-1), torch.ones(6))
