"""Before serving: will this host serve this verifier with this drafter? One named check per
problem, each saying what to change.

Run on the GPU host, as a stage, before the serve stages:

- ``vllm_installed``, ``vllm_eagle3_target``, ``vllm_eagle3_drafter``: asked of the host's
  own vLLM (:mod:`pipeline.vllm.compat`; a table of known rules when vLLM is absent,
  labelled as a fallback);
- ``model_files``: verifier and drafter directories (or hub-cache snapshots) with weights;
- ``drafter_d2t``: a drafter with a smaller vocabulary carries ``d2t`` (vLLM silently uses
  the identity mapping without it, and acceptance collapses);
- ``gpu_count``, ``gpu_memory``: GPUs (``nvidia-smi --query-gpu``, else torch) against the
  tensor-parallel size and the weights each GPU must hold;
- ``tensor_parallel_heads``, ``draft_tensor_parallel_size``: what vLLM requires of TP;
- ``port_<N>_free`` for each port the serve stages will use;
- ``log_disk``: free space where the servers' logs go.

Run as ``python -m pipeline.eagle3.preflight --target DIR --draft DIR --ports '[8000, 8001]'``;
``docs/serving.md`` lists every parameter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.actions import (
    PASS,
    TABLE_CHECKS,
    StageResult,
    check_status,
    make_parser,
    run_action,
    table_note,
)
from pipeline.errors import ActionError
from pipeline.vllm.compat import compat_checks
from pipeline.vllm.model_files import ModelFiles, read_model, text_config
from pipeline.vllm.server import command_arg, port_in_use, port_owner

ACTION = "eagle3.preflight"
GIB = 1024**3


@dataclass
class GPU:
    index: int
    name: str
    total: int   # bytes
    used: int    # bytes

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "total_gib": round(self.total / GIB, 2),
                "used_gib": round(self.used / GIB, 2)}


def _visible(indices: list[int]) -> list[int]:
    """Apply CUDA_VISIBLE_DEVICES (numeric form) to nvidia-smi's indices."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return indices
    wanted = [p.strip() for p in env.split(",") if p.strip()]
    if not all(w.isdigit() for w in wanted):
        return indices  # UUIDs or MIG names: keep all, the count may be high
    return [int(w) for w in wanted if int(w) in indices]


