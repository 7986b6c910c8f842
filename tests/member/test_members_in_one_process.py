"""Two members of one population in one process (issue 26): a member is an object, not a process.

Two PPO agents on the built-in Pendulum (a constant objective each, so the ranking is fixed) train in
two threads of this process on one real workspace, each with its own PbtMember, lock, heartbeat and
observer; no signal handler is installed (the CLI's entry point installs it, one member per process).
Each publishes records, decides, and the worse member takes the leader's weights in place.
"""
import json
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import REPO

pytest.importorskip("torch")

TASK = '''
import torch
from pbt.tasks.pendulum import Pendulum


class ConstantPendulum(Pendulum):
    """Pendulum reporting a constant true_objective (env.objectiveValue): the ranking is fixed."""

    def _episode_end_extras(self, done):
        self.extras["true_objective"] = torch.full((self.num_envs,), float(self.env_cfg.get("objectiveValue", 1.0)),
                                                   device=self.device)
'''
from pbt.storage import Workspace  # noqa: E402
from pbt.storage.liveness import FINISHED, HEARTBEAT_FILE, read_heartbeat  # noqa: E402


def member_agent(idx: int, ws: Path, runs: Path, objective: float) -> Any:
    """Member ``idx``'s agent, built as ``pbt.train`` builds it (its observer runs the member's start-up)."""
    from hydra import compose, initialize_config_dir

    from pbt.resolvers import register_resolvers
    from pbt.rl_games.observer import WorkerObserver
    from pbt.rl_games.runner import build_runner, create_agent, prepare_config
    from pbt.tasks.registry import rewrite_task_overrides

    overrides = ["task=shape_task:ConstantPendulum", "pbt=pbt_default", f"pbt.policy_idx={idx}", "pbt.num_policies=2",
                 f"pbt.workspace={ws}", "pbt.interval_steps=4096", "pbt.start_after=0", "pbt.initial_delay=0",
                 "pbt.ready_after=0", "pbt.significance=null", "pbt.restart_mode=inplace", "max_frames=40960",
                 "num_envs=128", "sim_device=cpu", "rl_device=cpu", "torch_threads=1", "experiment=inproc",
                 f"train_dir={runs}", "++task.env.episodeLength=50", f"+task.env.objectiveValue={objective}"]
    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=rewrite_task_overrides(overrides))
    observer = WorkerObserver(prepare_config(cfg))
    runner = build_runner(cfg, observer, prepare=observer.prepare)
    return create_agent(runner, "run"), observer


def lineage(ws: Path, idx: int) -> List[Dict[str, Any]]:
    path = ws / f"{idx:03d}" / "lineage.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.training
def test_two_members_train_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    (tmp_path / "shape_task.py").write_text(TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    handler = signal.getsignal(signal.SIGTERM)
    members = [member_agent(0, ws, runs, 1.0), member_agent(1, ws, runs, 2.0)]
    assert signal.getsignal(signal.SIGTERM) is handler  # stop handling is the entry point's, not the member's
    assert members[0][1].member is not members[1][1].member
    errors: List[BaseException] = []

    def train(agent: Any) -> None:
        try:
            agent.train()
        except BaseException as exc:  # reported below, with the member's traceback
            errors.append(exc)
            raise

    threads = [threading.Thread(target=train, args=(agent,)) for agent, _ in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors and not any(t.is_alive() for t in threads), errors
    for _, observer in members:
        observer.member.close(FINISHED)
    workspace = Workspace(ws, 0, 2)
    records = workspace.latest_records()
    assert set(records) == {0, 1} and all(r.iteration >= 5 for r in records.values())  # both published
    replaced = [e for e in lineage(ws, 0) if e["action"] == "replace"]
    assert replaced and all(e["donor"] == 1 and e["mode"] == "inplace" for e in replaced), lineage(ws, 0)
    assert not [e for e in lineage(ws, 1) if e["action"] == "replace"]  # the leader keeps its own weights
    for idx in (0, 1):
        beat = read_heartbeat(workspace.store, f"{workspace.member_key(idx)}/{HEARTBEAT_FILE}")
        assert beat is not None and beat.state == FINISHED
