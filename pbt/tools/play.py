"""``pbt-play checkpoint=<path> task=... [episodes=K] [overrides]``: run a trained policy
without learning and report how well it does.

The agent is built exactly as for training (same task, network, normalizers and action scaling,
from the same Hydra config and overrides), the checkpoint is loaded safely
(``torch.load(weights_only=True)``), and the policy acts deterministically (the mean action) in the
vectorized task until K complete episodes have finished. Each env's first episode is not counted
(tasks start it at a random step, so it is partial). Prints one line::

    PLAY episodes=K mean_return=... objective=... std_return=...

``objective`` is the mean of the task's ``pbt.objective`` key (e.g. ``true_objective``) over those
episodes when the task reports it, else the mean return (as the PBT objective falls back to).
Nothing is written next to the checkpoint: rl_games' run directory goes to a temporary directory.
"""

import logging
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

from pbt.errors import ConfigError, PbtError
from pbt.mutation.network import NetworkSpec, network_of, to_network_mutation
from pbt.rl_games.evaluation import PlayResult, run_episodes

log = logging.getLogger("pbt.play")

DEFAULT_EPISODES = 100
USAGE = "usage: pbt-play checkpoint=<path.pth> task=<task> [episodes=K] [key=value ...]"


def recorded_network(checkpoint: str) -> Optional[NetworkSpec]:
    """The network named by the PBT record next to ``checkpoint`` (``<name>.yaml`` in a workspace or
    best copy, ``record.yaml`` in an analyze export), when members evolved it; None otherwise."""
    from pbt.storage.record import MAX_RECORD_BYTES, parse_record

    path = Path(checkpoint)
    for candidate in (path.with_suffix(".yaml"), path.parent / "record.yaml"):
        try:
            if candidate.is_file() and candidate.stat().st_size <= MAX_RECORD_BYTES:
                return network_of(parse_record(candidate.read_bytes(), str(candidate)).network)
        except (OSError, PbtError) as exc:
            log.warning("not reading the network from %s: %s", candidate, exc)
    return None


def network_limits_problem(cfg: Any, network: NetworkSpec) -> Optional[str]:
    """Why ``network`` lies outside the config's ``pbt.network_mutation`` limits (None: inside, or
    no limits configured): pbt.play builds no network a member could not have."""
    settings = to_network_mutation("network_mutation", (cfg.get("pbt") or {}).get("network_mutation"))
    problems = [] if settings is None else settings.check_spec(network, "the recorded network")
    return "; ".join(problems) or None


def play(cfg: Any, episodes: int) -> PlayResult:
    """Load ``cfg.checkpoint`` into an agent built from ``cfg`` and play ``episodes`` episodes."""
    from omegaconf import open_dict

    from pbt.rl_games.runner import build_runner, create_agent, prepare_task_backend

    checkpoint = str(cfg.get("checkpoint") or "")
    if not checkpoint:
        raise ConfigError(
            "pbt.play needs checkpoint=<path to a .pth> (e.g. best/checkpoint.pth from "
            "pbt-analyze, or an rl_games checkpoint in <run dir>/nn/)."
        )
    prepare_task_backend(cfg)  # Isaac Gym before torch: loading the checkpoint imports torch
    from pbt.rl_games.agent import plain_checkpoint
    from pbt.storage.checkpoints import load_state_file

    state = load_state_file(checkpoint)
    if "model" not in state:
        raise ConfigError(f"checkpoint={checkpoint} holds no 'model' weights; pass an rl_games/PBT checkpoint.")
    if cfg.pbt.get("enabled", False):
        cfg.pbt.enabled = False
    network = recorded_network(checkpoint)
    if network is not None:
        from pbt.rl_games.surgery import spec_problem

        problem = spec_problem(state["model"], network) or network_limits_problem(cfg, network)
        if problem is not None:
            log.warning(
                "not playing with the network %s the record next to %s names: %s",
                network.describe(),
                checkpoint,
                problem,
            )
            network = None
    if network is not None:  # an evolved network: build the architecture the checkpoint holds
        from omegaconf import OmegaConf

        for key, value in network.overrides().items():
            OmegaConf.update(cfg, key, value, merge=False)
        log.info("the record next to %s names the network %s: playing with it", checkpoint, network.describe())
    with tempfile.TemporaryDirectory(prefix="pbt_play_") as tmp:
        with open_dict(cfg):
            cfg.train_dir = tmp
            cfg.experiment = "play"
        runner = build_runner(cfg)
        agent = create_agent(runner, "play")
        try:
            try:
                agent.set_weights(plain_checkpoint(state))  # rl_games' saves of a compiled run: _orig_mod.*
            except (RuntimeError, KeyError) as exc:
                raise ConfigError(
                    f"checkpoint={checkpoint} does not fit the policy this config builds ({exc}). Pass the task "
                    "and the network/train overrides the checkpoint was trained with."
                ) from exc
            # The checkpoint's env state (where its training envs were mid-episode) is not loaded: every
            # policy plays fresh episodes of the config's seed, the same draw for every checkpoint.
            objective_key = str((cfg.get("pbt") or {}).get("objective", "true_objective"))
            result = run_episodes(agent, episodes, objective_key)
        finally:
            if getattr(agent, "writer", None) is not None:
                agent.writer.close()
    log.info(
        "played %s for %d episodes (%d steps of %d envs, deterministic actions)",
        checkpoint,
        result.episodes,
        result.steps,
        int(agent.num_actors),
    )
    return result


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

_EPISODES: List[int] = [DEFAULT_EPISODES]


def split_episodes(args: Sequence[str]) -> Any:
    """(episodes, the other args): ``episodes=K`` is ours, everything else goes to Hydra."""
    episodes = DEFAULT_EPISODES
    rest = []
    for arg in args:
        if arg.startswith("episodes="):
            try:
                episodes = int(arg.split("=", 1)[1])
            except ValueError:
                raise ConfigError(f"{arg}: episodes must be a whole number, e.g. episodes=100.") from None
            if episodes < 1:
                raise ConfigError(f"{arg}: episodes must be >= 1.")
        else:
            rest.append(arg)
    return episodes, rest


def _hydra_entry() -> Callable[[], None]:
    import hydra
    from omegaconf import DictConfig

    from pbt.resolvers import CONFIG_DIR

    @hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
    def _hydra_main(cfg: DictConfig) -> None:
        try:
            result = play(cfg, _EPISODES[0])
        except PbtError as exc:
            log.error("%s", exc)
            sys.exit(2)
        log.info(result.line())

    return _hydra_main


def main(argv: Optional[Sequence[str]] = None) -> None:
    from pbt.resolvers import register_resolvers
    from pbt.tasks.registry import rewrite_task_overrides

    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        sys.exit(0)
    register_resolvers()
    try:
        _EPISODES[0], rest = split_episodes(args)
        sys.argv = [sys.argv[0], *rewrite_task_overrides(rest)]
    except PbtError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(2)
    _hydra_entry()()


if __name__ == "__main__":
    main()
