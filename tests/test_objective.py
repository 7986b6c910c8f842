"""The objective tracker: DexPBT's per-env rule, scalar objectives, dotted keys, readiness."""
import random

from pbt.objective import MemberObjective, ObjectiveTracker, lookup


def test_lookup_walks_dotted_keys_and_prefers_whole_keys():
    infos = {"episode": {"Curriculum/level": 3.0}, "a.b": 1.0, "a": {"b": 2.0}}
    assert lookup(infos, "episode.Curriculum/level") == 3.0
    assert lookup(infos, "a.b") == 1.0
    assert lookup(infos, "missing") is None
    assert lookup(None, "x") is None


def test_per_env_objective_known_once_half_the_envs_finished_a_complete_episode():
    t = ObjectiveTracker("true_objective", num_envs=4)
    t.update({"true_objective": [1.0, 2.0, 3.0, 4.0]}, [0, 1, 2, 3])  # first (partial) episodes never count
    assert t.value is None and not t.ready and not t.recent
    t.update({"true_objective": [10.0, 0.0, 0.0, 0.0]}, [0])
    assert t.value is None  # one env of four
    t.update({"true_objective": [0.0, 20.0, 0.0, 0.0]}, [1])
    assert t.ready and t.value == 15.0  # half of them: the mean of their last complete episode
    t.update({"true_objective": [0.0, 0.0, 30.0, 40.0]}, [2, 3])
    assert t.value == 25.0 and t.settled  # every env: (10 + 20 + 30 + 40) / 4
    assert list(t.recent) == [10.0, 20.0, 30.0, 40.0]


def test_entries_of_envs_that_did_not_finish_are_ignored():
    t = ObjectiveTracker("true_objective", num_envs=2)
    for _ in range(2):
        t.update({"true_objective": [1.0, 5.0]}, [0, 1])
    t.update({"true_objective": [100.0, 7.0]}, [1])
    assert t.value == (1.0 + 7.0) / 2


def test_scalar_objective_is_taken_as_is_once_ready():
    t = ObjectiveTracker("episode.success", num_envs=2)
    t.update({"episode": {"success": 0.25}}, [0, 1])
    assert t.value is None
    t.update({"episode": {"success": 0.5}}, [0])
    assert t.seen and t.value == 0.5


def test_missing_key_is_never_seen_and_remembers_reported_keys():
    t = ObjectiveTracker("true_objective", num_envs=1)
    t.update({"time_outs": [False], "scores": [1.0]}, [0])
    t.update({"time_outs": [False]}, [0])
    assert not t.seen and t.ready and t.settled and t.value is None
    assert t.seen_keys == ["scores", "time_outs"]


def test_new_weights_forget_the_objective_but_not_which_episodes_are_partial():
    t = ObjectiveTracker("true_objective", num_envs=2)
    t.update({"true_objective": [1.0, 1.0]}, [0])  # env 0's first (partial) episode
    t.update({"true_objective": [2.0, 2.0]}, [0])  # env 0 complete; env 1 still in its first
    assert t.value == 2.0
    t.reset()
    assert t.seen and not t.ready and t.value is None and not t.recent
    t.update({"true_objective": [0.0, 9.0]}, [1])  # still env 1's partial first episode: not counted
    assert t.value is None
    t.update({"true_objective": [5.0, 9.0]}, [0])  # env 0 finished after the change: counted
    assert t.value == 5.0 and list(t.recent) == [5.0]


def finish_time(num_envs: int, length: int, change: int, rng: random.Random) -> int:
    """Steps after ``change`` (1: the process start) until the objective is known again, on envs
    with ``length``-step episodes desynchronised at the start (each env's first ends at a random step)."""
    t = ObjectiveTracker("episode_return", num_envs)
    ends = [rng.randrange(1, length + 1) for _ in range(num_envs)]
    for step in range(1, 10 * length):
        if step == change:
            t.reset()
        done = [i for i, end in enumerate(ends) if (step - end) % length == 0 and step >= end]
        t.update({"episode_return": [1.0] * num_envs}, done)
        if step >= change and t.value is not None:
            return step - change
    raise AssertionError("never known")


def test_objective_is_known_again_within_one_episode_length_of_new_weights():
    """Reacher at its default: 200-step episodes. A change in place: about half an episode (it was
    up to two); a fresh process (partial first episodes): about one and a half."""
    rng = random.Random(0)
    after_change = [finish_time(1024, 200, 1000, rng) for _ in range(3)]
    assert all(80 <= steps <= 120 for steps in after_change), after_change
    at_start = [finish_time(1024, 200, 1, rng) for _ in range(3)]
    assert all(280 <= steps <= 320 for steps in at_start), at_start


def test_member_objective_falls_back_to_returns_until_the_task_reports_its_key():
    m = MemberObjective("true_objective", "episode_return", num_envs=2)
    for _ in range(2):
        m.update({"episode_return": [-5.0, -7.0]}, [0, 1])
    assert m.scoring is m.returns and m.value == -6.0 and m.reported.value is None
    assert m.recent[-2:] == [-5.0, -7.0]
    for _ in range(2):
        m.update({"episode_return": [1.0, 1.0], "true_objective": [0.5, 1.0]}, [0, 1])
    assert m.scoring is m.reported and m.value == 0.75
    m.reset()
    assert m.value is None and m.recent == [] and m.scoring is m.reported  # the task still reports its key


def test_an_objective_with_episodes_begun_before_new_weights_is_mixed():
    t = ObjectiveTracker("true_objective", num_envs=2)
    for _ in range(2):
        t.update({"true_objective": [1.0, 1.0]}, [0, 1])
    assert t.value == 1.0 and not t.mixed  # no change of weights yet
    t.reset()
    t.update({"true_objective": [3.0, 3.0]}, [0])  # env 0's episode began on the old weights
    assert t.value == 3.0 and t.mixed
    t.update({"true_objective": [4.0, 4.0]}, [0])  # this one began after the change
    assert t.value == 4.0 and not t.mixed
    t.update({"true_objective": [4.0, 6.0]}, [1])  # env 1: its first since the change, begun before
    assert t.value == 5.0 and t.mixed


def test_a_change_shows_once_every_env_finished_an_episode_since():
    t = ObjectiveTracker("true_objective", num_envs=3)
    for _ in range(2):
        t.update({"true_objective": [1.0, 1.0, 1.0]}, [0, 1, 2])
    assert t.effect_pending is None  # nothing changed in this process
    t.note_change()  # new hyperparameters: the objective is kept...
    assert t.value == 1.0 and not t.mixed
    assert t.effect_pending == (0, 3)  # ...but shows the old setting alone
    t.update({"true_objective": [2.0, 2.0, 2.0]}, [0])
    t.update({"true_objective": [3.0, 3.0, 3.0]}, [0])  # env 0 twice: still one env
    assert t.effect_pending == (1, 3)
    t.update({"true_objective": [2.0, 2.0, 2.0]}, [1, 2])
    assert t.effect_pending is None and t.value == (3.0 + 2.0 + 2.0) / 3


def test_new_weights_are_a_change_too_and_a_new_change_starts_the_count_over():
    m = MemberObjective("true_objective", "episode_return", num_envs=2)
    for _ in range(2):
        m.update({"true_objective": [1.0, 1.0]}, [0, 1])
    m.reset()
    assert m.effect_pending == (0, 2)
    m.update({"true_objective": [1.0, 1.0]}, [0, 1])
    assert m.effect_pending is None
    m.note_change()
    m.update({"true_objective": [1.0, 1.0]}, [1])
    m.note_change()  # a second mutation before the first showed
    assert m.effect_pending == (0, 2)
