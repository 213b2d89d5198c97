#!/usr/bin/env python3
"""Two GPUs: a verifier split over both, tensor parallelism, and training on both (issue 18).

Sections (``--sections``, in this order; every comparison's baseline is measured in the same
run, on one GPU of the same machine):

- ``split``: a verifier at the Llama-3.1-8B shape (random weights: the states' agreement,
  throughput and memory do not depend on training) through the ``hidden_states`` stage on
  one GPU and with ``--device-map balanced`` over both: the states agree within bf16
  tolerance, tokens/s both ways, the peak memory of each GPU against the memory plan;
- ``tp``: the same verifier under ``torchrun --nproc-per-node 2`` with ``--tp-plan auto``
  (transformers' tensor parallelism for Llama), against the one-GPU states and tokens/s;
- ``data``: ``examples/eagle3-h200.yaml`` up to its vocab stage (a trained verifier, its
  tokens, the draft vocab) for the training sections; kept in ``--workdir`` and reused;
- ``train``: ``eagle3.train`` offline (shards from one hidden_states run) and online, on one
  GPU with ``--batch-size 2B`` and under ``torchrun --nproc-per-node 2`` with ``B`` (the same
  global batch): tokens/s and the scaling ratio, and the loss of the first 50 steps
  (``--loss-curve``) against one GPU's, next to the gap between two one-GPU runs that differ
  only in their data order (the noise).

    python -m bench.eagle3.two_gpu [--out DIR] [--workdir DIR] [--sections ...] [--tiny]

Everything lands in ``--out`` (``eagle3_2gpu.json``, merged across runs, and the table). A
machine that allows ten minutes a command runs it in two: ``--sections split,tp`` then
``--sections data,train`` with the same ``--workdir``. ``--tiny`` runs all of it on the CPU
(gloo for the two processes, CPU + disk for the split): a smoke test of this script, not a
measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.eagle3.campaign import compare_shards, fresh, print_table, stage
from pipeline.actions import params_to_argv

ROOT = Path(__file__).resolve().parents[2]

SPEC = ROOT / "examples" / "eagle3-h200.yaml"
LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": False}
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
        "max_position_embeddings": 512, "tie_word_embeddings": False}
# The split and tp sections' tokens: random ids, every position a training position.
SAMPLES, SEQ = 96, 2048
TINY_SAMPLES, TINY_SEQ = 24, 64
CURVE = 50
# --tiny: the h200 example shrunk to CPU size (scripts/eagle3_tiny.py --set), up to vocab.
TINY_DATA = ["verifier.hidden_size=64", "verifier.layers=7", "verifier.heads=4",
             "verifier.kv_heads=2", "verifier.intermediate_size=128", "verifier.vocab_size=400",
             "verifier.corpus_files=6", "verifier.train_samples=1500", "verifier.steps=120",
             "verifier.batch_size=32", "verifier.prompts=300", "verifier.check_prompts=0",
             "generate.samples=240", "generate.batch_size=40", "generate.max_new_tokens=48",
             "generate.min_reasoning_capture=0.0", "clean.require_think=false",
             "clean.max_reject_rate=1.0", "vocab.draft_vocab=128"]


def free_port() -> int:
    with socket.socket() as sock:  # torchrun's static rendezvous cannot take port 0
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(module: str, params: dict[str, Any], result: Path, cwd: Path) -> dict[str, Any]:
    """A stage under ``torchrun --nproc-per-node 2`` (rank 0 writes the result)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", f"pipeline.eagle3.{module}", *params_to_argv(params), "--result", str(result)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    out = json.loads(result.read_text()) if result.exists() else {}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        out.setdefault("error", " | ".join(tail))
    out["wall_seconds"] = time.perf_counter() - t0
    out["log"] = proc.stdout[-4000:]
    return out


