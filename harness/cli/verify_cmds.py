"""`harness verify` and `harness verifications`: checkpoint verification from the command line.

`harness verify` runs the stage code of ``eagle3.verify`` in this process (the same checks
a pipeline's verify stage runs on its host), holds the result to an optional gate, and
records it in the store's ``verifications`` table, linked to ``--todo`` when given.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import click

from harness import todos as uc
from harness.cli.common import common_options, emit_json, harness, json_option
from harness.errors import EXIT_ERROR, HarnessError, UsageError
from harness.gates import outcome
from harness.render import aligned, safe_line
from harness.runner import evaluate_gate, gate_reason
from harness.served_view import speed_figures
from pipeline.actions import (
    FAIL,
    REQUIRE_VLLM,
    TABLE,
    StageResult,
    check_status,
    gate_problem,
    params_to_argv,
)
from pipeline.gates import Gate, read_gate
from state.fold import VerificationState

ACTION = "eagle3.verify"
LAYERS = ("structural", "compatibility", "functional")


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _need_ml() -> None:
    missing = [m for m in ("torch", "safetensors", "transformers") if not _importable(m)]
    if missing:
        raise HarnessError(
            f"harness verify runs the checks in this process and needs "
            f"{', '.join(missing)}, which this Python lacks",
            hint="pip install 'todo-harness[eagle3]', or run the eagle3.verify stage on a "
                 "host that has them (harness run)")


def parse_gate(items: tuple[str, ...]) -> Gate:
    """``min_acceptance_length=2.0`` -> the gate ``{"min_acceptance_length": 2.0}``, typed;
    a comma list (``min_position_acceptance=0.6,0.4``) holds each position."""
    gate: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise UsageError(f"--gate {item!r}: expected NAME=NUMBER, e.g. "
                             "min_acceptance_length=2.0")
        if key == REQUIRE_VLLM:
            if raw.strip().lower() not in ("true", "false"):
                raise UsageError(f"--gate {item!r}: expected {REQUIRE_VLLM}=true or false")
            gate[key] = raw.strip().lower() == "true"
            continue
        try:
            values = [float(x) for x in raw.split(",")]
        except ValueError:
            raise UsageError(f"--gate {item!r}: {raw!r} is not a number (or a comma list "
                             "of numbers)") from None
        problem = gate_problem(ACTION, key)
        if problem:
            raise UsageError(f"--gate {key}: {problem}")
        gate[key] = values if len(values) > 1 else values[0]
    return read_gate(gate)  # every entry's form is checked above


def run_verification(params: dict[str, Any], log: Any) -> StageResult:
    """The stage's own parser and ``run``, in this process."""
    from pipeline.eagle3 import verify

    args = verify.build_parser().parse_args(params_to_argv(params))
    return verify.run(args, log=log)


@click.command("verify")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--verifier", required=True, type=click.Path(path_type=Path),
              help="The verifier (target) model directory.")
@click.option("--data", type=click.Path(path_type=Path),
              help="Held-out prompts: JSONL (prompt or sample shapes) or tokenize's output "
                   "directory. Needed by --functional.")
@click.option("--exclude", type=click.Path(path_type=Path),
              help="JSONL of the drafter's training samples: prompts among them are skipped.")
@click.option("--functional/--no-functional", default=None,
              help="Measure acceptance, and the reference loop's speed (default: on when "
                   "--data is given).")
@click.option("--k", "k", type=click.IntRange(min=1), default=3, show_default=True,
              help="Draft tokens per verify step.")
@click.option("--samples", type=click.IntRange(min=1), default=16, show_default=True,
              help="Held-out prompts to decode.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=96, show_default=True)
@click.option("--previous", type=click.Path(path_type=Path),
              help="An earlier checkpoint to compare against.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:1, auto.")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
              default="float32", show_default=True, help="Compute dtype of the functional checks.")
@click.option("--device-map", metavar="MAP",
              help="Spread the verifier over devices for the functional checks (accelerate's "
                   "placement): auto, balanced, balanced_low_0, sequential, or a JSON map of "
                   "module to device. --max-memory alone implies auto.")
@click.option("--max-memory", metavar="JSON",
              help='The most verifier weights per device, e.g. \'{"0": "60GiB", "cpu": '
                   '"200GiB"}\' (GPU index, "cpu", "disk").')
@click.option("--offload-folder", type=click.Path(path_type=Path),
              help="Where layers placed on 'disk' are kept (needed when the map offloads "
                   "to disk).")
@click.option("--vllm-python", metavar="PATH",
              help="Interpreter of the vLLM that will serve (default: this one).")
