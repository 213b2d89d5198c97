"""A stage's secret on a shared host: what another user of that host sees while it runs.

Each test runs one stage through the real runner on one kind of host: this machine, a real
sshd with and without SFTP, a real sshd reached through a ProxyJump host, a real
single-node Slurm. Meanwhile an unprivileged second user (``tests/other_user.py``) sweeps
every ``/proc/*/cmdline`` and ``environ`` it may read and ``ps -ef``, over and over. The
secret must appear in none of them, nor in any file under the run directory once the job
has started; the job must still get it (it writes the value's sha256), and the store and
the runner's output must show it masked. All of this runs on one machine, so the jump
host, the target and the Slurm daemons are all in the one process list the watcher reads.

A busy host is simulated where the secret used to travel: ``setsid`` (which the launching
shell runs) takes half a second first, so the launching shell, which waits for the job's
pid, stays in the process list long enough for any reader, however slow, to see it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from state.store import Store
from tests.other_user import OtherUser, Report, other_user  # noqa: F401 (fixture)
from tests.pipeline.hosts.test_ssh_config import forwards_to, known_hosts, logins, write_config
from tests.runner.test_runner import in_thread, make_runner, ssh_entry, write_spec
from tests.slurm import SlurmCluster, SlurmUnavailable
from tests.sshd import SSHServer, started

# the job's own command line carries this: the watcher must see it, or it saw nothing
MARKER = "1.41421"
RUN = ('printf %s "$HF_TOKEN" | sha256sum > seen.sha256; echo started; '
       f'sleep {MARKER}; echo "token $HF_TOKEN"')


@dataclass
class Seen:
    secret: str
    report: Report
    run_dir_files: list[Path]   # every file under the run directory, read after the start
    leaked_files: list[str]     # the ones (or any other watched file) holding the secret
    store: Store
    sid: int
    lines: list[str]
    db_files: list[Path]


def slow_setsid(tmp_path: Path) -> str:
    """A PATH whose ``setsid`` first sleeps half a second (see the module's docstring)."""
    shim = tmp_path / "busy-host"
    shim.mkdir(exist_ok=True)
    real = shutil.which("setsid")
    assert real, "setsid (util-linux) is needed"
    (shim / "setsid").write_text(f'#!/bin/sh\nsleep 0.5\nexec {real} "$@"\n')
    (shim / "setsid").chmod(0o755)
    return f"{shim}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run_watched(tmp_path: Path, store: Store, db_path: Path, other: OtherUser, entry: dict, *,
                watch_files: Callable[[], list[Path]] = list,
                during: Callable[[str], None] | None = None) -> Seen:
    """Run the one stage on ``entry`` while ``other`` watches; look at the run directory
    (and ``watch_files``) once the job has read its secret; ``during`` gets the secret then,
    to look elsewhere while the job still runs."""
    secret = f"hf_{secrets.token_hex(16)}"
    workdir = Path(entry["workdir"])
    spec = write_spec(tmp_path / "p.yaml", hosts={"box": entry}, stages=[
        {"name": "job", "host": "box", "env": {"HF_TOKEN": secret}, "run": RUN}])
    watcher = other.watch(secret, MARKER)
    runner = make_runner(store, spec)
    thread = in_thread(runner)
    try:
        seen = workdir / "seen.sha256"
        deadline = time.monotonic() + 60
        while not (seen.exists() and seen.stat().st_size):
            assert thread.is_alive(), f"runner stopped: {runner.error!r} {runner.lines}"
            assert time.monotonic() < deadline, runner.lines
            time.sleep(0.02)
        runs = workdir / ".harness" / "runs"
        files = [p for p in runs.rglob("*") if p.is_file()]
        leaked = [str(p) for p in [*files, *watch_files()]
                  if p.is_file() and secret.encode() in p.read_bytes()]
        if during is not None:
            during(secret)
    finally:
        thread.join(90)
        report = watcher.stop()
    assert not thread.is_alive() and runner.error is None, (runner.error, runner.lines)
    return Seen(secret, report, files, leaked, store, runner.sid, runner.lines,
                sorted(db_path.parent.glob(db_path.name + "*")))