def one_gpu(fn):
    """Run ``fn`` with only the first GPU visible: the one-device baselines."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    try:
        return fn()
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def big_verifier(args, work: Path) -> tuple[Path, Path]:
    """A random verifier at the 8B shape and random tokens for it, built once in ``work``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.eagle3.text.datafiles import write_tokens

    verifier, tokens = work / "big-verifier", work / "big-tokens"
    cfg = TINY if args.tiny else LLAMA_8B
    samples, seq = (TINY_SAMPLES, TINY_SEQ) if args.tiny else (SAMPLES, SEQ)
    if not (verifier / "config.json").exists():
        torch.manual_seed(0)
        device = "cpu" if args.tiny else "cuda"
        dtype = torch.float32 if args.tiny else torch.bfloat16
        with torch.device(device):
            model = LlamaForCausalLM(LlamaConfig(**cfg, torch_dtype=dtype))
        model.to(dtype).save_pretrained(str(verifier))
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if not (tokens / "tokens.safetensors").exists():
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, cfg["vocab_size"], (samples * seq,), generator=g,
                            dtype=torch.int32)
        write_tokens(tokens, [f"s{i}" for i in range(samples)], ids,
                     torch.ones(samples * seq, dtype=torch.uint8),
                     torch.arange(0, samples * seq + 1, seq, dtype=torch.int64),
                     cfg["vocab_size"])
    return verifier, tokens


def hs_params(args, verifier: Path, tokens: Path) -> dict[str, Any]:
    common = {"tokens": tokens, "verifier": verifier, "validate": False,
              "shard_tokens": 1 << 20}
    if args.tiny:
        return {**common, "device": "cpu", "dtype": "float32"}
    return {**common, "device": "cuda", "dtype": "bfloat16", "batch_tokens": 16384}


def peaks_note(res: dict[str, Any]) -> str:
    peaks = res.get("metrics", {}).get("device_peak_gib") or {}
    return ", ".join(f"{d} {g:.1f} GiB" for d, g in peaks.items()) or "no CUDA peak"


def section_split(args, work: Path, rows: list, record: dict) -> None:
    verifier, tokens = big_verifier(args, work)
    bench = fresh(args.out / "split")
    base = hs_params(args, verifier, tokens)
    one = one_gpu(lambda: stage("hidden_states", {**base, "out": bench / "one"},
                                bench / "one.json", work))
    if args.tiny:  # no second GPU: the same code path, spread over the CPU and the disk
        weights = sum(f.stat().st_size for f in verifier.glob("*.safetensors"))
        spread = {"max_memory": {"cpu": int(0.4 * weights)}, "offload_folder": bench / "off"}
        label = "cpu + disk"
    else:
        spread, label = {"device_map": "balanced"}, "balanced over cuda:0 + cuda:1"
    two = stage("hidden_states", {**base, **spread, "out": bench / "two"}, bench / "two.json",
                work)
    bad = one.get("error") or two.get("error")
    if bad:
        rows.append({"name": "split", "note": f"failed: {bad}"})
        return
    cmp = compare_shards(bench / "one", bench / "two")
    plan = two["metrics"].get("memory_plan", {})
    placed = {d["device"]: d["layers"] for d in plan.get("devices", [])}
    planned = {d["device"]: round(d["total"] / 2 ** 30, 2) for d in plan.get("devices", [])}
    rows.append({"name": f"split {label}: hidden states vs one GPU", "value": cmp["max_abs_diff"],
                 "note": f"max |diff| (max |state| {cmp['max_abs']:.3g}); "
                         f"{'bit-identical' if cmp['bit_identical'] else 'not bit-identical'}; "
                         f"{'within' if cmp['within_bf16'] else 'OUTSIDE'} bf16 tolerance; "
                         f"layers {placed}"})
    t1, t2 = one["metrics"].get("tokens_per_s"), two["metrics"].get("tokens_per_s")
    rows.append({"name": "split: hidden_states on one GPU", "value": t1, "unit": "tokens/s",
                 "note": f"peak {peaks_note(one)}"})
    rows.append({"name": f"split: hidden_states {label}", "value": t2, "unit": "tokens/s",
                 "note": f"{t2 / t1:.2f}x one GPU; peak {peaks_note(two)}; plan {planned}"
                 if t1 and t2 else ""})
    record["split"] = {**cmp, "placement": placed, "plan_gib": planned,
                       "tokens_per_s": [t1, t2],
                       "peak_gib": [one["metrics"].get("device_peak_gib"),
                                    two["metrics"].get("device_peak_gib")]}


