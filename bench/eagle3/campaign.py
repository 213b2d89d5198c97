#!/usr/bin/env python3
"""The seed's campaign at GPU size, measured in one run (issue 13), in one table.

Sections (``--sections``, in this order; each baseline is measured in the same run):

- ``matmul``: the bf16 8192^3 matrix product MFU is quoted against;
- ``pipeline``: ``examples/eagle3-h200.yaml`` end to end through ``scripts/eagle3_tiny.py``:
  per-stage seconds (the target is <= 600 s in all), tau at k=3, the measured and projected
  speedup from the verify stage and the gate held to them (``harness.gates``), and the MFU
  of the online training (the drafter's FLOPs over the matmul rate);
- ``split``: the pipeline's verifier on cuda:0 alone and spread over cuda:0 and the CPU by
  ``--max-memory`` (so that it must split: the GPU may hold 40% of the weights), through
  the hidden_states stage on the same tokens; the states must agree within bf16 tolerance;
- ``online``: offline (hidden_states + train on shards) against ``train --online`` on the
  pipeline's tokens with the spec's train parameters: tokens/s end to end, shards written;
  then the same in one process at the Llama-3.2-1B shape (``bench/eagle3/gpu.py``'s
  ``online`` section), with the epoch count from which offline's extraction pays off;
- ``writes``: the extraction's write methods (pwrite, mmap) to disk and /dev/shm at the
  Llama-3.2-1B shape (``bench/eagle3/gpu.py``'s extract section).

    python -m bench.eagle3.campaign [--out DIR] [--workdir DIR] [--sections ...] [--tiny]

Everything lands in ``--out`` (``eagle3_campaign.json``, merged across runs, and the table).
A machine that allows ten minutes a command runs it in two: ``--sections pipeline`` then
``--sections matmul,split,online,writes`` with the same ``--workdir``. ``--tiny`` runs all
of it on the CPU with the example shrunk (a smoke test of this script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from pipeline.actions import params_to_argv

ROOT = Path(__file__).resolve().parents[2]

SPEC = ROOT / "examples" / "eagle3-h200.yaml"
# --tiny: the same stages at CPU size (the wiring, not the figures).
TINY_SET = ["verifier.hidden_size=64", "verifier.layers=7", "verifier.heads=4",
            "verifier.kv_heads=2", "verifier.intermediate_size=128", "verifier.vocab_size=400",
            "verifier.corpus_files=6", "verifier.train_samples=1500", "verifier.steps=120",
            "verifier.batch_size=32", "verifier.prompts=140", "verifier.check_prompts=2",
            "verifier.min_reasoning_rate=0.0", "generate.samples=120",
            "generate.batch_size=40", "generate.max_new_tokens=48",
            "generate.min_reasoning_capture=0.0", "clean.require_think=false",
            "clean.max_reject_rate=1.0", "vocab.draft_vocab=128", "train.epochs=2",
            "train.batch_size=16", "train.batch_tokens=2048", "train.min_acc1=0.0",
            "verify.samples=2", "verify.max_new_tokens=12", "verify.threads=2",
            "verify.probe=false"]


def stage(module: str, params: dict[str, Any], result: Path, cwd: Path) -> dict[str, Any]:
    """Run one stage as the runner does; (its result JSON, wall seconds) merged."""
    cmd = [sys.executable, "-m", f"pipeline.eagle3.{module}", *params_to_argv(params),
           "--result", str(result)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = json.loads(result.read_text()) if result.exists() else {}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        out.setdefault("error", " | ".join(tail))
    out["wall_seconds"] = wall
    out["log"] = proc.stdout[-4000:]
    return out


def fresh(path: Path) -> Path:
    """An empty directory: a section's stages must run, not resume an earlier run's work."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def spec_stage(name: str) -> dict[str, Any]:
    spec = yaml.safe_load(SPEC.read_text())
    return next(s for s in spec["stages"] if s["name"] == name)


