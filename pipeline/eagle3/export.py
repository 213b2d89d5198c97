"""Action ``eagle3.export``: write a trained drafter in a format vLLM loads, and prove it.

Input: train's output directory (its latest checkpoint) or one checkpoint directory.
Output: ``OUT/config.json`` + ``OUT/model.safetensors`` in one of two formats.

``--format eagle`` (EAGLE / SpecForge style, vLLM ``Eagle3LlamaForCausalLM``)::

    config.json: architectures ["LlamaForCausalLMEagle3"], model_type llama, the Llama fields
      (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim,
      num_hidden_layers 1, rms_norm_eps, rope_theta, max_position_embeddings, hidden_act),
      vocab_size (the target's), draft_vocab_size, target_hidden_size,
      eagle_aux_hidden_state_layer_ids, eagle_config {eagle_aux_hidden_state_layer_ids,
      use_aux_hidden_state}, norm_before_residual
    weights: midlayer.* (vLLM renames them layers.0.*), fc.weight, norm.weight,
      lm_head.weight, d2t, t2d (vLLM skips t2d and renames d2t; without d2t it would
      silently use the identity mapping, so the export checks it is there)

``--format speculators`` (vLLM's speculators path)::

    config.json: architectures ["Eagle3Speculator"], speculators_model_type "eagle3",
      transformer_layer_config {the Llama fields}, draft_vocab_size, target_hidden_size,
      norm_before_residual, eagle_aux_hidden_state_layer_ids, speculators_config {algorithm,
      proposal_methods [{proposal_type greedy, speculative_tokens}], default_proposal_method,
      verifier {name_or_path, architectures}}
    weights: layers.0.*, fc.weight, norm.weight, lm_head.weight, d2t, t2d

A P-EAGLE checkpoint (``train --method peagle``) exports only as speculators, the format
vLLM 0.26.0 reads it in (:mod:`pipeline.eagle3.model.peagle`): ``architectures ["PEagleSpeculator"]``,
``speculators_model_type "peagle"``, ``mask_token_id`` (required by vLLM: its proposer's
``pard_token``), ``norm_before_fc`` false, ``speculators_config.algorithm "peagle"``, and
the weights above plus ``mask_hidden`` ``[1, 1, 3Ht]``; served with
``parallel_drafting: true`` (``eagle3.serve`` sets it for such a drafter).

``embed_tokens`` is left out unless ``--include-embeddings``: vLLM then shares the verifier's
(the drafter's copy is frozen and identical). Checks: ``d2t``/``t2d`` present and consistent;
the directory loads back (:func:`pipeline.eagle3.model.drafter.load_drafter`) and gives bit-identical logits to the
checkpoint cast to the export dtype, through both the unrolled and the KV-cache forward.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.eagle3.common import add_threads_arg, use_threads
from pipeline.eagle3.model.drafter_files import EAGLE_ARCH, SPECULATORS_ARCHS
from pipeline.errors import ActionError

ACTION = "eagle3.export"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Write the drafter in a format vLLM loads; check the round trip.")
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="train's output directory (latest epoch) or a checkpoint directory")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--format", choices=("eagle", "speculators"), default=None,
                   help="default: eagle for an EAGLE-3 drafter, speculators for P-EAGLE (the "
                        "only format vLLM reads it in)")
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    add_bool_arg(p, "include-embeddings", False, "also write embed_tokens.weight")
    p.add_argument("--verifier-name", default=None,
                   help="verifier name or path recorded in the config (default: training's)")
    p.add_argument("--speculative-tokens", type=int, default=3,
                   help="speculators format: proposal length recorded in the config")
    add_threads_arg(p)
    return p


def _llama_fields(cfg: Any) -> dict[str, Any]:
    return {
        "model_type": "llama", "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "num_hidden_layers": 1, "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "rope_scaling": None, "max_position_embeddings": cfg.max_position_embeddings,
        "hidden_act": cfg.hidden_act, "vocab_size": cfg.vocab_size, "attention_bias": False,
        "mlp_bias": False, "tie_word_embeddings": False, "pretraining_tp": 1}


def eagle_config(cfg: Any, dtype: str, verifier: str) -> dict[str, Any]:
    return {"architectures": [EAGLE_ARCH], **_llama_fields(cfg),
            "draft_vocab_size": cfg.draft_vocab_size,
            "target_hidden_size": cfg.target_hidden_size,
            "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
                             "use_aux_hidden_state": True},
            "norm_before_residual": cfg.norm_before_residual,
            "torch_dtype": dtype,
            "eagle3_training": {"verifier": verifier,
                                "target_num_layers": cfg.target_num_layers,
                                "target_architectures": cfg.target_architectures,
                                "target_model_type": cfg.target_model_type}}


def speculators_config(cfg: Any, dtype: str, verifier: str, k: int) -> dict[str, Any]:
    method = cfg.method
    out: dict[str, Any] = {
        "architectures": [SPECULATORS_ARCHS[method]], "speculators_model_type": method,
        "speculators_version": "0.2.0",
        "transformer_layer_config": _llama_fields(cfg),
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "norm_before_residual": cfg.norm_before_residual,
        "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
        "speculators_config": {
            "algorithm": method,
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier,
                         "architectures": list(cfg.target_architectures)}},
        "torch_dtype": dtype,
        "eagle3_training": {"target_num_layers": cfg.target_num_layers,
                            "target_model_type": cfg.target_model_type}}
    if cfg.parallel:
        # vLLM's update_peagle reads these (mask_token_id is required: KeyError without)
        out.update(mask_token_id=cfg.mask_token_id, norm_before_fc=False)
        out["eagle3_training"]["mask_token_choice"] = cfg.mask_token_choice
    return out


def _rename(state: dict[str, Any], fmt: str, include_embeddings: bool) -> dict[str, Any]:
    layer = "midlayer." if fmt == "eagle" else "layers.0."
    out = {}
    for key, value in state.items():
        if key == "embed_tokens.weight" and not include_embeddings:
            continue
        out[layer + key[len("midlayer."):] if key.startswith("midlayer.") else key] = value
    return out


def resolve_checkpoint(path: Path) -> Path:
    path = Path(path)
    state = path / "state.json"
    if state.is_file():
        return path / json.loads(state.read_text())["checkpoint"]
    if (path / "drafter_config.json").is_file():
        return path
    raise ActionError("neither a train output directory (state.json) nor a checkpoint "
                      "(drafter_config.json)", where=str(path))


def round_trip_max_diff(reference: Any, exported: Any, seed: int = 0) -> float:
    """Largest |logit difference| between two drafters on random inputs, through both the
    unrolled training forward and the KV-cache step. 0.0 means bit-identical."""
    import torch

    cfg = reference.config
    dtype = reference.fc.weight.dtype
    g = torch.Generator().manual_seed(seed)
    aux = torch.randn(2, 12, 3 * cfg.target_hidden_size, generator=g).to(dtype)
    ids = torch.randint(0, cfg.vocab_size, (2, 12), generator=g)
    worst = 0.0
    with torch.no_grad():
        for a, b in zip(reference.ttt_forward(aux, ids, 3), exported.ttt_forward(aux, ids, 3),
                        strict=True):
            worst = max(worst, float((reference.logits(a).float() -
                                      exported.logits(b).float()).abs().max()))
        hid = reference.fc(aux)
        pos = torch.arange(12)
        la, _ = reference.step(ids, hid, pos)
        lb, _ = exported.step(ids, exported.fc(aux), pos)
        worst = max(worst, float((la.float() - lb.float()).abs().max()))
        if not torch.equal(reference.d2t, exported.d2t) or not torch.equal(reference.t2d,
                                                                           exported.t2d):
            worst = float("inf")
    return worst


def run(args: argparse.Namespace) -> StageResult:
    import torch
    from safetensors.torch import save_file

    from pipeline.eagle3.model.drafter import load_drafter
    from pipeline.eagle3.text.datafiles import mapping_problem

    result = StageResult(action=ACTION)
    ckpt = resolve_checkpoint(Path(args.checkpoint))
    model = load_drafter(ckpt)
    if model.config.parallel and args.format == "eagle":
        raise ActionError("a P-EAGLE drafter exports as speculators only: vLLM reads its "
                          "mask_token_id from a speculators peagle config",
                          where=str(ckpt), hint="drop `format: eagle` (or set speculators)")
    args.format = args.format or ("speculators" if model.config.parallel else "eagle")
    dtype = getattr(torch, args.dtype)
    model.to(dtype=dtype)
    cfg = model.config
    verifier = args.verifier_name or cfg.verifier
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors = _rename(state, args.format, args.include_embeddings)
    config = (eagle_config(cfg, args.dtype, verifier) if args.format == "eagle" else
              speculators_config(cfg, args.dtype, verifier, args.speculative_tokens))
    tmp = out / ".model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    loaded = load_drafter(out)
    if not args.include_embeddings:
        loaded.embed_tokens.weight.data.copy_(model.embed_tokens.weight.data)
    diff = round_trip_max_diff(model, loaded)
    problem = mapping_problem(loaded.d2t, loaded.t2d)
    result.metrics.update(format=args.format, dtype=args.dtype, checkpoint=str(ckpt),
                          tensors=len(tensors), draft_vocab_size=cfg.draft_vocab_size,
                          aux_layer_ids=cfg.aux_layer_ids, round_trip_max_abs_diff=diff,
                          bytes=(out / "model.safetensors").stat().st_size, method=cfg.method)
    if cfg.parallel:
        result.metrics.update(mask_token_id=cfg.mask_token_id,
                              mask_token_choice=cfg.mask_token_choice)
    result.artifacts.append(str(out))
    result.check("vocab_mapping", problem is None and "d2t" in tensors and "t2d" in tensors,
                 message=problem or "d2t and t2d written and consistent")
    result.check("round_trip", diff == 0.0, value=diff, expected=0.0,
                 message="max |logit diff| reloaded vs checkpoint (unrolled and KV-cache)")
    kind = f"P-EAGLE {args.format}" if cfg.parallel else args.format
    result.summary = (f"export: {kind} drafter in {out} ({args.dtype}, "
                      f"{cfg.draft_vocab_size} draft ids, aux layers {cfg.aux_layer_ids}), "
                      f"round trip diff {diff}")
    return result


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv, setup=use_threads)


if __name__ == "__main__":
    raise SystemExit(main())