def section_tp(args, work: Path, rows: list, record: dict) -> None:
    verifier, tokens = big_verifier(args, work)
    bench = fresh(args.out / "tp")
    base = hs_params(args, verifier, tokens)
    one = one_gpu(lambda: stage("hidden_states", {**base, "out": bench / "one"},
                                bench / "one.json", work))
    two = torchrun("hidden_states", {**base, "tp_plan": "auto", "out": bench / "tp"},
                   bench / "tp.json", work)
    bad = one.get("error") or two.get("error")
    if bad:
        rows.append({"name": "tp", "note": f"failed: {bad}"})
        return
    cmp = compare_shards(bench / "one", bench / "tp")
    t1, t2 = one["metrics"].get("tokens_per_s"), two["metrics"].get("tokens_per_s")
    rows.append({"name": "tp 2 ranks (tp_plan auto): states vs one GPU",
                 "value": cmp["max_abs_diff"],
                 "note": f"max |diff| (max |state| {cmp['max_abs']:.3g}); "
                         f"{'within' if cmp['within_bf16'] else 'OUTSIDE'} bf16 tolerance"})
    rows.append({"name": "tp 2 ranks: hidden_states", "value": t2, "unit": "tokens/s",
                 "note": f"{t2 / t1:.2f}x one GPU ({t1:,.0f}); rank 0 peak {peaks_note(two)}"
                 if t1 and t2 else ""})
    record["tp"] = {**cmp, "tokens_per_s": [t1, t2],
                    "peak_gib": [one["metrics"].get("device_peak_gib"),
                                 two["metrics"].get("device_peak_gib")]}


def section_data(args, work: Path, rows: list, record: dict) -> None:
    data = work / "h200"
    if (data / "results" / "vocab.json").exists():
        rows.append({"name": "data: eagle3-h200 up to vocab", "note": f"reused {data}"})
        return
    cmd = [sys.executable, str(ROOT / "scripts" / "eagle3_tiny.py"), "--spec", str(SPEC),
           "--workdir", str(data), "--fresh", "--until", "vocab"]
    if args.tiny:
        cmd += ["--device", "cpu"] + [x for s in TINY_DATA for x in ("--set", s)]
    t0 = time.perf_counter()
    proc = one_gpu(lambda: subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                          capture_output=True, text=True))
    (args.out / "data.log").write_text(proc.stdout + proc.stderr)
    ok = proc.returncode == 0 and (data / "results" / "vocab.json").exists()
    rows.append({"name": "data: eagle3-h200 up to vocab", "value": time.perf_counter() - t0,
                 "unit": "s", "note": "" if ok else "FAILED: " + " | ".join(
                     (proc.stderr or proc.stdout).strip().splitlines()[-2:])})


def train_params(args, data: Path) -> dict[str, Any]:
    import yaml

    spec = yaml.safe_load(SPEC.read_text())
    params = dict(next(s for s in spec["stages"] if s["name"] == "train")["with"])
    for key in ("online", "tokens", "out"):
        params.pop(key, None)
    params.update(verifier=data / "verifier", vocab=data / "data" / "vocab.safetensors",
                  epochs=1, loss_curve=CURVE, min_acc1=0.0, log_every=1000)
    if args.tiny:
        params.update(device="cpu", batch_size=8, batch_tokens=1024)
    return params


def curve_gap(a: list[float], b: list[float]) -> float | None:
    n = min(len(a), len(b))
    return sum(abs(x - y) / x for x, y in zip(a[:n], b[:n], strict=True)) / n if n else None


