"""The executor for a Slurm cluster: each stage a batch job, submitted with ``sbatch``.

A host entry with ``scheduler: slurm`` is reached like any other (this machine, or SSH to a
login node through ``host:``, ssh_config and all): that transport runs the Slurm commands
and reads the files. The run directory, on a filesystem the login and compute nodes share,
is the one detached jobs use (:mod:`pipeline.hosts.jobscripts`)::

    <workdir>/.harness/runs/<run_id>/
        started       created exclusively by the one submission that wins
        cmd, job.sh   as for detached jobs: the job runs the same wrapper
        env           the job's environment, mode 0600, from submission until job.sh has
                      read and removed it as the job starts (so it is never in sbatch's
                      environment, which slurmctld stores with the job)
        batch.sh      the batch script: runs job.sh, exits with the command's exit code
        job_id        Slurm's job id, written by the submitting shell as sbatch returns
        submit_error  what sbatch said, when it refused the job
        log           stdout and stderr (sbatch --output), Slurm's own notices included
        exit_code     the wrapper's record of the command's exit code

The job id is on the host before the submitting shell prints anything, and on the run in
the store before the runner does anything else with the job; the job is also named after
the run (``--job-name``), so even a submission cut short between ``sbatch`` and
``job_id`` is found again by name. A restarted runner re-attaches by id and never submits
twice. States come from one :class:`pipeline.hosts.slurm_watch.SlurmWatcher` per host entry;
``cancel`` is ``scancel``. A job Slurm killed or lost ends with Slurm's reason: a time
limit or out of memory is ``failed`` (the todo blocks), a failed node or preemption is
``lost``.

The resources (``partition``, ``account``, ``nodes``, ``gpus``, ``cpus``, ``mem``,
``time``, ``sbatch``) apply to every job of the host entry; entries may share a cluster
with different resources. Standard library only.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pipeline.errors import JobError
from pipeline.hosts import jobscripts
from pipeline.hosts.executor import Executor, JobHandle, JobState, JobStatus, executor_for
from pipeline.hosts.slurm_watch import SlurmJob, SlurmWatcher
from pipeline.spec.models import HostSpec

__all__ = ["SlurmExecutor", "job_status", "sbatch_flags"]

T = TypeVar("T")
q = shlex.quote
_LOST = {"NODE_FAIL": "its node failed", "BOOT_FAIL": "its node failed to boot",
         "PREEMPTED": "it was preempted", "REVOKED": "it was revoked by a sibling cluster"}
_KILLED = {"TIMEOUT": "at its time limit", "OUT_OF_MEMORY": "out of memory",
           "DEADLINE": "at its deadline"}

_BATCH = """#!/bin/sh
# Slurm batch script written by the harness (pipeline/hosts/slurm.py). It runs the detached-job
# wrapper and exits with the command's exit code, so Slurm records it. Signals (scancel,
# the time limit) reach the command; this shell waits for the wrapper to record the end.
trap : TERM INT HUP
sh ./job.sh
code=$(cat exit_code 2>/dev/null)
exit "${code:-1}"
"""


def sbatch_flags(host: HostSpec, job_name: str, run_dir: str) -> list[str]:
    """sbatch's argv (without the script) for one job of ``host``."""
    flags = ["--parsable", f"--job-name={job_name}", f"--chdir={run_dir}",
             f"--output={run_dir}/log", "--open-mode=append"]
    if host.partition:
        flags.append(f"--partition={host.partition}")
    if host.account:
        flags.append(f"--account={host.account}")
    if host.nodes:
        flags.append(f"--nodes={host.nodes}")
    if host.gpus not in (None, 0, "0"):
        flags.append(f"--gres=gpu:{host.gpus}")
    if host.cpus:
        flags.append(f"--cpus-per-task={host.cpus}")
    if host.mem is not None:
        flags.append(f"--mem={host.mem}")
    if host.time is not None:
        flags.append(f"--time={_minutes(host.time)}")
    return flags + list(host.sbatch)


