"""What Slurm says about a set of jobs, asked once for all of them, at a bounded interval.

:class:`SlurmWatcher` keeps the ids of the live jobs of one host entry and answers each
``status(job_id)`` from one shared snapshot, refreshed at most every ``interval`` seconds
(as submitit's watcher does), so N jobs polled every half second cost one ``squeue`` per
interval, not N per poll. Where the answer comes from, in order:

1. ``squeue --states=all --jobs=...``: jobs queued, running, and those finished less than
   ``MinJobAge`` ago (the controller's own records, the same that ``scontrol show job``
   reads), with the raw wait status (``exit_code``: 768 is exit 3, 15 is signal 15);
2. for ids the controller has forgotten: ``sacct`` when the cluster keeps accounting
   (slurmdbd), else the ``jobcomp/filetxt`` file (``JobCompLoc``), read where the login
   node can read it. A runner that comes back after ``MinJobAge`` relies on these;
3. nothing knows the id: the caller decides (the run directory may still hold the
   wrapper's exit code).

Commands run through any :class:`pipeline.hosts.executor.Executor` (the login node's transport).
Standard library only.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pipeline.errors import ExecutorError
from pipeline.hosts.executor import Executor

__all__ = ["FINAL_STATES", "SlurmJob", "SlurmQueryError", "SlurmWatcher", "parse_jobcomp",
           "parse_sacct", "parse_squeue"]

#: States after which a job never runs again (Slurm's own words).
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
    "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED",
})
_SQUEUE_FIELDS = "JobID:|,State:|,exit_code:|,TimeLimit:|,Reason:|"
_SACCT_FIELDS = "JobID,State,ExitCode,TimelimitRaw,Reason"


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, ...
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None  # Slurm's Reason (Resources, TimeLimit, NonZeroExitCode...)
    time_limit: str | None = None
    source: str = "squeue"  # squeue, sacct or jobcomp

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


class SlurmQueryError(ExecutorError):
    """Slurm did not answer (the controller down longer than the outage budget)."""


class SlurmWatcher:
    """One snapshot of all watched jobs, refreshed at most every ``interval`` seconds.

    A controller that does not answer (restarting, overloaded) leaves the last snapshot in
    place for up to ``outage_budget`` seconds before :class:`SlurmQueryError` is raised:
    jobs go on running without it, and Slurm's own clients retry the same way.
    """

    def __init__(self, login: Executor, interval: float = 5.0, *,
                 outage_budget: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.login = login
        self.interval = interval
        self.outage_budget = outage_budget
        self.clock = clock
        self._answered_at: float | None = None
        self._live: set[str] = set()
        self._known: dict[str, SlurmJob] = {}
        self._asked_at: float | None = None
        self._jobcomp: str | bool | None = False  # False: not looked up yet
        #: How many times Slurm was asked (one squeue, plus one sacct or jobcomp read for
        #: forgotten jobs); for tests and the curious.
        self.queries = 0

    def watch(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            if job_id not in self._known or not self._known[job_id].final:
                self._live.add(job_id)

    def status(self, job_id: str, *, fresh: bool = False) -> SlurmJob | None:
        """The job's latest record, or None when nothing knows it. ``fresh`` asks Slurm
        now (after a cancel, say) instead of answering from the snapshot."""
        known = self._known.get(job_id)
        if known is not None and known.final:
            return known
        self.watch([job_id])
        stale = self._asked_at is None or self.clock() - self._asked_at >= self.interval
        if fresh or stale or job_id not in self._known:
            self.refresh()
        return self._known.get(job_id)

    def refresh(self) -> None:
        """Ask about every live job: one squeue, then one look for those it forgot."""
        ids = sorted(self._live, key=_numeric)
        self._asked_at = now = self.clock()
        if not ids:
            return
        try:
            found = self._squeue(ids)
        except SlurmQueryError as exc:
            since = self._answered_at if self._answered_at is not None else now
            if now - since >= self.outage_budget or not self._known:
                raise
            self.login.note(f"Slurm does not answer ({exc.message}); keeping the last "
                            f"known states and asking again")
            return
        self._answered_at = now
        gone = [i for i in ids if i not in found]
        if gone:
            found.update(self._records(gone))
        for job_id, job in found.items():
            self._known[job_id] = job
            if job.final:
                self._live.discard(job_id)

    def find_by_name(self, name: str) -> str | None:
        """The id of a job named ``name`` (a run key), queued, running or recorded."""
        self.queries += 1
        r = self.login.run(["squeue", "--noheader", "--states=all", f"--name={name}",
                            "--format=%i"], warn=True, cwd="/")
        ids = r.stdout.split()
        if ids:
            return ids[-1]
        path = self._jobcomp_path()
        if path:
            r = self.login.run(["grep", "-E", f" Name={re.escape(name)} ", path],
                               warn=True, cwd="/")
            records = parse_jobcomp(r.stdout)
            if records:
                return list(records)[-1]
        return None

    # --- the questions -------------------------------------------------------------------
    def _squeue(self, ids: list[str]) -> dict[str, SlurmJob]:
        self.queries += 1
        r = self.login.run(["squeue", "--noheader", "--states=all", f"--jobs={','.join(ids)}",
                            f"--Format={_SQUEUE_FIELDS}"], warn=True, cwd="/")
        if r.exit_code != 0:
            # every id unknown: "slurm_load_jobs error: Invalid job id specified"
            if "Invalid job id" in r.stderr:
                return {}
            raise SlurmQueryError(f"squeue failed: {_said(r.stderr or r.stdout)}",
                                  where=self.login.host.name)
        return parse_squeue(r.stdout)

    def _records(self, ids: list[str]) -> dict[str, SlurmJob]:
        """What the cluster's lasting records say of jobs the controller forgot."""
        self.queries += 1
        r = self.login.run(["sacct", "--noheader", "--parsable2", "--allocations",
                            f"--jobs={','.join(ids)}", f"--format={_SACCT_FIELDS}"],
                           warn=True, cwd="/")
        if r.exit_code == 0:
            return parse_sacct(r.stdout)
        path = self._jobcomp_path()  # no slurmdbd: "accounting storage is disabled"
        if not path:
            return {}
        pattern = "^JobId=(" + "|".join(re.escape(i) for i in ids) + ") "
        r = self.login.run(["grep", "-E", pattern, path], warn=True, cwd="/")
        return {k: v for k, v in parse_jobcomp(r.stdout).items() if k in ids}

    def _jobcomp_path(self) -> str | None:
        """``JobCompLoc`` when the cluster writes ``jobcomp/filetxt``, asked once."""
        if self._jobcomp is False:
            r = self.login.run(["scontrol", "show", "config"], warn=True, cwd="/")
            conf = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", r.stdout, re.MULTILINE))
            self._jobcomp = conf.get("JobCompLoc") \
                if conf.get("JobCompType") == "jobcomp/filetxt" else None
        return self._jobcomp or None


