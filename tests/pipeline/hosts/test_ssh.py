"""What only an SSH host has: host keys, refused and dropped connections, jump hosts, big files."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from pipeline.errors import ExecutorError, HostUnreachable
from pipeline.hosts.executor import executor_for
from pipeline.hosts.ssh import SSHExecutor
from pipeline.spec.models import HostSpec
from tests.sshd import SSHServer, free_port, keygen

from ..conftest import wait_for

pytestmark = pytest.mark.ssh


def test_executor_for_picks_ssh(ssh_host: HostSpec) -> None:
    with executor_for(ssh_host) as ex:
        assert isinstance(ex, SSHExecutor)
        assert ex.run(["echo", "over ssh"]).stdout == "over ssh\n"


def test_wrong_host_key_is_refused_unless_insecure(sshd: SSHServer, ssh_host: HostSpec,
                                                   tmp_path: Path) -> None:
    impostor = keygen(tmp_path / "impostor").split()
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {impostor[0]} {impostor[1]}\n")
    host = ssh_host.model_copy(update={"known_hosts": str(wrong)})
    with pytest.raises(HostUnreachable) as info, SSHExecutor(host) as ex:
        ex.run(["true"])
    err = info.value
    assert err.exit_code == 3 and not err.retryable and "\n" not in str(err)
    assert f"host key for [127.0.0.1]:{sshd.port} changed" in err.message
    assert str(wrong) in err.message
    insecure = host.model_copy(update={"insecure_host_key": True})
    with SSHExecutor(insecure) as ex:
        assert ex.run(["echo", "trusted anyway"]).stdout == "trusted anyway\n"
    assert wrong.read_text().count("\n") == 1  # insecure mode remembered nothing


def test_unknown_host_key_is_refused(ssh_host: HostSpec, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    host = ssh_host.model_copy(update={"known_hosts": str(empty)})
    with pytest.raises(HostUnreachable, match="host key unknown") as info, SSHExecutor(host) as ex:
        ex.run(["true"])
    assert "ssh-keyscan -p" in info.value.message and not info.value.retryable


def test_wrong_user_key_is_an_auth_failure(ssh_host: HostSpec, tmp_path: Path) -> None:
    keygen(tmp_path / "stranger")
    host = ssh_host.model_copy(update={"key": str(tmp_path / "stranger")})
    with pytest.raises(HostUnreachable, match="authentication failed") as info, \
            SSHExecutor(host) as ex:
        ex.run(["true"])
    assert info.value.exit_code == 3 and not info.value.retryable


@pytest.mark.timeout(20)
def test_closed_port_is_unreachable_at_once(ssh_host: HostSpec) -> None:
    host = ssh_host.model_copy(update={"port": free_port()})
    with pytest.raises(HostUnreachable) as info, SSHExecutor(host) as ex:
        ex.run(["true"])
    err = info.value
    assert err.exit_code == 3 and err.retryable
    assert str(err) == f"sshd: cannot connect to {host.label}: connection refused"


def test_gateway_jump_host(sshd: SSHServer, ssh_host: HostSpec) -> None:
    hosts = {"jump": sshd.host_spec("jump"),
             "gpu": ssh_host.model_copy(update={"name": "gpu", "gateway": "jump"})}
    with executor_for(hosts["gpu"], hosts) as ex:
        assert ex.run(["echo", "through the jump host"]).stdout == "through the jump host\n"
        assert isinstance(ex, SSHExecutor) and ex._conn is not None
        assert ex._conn.gateway.is_connected  # the hop really was used


def test_job_survives_sshd_restart_and_poll_reconnects(sshd: SSHServer,
                                                        ssh_host: HostSpec) -> None:
    with SSHExecutor(ssh_host, reconnect_budget=30) as ex:
        marker = Path(ex.workdir) / "started"
        handle = ex.start_detached(
            "survivor", ["sh", "-c", f"echo before; touch {marker}; sleep 2; echo after"])
        before = ex._conn
        assert ex.poll(handle).state == "running"
        sshd.restart(down_for=0.5)  # every connection cut, port closed for a moment
        status = wait_for(ex, handle)
        assert (status.state, status.exit_code, status.pid) == ("succeeded", 0, handle.pid)
        assert ex._conn is not before  # a new connection was made
        assert ex.tail(handle)[0] == b"before\nafter\n"


def test_reconnect_gives_up_after_its_budget(sshd: SSHServer, ssh_host: HostSpec) -> None:
    with SSHExecutor(ssh_host, reconnect_budget=1) as ex:
        handle = ex.start_detached("orphan", ["sleep", "5"])
        sshd.stop()
        try:
            with pytest.raises(HostUnreachable, match="gave up reconnecting after 1s"):
                ex.poll(handle)
        finally:
            sshd.start()
        assert ex.poll(handle).state == "running"
        ex.cancel(handle, grace=1)


@pytest.mark.slow
def test_put_and_get_50_mb_with_checksum(any_ssh_host: HostSpec, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    with src.open("wb") as fh:
        for _ in range(50):
            fh.write(os.urandom(1 << 20))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    with SSHExecutor(any_ssh_host) as ex:
        remote = ex.put(src, "data/big.bin")
        assert ex.run(["sha256sum", remote]).stdout.split()[0] == digest
        back = ex.get(remote, tmp_path / "back.bin")
    assert back.stat().st_size == 50 << 20
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in Path(remote).parent.iterdir()) == ["big.bin"]


def test_home_and_tilde_workdir(any_sshd: SSHServer) -> None:
    with SSHExecutor(any_sshd.host_spec(workdir="~")) as ex:
        assert ex.workdir == ex.home() == any_sshd.login_home
        assert ex.resolve("~/x") == os.path.join(ex.home(), "x")


def test_no_sftp_is_said_once_and_files_still_move(sshd_no_sftp: SSHServer,
                                                   tmp_path: Path) -> None:
    notes: list[str] = []
    host = sshd_no_sftp.host_spec(workdir=str(tmp_path / "remote"))
    with SSHExecutor(host, notify=notes.append) as ex:
        assert ex.home() == sshd_no_sftp.login_home  # found over an exec channel
        src = tmp_path / "a.bin"
        src.write_bytes(bytes(range(256)) * 1000 + b"\r\n\x00tail")
        remote = ex.put(src, "in/a.bin")
        assert Path(remote).read_bytes() == src.read_bytes()
        assert ex.read_bytes("in/a.bin") == src.read_bytes()
        assert ex.get("in/a.bin", tmp_path / "back" / "a.bin").read_bytes() == src.read_bytes()
        with pytest.raises(ExecutorError, match="no such file"):
            ex.read_bytes("in/nothing")
        assert ex.has_sftp is False
    assert len(notes) == 1 and f"{host.label} offers no SFTP" in notes[0]
    assert "sha256 checked on both ends" in notes[0]


def test_no_sftp_upload_with_a_wrong_checksum_lands_nowhere(tmp_path: Path) -> None:
    """The host's sha256sum disagrees with what was sent: the upload fails with the hash
    that was sent and leaves nothing at the target, not even a partial file."""
    liar = tmp_path / "bin"
    liar.mkdir()
    (liar / "sha256sum").write_text("#!/bin/sh\necho 0000000000000000  \"$1\"\n")
    (liar / "sha256sum").chmod(0o755)
    server = SSHServer(tmp_path / "sshd", sftp=False,
                       set_env={"PATH": f"{liar}:/usr/local/bin:/usr/bin:/bin"})
    server.start()
    try:
        src = tmp_path / "a.bin"
        src.write_bytes(os.urandom(4096))
        with SSHExecutor(server.host_spec(workdir=str(tmp_path / "remote"))) as ex:
            with pytest.raises(ExecutorError, match="sent sha256") as info:
                ex.put(src, "in/a.bin")
            target = Path(ex.resolve("in/a.bin"))
    finally:
        server.stop()
    assert hashlib.sha256(src.read_bytes()).hexdigest() in info.value.message
    assert "sha256 0000000000000000" in info.value.message and "\n" not in str(info.value)
    assert list(target.parent.iterdir()) == []


def test_run_reconnects_on_the_next_call_after_a_drop(ssh_host: HostSpec) -> None:
    # run() is not idempotent, so it never replays a command after a drop; it just
    # reconnects for the next call.
    with SSHExecutor(ssh_host) as ex:
        ex.run(["true"])
        assert ex._conn is not None
        ex._conn.client.get_transport().close()
        deadline = time.monotonic() + 5
        while ex._conn.is_connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ex.run(["echo", "again"]).stdout == "again\n"
