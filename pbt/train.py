"""``python -m pbt.train key=value ...``: train one worker (one PBT member when ``pbt`` is on)."""
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from pbt.errors import PbtError
from pbt.groups import check_group_choices
from pbt.resolvers import CONFIG_DIR, register_resolvers
from pbt.tasks.registry import rewrite_task_overrides

log = logging.getLogger("pbt.train")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from pbt.rl_games.runner import run

    run(cfg)


def main() -> None:
    """Entry point: rewrite ``task=`` forms Hydra cannot compose, then hand over to Hydra."""
    register_resolvers()
    try:
        sys.argv = [sys.argv[0], *rewrite_task_overrides(sys.argv[1:])]
        check_group_choices(sys.argv[1:], Path(CONFIG_DIR))
    except PbtError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(2)
    _hydra_main()


if __name__ == "__main__":
    main()