def section_train(args, work: Path, rows: list, record: dict) -> None:
    data = work / "h200"
    if not (data / "results" / "vocab.json").exists():
        rows.append({"name": "train", "note": "skipped: run the data section first"})
        return
    bench = fresh(args.out / "train")
    tokens = data / "data" / "tokens"
    params = train_params(args, data)
    b, t = int(params.pop("batch_size")), int(params.pop("batch_tokens"))
    device = "cpu" if args.tiny else "cuda"
    hs = one_gpu(lambda: stage("hidden_states", {"tokens": tokens, "verifier": data / "verifier",
                                                 "out": bench / "hidden", "device": device,
                                                 "validate": False},
                               bench / "hs.json", work))
    if hs.get("error"):
        rows.append({"name": "train", "note": f"hidden_states failed: {hs['error']}"})
        return
    record["train"] = {}
    for mode, source in (("offline", {"hidden_states": bench / "hidden"}),
                         ("online", {"online": True, "tokens": tokens})):
        p = {**params, **source}
        one = one_gpu(lambda p=p, mode=mode: stage(
            "train", {**p, "batch_size": 2 * b, "batch_tokens": 2 * t,
                      "out": bench / f"{mode}-one"}, bench / f"{mode}-one.json", work))
        two = torchrun("train", {**p, "batch_size": b, "batch_tokens": t,
                                 "out": bench / f"{mode}-two"}, bench / f"{mode}-two.json", work)
        noise = None
        if mode == "offline":  # the same run with another data order: the noise floor
            other = one_gpu(lambda p=p: stage(
                "train", {**p, "seed": 1, "batch_size": 2 * b, "batch_tokens": 2 * t,
                          "out": bench / "offline-seed1"}, bench / "offline-seed1.json", work))
            if not other.get("error"):
                noise = curve_gap(one["metrics"]["loss_curve"], other["metrics"]["loss_curve"])
        bad = one.get("error") or two.get("error")
        if bad:
            rows.append({"name": f"train {mode}", "note": f"failed: {bad}"})
            continue
        s1, s2 = one["metrics"]["train_tokens_per_s"], two["metrics"]["train_tokens_per_s"]
        gap = curve_gap(one["metrics"]["loss_curve"], two["metrics"]["loss_curve"])
        steps = min(len(one["metrics"]["loss_curve"]), len(two["metrics"]["loss_curve"]))
        rows.append({"name": f"train {mode}: one GPU, batch {2 * b}", "value": s1,
                     "unit": "tokens/s", "note": f"peak {peaks_note(one)}"})
        rows.append({"name": f"train {mode}: 2 ranks x batch {b}", "value": s2,
                     "unit": "tokens/s", "note": f"scaling {s2 / s1:.2f}x; rank 0 peak "
                                                 f"{peaks_note(two)}"})
        rows.append({"name": f"train {mode}: loss curve 2 ranks vs one", "value": gap,
                     "note": f"mean relative gap over the first {steps} steps"
                             + (f"; noise (one GPU, another data order) {noise:.4f}"
                                if noise is not None else "")})
        record["train"][mode] = {
            "tokens_per_s": [s1, s2], "scaling": s2 / s1, "curve_gap": gap, "noise_gap": noise,
            "curves": [one["metrics"]["loss_curve"], two["metrics"]["loss_curve"]],
            "peak_gib": [one["metrics"].get("device_peak_gib"),
                         two["metrics"].get("device_peak_gib")]}


SECTIONS = {"split": section_split, "tp": section_tp, "data": section_data,
            "train": section_train}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="split,tp,data,train")
    p.add_argument("--out", type=Path, default=Path("bench-out/eagle3-2gpu"))
    p.add_argument("--workdir", type=Path, default=None, help="built inputs (default OUT/work)")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run of this script")
    args = p.parse_args(argv)
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s): {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(SECTIONS)})")
    if not args.tiny and torch.cuda.device_count() < 2:
        raise SystemExit(f"{torch.cuda.device_count()} GPU(s) here: this needs two "
                         "(or --tiny for the CPU smoke run)")
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    work = (args.workdir or args.out / "work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    store = args.out / "eagle3_2gpu.json"
    record: dict[str, Any] = json.loads(store.read_text()) if store.exists() else {}
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() and not args.tiny else ["cpu"]
    record.update(devices=names, torch=torch.__version__, tiny=args.tiny)
    rows: list = []
    t0 = time.perf_counter()
    for section in sections:
        print(f"== {section}", flush=True)
        SECTIONS[section](args, work, rows, record)
        store.write_text(json.dumps(record, indent=2, default=str))
    table = print_table(rows)
    print(f"\n{' + '.join(names)}, torch {torch.__version__}, "
          f"{time.perf_counter() - t0:.0f} s\n{table}")
    (args.out / f"table-{'-'.join(sections)}.txt").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
