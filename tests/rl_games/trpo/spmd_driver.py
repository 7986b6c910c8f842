"""Run by tests/rl_games/trpo/test_spmd.py under torchrun (2 CPU ranks): a TRPO agent trains 4 epochs;
before epoch 3, rank 0 alone carries out a PBT decision in place (new weights, new max_kl_divergence),
as only rank 0 runs PBT. Each rank writes one JSON line per epoch to <dir>/rank<r>.jsonl: what it holds
after the update."""
import copy
import json
import logging
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

import torch  # noqa: E402
from test_agent import build  # noqa: E402

from pbt.rl_games import make_adapter  # noqa: E402
from pbt.rl_games.agent import CONFIG  # noqa: E402
from pbt.rl_games.trpo import spmd  # noqa: E402

logging.basicConfig(level=logging.INFO)
rank = int(os.environ["RANK"])
algo = build(["train.params.config.multi_gpu=True", "seed=7"], Path(sys.argv[1]) / f"runs{rank}", "spmd").algo
adapter = make_adapter(algo, "trpo")
# rl_games' train() starts by sending rank 0's model to every rank; this driver calls train_epoch itself.
state = [algo.model.state_dict()]
torch.distributed.broadcast_object_list(state, 0)
algo.model.load_state_dict(state[0])
for epoch in range(1, 5):
    if epoch == 3 and rank == 0:
        donor = copy.deepcopy(adapter.full_state())
        donor["model"] = {k: (v + 0.05 if v.is_floating_point() else v) for k, v in donor["model"].items()}
        adapter.load_weights(donor)
        adapter.set_hyperparameters({CONFIG + "max_kl_divergence": 0.0123, CONFIG + "gamma": 0.91})
    algo.epoch_num = epoch
    algo.train_epoch()
    with open(Path(sys.argv[1]) / f"rank{rank}.jsonl", "a") as out:  # own file: the ranks' stdout interleave
        out.write(json.dumps({"rank": rank, "epoch": epoch, "checksum": spmd.checksum(algo),
                              "max_kl": algo.trpo.max_kl_divergence, "gamma": algo.gamma,
                              "kl": algo.last_step["kl"]}) + "\n")
torch.distributed.destroy_process_group()
