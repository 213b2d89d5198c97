"""Executors on both kinds of host, so each behaviour is tested locally and over real SSH."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.hosts.executor import Executor, JobHandle, JobStatus
from pipeline.spec.models import HostSpec
from tests.sshd import SSHServer, started

MakeExecutor = Callable[[], Executor]


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh),
                        pytest.param("ssh-no-sftp", marks=pytest.mark.ssh)])
def make_executor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeExecutor]:
    """A factory of fresh executors for one host (a new one = a restarted harness): this
    machine, a real sshd, and a real sshd without SFTP (files over exec channels)."""
    made: list[Executor] = []
    if request.param == "local":
        from pipeline.hosts.local import LocalExecutor

        host = HostSpec(workdir=str(tmp_path / "work"))

        def make() -> Executor:
            made.append(LocalExecutor(host))
            return made[-1]
    else:
        from pipeline.hosts.ssh import SSHExecutor

        server = request.getfixturevalue("sshd" if request.param == "ssh" else "sshd_no_sftp")
        if server.proc is None or server.proc.poll() is not None:
            server.start()
        ssh_host = server.host_spec(workdir=str(tmp_path / "remote"))

        def make() -> Executor:
            made.append(SSHExecutor(ssh_host, reconnect_budget=20))
            return made[-1]
    yield make
    for ex in made:
        ex.close()


@pytest.fixture
def executor(make_executor: MakeExecutor) -> Executor:
    return make_executor()


def wait_for(ex: Executor, handle: JobHandle, deadline_s: float = 30) -> JobStatus:
    """Poll until the job is no longer running; fail the test after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while (status := ex.poll(handle)).state == "running":
        assert time.monotonic() < end, f"job {handle.run_id} still running after {deadline_s}s"
        time.sleep(0.1)
    return status


def wait_until(check: Callable[[], bool], deadline_s: float = 15, what: str = "") -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what or check}"
        time.sleep(0.05)


def process_alive(pid: int) -> bool:
    """Running and not a zombie (pid 1 in some containers never reaps)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# A ProxyJump pair: the jump host on 127.0.0.2 logs at DEBUG1 (so a test can see that the
# target was reached through it), the target on 127.0.0.3.
@pytest.fixture(scope="module")
def jump(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    yield from started(tmp_path_factory.mktemp("jump"), address="127.0.0.2",
                       log_level="DEBUG1")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    yield from started(tmp_path_factory.mktemp("target"), address="127.0.0.3")
