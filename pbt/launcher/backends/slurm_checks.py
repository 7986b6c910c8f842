"""Checks that keep the slurm backend from submitting jobs that can never run.

Before submitting, each request (partition, CPUs, GPUs, time limit) is checked against what
``sinfo`` says about the partition; a request no node can satisfy fails with what to change.
After submitting, the new jobs are watched for a few seconds: a job that Slurm holds for a reason
that waiting does not clear (``PartitionConfig``, ``PartitionNodeLimit``, ``QOSMax...PerJob``...) is
cancelled and reported. The parsing and the rules are pure functions (tested on canned output).
"""

import logging
import re
import shlex
import subprocess
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError, PbtError, did_you_mean

log = logging.getLogger("launcher")

TOOL_TIMEOUT_S = 15
# One line per (partition, node): partition (with '*' for the default), availability, time limit,
# CPUs, memory (MB), GRES, node state, node name.
SINFO_FORMAT = "%P|%a|%l|%c|%m|%G|%T|%N"
SQUEUE_FORMAT = "%i|%T|%r"
INFINITE = None  # a time limit without bound


class SlurmError(PbtError):
    """Submitting to Slurm failed, or Slurm holds the submitted jobs for good."""


def run_tool(argv: Sequence[str], timeout: float = TOOL_TIMEOUT_S) -> "subprocess.CompletedProcess[str]":
    """Run a Slurm client command with a timeout (they hang while slurmctld or munged is down)."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{argv[0]} did not answer within {timeout:g} s; check that slurmctld and munged run (timeout 5 sinfo)."
        ) from None


# ---- time limits -------------------------------------------------------------------------------


def parse_time_limit(text: str) -> Optional[int]:
    """Seconds of a Slurm time string (sbatch --time, sinfo %l); None when unlimited.

    Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and INFINITE/UNLIMITED. Raises ValueError.
    """
    value = text.strip().lower()
    if value in ("infinite", "unlimited", "-1"):
        return INFINITE
    days = 0
    if "-" in value:
        day_text, _, value = value.partition("-")
        if not day_text.isdigit():
            raise ValueError(f"bad time limit {text!r}")
        days = int(day_text)
    parts = value.split(":")
    if not value or len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"bad time limit {text!r}")
    numbers = [int(p) for p in parts]
    if "-" in text:  # D-H, D-H:M, D-H:M:S
        numbers += [0] * (3 - len(numbers))
        hours, minutes, seconds = numbers
    elif len(numbers) == 3:
        hours, minutes, seconds = numbers
    elif len(numbers) == 2:
        hours, (minutes, seconds) = 0, numbers
    else:
        hours, minutes, seconds = 0, numbers[0], 0
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def format_time_limit(seconds: Optional[int]) -> str:
    """``D-HH:MM:SS`` (what sbatch --time accepts); ``infinite`` for None."""
    if seconds is None:
        return "infinite"
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


# ---- sinfo -------------------------------------------------------------------------------------


@dataclass
class NodeInfo:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    state: str  # sinfo %T, e.g. idle, mixed, down*, drained


@dataclass
class PartitionInfo:
    name: str
    is_default: bool = False
    avail: str = "up"  # up, down, drain, inact
    max_time_s: Optional[int] = INFINITE
    nodes: List[NodeInfo] = field(default_factory=list)


def _leading_int(text: str) -> int:
    match = re.match(r"\s*(\d+)", text)
    return int(match.group(1)) if match else 0


def parse_gres_gpus(gres: str) -> int:
    """GPUs in a sinfo %G string: ``gpu:4``, ``gpu:a100:8(S:0-1)``, ``gpu:a:2,gpu:b:2,mps:100`` -> 4, 8, 4."""
    total = 0
    for entry in re.split(r",(?![^(]*\))", gres.strip()):
        parts = entry.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2:
            total += _leading_int(parts[-1])
    return total


def parse_sinfo(text: str) -> "OrderedDict[str, PartitionInfo]":
    """Partitions from ``sinfo -h -N --all -o SINFO_FORMAT``, in sinfo's order."""
    partitions: OrderedDict[str, PartitionInfo] = OrderedDict()
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 8:
            continue
        raw_name, avail, limit, cpus, memory, gres, state, node = (f.strip() for f in fields)
        name = raw_name.rstrip("*")
        part = partitions.get(name)
        if part is None:
            try:
                max_time = parse_time_limit(limit)
            except ValueError:  # "n/a" and the like: no limit known
                max_time = INFINITE
            part = partitions[name] = PartitionInfo(name, raw_name.endswith("*"), avail.lower(), max_time)
        part.nodes.append(
            NodeInfo(node, _leading_int(cpus), _leading_int(memory), parse_gres_gpus(gres), state.lower())
        )
    return partitions


