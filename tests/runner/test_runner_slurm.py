"""The runner with a Slurm host, against a real single-node Slurm (tests/slurm.py): stages
as batch jobs, a runner killed and restarted, `harness cancel`, a time-limit kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.spec.models import HostSpec
from state.store import Store
from tests.conftest import ROOT, run_cli
from tests.runner.test_runner import RUN_CLI, in_thread, make_runner, wait_running, write_spec
from tests.slurm import SlurmCluster, SlurmUnavailable

pytestmark = pytest.mark.slurm


def slurm_entry(host: HostSpec) -> dict:
    fields = ("host", "port", "user", "key", "known_hosts", "workdir", "python", "scheduler",
              "scheduler_poll", "time")
    return {k: v for k, v in host.model_dump(mode="json").items()
            if k in fields and v is not None}


def jobcomp_records(slurm: SlurmCluster, job_id: str) -> list[str]:
    return [line for line in slurm.jobcomp.read_text().splitlines()
            if line.startswith(f"JobId={job_id} ")]


def wait_for_job(store: Store, run_id: int, what: str, seconds: float = 60) -> str:
    """The Slurm job id once it is on the run and its log says ``what``."""
    deadline = time.monotonic() + seconds
    while True:
        runs = {r.id: r for r in store.runs()}
        run = runs.get(run_id)
        if run and run.job and run.job.get("job_id") and what in store.log(run_id)[0]:
            return run.job["job_id"]
        assert time.monotonic() < deadline, f"r{run_id} never showed {what!r}"
        time.sleep(0.1)


def test_stages_on_slurm_succeed_fail_with_exit_3_and_ship_code(
        tmp_path: Path, store: Store, slurm_host: HostSpec, slurm: SlurmCluster) -> None:
    samples = tmp_path / "samples.jsonl"
    good = {"messages": [{"role": "user", "content": "2+2?"},
                         {"role": "assistant", "content": "<think>add</think>4"}]}
    samples.write_text(json.dumps(good) + "\n" + json.dumps({"messages": "bad"}) + "\n")
    cluster = slurm_entry(slurm_host)
    spec = write_spec(tmp_path / "p.yaml", hosts={
        "local": {"workdir": str(tmp_path / "work")}, "cluster": cluster}, stages=[
        {"name": "prepare", "run": "echo local"},
        # the launcher runs the action as a job step (srun), as multi-node torchrun does
        {"name": "clean", "host": "cluster", "needs": ["prepare"], "action": "eagle3.clean",
         "with": {"samples": str(samples), "out": "clean", "max_reject_rate": 0.6},
         "launcher": "srun --ntasks=1 sh -c 'echo \"step $SLURM_STEP_ID of job "
                     "$SLURM_JOB_ID\"; exec \"$0\" \"$@\"' \"$HARNESS_PYTHON\""},
        {"name": "three", "host": "cluster", "needs": ["clean"],
         "run": "echo \"job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"; exit 3"},
    ])
    runner = make_runner(store, spec)
    report = runner.run()
    runs = store.runs(runner.sid)
    assert [(r.stage, r.state) for r in runs] == [
        ("prepare", "succeeded"), ("clean", "succeeded"), ("three", "failed")], runner.lines
    clean, three = runs[1], runs[2]
    assert clean.result["metrics"]["kept"] == 1 and clean.code_hash
    assert store.log(clean.id)[0].startswith(f"step 0 of job {clean.job['job_id']}\n")
    assert (Path(cluster["workdir"]) / ".harness" / "code" / clean.code_hash).is_dir()
    job_id = three.job["job_id"]
    assert store.log(three.id)[0] == f"job {job_id} on {SlurmCluster.NODE}\n"
    assert three.exit_code == 3
    assert report.blocked == [("three", f"r{three.id} failed: exit code 3: job {job_id} on "
                                        f"{SlurmCluster.NODE}")]
    assert any(f"started r{three.id} on cluster (slurm via" in line and f"slurm job {job_id}" in line
               for line in runner.lines), runner.lines
    assert "JobState=FAILED" in jobcomp_records(slurm, job_id)[0]


def test_runner_killed_re_attaches_by_job_id_and_never_submits_twice(
        tmp_path: Path, db_path: Path, slurm: SlurmCluster) -> None:
    work = tmp_path / "cluster-work"
    spec = write_spec(tmp_path / "p.yaml", hosts={
        "cluster": {"scheduler": "slurm", "workdir": str(work), "scheduler_poll": 0.5}},
        defaults={"host": "cluster"}, stages=[
        {"name": "long", "run": "echo launch >> launches; for i in 1 2 3 4 5 6; do "
                                "echo tick $i; echo \"$POINT\" | sed s/X/$i/g; sleep 0.5; "
                                "done; echo finished",
         "env": {"POINT": '@series {"metric": "tick", "x": X, "y": X}'}},
        {"name": "after", "needs": ["long"], "run": "echo after"}])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    first = subprocess.Popen([*RUN_CLI, str(spec)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
    store = Store.open(str(db_path))
    job_id = wait_for_job(store, 1, "tick 1")
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=10)
    _sid, run = store.run(1)
    assert run.state == "running" and run.job["job_id"] == job_id
    second = subprocess.run([*RUN_CLI, str(spec)], env=env, capture_output=True, timeout=120)
    out = second.stdout.decode()
    assert second.returncode == 0, second.stderr.decode() + out
    assert f"re-attached to r1 (slurm job {job_id})" in out
    assert (work / "launches").read_text() == "launch\n"  # submitted once, run once
    _sid, run = store.run(1)
    assert (run.state, run.exit_code) == ("succeeded", 0)
    assert store.log(1)[0] == "".join(f'tick {i}\n@series {{"metric": "tick", "x": {i}, '
                                      f'"y": {i}}}\n' for i in range(1, 7)) + "finished\n"
    # its series too: each point once, those read before the kill and those after
    assert [(p.x, p.y) for p in store.series([1])] == [(i, float(i)) for i in range(1, 7)]
    key = run.job["key"]
    assert slurm.jobcomp.read_text().count(f" Name={key} ") == 1
    assert [r.stage for r in store.runs()] == ["long", "after"]
    store.close()


def test_harness_cancel_calls_scancel(tmp_path: Path, db_path: Path,
                                      slurm: SlurmCluster) -> None:
    spec = write_spec(tmp_path / "p.yaml", hosts={
        "cluster": {"scheduler": "slurm", "workdir": str(tmp_path / "w"),
                    "scheduler_poll": 0.5}},
        defaults={"host": "cluster"}, stages=[{"name": "sleepy",
                                               "run": "echo up; sleep 300"}])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    runner = subprocess.Popen([*RUN_CLI, str(spec)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    store = Store.open(str(db_path))
    job_id = wait_for_job(store, 1, "up")
    r = run_cli(["cancel", "r1"])
    assert r.code == 0 and r.out == "r1 cancelled\n", r.err
    out = runner.communicate(timeout=60)[0].decode()
    assert runner.returncode == 1, out
    deadline = time.monotonic() + 30
    while not jobcomp_records(slurm, job_id):
        assert time.monotonic() < deadline, "Slurm never recorded the job's end"
        time.sleep(0.2)
    assert "JobState=CANCELLED" in jobcomp_records(slurm, job_id)[0]
    sid, run = store.run(1)
    assert run.state == "cancelled"
    t = store.todos(sid)[0]
    assert t.status == "blocked" and "cancelled by human" in t.blocked_reason
    store.close()


@pytest.mark.slow
@pytest.mark.sqlite  # one backend is enough for a minute-long wait on Slurm's clock
def test_a_time_limit_kill_blocks_the_todo_with_slurms_reason(
        tmp_path: Path, store: Store, slurm: SlurmCluster) -> None:
    """Slurm counts limits in minutes and checks them every 30 s or so: this takes 60-100 s."""
    spec = write_spec(tmp_path / "p.yaml", hosts={
        "cluster": {"scheduler": "slurm", "workdir": str(tmp_path / "w"), "time": "1m",
                    "scheduler_poll": 1}},
        defaults={"host": "cluster"}, stages=[{"name": "endless",
                                               "run": "echo started; exec sleep 600"}])
    runner = make_runner(store, spec, poll_interval=0.5)
    report = runner.run()
    run = store.runs(runner.sid)[0]
    job_id = run.job["job_id"]
    assert run.state == "failed", runner.lines
    assert run.reason.startswith(f"Slurm killed job {job_id} at its time limit")
    assert "TIMEOUT" in run.reason
    assert [name for name, _why in report.blocked] == ["endless"]
    assert "DUE TO TIME LIMIT" in store.log(run.id)[0]  # Slurm's own line, in the log
    assert "JobState=TIMEOUT" in jobcomp_records(slurm, job_id)[0]


@pytest.mark.slow
@pytest.mark.sqlite
def test_a_job_on_a_node_that_failed_is_lost_with_slurms_reason(
        tmp_path: Path, store: Store, slurm_cluster: SlurmCluster,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster of its own, whose controller declares a silent node down within seconds
    (SlurmdTimeout=5) and does not requeue: slurmd is killed while the job runs."""
    cluster = SlurmCluster(tmp_path / "cluster", extra=("SlurmdTimeout=5", "JobRequeue=0"))
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        cluster.stop()
        pytest.fail(f"a second cluster did not start where the first did: {exc}")
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    try:
        spec = write_spec(tmp_path / "p.yaml", hosts={
            "cluster": {"scheduler": "slurm", "workdir": str(tmp_path / "w"),
                        "scheduler_poll": 1}},
            defaults={"host": "cluster"}, stages=[{"name": "doomed",
                                                   "run": "echo started; sleep 300"}])
        runner = make_runner(store, spec, poll_interval=0.5)
        thread = in_thread(runner)
        wait_running(store, runner, thread)
        wait_for_job(store, store.runs(runner.sid)[0].id, "started")  # on the node, not queued
        cluster.kill_node()
        thread.join(150)
        assert not thread.is_alive() and runner.error is None, runner.lines
    finally:
        cluster.stop()
    run = store.runs(runner.sid)[0]
    job_id = run.job["job_id"]
    assert run.state == "lost", runner.lines
    assert run.reason == f"job lost: Slurm says its node failed (job {job_id}) " \
                         "[NODE_FAIL, NodeDown]"
    todo = store.todos(runner.sid)[0]
    assert todo.status == "blocked" and "NODE_FAIL" in todo.blocked_reason
