"""PBT curves in TensorBoard (through rl_games' writer), and optional Weights & Biases.

Per member, at every PBT iteration (:meth:`PbtScalars.log_member`, called by
:class:`pbt.rl_games.exploit.Exploiter`):

* ``pbt/hp/<short key>``: each hyperparameter of the mutation scheme in force, over frames;
* ``pbt/restarts``: how many times the member took new weights or hyperparameters so far (every
  replace or mutate in its lineage after the fresh member's initial mutation);
* ``pbt/replaced_by``: the donor's policy index at a replace event, -1 otherwise;
* ``pbt/rank``: 1 = the best objective among the records seen at this iteration;
* ``pbt/population_best``, ``pbt/population_mean``: of the objectives of the records seen;
* ``pbt/hp_diversity``: the mean over hyperparameters of the standard deviation of their log
  values across members (0: every member uses the same values).

``pbt/objective`` itself is logged by the observer every epoch. rl_games writes summaries to
``<train_dir>/<full_experiment_name>/summaries``, which stays the same across PBT restarts, and
the counts come from the lineage on disk, so curves continue across restarts.

W&B (``wandb_activate=true``): :func:`start_wandb` starts (or, after a restart, resumes) one W&B
run per member, with a stable id derived from the experiment name and the policy index, syncing
rl_games' TensorBoard scalars. ``wandb`` is imported only then.
"""

import hashlib
import logging
import math
import re
import statistics
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from pbt.curriculum.stages import same_stage
from pbt.errors import ConfigError, PbtError
from pbt.keys import short_keys
from pbt.storage.lineage import LineageEntry
from pbt.storage.record import Record

if TYPE_CHECKING:
    from pbt.member import PbtMember

log = logging.getLogger(__name__)

PREFIX = "pbt"
WANDB_INSTALL_HINT = "pip install wandb"


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def hp_diversity(params_by_member: Sequence[Mapping[str, Any]]) -> Optional[float]:
    """Mean over hyperparameters of the population standard deviation of log(value).

    Only keys with a positive finite value in every member count (a learning rate of 1e-3 vs 1e-4
    is as far apart as 1e-1 vs 1e-2). None when fewer than two members or no such key.
    """
    if len(params_by_member) < 2:
        return None
    keys = set.intersection(*(set(p) for p in params_by_member))
    spreads: List[float] = []
    for key in sorted(keys):
        values = [_number(p[key]) for p in params_by_member]
        positive = [v for v in values if v is not None and v > 0]
        if len(positive) < len(values):
            continue
        spreads.append(statistics.pstdev(math.log(v) for v in positive))
    return sum(spreads) / len(spreads) if spreads else None


class PbtScalars:
    """Writes one member's PBT scalars to a TensorBoard-like writer (``add_scalar(tag, value, step)``)."""

    def __init__(self, writer: Any, prefix: str = PREFIX) -> None:
        self.writer = writer
        self.prefix = prefix

    @classmethod
    def for_member(cls, writer: Any, member: Optional["PbtMember"], frame: int) -> Optional["PbtScalars"]:
        """The scalars of a PBT member (None without PBT or without a writer); logs the
        hyperparameters it starts with at ``frame``, so their curves begin where it starts."""
        if writer is None or member is None:
            return None
        scalars = cls(writer)
        scalars.log_hyperparameters(int(frame), member.params)
        return scalars

    def _add(self, tag: str, value: float, frame: int, written: Dict[str, float]) -> None:
        full = f"{self.prefix}/{tag}"
        self.writer.add_scalar(full, value, frame)
        written[full] = value

    def log_hyperparameters(self, frame: int, params: Mapping[str, Any]) -> Dict[str, float]:
        """``pbt/hp/<short key>`` for every numeric hyperparameter. Returns what was written."""
        written: Dict[str, float] = {}
        names = short_keys(sorted(params))
        for key in sorted(params):
            value = _number(params[key])
            if value is not None:
                self._add(f"hp/{names[key]}", value, frame, written)
        return written

    def log_iteration(
        self,
        frame: int,
        own: Optional[Record],
        records: Mapping[int, Record],
        lineage: Sequence[LineageEntry],
        params: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, float]:
        """Write one PBT iteration's scalars and return them (tag -> value).

        ``own``: this member's record of the iteration; ``records``: the population's records it
        ranked against (own included); ``lineage``: this member's lineage, whose last entry is this
        iteration's decision when it was already appended; ``params``: the hyperparameters in
        force after the decision (default: the last entry's ``params_after``, else the record's).
        """
        written: Dict[str, float] = {}
        iteration = own.iteration if own is not None else None
        last = lineage[-1] if lineage else None
        # the last entry when it is this iteration's decision
        current = last if last is not None and (iteration is None or last.iteration == iteration) else None
        if params is None:
            if current is not None and current.params_after:
                params = current.params_after
            else:
                params = own.params if own is not None else {}
        written.update(self.log_hyperparameters(frame, params))
        self._add("restarts", float(sum(1 for e in lineage if e.is_exploit)), frame, written)
        donor = current.donor if current is not None and current.action == "replace" else None
        self._add("replaced_by", float(donor) if donor is not None else -1.0, frame, written)
        stage = current.stage if current is not None and current.stage is not None else None
        if stage is None and own is not None:
            stage = own.stage
        if stage is not None:  # a curriculum: its stage, and the population of its stage (others do not compare)
            self._add("curriculum_stage", float(stage), frame, written)
            if own is not None and own.stage is not None:
                records = same_stage(records, own.stage)
        objectives = [float(r.objective) for r in records.values() if r.objective is not None and r.has_objective]
        if objectives:
            self._add("population_best", max(objectives), frame, written)
            self._add("population_mean", sum(objectives) / len(objectives), frame, written)
            if own is not None and own.objective is not None and own.has_objective:
                rank = 1 + sum(1 for o in objectives if o > own.objective)
                self._add("rank", float(rank), frame, written)
        diversity = hp_diversity([r.params for r in records.values()])
        if diversity is not None:
            self._add("hp_diversity", diversity, frame, written)
        network = (
            current.network if current is not None and current.network else (own.network if own is not None else None)
        )
        if network:  # an evolved network (pbt/mutation=agilerl): its size over time
            units = network.get("units") or []
            self._add("network_layers", float(len(units)), frame, written)
            self._add("network_units", float(sum(units)), frame, written)
            if network.get("parameters") is not None:
                self._add("network_parameters", float(network["parameters"]), frame, written)
        return written

    def log_member(self, frame: int, member: "PbtMember") -> Dict[str, float]:
        """:meth:`log_iteration` from a :class:`pbt.member.PbtMember` after its decision was
        logged: reads its latest records and lineage from the workspace. Never raises for a
        workspace problem (a missing curve point must not stop training)."""
        try:
            records = member.workspace.latest_records(max_iteration=member.last_iteration)
            own = records.get(member.pbt.policy_idx)
            lineage = member.workspace.read_lineage()
        except (PbtError, OSError) as exc:
            log.warning(
                "PBT policy %d: TensorBoard PBT scalars skipped at frame %d: %s", member.pbt.policy_idx, frame, exc
            )
            return {}
        return self.log_iteration(int(frame), own, records, lineage)


