"""The contract between a built-in action and whoever runs it.

A built-in action is a module run as ``python -m pipeline.<group>.<step> [--flag value]...``,
on the local machine or on a GPU host with nothing but torch/transformers/safetensors/pyyaml.
The runner turns a stage's ``with:`` mapping into flags with :func:`params_to_argv` and adds
``--result PATH``. The action writes one JSON document there (:class:`StageResult`) saying
what it measured and which of its own checks passed; the runner reads it back to decide
whether the todo is completed or blocked. Log lines go to stdout, which the detached job
captures, so progress needs no extra channel.

This module imports only the standard library: it is shipped to bare hosts.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeline.errors import ActionError
from pipeline.served_gates import SERVED_ACTION, SERVED_KEYS, not_a_gate

__all__ = ["ACTION_ALIASES", "ACTION_METRICS", "REQUIRE_VLLM", "TABLE_CHECKS", "ActionError",
           "Check", "StageResult", "canonical_action", "check_status", "declares_metric",
           "gate_metric", "gate_problem", "params_to_argv", "run_action", "table_note",
           "undeclared_metrics"]

RESULT_SCHEMA = 1

# Built-in action name -> module run with ``python -m``. Kept as data so the runner can
# validate a spec without importing torch.
BUILTIN_ACTIONS: dict[str, str] = {
    "eagle3.build_verifier": "pipeline.eagle3.build_verifier",
    "eagle3.generate": "pipeline.eagle3.generate",
    "eagle3.clean": "pipeline.eagle3.clean",
    "eagle3.tokenize": "pipeline.eagle3.tokenize",
    "eagle3.hidden_states": "pipeline.eagle3.hidden_states",
    "eagle3.vocab": "pipeline.eagle3.vocab",
    "eagle3.train": "pipeline.eagle3.train",
    "eagle3.export": "pipeline.eagle3.export",
    "eagle3.verify": "pipeline.eagle3.verify",
    "eagle3.preflight": "pipeline.eagle3.preflight",
    "eagle3.serve": "pipeline.eagle3.serve",
    "eagle3.benchmark": "pipeline.eagle3.benchmark",
}

# Names an action had before: specs that use them keep working. The spec loader reads each
# as the name it points to (:func:`canonical_action`); "eagle3.verifier" built the tiny
# verifier and read too much like "eagle3.verify".
ACTION_ALIASES: dict[str, str] = {"eagle3.verifier": "eagle3.build_verifier"}


def canonical_action(name: str) -> str:
    """``name``, or the action it is an old name of."""
    return ACTION_ALIASES.get(name, name)


# What each action measures that a gate can hold: numbers, or lists of numbers (one per
# draft position). ``*`` stands for a number or a name: ``speedup_c*`` covers speedup_c1
# and speedup_c16. `harness check` (and `harness run`) refuse a gate on anything else, so a
# misspelt metric fails in a second instead of after every stage before it. This is the one
# place to declare them; with HARNESS_CHECK_METRICS=1 (set by the test suite) an action
# that reports a number not declared here fails, so the table cannot drift from the code.
ACTION_METRICS: dict[str, tuple[str, ...]] = {
    "eagle3.build_verifier": ("final_loss", "first_loss", "params", "vocab_size", "layers",
                              "hidden_size", "heads", "kv_heads", "intermediate_size",
                              "reasoning_rate", "train_seconds", "train_tokens",
                              "train_positions", "train_tokens_per_s", "train_tflops", "mfu",
                              "peak_bf16_tflops"),
    "eagle3.generate": ("prompts", "samples", "new_samples", "failed", "reasoning_capture",
                        "truncated", "restored_open_tag"),
    "eagle3.clean": ("total", "kept", "rejected", "reject_rate", "rejected_*"),
    "eagle3.tokenize": ("samples", "tokens", "masked_tokens", "masked_share", "truncated",
                        "dropped_no_assistant_tokens", "distinct_masked_tokens",
                        "mean_length", "max_length", "assistant_turns_not_rendered"),
    "eagle3.hidden_states": ("samples", "tokens", "shards", "resumed_shards", "aux_layers",
                             "tokens_per_s", "extract_seconds", "offline_bytes", "written_gb",
                             "write_gb_s", "write_stall_seconds", "write_stall_share",
                             "produced_gb_s",
                             # --backend vllm
                             "engine_seconds", "engine_start_seconds", "engine_layer_ids",
                             "stored_weight_bytes", "tensor_parallel_size"),
    "eagle3.vocab": ("draft_vocab", "requested", "target_vocab", "seen_tokens",
                     "filled_unseen", "coverage", "masked_tokens"),
    "eagle3.train": ("heldout_acc_pos*", "est_acceptance_length", "epochs_done",
                     "train_seconds", "train_tokens_per_s", "world_size", "first_step_loss",
                     "loss_curve", "offline_bytes_avoided", "epoch_seconds",
                     "mask_token_id"),
    "eagle3.export": ("tensors", "draft_vocab_size", "aux_layer_ids",
                      "round_trip_max_abs_diff", "bytes", "mask_token_id"),
    "eagle3.verify": (
        # structural
        "weight_bytes", "tensors", "structural_seconds", "aux_layer_ids",
        "vllm_aux_layer_ids", "lm_head_rows_match", "lm_head_rows_elsewhere", "verify_seconds",
        "mask_token_id",
        # functional: acceptance of the checkpoint, and of the drafters it is compared with
        "k", "prompts", "max_new_tokens", "functional_seconds", "tau", "acceptance_length",
        "acceptance_rate", "acceptance_per_position", "position_acceptance",
        "conditional_acceptance", "drafts", "draft_tokens", "accepted_tokens",
        "generated_tokens", "teacher_forced_acceptance", "teacher_forced_tau",
        "projected_speedup", "reference_speedup_bound", "plain_step_ms", "verify_step_ms",
        "draft_step_ms", "draft_ms_per_round", "plain_ms_per_token", "spec_ms_per_token",
        "untrained_*", "previous_*", "vllm_checks_from_table"),
    "eagle3.preflight": ("vllm_checks_from_table", "weights_per_gpu_gib", "need_per_gpu_gib", "budget_per_gpu_gib",
                         "target_bytes", "target_gib", "draft_bytes", "draft_gib"),
    "eagle3.serve": ("startup_s", "num_speculative_tokens", "tensor_parallel_size"),
    "eagle3.benchmark": ("throughput_c*", "tpot_p50_ms_c*", "ttft_p50_ms_c*",
                         "baseline_throughput_c*", "baseline_tpot_p50_ms_c*",
                         "baseline_ttft_p50_ms_c*", "speedup_c*", "speedup_min", "speedup",
                         "acceptance_rate", "acceptance_length", "acceptance_per_position",
                         "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                         "requests_failed", "requests_completed",
                         # per concurrency: served τ from that level's /metrics deltas, and
                         # the share of answers equal to plain greedy decoding's
                         "acceptance_length_c*", "acceptance_rate_c*",
                         "acceptance_per_position_c*", "num_drafts_c*", "outputs_equal_c*",
                         "outputs_equal", "outputs_compared",
                         # where answers part from plain's, judged by plain's logprobs
                         "outputs_ties",
                         # over paired trials: the speedup's interval (speedup_c* is its
                         # estimate), its trials, and the latencies' tails
                         "speedup_low_c*", "speedup_high_c*", "speedup_ci_c*",
                         "speedup_trials_c*", "speedup_median_c*",
                         "ttft_p99_ms_c*", "itl_p50_ms_c*", "itl_p99_ms_c*",
                         "baseline_ttft_p99_ms_c*", "baseline_itl_p50_ms_c*",
                         "baseline_itl_p99_ms_c*", "trials", "min_seconds",
                         "confidence", "ci_width", "level_budget", "extra_budget",
                         "max_trials",
                         "speedups_c*", "unsettled_levels", "best_fixed_k", "roofline",
                         "baseline_spread_c*",
                         # the CPUs each server and the client were pinned to
                         "cpu_isolation",
                         "mean_output_tokens",
                         "output_len"),
}


# ``require_vllm: true`` in a gate: the vLLM checks must have been made by vLLM itself,
# not answered from the table of known rules. It holds this metric (the count of checks
# answered from the table) at 0, on the actions that report it.
REQUIRE_VLLM = "require_vllm"
TABLE_CHECKS = "vllm_checks_from_table"


def gate_metric(key: str) -> tuple[str, str]:
    """A gate key and what it asks: ``min_x`` is metric ``x >=``, ``max_x`` is ``x <=``,
    a bare name is ``>=``."""
    if key.startswith("min_"):
        return key[4:], ">="
    if key.startswith("max_"):
        return key[4:], "<="
    return key, ">="


def declares_metric(action: str, metric: str) -> bool:
    """Whether ``action`` is declared to report ``metric`` (see :data:`ACTION_METRICS`)."""
    return any(_matches(pattern, metric) for pattern in ACTION_METRICS.get(action, ()))


def _matches(pattern: str, name: str) -> bool:
    head, star, tail = pattern.partition("*")
    if not star:
        return name == pattern
    return len(name) > len(head) + len(tail) and name.startswith(head) and \
        name.endswith(tail)


def gate_problem(action: str, key: str) -> str | None:
    """Why gate ``key`` cannot hold on ``action``'s metrics (None: it can), with the
    nearest declared name."""
    if key == REQUIRE_VLLM:
        return None if declares_metric(action, TABLE_CHECKS) or action not in ACTION_METRICS \
            else (f"{key} holds the vLLM compatibility checks, which {action} does not make: "
                  "put it on an eagle3.verify or eagle3.preflight stage")
    if key in SERVED_KEYS:
        return None if action == SERVED_ACTION else (
            f"{key} holds a served benchmark's figures: put it on the {SERVED_ACTION} "
            "stage that measures the engine")
    metric, _op = gate_metric(key)
    refused = not_a_gate(metric)
    if refused:
        return refused
    if action not in ACTION_METRICS:
        return None
    if declares_metric(action, metric):
        return None
    declared = ACTION_METRICS[action]
    # numbered patterns are offered with a number: speedup_c* -> speedup_c1
    known = [p.replace("*", "1") if p.endswith(("_c*", "pos*")) else p for p in declared]
    # every key this action's gate takes, by the name it holds: the metrics with the
    # prefix written, and the keys of their own form (served_speedup is min_served_speedup,
    # so min_servd_speedup is one letter from it, not from min_speedup)
    prefix = key[: len(key) - len(metric)]
    keys = {name: prefix + name for name in known}
    if action == SERVED_ACTION:
        keys.update({gate_metric(k)[0]: k for k in SERVED_KEYS})
    close = difflib.get_close_matches(metric, list(keys), n=1, cutoff=0.6)
    rest = f" (did you mean {keys[close[0]]!r}?)" if close else \
        f"; a gate takes min_METRIC or max_METRIC of: {', '.join(declared)}"
    return f"{action} reports no metric {metric!r}{rest}"


def undeclared_metrics(action: str, metrics: Mapping[str, Any]) -> list[str]:
    """The numbers (and lists of numbers) in ``metrics`` that ``action`` does not declare."""
    def gateable(v: Any) -> bool:
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        return number or (isinstance(v, list) and bool(v) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))
    return sorted(k for k, v in metrics.items()
                  if gateable(v) and not declares_metric(action, k))


@dataclass
class Check:
    """One named check: did it pass, what was measured, what was expected, what to do.

    ``from_table``: the answer came from a table of known behaviour, not from the real
    thing (the vLLM checks where no vLLM could be asked). Such a check that passes is
    shown as ``TABLE``, never ``PASS`` (:func:`check_status`): it was not made."""

    name: str
    passed: bool
    value: Any = None
    expected: Any = None
    message: str = ""
    from_table: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


PASS, FAIL, TABLE = "PASS", "FAIL", "TABLE"


def check_status(check: Check | Mapping[str, Any]) -> str:
    """``PASS``, ``FAIL``, or ``TABLE`` (passed, but answered from a table, not checked).

    Takes a :class:`Check` or a stored row's dict. Rows stored before ``from_table``
    existed said so only in their message (``FALLBACK ...``), which is read instead."""
    row = check.to_json() if isinstance(check, Check) else check
    if not row.get("passed"):
        return FAIL
    table = row.get("from_table")
    if table is None:
        table = str(row.get("message") or "").startswith("FALLBACK")
    return TABLE if table else PASS


def table_note(checks: Iterable[Check]) -> str:
    """``5 vLLM checks from the table: install vLLM to check them for real`` ('' if none),
    for a summary: the count of checks that passed only by the table."""
    n = sum(1 for c in checks if check_status(c) == TABLE)
    if not n:
        return ""
    return (f"{n} vLLM check{'s' if n != 1 else ''} from the table: install vLLM to check "
            f"{'them' if n != 1 else 'it'} for real")


@dataclass
class StageResult:
    """What an action reports back. ``ok`` is False when any of its own checks failed."""

    action: str
    metrics: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    summary: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)

    def check(self, name: str, passed: bool, value: Any = None, expected: Any = None,
              message: str = "") -> Check:
        c = Check(name=name, passed=bool(passed), value=value, expected=expected,
                  message=message)
        self.checks.append(c)
        return c

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RESULT_SCHEMA,
            "action": self.action,
            "ok": self.ok,
            "summary": self.summary,
            "error": self.error,
            "metrics": self.metrics,
            "checks": [c.to_json() for c in self.checks],
            "artifacts": list(self.artifacts),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageResult:
        return cls(
            action=str(data.get("action", "")),
            metrics=dict(data.get("metrics") or {}),
            checks=[Check(**{k: v for k, v in c.items() if k in _CHECK_FIELDS})
                    for c in data.get("checks") or []],
            artifacts=list(data.get("artifacts") or []),
            summary=str(data.get("summary") or ""),
            error=data.get("error"),
        )


_CHECK_FIELDS = {f.name for f in fields(Check)}


def params_to_argv(params: Mapping[str, Any]) -> list[str]:
    """``{"samples": 10, "dry_run": True, "layers": [1, 2]}`` -> ``--samples 10 --dry-run --layers [1, 2]``.

    Values become separate argv items, never shell text: quoting is the executor's job.
    Lists and mappings travel as JSON so that nested parameters survive unchanged.
    """
    argv: list[str] = []
    for key, value in params.items():
        flag = "--" + str(key).replace("_", "-")
        if value is None:
            continue
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + str(key).replace("_", "-"))
        elif isinstance(value, (list, dict)):
            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv


def json_arg(text: str) -> Any:
    """argparse ``type=`` for list/mapping parameters passed by :func:`params_to_argv`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {text!r} ({exc.msg})") from None


