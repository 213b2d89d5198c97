#!/usr/bin/env python3
"""hidden_states --backend hf against --backend vllm: the same states, and tokens/s, in one run.

For each verifier, built by the ``eagle3.build_verifier`` stage (weights barely trained: equality
does not depend on them):

- ``h200``: the H200 example's verifier (examples/eagle3-h200.yaml: 18-layer Llama, hidden
  384), fewer training steps;
- ``deepseek``: a DeepSeek-V3-family verifier (MLA with DeepSeek's head shapes: kv rank 512,
  rope 64, nope 128, v 128; a first dense layer, then 16 routed experts top-4 plus a shared
  one), hidden 2048, 6 layers;
- ``deepseek_fp8`` (when ``pipeline.eagle3.hardware.quantize_checkpoint`` is there): the same verifier
  written as DeepSeek ships it (FP8 block-scaled), given to vLLM as is, against the ``hf``
  backend on its dequantized bf16 twin; two more runs: vLLM on the twin (FP8 against bf16
  tokens/s in one engine) and ``bench/eagle3/e4m3_inputs.py`` (the twin with e4m3-rounded inputs:
  what FP8 implies), so the FP8 states are judged "within what FP8 implies" when their error
  against the fp32 reference is at most 1.5x the simulation's at every id;

the same tokens (synthetic chats through ``eagle3.tokenize``) go through the stage three
times, each in its own process as the runner starts it: ``hf`` in bf16, ``vllm`` in bf16, and
``hf`` in fp32 on the first ``--ref-samples`` samples, the reference. The states are compared
sample by sample (``sample_index``) at the same aux ids, for each aux id and for ``last``:
relative error ``|a - b| / |b|`` over all tokens and the worst token's. vLLM matches "within
bf16 tolerance" when its error against the fp32 reference is at most twice that of the ``hf``
backend's own bf16 run (plus 1e-3), at every id. tokens/s are the stage's own (extraction
only), beside each run's wall time (with loading the verifier or starting the engine).

A section ``quantized`` in ``--only`` runs ``bench/eagle3/quantized_verifier.py`` there, its JSON kept.

    python -m bench.eagle3.hidden_states_backends [--out DIR] [--only h200,deepseek,deepseek_fp8]
                                           [--samples N] [--budget-s 520]

Writes ``hidden_states_backends.json`` (rewritten after every run) and the stages' logs to
``--out`` (default ``$OUT``, else the current directory). Needs a GPU and vLLM on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

T0 = time.perf_counter()

VERIFIERS = {
    # examples/eagle3-h200.yaml's verifier stage, fewer steps and samples
    "h200": dict(vocab_size=2048, corpus_files=200, hidden_size=384, layers=18, heads=6,
                 kv_heads=2, intermediate_size=1152, train_samples=2000, steps=60,
                 batch_size=64, lr=0.0015),
    "deepseek": dict(arch="deepseek_v3", vocab_size=2048, corpus_files=200, hidden_size=2048,
                     layers=6, heads=16, kv_heads=16, intermediate_size=4096, experts=16,
                     experts_per_token=4, train_samples=400, steps=8, batch_size=16,
                     lr=0.001),
}


TINY = dict(vocab_size=400, corpus_files=6, hidden_size=64, layers=7, heads=4, kv_heads=2,
            intermediate_size=128, train_samples=100, steps=4, batch_size=8)


def log(msg: str) -> None:
    print(f"[bench {time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def argv_of(params: dict) -> list[str]:
    from pipeline.actions import params_to_argv

    return params_to_argv(params)


def run_module(module: str, params: dict, result: Path, timeout: float) -> dict:
    """``python -m module`` as the runner starts a stage; its result JSON. A vLLM process
    can hang at interpreter exit once its work is done: 10 s after the result file appears
    the process group is stopped."""
    cmd = [sys.executable, "-m", module, *argv_of(params), "--result", str(result)]
    if result.exists():
        result.unlink()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    seen = None
    while True:
        try:
            proc.wait(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.perf_counter()
        if result.exists() and seen is None:
            seen = now
        if (seen is not None and now - seen > 10) or now - t0 > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
    wall = time.perf_counter() - t0
    if not result.exists():
        raise RuntimeError(f"{module} wrote no result (rc {proc.returncode}, {wall:.0f}s)")
    data = json.loads(result.read_text())
    data["wall_seconds"] = round(wall, 1)
    if data.get("error"):
        raise RuntimeError(f"{module}: {data['error']}")
    return data


def samples_file(path: Path, n: int, turns: int = 4) -> Path:
    """``n`` synthetic chats of ``turns`` exchanges each (about 300 tokens: long enough that
    the forwards, not the calls, set the time)."""
    from pipeline.eagle3.text import synthetic

    words = synthetic.stdlib_words(synthetic.stdlib_files(6))
    tasks = synthetic.make_tasks(n * turns, 11, words)
    rows = []
    for i in range(n):
        messages = []
        for q, r, a in tasks[i * turns:(i + 1) * turns]:
            messages += [{"role": "user", "content": q},
                         {"role": "assistant", "content": f"<think>{r}</think>{a}"}]
        rows.append({"id": f"s{i:05d}", "messages": messages})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def by_sample(hidden_dir: Path, keep: set[int] | None = None) -> dict[int, tuple]:
    from pipeline.eagle3.states.shards import ShardReader, list_shards

    out = {}
    for info in list_shards(hidden_dir)[1]:
        r = ShardReader(info.path)
        for j, i in enumerate(r.sample_index.tolist()):
            if keep is None or i in keep:
                s = r.sample(j)
                out[i] = (s["aux"].float(), s["last"].float())
    return out


def compare(a: dict, b: dict, hidden: int, aux_layers: list[int]) -> dict:
    """Relative errors of ``a`` against ``b`` (the reference), per aux id and for last."""
    import torch

    common = sorted(set(a) & set(b))
    out = {}
    names = [f"aux{k}" for k in aux_layers] + ["last"]
    for n, name in enumerate(names):
        num = den = 0.0
        worst = 0.0
        cos_min = 1.0
        for i in common:
            if name == "last":
                x, y = a[i][1], b[i][1]
            else:
                x = a[i][0][:, n * hidden:(n + 1) * hidden]
                y = b[i][0][:, n * hidden:(n + 1) * hidden]
            d = (x - y)
            num += float(d.pow(2).sum())
            den += float(y.pow(2).sum())
            per_tok = d.norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-12)
            worst = max(worst, float(per_tok.max()))
            cos_min = min(cos_min, float(torch.nn.functional.cosine_similarity(x, y, dim=-1)
                                         .min()))
        out[name] = {"rel_err": (num / den) ** 0.5 if den else None,
                     "worst_token_rel_err": worst, "min_cosine": cos_min}
    out["samples"] = len(common)
    return out


def one_verifier(name: str, args, work: Path, info: dict) -> None:
    from pipeline.eagle3 import hidden_states as _hs  # noqa: F401  (import check before work)

    d = work / name
    entry: dict = info.setdefault("verifiers", {}).setdefault(name, {})
    base = "deepseek" if name == "deepseek_fp8" else name
    vdir = work / base / "verifier"
    if not (vdir / "config.json").is_file():
        given = VERIFIERS[base] if not args.tiny else {
            **TINY, **({"arch": "deepseek_v3"} if base == "deepseek" else {})}
        params = {"out": vdir, "seed": 0, "check_prompts": 0, "device": args.device, **given}
        res = run_module("pipeline.eagle3.build_verifier", params, work / base / "verifier.json", 400)
        info["verifiers"].setdefault(base, {})["build"] = {
            k: res["metrics"].get(k) for k in ("params", "architecture", "final_loss")} | {
            "wall_seconds": res["wall_seconds"], "params_given": given}
        log(f"{base}: verifier built ({res['metrics'].get('params')} params, "
            f"{res['wall_seconds']}s)")
    tokens = work / base / "tokens"
    if not (tokens / "tokens.safetensors").is_file():
        n = args.samples if args.samples else (1500 if base == "deepseek" else 5000)
        samples = samples_file(work / base / "samples.jsonl", n)
        res = run_module("pipeline.eagle3.tokenize", {"samples": samples, "verifier": vdir,
                                                      "out": tokens, "mode": "chat",
                                                      "max_length": 384},
                         work / base / "tokenize.json", 300)
        info["verifiers"].setdefault(base, {})["tokens"] = res["metrics"].get("tokens")
    hf_dir, engine_dir = vdir, vdir
    if name == "deepseek_fp8":
        from pipeline.eagle3.hardware.quantize_checkpoint import quantize_dir

        engine_dir, hf_dir = d / "fp8", d / "twin"
        entry["quantize"] = quantize_dir(vdir, engine_dir, "fp8", twin=hf_dir)
        log(f"{name}: FP8 checkpoint {entry['quantize']}")
    vcfg = json.loads((vdir / "config.json").read_text())
    hidden, n_layers = vcfg["hidden_size"], vcfg["num_hidden_layers"]
    aux = [2, n_layers // 2, n_layers - 3]
    if len(set(aux)) < 3:  # vLLM's default repeats an id below 7 layers
        aux = [1, n_layers // 2, n_layers - 2]
    common = {"tokens": tokens, "aux_layers": aux, "shard_tokens": 262144,
              "batch_tokens": args.batch_tokens, "device": args.device}
    runs = {
        "hf_bf16": ("pipeline.eagle3.hidden_states", {"verifier": hf_dir, "dtype": "bfloat16"}),
        "vllm_bf16": ("pipeline.eagle3.hidden_states",
                      {"verifier": engine_dir, "backend": "vllm", "dtype": "bfloat16",
                       "gpu_memory_utilization": 0.8,
                       "enforce_eager": name in args.eager.split(",")}),
        "hf_fp32_ref": ("pipeline.eagle3.hidden_states",
                        {"verifier": hf_dir, "dtype": "float32", "limit": args.ref_samples}),
    }
    if name == "deepseek_fp8":  # the same engine on the twin, and what FP8 implies
        runs["vllm_twin_bf16"] = ("pipeline.eagle3.hidden_states",
                                  {**runs["vllm_bf16"][1], "verifier": hf_dir})
        runs["hf_e4m3_sim"] = ("bench.eagle3.e4m3_inputs",
                               {"verifier": hf_dir, "dtype": "bfloat16",
                                "limit": args.ref_samples})
    entry["aux_layers"] = aux
    entry.setdefault("runs", {})
    for run, (module, extra) in runs.items():
        left = args.budget_s - (time.perf_counter() - T0)
        if left < 30:
            entry["runs"][run] = {"skipped": f"out of budget ({left:.0f}s left)"}
            continue
        try:
            res = run_module(module, {**common, **extra, "out": d / run}, d / f"{run}.json",
                             min(left, 300))
            m = res["metrics"]
            busy = (m.get("extract_seconds") or 0) - (m.get("write_stall_seconds") or 0)
            m["tokens_per_s_without_write_waits"] = round(m["tokens"] / busy, 1) \
                if busy > 0 and m.get("tokens") else None
            entry["runs"][run] = {k: m.get(k) for k in (
                "tokens_per_s_without_write_waits", "write_stall_seconds", "engine_seconds",
                "tokens", "samples", "tokens_per_s", "extract_seconds", "engine_start_seconds",
                "written_gb", "write_gb_s", "write_stall_share", "disk_bound",
                "engine_layer_ids", "stored_weight_bytes")} | {
                "wall_seconds": res["wall_seconds"], "args": {k: str(v) for k, v in
                                                              extra.items()}}
            log(f"{name} {run}: {m.get('tokens_per_s')} tokens/s, wall {res['wall_seconds']}s")
        except Exception as exc:  # one failed run must not lose the others' figures
            entry["runs"][run] = {"error": f"{type(exc).__name__}: {exc}",
                                  "trace": traceback.format_exc()[-2000:]}
            log(f"{name} {run}: FAILED {exc}")
        write(info, args.out)
    done = {r for r, v in entry["runs"].items() if "error" not in v and "skipped" not in v}
    loaded: dict[str, dict] = {}

    def states(run: str) -> dict:  # each run's shards read once, on the reference's samples
        if run not in loaded:
            keep = None if run == "hf_fp32_ref" else set(states("hf_fp32_ref"))
            loaded[run] = by_sample(d / run, keep)
        return loaded[run]

    c = entry.setdefault("compare", {})
    if {"hf_bf16", "vllm_bf16", "hf_fp32_ref"} <= done:
        ref, hf, vl = states("hf_fp32_ref"), states("hf_bf16"), states("vllm_bf16")
        c.update({"vllm_vs_hf_bf16": compare(vl, hf, hidden, aux),
                  "vllm_vs_fp32_ref": compare(vl, ref, hidden, aux),
                  "hf_bf16_vs_fp32_ref": compare(hf, ref, hidden, aux)})
        ok = all(c["vllm_vs_fp32_ref"][k]["rel_err"]
                 <= 2 * c["hf_bf16_vs_fp32_ref"][k]["rel_err"] + 1e-3
                 for k in [f"aux{k}" for k in aux] + ["last"])
        entry["within_bf16_tolerance"] = ok
        hf_rate = entry["runs"]["hf_bf16"]["tokens_per_s"]
        v_rate = entry["runs"]["vllm_bf16"]["tokens_per_s"]
        entry["vllm_over_hf_tokens_per_s"] = round(v_rate / hf_rate, 3) if hf_rate else None
        log(f"{name}: vllm within bf16 tolerance: {ok}")
    if {"vllm_bf16", "hf_fp32_ref", "vllm_twin_bf16", "hf_e4m3_sim"} <= done:
        fp8_check(entry, states, hidden, aux)
    for run in runs:  # the shards are big (deepseek: ~8 GB a run); the figures are kept
        shutil.rmtree(d / run, ignore_errors=True)
    write(info, args.out)


def fp8_check(entry: dict, states, hidden: int, aux: list[int]) -> None:
    """The FP8 checkpoint in vLLM (the ``vllm_bf16`` run of ``deepseek_fp8``) against its
    twin: its error against the twin's fp32 reference next to what FP8 implies (the twin
    with e4m3-rounded inputs), and vLLM's tokens/s on FP8 against the same engine on the
    twin. ``states(run)`` gives a run's states by sample."""
    ref, fp8, twin = states("hf_fp32_ref"), states("vllm_bf16"), states("vllm_twin_bf16")
    c = entry["compare"]
    if "vllm_vs_fp32_ref" not in c:
        c["vllm_vs_fp32_ref"] = compare(fp8, ref, hidden, aux)
    c["vllm_twin_vs_fp32_ref"] = compare(twin, ref, hidden, aux)
    c["e4m3_sim_vs_fp32_ref"] = compare(states("hf_e4m3_sim"), ref, hidden, aux)
    c["vllm_fp8_vs_vllm_twin"] = compare(fp8, twin, hidden, aux)
    ids = [f"aux{k}" for k in aux] + ["last"]
    ratio = {k: round(c["vllm_vs_fp32_ref"][k]["rel_err"]
                      / c["e4m3_sim_vs_fp32_ref"][k]["rel_err"], 3) for k in ids}
    entry["fp8_over_e4m3_sim"] = ratio
    entry["fp8_within_what_fp8_implies"] = all(r <= 1.5 for r in ratio.values())
    r = entry["runs"]
    entry["vllm_fp8_over_twin_tokens_per_s"] = round(
        r["vllm_bf16"]["tokens_per_s"] / r["vllm_twin_bf16"]["tokens_per_s"], 3)
    log(f"deepseek_fp8: FP8 in vLLM within what FP8 implies (<= 1.5x the e4m3 simulation's "
        f"error): {entry['fp8_within_what_fp8_implies']} {ratio}; tokens/s FP8/twin "
        f"{entry['vllm_fp8_over_twin_tokens_per_s']}")


