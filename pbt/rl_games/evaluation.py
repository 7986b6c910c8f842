"""Playing a live agent's policy with deterministic actions: ``pbt-play``'s episodes, and the
evaluation a member ranks by with ``pbt.eval_episodes`` (no torch at import time).

Why an evaluation: PBT otherwise ranks by the training episodes, which the stochastic policy plays
while it learns. On HalfCheetah a member's training return and its deterministic score disagreed
by up to 2.4x across a population (1,107 vs 3,033 played where the training returns were 1,021 vs
1,251), so members were copied by a number users do not deploy.

The evaluation runs in a second instance of the member's task (``env.numEnvs`` = the episodes,
``env.desyncEpisodes`` off, so every env plays one whole episode from its reset): the training
envs, their observations and episodes in flight are not touched. Each value is known at once and
measures the current weights only, so an objective is never unknown or mixed after a change.
"""

import logging
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.config import evaluation_free_settings
from pbt.errors import ConfigError
from pbt.storage.bounds import bounded_float
from pbt.storage.record import MAX_EPISODE_RETURNS

if TYPE_CHECKING:
    from pbt.storage.record import Record

log = logging.getLogger(__name__)

MAX_STEPS = 100_000
"""Vectorized steps after which play gives up (a task whose episodes never end)."""

#: Task kinds whose simulator runs once per process (no second instance for the evaluation), by name.
NO_SECOND_INSTANCE = {"isaacgym": "Isaac Gym", "isaaclab": "Isaac Lab"}

#: The checkpoint key under which an exec restart's exported copy carries the evaluation episodes
#: that played its weights (the restarted process starts its ``pbt.eval_window`` from them).
CARRIED_EPISODES_KEY = "pbt_evaluation_episodes"


def evaluations_of(record: Optional["Record"]) -> List[float]:
    """A record's published episodes when they are evaluations (:attr:`Record.evaluated`): a record
    made while its member ranked by training episodes (or by an older version) gives none."""
    return list(record.episode_returns) if record is not None and record.evaluated else []


def write_carried(state: Dict[str, Any], episodes: Sequence[float]) -> None:
    """Put ``episodes`` into an exported checkpoint ``state`` (none: drop any the source held)."""
    state.pop(CARRIED_EPISODES_KEY, None)
    if episodes:
        state[CARRIED_EPISODES_KEY] = [float(x) for x in episodes]


def read_carried(state: Mapping[str, Any]) -> List[float]:
    """The carried episodes of a checkpoint ``state``; empty when it has none, or when they break the
    rules a record's episodes follow (at most MAX_EPISODE_RETURNS numbers within the bounds every
    number read from the workspace keeps): the file was written by this member, but it is still data."""
    value = state.get(CARRIED_EPISODES_KEY)
    if not isinstance(value, (list, tuple)) or len(value) > MAX_EPISODE_RETURNS:
        return []
    try:
        return [bounded_float(x, "carried evaluation episode") for x in value]
    except ValueError as exc:
        log.warning("the restart checkpoint's carried evaluation episodes are ignored: %s", exc)
        return []


@dataclass
class PlayResult:
    episodes: int
    returns: List[float]
    objectives: List[float]
    steps: int

    @property
    def mean_return(self) -> float:
        return statistics.fmean(self.returns) if self.returns else math.nan

    @property
    def objective(self) -> float:
        """Mean of the task's objective over the episodes, else the mean return."""
        return statistics.fmean(self.objectives) if self.objectives else self.mean_return

    @property
    def per_episode(self) -> List[float]:
        """Each episode's objective (the task's key when it reported one for every episode)."""
        return list(self.objectives) if len(self.objectives) == len(self.returns) else list(self.returns)

    def line(self) -> str:
        std = statistics.pstdev(self.returns) if len(self.returns) > 1 else 0.0
        return (
            f"PLAY episodes={len(self.returns)} mean_return={self.mean_return:.4g} "
            f"objective={self.objective:.4g} std_return={std:.4g}"
        )


