"""The executor contract, run against this machine and a real sshd alike."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from pipeline.errors import CommandFailed, CommandTimeout, ExecutorError, JobError
from pipeline.hosts.executor import Executor, JobHandle

from ..conftest import MakeExecutor, process_alive, wait_for, wait_until


def test_run_returns_output_and_uses_workdir(executor: Executor) -> None:
    result = executor.run(["sh", "-c", 'pwd; echo "$GREETING"'], env={"GREETING": "hi there"})
    assert result.ok and result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [executor.workdir, "hi there"]
    assert result.command == "GREETING='hi there' sh -c 'pwd; echo \"$GREETING\"'"
    sub = Path(executor.workdir) / "sub"
    sub.mkdir()
    assert executor.run(["pwd"], cwd="sub").stdout.strip() == str(sub)


def test_failure_carries_the_result(executor: Executor) -> None:
    argv = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    with pytest.raises(CommandFailed) as info:
        executor.run(argv)
    result = info.value.result
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert "exit 3" in str(info.value) and "err" in str(info.value)
    assert executor.run(argv, warn=True).exit_code == 3


def test_timeout_kills_the_process_group(executor: Executor) -> None:
    bg = Path(executor.workdir) / "bg"
    with pytest.raises(CommandTimeout) as info:
        executor.run(["sh", "-c", f"sleep 60 & echo $! > {bg}; wait"], timeout=1)
    assert info.value.exit_code == 4
    wait_until(lambda: not process_alive(int(bg.read_text())), what="the background sleep")


def test_secrets_are_redacted_but_delivered(executor: Executor) -> None:
    env = {"HF_TOKEN": "hf_abcdefgh", "MY_API_KEY": "k-12345", "AWS_REGION": "eu-1", "N": "3"}
    script = "import os; print(os.environ['HF_TOKEN'] == 'hf_abcdefgh', os.environ['N'])"
    result = executor.run([sys.executable, "-c", script], env=env)
    assert result.stdout.strip() == "True 3"
    assert "hf_abcdefgh" not in result.command and "k-12345" not in result.command
    assert "HF_TOKEN=*** MY_API_KEY=*** AWS_REGION=*** N=3" in result.command
    echo = executor.run(["sh", "-c", "echo $HF_TOKEN"], env=env)
    assert echo.stdout.strip() == "***"
    handle = executor.start_detached("secret", ["sh", "-c", "echo $HF_TOKEN | wc -c"], env=env)
    assert "hf_abcdefgh" not in handle.command and "HF_TOKEN=***" in handle.command
    assert wait_for(executor, handle).state == "succeeded"
    run_dir = Path(handle.run_dir)
    assert executor.tail(handle)[0].strip() == b"12"
    for name in os.listdir(run_dir):
        assert b"hf_abcdefgh" not in (run_dir / name).read_bytes(), name


def test_detached_job_lifecycle(executor: Executor) -> None:
    handle = executor.start_detached("job-1", ["sh", "-c", "echo one; sleep 0.5; echo two; exit 5"])
    assert not handle.attached and handle.pid and handle.host == executor.host.name
    assert handle.run_dir == f"{executor.workdir}/.harness/runs/job-1"
    status = wait_for(executor, handle)
    assert (status.state, status.exit_code, status.pid) == ("failed", 5, handle.pid)
    data, offset = executor.tail(handle)
    assert data == b"one\ntwo\n" and offset == 8
    assert executor.tail(handle, 4) == (b"two\n", 8)
    assert executor.tail(handle, 8) == (b"", 8)
    assert executor.tail(handle, 0, limit=3) == (b"one", 3)
    files = sorted(os.listdir(handle.run_dir))
    assert files == ["cmd", "exit_code", "job.sh", "log", "pid", "pid_start", "started"]
    ok = executor.start_detached("job-2", ["true"])
    assert wait_for(executor, ok).state == "succeeded"


def test_tail_follows_a_growing_log(executor: Executor) -> None:
    handle = executor.start_detached("grow", ["sh", "-c", "for i in 1 2 3; do echo line$i; "
                                              "sleep 0.3; done"])
    seen, offset = b"", 0
    while executor.poll(handle).state == "running":
        chunk, offset = executor.tail(handle, offset)
        seen += chunk
    chunk, offset = executor.tail(handle, offset)
    assert seen + chunk == b"line1\nline2\nline3\n"


def test_reattach_after_restart_never_launches_twice(make_executor: MakeExecutor) -> None:
    first = make_executor()
    counter = Path(first.workdir) / "launches"
    argv = ["sh", "-c", f"echo launched >> {counter}; echo begin; sleep 1; echo end; exit 7"]
    handle = first.start_detached("run-7", argv)
    first.close()
    del first  # the harness was killed; only the files on the host remain

    second = make_executor()
    again = second.start_detached("run-7", argv)
    assert again.attached and again.pid == handle.pid and again.command == handle.command
    found = second.attach("run-7")
    assert found is not None and found.pid == handle.pid
    status = wait_for(second, again)
    assert (status.state, status.exit_code) == ("failed", 7)
    assert second.tail(again)[0] == b"begin\nend\n"
    # and once more after it finished: still attached, still one launch
    assert second.start_detached("run-7", argv).attached
    assert counter.read_text() == "launched\n"
    assert second.attach("never-started") is None
    with pytest.raises(JobError):
        second.poll(JobHandle("ghost", "h", f"{second.workdir}/.harness/runs/ghost", None, ""))


def test_killed_job_without_exit_code_is_lost(executor: Executor) -> None:
    handle = executor.start_detached("doomed", ["sleep", "60"])
    assert handle.pid is not None
    os.killpg(handle.pid, signal.SIGKILL)  # wrapper and command die; nobody writes exit_code
    status = wait_for(executor, handle)
    assert (status.state, status.exit_code) == ("lost", None)
    assert not (Path(handle.run_dir) / "exit_code").exists()


def _with_child(executor: Executor, key: str, prefix: str = "") -> tuple[JobHandle, int]:
    """A detached job whose shell runs a background ``sleep``; the job and the sleep's pid."""
    child_file = Path(executor.workdir) / key
    handle = executor.start_detached(
        key, ["sh", "-c", f"{prefix}sleep 300 & echo $! > {child_file}; wait"])
    wait_until(lambda: child_file.exists() and child_file.read_text().strip() != "",
               what="the child pid")
    return handle, int(child_file.read_text())


