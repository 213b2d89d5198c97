"""A real OpenSSH server on a loopback address for tests, with its own host and user keys.

``SSHServer`` runs ``/usr/sbin/sshd -D`` from a temporary directory: host key, user key,
``authorized_keys``, ``known_hosts``, config, pid file and log all live there, so it needs
no system setup and works as root (CI) or as a normal user (then it can only log in as that
user). ``sftp=False`` leaves out the ``Subsystem sftp`` line, as on the GPU rental proxies
and minimal containers that offer exec channels only; ``address`` picks another loopback
address (127.0.0.2, ...), so a jump host and its target are two addresses, as fabric needs.
The fixtures at the bottom are imported by ``tests/conftest.py``.
"""

from __future__ import annotations

import getpass
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.spec.models import HostSpec

SSHD = shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


class SSHDUnavailable(RuntimeError):
    pass


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> str:
    """Make an ed25519 key pair at ``path``; return the public line ``type base64 comment``."""
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "harness-test",
                    "-f", str(path)], check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


def _sshd_version() -> tuple[int, int]:
    out = subprocess.run([SSHD, "-V"], capture_output=True, text=True)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", out.stdout + out.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _descendants(root: int) -> list[int]:
    """All processes below ``root`` (per-connection sshd children, their shells)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            rest = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(rest[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class SSHServer:
    def __init__(self, root: Path, *, sftp: bool = True, address: str = "127.0.0.1",
                 set_env: dict[str, str] | None = None, log_level: str = "VERBOSE"):
        if not (os.path.exists(SSHD) and os.path.exists(SSH_KEYGEN)):
            raise SSHDUnavailable(f"need {SSHD} and ssh-keygen (Debian: openssh-server)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.address = address
        self.sftp = sftp
        self.port = free_port(address)
        self.user = getpass.getuser()
        #: where a session starts: sshd logs in to the home the password database gives the
        #: user, whatever $HOME says here (CI and sandboxes often set it elsewhere)
        self.login_home = pwd.getpwuid(os.getuid()).pw_dir
        self.host_key = root / "ssh_host_ed25519_key"
        self.user_key = root / "id_ed25519"
        self.known_hosts = root / "known_hosts"
        self.log = root / "sshd.log"
        self.config = root / "sshd_config"
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)
        host_pub = keygen(self.host_key)
        user_pub = keygen(self.user_key)
        (root / "authorized_keys").write_text(user_pub + "\n")
        self.host_key_line = f"[{address}]:{self.port} {' '.join(host_pub.split()[:2])}"
        self.known_hosts.write_text(self.host_key_line + "\n")
        env = {"HOME": str(self.home), **(set_env or {})}
        lines = [
            f"Port {self.port}",
            f"ListenAddress {address}",
            f"HostKey {self.host_key}",
            f"PidFile {root / 'sshd.pid'}",
            f"AuthorizedKeysFile {root / 'authorized_keys'}",
            "UsePAM no",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "AllowTcpForwarding yes",
            *(["Subsystem sftp internal-sftp"] if sftp else []),
            "MaxStartups 100:30:200",
            "MaxSessions 50",
            "PrintMotd no",
            f"LogLevel {log_level}",
            # Sessions get a fresh, empty home: a test host must not run this machine's
            # own shell profile (here root's ~/.bashrc runs `pyenv rehash`, whose lock file
            # is left behind whenever a test kills a shell mid-rehash, and then every later
            # login waits 60 s for it).
            "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()),
        ]
        if _sshd_version() >= (9, 8):
            # refused connections in the tests would otherwise get 127.0.0.1 penalised
            lines.append("PerSourcePenalties no")
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        self.proc = subprocess.Popen([SSHD, "-D", "-f", str(self.config), "-E", str(self.log)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise SSHDUnavailable(f"sshd exited with {self.proc.returncode}: "
                                      f"{' '.join((err + self.log_text()).split())[-500:]}")
            try:
                with socket.create_connection((self.address, self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise SSHDUnavailable(f"sshd did not answer on port {self.port}: {self.log_text()[-500:]}")

    def stop(self) -> None:
        """Stop the listener and every connection it serves, as a crashed server would."""
        if self.proc is None:
            return
        pids = [self.proc.pid, *_descendants(self.proc.pid)]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        """Same port, same keys; connections in flight are cut."""
        self.stop()
        time.sleep(down_for)
        self.start()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def processes(self) -> list[int]:
        """The listener and every process below it (one sshd per connection, its shells)."""
        return [self.proc.pid, *_descendants(self.proc.pid)] if self.proc else []

    def host_spec(self, name: str = "sshd", **fields: object) -> HostSpec:
        values: dict[str, object] = {
            "name": name, "host": self.address, "port": self.port, "user": self.user,
            "key": str(self.user_key), "known_hosts": str(self.known_hosts),
            "python": sys.executable, "connect_timeout": 5.0,
        }
        values.update(fields)
        return HostSpec.model_validate(values)


def started(root: Path, **options: object) -> Iterator[SSHServer]:
    """Start an SSHServer for a fixture; skip (loudly) if it cannot start; stop it after."""
    try:
        server = SSHServer(root, **options)  # type: ignore[arg-type]
        server.start()
    except (SSHDUnavailable, OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"!!! SSH TESTS SKIPPED: a real sshd could not be started: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A running sshd for the whole session; skips (loudly) if one cannot be started."""
    yield from started(tmp_path_factory.mktemp("sshd"))


@pytest.fixture(scope="session")
def sshd_no_sftp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A running sshd without the ``Subsystem sftp`` line: exec channels only."""
    yield from started(tmp_path_factory.mktemp("sshd-no-sftp"), sftp=False)


@pytest.fixture(params=["sftp", "no-sftp"])
def any_sshd(request: pytest.FixtureRequest) -> SSHServer:
    """Each test that takes it runs twice: against an sshd with SFTP and one without."""
    server: SSHServer = request.getfixturevalue("sshd" if request.param == "sftp"
                                                else "sshd_no_sftp")
    if server.proc is None or server.proc.poll() is not None:
        server.start()  # a test that stopped it and failed before restarting
    return server


@pytest.fixture
def ssh_host(sshd: SSHServer, tmp_path: Path) -> HostSpec:
    """An SSH host entry for the test sshd, with its own workdir under ``tmp_path``."""
    if sshd.proc is None or sshd.proc.poll() is not None:
        sshd.start()  # a test that stopped it and failed before restarting
    return sshd.host_spec(workdir=str(tmp_path / "remote"))


@pytest.fixture
def any_ssh_host(any_sshd: SSHServer, tmp_path: Path) -> HostSpec:
    """``ssh_host`` for each of ``any_sshd``'s servers: with SFTP, then without."""
    return any_sshd.host_spec(workdir=str(tmp_path / "remote"))