def query_partitions() -> "OrderedDict[str, PartitionInfo]":
    """What sinfo says about every partition (hidden ones too); raises SlurmError when it fails."""
    result = run_tool(["sinfo", "-h", "-N", "--all", "-o", SINFO_FORMAT])
    if result.returncode != 0:
        raise SlurmError(
            f"sinfo failed (exit status {result.returncode}): {result.stderr.strip()}; check that "
            "slurmctld runs, or skip the checks with --slurm_check=False."
        )
    return parse_sinfo(result.stdout)


# ---- the request and the static check ----------------------------------------------------------


@dataclass
class Request:
    """What one member's job asks for, and the option that sets each value (for the messages)."""

    partition: Optional[str]  # None: the cluster's default; may be a comma-separated list
    cpus: int
    gpus: int
    time_s: Optional[int] = INFINITE  # INFINITE: the partition's limit
    cpus_option: str = "--slurm_cpus_per_job"
    time_option: str = "--slurm_timeout"
    partition_option: str = "--slurm_partition"


def _option_values(args: Sequence[str], names: Tuple[str, ...]) -> List[str]:
    """Values of an sbatch option in an argument list (``--name=v``, ``--name v``, ``-x v``, ``-xv``)."""
    values: List[str] = []
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                values.append(args[i + 1])
            elif name.startswith("--") and arg.startswith(name + "="):
                values.append(arg[len(name) + 1 :])
            elif not name.startswith("--") and arg.startswith(name) and len(arg) > len(name):
                values.append(arg[len(name) :].lstrip("="))
    return values


def template_directives(template_text: str) -> List[str]:
    """The options of the ``#SBATCH`` lines at the top of a batch script (sbatch stops at the first command)."""
    args: List[str] = []
    for line in template_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            try:
                args += shlex.split(stripped[len("#SBATCH") :].split(" #")[0])
            except ValueError:
                continue
        elif stripped and not stripped.startswith("#"):
            break
    return args


def effective_overrides(
    extra_args: Sequence[str], template_text: str, environ: Mapping[str, str]
) -> Dict[str, Tuple[str, str]]:
    """Partition, CPUs and time set outside the launcher's own options: {key: (value, where)}.

    sbatch's precedence: the command line (its last value wins; --slurm_sbatch_args come after the
    launcher's options), then SBATCH_* environment variables, then #SBATCH lines of the script.
    """
    found: Dict[str, Tuple[str, str]] = {}
    options = {"partition": ("--partition", "-p"), "cpus": ("--cpus-per-task", "-c"), "time": ("--time", "-t")}
    env_names = {"partition": "SBATCH_PARTITION", "time": "SBATCH_TIMELIMIT"}
    directives = template_directives(template_text)
    for key, names in options.items():
        values = _option_values(extra_args, names)
        if values:
            found[key] = (values[-1], "--slurm_sbatch_args")
        elif key in env_names and environ.get(env_names[key]):
            found[key] = (environ[env_names[key]], f"${env_names[key]}")
        else:
            values = _option_values(directives, names)
            if values:
                found[key] = (values[-1], "an #SBATCH line of the template")
    return found


def _fits(node: NodeInfo, request: Request) -> bool:
    return node.cpus >= request.cpus and node.gpus >= request.gpus


def _gpu_partitions(partitions: Mapping[str, PartitionInfo], gpus: int) -> List[str]:
    return [p.name for p in partitions.values() if any(n.gpus >= gpus for n in p.nodes)]


