"""The objective tracker: DexPBT's per-env rule, scalar objectives, dotted keys, readiness."""
from pbt.objective import MemberObjective, ObjectiveTracker, lookup


def test_lookup_walks_dotted_keys_and_prefers_whole_keys():
    infos = {"episode": {"Curriculum/level": 3.0}, "a.b": 1.0, "a": {"b": 2.0}}
    assert lookup(infos, "episode.Curriculum/level") == 3.0
    assert lookup(infos, "a.b") == 1.0
    assert lookup(infos, "missing") is None
    assert lookup(None, "x") is None


def test_per_env_objective_known_once_every_env_finished_two_episodes():
    t = ObjectiveTracker("true_objective", num_envs=3)
    t.update({"true_objective": [1.0, 2.0, 3.0]}, [0, 1, 2])  # first (partial) episodes
    assert t.value is None and not t.ready
    t.update({"true_objective": [10.0, 20.0, 0.0]}, [0, 1])
    assert t.value is None  # env 2 finished only once
    t.update({"true_objective": [0.0, 0.0, 30.0]}, [2])
    assert t.ready and t.value == 20.0  # mean of each env's last episode: (10 + 20 + 30) / 3
    assert list(t.recent)[-3:] == [10.0, 20.0, 30.0]


def test_entries_of_envs_that_did_not_finish_are_ignored():
    t = ObjectiveTracker("true_objective", num_envs=2)
    for _ in range(2):
        t.update({"true_objective": [1.0, 5.0]}, [0, 1])
    t.update({"true_objective": [100.0, 7.0]}, [1])
    assert t.value == (1.0 + 7.0) / 2


def test_scalar_objective_is_taken_as_is_once_ready():
    t = ObjectiveTracker("episode.success", num_envs=2)
    t.update({"episode": {"success": 0.25}}, [0, 1])
    t.update({"episode": {"success": 0.5}}, [0, 1])
    assert t.seen and t.value == 0.5


def test_missing_key_is_never_seen_and_remembers_reported_keys():
    t = ObjectiveTracker("true_objective", num_envs=1)
    t.update({"time_outs": [False], "scores": [1.0]}, [0])
    t.update({"time_outs": [False]}, [0])
    assert not t.seen and t.ready and t.value is None
    assert t.seen_keys == ["scores", "time_outs"]


def test_reset_forgets_everything():
    t = ObjectiveTracker("true_objective", num_envs=1)
    for _ in range(2):
        t.update({"true_objective": [1.0]}, [0])
    t.reset()
    assert not t.seen and not t.ready and t.value is None and not t.recent


def test_member_objective_falls_back_to_returns_until_the_task_reports_its_key():
    m = MemberObjective("true_objective", "episode_return", num_envs=2)
    for _ in range(2):
        m.update({"episode_return": [-5.0, -7.0]}, [0, 1])
    assert m.scoring is m.returns and m.value == -6.0 and m.reported_value is None
    assert m.recent[-2:] == [-5.0, -7.0]
    for _ in range(2):
        m.update({"episode_return": [1.0, 1.0], "true_objective": [0.5, 1.0]}, [0, 1])
    assert m.scoring is m.reported and m.value == 0.75 and m.reported_value == 0.75
    m.reset()
    assert m.value is None and m.recent == [] and m.scoring is m.returns
