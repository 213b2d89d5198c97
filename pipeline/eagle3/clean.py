"""Action ``eagle3.clean``: validate samples; quarantine what fails, with the reason.

Input: generate's ``samples.jsonl`` (or a directory holding it). Output:
``OUT/samples.jsonl`` (kept samples, unchanged) and ``OUT/quarantine/rejected.jsonl``, one
``{"reason", "detail", "line", "sample"}`` a line. A ``samples.jsonl`` already in ``OUT`` from
an earlier run is moved to ``OUT/quarantine/stale-<UTC time>/`` first. Nothing is deleted.

Reasons: ``malformed`` (not a sample), ``wrong_role_order`` (roles must be [system] user,
assistant, alternating, ending with the assistant), ``empty`` (empty answer, or nothing after
``</think>``), ``truncated`` (finish_reason ``length``, or a think block never closed),
``unbalanced_think`` (tag counts or order wrong), ``missing_think`` (``--require-think`` and
no think block), ``duplicate`` (same id, or same messages, as an earlier sample).

Checks: ``kept`` > 0, and the reject share at most ``--max-reject-rate``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.eagle3.common import log, resolve_jsonl
from pipeline.eagle3.text.chat import THINK_CLOSE, THINK_OPEN, split_think, think_problem
from pipeline.errors import ActionError

ACTION = "eagle3.clean"
SAMPLES = "samples.jsonl"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Validate samples; quarantine what fails, with the reason.")
    p.add_argument("--samples", type=Path, required=True, help="samples JSONL or its directory")
    p.add_argument("--out", type=Path, required=True)
    add_bool_arg(p, "require-think", False, "reject answers without a think block")
    p.add_argument("--max-reject-rate", type=float, default=0.5)
    return p


def reject_reason(sample: Any, require_think: bool) -> tuple[str, str] | None:
    """``(reason, detail)`` for a bad sample, None for a good one. Duplicates are found later."""
    if not isinstance(sample, dict) or not isinstance(sample.get("messages"), list):
        return "malformed", "not an object with a 'messages' list"
    messages = sample["messages"]
    if not all(isinstance(m, dict) and isinstance(m.get("content"), str)
               and isinstance(m.get("role"), str) for m in messages):
        return "malformed", "a message without string 'role' and 'content'"
    roles = [m["role"] for m in messages]
    if not _role_order_ok(roles):
        return "wrong_role_order", "/".join(roles)
    answer = messages[-1]["content"]
    if not answer.strip():
        return "empty", "empty assistant turn"
    if sample.get("finish_reason") == "length":
        return "truncated", "finish_reason=length"
    if answer.count(THINK_OPEN) == 1 and THINK_CLOSE not in answer:
        # A reasoning model cut off mid-thought; counted apart from other tag problems
        # because it means max tokens is too small, not that the parser is broken.
        return "truncated", "think block never closed"
    problem = think_problem(answer)
    if problem:
        return "unbalanced_think", problem
    _, final = split_think(answer)
    if THINK_OPEN in answer and not final.strip():
        return "empty", "nothing after </think>"
    if require_think and THINK_OPEN not in answer:
        return "missing_think", "no <think> block"
    return None


def _role_order_ok(roles: list[str]) -> bool:
    if roles and roles[0] == "system":
        roles = roles[1:]
    if len(roles) < 2 or len(roles) % 2:
        return False
    return all(r == ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(roles))


def _fingerprint(sample: dict[str, Any]) -> str:
    norm = [(m["role"], " ".join(m["content"].split())) for m in sample["messages"]]
    return hashlib.sha256(json.dumps(norm, ensure_ascii=False).encode()).hexdigest()


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    src = resolve_jsonl(Path(args.samples), SAMPLES)
    if not src.is_file():
        raise ActionError("samples file not found", where=str(src))
    out = Path(args.out)
    qdir = out / "quarantine"
    qdir.mkdir(parents=True, exist_ok=True)
    stale = out / SAMPLES
    if stale.exists():
        if stale.resolve() == src.resolve():
            raise ActionError("--out would overwrite the input", where=str(src))
        dest = qdir / time.strftime("stale-%Y%m%dT%H%M%SZ", time.gmtime())
        dest.mkdir(parents=True, exist_ok=True)
        for name in (SAMPLES, "rejected.jsonl"):
            for old in (out / name, qdir / name):
                if old.exists():
                    shutil.move(str(old), str(dest / f"{old.parent.name}-{name}"))
        log(f"[clean] moved the previous run's outputs to {dest}")

    counts: Counter[str] = Counter()
    seen_ids: set[str] = set()
    seen_prints: set[str] = set()
    kept = total = 0
    with src.open(encoding="utf-8") as fh, (out / ".samples.tmp").open(
            "w", encoding="utf-8") as good, (qdir / "rejected.jsonl").open(
            "w", encoding="utf-8") as bad:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            total += 1
            try:
                sample = json.loads(line)
            except json.JSONDecodeError as exc:
                sample, why = line.rstrip("\n"), ("malformed", f"not JSON ({exc.msg})")
            else:
                why = reject_reason(sample, args.require_think)
            if why is None:
                sid, fp = str(sample.get("id")), _fingerprint(sample)
                if sid in seen_ids and sample.get("id") is not None:
                    why = ("duplicate", f"id {sid} seen before")
                elif fp in seen_prints:
                    why = ("duplicate", "same messages as an earlier sample")
                seen_ids.add(sid)
                seen_prints.add(fp)
            if why is None:
                good.write(line if line.endswith("\n") else line + "\n")
                kept += 1
            else:
                counts[why[0]] += 1
                bad.write(json.dumps({"reason": why[0], "detail": why[1], "line": lineno,
                                      "sample": sample}, ensure_ascii=False) + "\n")
    (out / ".samples.tmp").replace(out / SAMPLES)
    rejected = total - kept
    rate = rejected / total if total else 1.0
    result.metrics.update(total=total, kept=kept, rejected=rejected,
                          reject_rate=round(rate, 4), **{f"rejected_{k}": v
                                                         for k, v in sorted(counts.items())})
    result.artifacts += [str(out / SAMPLES), str(qdir / "rejected.jsonl")]
    result.check("kept", kept > 0, value=kept, expected="> 0")
    result.check("reject_rate", rate <= args.max_reject_rate, value=round(rate, 4),
                 expected=f"<= {args.max_reject_rate}")
    detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    result.summary = f"clean: kept {kept}/{total}; rejected: {detail}"
    return result


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
