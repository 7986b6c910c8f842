"""The slurm backend's checks on canned sinfo/squeue output (no cluster): parsing and the rules."""
from typing import List, Sequence

import pytest

from pbt.launcher.backends import slurm_checks
from pbt.launcher.backends.slurm import SlurmOptions
from pbt.launcher.backends.slurm_checks import (Request, SlurmError, check_request, effective_overrides, format_time_limit,
                                            never_clears, parse_gres_gpus, parse_sinfo, parse_squeue, parse_time_limit,
                                            watch_new_jobs)
from pbt.errors import ConfigError, PbtError

# sinfo -h -N --all -o '%P|%a|%l|%c|%m|%G|%T|%N' on a small mixed cluster
SINFO = """\
cpu*|up|2-00:00:00|2|7900|(null)|idle|c1
cpu*|up|2-00:00:00|2|7900|(null)|mixed|c2
gpu|up|1-00:00:00|32|256000|gpu:a100:4(S:0-1)|idle|g1
gpu|up|1-00:00:00|64|512000|gpu:a100:8(S:0-1),mps:400|down*|g2
debug|up|30:00|4|16000|gpu:2|drained|d1
old|inact|infinite|8|1000|(null)|idle|o1
"""


def partitions():
    return parse_sinfo(SINFO)


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("30:15", 1815), ("2:00:00", 7200), ("1-0", 86400), ("1-2", 93600), ("1-2:30", 95400),
    ("2-00:00:00", 172800), ("0", 0), ("INFINITE", None), ("UNLIMITED", None), ("infinite", None),
])
def test_parse_time_limit(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "abc", "x-1", "1h", "-"])
def test_parse_time_limit_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time_limit(text)


def test_format_time_limit_round_trips() -> None:
    for seconds in (59, 3600, 86400, 95415):
        assert parse_time_limit(format_time_limit(seconds)) == seconds
    assert format_time_limit(None) == "infinite" and format_time_limit(95400) == "1-02:30:00"


@pytest.mark.parametrize("gres, gpus", [
    ("gpu:4", 4), ("gpu:a100:8(S:0-1)", 8), ("gpu:a:2,gpu:b:2,mps:100", 4), ("(null)", 0), ("mps:100", 0),
    ("gpu:a100:4(S:0-1),gpu:v100:2(S:0)", 6), ("", 0),
])
def test_parse_gres_gpus(gres: str, gpus: int) -> None:
    assert parse_gres_gpus(gres) == gpus


def test_parse_sinfo() -> None:
    parts = partitions()
    assert list(parts) == ["cpu", "gpu", "debug", "old"]
    assert parts["cpu"].is_default and not parts["gpu"].is_default
    assert parts["cpu"].max_time_s == 2 * 86400 and parts["debug"].max_time_s == 1800 and parts["old"].max_time_s is None
    assert [(n.name, n.cpus, n.memory_mb, n.gpus, n.state) for n in parts["gpu"].nodes] == [
        ("g1", 32, 256000, 4, "idle"), ("g2", 64, 512000, 8, "down*")]
    assert parts["old"].avail == "inact"
    assert parse_sinfo("garbage\n\n") == {}


def test_cpu_request_over_the_largest_node_says_what_to_use() -> None:
    with pytest.raises(ConfigError) as info:
        check_request(Request(partition=None, cpus=8, gpus=0), partitions())
    message = str(info.value)
    assert "--slurm_cpus_per_job=8 but the largest node of partition cpu has 2 CPUs" in message
    assert "use --slurm_cpus_per_job<=2" in message
    assert isinstance(info.value, PbtError)


def test_fitting_requests_pass_and_name_the_partition() -> None:
    assert check_request(Request(partition=None, cpus=2, gpus=0), partitions()) == ("cpu", [])
    assert check_request(Request(partition="gpu", cpus=32, gpus=4), partitions()) == ("gpu", [])


