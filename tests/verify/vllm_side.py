"""The real-vLLM compatibility test's half that runs in vLLM's own interpreter.

Run by path (``PY -c 'runpy...' vllm_side.py IN.json OUT_DIR``, as
:func:`pipeline.vllm.compat.ask` runs the probe): it cannot import this project, so it
loads ``pipeline/vllm/probe.py`` by path too (and through it ``pipeline/vllm/drafter.py``). For one drafter export and its verifier it:

1. parses the ``vllm serve`` command line ``eagle3.serve`` builds with vLLM's own parser
   and turns it into ``AsyncEngineArgs``;
2. builds vLLM's ``ModelConfig``/``SpeculativeConfig``/``VllmConfig`` for the pair;
3. builds vLLM's drafter class on the CPU (its paged attention swapped for plain causal
   attention, the one part that needs vLLM's CUDA kernels) and loads the export through
   vLLM's own model loader; records every parameter against the file's tensors;
4. shares the target's embeddings as vLLM's proposer does when the export has none, and
   runs the drafter forward (``combine_hidden_states``, ``forward``, ``compute_logits``)
   on the inputs the test sends: the verifier's aux states, tokens and positions of a
   sequence; then the same rows with one draft row appended (the given draft token at the
   next position, reading the last row's pre-norm output): attention over all rows is
   what vLLM's cached step computes;
5. for a P-EAGLE export (served with ``parallel_drafting``): the proposer's parallel
   drafting forward, one pass over the same rows and ``k - 1`` rows that read vLLM's
   mask token (the config's ``pard_token``) and the projected ``mask_hidden``
   (``combine_hidden_states(mask_hidden)``, as the proposer computes it at load), at the
   next positions.

Writes ``OUT_DIR/answer.json`` and ``OUT_DIR/outputs.safetensors``.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from typing import Any


def main(request_path: str, out_dir: str) -> int:
    t0 = time.perf_counter()
    with open(request_path) as fh:
        request = json.load(fh)
    probe = runpy.run_path(request["probe"])
    drafter = probe["vllm_drafter"]()
    import torch
    from safetensors.torch import load_file, save_file

    answer: dict[str, Any] = {"version": probe["installed_version"]()[0]}
    answer["serve_args"] = _parse_serve(request["serve_argv"])

    config = drafter["vllm_configs"](request["verifier"], request["drafter"],
                                     dtype=request.get("dtype", "float32"))
    spec = config.speculative_config
    hf = spec.draft_model_config.hf_config
    answer["configs"] = {
        "method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
        "draft_architectures": list(getattr(hf, "architectures", None) or []),
        "draft_vocab_size": getattr(hf, "draft_vocab_size", None),
        "aux_layer_ids": drafter["aux_ids"](config),
        "norm_before_residual": bool(getattr(hf, "norm_before_residual", False)),
        "parallel_drafting": bool(getattr(spec, "parallel_drafting", False)),
        "pard_token": getattr(hf, "pard_token", None),
        "target_layers": config.model_config.get_total_num_hidden_layers(),
        "target_model_type": config.model_config.hf_text_config.model_type}
    # what vLLM's default (V2) model runner cannot run of this config: a P-EAGLE server
    # falls back to the V1 runner (vLLM 0.26); releases without the check say nothing
    unsupported = getattr(config, "_get_v2_model_runner_unsupported_features", None)
    answer["v2_runner_unsupported"] = list(unsupported()) if unsupported else None

    model, cls_name = drafter["build_drafter"](config, device="cpu")
    answer["class"] = cls_name
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader

    with set_current_vllm_config(config):
        get_model_loader(config.load_config).load_weights(model, spec.draft_model_config)
    answer["has_own_embed_tokens"] = bool(getattr(model, "has_own_embed_tokens", False))
    answer["has_own_lm_head"] = bool(getattr(model, "has_own_lm_head", False))
    tensors = load_file(_weights(request["drafter"]))
    answer["loaded"] = _compare_with_file(model, tensors, request["layer_prefix"])
    if hasattr(model, "mask_hidden"):  # a buffer, copied by load_weights, not a parameter
        want = tensors["mask_hidden"].float().view(1, -1)
        answer["mask_hidden"] = float((model.mask_hidden.float() - want).abs().max())

    params = dict(model.named_parameters())
    if not answer["has_own_embed_tokens"]:
        # what vLLM's proposer does: the draft model uses the target's embedding layer
        target = load_file(_weights(request["verifier"]))
        embed = target["model.embed_tokens.weight"]
        with torch.no_grad():
            params["model.embed_tokens.weight"][: embed.shape[0]].copy_(embed)
    inputs = load_file(request["inputs"])
    outputs = {}
    with set_current_vllm_config(config), torch.no_grad():
        dtype = config.model_config.dtype
        ids, pos = inputs["ids"], inputs["positions"]
        hidden = model.combine_hidden_states(inputs["aux"].to(dtype))
        normed, prenorm = model(ids, pos, hidden)
        outputs.update(_outputs(model, "prefill", hidden, normed, prenorm))
        # one draft step: a row for the draft token at the next position, reading the last
        # row's pre-norm output; attention over every row equals vLLM's cached step
        ids2 = torch.cat([ids, inputs["draft_token"]])
        pos2 = torch.cat([pos, pos[-1:] + 1])
        hidden2 = torch.cat([hidden, prenorm[-1:]])
        normed2, prenorm2 = model(ids2, pos2, hidden2)
        outputs.update(_outputs(model, "draft", hidden2[-1:], normed2[-1:], prenorm2[-1:]))
        if answer["configs"]["parallel_drafting"]:
            # the proposer: mask rows read pard_token and combine_hidden_states(mask_hidden)
            extra = spec.num_speculative_tokens - 1
            mask = model.combine_hidden_states(model.mask_hidden.view(-1))
            ids3 = torch.cat([ids, torch.full((extra,), int(hf.pard_token),
                                              dtype=ids.dtype)])
            pos3 = torch.arange(pos[0], pos[0] + len(ids3), dtype=pos.dtype)
            hidden3 = torch.cat([hidden, mask.expand(extra, -1)])
            normed3, prenorm3 = model(ids3, pos3, hidden3)
            rows = extra + 1  # the bonus row and the mask rows: one draft each
            outputs.update(_outputs(model, "parallel", hidden3[-rows:], normed3[-rows:],
                                    prenorm3[-rows:]))
    save_file({k: v.contiguous() for k, v in outputs.items()},
              os.path.join(out_dir, "outputs.safetensors"))
    answer["seconds"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(out_dir, "answer.json"), "w") as fh:
        json.dump(answer, fh, indent=1, default=str)
    return 0


def _outputs(model: Any, name: str, hidden: Any, normed: Any, prenorm: Any) -> dict[str, Any]:
    return {f"{name}.fc": hidden.float(), f"{name}.normed": normed.float(),
            f"{name}.prenorm": prenorm.float(),
            f"{name}.logits": model.compute_logits(normed).float(),
            f"{name}.draft_logits": model.logits_processor(model.lm_head, normed).float()}


def _weights(directory: str) -> str:
    (name,) = [f for f in os.listdir(directory) if f.endswith(".safetensors")]
    return os.path.join(directory, name)


def _parse_serve(argv: list[str]) -> dict[str, Any]:
    """``vllm serve ...`` through vLLM's own CLI parser, as ``vllm`` itself builds it."""
    import vllm
    from vllm import platforms
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # The parser's defaults build a DeviceConfig, which cannot infer a device here; vLLM's
    # own CLI switches to the CPU platform for `vllm bench` on such machines. Do the same
    # while parsing only.
    previous = platforms.current_platform
    if previous.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform
        platforms.current_platform = CpuPlatform()
    try:
        parser = FlexibleArgumentParser(prog="vllm")
        sub = parser.add_subparsers(dest="subparser")
        ServeSubcommand().subparser_init(sub)
        args = parser.parse_args(argv[1:])  # argv[0] is the executable
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        engine = vllm.AsyncEngineArgs.from_cli_args(args)
    finally:
        platforms.current_platform = previous
    return {"model": engine.model, "speculative_config": engine.speculative_config,
            "port": getattr(args, "port", None), "host": getattr(args, "host", None)}


