"""PBT scalars in TensorBoard: unit tests with a fake writer, the event files of a real population
(tests/pbt_population.py), and the W&B run id / resume logic with a fake ``wandb`` module."""
import math
import sys
import types
from typing import Any, Dict, List, Tuple

import pytest

from pbt_population import CRIPPLED, N, population

from pbt.errors import ConfigError
from pbt.rl_games.tensorboard import PbtScalars, hp_diversity, start_wandb, wandb_run_id, wandb_settings
from pbt.storage.lineage import LineageEntry
from pbt.storage.record import Record

LR = "train.params.config.learning_rate"
GAMMA = "train.params.config.gamma"


class FakeWriter:
    def __init__(self) -> None:
        self.scalars: List[Tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def last(self, tag: str) -> float:
        return [v for t, v, _ in self.scalars if t == tag][-1]


def record(idx: int, objective, params: Dict[str, Any], iteration: int = 3) -> Record:
    return Record(policy_idx=idx, iteration=iteration, frame=iteration * 100, objective=objective, params=params,
                  checkpoint=f"{iteration:06d}.pth", checksum="0" * 64)


def event(action: str, iteration: int, donor=None, mode="inplace", after=None) -> LineageEntry:
    return LineageEntry(policy_idx=1, action=action, iteration=iteration, donor=donor,
                        mode=mode if action != "keep" else None, params_after=after or {}, frame=iteration * 100)


def test_log_iteration_scalars():
    writer = FakeWriter()
    own = record(1, -50.0, {LR: 1e-3, GAMMA: 0.99})
    records = {0: record(0, -10.0, {LR: 1e-2, GAMMA: 0.99}), 1: own, 2: record(2, None, {LR: 1e-4, GAMMA: 0.99}),
               3: record(3, -30.0, {LR: 1e-3, GAMMA: 0.99})}
    lineage = [event("mutate", 0, mode="startup"), event("keep", 1), event("mutate", 2),
               event("replace", 3, donor=0, after={LR: 2e-3, GAMMA: 0.98})]
    written = PbtScalars(writer).log_iteration(300, own, records, lineage)
    assert all(step == 300 for _, _, step in writer.scalars)
    assert written["pbt/hp/learning_rate"] == 2e-3 and written["pbt/hp/gamma"] == 0.98  # after the decision
    assert written["pbt/restarts"] == 2  # the initial mutation of a fresh member is no restart
    assert written["pbt/replaced_by"] == 0
    assert written["pbt/population_best"] == -10.0
    assert written["pbt/population_mean"] == pytest.approx((-10 - 50 - 30) / 3)
    assert written["pbt/rank"] == 3
    spread = [math.log(1e-2), math.log(1e-3), math.log(1e-4), math.log(1e-3)]
    mean = sum(spread) / 4
    assert written["pbt/hp_diversity"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in spread) / 4) / 2)
    # A keep iteration: replaced_by -1, hyperparameters of the record.
    lineage.append(event("keep", 4, after={LR: 2e-3, GAMMA: 0.98}))
    own4 = record(1, -20.0, {LR: 2e-3, GAMMA: 0.98}, iteration=4)
    written = PbtScalars(writer).log_iteration(400, own4, {1: own4}, lineage)
    assert written["pbt/replaced_by"] == -1 and written["pbt/restarts"] == 2
    assert "pbt/hp_diversity" not in written  # one member: no spread


def test_restart_count_continues_after_a_restart():
    """After an exec restart a new writer (same summaries dir) starts from the lineage on disk."""
    lineage = [event("mutate", 0, mode="startup"), event("replace", 2, donor=1), event("mutate", 5)]
    writer = FakeWriter()
    PbtScalars(writer).log_iteration(600, record(0, 1.0, {}, 6), {}, lineage + [event("keep", 6)])
    assert writer.last("pbt/restarts") == 2


def test_hp_diversity():
    assert hp_diversity([{LR: 1e-3}, {LR: 1e-3}]) == 0.0
    assert hp_diversity([{LR: 1e-3}]) is None
    assert hp_diversity([{LR: 0.0, GAMMA: 0.9}, {LR: 1e-3, GAMMA: 0.9}]) == 0.0  # LR not positive everywhere
    assert hp_diversity([{LR: 1.0}, {LR: math.e ** 2}]) == pytest.approx(1.0)


def test_for_member_logs_starting_hyperparameters():
    writer = FakeWriter()
    member = types.SimpleNamespace(params={LR: 1e-3, "train.params.config.mini_epochs": 5})
    assert PbtScalars.for_member(None, member, 0) is None and PbtScalars.for_member(writer, None, 0) is None
    PbtScalars.for_member(writer, member, 1234)
    assert sorted(writer.scalars) == [("pbt/hp/learning_rate", 1e-3, 1234), ("pbt/hp/mini_epochs", 5.0, 1234)]


# -- the event files of a real population ---------------------------------------------------------


@pytest.fixture(scope="session")
def pop(tmp_path_factory):
    return population(tmp_path_factory)


