"""Structural checks of an EAGLE-3 drafter checkpoint against its verifier: seconds, no GPU.

Each check is derived from an invariant a served drafter must hold, not from a list of
faults seen before:

- the config names a format vLLM loads and has the fields it reads (``architecture``,
  ``required_fields``, ``config_consistent``);
- sizes agree with the verifier: the target vocabulary and hidden size, a draft vocabulary
  no larger than the target's, a drafter hidden size equal to the verifier's when it shares
  the verifier's embeddings (``target_vocab``, ``draft_vocab_size``,
  ``target_hidden_size``, ``hidden_size``);
- aux layer ids exist in the verifier, one per ``fc`` input block (``aux_layer_ids``);
- the weights are exactly the tensors this architecture has, each in the shape the config
  and the verifier imply, in a float dtype, finite (``keys``, ``shapes``, ``dtype``,
  ``finite``);
- the vocabulary mapping and the lm_head rows it selects (``d2t``, ``d2t_offsets``,
  ``t2d``, ``vocab_invariant``, ``lm_head_rows``: :mod:`pipeline.eagle3.checks.vocab`).

Weights are read one tensor (or one block of rows) at a time; nothing holds the whole
checkpoint. A check whose input is missing is skipped (named in ``skipped``) rather than
reported as passing.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from pipeline.eagle3.checks.structural_report import StructuralReport
from pipeline.eagle3.checks.vocab import lm_head_check, mapping_checks
from pipeline.eagle3.common import default_aux_layers, vllm_aux_order
from pipeline.eagle3.model.checkpoint_files import (
    DrafterLayout,
    VerifierInfo,
    WeightSet,
    read_layout,
    weight_files,
)
from pipeline.eagle3.model.drafter_files import SPECULATORS_ARCHS

FLOAT_DTYPES = ("BF16", "F16", "F32")
LAYER_TENSORS = ("input_layernorm.weight", "hidden_norm.weight",
                 "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                 "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                 "mlp.down_proj.weight")
# Exports may leave the embeddings out: vLLM then shares the verifier's.
OPTIONAL = ("embed_tokens.weight",)


def structural_checks(checkpoint: Path, verifier: VerifierInfo) -> StructuralReport:
    """Every structural check of ``checkpoint`` (a directory) against ``verifier``.

    Unreadable inputs (no config, no weights, a truncated file) raise ``ActionError``
    naming the file; everything else is a check.
    """
    t0 = time.perf_counter()
    rep = StructuralReport()
    lay = read_layout(checkpoint)
    rep.layout = lay
    rep.files = weight_files(checkpoint)
    _config_checks(rep, lay, verifier)
    with WeightSet.open(rep.files) as ws:
        rep.metrics["weight_bytes"] = ws.total_bytes
        rep.metrics["tensors"] = len(ws.tensors)
        expected = _expected_shapes(lay, verifier, ws)
        _key_checks(rep, lay, ws, expected)
        _shape_checks(rep, ws, expected)
        _dtype_check(rep, ws)
        _finite_check(rep, ws)
        d2t = mapping_checks(rep, lay, ws, verifier)
        lm_head_check(rep, ws, verifier, d2t)
    rep.metrics["structural_seconds"] = round(time.perf_counter() - t0, 3)
    return rep


# -- config ------------------------------------------------------------------------------

def _config_checks(rep: StructuralReport, lay: DrafterLayout, v: VerifierInfo) -> None:
    known = lay.fmt in ("eagle", "speculators", "checkpoint")
    if lay.fmt == "speculators":
        spec_type = lay.raw.get("speculators_model_type")
        arch = SPECULATORS_ARCHS[lay.method]
        ok = spec_type == lay.method and lay.architectures[:1] == [arch]
        what = "P-EAGLE (parallel drafting)" if lay.method == "peagle" else "EAGLE-3"
        rep.add("architecture", ok, value={"architectures": lay.architectures,
                                           "speculators_model_type": spec_type},
                expected={"architectures": [arch], "speculators_model_type": lay.method},
                message=f"speculators format, {what}" if ok else
                f"a speculators-format {what} drafter needs architectures [\"{arch}\"] and "
                f"speculators_model_type \"{lay.method}\" in config.json")
    else:
        rep.add("architecture", known, value=lay.architectures,
                expected=["LlamaForCausalLMEagle3"],
                message=(f"{lay.fmt} format" + (" (not servable: export it with "
                                                 "eagle3.export first)"
                                                 if lay.fmt == "checkpoint" else ""))
                if known else
                f"vLLM does not load {lay.architectures or 'a config without architectures'}"
                " as an EAGLE-3 drafter: set architectures to [\"LlamaForCausalLMEagle3\"] "
                "(EAGLE style) or use the speculators format")
    rep.metrics["format"] = lay.fmt
    rep.metrics["method"] = lay.method

    required = ["hidden_size", "intermediate_size", "num_attention_heads", "vocab_size",
                "draft_vocab_size"]
    if lay.fmt != "checkpoint":
        required.append("num_hidden_layers")
    missing = [f for f in required if getattr(lay, f) is None]
    if lay.fmt == "speculators" and not isinstance(lay.raw.get("transformer_layer_config"),
                                                   dict):
        missing.insert(0, "transformer_layer_config")
    where = "transformer_layer_config" if lay.fmt == "speculators" else "config.json"
    rep.add("required_fields", not missing, value=missing, expected=[],
            message=f"missing integer fields in {where}: {', '.join(missing)}" if missing
            else "all fields vLLM reads are present")
    notes = list(lay.problems)
    if lay.num_hidden_layers not in (None, 1):
        notes.append(f"num_hidden_layers is {lay.num_hidden_layers}; an EAGLE-3 drafter "
                     "here has one decoder layer")
    rep.add("config_consistent", not notes, value=notes or None,
            message="; ".join(notes) if notes else "no contradictions in the config")

    vocab, draft = lay.vocab_size, lay.draft_vocab_size
    if vocab is not None:
        rep.add("target_vocab", vocab == v.vocab_size, value=vocab, expected=v.vocab_size,
                message="vocab_size equals the verifier's" if vocab == v.vocab_size else
                f"vocab_size {vocab} is not the verifier's {v.vocab_size}: d2t/t2d and "
                "embeddings would index another vocabulary; this drafter was built for "
                "another verifier")
    else:
        rep.skip("target_vocab", "no vocab_size")
    if draft is not None:
        limit = min(x for x in (vocab, v.vocab_size) if x is not None)
        ok = 1 <= draft <= limit
        rep.add("draft_vocab_size", ok, value=draft, expected=f"1..{limit}",
                message=f"{draft} draft ids of {limit}" if ok else
                f"draft_vocab_size {draft} is larger than the target vocabulary ({limit}): "
                "the draft vocabulary must be a subset of the verifier's; rebuild the "
                "vocab mapping with --draft-vocab <= the target's")
    else:
        rep.skip("draft_vocab_size", "no draft_vocab_size")

    target_hidden = lay.target_hidden_size or lay.hidden_size
    if target_hidden is not None:
        said = "target_hidden_size" if lay.target_hidden_size else "hidden_size (vLLM's " \
                                                                   "fallback for target_hidden_size)"
        rep.add("target_hidden_size", target_hidden == v.hidden_size, value=target_hidden,
                expected=v.hidden_size,
                message=f"{said} equals the verifier's hidden size"
                if target_hidden == v.hidden_size else
                f"{said} {target_hidden} is not the verifier's hidden size {v.hidden_size}: "
                "fc could not take the verifier's aux states")
    if lay.hidden_size is not None:
        ok = lay.hidden_size == v.hidden_size
        rep.add("hidden_size", ok, value=lay.hidden_size, expected=v.hidden_size,
                message="equals the verifier's (the drafter shares its embeddings)" if ok
                else f"hidden_size {lay.hidden_size} is not the verifier's "
                     f"{v.hidden_size}: the drafter reads the verifier's embeddings, so "
                     "they must match")

    _aux_checks(rep, lay, v)
    if lay.method == "peagle":
        _mask_token_check(rep, lay, v)


def _mask_token_check(rep: StructuralReport, lay: DrafterLayout, v: VerifierInfo) -> None:
    """``mask_token``: vLLM's reader requires ``mask_token_id`` (its proposer's
    ``pard_token``, the token of every parallel-drafting row) and embeds it with the
    verifier's embeddings, so it must be a token of the verifier."""
    mask = lay.mask_token_id
    if mask is None:
        problem = ("no mask_token_id: vLLM's peagle reader requires it (a KeyError while "
                   "it reads the config) and its proposer feeds it to every parallel row")
    elif not isinstance(mask, int) or isinstance(mask, bool):
        problem = f"mask_token_id {mask!r} is not an integer token id"
    elif not 0 <= mask < v.vocab_size:
        problem = (f"mask_token_id {mask} is outside the verifier's vocabulary "
                   f"0..{v.vocab_size - 1}: its embedding row does not exist")
    else:
        problem = ""
        rep.metrics["mask_token_id"] = mask
    choice = ((lay.raw.get("eagle3_training") or {}).get("mask_token_choice")
              if isinstance(lay.raw.get("eagle3_training"), dict) else None) or \
        lay.raw.get("mask_token_choice")
    rep.add("mask_token", not problem, value=mask, expected=f"an id in 0..{v.vocab_size - 1}",
            message=problem or (f"token {mask} fills the parallel-drafting rows (vLLM's "
                                "pard_token)" + (f"; chosen in training: {choice}"
                                                 if choice else "")))