def _compare_with_file(model: Any, tensors: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Every vLLM parameter against the file's tensors it should hold: max |diff|."""
    import torch

    def layer(name: str) -> Any:
        return tensors[prefix + name].float()

    expected = {
        "model.layers.0.self_attn.qkv_proj.weight": torch.cat(
            [layer("self_attn.q_proj.weight"), layer("self_attn.k_proj.weight"),
             layer("self_attn.v_proj.weight")]),
        "model.layers.0.self_attn.o_proj.weight": layer("self_attn.o_proj.weight"),
        "model.layers.0.mlp.gate_up_proj.weight": torch.cat(
            [layer("mlp.gate_proj.weight"), layer("mlp.up_proj.weight")]),
        "model.layers.0.mlp.down_proj.weight": layer("mlp.down_proj.weight"),
        "model.layers.0.input_layernorm.weight": layer("input_layernorm.weight"),
        "model.layers.0.post_attention_layernorm.weight":
            layer("post_attention_layernorm.weight"),
        "model.layers.0.hidden_norm.weight": layer("hidden_norm.weight"),
        "model.fc.weight": tensors["fc.weight"].float(),
        "model.norm.weight": tensors["norm.weight"].float(),
        "lm_head.weight": tensors["lm_head.weight"].float(),
        "draft_id_to_target_id": tensors["d2t"].float(),
    }
    out = {}
    for name, param in model.named_parameters():
        want = expected.get(name)
        if want is None:
            out[name] = None
            continue
        got = param.detach().float()
        out[name] = (float((got - want).abs().max()) if got.shape == want.shape
                     else f"shape {list(got.shape)} != {list(want.shape)}")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
