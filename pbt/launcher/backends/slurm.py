"""Slurm backend: submit each experiment (one PBT population) as one sbatch job array.

For an experiment with N members the launcher writes, under ``<run_dir>/<experiment>/slurm/``:

    commands.txt   line i+1: the command of member i (array task i picks it by SLURM_ARRAY_TASK_ID)
    logs.txt       line i+1: the log file of member i
    sbatch.sh      the template (cluster setup) + the lines that run the member
    submit.sh      the exact sbatch call; ``bash submit.sh 3`` resubmits member 3 only
    job_ids.txt    the job ids submitted so far
    %A_%a.out      Slurm's own output of each array task (the member's output goes to its log)

and submits ``sbatch --array=0-(N-1) --requeue --signal=B:USR1@<s> ...``. When a job nears its time
limit, the batch script gets SIGUSR1 and runs ``scontrol requeue $SLURM_JOB_ID``; a preempted or
node-failed job is requeued by Slurm itself (``--requeue``). A requeued member reruns the same
command and resumes from its newest checkpoint in the workspace. (Slurm holds a requeued job before it
may start again: BeginTime = requeue time + AuthInfo cred_expire + 1 s, 121 s by default.)

Before submitting, the request is checked against the partition (``sinfo``); after, the new jobs
are watched briefly for pending reasons that never clear (``slurm_checks.py``).
"""

import argparse
import logging
import os
import shlex
import shutil
import subprocess
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from pbt.errors import ConfigError
from pbt.launcher.backends import slurm_checks
from pbt.launcher.backends.base import str2bool
from pbt.launcher.backends.slurm_checks import SlurmError
from pbt.launcher.run_description import Member
from pbt.storage.local import atomic_write_bytes

log = logging.getLogger("launcher")

DEFAULT_TEMPLATE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "slurm_template.sh")
SBATCH_TIMEOUT_S = 60
SQUEUE_TIMEOUT_S = 15
DEFAULT_CPUS_PER_GPU = 8
DEFAULT_CPUS_PER_JOB = 1

__all__ = ["SlurmError", "SlurmOptions", "add_cli_args", "options_from_args", "run"]


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("slurm backend")
    group.add_argument(
        "--slurm_partition", default=None, help="partition to submit to (default: the cluster's default)"
    )
    group.add_argument(
        "--slurm_gpus_per_job", type=int, default=1, help="GPUs per member (--gres=gpu:N); 0 for CPU jobs"
    )
    group.add_argument(
        "--slurm_cpus_per_gpu",
        type=int,
        default=None,
        help=f"CPUs per GPU of a GPU job (default {DEFAULT_CPUS_PER_GPU})",
    )
    group.add_argument(
        "--slurm_cpus_per_job",
        type=int,
        default=None,
        help=f"CPUs of a CPU-only job, --slurm_gpus_per_job=0 (default {DEFAULT_CPUS_PER_JOB})",
    )
    group.add_argument(
        "--slurm_timeout", default="0", help="time limit per job (sbatch --time, e.g. 24:00:00); 0: the partition's"
    )
    group.add_argument(
        "--slurm_print_only",
        type=str2bool,
        nargs="?",
        const=True,
        default=False,
        help="write the batch files and print the sbatch commands without submitting",
    )
    group.add_argument(
        "--slurm_sbatch_template",
        default=None,
        help="bash script with the cluster setup, put at the top of the batch script (default: launcher/slurm_template.sh)",
    )
    group.add_argument(
        "--slurm_requeue",
        type=str2bool,
        nargs="?",
        const=True,
        default=True,
        help="requeue a job at its time limit (SIGUSR1 trap) or on preemption",
    )
    group.add_argument(
        "--slurm_requeue_signal_s",
        type=int,
        default=60,
        help="seconds before the time limit when the job gets SIGUSR1 and requeues itself",
    )
    group.add_argument("--slurm_sbatch_args", default="", help="extra sbatch options, e.g. '--account=me --qos=high'")
    group.add_argument(
        "--slurm_check",
        type=str2bool,
        nargs="?",
        const=True,
        default=True,
        help="check the request against the partition (sinfo) before submitting, and watch the new jobs for pending reasons that never clear",
    )
    group.add_argument(
        "--slurm_watch_s",
        type=float,
        default=15.0,
        help="at most this many seconds of watching the new jobs after submitting (0: do not watch)",
    )