def check(seen: Seen, workdir: Path) -> None:
    secret, report = seen.secret, seen.report
    assert report.hits == [], "the other user saw the secret:\n" + "\n".join(report.hits)
    # the watcher really looked, and could see the job
    assert report.saw_marker and report.passes >= 3 and report.ps_runs >= 1
    assert report.environs > 0 and report.cmdlines > report.passes
    assert any(p.name == "job.sh" for p in seen.run_dir_files), seen.run_dir_files
    assert seen.leaked_files == []
    # the job got the value
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert (workdir / "seen.sha256").read_text().split()[0] == digest
    # the store and the runner's output show it masked
    run = seen.store.runs(seen.sid)[0]
    assert run.state == "succeeded", seen.lines
    assert "HF_TOKEN=***" in (run.command or "") and secret not in (run.command or "")
    assert seen.store.log(run.id)[0] == f"started\ntoken {'*' * len(secret)}\n"
    assert not any(secret in line for line in seen.lines)
    for path in seen.db_files:
        assert secret.encode() not in path.read_bytes(), path


# --- this machine ------------------------------------------------------------------------

def test_local(tmp_path: Path, store: Store, db_path: Path, other_user: OtherUser) -> None:  # noqa: F811
    work = tmp_path / "work"
    entry = {"workdir": str(work), "env": {"PATH": slow_setsid(tmp_path)}}
    check(run_watched(tmp_path, store, db_path, other_user, entry), work)


# --- SSH ---------------------------------------------------------------------------------

@pytest.mark.ssh
def test_ssh(tmp_path: Path, store: Store, db_path: Path, other_user: OtherUser,  # noqa: F811
             any_ssh_host) -> None:
    entry = {**ssh_entry(any_ssh_host), "env": {"PATH": slow_setsid(tmp_path)}}
    check(run_watched(tmp_path, store, db_path, other_user, entry), Path(entry["workdir"]))


@pytest.mark.ssh
def test_ssh_through_a_proxyjump_host(tmp_path: Path, store: Store, db_path: Path,
                                      other_user: OtherUser, jump: SSHServer,  # noqa: F811
                                      target: SSHServer) -> None:
    config = write_config(tmp_path / "ssh_config", jump, target)
    work = tmp_path / "remote"
    entry = {"host": "gpu-box", "ssh_config": str(config),
             "known_hosts": str(known_hosts(tmp_path / "known_hosts", jump, target)),
             "workdir": str(work), "env": {"PATH": slow_setsid(tmp_path)}}
    before_forwards, before_logins = forwards_to(jump, target), logins(target)
    check(run_watched(tmp_path, store, db_path, other_user, entry), work)
    # every login on the target came through the jump host
    assert logins(target) > before_logins
    assert forwards_to(jump, target) - before_forwards == logins(target) - before_logins


# --- Slurm -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def open_cluster() -> Iterator[SlurmCluster]:
    """A cluster of its own in a directory every user may enter, as /etc/slurm and munge's
    socket are on a real login node: the other user's ``scontrol`` must reach it (the
    session's cluster lives under pytest's private temporary directory)."""
    root = Path(tempfile.mkdtemp(prefix="harness-slurm-"))
    root.chmod(0o755)
    cluster: SlurmCluster | None = None
    try:
        cluster = SlurmCluster(root)
        cluster.start()
    except (SlurmUnavailable, OSError, subprocess.SubprocessError) as exc:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        why = f"SLURM TESTS SKIPPED: a real Slurm could not start: " \
              f"{' '.join(str(exc).split())[:300]}"
        if os.environ.get("HARNESS_TEST_SLURM") == "require":
            pytest.fail(why + " (HARNESS_TEST_SLURM=require)")
        pytest.skip(why)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def open_login(tmp_path_factory: pytest.TempPathFactory,
               open_cluster: SlurmCluster) -> Iterator[SSHServer]:
    """A login node of ``open_cluster``, over SSH."""
    yield from started(tmp_path_factory.mktemp("login"), set_env=open_cluster.env)


