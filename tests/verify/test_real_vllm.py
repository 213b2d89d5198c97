"""The tiny export against a real vLLM: its config classes, CLI parser, loader and drafter
forward, on the CPU, compared with our ``Eagle3Drafter.step``.

Optional: it needs a vLLM installed in its own environment (docs/verify.md)::

    HARNESS_VLLM_PYTHON=/path/to/vllm-venv/bin/python .venv/bin/python -m pytest -m vllm

vLLM's paged attention needs its CUDA kernels, so the vLLM side
(``tests/verify/vllm_side.py``) swaps that one layer for plain causal attention; every
other layer (fc, norms, rotary, MLP, lm_head, the d2t mapping) is vLLM's own code.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.vllm.compat import PROBE

from .conftest import checks, run_verify, verify_params

pytestmark = [pytest.mark.ml, pytest.mark.vllm]

ENV = "HARNESS_VLLM_PYTHON"
SIDE = Path(__file__).with_name("vllm_side.py")
BOOT = ("import runpy, sys; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')")


def _vllm_python() -> str | None:
    python = os.environ.get(ENV)
    if not python:
        return None
    try:
        ok = subprocess.run([python, "-c", "import vllm"], capture_output=True, timeout=300,
                            cwd="/").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        pytest.fail(f"{ENV}={python} cannot import vllm")
    return python


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = _vllm_python()
    if python is None:
        pytest.skip(f"no real vLLM: set {ENV} to the python of a venv with vLLM installed "
                    "(pip install vllm==0.26.0; see docs/verify.md)")
    return python


@pytest.fixture(scope="module")
def sequence(good):
    """A held-out prompt's tokens and the verifier's aux states for them, in vLLM's order."""
    import torch

    from pipeline.eagle3.common import load_tokenizer, load_verifier
    from pipeline.eagle3.text.heldout import load_heldout

    tok = load_tokenizer(good["verifier"])
    (prompt,) = load_heldout(good["prompts"], tok, samples=1)[0]
    verifier = load_verifier(good["verifier"], torch.device("cpu"), torch.float32)
    x = torch.tensor([prompt.ids])
    with torch.no_grad():
        out = verifier(input_ids=x, output_hidden_states=True, use_cache=False)
    hs = out.hidden_states
    # row i reads the verifier's state h_i and the token x_{i+1}
    ids = torch.cat([x[0, 1:], out.logits[0, -1:].argmax(-1)])
    return {"verifier": verifier, "ids": ids, "hidden_states": hs,
            "next": out.logits[0, -1].argmax()}


@pytest.fixture(scope="module")
def vllm_version(vllm_python) -> str:
    """The version of the vLLM under test (its package metadata, read in its interpreter)."""
    out = subprocess.run([vllm_python, "-c", "from importlib.metadata import version; "
                          "print(version('vllm'))"], capture_output=True, text=True,
                         timeout=120, cwd="/")
    return out.stdout.strip()


def _variant(good, tmp_path: Path, kind: str) -> tuple[Path, str]:
    if kind == "eagle":
        return good["dir"], "midlayer."
    if kind == "peagle":
        return good["peagle"], "layers.0."
    if kind == "norm_before_residual":
        d = tmp_path / "nbr"
        shutil.copytree(good["dir"], d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["norm_before_residual"] = True
        (d / "config.json").write_text(json.dumps(cfg))
        return d, "midlayer."
    from pipeline.eagle3 import export
    from tests.eagle3.conftest import ok

    ok(export, tmp_path, checkpoint=good["train"], out=tmp_path / "spec",
       format="speculators", dtype="bfloat16")
    return tmp_path / "spec", "layers.0."


def _ask_vllm(python: str, tmp_path: Path, request: dict) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    inp = tmp_path / "request.json"
    inp.write_text(json.dumps(request))
    out = tmp_path / "vllm-out"
    out.mkdir()
    proc = subprocess.run([python, "-c", BOOT, str(SIDE), str(inp), str(out)],
                          capture_output=True, text=True, timeout=900, cwd=out,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "answer.json").read_text()), load_file(str(out /
                                                                    "outputs.safetensors"))