def _aux_checks(rep: StructuralReport, lay: DrafterLayout, v: VerifierInfo) -> None:
    """``aux_layer_ids``: ids vLLM can feed this drafter; ``aux_layer_order``: listed as vLLM
    uses them. vLLM sorts and de-duplicates the ids and concatenates the target's states in
    ascending layer order, whatever order the config lists them in."""
    n = v.num_layers
    aux = lay.aux_layer_ids
    default = default_aux_layers(n)
    if aux is None:
        aux = default
        lay.aux_layer_ids_source = "vLLM default"
    served = vllm_aux_order(aux)
    rep.metrics["aux_layer_ids"] = aux
    rep.metrics["vllm_aux_layer_ids"] = served
    bad = [a for a in aux if not 0 <= a < n]
    problems = []
    if bad:
        problems.append(f"ids {bad} are outside the verifier's layers 0..{n - 1}")
    if len(served) != len(aux):
        repeated = sorted({a for a in aux if aux.count(a) > 1})
        problems.append(f"{repeated} repeated in {aux}: vLLM de-duplicates them and feeds "
                        f"{len(served)} states {served} to an fc built for {lay.fc_blocks}, "
                        "which fails at the first step; choose distinct ids")
    elif len(served) != lay.fc_blocks:
        problems.append(f"{len(served)} aux ids but vLLM builds fc for {lay.fc_blocks} states "
                        "(num_aux_hidden_states, else the length of eagle_config's ids, "
                        "else 3)")
    if lay.target_num_layers and lay.target_num_layers != n:
        problems.append(f"trained for a {lay.target_num_layers}-layer verifier, this one has {n}")
    convention = ("vLLM's default [2, N//2, N-3]" if aux == default else
                  f"vLLM's default minus one {[a - 1 for a in default]}: SGLang/SpecForge "
                  "count one lower than Hugging Face's output_hidden_states; if these ids "
                  "came from such a config, add one (aux_layer_probe measures it)"
                  if aux == [a - 1 for a in default] else "custom ids")
    rep.add("aux_layer_ids", not problems, value=aux, expected=f"distinct, in 0..{n - 1}",
            message="; ".join(problems) if problems else
            f"{lay.aux_layer_ids_source}; id k = input of decoder layer k "
            f"(HF output_hidden_states[k]); {convention}")
    if len(served) == len(aux):
        ordered = served == aux
        rep.add("aux_layer_order", ordered, value=aux, expected=served,
                message="ascending, the order vLLM concatenates the states in" if ordered else
                f"{aux} is not ascending: vLLM sorts the ids and feeds the states as "
                f"{served}, so a drafter trained in the config's order gets its fc input "
                f"blocks permuted, silently. Write the ids as {served}; if the drafter was "
                "trained in the listed order, permute fc.weight's column blocks to match "
                "(the functional checks run vLLM's order, and aux_layer_probe says which "
                "order the drafter fits)")


