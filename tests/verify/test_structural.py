"""Structural checks: the good checkpoint passes; each broken copy fails the check built for
the invariant it breaks, with a one-line explanation and no traceback."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from safetensors.torch import save_file

from pipeline.eagle3.checks.structural import structural_checks
from pipeline.eagle3.model.checkpoint_files import VerifierInfo
from pipeline.errors import ActionError

from .conftest import checks, run_verify, verify_params

pytestmark = pytest.mark.ml


def test_good_checkpoint_passes_every_structural_and_compat_check(good, tmp_path, capfd):
    rc, result = run_verify(tmp_path, verify_params(good, good["dir"], functional=False))
    assert rc == 0 and result is not None and result.ok, [
        (c.name, c.message) for c in result.checks if not c.passed]
    names = checks(result)
    for name in ("architecture", "required_fields", "config_consistent", "target_vocab",
                 "draft_vocab_size", "target_hidden_size", "hidden_size", "aux_layer_ids",
                 "keys", "shapes", "dtype", "finite", "d2t", "d2t_offsets", "t2d",
                 "vocab_invariant", "lm_head_rows", "vllm_source", "vllm_eagle3_target",
                 "vllm_eagle3_drafter", "vllm_norm_flags"):
        assert names[name].passed, name
    assert names["lm_head_rows"].value == 1.0
    assert result.metrics["format"] == "eagle"
    # No vLLM here: the compatibility answers say they come from the fallback table.
    assert "FALLBACK" in names["vllm_source"].message
    assert "FALLBACK" in names["vllm_eagle3_target"].message
    # sha256 of the weights, streamed, equals hashlib over the whole file.
    import hashlib
    data = (good["dir"] / "model.safetensors").read_bytes()
    assert result.metrics["sha256"] == hashlib.sha256(data).hexdigest()
    assert result.artifacts == [str(good["dir"])]
    assert "Traceback" not in capfd.readouterr().err


CAUGHT_BY = {
    "no_d2t": "d2t",
    "d2t_absolute": "d2t_offsets",
    "t2d_count": "t2d",
    "fc_transposed": "shapes",
    "nan_layer": "finite",
    "wrong_arch": "architecture",
    "draft_vocab_larger": "draft_vocab_size",
    "hidden_mismatch": "target_hidden_size",
    "lm_head_permuted": "lm_head_rows",
}


@pytest.mark.parametrize("variant", sorted(CAUGHT_BY))
def test_broken_variant_is_caught_by_its_check(variant, good, variants, tmp_path, capfd):
    rc, result = run_verify(tmp_path, verify_params(good, variants(variant), functional=False))
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert result is not None and result.error is None, result and result.error
    assert rc == 1 and not result.ok
    c = checks(result)[CAUGHT_BY[variant]]
    assert not c.passed, (variant, c)
    assert c.message and "\n" not in c.message
    # The check names the measured and the expected value.
    assert c.expected is not None


def test_failures_say_what_is_wrong(good, variants, tmp_path):
    v = VerifierInfo.read(good["verifier"])
    by = {name: {c.name: c for c in structural_checks(variants(name), v).checks}
          for name in ("no_d2t", "d2t_absolute", "t2d_count", "fc_transposed", "nan_layer",
                       "lm_head_permuted")}
    assert "identity mapping" in by["no_d2t"]["d2t"].message
    assert by["no_d2t"]["keys"].value["missing"] == ["d2t"]
    assert "absolute target ids" in by["d2t_absolute"]["d2t_offsets"].message
    assert by["t2d_count"]["t2d"].value["true"] == by["t2d_count"]["t2d"].expected["true"] + 1
    assert not by["t2d_count"]["vocab_invariant"].passed
    assert "fc.weight" in by["fc_transposed"]["shapes"].message
    assert "(transposed)" in by["fc_transposed"]["shapes"].message
    assert by["nan_layer"]["finite"].value == {"midlayer.mlp.down_proj.weight": 3}
    head = by["lm_head_permuted"]["lm_head_rows"]
    assert head.value < 0.1 and "different vocab mappings" in head.message
    # Other invariants of those copies still hold: each fault is named once, precisely.
    assert by["lm_head_permuted"]["vocab_invariant"].passed
    assert by["nan_layer"]["shapes"].passed


def test_aux_ids_out_of_range_and_unknown_tensors(good, tmp_path):
    import shutil

    d = tmp_path / "odd"
    shutil.copytree(good["dir"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 3, 9]
    (d / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import load_file

    t = load_file(str(d / "model.safetensors"))
    t["layers.1.mlp.up_proj.weight"] = torch.zeros(2, 2, dtype=torch.bfloat16)
    save_file(t, str(d / "model.safetensors"))
    by = {c.name: c for c in structural_checks(d, VerifierInfo.read(good["verifier"])).checks}
    assert not by["aux_layer_ids"].passed and "[9]" in by["aux_layer_ids"].message
    assert not by["config_consistent"].passed  # eagle_config still says [2, 3, 4]
    assert by["keys"].value["unexpected"] == ["layers.1.mlp.up_proj.weight"]


def test_speculators_export_and_training_checkpoint_are_read(good, tmp_path):
    from pipeline.eagle3 import export
    from tests.eagle3.conftest import ok

    ok(export, tmp_path, checkpoint=good["train"], out=tmp_path / "spec", format="speculators",
       dtype="float32")
    v = VerifierInfo.read(good["verifier"])
    spec = structural_checks(tmp_path / "spec", v)
    assert spec.layout.fmt == "speculators" and not spec.failed(), spec.failed()
    ckpt = structural_checks(good["train"] / "checkpoints" / "epoch-002", v)
    assert ckpt.layout.fmt == "checkpoint" and not ckpt.failed(), ckpt.failed()


def test_unreadable_inputs_are_one_line_errors_naming_the_file(good, tmp_path):
    import shutil

    v = VerifierInfo.read(good["verifier"])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((good["dir"] / "config.json").read_text())
    with pytest.raises(ActionError) as e:
        structural_checks(empty, v)
    assert "no weights" in e.value.message and e.value.where == str(empty)

    cut = tmp_path / "cut"
    shutil.copytree(good["dir"], cut)
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ActionError) as e:
        structural_checks(cut, v)
    assert e.value.where == str(cut / "model.safetensors")
    assert "\n" not in str(e.value)


def test_compatibility_is_asked_of_the_installed_vllm(good, tmp_path, monkeypatch):
    """A stand-in vLLM 0.9.2 (llama only; it prefixes every drafter name with Eagle3):
    it serves neither a qwen3 verifier nor a LlamaForCausalLMEagle3 drafter, and says
    what would have to change."""
    import shutil

    from tests.conftest import ROOT
    from tests.serve.helpers import STANDIN_VLLM

    qwen = tmp_path / "qwen-verifier"
    shutil.copytree(good["verifier"], qwen)
    cfg = json.loads((qwen / "config.json").read_text())
    cfg["model_type"] = "qwen3"
    (qwen / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{STANDIN_VLLM / 'llama_only'}")
    rc, result = run_verify(tmp_path, verify_params(good, good["dir"], functional=False,
                                                    verifier=qwen))
    assert rc == 1 and result is not None
    c = checks(result)
    assert c["vllm_source"].passed and c["vllm_source"].value == "0.9.2"
    assert not c["vllm_eagle3_target"].passed
    assert "vLLM 0.10.0 and later accept this model_type" in c["vllm_eagle3_target"].message
    assert not c["vllm_eagle3_drafter"].passed
    assert result.metrics["vllm_version"] == "0.9.2"
    assert result.metrics["vllm_compat_source"] == "vllm"
    assert len(result.metrics["vllm_changes_needed"]) == 2
    # The structure itself is fine: only the serving side is refused.
    assert all(c[n].passed for n in result.metrics["check_layers"]["structural"])


def test_a_named_interpreter_without_vllm_fails_the_source_check(good, tmp_path):
    rc, result = run_verify(tmp_path, verify_params(good, good["dir"], functional=False,
                                                    vllm_python=sys.executable,
                                                    vllm_version="0.9.1"))
    c = checks(result)
    assert rc == 1 and not c["vllm_source"].passed
    assert c["vllm_source"].message.startswith("FALLBACK")
    assert c["vllm_eagle3_target"].message.startswith("FALLBACK (vLLM not importable here; "
                                                      "rules for vLLM 0.8.0..0.9.2")