def find_gpus() -> tuple[list[GPU], str]:
    """The GPUs this process may use, and how they were found."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=index,name,memory.total,memory.used",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return [], f"nvidia-smi failed: {exc}"
        if out.returncode == 0:
            gpus = []
            for line in out.stdout.splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) < 4:
                    continue
                try:
                    gpus.append(GPU(int(parts[0]), parts[1], int(float(parts[2])) * 1024**2,
                                    int(float(parts[3])) * 1024**2))
                except ValueError:
                    continue
            keep = set(_visible([g.index for g in gpus]))
            return [g for g in gpus if g.index in keep], "nvidia-smi"
        last = (out.stderr or out.stdout).strip().splitlines()
        smi_error = f"nvidia-smi exit {out.returncode}: {last[-1] if last else ''}"
    else:
        smi_error = "nvidia-smi not on PATH"
    try:
        import torch
    except ImportError:
        return [], f"{smi_error}; torch not importable"
    if not torch.cuda.is_available():
        return [], f"{smi_error}; torch sees no CUDA device"
    gpus = []
    for i in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(i)
        gpus.append(GPU(i, torch.cuda.get_device_name(i), int(total), int(total - free)))
    return gpus, "torch.cuda"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Check a GPU host before serving a verifier with an EAGLE-3 "
                            "drafter: vLLM's eagle3 support, GPUs, ports, disk.")
    p.add_argument("--target", required=True, help="verifier directory or model id")
    p.add_argument("--draft", help="drafter directory")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--draft-tensor-parallel-size", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--kv-headroom-gb", type=float, default=2.0,
                   help="GPU memory each GPU needs beyond the weights (KV cache, "
                        "activations)")
    p.add_argument("--servers", type=int, default=1,
                   help="servers sharing these GPUs (2 when baseline and speculative run "
                        "side by side on one GPU)")
    p.add_argument("--ports", type=json.loads, default=[8000], help="JSON list of ports")
    p.add_argument("--host", default="127.0.0.1", help="address the servers will bind")
    p.add_argument("--log-dir", type=Path, default=Path("."),
                   help="where the servers' logs go (the host's workdir)")
    p.add_argument("--min-free-gb", type=float, default=1.0)
    p.add_argument("--vllm-python", help="interpreter with vLLM (default: this one)")
    p.add_argument("--vllm-version", help="for the fallback table when vLLM is not "
                                          "importable")
    p.add_argument("--command", type=command_arg, default=None,
                   help='the serve stages\' server command, e.g. ["vllm"], asked for '
                        '--version when vLLM is not importable here')
    return p


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _model_checks(result: StageResult, target: ModelFiles, draft: ModelFiles | None) -> None:
    problems = target.problems + (draft.problems if draft else [])
    found = [f"{m.name}: {m.weight_files} file(s), {_gib(m.weight_bytes)}"
             for m in (target, draft) if m is not None and m.found]
    result.check("model_files", not problems, value="; ".join(found) or None,
                 message="; ".join(problems) if problems else "verifier and drafter found")
    if draft is None or not draft.found:
        return
    cfg = draft.config
    draft_vocab = cfg.get("draft_vocab_size") or (cfg.get("transformer_layer_config") or {}
                                                  ).get("draft_vocab_size")
    vocab = text_config(target.config).get("vocab_size") or cfg.get("vocab_size")
    if draft_vocab and vocab and int(draft_vocab) < int(vocab):
        has = "d2t" in draft.tensors
        result.check("drafter_d2t", has, value="d2t present" if has else "d2t missing",
                     expected=f"d2t for draft_vocab_size {draft_vocab} < vocab {vocab}",
                     message="the draft-to-target vocabulary map is there" if has else
                     "without d2t vLLM silently maps draft ids 1:1 to target ids and "
                     "acceptance collapses: re-export the drafter with its d2t")


def _gpu_checks(result: StageResult, args: argparse.Namespace, gpus: list[GPU], how: str,
                target: ModelFiles, draft: ModelFiles | None) -> None:
    tp, dtp = args.tensor_parallel_size, args.draft_tensor_parallel_size
    heads = text_config(target.config).get("num_attention_heads")
    if isinstance(heads, int) and heads > 0:
        result.check("tensor_parallel_heads", heads % tp == 0, value=f"{heads} heads",
                     expected=f"divisible by {tp}",
                     message="" if heads % tp == 0 else
                     f"vLLM splits attention heads across GPUs: choose a tensor_parallel_size"
                     f" that divides {heads}")
    if draft is not None:
        result.check("draft_tensor_parallel_size", dtp in (1, tp), value=dtp,
                     expected=f"1 or {tp}", message="" if dtp in (1, tp) else
                     "vLLM accepts a draft TP of 1 or the target's TP only")
    result.metrics["gpus"] = [g.to_json() for g in gpus]
    result.metrics["gpu_source"] = how
    if not gpus:
        result.check("gpu_count", False, value=0, expected=f">= {tp}",
                     message=f"no GPU found ({how}): vLLM needs a CUDA GPU on this host")
        return
    names = sorted({g.name for g in gpus})
    result.check("gpu_count", len(gpus) >= tp, value=len(gpus), expected=f">= {tp}",
                 message=f"{len(gpus)} x {', '.join(names)} ({how})" if len(gpus) >= tp else
                 f"tensor_parallel_size {tp} needs {tp} GPUs, this host has {len(gpus)}: "
                 f"lower tensor_parallel_size or use a bigger host")
    weights = target.weight_bytes / tp + (draft.weight_bytes / dtp if draft else 0)
    need = (weights + args.kv_headroom_gb * GIB) * args.servers
    used = gpus[:tp] if len(gpus) >= tp else gpus
    budget = min(g.total for g in used) * args.gpu_memory_utilization
    busy = [g for g in used if g.total - g.used < g.total * args.gpu_memory_utilization]
    result.metrics.update({"weights_per_gpu_gib": round(weights / GIB, 2),
                           "need_per_gpu_gib": round(need / GIB, 2),
                           "budget_per_gpu_gib": round(budget / GIB, 2)})
    if need > budget:
        fits = [t for t in (2, 4, 8) if t > tp and t <= len(gpus) and
                ((target.weight_bytes / t + (draft.weight_bytes / dtp if draft else 0))
                 + args.kv_headroom_gb * GIB) * args.servers <= budget]
        advice = (f"raise tensor_parallel_size to {fits[0]}" if fits else
                  "use GPUs with more memory, or a smaller/quantised verifier")
        result.check("gpu_memory", False, value=f"{_gib(need)} per GPU",
                     expected=f"<= {_gib(budget)}",
                     message=f"weights {_gib(weights)} + {args.kv_headroom_gb:g} GiB headroom"
                             f" x {args.servers} server(s) do not fit in "
                             f"{args.gpu_memory_utilization:g} x {_gib(min(g.total for g in used))}:"
                             f" {advice}")
    elif busy:
        g = busy[0]
        result.check("gpu_memory", False, value=f"GPU {g.index}: {_gib(g.total - g.used)} free",
                     expected=f">= {_gib(g.total * args.gpu_memory_utilization)}",
                     message=f"GPU {g.index} already has {_gib(g.used)} in use, and vLLM "
                             f"refuses to start when less than gpu_memory_utilization x total"
                             f" is free: stop what uses it, or lower gpu_memory_utilization")
    else:
        result.check("gpu_memory", True, value=f"{_gib(need)} per GPU",
                     expected=f"<= {_gib(budget)}",
                     message=f"weights {_gib(weights)} per GPU at TP {tp}")


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    ports = args.ports
    if not isinstance(ports, list) or not all(isinstance(p, int) and 0 < p < 65536
                                              for p in ports):
        raise ActionError(f"ports must be a list of port numbers, got {ports!r}")
    target = read_model(args.target, headers=False)
    draft = read_model(args.draft) if args.draft else None
    result.metrics.update({"target": args.target, "target_model_type": target.model_type,
                           "target_architectures": target.architectures,
                           "target_bytes": target.weight_bytes,
                           "target_gib": round(target.weight_bytes / GIB, 3)})
    if draft is not None:
        result.metrics.update({"draft": args.draft, "draft_architectures": draft.architectures,
                               "draft_bytes": draft.weight_bytes,
                               "draft_gib": round(draft.weight_bytes / GIB, 3)})
    print(f"verifier {args.target}: model_type {target.model_type or '?'}, "
          f"{_gib(target.weight_bytes)}" + (f"; drafter {draft.architectures}, "
                                             f"{_gib(draft.weight_bytes)}" if draft else ""),
          flush=True)

    compat, answer = compat_checks(target.config, draft.config if draft else None,
                                   python=args.vllm_python, version=args.vllm_version,
                                   command=args.command)
    result.checks += compat
    result.metrics["vllm_version"] = answer.get("version")
    result.metrics["vllm_compat_source"] = answer.get("source")
    result.metrics[TABLE_CHECKS] = sum(1 for c in compat if c.from_table)
    _model_checks(result, target, draft)

    gpus, how = find_gpus()
    _gpu_checks(result, args, gpus, how, target, draft)

    for port in ports:
        busy = port_in_use(port, args.host) or port_in_use(port, "127.0.0.1")
        owner = port_owner(port) if busy else None
        result.check(f"port_{port}_free", not busy, value="in use" if busy else "free",
                     message=(f"port {port} is in use" + (f" by {owner}" if owner else "")
                              + ": stop that server or give the serve stage another port")
                     if busy else "")

    try:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(args.log_dir).free
        ok = free >= args.min_free_gb * GIB
        result.check("log_disk", ok, value=_gib(free), expected=f">= {args.min_free_gb:g} GiB",
                     message=f"at {args.log_dir.resolve()}" if ok else
                     f"only {_gib(free)} free at {args.log_dir.resolve()} for server logs: "
                     "free space, or point log_dir elsewhere")
    except OSError as exc:
        result.check("log_disk", False, value=None, message=f"cannot use {args.log_dir}: {exc}")

    failed = [c.name for c in result.checks if not c.passed]
    table = table_note(result.checks)
    passed = sum(1 for c in result.checks if check_status(c) == PASS)
    result.summary = (f"preflight: {passed}/{len(result.checks)} checks passed"
                      + (f"; failed: {', '.join(failed)}" if failed else "")
                      + (f"; {table}" if table else ""))
    return result


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