def section_pipeline(args, work: Path, peak: float | None, rows: list, record: dict) -> None:
    report = args.out / "h200-stages.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "eagle3_tiny.py"), "--spec", str(SPEC),
           "--workdir", str(work), "--fresh", "--report", str(report)]
    if args.tiny:
        cmd += ["--device", "cpu"] + [x for s in TINY_SET for x in ("--set", s)]
    # The log is written as the stages run, so that a run stopped at a time limit still
    # says how far it got.
    log = args.out / "h200-pipeline.log"
    t0 = time.perf_counter()
    with log.open("w") as fh:
        subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
                       stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    if not report.exists():
        rows.append({"name": "pipeline eagle3-h200.yaml", "note": "failed: " + " | ".join(
            log.read_text().strip().splitlines()[-2:])})
        return
    rep = json.loads(report.read_text())
    for st in rep["stages"]:
        rows.append({"name": f"pipeline: {st['name']}", "value": st["seconds"], "unit": "s",
                     "note": ("" if st["ok"] else "FAILED: ") + st["summary"][:90]})
    total = rep["total_seconds"]
    done = len(rep["stages"]) == len(yaml.safe_load(SPEC.read_text())["stages"])
    rows.append({"name": "pipeline: total", "value": total, "unit": "s",
                 "note": ("within 10 min" if total <= 600 else "OVER 10 min") +
                 ("" if done and all(s["ok"] for s in rep["stages"]) else "; not all stages ok")})
    record["pipeline"] = {**rep, "wall_seconds": wall}
    results = work / "results"
    if (results / "verify.json").exists():
        from harness.gates import gate_items
        from pipeline.gates import parse_gate

        vm = json.loads((results / "verify.json").read_text())["metrics"]
        gate = parse_gate(spec_stage("verify").get("gate", {}))
        items = gate_items(gate, vm)
        rows.append({"name": f"verify: tau at k={vm.get('k')}", "value": vm.get("tau"),
                     "note": f"per position {vm.get('acceptance_per_position')}; target >= 3.0"})
        rows.append({"name": "verify: reference-loop bound",
                     "value": vm.get("reference_speedup_bound", vm.get("measured_speedup")),
                     "unit": "x", "note": "reference loop vs plain greedy, batch 1: an upper "
                                          "bound, not served"})
        rows.append({"name": "verify: projected speedup", "value": vm.get("projected_speedup"),
                     "unit": "x", "note": "tau x t_plain / (t_verify + t_draft)"})
        rows.append({"name": "verify: gate", "value": None,
                     "note": "; ".join(i.line for i in items)})
        record["verify"] = {k: vm.get(k) for k in ("k", "tau", "acceptance_per_position",
                                                   "reference_speedup_bound",
                                                   "projected_speedup",
                                                   "teacher_forced_tau")}
        record["gate"] = [{"line": i.line, "passed": i.passed} for i in items]
    if (results / "train.json").exists():
        tm = json.loads((results / "train.json").read_text())["metrics"]
        mfu = drafter_mfu(work / "train", work / "data" / "tokens", tm, peak)
        rows.append({"name": "train (online): tokens/s", "value": tm.get("train_tokens_per_s"),
                     "note": f"{tm.get('train_seconds')} s; drafter MFU "
                             f"{mfu:.1%}" if mfu is not None else "MFU needs the matmul "
                             "section"})
        record["train_online"] = {"tokens_per_s": tm.get("train_tokens_per_s"),
                                  "seconds": tm.get("train_seconds"), "mfu": mfu}


def drafter_mfu(train_dir: Path, tokens_dir: Path, metrics: dict, peak: float | None):
    """The drafter's training FLOPs per second over the matmul rate."""
    from bench.eagle3.gpu import train_flops_per_token
    from pipeline.eagle3.model.drafter import DrafterConfig
    from pipeline.eagle3.text.datafiles import read_tokens

    if not peak or not metrics.get("train_tokens_per_s"):
        return None
    state = json.loads((train_dir / "state.json").read_text())
    cfg = DrafterConfig.from_dict(json.loads(
        (train_dir / state["checkpoint"] / "drafter_config.json").read_text()))
    tok = read_tokens(tokens_dir)
    seq = int(tok["offsets"][-1]) / max(1, len(tok["ids"]))
    steps = int(json.loads((train_dir / ".config.json").read_text())["config"]["ttt_steps"])
    flops = train_flops_per_token(cfg, steps, int(seq)) * metrics["train_tokens_per_s"]
    return flops / 1e12 / peak