# -- weights -----------------------------------------------------------------------------

def _layer_prefix(lay: DrafterLayout, ws: WeightSet) -> str:
    for p in lay.layer_prefixes:
        if any(name.startswith(p) for name in ws.tensors):
            return p
    return lay.layer_prefixes[0]


def _expected_shapes(lay: DrafterLayout, v: VerifierInfo, ws: WeightSet
                     ) -> dict[str, list[int] | None]:
    """name -> shape (None where the config cannot say)."""
    h = lay.hidden_size
    ht = lay.target_hidden_size or h
    vocab = lay.vocab_size
    d = lay.draft_vocab_size
    heads, kv, hd = lay.num_attention_heads, lay.num_key_value_heads, lay.head_dim
    inter = lay.intermediate_size
    n_aux = lay.fc_blocks

    def shape(*dims: int | None) -> list[int] | None:
        return None if any(x is None for x in dims) else [int(x) for x in dims]  # type: ignore[arg-type]

    q = None if heads is None or hd is None else heads * hd
    kvd = None if kv is None or hd is None else kv * hd
    layer = {
        "input_layernorm.weight": shape(h), "hidden_norm.weight": shape(h),
        "post_attention_layernorm.weight": shape(h),
        "self_attn.q_proj.weight": shape(q, None if h is None else 2 * h),
        "self_attn.k_proj.weight": shape(kvd, None if h is None else 2 * h),
        "self_attn.v_proj.weight": shape(kvd, None if h is None else 2 * h),
        "self_attn.o_proj.weight": shape(h, q),
        "mlp.gate_proj.weight": shape(inter, h), "mlp.up_proj.weight": shape(inter, h),
        "mlp.down_proj.weight": shape(h, inter)}
    prefix = _layer_prefix(lay, ws)
    out: dict[str, list[int] | None] = {prefix + k: s for k, s in layer.items()}
    out.update({"fc.weight": shape(h, None if ht is None else n_aux * ht),
                "norm.weight": shape(h), "lm_head.weight": shape(d, h), "d2t": shape(d),
                "t2d": shape(vocab)})
    out["embed_tokens.weight"] = shape(vocab, h)
    if lay.method == "peagle":
        # vLLM copies it, viewed as [1, -1], into its [1, fc input] buffer: any shape
        # holding that many values loads (_shape_checks compares the count)
        out["mask_hidden"] = shape(1, 1, None if ht is None else n_aux * ht)
    return out