def test_gpu_requests() -> None:
    with pytest.raises(ConfigError, match=r"--slurm_gpus_per_job=1 but partition cpu has no GPUs.*partitions with such "
                                          r"nodes: gpu, debug"):
        check_request(Request(partition="cpu", cpus=8, gpus=1, cpus_option="--slurm_cpus_per_gpu"), partitions())
    with pytest.raises(ConfigError, match=r"have at most 8 GPUs; use --slurm_gpus_per_job<=8"):
        check_request(Request(partition="gpu", cpus=16, gpus=9, cpus_option="--slurm_cpus_per_gpu"), partitions())
    # 4 GPUs x 16 CPUs: g1 has the GPUs but 32 CPUs, g2 (8 GPUs) has 64 CPUs: fits on g2 only.
    assert check_request(Request(partition="gpu", cpus=64, gpus=4, cpus_option="--slurm_cpus_per_gpu"), partitions())[0] == "gpu"
    # g2 is down: the request fits only on an unavailable node
    _, warnings = check_request(Request(partition="gpu", cpus=64, gpus=4, cpus_option="--slurm_cpus_per_gpu"), partitions())
    assert warnings and "unavailable now (down*)" in warnings[0]
    with pytest.raises(ConfigError, match=r"--slurm_cpus_per_gpu=40 x 2 GPU\(s\) = 80 CPUs but the largest node with 2 "
                                          r"GPU\(s\) of partition gpu has 64 CPUs; use --slurm_cpus_per_gpu<=32"):
        check_request(Request(partition="gpu", cpus=80, gpus=2, cpus_option="--slurm_cpus_per_gpu"), partitions())


def test_unknown_partition_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        check_request(Request(partition="gppu", cpus=1, gpus=0), partitions())
    assert "no partition 'gppu'" in str(info.value) and "Did you mean 'gpu'?" in str(info.value)
    assert "partitions: cpu, gpu, debug, old" in str(info.value)


def test_time_limit_over_the_partitions() -> None:
    with pytest.raises(ConfigError, match=r"--slurm_timeout=2-00:00:00 is over the time limit of partition gpu "
                                          r"\(1-00:00:00\); use --slurm_timeout<=1-00:00:00, or 0"):
        check_request(Request(partition="gpu", cpus=1, gpus=1, time_s=parse_time_limit("2-0")), partitions())


def test_time_limit_message() -> None:
    with pytest.raises(ConfigError) as info:
        check_request(Request(partition="debug", cpus=1, gpus=0, time_s=3600), partitions())
    assert "--slurm_timeout=01:00:00 is over the time limit of partition debug (00:30:00)" in str(info.value)
    assert check_request(Request(partition="debug", cpus=1, gpus=0, time_s=1800), partitions())[0] == "debug"


def test_inactive_partition_and_several_partitions() -> None:
    with pytest.raises(ConfigError, match="partition old is inact"):
        check_request(Request(partition="old", cpus=1, gpus=0), partitions())
    # Slurm takes the first partition of a list that can run the job
    assert check_request(Request(partition="cpu,gpu", cpus=16, gpus=0), partitions())[0] == "gpu"
    with pytest.raises(ConfigError, match="Did you mean 'debug'"):
        check_request(Request(partition="cpu,debugg", cpus=1, gpus=0), partitions())


def test_no_default_partition() -> None:
    parts = parse_sinfo(SINFO.replace("cpu*", "cpu"))
    with pytest.raises(ConfigError, match="no default partition; choose one with --slurm_partition"):
        check_request(Request(partition=None, cpus=1, gpus=0), parts)


def test_overrides_from_sbatch_args_environment_and_template() -> None:
    template = "#!/bin/bash\n#SBATCH --partition=gpu  # ours\n#SBATCH -t 2:00:00\nmodule load x\n#SBATCH -p late\n"
    assert effective_overrides([], template, {}) == {"partition": ("gpu", "an #SBATCH line of the template"),
                                                     "time": ("2:00:00", "an #SBATCH line of the template")}
    assert effective_overrides([], template, {"SBATCH_PARTITION": "cpu"})["partition"] == ("cpu", "$SBATCH_PARTITION")
    got = effective_overrides(["-p", "debug", "-c4", "--time=10"], template, {"SBATCH_PARTITION": "cpu"})
    assert got == {"partition": ("debug", "--slurm_sbatch_args"), "cpus": ("4", "--slurm_sbatch_args"),
                   "time": ("10", "--slurm_sbatch_args")}