@dataclass
class SlurmOptions:
    """Options of the slurm backend (``python -m launcher.run --help``); validated on creation."""

    partition: Optional[str] = None  # None: the cluster's default partition
    gpus_per_job: int = 1  # --gres=gpu:N; 0 for CPU jobs
    cpus_per_gpu: Optional[int] = None  # GPU jobs; None: DEFAULT_CPUS_PER_GPU
    cpus_per_job: Optional[int] = None  # CPU-only jobs; None: DEFAULT_CPUS_PER_JOB
    timeout: str = "0"  # sbatch --time; "0": the partition's limit
    print_only: bool = False  # write the files, print sbatch, submit nothing
    sbatch_template: Optional[str] = None  # None: launcher/slurm_template.sh; made absolute
    requeue: bool = True  # requeue at the time limit (SIGUSR1) or on preemption
    requeue_signal_s: int = 60  # seconds before the time limit for SIGUSR1
    sbatch_args: str = ""  # extra sbatch options, split like a shell
    max_parallel: int = 0  # the array's %K limit; 0: none
    workdir: Optional[str] = None  # the jobs' --chdir; None: this directory; made absolute
    check: bool = True  # check against sinfo before submitting; watch the new jobs after
    watch_s: float = 15.0  # at most this long watching the new jobs; 0: not at all
    extra_args: List[str] = field(init=False, default_factory=list)  # sbatch_args, split

    def __post_init__(self) -> None:
        if self.gpus_per_job < 0:
            raise ConfigError(f"--slurm_gpus_per_job={self.gpus_per_job} is negative; use 0 for CPU-only jobs.")
        for name, value in (("cpus_per_gpu", self.cpus_per_gpu), ("cpus_per_job", self.cpus_per_job)):
            if value is not None and value < 1:
                raise ConfigError(f"--slurm_{name}={value} must be >= 1.")
        if self.gpus_per_job > 0 and self.cpus_per_job is not None:
            raise ConfigError(
                f"--slurm_cpus_per_job={self.cpus_per_job} is for CPU-only jobs (--slurm_gpus_per_job=0); "
                f"with --slurm_gpus_per_job={self.gpus_per_job} set --slurm_cpus_per_gpu instead."
            )
        if self.gpus_per_job == 0 and self.cpus_per_gpu is not None and self.cpus_per_job is None:
            log.warning(
                "--slurm_cpus_per_gpu=%d with --slurm_gpus_per_job=0 is read as --slurm_cpus_per_job=%d; "
                "use --slurm_cpus_per_job for CPU-only jobs",
                self.cpus_per_gpu,
                self.cpus_per_gpu,
            )
        if self.watch_s < 0:
            raise ConfigError(f"--slurm_watch_s={self.watch_s} is negative; use 0 to not watch the new jobs.")
        if self.requeue_signal_s < 1:
            raise ConfigError(f"--slurm_requeue_signal_s={self.requeue_signal_s} must be >= 1 second.")
        if self.max_parallel < 0:
            raise ConfigError(f"--max_parallel={self.max_parallel} is negative; use 0 for no limit.")
        template = self.sbatch_template or DEFAULT_TEMPLATE
        if not os.path.isfile(template):
            raise ConfigError(
                f"--slurm_sbatch_template={template!r} does not exist; give the path of a bash script (see launcher/slurm_template.sh)."
            )
        try:
            self.extra_args = shlex.split(self.sbatch_args or "")
        except ValueError as exc:
            raise ConfigError(
                f"--slurm_sbatch_args={self.sbatch_args!r} cannot be split ({exc}); check its quotes."
            ) from None
        self.timeout = str(self.timeout).strip()
        try:
            slurm_checks.parse_time_limit(self.timeout)
        except ValueError:
            raise ConfigError(
                f"--slurm_timeout={self.timeout!r} is not a Slurm time; use minutes, HH:MM:SS or "
                "D-HH:MM:SS (e.g. 24:00:00), or 0 for the partition's limit."
            ) from None
        self.sbatch_template = os.path.abspath(template)
        self.workdir = os.path.abspath(self.workdir or os.getcwd())

    @property
    def cpus_per_task(self) -> int:
        """sbatch --cpus-per-task: CPUs per GPU x GPUs, or the CPUs of a CPU-only job."""
        if self.gpus_per_job > 0:
            return (self.cpus_per_gpu or DEFAULT_CPUS_PER_GPU) * self.gpus_per_job
        return self.cpus_per_job or self.cpus_per_gpu or DEFAULT_CPUS_PER_JOB

    def request(self, template_text: str = "", environ: Optional[Dict[str, str]] = None) -> slurm_checks.Request:
        """What each job asks Slurm for, with what --slurm_sbatch_args, $SBATCH_* or the template override."""
        overrides = slurm_checks.effective_overrides(
            self.extra_args, template_text, os.environ if environ is None else environ
        )
        timeout = None if self.timeout in ("0", "") else self.timeout
        request = slurm_checks.Request(
            partition=self.partition,
            cpus=self.cpus_per_task,
            gpus=self.gpus_per_job,
            cpus_option="--slurm_cpus_per_gpu" if self.gpus_per_job > 0 else "--slurm_cpus_per_job",
        )

        # The launcher's own options are on sbatch's command line: they beat $SBATCH_* and #SBATCH lines,
        # and --slurm_sbatch_args (after them) beats everything.
        def wins(key: str, own_value_set: bool) -> bool:
            return key in overrides and (overrides[key][1] == "--slurm_sbatch_args" or not own_value_set)

        if wins("partition", bool(self.partition)):
            request.partition, where = overrides["partition"]
            request.partition_option = f"--partition in {where}"
        if wins("cpus", True) and overrides["cpus"][0].isdigit():
            request.cpus, request.cpus_option = int(overrides["cpus"][0]), "--cpus-per-task in --slurm_sbatch_args"
        if wins("time", timeout is not None):
            timeout, where = overrides["time"]
            request.time_option = f"--time in {where}"
        if timeout is not None:
            try:
                request.time_s = slurm_checks.parse_time_limit(timeout)
            except ValueError:
                raise ConfigError(
                    f"{request.time_option}={timeout!r} is not a Slurm time; use minutes, HH:MM:SS or D-HH:MM:SS."
                ) from None
        return request


