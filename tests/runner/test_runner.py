"""The runner end to end: real local jobs, a real sshd, real kills and restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from harness import todos as uc
from harness.runner import Runner, evaluate_gate, stage_status
from pipeline.gates import parse_gate
from pipeline.spec.load import load_spec
from state.store import Store
from tests.conftest import ROOT


def write_spec(path: Path, stages: list[dict], hosts: dict | None = None, **top) -> Path:
    doc = {"pipeline": "test", "hosts": hosts or {"local": {"workdir": str(path.parent /
                                                                          "work")}},
           "stages": stages, **top}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def ssh_entry(ssh_host) -> dict:
    return {k: v for k, v in ssh_host.model_dump(mode="json").items()
            if k in ("host", "port", "user", "key", "known_hosts", "workdir", "python")}


def make_runner(store: Store, spec_path: Path, session: str = "s", **kw) -> Runner:
    row = store.session_by_name(session)
    sid = row.id if row else store.create_session(session, actor="human")
    lines: list[str] = []
    kw.setdefault("poll_interval", 0.05)
    runner = Runner(store, sid, load_spec(spec_path), out=lines.append, **kw)
    runner.lines = lines  # type: ignore[attr-defined]
    return runner


def in_thread(runner: Runner) -> threading.Thread:
    """Run the runner in a thread; a failure there is re-raised by ``join_ok``."""
    def target() -> None:
        try:
            runner.run()
        except BaseException as exc:
            runner.error = exc  # type: ignore[attr-defined]
    runner.error = None  # type: ignore[attr-defined]
    thread = threading.Thread(target=target)
    thread.start()
    return thread


def wait_running(store: Store, runner: Runner, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 30
    while not any(r.state == "running" for r in store.runs(runner.sid)):
        if not thread.is_alive():
            raise AssertionError(f"runner stopped: {runner.error!r} {runner.lines}")
        assert time.monotonic() < deadline, runner.lines
        time.sleep(0.05)


def by_stage(store: Store, sid: int) -> dict:
    return {t.stage: t for t in store.todos(sid) if t.stage}


def test_local_pipeline_with_needs_failure_and_retries(tmp_path: Path, store: Store) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "make", "todo": "Make data", "run": "echo making; echo 42 > data.txt",
         "outputs": ["data.txt"]},
        {"name": "use", "needs": ["make"], "run": "test $(cat data.txt) = 42 && echo used"},
        {"name": "flaky", "needs": ["make"], "retries": 2,
         "run": "n=$(cat tries 2>/dev/null || echo 0); echo $((n+1)) > tries; "
                "echo try $((n+1)); [ $((n+1)) -ge 3 ]"},
        {"name": "broken", "needs": ["use"], "run": "echo 'Error: no GPU' >&2; exit 7"},
        {"name": "after_broken", "needs": ["broken"], "run": "echo never"},
    ])
    runner = make_runner(store, spec)
    report = runner.run()
    sid = runner.sid
    todos = by_stage(store, sid)
    assert {k: t.status for k, t in todos.items()} == {
        "make": "completed", "use": "completed", "flaky": "completed", "broken": "blocked",
        "after_broken": "pending"}
    assert todos["make"].content == "Make data" and todos["make"].origin == "pipeline"
    assert todos["use"].depends_on == [todos["make"].num]
    assert "exit code 7: Error: no GPU" in todos["broken"].blocked_reason
    flaky_runs = [r for r in store.runs(sid) if r.stage == "flaky"]
    assert [(r.attempt, r.state, r.exit_code) for r in flaky_runs] == [
        (1, "failed", 1), (2, "failed", 1), (3, "succeeded", 0)]
    assert not report.ok and report.blocked[0][0] == "broken"
    assert any("after_broken" in w for w in report.waiting)
    text, _ = store.log(flaky_runs[-1].id)
    assert text == "try 3\n"
    # Re-running reuses the todos and runs nothing that is done.
    again = make_runner(store, spec).run()
    assert len(store.runs(sid)) == len(flaky_runs) + 3
    assert again.completed == ["make", "use", "flaky"]
    assert len(by_stage(store, sid)) == 5


def test_missing_output_and_gate_block_with_numbers(tmp_path: Path, store: Store) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "forgetful", "run": "echo hi", "outputs": ["model.safetensors"]},
    ])
    make_runner(store, spec).run()
    t = by_stage(store, store.session_by_name("s").id)["forgetful"]
    assert t.status == "blocked"
    assert "output model.safetensors is missing" in t.blocked_reason


def test_gate_evaluation_reports_numbers() -> None:
    ok, lines = evaluate_gate(parse_gate({"min_acceptance_length": 2.0,
                                          "min_projected_speedup": 1.1}),
                              {"acceptance_length": 1.17, "projected_speedup": 0.66})
    assert not ok
    assert lines == ["acceptance_length 1.17 fails >= 2", "projected_speedup 0.66 fails >= 1.1"]
    ok, lines = evaluate_gate(parse_gate({"max_loss": 3}), {"loss": 2.5})
    assert ok and lines == ["loss 2.5 meets <= 3"]
    ok, lines = evaluate_gate(parse_gate({"min_tau": 2}), {})
    assert not ok and lines == ["tau missing (gate needs >= 2)"]


def test_reprioritisation_mid_run_is_honoured(tmp_path: Path, store: Store) -> None:
    gate = tmp_path / "go"
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "first", "priority": "high",
         "run": f"while [ ! -e {gate} ]; do sleep 0.05; done; echo first"},
        {"name": "second", "priority": "medium", "run": "echo second"},
        {"name": "third", "priority": "low", "run": "echo third"},
    ])
    runner = make_runner(store, spec)
    sid = runner.sid
    thread = in_thread(runner)
    wait_running(store, runner, thread)
    third = by_stage(store, sid)["third"]
    uc.set_priority(store, sid, third.id, "high")
    uc.set_status(store, sid, by_stage(store, sid)["second"].id, "cancelled")
    gate.touch()
    thread.join(60)
    order = [r.stage for r in store.runs(sid)]
    assert order == ["first", "third"]
    assert by_stage(store, sid)["second"].status == "cancelled"


def test_two_host_pipeline_over_real_ssh(tmp_path: Path, store: Store, any_ssh_host) -> None:
    remote = ssh_entry(any_ssh_host)
    spec = write_spec(tmp_path / "p.yaml", hosts={
        "local": {"workdir": str(tmp_path / "work")}, "gpu": remote}, stages=[
        {"name": "prepare", "run": "echo local > where.txt; hostname > host.txt"},
        {"name": "remote", "host": "gpu", "needs": ["prepare"],
         "run": "echo \"$GREETING from $(pwd)\"; echo ok > remote.txt",
         "env": {"GREETING": "hello $(touch pwned) `touch pwned2`; rm -rf /"},
         "outputs": ["remote.txt"]},
    ])
    runner = make_runner(store, spec)
    report = runner.run()
    assert report.ok, runner.lines
    sid = runner.sid
    runs = store.runs(sid)
    assert [(r.stage, r.host, r.state) for r in runs] == [("prepare", "local", "succeeded"),
                                                          ("remote", "gpu", "succeeded")]
    log, _ = store.log(runs[1].id)
    assert log == f"hello $(touch pwned) `touch pwned2`; rm -rf / from {remote['workdir']}\n"
    assert not list(Path(remote["workdir"]).rglob("pwned*"))
    assert (Path(remote["workdir"]) / "remote.txt").read_text() == "ok\n"
    assert runs[1].job["host"]["host"] == "127.0.0.1" and "env" not in runs[1].job["host"]


RUN_CLI = [sys.executable, "-m", "harness", "run", "--quiet"]


def test_sigkill_runner_then_resume_launches_once(tmp_path: Path, db_path: Path) -> None:
    counter = tmp_path / "launches"
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "long", "run": f"echo launch >> {counter}; for i in 1 2 3 4 5 6; do "
                                f"echo tick $i; sleep 0.5; done; echo finished"},
        {"name": "after", "needs": ["long"], "run": "echo after"},
    ])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    first = subprocess.Popen([*RUN_CLI, str(spec)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    store = Store.open(str(db_path))
    deadline = time.monotonic() + 30
    while not (counter.exists() and store.log(1)[0].count("tick") >= 1):
        assert time.monotonic() < deadline, first.communicate(timeout=5)
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    _sid, run = store.run(1)
    assert run.state == "running"  # the dead runner left it so
    second = subprocess.run([*RUN_CLI, str(spec)], env=env, capture_output=True, timeout=60)
    assert second.returncode == 0, second.stderr.decode() + second.stdout.decode()
    assert b"re-attached to r1" in second.stdout
    assert counter.read_text() == "launch\n"  # launched once, across two runners
    _sid, run = store.run(1)
    assert (run.state, run.exit_code) == ("succeeded", 0)
    log, _ = store.log(1)
    assert log == "".join(f"tick {i}\n" for i in range(1, 7)) + "finished\n"
    assert [r.stage for r in store.runs()] == ["long", "after"]
    store.close()


def test_job_lost_when_its_process_vanishes(tmp_path: Path, db_path: Path) -> None:
    spec = write_spec(tmp_path / "p.yaml", [{"name": "doomed", "run": "sleep 30"}])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    first = subprocess.Popen([*RUN_CLI, str(spec)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    store = Store.open(str(db_path))
    deadline = time.monotonic() + 30
    while True:
        runs = store.runs()
        if runs and runs[0].pid and runs[0].state == "running":
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    os.killpg(runs[0].pid, signal.SIGKILL)  # the job's whole group, wrapper included
    second = subprocess.run([*RUN_CLI, str(spec)], env=env, capture_output=True, timeout=60)
    assert second.returncode == 1
    _sid, run = store.run(runs[0].id)
    assert run.state == "lost"
    t = store.todos(_sid)[0]
    assert t.status == "blocked" and "lost" in t.blocked_reason
    store.close()


def test_ssh_server_restarted_mid_job(tmp_path: Path, store: Store, any_sshd,
                                      any_ssh_host) -> None:
    sshd = any_sshd
    spec = write_spec(tmp_path / "p.yaml", hosts={"gpu": ssh_entry(any_ssh_host)},
                      defaults={"host": "gpu"}, stages=[
        {"name": "train", "run": "for i in 1 2 3 4 5 6 7 8; do echo step $i; sleep 0.4; "
                                 "done; echo trained"}])
    runner = make_runner(store, spec)
    thread = in_thread(runner)
    sid = runner.sid
    wait_running(store, runner, thread)
    time.sleep(0.5)
    sshd.restart(down_for=1.0)
    thread.join(90)
    assert not thread.is_alive()
    run = store.runs(sid)[0]
    assert (run.state, run.exit_code) == ("succeeded", 0), runner.lines
    log, _ = store.log(run.id)
    assert log.splitlines() == [f"step {i}" for i in range(1, 9)] + ["trained"]


def test_two_hosts_runner_killed_and_sshd_restarted_mid_job(tmp_path: Path, db_path: Path,
                                                           any_sshd, any_ssh_host) -> None:
    """The runner dies by SIGKILL while a remote stage runs, the host's sshd restarts, a
    new runner resumes: the job was launched once, its log and exit code are complete, and
    the stage after it runs. With and without SFTP on the host."""
    remote = ssh_entry(any_ssh_host)
    counter = Path(remote["workdir"]) / "launches"
    spec = write_spec(tmp_path / "p.yaml", hosts={
        "local": {"workdir": str(tmp_path / "work")}, "gpu": remote}, stages=[
        {"name": "prepare", "run": "echo prepared"},
        {"name": "long", "host": "gpu", "needs": ["prepare"],
         "run": "echo launch >> launches; for i in 1 2 3 4 5 6 7 8; do echo tick $i; "
                "sleep 0.4; done; echo finished; exit 0"},
        {"name": "after", "needs": ["long"], "run": "echo after"},
    ])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    first = subprocess.Popen([*RUN_CLI, str(spec)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
    store = Store.open(str(db_path))
    deadline = time.monotonic() + 60
    while not (counter.exists() and len(store.runs()) == 2
               and store.log(2)[0].count("tick") >= 1):
        assert time.monotonic() < deadline and first.poll() is None, first.communicate(5)
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first_out = first.communicate(timeout=10)[0].decode()
    any_sshd.restart(down_for=0.5)
    _sid, run = store.run(2)
    assert run.state == "running" and run.host == "gpu"
    second = subprocess.run([*RUN_CLI, str(spec)], env=env, capture_output=True, timeout=120)
    out = second.stdout.decode()
    assert second.returncode == 0, second.stderr.decode() + out
    assert "re-attached to r2" in out
    assert counter.read_text() == "launch\n"  # launched once, across two runners
    _sid, run = store.run(2)
    assert (run.state, run.exit_code) == ("succeeded", 0)
    log, _ = store.log(2)
    assert log == "".join(f"tick {i}\n" for i in range(1, 9)) + "finished\n"
    assert [(r.stage, r.state) for r in store.runs()] == [
        ("prepare", "succeeded"), ("long", "succeeded"), ("after", "succeeded")]
    said = out.count("offers no SFTP") + first_out.count("offers no SFTP")
    assert said == (0 if any_sshd.sftp else 2), first_out + out  # once in each run's output
    store.close()


def test_cancel_from_another_process(tmp_path: Path, db_path: Path) -> None:
    child = tmp_path / "child.pid"
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "sleepy", "run": f"sleep 60 & echo $! > {child}; wait"}])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    runner = subprocess.Popen([*RUN_CLI, str(spec)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    store = Store.open(str(db_path))
    deadline = time.monotonic() + 30
    while not child.exists() or not store.runs() or store.runs()[0].state != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    from tests.conftest import run_cli

    r = run_cli(["cancel", "r1"])
    assert r.code == 0 and r.out == "r1 cancelled\n", r.err
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == 1, err
    grandchild = int(child.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{grandchild}").exists() or \
        Path(f"/proc/{grandchild}/stat").read_text().split()[2] == "Z"
    sid, run = store.run(1)
    assert run.state == "cancelled"
    t = store.todos(sid)[0]
    assert t.status == "blocked" and "cancelled by human" in t.blocked_reason
    status = stage_status(store, sid)
    assert status[0]["last_run"]["state"] == "cancelled"
    store.close()


def test_secrets_are_masked_in_stored_logs(tmp_path: Path, store: Store) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "leaky", "run": 'echo "token is $HF_TOKEN"; echo after',
         "env": {"HF_TOKEN": "hf_s3cr3t_value"}}])
    runner = make_runner(store, spec)
    runner.run()
    run = store.runs(runner.sid)[0]
    log, end = store.log(run.id)
    assert log == "token is " + "*" * len("hf_s3cr3t_value") + "\nafter\n"
    assert end == len(log.encode())  # offsets still match the host's log
    assert "hf_s3cr3t_value" not in (run.command or "")
    assert not any("hf_s3cr3t_value" in line for line in runner.lines)


def test_status_logs_and_dry_run_through_the_cli(tmp_path: Path, cli) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "one", "todo": "Say $(touch pwned) hello", "run": "echo one; echo two"}])
    dry = cli(["run", str(spec), "--dry-run"])
    assert dry.code == 0 and "would run 1 of 1 stage" in dry.out
    assert json.loads(cli(["list", "--json"]).out) == []  # a dry run writes nothing
    r = cli(["run", str(spec), "--quiet"])
    assert r.code == 0, r.err
    st = json.loads(cli(["status", "--json"]).out)
    assert st["pipeline"] == "test"
    assert st["stages"][0]["log_tail"] == ["one", "two"]
    assert st["stages"][0]["status"] == "completed"
    logs = cli(["logs", "r1"])
    assert logs.out == "one\ntwo\n"
    assert json.loads(cli(["list", "--json"]).out)[0]["content"] == "Say $(touch pwned) hello"
    assert not list(tmp_path.rglob("pwned"))
    bad = cli(["logs", "x1"])
    assert bad.code == 2 and "not a run id" in bad.err
    missing = cli(["logs", "r99"])
    assert missing.code == 1 and "unknown run r99" in missing.err
    spec_err = tmp_path / "bad.yaml"
    spec_err.write_text("pipeline: x\nstages:\n  - name: a\n    run: echo\n    needs: [zz]\n")
    r = cli(["run", str(spec_err)])
    assert r.code == 1 and "bad.yaml" in r.err and "zz" in r.err


@pytest.mark.parametrize("args, message", [
    (["--only", "nope"], "no stage named 'nope'"),
    (["--only", "one", "--until", "one"], "not both"),
    (["--host-override", "one=mars"], "unknown host 'mars'"),
    (["--host-override", "one"], "expected STAGE=HOST"),
])
def test_run_usage_errors(tmp_path: Path, cli, args: list[str], message: str) -> None:
    spec = write_spec(tmp_path / "p.yaml", [{"name": "one", "run": "echo one"}])
    r = cli(["run", str(spec), *args])
    assert r.code == 2 and message in r.err, r.err


def test_unknown_action_parameter_fails_before_anything_runs(tmp_path: Path, cli) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "first", "run": "echo should not run > ran.txt"},
        {"name": "vocab", "needs": ["first"], "action": "eagle3.vocab",
         "with": {"freqs": "data/tokens", "verifier": "v", "draft_vocabulary": 32000,
                  "out": "vocab.safetensors"}}])
    for args in (["check", str(spec)], ["run", str(spec)]):
        r = cli(args)
        assert r.code == 1, r.out
        assert "stages[1] (vocab).with.draft_vocabulary: unknown parameter" in r.err
        assert "did you mean 'draft_vocab'?" in r.err
    assert not (tmp_path / "work" / "ran.txt").exists()
    assert json.loads(cli(["list", "--json"]).out) == []
