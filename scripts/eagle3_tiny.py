#!/usr/bin/env python3
"""Run the stages of ``examples/eagle3-tiny.yaml`` in order, without the harness.

Each stage is ``python -m <module> <params_to_argv(with)> --result results/<name>.json`` in
the workdir, exactly as the runner starts an action (a ``run:`` stage is ``bash -c`` with
``HARNESS_PYTHON`` set, as the runner runs it). Gates are the harness's business: this
script reports the stages' own checks. Prints each stage's output, then a table
of wall times and verdicts, and the drafter's held-out per-position accuracy.

    python scripts/eagle3_tiny.py [--spec examples/eagle3-tiny.yaml] [--workdir DIR]
                                  [--from STAGE] [--until STAGE] [--fresh] [--device cuda]
                                  [--set STAGE.KEY=VALUE ...] [--report FILE]

``--fresh`` renames an existing workdir aside (``DIR.old-<time>``) rather than deleting it.
``--set`` overrides one ``with:`` parameter (the value is YAML: ``--set train.epochs=1``);
``--report`` writes the stage table as JSON (``bench/eagle3/campaign.py`` reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.actions import BUILTIN_ACTIONS, canonical_action, params_to_argv, read_result  # noqa: E402


def ordered(stages: list[dict]) -> list[dict]:
    """The stages in spec order, refusing a stage that needs one not yet run."""
    seen: set[str] = set()
    for stage in stages:
        missing = [n for n in stage.get("needs", []) if n not in seen]
        if missing:
            raise SystemExit(f"stage {stage['name']!r} needs {missing} before it")
        seen.add(stage["name"])
    return stages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "eagle3-tiny.yaml")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="default: the spec's hosts.local.workdir, relative to the cwd")
    parser.add_argument("--from", dest="start", default=None, help="skip the stages before")
    parser.add_argument("--until", dest="stop", default=None, help="stop after this stage")
    parser.add_argument("--fresh", action="store_true",
                        help="move an existing workdir aside first")
    parser.add_argument("--device", default=None,
                        help="override every stage's `device` parameter (e.g. cuda)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="STAGE.KEY=VALUE", help="override one stage parameter")
    parser.add_argument("--report", type=Path, default=None,
                        help="write the per-stage seconds and verdicts here (JSON)")
    args = parser.parse_args(argv)

    spec = yaml.safe_load(args.spec.read_text())
    workdir = args.workdir or Path((spec.get("hosts", {}).get("local") or {}).get(
        "workdir", "runs/" + spec["pipeline"]))
    workdir = workdir.resolve()
    if args.fresh and workdir.exists():
        aside = workdir.with_name(f"{workdir.name}.old-{time.strftime('%Y%m%dT%H%M%S')}")
        workdir.rename(aside)
        print(f"moved the old workdir to {aside}")
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), PYTHONUNBUFFERED="1",
        HARNESS_PYTHON=sys.executable)

    stages = ordered(spec["stages"])
    for item in args.overrides:
        target, sep, value = item.partition("=")
        stage_name, dot, key = target.partition(".")
        match = [s for s in stages if s["name"] == stage_name]
        if not sep or not dot or not match:
            raise SystemExit(f"--set {item!r}: expected STAGE.KEY=VALUE with a stage of the "
                             f"spec ({', '.join(s['name'] for s in stages)})")
        match[0].setdefault("with", {})[key] = yaml.safe_load(value)
    names = [s["name"] for s in stages]
    for given in filter(None, (args.start, args.stop)):
        if given not in names:
            raise SystemExit(f"no stage {given!r}; stages: {', '.join(names)}")
    if args.stop:
        stages = stages[:names.index(args.stop) + 1]
    if args.start:
        stages = stages[names.index(args.start):]
    rows = []
    t_all = time.perf_counter()
    for stage in stages:
        result_path = workdir / "results" / f"{stage['name']}.json"
        if result_path.exists():
            result_path.unlink()
        if "run" in stage:  # a shell stage, as the runner runs it
            cmd = ["bash", "-c", stage["run"]]
            print(f"\n== {stage['name']}: (shell)", flush=True)
        else:
            params = dict(stage.get("with") or {})
            if args.device and "device" in params:
                params["device"] = args.device
            cmd = [sys.executable, "-m", BUILTIN_ACTIONS[canonical_action(stage["action"])],
                   *params_to_argv(params), "--result", str(result_path)]
            print(f"\n== {stage['name']}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=workdir, env={**env, "HARNESS_STAGE": stage["name"]})
        dt = time.perf_counter() - t0
        result = read_result(result_path) if result_path.exists() else None
        ok = rc == 0 and ((result is None and "run" in stage)
                          or (result is not None and result.ok))
        rows.append((stage["name"], dt, ok, result.summary if result else f"exit {rc}"))
        if not ok:
            break
    total = time.perf_counter() - t_all

    print(f"\n{'stage':<14} {'seconds':>8}  {'ok':<4} summary")
    for name, dt, ok, summary in rows:
        print(f"{name:<14} {dt:8.1f}  {'yes' if ok else 'NO':<4} {summary}")
    print(f"{'total':<14} {total:8.1f}")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps({
            "spec": str(args.spec), "workdir": str(workdir), "total_seconds": round(total, 2),
            "stages": [{"name": n, "seconds": round(dt, 2), "ok": ok, "summary": summary}
                       for n, dt, ok, summary in rows]}, indent=2))
    train = workdir / "results" / "train.json"
    if train.exists():
        metrics = json.loads(train.read_text())["metrics"]
        accs = {k: v for k, v in metrics.items() if k.startswith("heldout_acc_pos")}
        print("held-out per-position accuracy: " +
              " ".join(f"{k.removeprefix('heldout_acc_')} {v:.3f}" for k, v in accs.items()) +
              f" (est. acceptance length {metrics.get('est_acceptance_length')})")
    verify = workdir / "results" / "verify.json"
    if verify.exists():
        m = json.loads(verify.read_text())["metrics"]
        if "tau" in m:
            print(f"verify: acceptance length {m['tau']} (teacher-forced "
                  f"{m['teacher_forced_tau']}, untrained {m.get('untrained_acceptance_length')})"
                  f" at k={m['k']}, per position {m['acceptance_per_position']}; reference "
                  f"loop (an upper bound, not served): {m['reference_speedup_bound']}x, "
                  f"projected {m['projected_speedup']}x")
    drafter = workdir / "drafter"
    if (drafter / "config.json").exists():
        print(f"drafter: {drafter}")
    return 0 if rows and all(r[2] for r in rows) and len(rows) == len(stages) else 1


if __name__ == "__main__":
    raise SystemExit(main())