def options_from_args(args: argparse.Namespace) -> SlurmOptions:
    return SlurmOptions(
        partition=args.slurm_partition,
        gpus_per_job=args.slurm_gpus_per_job,
        cpus_per_gpu=args.slurm_cpus_per_gpu,
        cpus_per_job=args.slurm_cpus_per_job,
        timeout=args.slurm_timeout,
        print_only=args.slurm_print_only,
        sbatch_template=args.slurm_sbatch_template,
        requeue=args.slurm_requeue,
        requeue_signal_s=args.slurm_requeue_signal_s,
        sbatch_args=args.slurm_sbatch_args,
        max_parallel=args.max_parallel,
        check=args.slurm_check,
        watch_s=args.slurm_watch_s,
    )


_BODY = r"""
# ---- added by the pbt launcher: run member $SLURM_ARRAY_TASK_ID of this job array ----
PBT_COMMANDS_FILE=@COMMANDS@
PBT_LOGS_FILE=@LOGS@
if [ -z "${SLURM_ARRAY_TASK_ID:-}" ]; then
    echo "pbt launcher: this script runs one member of a job array; submit it with sbatch --array=..." >&2
    exit 2
fi
PBT_LINE=$((SLURM_ARRAY_TASK_ID + 1))
PBT_CMD="$(sed -n "${PBT_LINE}p" "$PBT_COMMANDS_FILE")"
PBT_LOG="$(sed -n "${PBT_LINE}p" "$PBT_LOGS_FILE")"
if [ -z "$PBT_CMD" ] || [ -z "$PBT_LOG" ]; then
    echo "pbt launcher: no member #$SLURM_ARRAY_TASK_ID in $PBT_COMMANDS_FILE" >&2
    exit 2
fi
mkdir -p "$(dirname "$PBT_LOG")"
pbt_note() { echo "[launcher $(date '+%Y-%m-%d %H:%M:%S')] $*" >> "$PBT_LOG"; }
@TRAP@
pbt_note "start job ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} (id $SLURM_JOB_ID, restart ${SLURM_RESTART_COUNT:-0}) on $(hostname) CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}: $PBT_CMD"
# In the background so that the USR1 trap runs at once (bash defers traps while a foreground child runs).
bash -c "$PBT_CMD" >> "$PBT_LOG" 2>&1 < /dev/null &
PBT_PID=$!
wait "$PBT_PID"
PBT_STATUS=$?
while kill -0 "$PBT_PID" 2>/dev/null; do
    wait "$PBT_PID"
    PBT_STATUS=$?
done
pbt_note "exited with status $PBT_STATUS"
exit "$PBT_STATUS"
"""

