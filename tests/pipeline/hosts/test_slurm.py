"""The Slurm executor against a real single-node Slurm (tests/slurm.py), reached on this
machine and through a login node over a real sshd."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.errors import JobError
from pipeline.hosts.executor import Executor, JobHandle, JobStatus, executor_for
from pipeline.hosts.slurm import SlurmExecutor
from pipeline.spec.models import HostSpec
from tests.slurm import SlurmCluster

pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster_ex(slurm_host: HostSpec) -> Iterator[Executor]:
    with executor_for(slurm_host) as ex:
        yield ex


def key(name: str) -> str:
    """A run id no other test uses: the cluster (and its job names) outlive each test."""
    return f"{name}-{os.urandom(3).hex()}"


def wait_done(ex: Executor, handle: JobHandle, seconds: float = 60) -> JobStatus:
    deadline = time.monotonic() + seconds
    while not (status := ex.poll(handle)).finished:
        assert time.monotonic() < deadline, f"{handle.ident} still running"
        time.sleep(0.2)
    return status


def show_job(slurm: SlurmCluster, job_id: str) -> dict[str, str]:
    """What ``scontrol show job`` says, as fields."""
    out = slurm.client("scontrol", "-o", "show", "job", job_id).stdout
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def test_a_job_runs_as_a_batch_job_and_its_exit_code_3_is_collected(
        cluster_ex: Executor, slurm: SlurmCluster) -> None:
    assert isinstance(cluster_ex, SlurmExecutor)
    rid = key("exit3")
    handle = cluster_ex.start_detached(
        rid, ["sh", "-c", 'echo "on $SLURM_JOB_NODELIST as job $SLURM_JOB_ID"; exit 3'],
        env={"GREETING": "hi"})
    assert handle.job_id and handle.job_id.isdigit() and not handle.attached
    status = wait_done(cluster_ex, handle)
    assert (status.state, status.exit_code, status.reason) == ("failed", 3, None)
    log = cluster_ex.tail(handle)[0].decode()
    assert log == f"on {SlurmCluster.NODE} as job {handle.job_id}\n"
    run_dir = Path(handle.run_dir)
    assert (run_dir / "job_id").read_text() == f"{handle.job_id}\n"
    assert (run_dir / "exit_code").read_text() == "3\n"  # the same wrapper as detached jobs
    fields = show_job(slurm, handle.job_id)
    if fields:  # the controller may have forgotten it already (MinJobAge)
        assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "3:0")
        assert fields["JobName"] == rid


def test_submitting_twice_attaches_to_the_one_job(slurm_host: HostSpec,
                                                  slurm: SlurmCluster) -> None:
    rid = key("once")
    with executor_for(slurm_host) as first:
        handle = first.start_detached(rid, ["sleep", "3"])
    with executor_for(slurm_host) as second:  # a restarted harness
        again = second.start_detached(rid, ["echo", "never runs"])
        assert (again.attached, again.job_id) == (True, handle.job_id)
        assert again.command == handle.command
        assert wait_done(second, again).state == "succeeded"
    named = slurm.client("squeue", "-h", "-t", "all", "-n", rid, "-o", "%i").stdout.split()
    assert named in ([handle.job_id], [])  # one job by that name (or already forgotten)
    assert slurm.jobcomp.read_text().count(f" Name={rid} ") == 1


def test_a_submission_cut_short_is_found_by_its_name(slurm_host: HostSpec,
                                                     slurm: SlurmCluster) -> None:
    """The submitting shell died between sbatch and writing job_id: the job is found by
    its name (the run key) and adopted, not submitted again."""
    rid = key("cut-short")
    with executor_for(slurm_host) as ex:
        run_dir = Path(ex.run_dir(rid))
        run_dir.mkdir(parents=True)
        (run_dir / "started").touch()
        sub = slurm.client("sbatch", "--parsable", f"--job-name={rid}",
                           f"--output={run_dir}/log", "--wrap", "echo adopted")
        job_id = sub.stdout.strip()
        handle = ex.attach(rid)
        assert handle is not None and handle.job_id == job_id
        assert (run_dir / "job_id").read_text() == f"{job_id}\n"
        assert wait_done(ex, handle).state == "succeeded"
        again = ex.start_detached(rid, ["echo", "not again"])
        assert again.job_id == job_id and again.attached


def test_resources_reach_sbatch_and_a_refusal_is_one_line(tmp_path: Path,
                                                          slurm: SlurmCluster) -> None:
    host = HostSpec(name="cluster", scheduler="slurm", workdir=str(tmp_path / "w"),
                    partition=SlurmCluster.PARTITION, cpus=2, mem="100M", time=600, nodes=1,
                    sbatch=["--comment=from-the-harness"], scheduler_poll=0.5)
    with executor_for(host) as ex:
        handle = ex.start_detached(key("sized"), ["sleep", "5"])
        fields = show_job(slurm, handle.job_id)
        assert fields["Partition"] == SlurmCluster.PARTITION
        assert fields["NumCPUs"] == "2" and fields["TimeLimit"] == "00:10:00"
        assert fields["Comment"] == "from-the-harness" and fields["MinMemoryNode"] == "100M"
        ex.cancel(handle, grace=15)
    gpu_host = host.model_copy(update={"gpus": 4})  # the node has no GPUs
    with executor_for(gpu_host) as ex, pytest.raises(JobError) as info:
        ex.start_detached("no-gpus", ["true"])
    message = str(info.value)
    assert "sbatch refused job 'no-gpus'" in message and "\n" not in message
    assert "gres" in message.lower() or "generic resource" in message.lower()


def test_cancel_is_scancel(cluster_ex: Executor, slurm: SlurmCluster) -> None:
    handle = cluster_ex.start_detached(key("cancel-me"), ["sh", "-c", "echo up; sleep 120"])
    deadline = time.monotonic() + 30
    while cluster_ex.tail(handle)[0] != b"up\n":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    cluster_ex.cancel(handle)
    status = wait_done(cluster_ex, handle)
    assert status.state == "cancelled", status
    assert f"Slurm cancelled job {handle.job_id}" in (status.reason or "")
    record = [line for line in slurm.jobcomp.read_text().splitlines()
              if line.startswith(f"JobId={handle.job_id} ")]
    assert len(record) == 1 and "JobState=CANCELLED" in record[0]


def test_a_job_the_controller_forgot_is_read_from_jobcomp(slurm_host: HostSpec,
                                                          slurm: SlurmCluster) -> None:
    """After MinJobAge squeue and scontrol know nothing; without slurmdbd sacct is off; the
    jobcomp file still has the end, and a fresh executor reads it there."""
    with executor_for(slurm_host) as ex:
        rid = key("forgotten")
        handle = ex.start_detached(rid, ["sh", "-c", "exit 3"])
        job_id = handle.job_id
    deadline = time.monotonic() + 90
    while slurm.client("squeue", "-h", "-t", "all", "-j", job_id).returncode == 0:
        assert time.monotonic() < deadline, "the controller never forgot the job"
        time.sleep(1)
    assert slurm.client("sacct", "-j", job_id).returncode != 0  # accounting is disabled
    with executor_for(slurm_host) as ex:
        again = ex.attach(rid)
        assert again is not None and again.job_id == job_id
        status = ex.poll(again)
        assert (status.state, status.exit_code) == ("failed", 3)
        assert ex.watcher.status(job_id).source == "jobcomp"


def test_a_job_id_no_record_knows_is_lost(slurm_host: HostSpec, slurm: SlurmCluster) -> None:
    with executor_for(slurm_host) as ex:
        run_dir = Path(ex.run_dir("ghost"))
        run_dir.mkdir(parents=True)
        (run_dir / "started").touch()
        (run_dir / "job_id").write_text("987654\n")
        handle = ex.attach("ghost")
        assert handle is not None and handle.job_id == "987654"
        status = ex.poll(handle)
    assert status.state == "lost"
    assert "Slurm has no record of job 987654" in (status.reason or "")


def test_one_question_to_slurm_for_all_live_jobs(tmp_path: Path, slurm: SlurmCluster) -> None:
    host = HostSpec(name="cluster", scheduler="slurm", workdir=str(tmp_path / "w"),
                    scheduler_poll=1.0)
    with executor_for(host) as ex:
        assert isinstance(ex, SlurmExecutor)
        handles = [ex.start_detached(key(f"many-{i}"), ["sleep", "4"]) for i in range(4)]
        before = ex.watcher.queries
        started_at = time.monotonic()
        polls = 0
        while time.monotonic() - started_at < 3:
            states = [ex.poll(h).state for h in handles]
            polls += len(handles)
            time.sleep(0.05)
        asked = ex.watcher.queries - before
        elapsed = time.monotonic() - started_at
        assert states == ["running"] * 4
        assert polls >= 100 and asked <= elapsed / host.scheduler_poll + 2, (polls, asked)
        for h in handles:
            ex.cancel(h, grace=15)


@pytest.mark.slow
def test_a_controller_restart_mid_job_is_waited_out(tmp_path: Path, slurm: SlurmCluster) -> None:
    """slurmctld goes away while a job runs (jobs go on without it): polls keep the last
    state and say so once; when it is back, the end is collected. (The job ends after the
    controller is back: an end reported while it is away reaches it only at the node's
    next ping, a minute or more later, which is Slurm's business, not ours.)"""
    notes: list[str] = []
    host = HostSpec(name="cluster", scheduler="slurm", workdir=str(tmp_path / "w"),
                    scheduler_poll=0.2)
    with executor_for(host, notify=notes.append) as ex:
        handle = ex.start_detached(key("outage"), ["sh", "-c", "sleep 25; echo done; exit 5"])
        deadline = time.monotonic() + 30
        while ex.poll(handle).state != "running" or not (Path(handle.run_dir) / "pid").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        slurm.stop_controller()
        try:
            for _ in range(2):  # each takes squeue's ~9 s of retrying a dead controller
                assert ex.poll(handle, fresh=True).state == "running"
        finally:
            slurm.start_controller()
        status = wait_done(ex, handle)
    assert (status.state, status.exit_code) == ("failed", 5)
    outage = [n for n in notes if n.startswith("Slurm does not answer")]
    assert len(outage) == 1 and "Unable to contact slurm controller" in outage[0], notes


def test_why_a_job_waits_in_the_queue_is_said_once(tmp_path: Path, slurm: SlurmCluster) -> None:
    notes: list[str] = []
    host = HostSpec(name="cluster", scheduler="slurm", workdir=str(tmp_path / "w"),
                    sbatch=["--hold"], scheduler_poll=0.2)
    with executor_for(host, notify=notes.append) as ex:
        handle = ex.start_detached(key("held"), ["true"])
        for _ in range(5):
            assert ex.poll(handle, fresh=True).state == "running"
        ex.cancel(handle)
        assert wait_done(ex, handle).state == "cancelled"
    assert notes == [f"slurm job {handle.job_id} is pending (JobHeldUser)"]