@pytest.mark.parametrize("kind", ["eagle", "speculators", "norm_before_residual", "peagle"])
def test_vllm_loads_and_runs_the_export_as_we_do(vllm_python, good, sequence, tmp_path, kind):
    import torch
    from safetensors.torch import save_file

    from pipeline.eagle3.checks.served_drafter import load_served
    from pipeline.eagle3.common import vllm_aux_order
    from pipeline.eagle3.model.checkpoint_files import read_layout
    from pipeline.vllm.server import serve_argv

    drafter, prefix = _variant(good, tmp_path, kind)
    layout = read_layout(drafter)
    aux_ids = vllm_aux_order(layout.aux_layer_ids)
    hs = sequence["hidden_states"]
    aux = torch.cat([hs[a][0] for a in aux_ids], dim=-1)
    draft_token = sequence["next"].view(1)
    save_file({"ids": sequence["ids"].contiguous(),
               "positions": torch.arange(len(sequence["ids"])),
               "aux": aux.contiguous(), "draft_token": draft_token},
              str(tmp_path / "inputs.safetensors"))
    parallel = kind == "peagle"
    argv = serve_argv(["vllm"], str(good["verifier"]), port=8001, host="127.0.0.1",
                      draft=str(drafter), num_speculative_tokens=3,
                      parallel_drafting=parallel)
    answer, got = _ask_vllm(vllm_python, tmp_path, {
        "probe": str(PROBE), "verifier": str(good["verifier"]), "drafter": str(drafter),
        "dtype": "float32", "serve_argv": argv, "layer_prefix": prefix,
        "inputs": str(tmp_path / "inputs.safetensors")})

    # vLLM's own parser takes the command line eagle3.serve builds
    assert answer["serve_args"]["model"] == str(good["verifier"])
    assert answer["serve_args"]["speculative_config"] == json.loads(argv[-1])
    # its config classes accept the pair, read as we read it
    cfg = answer["configs"]
    assert cfg["method"] == "eagle3" and cfg["draft_vocab_size"] == layout.draft_vocab_size
    assert sorted(cfg["aux_layer_ids"]) == aux_ids
    assert cfg["norm_before_residual"] is layout.norm_before_residual
    assert cfg["target_layers"] == sequence["verifier"].config.num_hidden_layers
    # P-EAGLE: vLLM serves it with parallel drafting, our mask token as its pard_token
    assert cfg["parallel_drafting"] is parallel
    assert cfg["pard_token"] == (layout.mask_token_id if parallel else None)
    assert answer.get("mask_hidden") == (0.0 if parallel else None)
    # and its default V2 model runner does not run parallel drafting: P-EAGLE is served on
    # the V1 runner while EAGLE-3 stays on V2 (docs/PERFORMANCE.md, P-EAGLE's served step)
    if answer["v2_runner_unsupported"] is not None:
        drafting = [f for f in answer["v2_runner_unsupported"] if "parallel drafting" in f]
        assert bool(drafting) is parallel, answer["v2_runner_unsupported"]
    # its loader fills every parameter from the export, bit for bit, but the embeddings,
    # which it shares with the target; t2d is ignored
    loaded = answer["loaded"]
    assert answer["class"].endswith("Eagle3LlamaForCausalLM")
    assert not answer["has_own_embed_tokens"] and answer["has_own_lm_head"]
    assert loaded.pop("model.embed_tokens.weight") is None
    assert len(loaded) == 11 and all(v == 0.0 for v in loaded.values()), loaded

    # its forward against ours: the same prefill rows, then one draft step
    served = load_served(drafter, sequence["verifier"], torch.device("cpu"), torch.float32)
    model = served.model
    with torch.no_grad():
        fc = model.fc(aux)
        logits, prenorm = model.step(sequence["ids"][None], fc[None],
                                     torch.arange(len(sequence["ids"])))
        normed = model.norm(prenorm)
        logits2, prenorm2 = _draft_step(model, sequence["ids"], fc, draft_token)
    tight = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(got["prefill.fc"], fc, **tight)
    torch.testing.assert_close(got["prefill.prenorm"], prenorm[0], **tight)
    torch.testing.assert_close(got["prefill.normed"], normed[0], **tight)
    torch.testing.assert_close(got["draft.prenorm"], prenorm2[0], **tight)
    # logits: the head is bf16 in the export; vLLM's head and ours hold the same values,
    # so the figures agree to the float32 rounding of a dot product over H terms
    _close_logits(got["prefill.draft_logits"], logits[0])
    _close_logits(got["draft.draft_logits"], logits2[0])
    # d2t as vLLM applies it: draft id i scores target id i + d2t[i], every other -inf
    full = got["prefill.logits"]
    targets = torch.arange(model.d2t.numel()) + model.d2t
    assert torch.isinf(full).sum(-1).eq(full.shape[-1] - targets.numel()).all()
    assert torch.equal(full[:, targets], got["prefill.draft_logits"])
    assert torch.equal(full.argmax(-1), targets[logits[0].argmax(-1)])
    if parallel:
        # the proposer's one drafting forward: the same rows, then k-1 mask rows; ours is
        # the reference loop's (specdecode): those rows through the KV-cache step
        mask_ids, mask_hidden = model.mask_rows(1, 2)
        with torch.no_grad():
            logits3, _ = model.step(torch.cat([sequence["ids"][None], mask_ids], 1),
                                    torch.cat([fc[None], mask_hidden], 1),
                                    torch.arange(len(sequence["ids"]) + 2))
        torch.testing.assert_close(got["parallel.fc"][1:], mask_hidden[0], **tight)
        _close_logits(got["parallel.draft_logits"], logits3[0, -3:])