def add_bool_arg(parser: argparse.ArgumentParser, name: str, default: bool, help: str) -> None:
    """``--name`` / ``--no-name``, matching how :func:`params_to_argv` writes booleans."""
    parser.add_argument(f"--{name}", dest=name.replace("-", "_"),
                        action=argparse.BooleanOptionalAction, default=default, help=help)


def make_parser(action: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {BUILTIN_ACTIONS.get(action, action)}",
                                     description=description)
    parser.add_argument("--result", type=Path, default=None,
                        help="write the stage result (JSON) here; the harness reads it back")
    return parser


def write_result(result: StageResult, path: Path | None) -> None:
    """Write atomically: a reader never sees half a result, even if the host dies mid-write."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".result-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(result.to_json(), fh, indent=2, default=str)
    os.replace(tmp, path)


def read_result(path: Path) -> StageResult:
    return StageResult.from_json(json.loads(Path(path).read_text()))


def print_checks(checks: Iterable[Check], out: Callable[[str], None] = print) -> None:
    for c in checks:
        mark = check_status(c)
        extra = f" value={c.value}" if c.value is not None else ""
        extra += f" expected={c.expected}" if c.expected is not None else ""
        out(f"check {mark} {c.name}:{extra} {c.message}".rstrip())


def run_action(action: str, fn: Callable[[argparse.Namespace], StageResult],
               parser: argparse.ArgumentParser, argv: list[str] | None = None, *,
               setup: Callable[[argparse.Namespace], None] | None = None) -> int:
    """The ``main`` of every built-in action: parse, run, report, exit 0/1.

    Exit 0 only when the action finished *and* its own checks passed, so a plain shell
    user gets the same verdict the runner does. ``setup`` runs first (the torch stages'
    threads: ``pipeline.eagle3.common.use_threads``).
    """
    args = parser.parse_args(argv)
    try:
        if setup is not None:
            setup(args)
        result = fn(args)
    except ActionError as exc:
        result = StageResult(action=action, error=str(exc))
        write_result(result, args.result)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    if os.environ.get("HARNESS_CHECK_METRICS") == "1":
        extra = undeclared_metrics(action, result.metrics)
        if extra:
            result.error = (f"{action} reported metrics not declared in "
                            f"pipeline/actions.py ACTION_METRICS: {', '.join(extra)}")
            print(f"error: {result.error}", file=sys.stderr)
    print_checks(result.checks)
    if result.summary:
        print(result.summary)
    write_result(result, args.result)
    return 0 if result.ok else 1