def _why_no_node_fits(part: PartitionInfo, request: Request, partitions: Mapping[str, PartitionInfo]) -> str:
    max_gpus = max((n.gpus for n in part.nodes), default=0)
    if request.gpus > max_gpus:
        others = [p for p in _gpu_partitions(partitions, request.gpus) if p != part.name]
        where = f" (partitions with such nodes: {', '.join(others)})" if others else ""
        if max_gpus == 0:
            return (
                f"--slurm_gpus_per_job={request.gpus} but partition {part.name} has no GPUs; use a GPU partition"
                f"{where} with --slurm_partition, or --slurm_gpus_per_job=0 for CPU-only jobs"
            )
        return (
            f"--slurm_gpus_per_job={request.gpus} but the nodes of partition {part.name} have at most {max_gpus} "
            f"GPUs; use --slurm_gpus_per_job<={max_gpus}{where}"
        )
    candidates = [n for n in part.nodes if n.gpus >= request.gpus]
    max_cpus = max(n.cpus for n in candidates)
    largest = "the largest node" if request.gpus == 0 else f"the largest node with {request.gpus} GPU(s)"
    if request.cpus_option == "--slurm_cpus_per_gpu":
        per_gpu = request.cpus // request.gpus
        return (
            f"--slurm_cpus_per_gpu={per_gpu} x {request.gpus} GPU(s) = {request.cpus} CPUs but {largest} of "
            f"partition {part.name} has {max_cpus} CPUs; use --slurm_cpus_per_gpu<={max(1, max_cpus // request.gpus)}"
        )
    return (
        f"{request.cpus_option}={request.cpus} but {largest} of partition {part.name} has {max_cpus} CPUs; "
        f"use {request.cpus_option}<={max_cpus}"
    )


def check_request(request: Request, partitions: "Mapping[str, PartitionInfo]") -> Tuple[str, List[str]]:
    """Raise ConfigError when no node of the requested partition can run the job.

    Returns the partition that can run it and warnings (partition down, its fitting nodes unavailable).
    """
    names = [p.strip() for p in request.partition.split(",") if p.strip()] if request.partition else []
    if not names:
        defaults = [p.name for p in partitions.values() if p.is_default]
        if not defaults:
            raise ConfigError(
                f"the cluster has no default partition; choose one with --slurm_partition "
                f"(partitions: {', '.join(partitions) or 'none'})."
            )
        names = defaults[:1]
    for name in names:
        if name not in partitions:
            raise ConfigError(
                f"{request.partition_option}={request.partition}: no partition {name!r} on this cluster "
                f"(partitions: {', '.join(partitions) or 'none'}).{did_you_mean(name, partitions)}"
            )
    problems: List[str] = []
    warnings: List[str] = []
    for name in names:  # with several partitions, Slurm uses the first that can run the job
        part = partitions[name]
        if part.avail in ("drain", "inact", "inactive"):
            problems.append(
                f"partition {name} is {part.avail} (it takes no new jobs); choose another with "
                f"--slurm_partition (up: {', '.join(p.name for p in partitions.values() if p.avail == 'up') or 'none'})"
            )
            continue
        if not any(_fits(n, request) for n in part.nodes):
            problems.append(_why_no_node_fits(part, request, partitions))
            continue
        if request.time_s is not None and part.max_time_s is not None and request.time_s > part.max_time_s:
            problems.append(
                f"{request.time_option}={format_time_limit(request.time_s)} is over the time limit of partition "
                f"{name} ({format_time_limit(part.max_time_s)}); use {request.time_option}<="
                f"{format_time_limit(part.max_time_s)}, or 0 for the partition's limit"
            )
            continue
        if part.avail == "down":
            warnings.append(f"partition {name} is down: the jobs wait in the queue until an administrator brings it up")
        elif all(
            re.match(r"(down|drain|fail|maint|future|unknown|not_responding)", n.state)
            for n in part.nodes
            if _fits(n, request)
        ):
            warnings.append(
                f"every node of partition {name} that can run a member is unavailable now "
                f"({', '.join(sorted({n.state for n in part.nodes if _fits(n, request)}))}): "
                "the jobs wait until one comes back"
            )
        return name, warnings
    raise ConfigError("Slurm could never start these jobs: " + "; ".join(problems) + ".")


# ---- after submitting: pending reasons ---------------------------------------------------------