def _key_checks(rep: StructuralReport, lay: DrafterLayout, ws: WeightSet,
                expected: dict[str, list[int] | None]) -> None:
    present = set(ws.tensors)
    optional = set(OPTIONAL) if lay.fmt != "checkpoint" else set()
    missing = sorted(set(expected) - present - optional)
    allowed = set(expected)
    unexpected = sorted(present - allowed)
    msg = []
    if missing:
        msg.append(f"missing {', '.join(missing)}")
    if unexpected:
        msg.append(f"unexpected {', '.join(unexpected[:8])}"
                   + (f" (+{len(unexpected) - 8} more)" if len(unexpected) > 8 else "")
                   + " (vLLM fails on names it does not know, or ignores them)")
    if ws.duplicates:
        msg.append(f"in several shards: {', '.join(sorted(set(ws.duplicates)))}")
    rep.add("keys", not msg, value={"missing": missing, "unexpected": unexpected},
            expected=f"the {len(expected) - len(optional)} tensors of a one-layer "
                     f"{'P-EAGLE' if lay.method == 'peagle' else 'EAGLE-3'} "
                     f"drafter ({_layer_prefix(lay, ws)}*)"
                     + (", embed_tokens optional" if optional else ""),
            message="; ".join(msg) if msg else "exactly the expected tensors")