@click.option("--vllm-version", metavar="X.Y.Z",
              help="vLLM version for the fallback table when vLLM is not importable.")
@click.option("--require-vllm", is_flag=True,
              help="Fail when no vLLM can be asked (the fallback table is not enough).")
@click.option("--gate", "gates", multiple=True, metavar="NAME=VALUE",
              help="Threshold on a metric, e.g. min_acceptance_length=2.0, "
                   "min_position_acceptance=0.6 (or 0.6,0.4,0.2), require_vllm=true "
                   "(no vLLM check answered from the table) (repeatable). The speed "
                   "figures are the reference loop's upper bounds and do not gate: hold "
                   "speed on a served benchmark (min_served_speedup).")
@click.option("--todo", "todo_id", metavar="ID", help="Link the recorded result to this todo.")
@click.option("--no-record", is_flag=True, help="Do not record the result in the store.")
@common_options
@json_option
def verify_cmd(checkpoint: Path, verifier: Path, data: Path | None, exclude: Path | None,
               functional: bool | None, k: int, samples: int, max_new_tokens: int,
               previous: Path | None, device: str, dtype: str, device_map: str | None,
               max_memory: str | None, offload_folder: Path | None, vllm_python: str | None,
               vllm_version: str | None, require_vllm: bool, gates: tuple[str, ...],
               todo_id: str | None, no_record: bool, as_json: bool) -> None:
    """Verify an EAGLE-3 drafter CHECKPOINT against its verifier: structure (config, keys,
    shapes, dtype, NaN/Inf, d2t/t2d, lm_head rows), vLLM compatibility, and with
    --functional measured acceptance (teacher-forced and free-running, lossless against
    plain greedy decoding), against an untrained drafter.

    Its speed figures come from the reference loop, which runs Python between steps and
    no CUDA graphs: the reference-loop bound and the projection are upper bounds no engine
    reaches, not served speed. The served speedup is the eagle3.benchmark stage's.

    The result is recorded in the store (`harness verifications`), linked to --todo.
    Exit 0 when every check and the gate pass, 1 otherwise.
    """
    gate = parse_gate(gates)
    if functional is None:
        functional = data is not None
    if functional and data is None:
        raise UsageError("--functional needs held-out prompts: give --data HELD_OUT.jsonl "
                         "(prompts the drafter was not trained on, or tokenize's output "
                         "directory)")
    _need_ml()
    h = harness()
    num = uc.parse_id(todo_id) if todo_id is not None else None
    sid = None
    if not no_record:
        sid = h.session().id
        if num is not None:
            h.store.todo(sid, num)  # an unknown todo is an error before any work
    params = {"checkpoint": checkpoint, "verifier": verifier, "data": data,
              "exclude": exclude, "functional": functional, "k": k, "samples": samples,
              "max_new_tokens": max_new_tokens, "previous": previous, "device": device,
              "dtype": dtype, "device_map": device_map, "max_memory": max_memory,
              "offload_folder": offload_folder,
              "vllm_python": vllm_python, "vllm_version": vllm_version,
              "require_vllm": require_vllm}
    result = run_verification(params, log=lambda msg: click.echo(msg, err=True))
    gate_ok, gate_lines = evaluate_gate(gate, result.metrics)
    passed = result.ok and (gate_ok or not gate)
    verdict = (gate_reason(gate, result) if gate and not gate_ok else
               (result.summary + ("; gate passed: " + "; ".join(gate_lines) if gate else "")))
    recorded = None
    if sid is not None:
        with h.store.write(sid, "human") as tx:
            recorded = tx.record_verification(
                todo_id=num, run_id=None, kind=ACTION,
                artifact=result.artifacts[0] if result.artifacts else str(checkpoint),
                sha256=result.metrics.get("sha256"), passed=passed, verdict=verdict,
                checks=[c.to_json() for c in result.checks], metrics=result.metrics,
                gate=gate.to_json())
    if as_json:
        emit_json({"passed": passed, "verdict": verdict, "gate": gate.to_json(),
                   "gate_lines": gate_lines, "verification": recorded and f"v{recorded.id}",
                   "todo": f"t{num}" if num is not None else None,
                   "result": result.to_json()})
    else:
        _print_result(result, gate_lines, passed, verdict, recorded, num)
    if not passed:
        raise click.exceptions.Exit(EXIT_ERROR)


