"""The user-task interface: what a vectorized task must offer to be trained (no torch at import).

A task is ``num_envs`` environments stepped together as one batch of tensors on one device:

* attributes ``num_envs``, ``num_obs``, ``num_actions``;
* ``reset() -> {"obs": obs}`` with ``obs`` of shape (num_envs, num_obs);
* ``step(actions) -> ({"obs": obs}, reward, done, extras)``: actions (num_envs, num_actions) in
  [-1, 1]; reward and done of shape (num_envs,); done envs reset themselves (auto-reset);
* ``extras["time_outs"]`` (bool, optional): True where an episode was cut by the time limit
  (rl_games bootstraps the value there instead of treating it as a terminal state);
* ``extras["true_objective"]`` (optional): what PBT ranks members by (``pbt.objective``), for the
  envs that just finished an episode; without it PBT ranks by the mean episode return.

Optional: ``observation_space`` / ``action_space`` (gym spaces; default: unbounded observations and
actions in [-1, 1]), ``num_states`` (an asymmetric critic's state size), ``get_env_state`` /
``set_env_state`` (saved in checkpoints), ``set_train_info``, and ``live_setters()``: full config
keys of task parameters the running task reads at every step (``task.env.<field>``, e.g. reward
scales) -> a function applying a new value, so PBT changes them in place instead of restarting. Tasks written in torch may subclass
:class:`pbt.tasks.vectask.VecTask`, which adds desynchronised first episodes.

Optional class attributes, read at start-up without building the task (the guard on reward-shaping
mutation, :mod:`pbt.mutation.shaping`): ``reward_shaping_keys``, the full config keys that shape the
reward (``("task.env.actionCost",)``; shell-style patterns such as ``task.env.*RewScale`` work), and
``reports_true_objective = True`` when ``extras["true_objective"]`` is reported. PBT then refuses to
mutate those keys while it ranks members by the return they shape.
"""

from typing import Any, Dict, Protocol, Tuple

from pbt.errors import TaskError

#: What :func:`check_task_interface` requires of a task object.
REQUIRED_ATTRIBUTES: Tuple[str, ...] = ("num_envs", "num_obs", "num_actions", "reset", "step")


class Task(Protocol):
    """The vectorized task interface (see the module docstring)."""

    num_envs: int
    num_obs: int
    num_actions: int

    def reset(self) -> Dict[str, Any]: ...

    def step(self, actions: Any) -> Tuple[Dict[str, Any], Any, Any, Dict[str, Any]]: ...


def check_task_interface(obj: Any, name: str) -> None:
    """Raise TaskError naming what a task object lacks of the vectorized interface."""
    missing = [a for a in REQUIRED_ATTRIBUTES if not hasattr(obj, a)]
    if missing:
        raise TaskError(
            f"Task {name} does not implement the vectorized task interface: missing {', '.join(missing)}. "
            "See README 'Bring your own task' (attributes num_envs, num_obs, num_actions; methods reset(), step(actions))."
        )