_NEVER_CLEARS = {
    "PartitionConfig": "the job asks for more than a node or a setting of the partition allows (CPUs, GPUs, "
    "memory, or an option such as --ntasks or --mem in --slurm_sbatch_args or the template); "
    "compare its request (scontrol show job) with the partition (scontrol show partition)",
    "PartitionNodeLimit": "the job asks for more (or fewer) nodes than the partition allows, or the partition's nodes "
    "are down or drained; check --nodes/-N in --slurm_sbatch_args and the template (sinfo -p)",
    "PartitionTimeLimit": "the job's time limit is over the partition's; lower --slurm_timeout (0: the partition's "
    "limit) or --time in --slurm_sbatch_args / the template",
    "BadConstraints": "the job's constraints (--constraint, --nodelist, --gres...) cannot be met by any node",
    "DependencyNeverSatisfied": "the job depends on a job that failed; remove the --dependency",
    "InvalidAccount": "the account is invalid; check --account in --slurm_sbatch_args (sacctmgr show assoc user=$USER)",
    "InvalidQOS": "the QOS is invalid; check --qos in --slurm_sbatch_args (sacctmgr show assoc user=$USER)",
}


def never_clears(reason: str) -> Optional[str]:
    """Why a pending reason never clears by waiting (with what to change), or None when it may clear."""
    head = reason.split(",")[0].strip()
    if head in _NEVER_CLEARS:
        return _NEVER_CLEARS[head]
    if head == "ReqNodeNotAvail":
        nodes = reason.partition("UnavailableNodes:")[2].strip()
        if "UnavailableNodes:" in reason and not nodes:
            return "the nodes the job asks for do not exist or are reserved; check --nodelist in --slurm_sbatch_args"
        return None  # named nodes are down or busy: they may come back
    if re.match(r"(QOS|Assoc)(Max\w*Per(Job|Node)|Min)", head):
        return (
            "the job's request breaks a per-job limit of its QOS or association (sacctmgr show qos); ask for "
            "less (CPUs, GPUs, --slurm_timeout) or use another --qos"
        )
    return None


def parse_squeue(text: str) -> List[Tuple[str, str, str]]:
    """(job id, state, reason) per line of ``squeue -h -r -o SQUEUE_FORMAT``."""
    rows: List[Tuple[str, str, str]] = []
    for line in text.splitlines():
        fields = line.strip().split("|", 2)
        if len(fields) == 3:
            rows.append((fields[0], fields[1].upper(), fields[2].strip()))
    return rows


def _unsettled(state: str, reason: str) -> bool:
    """A pending job the scheduler has not looked at yet."""
    return state == "PENDING" and reason in ("None", "", "WaitingForScheduling", "(null)")


def watch_new_jobs(
    job_ids: Sequence[str],
    watch_s: float,
    poll_s: float = 0.5,
    query: Optional[Callable[[Sequence[str]], str]] = None,
    cancel: Optional[Callable[[Sequence[str]], None]] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Poll the new jobs until each runs, ended, or waits for a reason that clears (at most ``watch_s``).

    A job pending for a reason that never clears: cancel every job of ``job_ids`` and raise SlurmError.
    """
    if not job_ids or watch_s <= 0:
        return
    query = query or _squeue
    cancel = cancel or _scancel
    deadline = clock() + watch_s
    while True:
        rows = parse_squeue(query(job_ids))
        for job, state, reason in rows:
            why = never_clears(reason) if state == "PENDING" else None
            if why:
                cancel(job_ids)
                raise SlurmError(
                    f"job {job} cannot start: Slurm holds it pending with reason {reason!r}, which waiting "
                    f"does not clear: {why}. Cancelled the submitted jobs (scancel {' '.join(job_ids)}); "
                    "fix the request and launch again."
                )
        waiting = [f"{job} ({reason})" for job, state, reason in rows if _unsettled(state, reason)]
        if not waiting:
            return
        if clock() >= deadline:
            log.info(
                "the scheduler has not looked at %s yet after %g s; check later with squeue -j %s",
                ", ".join(waiting[:3]),
                watch_s,
                ",".join(job_ids),
            )
            return
        sleep(poll_s)


def _squeue(job_ids: Sequence[str]) -> str:
    result = run_tool(["squeue", "-h", "-r", "-o", SQUEUE_FORMAT, "-j", ",".join(job_ids)])
    if result.returncode != 0:
        if "Invalid job id" in result.stderr:
            return ""  # already ended and forgotten
        raise SlurmError(
            f"squeue -j {','.join(job_ids)} failed (exit status {result.returncode}): {result.stderr.strip()}"
        )
    return result.stdout


def _scancel(job_ids: Sequence[str]) -> None:
    result = run_tool(["scancel", *job_ids])
    if result.returncode != 0:
        log.error("scancel %s failed: %s; cancel them yourself", " ".join(job_ids), result.stderr.strip())