def scalars(directory) -> Dict[str, List[Tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"] if tag.startswith("pbt/")}


@pytest.mark.training
def test_real_population_event_files(pop):
    for idx in range(N):
        tags = scalars(pop.summaries(idx))
        for tag in ("pbt/objective", "pbt/hp/learning_rate", "pbt/hp/gamma", "pbt/restarts", "pbt/replaced_by",
                    "pbt/population_best", "pbt/population_mean", "pbt/hp_diversity"):
            assert tag in tags, (idx, tag, sorted(tags))
        lineage = pop.lineage(idx)
        exploits = [e for e in lineage if e["action"] in ("mutate", "replace") and e["mode"] != "startup"]
        assert tags["pbt/restarts"][-1][1] == len(exploits)
        # One point per PBT iteration, at the frame of the decision.
        decisions = [e for e in lineage if e["mode"] != "startup"]
        assert [s for s, _ in tags["pbt/replaced_by"]] == [e["frame"] for e in decisions]
        expected = [float(e["donor"]) if e["action"] == "replace" else -1.0 for e in decisions]
        assert [v for _, v in tags["pbt/replaced_by"]] == expected
        # The learning rate curve starts at the member's start and follows its lineage.
        lr = tags["pbt/hp/learning_rate"]
        startup = lineage[0]["params_after"]["train.params.config.learning_rate"]
        assert lr[0] == (0, pytest.approx(startup, rel=1e-6))
        assert lr[-1][1] == pytest.approx(lineage[-1]["params_after"]["train.params.config.learning_rate"], rel=1e-6)
        assert all(v >= b for (_, v), (_, b) in zip(tags["pbt/population_best"], tags["pbt/population_mean"]))
    replaced = scalars(pop.summaries(CRIPPLED))["pbt/replaced_by"]
    assert any(v >= 0 for _, v in replaced)


# -- W&B ------------------------------------------------------------------------------------------------


class FakeWandb(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("wandb")
        self.calls: List[Dict[str, Any]] = []

    def init(self, **kwargs: Any) -> Dict[str, Any]:
        self.calls.append(kwargs)
        return {"id": kwargs["id"]}


def worker_cfg(idx: int, restarted: bool = False, **extra: Any) -> Dict[str, Any]:
    cfg = {"wandb_activate": True, "wandb_project": "proj", "wandb_entity": "", "wandb_group": "",
           "wandb_name": "", "experiment": "pendulum_sweep", "train_dir": "runs",
           "pbt": {"enabled": True, "policy_idx": idx, "restarted": restarted},
           "train": {"params": {"config": {"full_experiment_name": f"pendulum_sweep_pbt{idx:03d}"}}}}
    cfg.update(extra)
    return cfg


def test_wandb_resumes_the_same_run_across_restarts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake = FakeWandb()
    start_wandb(worker_cfg(2), module=fake)
    start_wandb(worker_cfg(2, restarted=True), module=fake)  # the same member after an exec restart
    start_wandb(worker_cfg(3), module=fake)
    first, again, other = fake.calls
    assert first["id"] == again["id"] != other["id"]
    assert first["resume"] == "allow" and first["sync_tensorboard"] is True
    assert first["project"] == "proj" and first["entity"] is None
    assert first["group"] == "pendulum_sweep" and first["name"] == "pendulum_sweep_pbt002"
    assert first["dir"].endswith("pendulum_sweep_pbt002") and (tmp_path / first["dir"]).is_dir()


def test_wandb_run_ids():
    assert wandb_run_id("exp", 1) == wandb_run_id("exp", 1)
    assert wandb_run_id("exp", 1) != wandb_run_id("exp", 2) != wandb_run_id("exp", None)
    assert wandb_run_id("a/b", 0) != wandb_run_id("a-b", 0)  # the same slug, different names
    long_id = wandb_run_id("x" * 300 + " weird/chars", 7)
    assert len(long_id) <= 64 and all(c.isalnum() or c in "-_" for c in long_id)
    explicit = wandb_settings(worker_cfg(0, wandb_group="g", wandb_name="n", wandb_entity="me"))
    assert (explicit["group"], explicit["name"], explicit["entity"]) == ("g", "n", "me")
    single = wandb_settings({"wandb_activate": True, "experiment": "solo", "pbt": {"enabled": False}})
    assert single["id"] == wandb_run_id("solo", None)


def test_wandb_off_or_missing(monkeypatch):
    assert start_wandb({"wandb_activate": False}) is None
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(ConfigError, match="pip install wandb"):
        start_wandb(worker_cfg(0))


def test_a_curriculum_member_logs_its_stage_and_ranks_within_it() -> None:
    import dataclasses

    writer = FakeWriter()
    own = dataclasses.replace(record(1, 0.3, {LR: 1e-3}), stage=1, stage_frame=200)
    records = {1: own, 0: dataclasses.replace(record(0, 0.9, {LR: 1e-3}), stage=0),
               2: dataclasses.replace(record(2, 0.5, {LR: 1e-3}), stage=1)}
    moved = dataclasses.replace(event("mutate", 3, after={LR: 1e-3}), stage=2)
    written = PbtScalars(writer).log_iteration(300, own, records, [moved])
    assert written["pbt/curriculum_stage"] == 2.0  # the stage it just entered
    assert written["pbt/population_best"] == 0.5 and written["pbt/rank"] == 2.0  # stage 1 only
    plain = PbtScalars(FakeWriter()).log_iteration(300, record(1, 0.3, {LR: 1e-3}), {1: record(1, 0.3, {LR: 1e-3})}, [])
    assert "pbt/curriculum_stage" not in plain