def run_episodes(
    agent: Any, episodes: int, objective_key: str, max_steps: int = MAX_STEPS, whole_first: bool = False
) -> PlayResult:
    """Step ``agent``'s env with deterministic actions until ``episodes`` complete episodes ended.

    ``whole_first=False`` (pbt-play): each env's first episode is not counted (tasks start it at a
    random step). ``True`` (an evaluation env without desynchronised starts): each env's first
    episode is its only one counted, so short episodes cannot crowd out long ones.
    """
    import torch

    from pbt.objective import as_floats, lookup
    from pbt.rl_games.vecenv import EPISODE_RETURN_KEY

    agent.model.eval()
    num_envs = int(getattr(agent.vec_env, "num_envs", 0) or agent.num_actors)
    recurrent = bool(getattr(agent, "is_rnn", False))
    if recurrent:  # hidden states start at zero and restart at zero with each env's new episode
        agent.rnn_states = [
            torch.zeros((s.shape[0], num_envs, *s.shape[2:]), dtype=s.dtype, device=agent.ppo_device)
            for s in agent.model.get_default_rnn_state()
        ]
    finished = [0] * num_envs
    returns: List[float] = []
    objectives: List[float] = []
    obs = agent.env_reset()
    steps = 0
    with torch.no_grad():
        while len(returns) < episodes:
            if steps >= max_steps:
                raise ConfigError(
                    f"only {len(returns)} of {episodes} episodes ended within {max_steps} steps of {num_envs} envs. "
                    "Ask for fewer episodes (pbt-play's episodes=K) or check the task's episode length."
                )
            values = agent.get_action_values(obs)
            if recurrent:
                agent.rnn_states = values["rnn_states"]
            obs, _, dones, infos = agent.env_step(values["mus"])
            steps += 1
            done = dones.reshape(-1).nonzero(as_tuple=False).reshape(-1).tolist()
            if recurrent and done:
                for state in agent.rnn_states:
                    state[:, done, :] = 0.0
            if not done:
                continue
            episode_returns = as_floats(infos.get(EPISODE_RETURN_KEY)) if isinstance(infos, dict) else None
            if episode_returns is None or len(episode_returns) != num_envs:
                raise ConfigError(
                    f"the env reports no per-env '{EPISODE_RETURN_KEY}' in its infos: playing needs a task built "
                    "through pbt.rl_games.vecenv (task=...), as pbt.train builds it."
                )
            reported = as_floats(lookup(infos, objective_key))
            for i in done:
                finished[i] += 1
                counted = finished[i] == 1 if whole_first else finished[i] >= 2
                if not counted or len(returns) >= episodes:
                    continue
                returns.append(float(episode_returns[i]))
                if reported is not None and len(reported) == num_envs:
                    objectives.append(float(reported[i]))
    return PlayResult(len(returns), returns, objectives, steps)


# --------------------------------------------------------------------------------------------
# pbt.eval_episodes: the objective a member ranks by
# --------------------------------------------------------------------------------------------


def evaluation_problem(cfg: Mapping[str, Any]) -> Optional[str]:
    """Why ``pbt.eval_episodes`` cannot run with this config (None: it can), for a start-up error."""
    from pbt.objective import TRAINER_STATISTICS
    from pbt.tasks.registry import task_ref_of

    pbt = cfg.get("pbt") or {}
    episodes = int(pbt.get("eval_episodes", 0) or 0)
    if episodes <= 0 or not pbt.get("enabled", False):
        return None
    kind = task_ref_of(cfg.get("task") or {}).kind
    if kind in NO_SECOND_INSTANCE:
        settings = " ".join(evaluation_free_settings(pbt))
        return (
            f"pbt.eval_episodes={episodes} plays the policy in a second instance of the task, and an "
            f"{NO_SECOND_INSTANCE[kind]} simulation runs once per process. Rank by the training episodes on "
            f"this task: add {settings} after your other overrides (every other key stays, so "
            "pbt=evaluated_lockstep becomes lockstep without the evaluation)."
        )
    objective = str(pbt.get("objective", ""))
    if objective in TRAINER_STATISTICS and objective != "episode_return":
        return (
            f"pbt.eval_episodes ranks by the evaluation's returns or a key the task reports, not by "
            f"pbt.objective={objective}. Use pbt.objective=episode_return or a task key with pbt.eval_episodes, "
            "or drop pbt.eval_episodes."
        )
    return None


def evaluation_task_config(task_cfg: Mapping[str, Any], episodes: int) -> Dict[str, Any]:
    """The task config of the evaluation instance: one env per episode, every episode from step 0."""
    cfg = {key: value for key, value in task_cfg.items()}
    env = dict(cfg.get("env") or {})
    env["numEnvs"] = episodes
    env["desyncEpisodes"] = False
    cfg["env"] = env
    return cfg