def test_options_request_precedence(tmp_path) -> None:
    options = SlurmOptions(gpus_per_job=0, partition="cpu", timeout="1:00:00", workdir=str(tmp_path))
    assert (options.cpus_per_task, options.request("", {}).partition) == (1, "cpu")
    template = "#SBATCH --partition=gpu\n#SBATCH --time=5\n"
    request = options.request(template, {})
    assert request.partition == "cpu" and request.time_s == 3600  # the command line beats #SBATCH lines
    request = SlurmOptions(gpus_per_job=0, workdir=str(tmp_path)).request(template, {})
    assert (request.partition, request.time_s, request.time_option) == ("gpu", 300, "--time in an #SBATCH line of the template")
    request = SlurmOptions(gpus_per_job=0, cpus_per_job=2, partition="cpu", sbatch_args="-p debug -c 3",
                           workdir=str(tmp_path)).request("", {})
    assert (request.partition, request.cpus, request.cpus_option) == ("debug", 3, "--cpus-per-task in --slurm_sbatch_args")
    with pytest.raises(ConfigError, match="--partition in --slurm_sbatch_args=debugg.*Did you mean 'debug'"):
        check_request(SlurmOptions(sbatch_args="--partition=debugg", workdir=str(tmp_path)).request("", {}), partitions())


def test_cpu_options(tmp_path) -> None:
    def cpus(**kwargs) -> int:
        return SlurmOptions(workdir=str(tmp_path), **kwargs).cpus_per_task
    assert cpus(gpus_per_job=0) == 1 and cpus(gpus_per_job=0, cpus_per_job=6) == 6
    assert cpus(gpus_per_job=1) == 8 and cpus(gpus_per_job=2, cpus_per_gpu=6) == 12
    assert cpus(gpus_per_job=0, cpus_per_gpu=3) == 3  # the old spelling for CPU jobs still works (with a warning)
    with pytest.raises(ConfigError, match="--slurm_cpus_per_job=4 is for CPU-only jobs"):
        cpus(gpus_per_job=1, cpus_per_job=4)
    with pytest.raises(ConfigError, match="--slurm_cpus_per_job=0 must be >= 1"):
        cpus(gpus_per_job=0, cpus_per_job=0)
    with pytest.raises(ConfigError, match="--slurm_timeout='1 day' is not a Slurm time"):
        SlurmOptions(timeout="1 day", workdir=str(tmp_path))


@pytest.mark.parametrize("reason, permanent", [
    ("PartitionConfig", True), ("PartitionNodeLimit", True), ("PartitionTimeLimit", True), ("BadConstraints", True),
    ("QOSMaxCpuPerJobLimit", True), ("QOSMaxWallDurationPerJobLimit", True), ("AssocMaxGRESPerJob", True),
    ("QOSMaxGRESPerNode", True), ("InvalidQOS", True), ("ReqNodeNotAvail, UnavailableNodes:", True),
    ("Resources", False), ("Priority", False), ("BeginTime", False), ("None", False), ("Dependency", False),
    ("QOSMaxJobsPerUserLimit", False), ("QOSMaxCpuPerUserLimit", False), ("AssocMaxJobsLimit", False),
    ("AssocGrpCpuLimit", False), ("JobArrayTaskLimit", False), ("ReqNodeNotAvail, UnavailableNodes:n[1-2]", False),
    ("PartitionDown", False), ("JobHeldUser", False),
])
def test_never_clears(reason: str, permanent: bool) -> None:
    assert (never_clears(reason) is not None) == permanent


def test_parse_squeue() -> None:
    text = "12_0|RUNNING|None\n12_1|PENDING|ReqNodeNotAvail, UnavailableNodes:a|b\n\n"
    assert parse_squeue(text) == [("12_0", "RUNNING", "None"), ("12_1", "PENDING", "ReqNodeNotAvail, UnavailableNodes:a|b")]