def test_served_in_bfloat16_vllm_stays_within_the_bf16_tolerance(vllm_python, good, sequence,
                                                                  tmp_path):
    """vLLM serves the export in its dtype, bf16; our verify runs float32 from the same
    bf16 weights. vLLM's logits are its bf16 normed states times the bf16 head, and they
    stay within bf16 rounding of ours: a few bf16 steps of the largest logit, with the same
    greedy draft wherever our top-2 margin is wider than that."""
    import torch
    from safetensors.torch import save_file

    from pipeline.eagle3.checks.served_drafter import load_served
    from pipeline.vllm.server import serve_argv

    aux = torch.cat([sequence["hidden_states"][a][0] for a in (2, 3, 4)], dim=-1)
    save_file({"ids": sequence["ids"].contiguous(),
               "positions": torch.arange(len(sequence["ids"])),
               "aux": aux.contiguous(), "draft_token": sequence["next"].view(1)},
              str(tmp_path / "inputs.safetensors"))
    _answer, got = _ask_vllm(vllm_python, tmp_path, {
        "probe": str(PROBE), "verifier": str(good["verifier"]), "drafter": str(good["dir"]),
        "dtype": "bfloat16", "layer_prefix": "midlayer.",
        "serve_argv": serve_argv(["vllm"], str(good["verifier"]), port=8001,
                                 draft=str(good["dir"])),
        "inputs": str(tmp_path / "inputs.safetensors")})
    model = load_served(good["dir"], sequence["verifier"], torch.device("cpu"),
                        torch.float32).model
    with torch.no_grad():
        ours, _pre = model.step(sequence["ids"][None], model.fc(aux)[None],
                                torch.arange(len(sequence["ids"])))
    ours = ours[0]
    theirs = got["prefill.draft_logits"]
    head = model.lm_head.weight.bfloat16()
    # the head: bf16(normed) @ bf16(lm_head).T, up to one bf16 step of the result
    by_head = (got["prefill.normed"].bfloat16() @ head.T).float()
    step = 2.0 ** (torch.floor(torch.log2(by_head.abs().clamp_min(1e-30))) - 7)
    assert ((theirs - by_head).abs() <= step).all()
    tol = 4 * 2.0 ** -7 * ours.abs().max().item()   # a few bf16 steps of the largest logit
    diff = (theirs - ours).abs().max().item()
    assert diff <= tol, (diff, tol)
    top2 = ours.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * tol
    assert clear.any() and torch.equal(theirs.argmax(-1)[clear], ours.argmax(-1)[clear])


