"""A real single-node Slurm cluster for tests, started in a temporary directory.

``SlurmCluster`` runs a private ``munged`` (its own key and socket), ``slurmctld -D`` and
``slurmd -D`` for one node, from Debian's ``slurm-wlm`` and ``munge`` packages, without
systemd or cgroups: ``proctrack/linuxproc``, ``task/none``, ``CR_CPU`` so jobs share the
node, no slurmdbd (``sacct`` answers "accounting storage is disabled"), and
``jobcomp/filetxt`` as the lasting record of every job's end. ``MinJobAge=5`` makes the
controller forget a finished job within seconds, as a production cluster does after five
minutes, so the tests meet the case where ``squeue``/``scontrol`` know nothing any more.
Clients find the cluster through ``SLURM_CONF`` (:attr:`SlurmCluster.env`). If it cannot
start here, the tests that need it are skipped with the reason in one line.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.spec.models import HostSpec
from tests.leftovers import descendants
from tests.sshd import SSHServer, free_port, started

MUNGED = shutil.which("munged", path="/usr/sbin:/usr/bin:/sbin") or "/usr/sbin/munged"
SLURMCTLD = shutil.which("slurmctld", path="/usr/sbin:/usr/bin") or "/usr/sbin/slurmctld"
SLURMD = shutil.which("slurmd", path="/usr/sbin:/usr/bin") or "/usr/sbin/slurmd"


class SlurmUnavailable(RuntimeError):
    pass


class SlurmCluster:
    NODE = "n1"
    PARTITION = "debug"

    def __init__(self, root: Path, *, min_job_age: int = 5, cpus: int = 8,
                 extra: tuple[str, ...] = ()):
        missing = [p for p in (MUNGED, SLURMCTLD, SLURMD) if not os.path.exists(p)]
        if missing or not shutil.which("sbatch"):
            raise SlurmUnavailable(f"need {', '.join(missing) or 'sbatch'} "
                                   "(Debian: slurm-wlm and munge)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.munge_dir = root / "munge"
        self.munge_dir.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.munge_dir, 0o711)  # munged wants its socket's directory searchable
        self.socket = self.munge_dir / "socket"
        self.key = self.munge_dir / "munge.key"
        self.key.write_bytes(os.urandom(1024))
        os.chmod(self.key, 0o400)
        for name in ("state", "spool"):
            (root / name).mkdir(exist_ok=True)
        self.jobcomp = root / "jobcomp.txt"
        self.conf = root / "slurm.conf"
        user = getpass.getuser()
        ctld_port = free_port()
        node_port = free_port()
        lines = [
            "ClusterName=harnesstest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={node_port}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_min_interval=100000,batch_sched_delay=0",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "ReturnToService=2",
            f"MinJobAge={min_job_age}",
            "KillWait=5",
            # the node offers more CPUs than this machine has, so jobs share it freely
            "SlurmdParameters=config_overrides",
            f"NodeName={self.NODE} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} "
            f"CPUs={cpus} RealMemory=2000 State=UNKNOWN",
            f"PartitionName={self.PARTITION} Nodes={self.NODE} Default=YES MaxTime=INFINITE "
            "State=UP",
            *extra,
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        self.env = {"SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    # --- running -----------------------------------------------------------------------
    def start(self) -> None:
        self._spawn("munged", [MUNGED, "-F", "-f", f"--key-file={self.key}",
                               f"--socket={self.socket}",
                               f"--pid-file={self.munge_dir / 'munged.pid'}",
                               f"--seed-file={self.munge_dir / 'seed'}"])
        self._wait(lambda: self.socket.exists(), 10, "munged made no socket")
        self.start_controller()
        self._spawn("slurmd", [SLURMD, "-D", "-N", self.NODE, "-f", str(self.conf)])
        self._wait(self._idle, 30, "the node did not come up idle")

    def start_controller(self) -> None:
        self._spawn("slurmctld", [SLURMCTLD, "-D", "-f", str(self.conf)])
        self._wait(lambda: self.client("sinfo", "-h").returncode == 0, 20,
                   "slurmctld does not answer")

    def stop_controller(self) -> None:
        self._kill("slurmctld")

    def kill_node(self) -> None:
        """slurmd dies as a crashed node's would (its job steps are left to run alone)."""
        proc = self.procs.pop("slurmd")
        proc.kill()
        proc.wait(10)

    def stop(self) -> None:
        """Cancel what runs, then stop the daemons, their job steps and what those run: a
        step whose slurmd died (:meth:`kill_node`) is nobody's to cancel, and killing only
        its slurmstepd would leave the job's own processes running, orphaned."""
        if "slurmctld" in self.procs:
            self.client("scancel", f"--user={getpass.getuser()}")
        for name in ("slurmd", "slurmctld", "munged"):
            self._kill(name)
        steps = _processes_named("slurmstepd", str(self.conf))
        for pid in [*descendants(steps), *steps]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def jobs_left(self) -> list[str]:
        """The jobs still in the queue (``squeue``: pending, running, completing)."""
        out = self.client("squeue", "-h", "-o", "%i %j %T %M")
        return out.stdout.splitlines() if out.returncode == 0 else []

    def client(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                              env={**os.environ, **self.env})

    # --- helpers -----------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "ab")  # noqa: SIM115 - kept for the process
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True,
                                            env={**os.environ, **self.env})
        log.close()

    def _kill(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def _idle(self) -> bool:
        out = self.client("sinfo", "-h", "-N", "-o", "%T").stdout.split()
        return out == ["idle"]

    def _wait(self, ready: object, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {proc.returncode}: "
                                           f"{self._tail(name)}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.1)
        raise SlurmUnavailable(f"{what} within {seconds:g}s: {self._tail('slurmctld')}")

    def _tail(self, name: str) -> str:
        text = ""
        for path in (self.root / f"{name}.out", self.root / f"{name}.log"):
            if path.exists():
                text += path.read_text(errors="replace")
        return " ".join(text.split())[-400:] or "(no output)"


def _processes_named(name: str, marker: str) -> list[int]:
    """Pids of processes called ``name`` whose environment names ``marker`` (ours only)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() != name:
                continue
            if marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


#: Why the cluster could not start, for the banner at the end of the run (tests/conftest.py).
FAILURE: list[str] = []


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running single-node cluster for the session, or a skip that says why in one line
    (a failure instead with HARNESS_TEST_SLURM=require)."""
    if FAILURE:
        pytest.skip(FAILURE[0])
    cluster: SlurmCluster | None = None
    try:
        cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
        cluster.start()
    except (SlurmUnavailable, OSError, subprocess.SubprocessError) as exc:
        if cluster is not None:
            cluster.stop()
        FAILURE.append(f"SLURM TESTS SKIPPED: a real Slurm could not start: "
                       f"{' '.join(str(exc).split())[:300]}")
        if os.environ.get("HARNESS_TEST_SLURM") == "require":
            pytest.fail(FAILURE[0] + " (HARNESS_TEST_SLURM=require)")
        pytest.skip(FAILURE[0])
    try:
        yield cluster
    finally:
        # Every test ends its jobs: one still queued after 15 s fails the run.
        deadline = time.monotonic() + 15
        left = cluster.jobs_left() if "slurmctld" in cluster.procs else []
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = cluster.jobs_left()
        cluster.stop()
    if left:
        pytest.fail("the tests left Slurm jobs in the queue (cancelled now): "
                    + "; ".join(left), pytrace=False)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """The cluster, with ``SLURM_CONF`` set in this process and its children, as
    ``/etc/slurm/slurm.conf`` would be on a login node."""
    if "slurmctld" not in slurm_cluster.procs:
        slurm_cluster.start_controller()  # a test that stopped it and failed
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    return slurm_cluster


@pytest.fixture(scope="session")
def slurm_login(tmp_path_factory: pytest.TempPathFactory,
                slurm_cluster: SlurmCluster) -> Iterator[SSHServer]:
    """An sshd whose sessions find the cluster as a login node's do (SLURM_CONF set for
    every session, as /etc/slurm/slurm.conf is there)."""
    yield from started(tmp_path_factory.mktemp("login"), set_env=slurm_cluster.env)


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
def slurm_host(request: pytest.FixtureRequest, slurm: SlurmCluster,
               tmp_path: Path) -> HostSpec:
    """A ``scheduler: slurm`` host entry, submitting on this machine or through a login
    node over SSH; each test that takes it runs both ways."""
    fields = {"name": "cluster", "scheduler": "slurm", "workdir": str(tmp_path / "work"),
              "scheduler_poll": 0.5}
    if request.param == "local":
        return HostSpec.model_validate(fields)
    login: SSHServer = request.getfixturevalue("slurm_login")
    return login.host_spec(**fields)