class FakeQueue:
    """squeue answers in turn (the last one repeats), a fake clock that sleeps advance, and scancel calls."""

    def __init__(self, answers: List[str]) -> None:
        self.answers = answers
        self.queries = 0
        self.now = 0.0
        self.cancelled: List[Sequence[str]] = []

    def query(self, job_ids: Sequence[str]) -> str:
        answer = self.answers[min(self.queries, len(self.answers) - 1)]
        self.queries += 1
        return answer

    def watch(self, watch_s: float = 10) -> None:
        watch_new_jobs(["12", "13"], watch_s, poll_s=1, query=self.query, cancel=self.cancelled.append,
                       clock=lambda: self.now, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.now += seconds


def test_watch_cancels_a_job_that_never_starts() -> None:
    queue = FakeQueue(["12_0|PENDING|None\n13_0|PENDING|None", "12_0|RUNNING|None\n13_0|PENDING|PartitionNodeLimit"])
    with pytest.raises(SlurmError) as info:
        queue.watch()
    assert queue.cancelled == [["12", "13"]] and queue.queries == 2
    message = str(info.value)
    assert "job 13_0 cannot start" in message and "'PartitionNodeLimit'" in message and "scancel 12 13" in message


def test_watch_stops_once_settled_and_is_bounded() -> None:
    queue = FakeQueue(["12_0|PENDING|None", "12_0|PENDING|Resources\n13_0|RUNNING|None"])
    queue.watch()
    assert queue.queries == 2 and queue.cancelled == []
    queue = FakeQueue(["12_0|PENDING|None"])  # the scheduler never looks at it: give up after watch_s
    queue.watch(watch_s=5)
    assert queue.cancelled == [] and queue.queries == 6 and queue.now == 5
    queue = FakeQueue([""])  # already ended and forgotten
    queue.watch()
    assert queue.queries == 1
    queue = FakeQueue(["12_0|PENDING|PartitionConfig"])
    watch_new_jobs(["12"], 0, query=queue.query)  # 0: not watched
    assert queue.queries == 0


def test_sinfo_failure_is_a_slurm_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Failed:
        returncode = 1
        stdout = ""
        stderr = "slurm_load_partitions: Unable to contact slurm controller"

    monkeypatch.setattr(slurm_checks, "run_tool", lambda argv, timeout=15: Failed())
    with pytest.raises(SlurmError, match="sinfo failed.*Unable to contact.*--slurm_check=False"):
        slurm_checks.query_partitions()


def test_without_sinfo_the_launcher_says_it_did_not_check(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from pbt.launcher.backends import slurm

    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    options = SlurmOptions(gpus_per_job=0, cpus_per_job=3, print_only=True, workdir=str(tmp_path))
    with caplog.at_level("WARNING", logger="launcher"):
        slurm.check_against_partition(options)
    assert "sinfo is not on PATH: the request (3 CPUs, 0 GPUs per member) was not checked" in caplog.text


def test_print_only_with_an_unreachable_cluster_warns(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    from pbt.launcher.backends import slurm

    def unreachable() -> None:
        raise SlurmError("sinfo did not answer within 15 s")

    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(slurm_checks, "query_partitions", unreachable)
    with caplog.at_level("WARNING", logger="launcher"):
        slurm.check_against_partition(SlurmOptions(print_only=True, workdir=str(tmp_path)))
    assert "not checked against the partition: sinfo did not answer" in caplog.text
    with pytest.raises(SlurmError, match="did not answer"):  # submitting needs the answer
        slurm.check_against_partition(SlurmOptions(workdir=str(tmp_path)))


def test_check_uses_the_partition_sinfo_reports(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from pbt.launcher.backends import slurm

    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(slurm_checks, "query_partitions", partitions)
    slurm.check_against_partition(SlurmOptions(gpus_per_job=0, cpus_per_job=2, workdir=str(tmp_path)))
    with pytest.raises(ConfigError, match="use --slurm_cpus_per_job<=2"):
        slurm.check_against_partition(SlurmOptions(gpus_per_job=0, cpus_per_job=8, workdir=str(tmp_path)))