def _print_result(result: StageResult, gate_lines: list[str], passed: bool, verdict: str,
                  recorded: VerificationState | None, num: int | None) -> None:
    layers = result.metrics.get("check_layers") or {}
    by_name = {c.name: c for c in result.checks}
    for layer in LAYERS:
        names = [n for n in layers.get(layer, []) if n in by_name]
        if not names:
            continue
        click.echo(f"{layer}:")
        for name in names:
            c = by_name[name]
            value = "" if c.value is None else f" {safe_line(str(c.value), 60)}"
            click.echo(f"  {check_status(c):<5} {c.name}{value}: "
                       f"{safe_line(c.message, 160)}")
    m = result.metrics
    if "tau" in m:
        base = m.get("untrained_acceptance_length", m.get("untrained_teacher_forced_tau"))
        click.echo(f"acceptance length {m['tau']:.3f} (teacher-forced "
                   f"{m['teacher_forced_tau']:.3f}, untrained {base:.3f}) at k={m['k']}; "
                   f"per position {m['acceptance_per_position']}")
        bound = m.get("reference_speedup_bound", m.get("measured_speedup"))
        click.echo(f"speed (reference loop, not served): upper bound {bound}x, projected "
                   f"{m.get('projected_speedup')}x; no engine reaches these, the served "
                   "speedup is eagle3.benchmark's"
                   + (" (CPU timings: indicative only)" if m.get("timings_indicative")
                      else ""))
    for line in gate_lines:
        click.echo(f"gate: {line}")
    where = ""
    if recorded is not None:
        where = f" (recorded v{recorded.id}" + (f", todo t{num}" if num is not None else "") + ")"
    click.echo(f"{'PASSED' if passed else 'FAILED'}: {safe_line(verdict, 400)}{where}")


@click.command("verifications")
@click.option("--todo", "todo_id", metavar="ID", help="Only those linked to this todo.")
@common_options
@json_option
def verifications_cmd(todo_id: str | None, as_json: bool) -> None:
    """List the session's recorded verifications (stage runs and `harness verify`), oldest
    first: verdict, headline figures, the checkpoint and its sha256."""
    h = harness()
    sess = h.session()
    num = uc.parse_id(todo_id) if todo_id is not None else None
    rows = h.store.verifications(sess.id, todo_id=num)
    if as_json:
        emit_json({"session": sess.name, "verifications": [_row_json(v) for v in rows]})
        return
    if not rows:
        click.echo(f"session {sess.name}: no verifications"
                   + (f" for t{num}" if num is not None else ""))
        return
    click.echo(f"session {sess.name}: {len(rows)} verification(s)")
    heads = []
    for v in rows:
        m = v.metrics
        figures = []
        if isinstance(m.get("tau"), (int, float)):
            figures.append(f"τ {m['tau']:.2f}")
        figures += speed_figures(m)
        link = " ".join(x for x in (f"t{v.todo_id}" if v.todo_id is not None else "",
                                    f"r{v.run_id}" if v.run_id is not None else "") if x)
        heads.append([f"v{v.id}", {"passed": "PASS", "failed": "FAIL", "undecided": "UNDECIDED"}[
            outcome(v.passed, v.checks, v.gate, v.metrics)], v.created_at[:19],
                      link or "-", v.kind, " ".join(figures) or "-", v.artifact or "-",
                      f"sha256 {(v.sha256 or '-')[:12]}"])
    # Columns as wide as their widest cell (the artifact, up to 50), so long names of
    # kinds or checkpoints do not push the next columns out of line.
    lines = aligned(heads, caps=(None, None, None, None, 32, None, 50, None), sep=" ")
    for v, head in zip(rows, lines, strict=True):
        click.echo(f"  {head}")
        for status in (FAIL, TABLE):
            named = [c.get("name") for c in v.checks if check_status(c) == status]
            if named:
                what = "failed" if status == FAIL else "from the table, not checked"
                click.echo(f"      {what}: {safe_line(', '.join(map(str, named)), 120)}")
        click.echo(f"      {safe_line(v.verdict, 160)}")


def _row_json(v: VerificationState) -> dict[str, Any]:
    return {"id": f"v{v.id}", "todo": f"t{v.todo_id}" if v.todo_id is not None else None,
            "run": f"r{v.run_id}" if v.run_id is not None else None, "kind": v.kind,
            "passed": v.passed, "outcome": outcome(v.passed, v.checks, v.gate, v.metrics),
            "verdict": v.verdict, "artifact": v.artifact,
            "sha256": v.sha256, "created_at": v.created_at, "gate": v.gate,
            "checks": v.checks, "metrics": v.metrics}


def register(cli: click.Group) -> None:
    cli.add_command(verify_cmd)
    cli.add_command(verifications_cmd)