def test_cancel_kills_the_whole_group(executor: Executor) -> None:
    handle, child = _with_child(executor, "cancel-me")
    assert process_alive(child) and executor.poll(handle).state == "running"
    status = executor.cancel(handle, grace=5)
    assert status.state == "cancelled" and status.exit_code == 143
    assert not process_alive(child) and not process_alive(handle.pid or 0)
    assert executor.cancel(handle).state == "cancelled"  # twice is harmless


def test_cancel_escalates_to_kill(executor: Executor) -> None:
    handle, child = _with_child(executor, "stubborn", prefix="trap '' TERM; ")
    status = executor.cancel(handle, grace=0.5)
    assert status.state == "cancelled"
    assert not process_alive(child)


def test_cancel_after_success_keeps_success(executor: Executor) -> None:
    handle = executor.start_detached("quick", ["true"])
    wait_for(executor, handle)
    assert executor.cancel(handle).state == "succeeded"


def test_put_and_get(executor: Executor, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 10)
    remote = executor.put(src, "in/deep/copy.bin")
    assert remote == f"{executor.workdir}/in/deep/copy.bin"
    back = executor.get("in/deep/copy.bin", tmp_path / "back" / "copy.bin")
    assert back.read_bytes() == src.read_bytes()


def test_bad_run_ids_are_refused(executor: Executor) -> None:
    for bad in ["", ".", "..", "a/b", "../escape"]:
        with pytest.raises(JobError, match="bad run id"):
            executor.start_detached(bad, ["true"])


def test_read_bytes_and_missing_files(executor: Executor) -> None:
    (Path(executor.workdir)).mkdir(parents=True, exist_ok=True)
    (Path(executor.workdir) / "result.json").write_text('{"ok": true}')
    assert executor.read_bytes("result.json") == b'{"ok": true}'
    with pytest.raises(ExecutorError, match="no such file"):
        executor.read_bytes("absent.json")
    ghost = JobHandle("ghost", "h", f"{executor.workdir}/.harness/runs/ghost", None, "")
    assert executor.tail(ghost, 0) == (b"", 0)


def test_ctrl_c_during_a_command_reaches_the_caller(executor: Executor) -> None:
    # invoke's local runner used to turn Ctrl-C into "\x03" on the child's stdin and wait
    # on, so the interrupt vanished and a Ctrl-C'd `harness run` watched its stage to the end.
    import threading
    import time

    reached = []
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        timer.start()
        executor.run(["sh", "-c", "sleep 1; echo done"])
        reached.append("returned")
        time.sleep(3)  # a lost interrupt would not come back: fail, not hang
    timer.cancel()
    assert reached == []
    # The harness goes on to use the same executor (stopping servers, recording the end).
    assert executor.run(["echo", "again"]).stdout == "again\n"
