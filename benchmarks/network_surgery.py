"""How much each architecture mutation changes the function an rl_games actor_critic MLP computes.

Builds real agents (Pendulum: continuous, separate value net off; Cartpole: discrete) with input
and value normalization, and for each hidden activation and each change (widen, narrow, add a
layer, remove a layer, parameter noise) measures the change of every deterministic output (mu and
sigma or logits, and the denormalized value) on 4096 random observations: the mean absolute change
relative to the mean absolute output, and the largest absolute change. Weights are the builder's
initial ones (not trained). Prints a markdown table.

    python benchmarks/network_surgery.py
"""
import logging
import sys
import tempfile
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "rl_games")]

import torch  # noqa: E402

from pbt.mutation.network import (ADD_LAYER, ADD_UNITS, PARAMETERS, REMOVE_LAYER, REMOVE_UNITS,  # noqa: E402
                                  NetworkChange, NetworkSpec)
from pbt.rl_games import surgery  # noqa: E402

CHANGES: List[Tuple[str, str, Tuple[int, ...], int]] = [
    ("widen layer 0 by 32 units", ADD_UNITS, (96, 64), 0),
    ("narrow layer 0 from 64 to 32 units", REMOVE_UNITS, (32, 64), 0),
    ("add a last layer (identity init)", ADD_LAYER, (64, 64, 64), 2),
    ("remove the last layer (folded)", REMOVE_LAYER, (64,), 1),
    ("parameter noise, mutation_sd 0.1", PARAMETERS, (64, 64), 0),
]


def main() -> None:
    logging.disable(logging.INFO)
    from test_donor_shapes import build
    from test_surgery import outputs

    lines = ["| task | activation | change | mean relative change | max absolute change |",
             "| --- | --- | --- | ---: | ---: |"]
    with tempfile.TemporaryDirectory() as tmp:
        for task in ("Pendulum", "Cartpole"):
            for activation in ("relu", "elu", "tanh"):
                for name, op, units, layer in CHANGES:
                    algo = build([f"task={task}", "train.params.network.mlp.units=[64,64]",
                                  f"train.params.network.mlp.activation={activation}",
                                  "train.params.config.normalize_value=true",
                                  "train.params.config.normalize_input=true"], Path(tmp) / "runs").algo
                    obs = torch.randn(4096, *algo.obs_shape, generator=torch.Generator().manual_seed(1)) * 2
                    before = outputs(algo, obs)
                    spec = surgery.current_spec(algo)
                    surgery.apply_change(algo, NetworkChange("architecture", spec, NetworkSpec(units, activation), op,
                                                             layer=layer, seed=7, mutation_sd=0.1))
                    diff = (outputs(algo, obs) - before).abs()
                    lines.append(f"| {task} | {activation} | {name} | {float(diff.mean() / before.abs().mean()):.4f} "
                                 f"| {float(diff.max()):.4g} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