# --- parsing (the formats as Slurm 22.05 prints them) -------------------------------------

def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """Lines of ``JobID|State|exit_code|TimeLimit|Reason|``; ``exit_code`` is the raw wait
    status (exit << 8 | signal)."""
    jobs = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or not parts[0].strip():
            continue
        job_id, state, status, limit, reason = (p.strip() for p in parts[:5])
        code = sig = None
        if status.isdigit():
            raw = int(status)
            code, sig = raw >> 8, raw & 0x7F
        jobs[job_id] = SlurmJob(job_id, state.split()[0] if state else "UNKNOWN", code, sig,
                                _reason(reason), limit or None, "squeue")
    return jobs


def parse_sacct(text: str) -> dict[str, SlurmJob]:
    """``--parsable2`` lines of ``JobID|State|ExitCode|TimelimitRaw|Reason``; State may read
    ``CANCELLED by 0``; ExitCode is ``code:signal``."""
    jobs = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or "." in parts[0]:
            continue  # job steps (123.batch) are not the job
        job_id, state, exit_code, limit, reason = parts[:5]
        code, sig = _code_signal(exit_code)
        limit_text = f"{limit} min" if limit.isdigit() else (limit or None)
        jobs[job_id] = SlurmJob(job_id, state.split()[0] if state else "UNKNOWN", code, sig,
                                _reason(reason), limit_text, "sacct")
    return jobs


def parse_jobcomp(text: str) -> dict[str, SlurmJob]:
    """``jobcomp/filetxt`` lines: ``JobId=3 ... JobState=FAILED ... TimeLimit=1 ...
    ExitCode=3:0``. Its ExitCode reads 0:0 for cancelled and timed-out jobs."""
    jobs = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" not in fields or "JobState" not in fields:
            continue
        code, sig = _code_signal(fields.get("ExitCode", ""))
        limit = fields.get("TimeLimit")
        jobs[fields["JobId"]] = SlurmJob(fields["JobId"], fields["JobState"], code, sig, None,
                                         f"{limit} min" if limit and limit.isdigit() else limit,
                                         "jobcomp")
    return jobs


def _code_signal(text: str) -> tuple[int | None, int | None]:
    code, _, sig = text.partition(":")
    if not code.strip().isdigit():
        return None, None
    return int(code), int(sig) if sig.strip().isdigit() else 0


def _reason(text: str) -> str | None:
    text = text.strip().strip("()")
    return None if text in ("", "None") else text


def _numeric(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0]
    return (int(head), job_id) if head.isdigit() else (0, job_id)


def _said(text: str) -> str:
    return " ".join(text.split())[:300] or "(no output)"
