"""PB2 and MF-PBT with real worker processes sharing one workspace (Pendulum on CPU, 4 members).

- PB2: members explore with the GP bandit fitted to the interval data their peers' records carry
  (the lineage says how many points of how many members), always inside the search space;
- MF-PBT: sub-populations [0, 1] (every interval) and [2, 3] (every 3rd, crippled); the slow
  sub-population takes the healthy fast members' weights by migration but keeps its own best
  member's hyperparameters (asymmetric migration), and acts only at multiples of 3.

A minute or two each on 2 cores: run under ``flock /tmp/heavy.lock``.
"""
import re
from pathlib import Path

import pytest
from test_population_selection import CRIPPLED, run_population

pytest.importorskip("torch")

LR = "train.params.config.learning_rate"
ENT = "train.params.config.entropy_coef"
CONSTANT = "train.params.config.lr_schedule=constant"
SPACE = (f"++pbt.search_space={{{LR}:{{type:loguniform,low:1.0e-5,high:1.0e-2}},"
         f"{ENT}:{{type:uniform,low:0.0,high:0.01}}}}")


@pytest.mark.training
def test_pb2_members_explore_with_the_gp_fitted_to_their_peers_data(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    extra = ["pbt/selection=pb2", SPACE, CONSTANT]
    result = run_population(tmp_path, 400_000, {i: extra for i in range(4)})
    explored = [e for lineage in result["lineages"] for e in lineage if e["action"] in ("mutate", "replace")
                and e.get("mode") != "startup"]
    assert explored, "\n\n".join(log[-3000:] for log in result["logs"])
    fitted = [e for e in explored if "PB2: UCB over" in e["reason"]]
    assert fitted, [e["reason"] for e in explored]
    counts = [re.search(r"PB2: UCB over (\d+) points of (\d+) member", e["reason"]) for e in fitted]
    assert max(int(m.group(2)) for m in counts if m) >= 2  # peers' records fed the model, not only its own
    for entry in explored:
        assert 1e-5 <= entry["params_after"][LR] <= 1e-2 and 0.0 <= entry["params_after"][ENT] <= 0.01


@pytest.mark.training
def test_mfpbt_migrates_weights_but_not_hyperparameters_into_the_slow_sub_population(tmp_path: Path) -> None:
    # run_population cripples members 2 and 3 (learning rate 1e-7): the slow sub-population [2, 3];
    # significance off: early on, healthy members are not yet significantly better (unit-tested separately)
    common = ["pbt/selection=mfpbt", "pbt.mfpbt_frequencies=[1,3]", "pbt.significance=null", CONSTANT]
    result = run_population(tmp_path, 400_000, {i: common for i in range(4)})
    acted = {i: [e for e in lineage if e["action"] in ("mutate", "replace") and e.get("mode") != "startup"]
             for i, lineage in enumerate(result["lineages"])}
    migrations = [e for i in CRIPPLED for e in acted[i] if e["reason"].startswith("replace: migration from member")]
    assert migrations, [e["reason"] for i in CRIPPLED for e in acted[i]]
    for entry in migrations:
        assert entry["donor"] in (0, 1) and "sub-population 0 (frequency 1" in entry["reason"]
        assert "sub-population 1 (frequency 3, members [2, 3])" in entry["reason"]
        # a faster migrant's weights, but the hyperparameters of its own sub-population's best member
        assert "hyperparameters (best of its own sub-population" in entry["reason"]
        assert entry["params_after"][LR] < 1e-6, entry
    for idx in CRIPPLED:
        assert all(e["iteration"] % 3 == 0 for e in acted[idx]), [(e["iteration"], e["reason"]) for e in acted[idx]]