def job_status(job: SlurmJob | None, job_id: str, wrapper_code: int | None) -> JobStatus:
    """Slurm's record of a job as a :class:`JobStatus`. ``wrapper_code`` is the exit code
    the wrapper left in the run directory, if any: it stands in when Slurm forgot the job,
    and corrects the jobcomp file's exit code (which reads 0:0 for killed jobs)."""
    if job is None:
        if wrapper_code is not None:
            return JobStatus("succeeded" if wrapper_code == 0 else "failed", wrapper_code)
        return JobStatus("lost", reason=f"job lost: Slurm has no record of job {job_id} "
                                        "(not in squeue, sacct or the jobcomp file)")
    code = job.exit_code
    if job.signal:
        code = 128 + job.signal
    if job.source == "jobcomp" and wrapper_code is not None:
        code = wrapper_code
    why = f"[{job.state}" + (f", {job.reason}" if job.reason else "") + "]"
    if not job.final:
        waiting = f"pending ({job.reason})" if job.state == "PENDING" and job.reason else None
        return JobStatus("running", None, reason=waiting)
    state: JobState
    reason = None
    if job.state == "COMPLETED":
        state, code = "succeeded", 0
    elif job.state == "CANCELLED":
        state, reason = "cancelled", f"Slurm cancelled job {job_id} {why}"
    elif job.state in _LOST:
        state = "lost"
        reason = f"job lost: Slurm says {_LOST[job.state]} (job {job_id}) {why}"
    elif job.state in _KILLED:
        state = "failed"
        limit = f" ({job.time_limit})" if job.state == "TIMEOUT" and job.time_limit else ""
        reason = f"Slurm killed job {job_id} {_KILLED[job.state]}{limit} {why}"
    else:  # FAILED, SPECIAL_EXIT
        state = "failed"
        if job.reason and job.reason != "NonZeroExitCode":
            reason = f"Slurm: job {job_id} failed {why}"
        if code == 0:  # failed without a code of its own: never report it as success
            code = 1
    return JobStatus(state, code, reason=reason, signal=job.signal or None)