def _draft_step(model, ids, fc, token):
    """Our KV-cache path: the prefill rows into a cache, then the draft row alone."""
    import torch

    from pipeline.eagle3.model.drafter import DrafterCache

    cache = DrafterCache()
    _l, pre = model.step(ids[None], fc[None], torch.arange(len(ids)), cache)
    return model.step(token[None], pre[:, -1:], torch.tensor([len(ids)]), cache)


def _close_logits(theirs, ours) -> None:
    import torch

    scale = ours.abs().max().item()
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5 * max(scale, 1.0))
    assert torch.equal(theirs.argmax(-1), ours.argmax(-1))


def test_verify_asks_the_real_vllm(vllm_python, vllm_version, good, variants, tmp_path):
    rc, result = run_verify(tmp_path, verify_params(good, good["dir"], functional=False,
                                                    vllm_python=vllm_python))
    c = checks(result)
    assert rc == 0, [(n, x.message) for n, x in c.items() if not x.passed]
    assert c["vllm_source"].value == vllm_version
    assert "implements SupportsEagle3" in c["vllm_eagle3_target"].message
    sources = result.metrics["vllm_weight_sources"]
    assert sources["source"] == f"vllm {vllm_version}"
    assert sources["target"] == ["model.embed_tokens.weight"]
    assert sources["ignored"] == ["t2d"] and sources["initial"] == []
    assert len(sources["checkpoint"]) == 11
    rc, result = run_verify(tmp_path, verify_params(good, variants("no_d2t"), functional=False,
                                                    vllm_python=vllm_python))
    w = checks(result)["vllm_weights"]
    assert not w.passed and "draft_id_to_target_id at its initial value" in w.message
    assert f"vllm {vllm_version}" in w.message


def test_verify_asks_the_real_vllm_about_the_peagle_export(vllm_python, vllm_version, good,
                                                           tmp_path):
    """vLLM's own loader, built for parallel drafting, fills every parameter and the
    mask_hidden buffer from the P-EAGLE export; without mask_hidden it refuses, in its own
    words."""
    rc, result = run_verify(tmp_path, verify_params(good, good["peagle"], functional=False,
                                                    vllm_python=vllm_python))
    c = checks(result)
    assert rc == 0, [(n, x.message) for n, x in c.items() if not x.passed]
    assert c["vllm_eagle3_drafter"].value == "peagle"
    sources = result.metrics["vllm_weight_sources"]
    assert sources["source"] == f"vllm {vllm_version}"
    assert sources["checkpoint"]["mask_hidden"] == ["mask_hidden"]
    assert len(sources["checkpoint"]) == 12 and sources["initial"] == []
    assert sources["target"] == ["model.embed_tokens.weight"]
    bare = tmp_path / "no-mask"
    shutil.copytree(good["peagle"], bare)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(bare / "model.safetensors"))
    del tensors["mask_hidden"]
    save_file(tensors, str(bare / "model.safetensors"), metadata={"format": "pt"})
    rc, result = run_verify(tmp_path, verify_params(good, bare, functional=False,
                                                    vllm_python=vllm_python))
    w = checks(result)["vllm_weights"]
    assert rc == 1 and not w.passed
    assert "mask_hidden at its initial value" in w.message
    assert "mask_hidden not found in weights" in w.message  # vLLM's own refusal
