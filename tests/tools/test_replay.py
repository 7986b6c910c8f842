"""pbt.replay: schedule parsing and planning (refusals before training), and a real replay run whose
log shows each change applied at the first epoch end at/after its frame, with the agent's values."""
import re
import subprocess
import sys

import pytest
import yaml

from conftest import parse_summary, worker_env

from pbt.errors import ConfigError
from pbt.rl_games.a2c import ContinuousPpoAdapter
from pbt.tools.replay import ScheduleStep, load_schedule, parse_schedule, plan

C = "train.params.config."


def test_plan_splits_config_from_timed_changes():
    steps = [ScheduleStep(0, {C + "learning_rate": 1e-3, C + "horizon_length": 16}),
             ScheduleStep(0, {C + "gamma": 0.97}),
             ScheduleStep(5000, {C + "learning_rate": 5e-4, C + "horizon_length": 16}),
             ScheduleStep(9000, {C + "learning_rate": 5e-4})]
    current = {C + "learning_rate": 3e-4, C + "horizon_length": 32, C + "gamma": 0.99}
    initial, timed = plan(steps, current, ContinuousPpoAdapter.inplace_keys())
    # Anything may change at frame 0 (applied to the config before the agent is built).
    assert initial == {C + "learning_rate": 1e-3, C + "horizon_length": 16, C + "gamma": 0.97}
    assert [(t.index, t.frame, t.changes, t.before) for t in timed] == [
        (3, 5000, {C + "learning_rate": 5e-4}, {C + "learning_rate": 1e-3}), (4, 9000, {}, {})]


def test_plan_refuses_rebuild_keys_after_frame_zero():
    steps = [ScheduleStep(0, {C + "learning_rate": 1e-3}),
             ScheduleStep(4000, {C + "horizon_length": 64, C + "minibatch_size": 512, C + "gamma": 0.9})]
    with pytest.raises(ConfigError) as info:
        plan(steps, {C + "learning_rate": 3e-4, C + "horizon_length": 32, C + "minibatch_size": 1024,
                     C + "gamma": 0.99}, ContinuousPpoAdapter.inplace_keys())
    message = str(info.value)
    assert "step 2 (frame 4000)" in message and "horizon_length" in message and "minibatch_size" in message
    assert "gamma" not in message.split("Keys that can change")[0]
    assert "frame 0" in message


@pytest.mark.parametrize("document, match", [
    ({"steps": []}, "steps"),
    ({"steps": [{"frame": -1, "params": {}}]}, "frame must be"),
    ({"steps": [{"frame": 1.5, "params": {}}]}, "frame must be"),
    ({"steps": [{"frame": 0}]}, "'frame' and 'params'"),
    ({"steps": [{"frame": 0, "params": {"a": list(range(65))}}]}, "has type list"),  # short lists only
    ({"steps": [{"frame": 0, "params": {"a": {"b": 1}}}]}, "has type dict"),
    ({"steps": [{"frame": 0, "params": {"a": float("nan")}}]}, "finite"),
    ({"steps": [{"frame": 10, "params": {}}, {"frame": 5, "params": {}}]}, "frame order"),
    ("just text", "steps"),
])
def test_parse_schedule_errors(document, match):
    with pytest.raises(ConfigError, match=match):
        parse_schedule(document, "s.yaml")


def test_load_schedule_accepts_a_bare_list(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump([{"frame": 0, "params": {C + "gamma": 0.9}}]))
    assert load_schedule(path) == [ScheduleStep(0, {C + "gamma": 0.9})]
    with pytest.raises(ConfigError, match="no such file"):
        load_schedule(tmp_path / "missing.yaml")


APPLIED = re.compile(r"REPLAY step (?P<index>\d+)/(?P<total>\d+) scheduled at frame (?P<frame>\d+) applied at frame "
                     r"(?P<at>\d+) \(epoch (?P<epoch>\d+)\): (?P<changes>.*)")
CHANGE = re.compile(r"(?P<key>[\w.]+) (?P<before>\S+) -> (?P<after>\S+) \(agent (?P<agent>[^)\s]+)\)")
RATE = re.compile(r"adaptive rate in force (?P<before>\S+) -> (?P<after>\S+) \(x(?P<factor>[^)]+)\)")