def compare_shards(one: Path, two: Path) -> dict[str, Any]:
    """Two hidden_states outputs of the same tokens, state by state: the largest
    difference, the largest state, bit-identical or not, within bf16 tolerance or not."""
    from pipeline.eagle3.states.shards import ShardReader, list_shards

    worst, scale, identical, within = 0.0, 0.0, True, True
    _, sa = list_shards(one)
    _, sb = list_shards(two)
    for x, y in zip(sa, sb, strict=True):
        ra, rb = ShardReader(x.path), ShardReader(y.path)
        n = int(ra.offsets[-1])
        for key in ("aux", "last"):
            a, b = ra.rows(key, 0, n).float(), rb.rows(key, 0, n).float()
            worst = max(worst, float((a - b).abs().max()))
            scale = max(scale, float(a.abs().max()))
            identical &= torch.equal(a, b)
            try:
                torch.testing.assert_close(b, a, rtol=1.6e-2, atol=1e-2 * float(a.abs().mean()))
            except AssertionError:
                within = False
    return {"max_abs_diff": worst, "max_abs": scale, "bit_identical": identical,
            "within_bf16": within}


def section_split(args, work: Path, rows: list, record: dict) -> None:
    """Single device against --max-memory that forces a split, same tokens."""
    verifier, tokens = work / "verifier", work / "data" / "tokens"
    if not (verifier / "config.json").exists() or not tokens.exists():
        rows.append({"name": "split", "note": "skipped: run the pipeline section first"})
        return
    weights = sum(f.stat().st_size for f in verifier.glob("*.safetensors"))
    bench = fresh(args.out / "split")
    common = {"tokens": tokens, "verifier": verifier, "limit": 400, "validate": False,
              "shard_tokens": 1 << 20}
    if args.tiny:
        single = {"device": "cpu", "dtype": "float32"}
        spread = {**single, "max_memory": {"cpu": int(0.4 * weights)},
                  "offload_folder": bench / "offload"}
        label = "cpu + disk"
    else:
        single = {"device": "cuda", "dtype": "bfloat16"}
        # The verifier stage saves fp32, the stage computes in bf16: 0.2 x the file size is
        # 40% of the weights in memory, so accelerate must leave layers to the CPU.
        spread = {**single, "max_memory": {"0": int(0.2 * weights), "cpu": "64GiB"}}
        label = "cuda:0 + cpu"
    one = stage("hidden_states", {**common, **single, "out": bench / "one"},
                bench / "one.json", work)
    two = stage("hidden_states", {**common, **spread, "out": bench / "two"},
                bench / "two.json", work)
    if one.get("error") or two.get("error"):
        rows.append({"name": "split", "note": f"failed: {one.get('error') or two.get('error')}"})
        return
    plan = two["metrics"].get("memory_plan", {})
    placed = {d["device"]: d["layers"] for d in plan.get("devices", [])}
    cmp = compare_shards(bench / "one", bench / "two")
    worst, scale, identical, within = (cmp["max_abs_diff"], cmp["max_abs"],
                                       cmp["bit_identical"], cmp["within_bf16"])
    rows.append({"name": f"split {label} vs one device: hidden states",
                 "value": worst, "note": f"max |diff| (max |state| {scale:.3g}); "
                 f"{'bit-identical' if identical else 'not bit-identical'}; "
                 f"{'within' if within else 'OUTSIDE'} bf16 tolerance; layers {placed}"})
    for name, res in (("one device", one), (label, two)):
        rows.append({"name": f"split: hidden_states on {name}", "unit": "tokens/s",
                     "value": res["metrics"].get("tokens_per_s")})
    record["split"] = {"max_abs_diff": worst, "max_abs": scale, "bit_identical": identical,
                       "within_bf16": within, "placement": placed,
                       "tokens_per_s": [one["metrics"].get("tokens_per_s"),
                                        two["metrics"].get("tokens_per_s")]}


