"""PendulumImage: Pendulum's dynamics and rewards, observed as a (size, size, 2) image of the rod's
tip now (channel 0) and one control step earlier (channel 1)."""
import pytest

torch = pytest.importorskip("torch")

from pbt.rl_games.vecenv import TaskVecEnv  # noqa: E402
from pbt.tasks.pendulum import Pendulum  # noqa: E402
from pbt.tasks.pendulum_image import EXTENT, PendulumImage  # noqa: E402
from pbt.tasks.registry import BUILTIN_TASKS  # noqa: E402


def test_same_dynamics_and_rewards_as_pendulum_seen_as_two_frames() -> None:
    image = PendulumImage({"seed": 3, "env": {"numEnvs": 6}})
    plain = Pendulum({"seed": 3, "env": {"numEnvs": 6}})
    obs, _ = image.reset()["obs"], plain.reset()
    assert obs.shape == (6, 6, 6, 2) and image.obs_shape == (6, 6, 2)
    assert torch.equal(obs[..., 0], obs[..., 1])  # no earlier frame yet: the tip where it starts
    actions = torch.linspace(-1, 1, 6).reshape(6, 1)
    previous = obs[..., 0].clone()  # the env hands out its buffer
    for _ in range(5):
        (obs, reward, *_), (_, plain_reward, *_) = image.step(actions), plain.step(actions)
        obs = obs["obs"]
        assert torch.equal(reward, plain_reward) and torch.equal(image.theta, plain.theta)
        assert torch.equal(obs[..., 1], previous)  # channel 1: the frame before
        previous = obs[..., 0].clone()  # the env hands out its buffer
        assert float(obs.min()) >= 0 and float(obs.max()) <= 1


def test_the_brightest_pixel_is_where_the_tip_is() -> None:
    task = PendulumImage({"seed": 0, "env": {"numEnvs": 4, "imageSize": 9}})
    theta = torch.tensor([0.0, 3.14159265, 1.5707963, -1.5707963])  # up, down, right, left
    images = task.render(theta)
    pixel = 2 * EXTENT / 8
    brightest = [divmod(int(i.argmax()), 9) for i in images]
    expected = [(round((EXTENT - torch.cos(t).item()) / pixel), round((torch.sin(t).item() + EXTENT) / pixel))
                for t in theta]
    assert brightest == expected  # (row, column); row 0 is the top


def test_registered_and_its_observation_space_is_the_image() -> None:
    assert BUILTIN_TASKS["PendulumImage"] == "pbt.tasks.pendulum_image:PendulumImage"
    env = TaskVecEnv(PendulumImage({"seed": 0, "env": {"numEnvs": 2, "imageSize": 5}}))
    assert env.observation_space.shape == (5, 5, 2)
