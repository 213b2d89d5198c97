#!/usr/bin/env python3
"""An FP8 block-scaled verifier in transformers against its dequantized bf16 twin.

A verifier with random weights is written in bf16, quantized to the FP8 block-scaled format
DeepSeek-V3 and Kimi-K2 ship (``pipeline.eagle3.hardware.quantize_checkpoint``: e4m3 weights, one fp32
``weight_scale_inv`` per 128 x 128 block), and its twin written in bf16 with every weight the
exact dequantization of the FP8 one. So the two differ only in the arithmetic: transformers'
FP8 kernels quantize each linear's input to e4m3 per token and 128 channels (dynamic) and
multiply in FP8. Measured in one run, on the same batch:

- the hidden states (``output_hidden_states``, every layer) of the FP8 model against the
  twin's: relative error ``|a - b| / |b|`` per layer;
- what FP8 implies: the same twin with each linear's input rounded to e4m3 per 1 x 128 block
  in torch (a simulation of the kernel's activation quantization, no FP8 kernel involved).
  The FP8 kernel is "within what FP8 implies" when its error is at most 1.5x the simulation's
  at every layer (e4m3 keeps 3 mantissa bits: unit roundoff 2^-4 = 0.0625 per element);
- the same FP8 weights computed in plain torch (``torch._scaled_mm``, e4m3 x e4m3, once
  per 128-wide input block): FP8 arithmetic that needs no kernel from the Hub, so the error
  is measured even where transformers' FP8 path cannot run (its speed is a floor, not a
  kernel's; MoE experts, fused 3-D tensors in transformers 5, stay bf16 there);
- forward tokens/s of each (``--batch`` x ``--seq`` tokens, median of ``--iters``), and the
  weight bytes each holds.

Where transformers cannot run FP8 here (the CPU: it dequantizes at load; a GPU without its
FP8 kernel) the FP8 row says so and the simulation still runs.

    python -m bench.eagle3.quantized_verifier [--out DIR] [--arch llama|deepseek_v3]   # on a GPU
    python -m bench.eagle3.quantized_verifier --device cpu --tiny                      # smoke test

Writes ``quantized_verifier.json`` to ``--out`` (default ``$OUT``, else the current dir).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path

from pipeline.eagle3.hardware.quant_formats import FP8_MAX
from pipeline.eagle3.hardware.quantize_checkpoint import quantize_dir
from pipeline.errors import exc_line

# Llama-3.1-8B's layer shape, fewer layers: big enough that the matmuls, not the launches,
# set the time on an H200.
LLAMA = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
             num_hidden_layers=8, num_attention_heads=32, num_key_value_heads=8,
             head_dim=128, rms_norm_eps=1e-5, max_position_embeddings=4096,
             tie_word_embeddings=False)
# Kimi-K2's attention (MLA ranks 1536/512) with fewer, narrower experts: the MoE path of the
# FP8 kernels at a shape that fits one GPU.
DEEPSEEK = dict(vocab_size=32000, hidden_size=7168, intermediate_size=18432,
                moe_intermediate_size=2048, num_hidden_layers=4, num_attention_heads=64,
                num_key_value_heads=64, q_lora_rank=1536, kv_lora_rank=512,
                qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                n_routed_experts=32, num_experts_per_tok=8, n_shared_experts=1,
                first_k_dense_replace=1, n_group=1, topk_group=1, rms_norm_eps=1e-6,
                max_position_embeddings=4096, num_nextn_predict_layers=0,
                tie_word_embeddings=False)
TINY = {"llama": dict(LLAMA, vocab_size=1024, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=64),
        "deepseek_v3": dict(DEEPSEEK, vocab_size=1024, hidden_size=256, intermediate_size=512,
                            moe_intermediate_size=128, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=128,
                            kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=32,
                            v_head_dim=32, n_routed_experts=4, num_experts_per_tok=2)}


def build_random(arch: str, tiny: bool, where: Path, seed: int) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, DeepseekV3Config, LlamaConfig

    shape = TINY[arch] if tiny else (LLAMA if arch == "llama" else DEEPSEEK)
    cfg = (LlamaConfig if arch == "llama" else DeepseekV3Config)(**shape)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(str(where))
    return where


def e4m3_groups(x):
    """``x``'s last dim in groups of 128 (the last zero-padded), each group quantized to
    e4m3 with its own fp32 scale, as the FP8 kernels quantize activations (dynamic, per
    token): ``(q [..., groups, 128] e4m3, s [..., groups, 1])``."""
    import torch

    k = x.shape[-1]
    pad = (-k) % 128
    xf = torch.nn.functional.pad(x.float(), (0, pad)) if pad else x.float()
    g = xf.unflatten(-1, (-1, 128))
    s = (g.abs().amax(-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    return (g / s).to(torch.float8_e4m3fn), s


def round_e4m3(x):
    """``x`` as the FP8 kernels see it: quantized per 128 channels and back."""
    q, s = e4m3_groups(x)
    return (q.float() * s).flatten(-2)[..., :x.shape[-1]].to(x.dtype)


def fake_quant_inputs(model, experts: bool = False) -> list:
    """Round every linear's input to e4m3 per token and 128 channels; returns the hooks.
    With ``experts``, also the input of each routed-experts block (fused 3-D parameters in
    transformers 5, not ``nn.Linear``): what gate_up multiplies; their down projection's
    input stays bf16, so for MoE verifiers the simulation is slightly kind to FP8."""
    import torch

    def hook(_mod, args):
        return (round_e4m3(args[0]), *args[1:])

    hooks = []
    for name, mod in model.named_modules():
        w = getattr(mod, "gate_up_proj", None)
        if (isinstance(mod, torch.nn.Linear) and not name.endswith("lm_head")) or (
                experts and isinstance(w, torch.nn.Parameter) and w.dim() == 3):
            hooks.append(mod.register_forward_pre_hook(hook))
    return hooks


class BlockFP8Linear:
    """FP8 block-scaled linear in plain torch: ``torch._scaled_mm`` (e4m3 x e4m3, fp32
    scales) once per 128-wide block of the input dim, each activation block quantized per
    token (dynamic, as transformers' kernels do) and each weight block with its 128 x 128
    block scales spread over the output columns. Not a fused kernel (one matmul per block):
    its error is FP8's, its speed a floor."""

    def __init__(self, weight, scale_inv, bias):
        import torch

        n, k = weight.shape
        self.n, self.k, self.nb = n, k, -(-k // 128)
        w = torch.zeros(n, self.nb * 128, dtype=weight.dtype, device=weight.device)
        w[:, :k] = weight
        self.w = w.view(n, self.nb, 128).permute(1, 0, 2).contiguous()      # [nb, n, 128]
        cols = scale_inv.float().repeat_interleave(128, 0)[:n]              # [n, nb]
        self.ws = cols.t().contiguous().unsqueeze(1)                        # [nb, 1, n]
        self.bias = bias

    def __call__(self, module, args):
        import torch

        x = args[0]
        lead = x.shape[:-1]
        q, s = e4m3_groups(x.reshape(-1, self.k))                           # [m, nb, 128]
        out = torch.zeros(q.shape[0], self.n, dtype=torch.float32, device=x.device)
        for j in range(self.nb):
            out += torch._scaled_mm(q[:, j].contiguous(), self.w[j].t(),
                                    scale_a=s[:, j].contiguous(), scale_b=self.ws[j],
                                    out_dtype=torch.bfloat16).float()
        if self.bias is not None:
            out += self.bias.float()
        return out.to(x.dtype).view(*lead, self.n)


def torch_fp8(model, fp8_dir: Path, device) -> tuple[int, int]:
    """Make every linear of ``model`` (the twin) that the FP8 checkpoint stores in e4m3
    compute with those weights through :class:`BlockFP8Linear`; returns how many, and the
    bytes their FP8 weights and spread scales take."""
    import torch
    from safetensors.torch import load_file

    stored = load_file(str(fp8_dir / "model.safetensors"))
    n = held = 0
    for name, mod in model.named_modules():
        key = name + ".weight"
        if isinstance(mod, torch.nn.Linear) and key in stored and \
                stored[key].dtype == torch.float8_e4m3fn:
            impl = BlockFP8Linear(stored[key].to(device),
                                  stored[name + ".weight_scale_inv"].to(device), mod.bias)
            mod.forward = lambda x, impl=impl, mod=mod: impl(mod, (x,))
            mod.weight = None  # the bf16 copy is no longer read
            n += 1
            held += impl.w.numel() + impl.ws.numel() * 4
    return n, held


def states(model, ids):
    import torch

    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    return [h.float() for h in out.hidden_states]


def rel_errors(a, b) -> list[float]:
    return [float((x - y).norm() / y.norm().clamp(min=1e-12)) for x, y in zip(a, b, strict=True)]


def tokens_per_s(model, ids, iters: int, device) -> float:
    import torch

    def once() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    for _ in range(2):
        once()
    return ids.numel() / statistics.median(once() for _ in range(iters))


def weight_bytes(model) -> dict[str, int]:
    by: dict[str, int] = {}
    for _, p in list(model.named_parameters()) + list(model.named_buffers()):
        k = str(p.dtype).removeprefix("torch.")
        by[k] = by.get(k, 0) + p.numel() * p.element_size()
    return by


def fp8_mode(model) -> str:
    """Whether transformers kept the FP8 weights or dequantized them at load."""
    import torch

    for _, p in model.named_parameters():
        if p.dtype == torch.float8_e4m3fn:
            return "fp8 kernels"
    return "dequantized to bf16 at load"


def run(args) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    info = {"device": str(device), "gpu": gpu, "torch": torch.__version__,
            "transformers": transformers.__version__, "arch": args.arch, "tiny": args.tiny,
            "batch": args.batch, "seq": args.seq}
    print(f"device {device} ({gpu}), torch {torch.__version__}, transformers "
          f"{transformers.__version__}, arch {args.arch}{' tiny' if args.tiny else ''}",
          flush=True)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        base = build_random(args.arch, args.tiny, Path(tmp) / "bf16", args.seed)
        fp8_dir, twin_dir = Path(tmp) / "fp8", Path(tmp) / "twin"
        q = quantize_dir(base, fp8_dir, "fp8", twin=twin_dir)
        info["quantized_weights"] = q["quantized"]
        info["fp8_file_bytes"] = q["bytes"]
        info["twin_file_bytes"] = (twin_dir / "model.safetensors").stat().st_size
        print(f"[bench] {q['format']}: {q['quantized']} weights, {q['bytes'] / 1e9:.3f} GB "
              f"on disk (twin {info['twin_file_bytes'] / 1e9:.3f} GB)", flush=True)

        cfg = json.loads((twin_dir / "config.json").read_text())
        gen = torch.Generator().manual_seed(args.seed + 1)
        ids = torch.randint(0, cfg["vocab_size"], (args.batch, args.seq), generator=gen)
        ids = ids.to(device)

        twin = AutoModelForCausalLM.from_pretrained(str(twin_dir), dtype=torch.bfloat16)
        twin = twin.to(device).eval()
        ref = states(twin, ids)
        hooks = fake_quant_inputs(twin)
        sim = states(twin, ids)
        for h in hooks:
            h.remove()
        info["sim_rel_err"] = rel_errors(sim, ref)
        info["bf16_tokens_per_s"] = tokens_per_s(twin, ids, args.iters, device)
        info["bf16_weight_bytes"] = weight_bytes(twin)
        del sim
        # FP8 arithmetic in plain torch on the same weights: independent of transformers'
        # FP8 kernels (which come from the Hub), so it runs wherever _scaled_mm does.
        try:
            info["torch_fp8_linears"], fp8_held = torch_fp8(twin, fp8_dir, device)
            info["torch_fp8_weight_bytes"] = {**weight_bytes(twin), "fp8 + scales": fp8_held}
            info["torch_fp8_rel_err"] = rel_errors(states(twin, ids), ref)
            info["torch_fp8_tokens_per_s"] = tokens_per_s(twin, ids, args.iters, device)
        except Exception as exc:  # a torch without FP8 matmuls here: say so
            info["torch_fp8_error"] = f"{type(exc).__name__}: {exc_line(exc)}"
        del twin
        if device.type == "cuda":
            torch.cuda.empty_cache()

        try:
            kwargs = {"device_map": str(device)} if device.type == "cuda" else {}
            fp8 = AutoModelForCausalLM.from_pretrained(str(fp8_dir), dtype=torch.bfloat16,
                                                       **kwargs).eval()
            info["fp8_mode"] = fp8_mode(fp8)
            info["fp8_weight_bytes"] = weight_bytes(fp8)
            got = states(fp8, ids)
            info["fp8_rel_err"] = rel_errors(got, ref)
            info["fp8_tokens_per_s"] = tokens_per_s(fp8, ids, args.iters, device)
        except Exception as exc:  # the FP8 path's own failure is a result to report
            info["fp8_mode"] = "failed"
            info["fp8_error"] = f"{type(exc).__name__}: {exc_line(exc)}"
            info["fp8_traceback"] = traceback.format_exc()[-3000:]
    if "torch_fp8_rel_err" in info:
        pairs = list(zip(info["torch_fp8_rel_err"], info["sim_rel_err"], strict=True))
        info["torch_fp8_within_fp8"] = all(e <= 1.5 * s + 1e-3 for e, s in pairs)
    if "fp8_rel_err" in info:
        pairs = list(zip(info["fp8_rel_err"], info["sim_rel_err"], strict=True))
        info["within_fp8"] = all(e <= 1.5 * s + 1e-3 for e, s in pairs)
        info["speedup"] = info["fp8_tokens_per_s"] / info["bf16_tokens_per_s"]
    return info


def table(info: dict) -> str:
    gib = 1 << 30

    def wb(d):
        return f"{sum(d.values()) / gib:.3f}" if d else "-"

    def errs(xs):
        if not xs:
            return "-"
        return f"{max(xs[1:] or xs):.4f} (last {xs[-1]:.4f})"

    rows = [("bf16 twin", wb(info.get("bf16_weight_bytes")), "0", f"{info['bf16_tokens_per_s']:,.0f}",
             "reference"),
            ("bf16 + e4m3 inputs (sim)", wb(info.get("bf16_weight_bytes")),
             errs(info["sim_rel_err"]), "-", "what FP8 implies")]
    if "torch_fp8_rel_err" in info:
        rows.append(("fp8, torch _scaled_mm", wb(info.get("torch_fp8_weight_bytes")),
                     errs(info["torch_fp8_rel_err"]), f"{info['torch_fp8_tokens_per_s']:,.0f}",
                     f"{info['torch_fp8_linears']} linears, one matmul per 128-block; within "
                     f"FP8: {info['torch_fp8_within_fp8']}"))
    else:
        rows.append(("fp8, torch _scaled_mm", "-", "-", "-",
                     f"failed: {info.get('torch_fp8_error')}"))
    if "fp8_rel_err" in info:
        rows.append(("fp8, transformers", wb(info.get("fp8_weight_bytes")),
                     errs(info["fp8_rel_err"]), f"{info['fp8_tokens_per_s']:,.0f}",
                     f"{info['fp8_mode']}; within FP8: {info['within_fp8']}; "
                     f"x{info['speedup']:.2f} vs bf16"))
    else:
        rows.append(("fp8, transformers", "-", "-", "-", f"failed: {info.get('fp8_error')}"))
    head = (f"{'model':<26} {'weights GiB':>11} {'rel err max (last layer)':>26} "
            f"{'tokens/s':>12}  note")
    lines = [f"quantized verifier ({info['arch']}{', tiny' if info['tiny'] else ''}) on "
             f"{info['device']} ({info['gpu']}), batch {info['batch']} x {info['seq']}",
             head, "-" * len(head)]
    lines += [f"{a:<26} {b:>11} {c:>26} {d:>12}  {e}" for a, b, c, d, e in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--arch", choices=("llama", "deepseek_v3"), default="llama")
    p.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test)")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="directory for the JSON ($OUT)")
    p.add_argument("--work", default=None, help="where the checkpoints are written (tmp)")
    args = p.parse_args(argv)
    small = args.tiny or args.device == "cpu"
    args.batch = args.batch or (2 if small else 4)
    args.seq = args.seq or (64 if small else 2048)
    args.iters = args.iters or (3 if small else 10)
    out = args.out or Path(os.environ.get("OUT") or ".")
    # transformers fetches its FP8 kernel from the Hub: offline, a cached one still loads
    # and a missing one fails at once instead of after the connection's retries.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    info = run(args)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quantized_verifier.json").write_text(json.dumps(info, indent=2) + "\n")
    print(table(info))
    if info.get("fp8_error"):
        print(f"fp8 error: {info['fp8_error']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