def section_online(args, work: Path, peak: float | None, rows: list, record: dict) -> None:
    """Offline (extract + train on shards) against online on the same tokens."""
    verifier, tokens = work / "verifier", work / "data" / "tokens"
    if not (verifier / "config.json").exists() or not tokens.exists():
        rows.append({"name": "online vs offline", "note": "skipped: run the pipeline "
                                                         "section first"})
        return
    params = dict(spec_stage("train")["with"])
    if args.tiny:
        params.update(epochs=1, batch_size=16, batch_tokens=2048, min_acc1=0.0, device="cpu")
    params.update(verifier=verifier, vocab=work / "data" / "vocab.safetensors")
    params.pop("online", None)
    params.pop("tokens", None)
    bench = fresh(args.out / "online")
    device = "cpu" if args.tiny else "cuda"
    hs = stage("hidden_states", {"tokens": tokens, "verifier": verifier, "out": bench / "hidden",
                                 "device": device, "validate": False},
               bench / "hs.json", work)
    off = stage("train", {**params, "hidden_states": bench / "hidden", "out": bench / "off"},
                bench / "off.json", work)
    on = stage("train", {**params, "online": True, "tokens": tokens, "out": bench / "on"},
               bench / "on.json", work)
    bad = next((r.get("error") for r in (hs, off, on) if r.get("error")), None)
    if bad:
        rows.append({"name": "online vs offline", "note": f"failed: {bad}"})
        return
    n_tokens = hs["metrics"]["tokens"]
    epochs = int(params["epochs"])
    off_s = hs["metrics"]["extract_seconds"] + off["metrics"]["train_seconds"]
    on_s = on["metrics"]["train_seconds"]
    off_wall = hs["wall_seconds"] + off["wall_seconds"]
    written = hs["metrics"].get("written_gb")
    rows.append({"name": "offline: extract + train, tokens/s end to end", "unit": "tokens/s",
                 "value": n_tokens * epochs / off_s,
                 "note": f"extract {hs['metrics']['extract_seconds']} s ({written} GB at "
                         f"{hs['metrics'].get('write_gb_s')} GB/s) + train "
                         f"{off['metrics']['train_seconds']} s; {off_wall:.0f} s with "
                         "process starts"})
    rows.append({"name": "online: train --online, tokens/s end to end", "unit": "tokens/s",
                 "value": n_tokens * epochs / on_s,
                 "note": f"{on_s} s, no shards ({on['wall_seconds']:.0f} s with the process "
                         f"start); first-step loss {on['metrics'].get('first_step_loss'):.4f}"
                         f" vs offline {off['metrics'].get('first_step_loss'):.4f}"})
    mfu = drafter_mfu(bench / "off", tokens, off["metrics"], peak)
    if mfu is not None:
        rows.append({"name": "offline train: drafter MFU", "value": mfu, "unit": "MFU",
                     "note": f"{off['metrics'].get('train_tokens_per_s')} tokens/s"})
    record["online_vs_offline"] = {
        "tokens": n_tokens, "epochs": epochs, "offline_seconds": off_s, "online_seconds": on_s,
        "offline_tokens_per_s": n_tokens * epochs / off_s,
        "online_tokens_per_s": n_tokens * epochs / on_s, "shards_gb": written,
        "offline_train_mfu": mfu,
        "heldout_acc_pos1": [off["metrics"].get("heldout_acc_pos1"),
                             on["metrics"].get("heldout_acc_pos1")]}