_TRAP = r"""pbt_requeue() {
    pbt_note "job $SLURM_JOB_ID got SIGUSR1 (time limit or preemption ahead): requeueing it; the member will resume from its workspace"
    scontrol requeue "$SLURM_JOB_ID" >> "$PBT_LOG" 2>&1 || pbt_note "scontrol requeue $SLURM_JOB_ID failed"
}
trap pbt_requeue USR1"""


def render_batch_script(template_text: str, commands_file: str, logs_file: str, requeue: bool) -> str:
    """The batch script: the template (cluster setup) followed by the lines that run the member."""
    text = template_text if template_text.startswith("#!") else "#!/bin/bash\n" + template_text
    if not text.endswith("\n"):
        text += "\n"
    body = (
        _BODY.replace("@COMMANDS@", shlex.quote(commands_file))
        .replace("@LOGS@", shlex.quote(logs_file))
        .replace("@TRAP@", _TRAP if requeue else "# requeue on SIGUSR1 disabled (--slurm_requeue=False)")
    )
    return text + body


def default_array(num_members: int, options: SlurmOptions) -> str:
    """``0-(N-1)``, with ``%K`` when --max_parallel limits how many tasks run at once."""
    array = f"0-{num_members - 1}"
    if 0 < options.max_parallel < num_members:
        array += f"%{options.max_parallel}"
    return array


def sbatch_argv(
    run_name: str, experiment: str, num_members: int, slurm_dir: str, options: SlurmOptions, array: Optional[str] = None
) -> List[str]:
    """The sbatch command line for one experiment's job array."""
    if array is None:
        array = default_array(num_members, options)
    argv = [
        "sbatch",
        "--parsable",
        f"--array={array}",
        f"--job-name={run_name}.{experiment}",
        f"--output={os.path.join(slurm_dir, '%A_%a.out')}",
        f"--chdir={options.workdir}",
        "--ntasks=1",
        f"--cpus-per-task={options.cpus_per_task}",
    ]
    if options.gpus_per_job > 0:
        argv.append(f"--gres=gpu:{options.gpus_per_job}")
    if options.partition:
        argv.append(f"--partition={options.partition}")
    if options.timeout and options.timeout != "0":
        argv.append(f"--time={options.timeout}")
    if options.requeue:
        argv += ["--requeue", f"--signal=B:USR1@{options.requeue_signal_s}"]
    else:
        argv.append("--no-requeue")
    argv += options.extra_args
    argv.append(os.path.join(slurm_dir, "sbatch.sh"))
    return argv