def quantized(args, info: dict) -> None:
    """bench/eagle3/quantized_verifier.py (FP8 against its bf16 twin in transformers), its JSON
    beside this one, in what is left of the budget."""
    script = Path(__file__).with_name("quantized_verifier.py")
    if not script.is_file():
        info["quantized_verifier"] = {"skipped": "bench/eagle3/quantized_verifier.py is not here"}
        return
    left = min(args.quantized_s, args.budget_s + 40 - (time.perf_counter() - T0))
    t0 = time.perf_counter()
    log(f"quantized_verifier.py, {left:.0f}s left")
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.eagle3.quantized_verifier", "--out",
                               str(args.out)], cwd=ROOT,
                              timeout=max(left, 30))
        info["quantized_verifier"] = {"rc": proc.returncode,
                                      "wall_seconds": round(time.perf_counter() - t0, 1)}
    except subprocess.TimeoutExpired:
        info["quantized_verifier"] = {"timed_out_after_s": round(left, 1)}
    write(info, args.out)


def write(info: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".hidden_states_backends.json.tmp"
    tmp.write_text(json.dumps(info, indent=2, default=str))
    tmp.replace(out / "hidden_states_backends.json")


def table(info: dict) -> str:
    lines = [f"{'verifier':<13} {'run':<12} {'tokens/s':>10} {'no-wait':>10} {'wall s':>7} "
             f"{'rel err aux (worst id)':>22} {'rel err last':>12}"]
    for name, e in info.get("verifiers", {}).items():
        c = e.get("compare", {})
        for run, r in e.get("runs", {}).items():
            key = {"vllm_bf16": "vllm_vs_fp32_ref", "hf_bf16": "hf_bf16_vs_fp32_ref",
                   "vllm_twin_bf16": "vllm_twin_vs_fp32_ref",
                   "hf_e4m3_sim": "e4m3_sim_vs_fp32_ref"}.get(run)
            errs = c.get(key) if key else None
            aux_err = max(v["rel_err"] for k, v in errs.items() if k.startswith("aux")) \
                if errs else None
            last = errs["last"]["rel_err"] if errs else None
            rate = r.get("tokens_per_s")
            busy = r.get("tokens_per_s_without_write_waits")
            lines.append(f"{name:<13} {run:<12} "
                         f"{(f'{rate:.0f}' if rate else r.get('error', r.get('skipped', '-'))[:10]):>10} "
                         f"{(f'{busy:.0f}' if busy else '-'):>10} "
                         f"{r.get('wall_seconds', '-')!s:>7} "
                         f"{(f'{aux_err:.2e}' if aux_err is not None else '-'):>22} "
                         f"{(f'{last:.2e}' if last is not None else '-'):>12}")
        if "within_bf16_tolerance" in e:
            lines.append(f"{name:<13} vllm within bf16 tolerance: {e['within_bf16_tolerance']}; "
                         f"vllm/hf tokens/s {e.get('vllm_over_hf_tokens_per_s')}")
        if "fp8_within_what_fp8_implies" in e:
            lines.append(f"{name:<13} FP8 within what FP8 implies: "
                         f"{e['fp8_within_what_fp8_implies']} (error / e4m3 simulation's: "
                         f"{e['fp8_over_e4m3_sim']}); vllm tokens/s FP8/twin "
                         f"{e['vllm_fp8_over_twin_tokens_per_s']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    p.add_argument("--work", default="auto",
                   help="where verifiers, tokens and shards go (auto: /dev/shm when it has "
                        "40 GB free, so the disk does not set the pace, else /tmp)")
    p.add_argument("--only", default="h200,deepseek,deepseek_fp8",
                   help="sections in order; 'quantized' runs bench/eagle3/quantized_verifier.py")
    p.add_argument("--quantized-s", type=float, default=150.0,
                   help="the most seconds bench/eagle3/quantized_verifier.py may take")
    p.add_argument("--eager", default="deepseek_fp8",
                   help="sections whose vLLM runs without torch.compile/CUDA graphs")
    p.add_argument("--samples", type=int, default=0,
                   help="chats per verifier (0: 5000 for h200, 1500 for deepseek)")
    p.add_argument("--ref-samples", type=int, default=200)
    p.add_argument("--batch-tokens", type=int, default=16384)
    p.add_argument("--budget-s", type=float, default=520.0,
                   help="stop starting runs after this many seconds")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true",
                   help="tiny verifiers (a smoke test of this script on the CPU, with "
                        "--device cpu)")
    args = p.parse_args(argv)
    import torch

    if args.work == "auto":
        shm = Path("/dev/shm")
        fast = shm.is_dir() and shutil.disk_usage(shm).free > 40e9
        args.work = (shm if fast else Path("/tmp")) / "hs-backends"
    args.work = Path(args.work)
    args.work.mkdir(parents=True, exist_ok=True)

    info: dict = {"command": "python -m bench.eagle3.hidden_states_backends " + " ".join(argv or
                                                                                  sys.argv[1:]),
                  "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                  "torch": torch.__version__, "work": str(args.work),
                  "work_free_gb": round(shutil.disk_usage(args.work).free / 1e9, 1)}
    try:
        import transformers
        import vllm

        info["vllm"], info["transformers"] = vllm.__version__, transformers.__version__
    except ImportError as exc:
        info["vllm"] = f"absent ({exc})"
    write(info, args.out)
    for name in [n for n in args.only.split(",") if n]:
        if name == "quantized":
            quantized(args, info)
            continue
        if name == "deepseek_fp8":
            try:
                import pipeline.eagle3.hardware.quantize_checkpoint  # noqa: F401
            except ImportError:
                info.setdefault("verifiers", {})[name] = {
                    "skipped": "pipeline.eagle3.hardware.quantize_checkpoint is not here"}
                continue
        if args.budget_s - (time.perf_counter() - T0) < 60:
            info.setdefault("verifiers", {})[name] = {"skipped": "out of budget"}
            continue
        try:
            one_verifier(name, args, args.work, info)
        except Exception as exc:
            info.setdefault("verifiers", {}).setdefault(name, {})["error"] = (
                f"{type(exc).__name__}: {exc}")
            log(f"{name}: FAILED {exc}")
        write(info, args.out)
    info["total_seconds"] = round(time.perf_counter() - T0, 1)
    write(info, args.out)
    print(table(info), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
