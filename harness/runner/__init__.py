"""The runner: todos that run their own actions, and evidence that decides their status.

``harness run PIPELINE.yaml`` binds one todo to each stage (once; re-running reuses them)
and repeats: pick the next runnable todo (dependencies completed, not blocked, highest
priority, then position; chosen afresh each time, so a person's reprioritisation counts),
mark it in progress and record the run (one transaction, so two runners never take the
same todo), ship the code if the host needs it, start the stage as a detached job, stream
its log into the store, and wait. Exit 0 *and* the stage's checks and gate passing
complete the todo; anything else blocks it with the measured reason, after ``retries``.

Runs outlive the runner. A run left ``running`` or ``queued`` by a runner that died is
re-attached on the next start from the files on the host (the job is never launched
twice), or marked ``lost`` if its process vanished without an exit code.

Where each part lives:

- :mod:`.scheduler` — the loop over stages: scope, binding todos, picking the next one,
  retries, servers left running, the summary (:class:`Runner`);
- :mod:`.supervise` — one job from start to end: code shipping, starting or re-attaching,
  watching, timeouts, recording how it ended (:class:`Supervisor`);
- :mod:`.evidence` — what decides a finished job's status: checks, outputs, gates, and the
  verification row they leave;
- :mod:`.logs` — a job's log from the host into the store: whole characters, secrets masked;
- :mod:`.threads` — how many CPU threads a stage on this machine gets, among the other
  work and the other stages running here;
- :mod:`.ownership` — which runner owns a run, and the key of its job on the host;
- :mod:`.control` — what works outside a running loop: cancel, status, starting one stage
  in the background.
"""

from harness.runner.control import cancel_run, duration, stage_status, start_stage
from harness.runner.evidence import evaluate_gate, gate_reason
from harness.runner.scheduler import Outcome, Runner, RunReport

__all__ = ["Outcome", "RunReport", "Runner", "cancel_run", "duration", "evaluate_gate",
           "gate_reason", "stage_status", "start_stage"]
