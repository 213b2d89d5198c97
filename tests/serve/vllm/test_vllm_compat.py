"""The eagle3 compatibility question, asked of stand-in vLLM packages and of the table."""

from __future__ import annotations

import sys

import pytest

from pipeline.vllm.compat import FALLBACK_TABLE, compat_checks, era_for, read_target_rule
from tests.conftest import ROOT
from tests.serve.helpers import STANDIN_VLLM

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
GEMMA3 = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text"}
KIMI = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2"}
MULTIMODAL_QWEN = {"architectures": ["Qwen2_5_VLForConditionalGeneration"],
                   "model_type": "qwen2_5_vl", "text_config": {"model_type": "qwen2_5_vl_text"}}
EAGLE = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
         "draft_vocab_size": 32000}
EAGLE_PREFIXABLE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
SPECULATORS = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3"}


@pytest.fixture
def with_vllm(monkeypatch: pytest.MonkeyPatch):
    """Put one stand-in vllm package on PYTHONPATH for the probe's child interpreter, and
    nothing else: the probe must not need this project on the path."""
    def use(variant: str | None) -> None:
        if variant:
            monkeypatch.setenv("PYTHONPATH", str(STANDIN_VLLM / variant))
        else:
            monkeypatch.delenv("PYTHONPATH", raising=False)
    return use


def verdict(checks) -> dict[str, bool]:
    return {c.name: c.passed for c in checks}


@pytest.mark.parametrize("variant, target, draft, target_ok, draft_ok, says", [
    ("llama_only", LLAMA, EAGLE_PREFIXABLE, True, True, "matches ['llama']"),
    ("llama_only", QWEN3, EAGLE, False, False, "matches none of ['llama']"),
    ("allow_list", QWEN3, EAGLE, True, True, "matches ['llama', 'qwen', 'minicpm', 'gpt_oss']"),
    ("allow_list", MULTIMODAL_QWEN, SPECULATORS, True, True, "'qwen2_5_vl_text'"),
    ("allow_list", KIMI, EAGLE, False, True, "matches none of"),
    ("interface", KIMI, EAGLE, True, True, "implements SupportsEagle3"),
    ("interface", GEMMA3, SPECULATORS, False, True, "does not implement SupportsEagle3"),
])
def test_the_installed_vllm_is_asked(with_vllm, variant, target, draft, target_ok, draft_ok,
                                     says) -> None:
    with_vllm(variant)
    checks, answer = compat_checks(target, draft)
    assert answer["source"] == "installed"
    assert verdict(checks) == {"vllm_installed": True, "vllm_eagle3_target": target_ok,
                               "vllm_eagle3_drafter": draft_ok}
    assert says in checks[1].message
    assert answer["version"] == {"llama_only": "0.9.2", "allow_list": "0.11.0",
                                 "interface": "0.21.0"}[variant]


def test_refusals_say_what_to_change(with_vllm) -> None:
    with_vllm("llama_only")
    checks, _ = compat_checks(QWEN3, EAGLE)
    target, drafter = checks[1], checks[2]
    assert "vLLM 0.10.0 and later accept this model_type" in target.message
    assert "renames ['LlamaForCausalLMEagle3'] to ['Eagle3LlamaForCausalLMEagle3']" \
        in drafter.message
    checks, _ = compat_checks(LLAMA, SPECULATORS)
    assert not checks[2].passed and "no speculators-format support" in checks[2].message
    assert "export the drafter in the EAGLE format" in checks[2].message


def test_without_vllm_the_fallback_table_answers_and_says_so(with_vllm) -> None:
    with_vllm(None)
    checks, answer = compat_checks(QWEN3, EAGLE, version="0.9.1")
    assert answer["source"] == "fallback"
    assert not checks[0].passed and "pip install vllm" in checks[0].message
    assert not checks[1].passed
    assert checks[1].message.startswith("FALLBACK (vLLM not importable here; rules for vLLM "
                                        "0.8.0..0.9.2")
    assert "vllm-project/vllm#22152" in checks[1].message
    assert "vLLM 0.10.0 and later accept" in checks[1].message
    assert not checks[2].passed and "prefixed with Eagle3" in checks[2].message
    checks, answer = compat_checks(KIMI, EAGLE, version="0.16.0")
    assert answer["era"] == "0.14.0..0.20.2" and checks[1].passed
    checks, _ = compat_checks(QWEN3, EAGLE, version="0.7.3")
    assert not checks[1].passed and "predates eagle3" in checks[1].message
    # no version known: judged by the newest known rules, still labelled
    checks, answer = compat_checks(GEMMA3, EAGLE)
    assert answer["era"].endswith("newest") and not checks[1].passed
    assert "FALLBACK" in checks[1].message