@pytest.mark.slurm
@pytest.mark.parametrize("login", ["local", pytest.param("ssh", marks=pytest.mark.ssh)])
def test_slurm(tmp_path: Path, store: Store, db_path: Path, other_user: OtherUser,  # noqa: F811
               open_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, login: str,
               request: pytest.FixtureRequest) -> None:
    """On top of the sweep: what the other user's Slurm commands say about the running job,
    and every file of the controller and the node (its state, spool and logs, read as root:
    sbatch's environment is kept there with the job), hold no trace of the secret. The
    login node is this machine or an sshd."""
    for key, value in open_cluster.env.items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    entry = {"scheduler": "slurm", "workdir": str(work), "scheduler_poll": 0.5}
    if login == "ssh":
        server: SSHServer = request.getfixturevalue("open_login")
        entry.update(ssh_entry(server.host_spec(workdir=str(work))))
    said: list[str] = []

    def ask_slurm(secret: str) -> None:
        job_id = next((work / ".harness" / "runs").glob("*/job_id")).read_text().strip()
        for argv in (["scontrol", "show", "job", "-d", job_id],
                     ["scontrol", "show", "job", "-dd", job_id],
                     ["scontrol", "write", "batch_script", job_id, "-"],
                     ["sacct", "-j", job_id, "--format=ALL"],
                     ["squeue", "-j", job_id, "-o", "%all"]):
            said.append(other_user.run(argv, env=open_cluster.env))
        assert not [out for out in said if secret in out], said

    def daemon_files() -> list[Path]:
        return [p for p in open_cluster.root.rglob("*") if p.is_file()]

    seen = run_watched(tmp_path, store, db_path, other_user, entry,
                       watch_files=daemon_files, during=ask_slurm)
    check(seen, work)
    shown = "\n".join(said)
    # the other user did reach the controller and see the job, just not its secret
    assert f"Command={work}/.harness/runs/" in shown and "JobState=RUNNING" in shown, shown
    assert not list((work / ".harness" / "runs").glob("*/env*"))


@pytest.mark.slurm
def test_a_queued_jobs_environment_file_is_private_and_goes_with_the_job(
        tmp_path: Path, slurm: SlurmCluster) -> None:
    """While a batch job waits, its environment is a 0600 file; a job cancelled before it
    ever ran never reads it, so the harness removes it when it sees the job end."""
    from pipeline.hosts.slurm import SlurmExecutor
    from pipeline.spec.models import HostSpec

    secret = f"hf_{secrets.token_hex(16)}"
    host = HostSpec.model_validate({"name": "cluster", "scheduler": "slurm",
                                    "workdir": str(tmp_path / "work"), "scheduler_poll": 0.5,
                                    "sbatch": ["--begin=now+3600"]})
    with SlurmExecutor(host) as ex:
        handle = ex.start_detached("queued", ["sh", "-c", "echo never"],
                                   env={"HF_TOKEN": secret})
        env_file = Path(handle.run_dir) / "env"
        assert ex.poll(handle).state == "running"  # pending: it waits for --begin
        assert env_file.stat().st_mode & 0o777 == 0o600
        assert secret.encode() in env_file.read_bytes()
        assert not [p for p in Path(handle.run_dir).iterdir()
                    if p != env_file and secret.encode() in p.read_bytes()]
        ex.cancel(handle)
        deadline = time.monotonic() + 30
        while not ex.poll(handle).finished:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert ex.poll(handle).state == "cancelled"
        assert not env_file.exists()