class SlurmExecutor(Executor):
    """Stages as Slurm batch jobs; commands and files through the login node's transport."""

    def __init__(self, host: HostSpec, *, hosts: Mapping[str, HostSpec] | None = None,
                 notify: Callable[[str], None] | None = None, **kwargs: Any):
        super().__init__(host, notify=notify)
        #: The login node: this machine or an SSH host, whatever ``host:`` says.
        self.login = executor_for(host, hosts, notify=notify, transport=True, **kwargs)
        self.watcher = SlurmWatcher(self.login, interval=host.scheduler_poll)
        self._ended: set[str] = set()   # run dirs whose finished job's env file is gone

    # --- the transport is the login node's ------------------------------------------------
    def _shell(self, script: str, timeout: float | None) -> tuple[int, str, str]:
        return self.login._shell(script, timeout)

    def _shell_input(self, script: str, data: bytes,
                     timeout: float | None) -> tuple[int, str, str]:
        return self.login._shell_input(script, data, timeout)

    def _shell_env(self, script: str, env: Mapping[str, str],
                   timeout: float | None) -> tuple[int, str, str]:
        return self.login._shell_env(script, env, timeout)

    def _read(self, path: str, offset: int, limit: int) -> bytes:
        return self.login._read(path, offset, limit)

    def put(self, local: str | Path, remote: str) -> str:
        return self.login.put(local, remote)

    def get(self, remote: str, local: str | Path) -> Path:
        return self.login.get(remote, local)

    def home(self) -> str:
        return self.login.home()

    @property
    def workdir(self) -> str:
        return self.login.workdir

    def close(self) -> None:
        self.login.close()

    def with_reconnect(self, fn: Callable[[], T]) -> T:
        return self.login.with_reconnect(fn)

    # --- jobs ---------------------------------------------------------------------------
    def start_detached(self, run_id: str, argv: Sequence[str], *,
                       env: Mapping[str, str] | None = None,
                       cwd: str | None = None) -> JobHandle:
        """Submit ``argv`` as a batch job, once per ``run_id``: a run directory that already
        has a submission is re-attached to, by its job id (or its name)."""
        job = self._job_inputs(run_id, argv, env, cwd)
        run_dir, description = job.run_dir, job.description
        # The job's environment goes on the submitting shell's stdin into a 0600 file that
        # job.sh reads and removes: in the shell's environment, sbatch's --export=ALL would
        # hand it to slurmctld, which keeps it in its state files for the job's lifetime.
        sent = jobscripts.stdin_env(job.env)
        script = _submit_script(run_dir, job.wrapper, description,
                                sbatch_flags(self.host, run_id, run_dir), sent)
        code, out, err = self.with_reconnect(lambda: self._shell_input(script, sent.data, 120))
        words = out.split()
        if code != 0 or not words or words[0] not in ("submitted", "attached", "refused"):
            raise JobError(f"could not submit job {run_id!r}: exit {code}: "
                           f"{' '.join((err or out).split())[:300]}", where=self.host.name)
        job_id = words[1] if len(words) > 1 and words[1] != "-" else None
        if words[0] == "refused":
            # sbatch may fail after the controller took the job (a timed-out reply): a job
            # of this name is that job, not one to submit again.
            job_id = self._job_by_name(run_id, run_dir, lambda: (
                f"sbatch refused job {run_id!r}: {self._sbatch_said(run_dir)}"))
        if job_id is None:
            job_id = self._find_lost_submission(run_id, run_dir)
        if words[0] == "attached":
            description = self._read_text(f"{run_dir}/cmd").strip() or description
        self.watcher.watch([job_id])
        return JobHandle(run_id=run_id, host=self.host.name, run_dir=run_dir, pid=None,
                         command=description, attached=words[0] == "attached", job_id=job_id)

    def attach(self, run_id: str) -> JobHandle | None:
        run_dir = self.run_dir(run_id)
        script = (f"cd {q(run_dir)} 2>/dev/null && [ -f started ] || {{ echo missing; exit 0; }}\n"
                  'if [ -s job_id ]; then echo "job $(cat job_id)"; '
                  "elif [ -f submit_error ]; then echo refused; else echo unknown; fi\n")
        code, out, err = self.with_reconnect(lambda: self._shell(script, 60))
        words = out.split()
        if code != 0 or not words:
            raise JobError(f"could not look in {run_dir}: {' '.join(err.split())[:300]}",
                           where=self.host.name)
        if words[0] == "missing":
            return None
        if words[0] == "refused":
            job_id = self._job_by_name(run_id, run_dir, lambda: (
                f"job {run_id!r} was never submitted: sbatch said "
                f"{self._sbatch_said(run_dir)}"))
        else:
            job_id = words[1] if words[0] == "job" else \
                self._find_lost_submission(run_id, run_dir)
        self.watcher.watch([job_id])
        return JobHandle(run_id=run_id, host=self.host.name, run_dir=run_dir, pid=None,
                         command=self._read_text(f"{run_dir}/cmd").strip(), attached=True,
                         job_id=job_id)

    def poll(self, handle: JobHandle, *, fresh: bool = False) -> JobStatus:
        job_id = self._job_id(handle)
        job = self.with_reconnect(lambda: self.watcher.status(job_id, fresh=fresh))
        wrapper = None
        if job is None or job.source == "jobcomp":
            wrapper = _int(self._read_text(f"{handle.run_dir}/exit_code").strip())
        status = job_status(job, job_id, wrapper)
        if status.reason and not status.finished:  # why it waits, once per reason
            self.note(f"slurm job {job_id} is {status.reason}")
        if status.finished and handle.run_dir not in self._ended:
            # a job that ended before it ran (cancelled while pending, a failed node) never
            # read its environment file: the secrets in it must not outlive the job
            self._drop_env_file(handle.run_dir)
            self._ended.add(handle.run_dir)
        return status

    def _drop_env_file(self, run_dir: str) -> None:
        self.with_reconnect(lambda: self.run(["rm", "-f", jobscripts.ENV_FILE], cwd=run_dir,
                                             warn=True))

    def cancel(self, handle: JobHandle, *, grace: float = 10.0) -> JobStatus:
        """``scancel`` the job and return its status at once. Slurm itself sends TERM to
        every process of the job and KILL after the cluster's ``KillWait``, so ``grace``
        is Slurm's to apply; polling shows ``cancelled`` once it has."""
        job_id = self._job_id(handle)
        r = self.with_reconnect(lambda: self.run(["scancel", job_id], warn=True, cwd="/"))
        status = self.poll(handle, fresh=True)
        if r.exit_code != 0 and not status.finished:
            raise JobError(f"scancel {job_id} failed: {' '.join(r.stderr.split())[:300]}",
                           where=self.host.name)
        return status

    # --- helpers ------------------------------------------------------------------------
    def _job_id(self, handle: JobHandle) -> str:
        if handle.job_id:
            return handle.job_id
        found = self.attach(handle.run_id)
        if found is None or not found.job_id:
            raise JobError(f"no Slurm job for {handle.run_id!r} in {handle.run_dir}",
                           where=self.host.name)
        return found.job_id

    def _find_lost_submission(self, run_id: str, run_dir: str) -> str:
        """A submission whose shell died between sbatch and writing ``job_id``: find the
        job by its name (the run key) and write the id down; never submit again."""
        return self._job_by_name(run_id, run_dir, lambda: (
            f"job {run_id!r} was being submitted, but Slurm knows no job of that name; "
            f"look in {run_dir} (remove `started` to submit anew)"))

    def _job_by_name(self, run_id: str, run_dir: str, missing: Callable[[], str]) -> str:
        """The job named after the run, its id written down; none is the error ``missing``
        says."""
        job_id = self.with_reconnect(lambda: self.watcher.find_by_name(run_id))
        if job_id is None:
            raise JobError(missing(), where=self.host.name)
        self._write_job_id(run_dir, job_id)
        return job_id

    def _sbatch_said(self, run_dir: str) -> str:
        return " ".join(self._read_text(f"{run_dir}/submit_error").split())[:300]

    def _write_job_id(self, run_dir: str, job_id: str) -> None:
        self.run(["sh", "-c", 'printf "%s\\n" "$1" > job_id.tmp && mv -f job_id.tmp job_id',
                  "sh", job_id], cwd=run_dir)