PEAGLE = {"architectures": ["PEagleSpeculator"], "speculators_model_type": "peagle",
          "mask_token_id": 0}


def test_the_fallback_table_knows_peagle_from_the_release_read(with_vllm) -> None:
    """P-EAGLE (speculators type peagle) was read in vLLM 0.26.0: accepted there and by the
    newest rules; an earlier release is not decided (not read), never called fine."""
    with_vllm(None)
    for version in ("0.26.0", None):
        checks, _ = compat_checks(LLAMA, PEAGLE, version=version)
        assert checks[2].passed and "'peagle' (P-EAGLE, served with parallel_drafting) " \
            "is read in vLLM 0.26.0" in checks[2].message
    checks, answer = compat_checks(LLAMA, PEAGLE, version="0.22.0")
    assert answer["draft"]["accepted"] is None
    assert "whether 0.22.0 has it is not known here" in checks[2].message


def test_a_server_command_reports_its_version_for_the_fallback(with_vllm) -> None:
    with_vllm(None)
    command = [sys.executable, str(ROOT / "tests" / "fake_vllm.py")]
    _checks, answer = compat_checks(LLAMA, EAGLE, command=command)
    assert answer["version"] == "0.0.0+fake" and answer["source"] == "fallback"


def test_era_lookup_and_the_table_is_ordered() -> None:
    assert era_for("0.10.1") is FALLBACK_TABLE[1]
    assert era_for("0.11.0rc2") is FALLBACK_TABLE[2]
    assert era_for("0.22.1.dev3+g1234") is FALLBACK_TABLE[-1]
    assert era_for("0.7.0") is None and era_for(None) is None
    firsts = [tuple(int(x) for x in e.first.split(".")) for e in FALLBACK_TABLE]
    assert firsts == sorted(firsts)


@pytest.mark.parametrize("source, kind, listed", [
    ('def _verify_args(self):\n    if self.method == "eagle3" and "llama" not in '
     'self.target_model_config.hf_text_config.model_type:\n        raise ValueError()\n',
     "llama-only", ["llama"]),
    ('def v(self):\n    aux_hidden_states_supported = ["llama", "kimi_k2"]\n'
     '    if self.method in ("eagle3", "dflash") and not any(s in self.target_model_config'
     '.hf_text_config.model_type for s in aux_hidden_states_supported):\n'
     '        raise ValueError()\n', "list", ["llama", "kimi_k2"]),
    ('def v(self):\n    if self.method == "eagle3":\n        pass\n', "none", None),
])
def test_the_rule_is_read_from_source(source: str, kind: str, listed) -> None:
    rule = read_target_rule(source)
    assert rule["kind"] == kind and rule.get("list") == listed


@pytest.mark.parametrize("model_type, accepted", [
    ("kimi_k2", True), ("kimi_k25", True), ("deepseek_v3", True), ("llama", True),
    ("qwen3", True), ("gemma3_text", False)])
def test_the_table_for_vllm_0_33_is_what_its_code_says(with_vllm, model_type, accepted) -> None:
    """Read from vLLM 0.33.0: no model-type list; these families' classes implement
    SupportsEagle3 (DeepseekV3ForCausalLM serves deepseek_v3 and kimi_k2), Gemma 3's not."""
    with_vllm(None)
    target = {"architectures": ["X"], "model_type": model_type}
    checks, answer = compat_checks(target, EAGLE, version="0.33.0")
    assert answer["era"] == "0.21.0..newest"
    assert checks[1].passed is accepted
    assert "read from vLLM 0.33.0's code, other versions approximate" in checks[1].message
    assert "SupportsEagle3" in checks[1].message