def _write(path: str, text: str, executable: bool = False) -> None:
    atomic_write_bytes(path, text.encode())
    if executable:
        os.chmod(path, 0o755)


def prepare_experiment(run_name: str, members: List[Member], options: SlurmOptions) -> List[str]:
    """Write the commands, logs, batch and submit files of one experiment; return the sbatch argv."""
    experiment = members[0].experiment
    slurm_dir = os.path.join(members[0].experiment_dir, "slurm")
    os.makedirs(slurm_dir, exist_ok=True)
    os.makedirs(os.path.dirname(members[0].log_path), exist_ok=True)
    commands_file = os.path.join(slurm_dir, "commands.txt")
    logs_file = os.path.join(slurm_dir, "logs.txt")
    _write(commands_file, "".join(m.shell_cmd + "\n" for m in members))
    _write(logs_file, "".join(m.log_path + "\n" for m in members))
    with open(options.sbatch_template or DEFAULT_TEMPLATE) as f:  # made absolute in __post_init__
        template = f.read()
    _write(
        os.path.join(slurm_dir, "sbatch.sh"),
        render_batch_script(template, commands_file, logs_file, options.requeue),
        executable=True,
    )
    argv = sbatch_argv(run_name, experiment, len(members), slurm_dir, options)
    placeholder = "--array=@ARRAY@"
    resubmit = [placeholder if a.startswith("--array=") else a for a in argv]
    array_arg = '--array="${1:-' + default_array(len(members), options) + '}"'
    submit = " ".join(array_arg if a == placeholder else shlex.quote(a) for a in resubmit)
    _write(
        os.path.join(slurm_dir, "submit.sh"),
        "#!/bin/bash\n"
        f"# Submit experiment {experiment} of run {run_name} again; its members resume from the workspace.\n"
        "# Usage: bash submit.sh [ARRAY]   (ARRAY: member indices, e.g. 3 or 0-3; default: all members)\n"
        "# Only for members that are not queued or running (two copies of a member would share its files).\n"
        "set -e\n"
        f"JOB_ID=$({submit})\n"
        f'echo "$JOB_ID" >> {shlex.quote(os.path.join(slurm_dir, "job_ids.txt"))}\n'
        'echo "$JOB_ID"\n',
        executable=True,
    )
    return argv


def submit(argv: List[str]) -> str:
    """Run sbatch and return the job id."""
    if shutil.which(argv[0]) is None:
        raise ConfigError(
            f"'{argv[0]}' is not on PATH: run the slurm backend on a Slurm login node, or use --backend=processes."
        )
    try:
        result = subprocess.run(argv, capture_output=True, timeout=SBATCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"sbatch did not answer within {SBATCH_TIMEOUT_S} s; check that slurmctld and munged run (timeout 5 sinfo)."
        ) from None
    out = result.stdout.decode(errors="replace").strip()
    err = result.stderr.decode(errors="replace").strip()
    if result.returncode != 0 or not out:
        raise SlurmError(
            f"sbatch failed (exit status {result.returncode}): {err or out}. Command: {' '.join(shlex.quote(a) for a in argv)}"
        )
    return out.splitlines()[-1].split(";")[0].strip()