# --------------------------------------------------------------------------------------------
# Weights & Biases
# --------------------------------------------------------------------------------------------


def wandb_run_id(experiment: str, policy_idx: Optional[int] = None) -> str:
    """A W&B run id that is the same every time this member (re)starts: the experiment name
    (letters, digits, ``-``, ``_``), the policy index, and a short hash of both, so two names
    that clean up alike do not collide. At most 64 characters."""
    raw = f"{experiment}:{'' if policy_idx is None else policy_idx}"
    digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", experiment).strip("-")[:40] or "run"
    member = "" if policy_idx is None else f"-pbt{int(policy_idx):03d}"
    return f"{slug}{member}-{digest}"


def wandb_settings(cfg: Mapping[str, Any]) -> Dict[str, Any]:
    """The keyword arguments of ``wandb.init`` for a worker config (plain dict)."""
    pbt = cfg.get("pbt") or {}
    policy_idx = int(pbt.get("policy_idx", 0)) if pbt.get("enabled") else None
    experiment = str(cfg.get("experiment") or "run")
    train_config = ((cfg.get("train") or {}).get("params") or {}).get("config") or {}
    full_name = str(train_config.get("full_experiment_name") or experiment)
    run_dir = None
    if cfg.get("train_dir"):
        from pathlib import Path

        run_dir = str(Path(str(cfg["train_dir"])) / full_name)
    return {
        "project": str(cfg.get("wandb_project") or "pbt"),
        "entity": str(cfg["wandb_entity"]) if cfg.get("wandb_entity") else None,
        "group": str(cfg.get("wandb_group") or experiment),
        "name": str(cfg.get("wandb_name") or full_name),
        "id": wandb_run_id(experiment, policy_idx),
        "resume": "allow",
        "sync_tensorboard": True,
        "config": dict(cfg),
        "dir": run_dir,
    }


def start_wandb(cfg: Mapping[str, Any], module: Any = None) -> Any:
    """Start or resume this worker's W&B run when ``wandb_activate`` is true; else do nothing.

    Call it before rl_games creates its TensorBoard writer (``AlgoObserver.before_init``):
    ``sync_tensorboard`` mirrors the writer's scalars. A restarted member resumes the same run
    (same id, ``resume="allow"``). ``module`` replaces the ``wandb`` module (tests). Returns the
    run (None when disabled). Raises ConfigError naming ``pip install wandb`` when it is missing.
    """
    if not cfg.get("wandb_activate"):
        return None
    if module is None:
        try:
            import wandb
        except ImportError:
            raise ConfigError(
                f"wandb_activate=true but the wandb package is not installed. Install it ({WANDB_INSTALL_HINT}) "
                "and log in (wandb login), or set wandb_activate=false."
            ) from None
        module = wandb
    settings = wandb_settings(cfg)
    if settings["dir"] is not None:
        from pathlib import Path

        Path(settings["dir"]).mkdir(parents=True, exist_ok=True)
    run = module.init(**settings)
    log.info(
        "W&B run %s (project %s, group %s) %s",
        settings["id"],
        settings["project"],
        settings["group"],
        "started or resumed",
    )
    return run


def finish_wandb() -> None:
    """Finish the current W&B run, if wandb was imported and has one (e.g. before an exec restart)."""
    module = sys.modules.get("wandb")
    if module is not None and getattr(module, "run", None) is not None:
        module.finish()
