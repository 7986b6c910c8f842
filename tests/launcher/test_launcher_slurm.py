"""The slurm backend against a real single-node Slurm cluster (scripts/slurm_test_cluster.sh).

The session fixture starts the cluster (installing Slurm with apt when missing). If it cannot, the
tests FAIL: they never skip. Workers are a fake worker script that records each start in its run
directory; a restarted member "resumes" by seeing its previous starts there.
Every sinfo/squeue/scontrol call has a timeout (they hang while munged is down).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

from conftest import REPO

pytestmark = pytest.mark.slurm

CLUSTER_SCRIPT = REPO / "scripts" / "slurm_test_cluster.sh"

FAKE_WORKER = r'''
import json, os, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
run_dir = os.path.join(args["train_dir"], args["experiment"])
os.makedirs(run_dir, exist_ok=True)
starts_path = os.path.join(run_dir, "starts.jsonl")
previous = open(starts_path).read().splitlines() if os.path.exists(starts_path) else []
record = {"pid": os.getpid(), "previous_starts": len(previous), "argv": sys.argv[1:],
          "task": os.environ.get("SLURM_ARRAY_TASK_ID"), "job": os.environ.get("SLURM_JOB_ID"),
          "restart_count": os.environ.get("SLURM_RESTART_COUNT", "0"),
          "cpus": os.environ.get("SLURM_CPUS_PER_TASK"),
          "cvd": os.environ.get("CUDA_VISIBLE_DEVICES", "unset")}
with open(starts_path, "a") as f:
    f.write(json.dumps(record) + "\n")
print("fake worker started", record, flush=True)
mode = args.get("mode", "ok")
if mode == "ok":
    time.sleep(float(args.get("sleep", "0")))
elif mode == "hang_first" and not previous:
    time.sleep(300)
sys.exit(0)
'''

EXPERIMENT_MODULE = '''
from pbt.launcher import Experiment, ParamGrid, RunDescription
RUN_DESCRIPTION = RunDescription("{run_name}", experiments=[
    Experiment("pop", "python {worker} {args}", ParamGrid([("pbt.policy_idx", range({n}))])),
])
'''


def _slurm(*argv: str, timeout: float = 10) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(["timeout", str(int(timeout)), *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    """A running single-node cluster. Started (and at the end stopped) here unless it already ran."""
    was_up = subprocess.run(["bash", str(CLUSTER_SCRIPT), "status"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=30).returncode == 0
    if not was_up:
        result = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, timeout=600)
        if result.returncode != 0:
            pytest.fail(f"could not start the Slurm test cluster (scripts/slurm_test_cluster.sh start):\n{result.stdout}",
                        pytrace=False)
    info = _slurm("sinfo", "-h", "-N", "-o", "%T")
    if info.returncode != 0 or not info.stdout.strip().startswith(("idle", "mixed", "allocated")):
        pytest.fail(f"the Slurm test cluster does not answer sinfo with a usable node: {info.stdout!r}", pytrace=False)
    yield
    if not was_up:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop"], timeout=120)


class SlurmRun:
    def __init__(self, tmp_path: Path, args: str, n: int, run_name: str = "srun") -> None:
        self.tmp = tmp_path
        self.worker = tmp_path / "fake_worker.py"
        self.worker.write_text(FAKE_WORKER)
        self.module = f"slurm_fake_{run_name}"
        (tmp_path / f"{self.module}.py").write_text(EXPERIMENT_MODULE.format(run_name=run_name, worker=self.worker, args=args, n=n))
        self.train_dir = tmp_path / "train"
        self.run_name = run_name
        self.n = n
        self.job_ids: List[str] = []

    @property
    def exp_dir(self) -> Path:
        return self.train_dir / self.run_name / "pop"

    def launch(self, *options: str) -> "subprocess.CompletedProcess[str]":
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(self.tmp), str(REPO)]))
        argv = [sys.executable, "-m", "pbt.launcher.run", f"--run={self.module}", "--backend=slurm",
                f"--train_dir={self.train_dir}", "--slurm_gpus_per_job=0", *options]
        result = subprocess.run(argv, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, timeout=120)
        self.job_ids += re.findall(r"submitted job array (\d+)", result.stdout)
        return result

    def starts(self, i: int) -> List[dict]:
        path = self.exp_dir / f"pop_{i:02d}" / "starts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def log(self, i: int) -> str:
        path = self.exp_dir / "logs" / f"pop_{i:02d}.log"
        return path.read_text() if path.exists() else ""

    def cancel_all(self) -> None:
        if self.job_ids:
            _slurm("scancel", *self.job_ids)


@pytest.fixture
def make_run(slurm_cluster: None, tmp_path: Path) -> Iterator[Callable[..., SlurmRun]]:
    runs: List[SlurmRun] = []

    def make(args: str, n: int) -> SlurmRun:
        run = SlurmRun(tmp_path, args, n, run_name=f"srun{len(runs)}")
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.cancel_all()


def job_state(job: str) -> Optional[str]:
    result = _slurm("scontrol", "-o", "show", "job", job)
    match = re.search(r"JobState=(\S+)", result.stdout)
    return match.group(1) if match else None


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def release_now(job: str) -> None:
    """Slurm holds a requeued job for cred_expire + 1 s (BeginTime); in the tests, let it start sooner.

    Not at once: slurmd rejects a launch credential created in the same second as the revocation
    of the job's previous one ("Job credential revoked"), so wait 2 s after the job is pending.
    """
    wait_until(lambda: job_state(job) == "PENDING", 30, f"{job} to be pending again")
    time.sleep(2)
    result = _slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
    assert result.returncode == 0, result.stdout


def test_cluster_script_reports_status(slurm_cluster: None) -> None:
    result = subprocess.run(["bash", str(CLUSTER_SCRIPT), "status"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=30)
    assert result.returncode == 0, result.stdout
    assert "slurmctld: running" in result.stdout and "localhost" in result.stdout


def test_population_runs_as_one_job_array(make_run: Callable[..., SlurmRun]) -> None:
    run = make_run("mode=ok sleep=0.2", 3)
    result = run.launch()
    assert result.returncode == 0, result.stdout
    assert len(run.job_ids) == 1, result.stdout
    job = run.job_ids[0]
    assert f"scancel {job}" in result.stdout  # how to stop the run is printed
    assert (run.exp_dir / "slurm" / "job_ids.txt").read_text().split() == [job]
    wait_until(lambda: all(job_state(f"{job}_{i}") == "COMPLETED" for i in range(3)), 30, "the array to complete")
    workspace = run.exp_dir / "workspace"
    for i in range(3):
        (start,) = run.starts(i)
        assert start["task"] == str(i) and f"pbt.policy_idx={i}" in start["argv"]
        assert f"pbt.workspace={workspace}" in start["argv"] and "pbt.num_policies=3" in start["argv"]
        log = run.log(i)
        assert "fake worker started" in log and "exited with status 0" in log


def test_cancelled_member_resubmitted_resumes(make_run: Callable[..., SlurmRun]) -> None:
    run = make_run("mode=hang_first", 2)
    result = run.launch()
    assert result.returncode == 0, result.stdout
    job = run.job_ids[0]
    wait_until(lambda: all(run.starts(i) for i in range(2)), 30, "both members to start")

    # Launching the run again while its jobs still run is refused (two copies, one workspace).
    again = run.launch()
    assert again.returncode == 2 and "still has jobs in the queue" in again.stdout, again.stdout
    assert len(run.job_ids) == 1

    # Member 1: scancel it, then requeue the cancelled array task.
    assert _slurm("scancel", f"{job}_1").returncode == 0
    wait_until(lambda: job_state(f"{job}_1") == "CANCELLED", 30, "member 1 to be cancelled")
    assert _slurm("scontrol", "requeue", f"{job}_1").returncode == 0
    release_now(f"{job}_1")
    wait_until(lambda: len(run.starts(1)) == 2, 30, "member 1 to run again")
    assert run.starts(1)[1]["previous_starts"] == 1  # it found its previous files
    wait_until(lambda: job_state(f"{job}_1") == "COMPLETED", 30, "member 1 to finish")

    # Member 0: scancel it, then resubmit only it with the generated submit.sh.
    assert _slurm("scancel", f"{job}_0").returncode == 0
    wait_until(lambda: job_state(f"{job}_0") == "CANCELLED", 30, "member 0 to be cancelled")
    submit = subprocess.run(["bash", str(run.exp_dir / "slurm" / "submit.sh"), "0"], stdout=subprocess.PIPE,
                            universal_newlines=True, timeout=60)
    assert submit.returncode == 0
    new_job = submit.stdout.strip().split(";")[0]
    run.job_ids.append(new_job)
    wait_until(lambda: len(run.starts(0)) == 2, 30, "member 0 to run again")
    assert run.starts(0)[1]["previous_starts"] == 1 and run.starts(0)[1]["task"] == "0"
    wait_until(lambda: job_state(f"{new_job}_0") == "COMPLETED", 30, "resubmitted member 0 to finish")


def test_time_limit_signal_requeues_the_member_which_resumes(make_run: Callable[..., SlurmRun]) -> None:
    run = make_run("mode=hang_first", 1)
    result = run.launch("--slurm_timeout=10", "--slurm_requeue_signal_s=60")
    assert result.returncode == 0, result.stdout
    job = run.job_ids[0]
    wait_until(lambda: len(run.starts(0)) == 1, 30, "the member to start")
    # What slurmctld sends before the time limit with --signal=B:USR1@60 (its timing resolution is
    # ~30-60 s, too slow for a test): SIGUSR1 to the batch shell only.
    assert _slurm("scancel", "--batch", "--signal=USR1", f"{job}_0").returncode == 0
    release_now(f"{job}_0")
    wait_until(lambda: len(run.starts(0)) == 2, 30, "the requeued member to run again")
    second = run.starts(0)[1]
    assert second["previous_starts"] == 1 and second["restart_count"] == "1"
    assert second["job"] == run.starts(0)[0]["job"]  # the same job, requeued
    wait_until(lambda: job_state(f"{job}_0") == "COMPLETED", 30, "the member to finish")
    assert "got SIGUSR1" in run.log(0)


def test_gpus_per_job_sets_cuda_visible_devices(make_run: Callable[..., SlurmRun]) -> None:
    gres = _slurm("sinfo", "-h", "-N", "-o", "%G").stdout
    assert "gpu" in gres, f"the test cluster has no fake GPUs (PBT_SLURM_GPUS=0?): {gres!r}"
    run = make_run("mode=ok sleep=1", 2)
    result = run.launch("--slurm_gpus_per_job=1", "--slurm_cpus_per_gpu=1")
    assert result.returncode == 0, result.stdout
    job = run.job_ids[0]
    wait_until(lambda: all(job_state(f"{job}_{i}") == "COMPLETED" for i in range(2)), 30, "the array to complete")
    devices = [run.starts(i)[0]["cvd"] for i in range(2)]
    assert sorted(devices) == ["0", "1"], devices


def test_print_only_submits_nothing(make_run: Callable[..., SlurmRun]) -> None:
    run = make_run("mode=ok", 2)
    result = run.launch("--slurm_print_only")
    assert result.returncode == 0, result.stdout
    assert "not submitted" in result.stdout and "sbatch --parsable --array=0-1" in result.stdout
    assert run.job_ids == []
    slurm_dir = run.exp_dir / "slurm"
    assert len((slurm_dir / "commands.txt").read_text().splitlines()) == 2
    assert not (slurm_dir / "job_ids.txt").exists()
    assert shutil.which("sbatch")


def node_cpus() -> int:
    result = _slurm("sinfo", "-h", "-N", "-o", "%c")
    assert result.returncode == 0, result.stdout
    return int(result.stdout.split()[0])


def jobs_named(name: str) -> List[str]:
    return _slurm("squeue", "-h", "-o", "%i", "-n", name).stdout.split()


def test_cpu_request_no_node_has_is_refused_before_submitting(make_run: Callable[..., SlurmRun]) -> None:
    """The issue: CPU-only jobs asking for more CPUs than the node has pended for ever (PartitionConfig)."""
    cpus = node_cpus()
    run = make_run("mode=ok", 2)
    expected = (f"--slurm_cpus_per_job={cpus + 1} but the largest node of partition debug has {cpus} CPUs; "
                f"use --slurm_cpus_per_job<={cpus}")
    for extra in ([], ["--slurm_print_only"]):  # print-only checks too
        result = run.launch(f"--slurm_cpus_per_job={cpus + 1}", *extra)
        assert result.returncode == 2 and expected in result.stdout, result.stdout
    assert run.job_ids == [] and jobs_named(f"{run.run_name}.pop") == []
    assert not (run.exp_dir / "slurm" / "job_ids.txt").exists()


def test_misspelt_partition_did_you_mean(make_run: Callable[..., SlurmRun]) -> None:
    run = make_run("mode=ok", 1)
    result = run.launch("--slurm_partition=debgu")
    assert result.returncode == 2, result.stdout
    assert "no partition 'debgu'" in result.stdout and "Did you mean 'debug'?" in result.stdout, result.stdout
    assert run.job_ids == []


def test_cpu_only_jobs_run_with_cpus_per_job(make_run: Callable[..., SlurmRun]) -> None:
    run = make_run("mode=ok", 2)
    result = run.launch("--slurm_cpus_per_job=2")
    assert result.returncode == 0, result.stdout
    assert "checked with sinfo: partition debug has nodes for 2 CPU(s) and 0 GPU(s)" in result.stdout
    (job,) = run.job_ids
    wait_until(lambda: all(job_state(f"{job}_{i}") == "COMPLETED" for i in range(2)), 30, "the array to complete")
    assert [run.starts(i)[0]["cpus"] for i in range(2)] == ["2", "2"]
    assert [run.starts(i)[0]["cvd"] for i in range(2)] == ["unset", "unset"]


def test_job_pending_for_ever_is_cancelled_and_reported(make_run: Callable[..., SlurmRun]) -> None:
    """Passes the check against sinfo (which reads no --ntasks), but asks for more CPUs than the node has:
    sbatch accepts it and Slurm holds it with PartitionConfig for ever."""
    run = make_run("mode=ok", 2)
    result = run.launch(f"--slurm_sbatch_args=--ntasks={node_cpus() + 1}")
    assert result.returncode == 2, result.stdout
    (job,) = run.job_ids
    assert "cannot start: Slurm holds it pending with reason 'PartitionConfig'" in result.stdout, result.stdout
    assert "--ntasks" in result.stdout and f"Cancelled the submitted jobs (scancel {job})" in result.stdout
    wait_until(lambda: job_state(f"{job}_0") == "CANCELLED" and job_state(f"{job}_1") == "CANCELLED", 30,
               "the pending jobs to be cancelled")
    assert jobs_named(f"{run.run_name}.pop") == []  # squeue lists no cancelled job
    assert run.starts(0) == [] and run.starts(1) == []
    # fixed, the same run launches and runs
    result = run.launch()
    assert result.returncode == 0, result.stdout
    new_job = run.job_ids[-1]
    wait_until(lambda: all(job_state(f"{new_job}_{i}") == "COMPLETED" for i in range(2)), 30, "the array to complete")


@pytest.mark.training
def test_hydra_submitit_multirun_population(slurm_cluster: None, tmp_path: Path) -> None:
    """The Hydra-native route: ``python -m pbt.train -m hydra/launcher=submitit_slurm pbt.policy_idx='range(2)'``.

    Needs the optional extra (``pip install hydra-submitit-launcher==1.2.0``, the ``[slurm]`` extra)
    and the real worker (torch, rl_games); skipped only when the extra is not installed.
    """
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="optional extra [slurm] (hydra-submitit-launcher) not installed")
    train_dir = tmp_path / "runs"
    argv = [sys.executable, "-m", "pbt.train", "-m", "hydra/launcher=submitit_slurm", "pbt.policy_idx=range(2)",
            "pbt=pbt_default", "pbt.num_policies=2", f"pbt.workspace={tmp_path / 'workspace'}", "task=Pendulum",
            "max_frames=20000", "num_envs=128", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
            f"train_dir={train_dir}", "experiment=hsl", "hydra.launcher.timeout_min=5", "hydra.launcher.cpus_per_task=1",
            f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    result = subprocess.run(argv, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                            timeout=240)
    assert result.returncode == 0, result.stdout[-4000:]
    run_dirs = sorted(p.name for p in train_dir.iterdir() if p.name.startswith("hsl"))
    assert len(run_dirs) == 2, (run_dirs, result.stdout[-4000:])


@pytest.mark.training
def test_smoke_population_trains_on_slurm_and_a_cancelled_member_resumes(slurm_cluster: None, tmp_path: Path) -> None:
    """The real thing: experiments.smoke_pbt (4 real workers) through the launcher's slurm backend.

    Member 3 is scancelled once it has published a record; the others finish; member 3 is
    resubmitted with the generated submit.sh and resumes from its newest checkpoint.
    """
    from pbt.storage import WorkspaceReader
    from pbt.storage.format import LOCK_FILE

    train_dir = tmp_path / "train"
    result = subprocess.run([sys.executable, "-m", "pbt.launcher.run", "--run=experiments.smoke_pbt", "--backend=slurm",
                             f"--train_dir={train_dir}", "--slurm_gpus_per_job=0", "--slurm_cpus_per_job=1"],
                            cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout
    (job,) = re.findall(r"submitted job array (\d+)", result.stdout)
    exp_dir = train_dir / "smoke_pbt" / "pendulum"
    ws_root = exp_dir / "workspace"
    try:
        workspace = WorkspaceReader(ws_root, 4)
        wait_until(lambda: workspace.latest_record(3) is not None, 150, "member 3's first record", poll=1.0)
        assert _slurm("scancel", f"{job}_3").returncode == 0
        wait_until(lambda: job_state(f"{job}_3") == "CANCELLED", 30, "member 3 to be cancelled")
        # Slurm says CANCELLED at once; the process still saves its state (SIGTERM) and then releases its lock
        wait_until(lambda: not (ws_root / "003" / LOCK_FILE).exists(), 60, "member 3's process to exit")
        cancelled_at = workspace.latest_record(3)
        assert cancelled_at is not None, sorted(p.name for p in (ws_root / "003").iterdir())
        wait_until(lambda: all(job_state(f"{job}_{i}") == "COMPLETED" for i in range(3)), 240,
                   "members 0-2 to finish", poll=1.0)
        submit = subprocess.run(["bash", str(exp_dir / "slurm" / "submit.sh"), "3"], stdout=subprocess.PIPE,
                                universal_newlines=True, timeout=60)
        assert submit.returncode == 0
        new_job = submit.stdout.strip().split(";")[0]
        wait_until(lambda: job_state(f"{new_job}_3") == "COMPLETED", 240, "resubmitted member 3 to finish", poll=1.0)
    finally:
        _slurm("scancel", job)

    for idx in range(4):
        record = workspace.latest_record(idx)
        assert record is not None and record.frame >= 400_000, (idx, record)
        lineage = workspace.read_lineage(idx)
        assert [e.reason for e in lineage].count("initial mutation of a fresh member") == 1
        assert any(e.iteration >= 1 for e in lineage), f"member {idx}: no PBT iteration"
    resumed = [e for e in workspace.read_lineage(3) if e.iteration > cancelled_at.iteration]
    assert resumed and resumed[0].frame > cancelled_at.frame
    logs = "".join(p.read_text() for p in (exp_dir / "logs").glob("*03*.log"))
    assert f"resumes from its iteration {cancelled_at.iteration}" in logs, logs[-3000:]