def _shape_checks(rep: StructuralReport, ws: WeightSet,
                  expected: dict[str, list[int] | None]) -> None:
    wrong = []
    unknown = []
    for name, shape in expected.items():
        if name not in ws:
            continue
        if shape is None:
            unknown.append(name)
            continue
        got = ws.tensors[name].shape
        if name == "mask_hidden":
            count = ws.tensors[name].numel
            if count != shape[-1]:
                wrong.append(f"mask_hidden {got} holds {count} values, not the {shape[-1]} "
                             "of fc's input (vLLM copies it into a [1, fc input] buffer)")
            continue
        if got != shape:
            note = " (transposed)" if len(got) == 2 and got == shape[::-1] else ""
            wrong.append(f"{name} {got} != {shape}{note}")
    msg = "; ".join(wrong) if wrong else "every tensor has the shape the config implies"
    if unknown:
        msg += f" (not checked for lack of config fields: {', '.join(unknown)})"
    rep.add("shapes", not wrong, value=wrong or None, expected="shapes from config + verifier",
            message=msg)


def _dtype_check(rep: StructuralReport, ws: WeightSet) -> None:
    floats = {n: t.dtype for n, t in ws.tensors.items() if n not in ("d2t", "t2d")}
    kinds = sorted(set(floats.values()))
    not_float = sorted(n for n, d in floats.items() if d not in FLOAT_DTYPES)
    declared = (rep.layout.torch_dtype if rep.layout else None) or None
    names = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
    problems = []
    if not_float:
        problems.append(f"not floating point: {', '.join(not_float)}")
    if len(kinds) > 1:
        problems.append(f"mixed float dtypes {kinds}")
    if declared and len(kinds) == 1 and names.get(kinds[0]) not in (declared, None):
        problems.append(f"config says torch_dtype {declared}, weights are {names[kinds[0]]}")
    shown = [names.get(k, k) for k in kinds]
    rep.metrics["dtype"] = shown[0] if len(shown) == 1 else shown
    rep.add("dtype", not problems, value=shown, expected="one of bfloat16/float16/float32",
            message="; ".join(problems) if problems else
            f"all weights {shown[0] if shown else '-'} (d2t int64, t2d bool checked below)")


def _nonfinite(t: torch.Tensor) -> int:
    """Count of NaN/Inf entries. bf16/fp16 are tested on their bits (exponent all ones), a
    pass over integers that is faster on the CPU than ``isfinite``."""
    if t.dtype == torch.bfloat16:
        return int(((t.view(torch.int16) & 0x7F80) == 0x7F80).sum())
    if t.dtype == torch.float16:
        return int(((t.view(torch.int16) & 0x7C00) == 0x7C00).sum())
    if t.is_floating_point():
        return int((~torch.isfinite(t)).sum())
    return 0


def _finite_check(rep: StructuralReport, ws: WeightSet) -> None:
    bad: dict[str, int] = {}
    for name, info in ws.tensors.items():
        if info.dtype not in FLOAT_DTYPES:
            continue
        count = sum(_nonfinite(block) for block in ws.blocks(name))
        if count:
            bad[name] = count
    rep.add("finite", not bad, value=bad or None, expected="no NaN/Inf",
            message=("NaN/Inf in " + ", ".join(f"{n} ({c})" for n, c in bad.items())
                     + ": the training diverged or the file was damaged; use an earlier "
                       "checkpoint") if bad else "no NaN or Inf in any weight")