def section_online_1b(args, rows: list, record: dict) -> None:
    """The same comparison in one process at the Llama-3.2-1B shape (bench/eagle3/gpu.py)."""
    from bench.eagle3.gpu import bench_online

    device = torch.device("cpu" if args.tiny else "cuda")
    b, s, n = (2, 64, 3) if args.tiny else (4, 2048, 12)
    got = bench_online(device, args.tiny, b, s, n, Path(tempfile.mkdtemp(prefix="eagle3-on-")))
    for r in got:
        rows.append({"name": r["name"], "value": r.get("tokens_s"), "unit": "tokens/s",
                     "note": f"{r['config']}; {r.get('note', '')}"})
    record["online_vs_offline_1b"] = got


def section_writes(args, rows: list, record: dict) -> None:
    from bench.eagle3.gpu import bench_extract

    device = torch.device("cpu" if args.tiny else "cuda")
    workdir = Path(tempfile.mkdtemp(prefix="eagle3-writes-"))
    targets = [workdir] + ([Path(tempfile.mkdtemp(dir="/dev/shm"))]
                           if Path("/dev/shm").is_dir() and not args.tiny else [])
    b, s, n = (2, 64, 3) if args.tiny else (8, 2048, 12)
    got = bench_extract(device, args.tiny, b, s, n, workdir, targets)
    for r in got:
        rows.append({"name": r["name"], "value": r.get("tokens_s"), "unit": "tokens/s",
                     "note": (f"{r['overhead']:+.1%} vs plain; " if r.get("overhead")
                              is not None else "") + r.get("note", "")})
    record["writes"] = got


def print_table(rows: list) -> str:
    lines = [f"{'measurement':<58} {'value':>12} {'unit':<9} note"]
    for r in rows:
        v = r.get("value")
        if isinstance(v, float) and r.get("unit") == "MFU":
            text = f"{v:.1%}"
        elif isinstance(v, float):
            text = f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"
        else:
            text = "" if v is None else str(v)
        lines.append(f"{r['name']:<58} {text:>12} {r.get('unit', ''):<9} {r.get('note', '')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="matmul,pipeline,split,online,writes")
    p.add_argument("--out", type=Path, default=Path("bench-out/eagle3-campaign"))
    p.add_argument("--workdir", type=Path, default=None,
                   help="the example's workdir (default OUT/h200)")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run of this script")
    args = p.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    work = (args.workdir or args.out / "h200").resolve()
    if not args.tiny and not torch.cuda.is_available():
        raise SystemExit("no GPU here: run on the H200, or --tiny for the CPU smoke run")
    sections = args.sections.split(",")
    unknown = set(sections) - {"matmul", "pipeline", "split", "online", "writes"}
    if unknown:
        raise SystemExit(f"unknown section(s): {', '.join(sorted(unknown))}")
    store = args.out / "eagle3_campaign.json"
    record: dict[str, Any] = json.loads(store.read_text()) if store.exists() else {}
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not args.tiny \
        else "cpu"
    record.update(device=name, torch=torch.__version__, tiny=args.tiny)
    rows: list = []
    peak = record.get("matmul_tflops")
    t0 = time.perf_counter()
    for section in sections:
        print(f"== {section}", flush=True)
        if section == "matmul":
            from bench.eagle3.gpu import bench_matmul

            m = bench_matmul(torch.device("cpu" if args.tiny else "cuda"), args.tiny)
            peak = record["matmul_tflops"] = m["tflops"]
            rows.append({"name": f"matmul {m['config']}", "value": m["tflops"],
                         "unit": "TFLOP/s", "note": "the ceiling MFU is quoted against"})
        elif section == "pipeline":
            section_pipeline(args, work, peak, rows, record)
        elif section == "split":
            section_split(args, work, rows, record)
        elif section == "online":
            section_online(args, work, peak, rows, record)
            section_online_1b(args, rows, record)
        elif section == "writes":
            section_writes(args, rows, record)
        store.write_text(json.dumps(record, indent=2, default=str))
    table = print_table(rows)
    print(f"\n{name}, torch {torch.__version__}, {time.perf_counter() - t0:.0f} s\n{table}")
    (args.out / f"table-{'-'.join(sections)}.txt").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
