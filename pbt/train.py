"""``python -m pbt.train key=value ...``: train one worker (one PBT member when ``pbt`` is on)."""

import logging
import sys

import hydra
from omegaconf import DictConfig

from pbt.errors import PbtError
from pbt.overrides import prepare
from pbt.resolvers import CONFIG_DIR

log = logging.getLogger("pbt.train")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from pbt.rl_games.runner import run

    try:
        run(cfg)
    except PbtError as exc:  # a refusal says what to fix; its traceback would bury that
        log.error("%s: %s", type(exc).__name__, exc)
        sys.exit(2)


def main() -> None:
    """Entry point: check and rewrite the overrides (:func:`pbt.overrides.prepare`), then hand over to Hydra."""
    try:
        sys.argv = [sys.argv[0], *prepare(sys.argv[1:])]
    except PbtError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(2)
    _hydra_main()


if __name__ == "__main__":
    main()