NUM_ENVS, HORIZON = 128, 16
EPOCH_FRAMES = NUM_ENVS * HORIZON  # 2048


@pytest.mark.training
def test_replay_applies_changes_at_the_recorded_frames(tmp_path):
    schedule = {"steps": [
        {"frame": 0, "params": {C + "learning_rate": 7e-4, C + "gamma": 0.97, C + "horizon_length": HORIZON}},
        {"frame": 15000, "params": {C + "learning_rate": 4e-4, C + "e_clip": 0.15, C + "horizon_length": HORIZON}},
        {"frame": 16000, "params": {C + "gamma": 0.98}},  # due at the same epoch end as the previous step
        {"frame": 30720, "params": {C + "mini_epochs": 3, C + "entropy_coef": 0.001, C + "grad_norm": 0.5,
                                    C + "kl_threshold": 0.02, C + "tau": 0.9, C + "critic_coef": 1.5}},
    ]}
    path = tmp_path / "schedule.yaml"
    path.write_text(yaml.safe_dump(schedule))
    proc = subprocess.run(
        [sys.executable, "-m", "pbt.replay", str(path), "task=Pendulum", "max_frames=50000", f"num_envs={NUM_ENVS}",
         "sim_device=cpu", "rl_device=cpu", "torch_threads=1", f"train_dir={tmp_path / 'runs'}", "experiment=replay",
         "train.params.config.minibatch_size=1024"],
        cwd=str(tmp_path), env=worker_env(), capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "REPLAY step 1/4 at frame 0 applied as config before training: gamma=0.97, horizon_length=16, " \
           "learning_rate=0.0007" in output
    applied = [m.groupdict() for m in APPLIED.finditer(output)]
    assert [int(a["index"]) for a in applied] == [2, 3, 4]
    for entry in applied:
        scheduled, at = int(entry["frame"]), int(entry["at"])
        # The first epoch end at or after the scheduled frame (epochs end every EPOCH_FRAMES frames).
        assert scheduled <= at < scheduled + EPOCH_FRAMES and at % EPOCH_FRAMES == 0, entry
        step = next(s for s in schedule["steps"] if s["frame"] == scheduled)
        changes = {m["key"]: m.groupdict() for m in CHANGE.finditer(entry["changes"])}
        expected = {k[len(C):]: v for k, v in step["params"].items() if k != C + "horizon_length"}
        assert set(changes) == set(expected)
        carried = RATE.search(entry["changes"])  # Pendulum's PPO config: the adaptive schedule
        assert carried is not None, entry
        before, after, factor = float(carried["before"]), float(carried["after"]), float(carried["factor"])
        lr = "learning_rate"
        if lr in expected:  # scaled as the schedule scales learning_rate, within the schedule's bounds
            assert factor == pytest.approx(expected[lr] / float(changes[lr]["before"]), rel=1e-6)
        else:
            assert factor == 1.0
        assert after == pytest.approx(min(max(before * factor, 1e-6), 1e-2), rel=1e-6)
        for key, value in expected.items():
            assert float(changes[key]["after"]) == value
            in_force = after if key == lr else value
            assert float(changes[key]["agent"]) == pytest.approx(in_force, rel=1e-6), (key, changes[key])
    assert applied[0]["at"] == applied[1]["at"]  # both due at the same epoch end, applied in order
    summary = parse_summary(output)
    assert summary["frames"] >= 50000


def test_an_evolved_cnns_conv_layers_are_a_schedule_value() -> None:
    """best/schedule.yaml of a member that evolved its CNN names train.params.network.cnn.convs: a
    list of small mappings; a mapping anywhere else is still refused."""
    from pbt.tools.replay import parse_schedule

    convs = [{"filters": 12, "kernel_size": 3, "strides": 1, "padding": 0}]
    (step,) = parse_schedule({"steps": [{"frame": 0, "params": {"train.params.network.cnn.convs": convs}}]})
    assert step.params == {"train.params.network.cnn.convs": convs}
    with pytest.raises(ConfigError, match="has type dict"):
        parse_schedule({"steps": [{"frame": 0, "params": {"train.params.config.gamma": {"a": 1}}}]})