def _submit_script(run_dir: str, wrapper: str, description: str, flags: list[str],
                   env: jobscripts.StdinEnv, wait_s: float = 10.0) -> str:
    """Submit unless the run dir has a submission; print ``submitted|attached ID`` (``-``
    when another submitter has not written the id yet), or ``refused``. The job's
    environment arrives on its standard input as ``env`` says."""
    tries = max(1, int(wait_s / 0.05))
    return (
        f"mkdir -p {q(run_dir)} && cd {q(run_dir)} || exit 1\n"
        # a dropped SSH connection hangs up this shell: the submission still completes
        "trap '' HUP\n"
        "if ( set -C; : > started ) 2>/dev/null; then\n"
        f"  printf '%s\\n' {q(description)} > cmd\n"
        f"  printf '%s' {q(wrapper)} > job.sh\n"
        f"  printf '%s' {q(_BATCH)} > batch.sh\n"
        f"  {jobscripts.write_env_file(env)}"
        f"  out=$(sbatch {shlex.join(flags)} batch.sh 2>sbatch.err); rc=$?\n"
        '  if [ $rc -eq 0 ] && [ -n "$out" ]; then\n'
        '    printf "%s\\n" "${out%%;*}" > job_id.tmp && mv -f job_id.tmp job_id\n'
        '    echo "submitted $(cat job_id)"\n'
        "  else\n"
        '    { echo "sbatch exited $rc: $out"; cat sbatch.err; } > submit_error\n'
        f"    rm -f {jobscripts.ENV_FILE}\n"
        "    echo refused\n"
        "  fi\n"
        "  exit 0\n"
        "fi\n"
        "i=0\n"
        f"while [ ! -s job_id ] && [ ! -f submit_error ] && [ $i -lt {tries} ]; do\n"
        "  sleep 0.05; i=$((i+1))\n"
        "done\n"
        "if [ -s job_id ]; then echo \"attached $(cat job_id)\"\n"
        "elif [ -f submit_error ]; then echo refused\n"
        "else echo 'attached -'\n"
        "fi\n"
    )


def _minutes(seconds: float) -> str:
    """A duration as sbatch's ``--time`` (whole minutes, rounded up: Slurm counts minutes)."""
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00" if days else f"{hours:02d}:{mins:02d}:00"


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