def active_jobs(job_ids: List[str]) -> List[str]:
    """The array tasks of ``job_ids`` that are still pending or running (``squeue``, with a timeout)."""
    active: List[str] = []
    for job_id in job_ids:
        try:
            result = subprocess.run(
                ["squeue", "-h", "-r", "-o", "%i %T", "-j", job_id], capture_output=True, timeout=SQUEUE_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(
                f"squeue did not answer within {SQUEUE_TIMEOUT_S} s; check that slurmctld and munged run (timeout 5 sinfo)."
            ) from None
        err = result.stderr.decode(errors="replace")
        if result.returncode != 0:
            if "Invalid job id" in err:
                continue  # long finished: forgotten by slurmctld
            raise SlurmError(f"squeue -j {job_id} failed (exit status {result.returncode}): {err.strip()}")
        active += [
            " ".join(line.split()) for line in result.stdout.decode(errors="replace").splitlines() if line.strip()
        ]
    return active


def _previous_job_ids(slurm_dir: str) -> List[str]:
    path = os.path.join(slurm_dir, "job_ids.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def check_against_partition(options: SlurmOptions) -> None:
    """Fail before submitting when no node of the partition can run a member's job (``sinfo``)."""
    with open(options.sbatch_template or DEFAULT_TEMPLATE) as f:  # made absolute in __post_init__
        request = options.request(f.read())
    if shutil.which("sinfo") is None:
        log.warning(
            "sinfo is not on PATH: the request (%d CPUs, %d GPUs per member) was not checked against the "
            "partition; run the launcher on a Slurm login node to check it",
            request.cpus,
            request.gpus,
        )
        return
    try:
        partitions = slurm_checks.query_partitions()
    except SlurmError as exc:
        if not options.print_only:
            raise
        log.warning("the request was not checked against the partition: %s", exc)
        return
    partition, warnings = slurm_checks.check_request(request, partitions)
    for warning in warnings:
        log.warning("%s", warning)
    log.info(
        "checked with sinfo: partition %s has nodes for %d CPU(s) and %d GPU(s) per member",
        partition,
        request.cpus,
        request.gpus,
    )


def run(run_name: str, members: List[Member], options: SlurmOptions) -> int:
    """Submit one job array per experiment (or only print the sbatch commands); return the exit status."""
    by_experiment: Dict[str, List[Member]] = OrderedDict()
    for member in members:
        by_experiment.setdefault(member.experiment, []).append(member)
    # Resubmitting a run whose jobs still run would start two copies of a member on one workspace.
    for experiment, exp_members in by_experiment.items():
        slurm_dir = os.path.join(exp_members[0].experiment_dir, "slurm")
        previous = _previous_job_ids(slurm_dir) if not options.print_only and shutil.which("squeue") else []
        still_queued = active_jobs(previous) if previous else []
        if still_queued:
            raise SlurmError(
                f"experiment {experiment} of run {run_name} still has jobs in the queue ({', '.join(still_queued)}); two "
                f"copies of a member would share its workspace. Stop them first (scancel {' '.join(previous)}) or wait."
            )
    if options.check:
        check_against_partition(options)
    job_ids: List[str] = []
    for experiment, exp_members in by_experiment.items():
        argv = prepare_experiment(run_name, exp_members, options)
        slurm_dir = os.path.dirname(argv[-1])
        for member in exp_members:
            log.info("[%s] array task %d: %s", member.name, member.index, member.shell_cmd)
        command = " ".join(shlex.quote(a) for a in argv)
        if options.print_only:
            log.info("experiment %s: not submitted (--slurm_print_only); submit with:\n  %s", experiment, command)
            continue
        job_id = submit(argv)
        with open(os.path.join(slurm_dir, "job_ids.txt"), "a") as f:
            f.write(job_id + "\n")
        job_ids.append(job_id)
        log.info(
            "experiment %s: submitted job array %s (%d members): %s", experiment, job_id, len(exp_members), command
        )
        log.info("  member logs: %s", os.path.dirname(exp_members[0].log_path))
        log.info(
            "  resubmit one member (it resumes): bash %s <index>   or: scontrol requeue %s_<index>",
            os.path.join(slurm_dir, "submit.sh"),
            job_id,
        )
    if job_ids and options.check:
        slurm_checks.watch_new_jobs(job_ids, options.watch_s)
    if job_ids:
        ids = " ".join(job_ids)
        log.info("status: squeue -j %s", ",".join(job_ids))
        log.info("stop the run: scancel %s", ids)
    return 0