class EvaluatedObjective:
    """The objective of :class:`Evaluator` runs, in the interface the exploiter reads from
    :class:`pbt.objective.MemberObjective`: known right after each evaluation, of the current weights'
    lineage only. It pools the episodes of the last ``window`` evaluations (``pbt.eval_window``): the
    played score of PPO's weights swings between updates, and one evaluation's 16 episodes of one
    snapshot made a 20% swing look significant. A copy starts from its donor's pooled episodes (they
    played the weights it took), so it is never judged on fewer evaluations than the others."""

    def __init__(self, window_episodes: int = 0) -> None:
        # 0: the last evaluation only, however many episodes it played
        self.window_episodes = window_episodes
        self.episodes: Deque[float] = deque(maxlen=window_episodes or None)
        self.last: Optional[float] = None  # the last evaluation's objective (without a window)
        self.mixed = False
        self.effect_pending: Optional[Tuple[int, int]] = None

    @property
    def value(self) -> Optional[float]:
        if not self.window_episodes:
            return self.last
        return statistics.fmean(self.episodes) if self.episodes else None

    @property
    def recent(self) -> List[float]:
        """The pooled per-episode objectives (the significance test's samples)."""
        return list(self.episodes)

    def set(self, result: PlayResult) -> None:
        if not self.window_episodes:
            self.episodes.clear()
        self.last = result.objective
        self.episodes.extend(result.per_episode)

    def note_change(self) -> None:
        """New learning hyperparameters: the next evaluation shows them (the weights did not change)."""

    def reset(self, carried: Sequence[float] = ()) -> None:
        """New weights: the evaluations were of the old ones. ``carried``: the episodes the donor's
        record published for the weights taken (a hostile record's list is cut to the window)."""
        self.episodes.clear()
        self.last = None
        if self.window_episodes:
            self.episodes.extend(list(carried)[-self.window_episodes :])


class Evaluator:
    """Plays the live agent's policy for ``episodes`` episodes in its own task instance."""

    def __init__(self, algo: Any, env: Any, episodes: int, objective_key: str, window: int = 1) -> None:
        self.algo = algo
        self.env = env
        self.episodes = episodes
        self.objective_key = objective_key
        self.objective = EvaluatedObjective(episodes * window if window > 1 else 0)

    @classmethod
    def build(cls, algo: Any, plain: Mapping[str, Any], episodes: int, window: int = 1) -> "Evaluator":
        """An evaluator over a new instance of ``plain``'s task (the worker's plain config)."""
        from pbt.rl_games.vecenv import TaskVecEnv
        from pbt.tasks.registry import build_configured_task

        task = build_configured_task(plain, evaluation_task_config(plain["task"], episodes))
        key = str((plain.get("pbt") or {}).get("objective", "true_objective"))
        return cls(algo, TaskVecEnv(task), episodes, key, window)

    def evaluate(self) -> float:
        """Play the current weights; the objective (mean over the episodes pooled with the window's
        earlier evaluations) is kept in ``self.objective`` and returned."""
        import torch

        algo = self.algo
        training_env, rnn_states, training = algo.vec_env, getattr(algo, "rnn_states", None), algo.model.training
        # The actions rl_games samples beside the mean ones draw from torch's generators: restored, so
        # that turning the evaluation on leaves the training's random draws as they were.
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        start = time.perf_counter()
        algo.vec_env = self.env
        try:
            result = run_episodes(algo, self.episodes, self.objective_key, whole_first=True)
        finally:  # the training rollout goes on exactly where it was
            algo.vec_env = training_env
            algo.rnn_states = rnn_states
            algo.model.train(training)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)
        self.objective.set(result)
        pooled = self.objective.value
        log.info(
            "evaluation: %d episodes (%d steps), objective %.6g, mean return %.6g, in %.2f s%s",
            result.episodes,
            result.steps,
            result.objective,
            result.mean_return,
            time.perf_counter() - start,
            f"; ranked by {pooled:.6g}, the mean of {len(self.objective.episodes)} pooled episodes"
            if self.objective.window_episodes and pooled is not None
            else "",
        )
        return result.objective if pooled is None else pooled
