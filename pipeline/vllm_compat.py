"""Will this vLLM serve this verifier with this EAGLE-3 drafter? Asked of vLLM's own code.

The answer changed across vLLM releases, and the seed lost a day to it (docs/serving.md):

- which target ``model_type`` eagle3 accepts: ``SpeculativeConfig._verify_args`` first
  required ``"llama"`` in it, then matched a list of substrings (``eagle3_target_supported``,
  later ``aux_hidden_states_supported``) that grew release by release; the newest have no
  list, and the target's model class must implement ``SupportsEagle3`` instead, which is
  only checked when the model loads (``Model does not support EAGLE3 interface``);
- which drafter it loads: an EAGLE-style config's ``architectures`` are renamed by
  ``EAGLEConfig`` (``X`` -> ``Eagle3X``; later ``X`` is kept when it already starts or ends
  with ``Eagle3``, e.g. ``LlamaForCausalLMEagle3``) and must then be in the model
  registry; a speculators-style config (``speculators_model_type``) needs that type in
  ``SUPPORTED_SPECULATORS_TYPES``, which older releases lack entirely.

So :func:`compat_checks` does not hard-code a list. It runs :func:`probe` in the host's
vLLM interpreter (``python -m pipeline.vllm_compat --out FILE``, so vLLM's imports and
logs stay out of the caller), which reads the rule from the installed
``SpeculativeConfig`` source (``inspect`` + ``ast``), asks the installed ``EAGLEConfig``
how it renames the drafter and the installed ``ModelRegistry`` whether that architecture
exists and whether the target class supports eagle3. Only when vLLM is not importable does
it fall back to :data:`FALLBACK_TABLE`, the rules as found in vLLM's source, with the
evidence cited and every answer labelled as a fallback.

It returns named :class:`pipeline.actions.Check` s: ``vllm_installed``,
``vllm_eagle3_target``, ``vllm_eagle3_drafter``. The preflight stage uses them; the
checkpoint verification can too. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.actions import Check

__all__ = ["FALLBACK_TABLE", "compat_checks", "fallback_answer", "probe", "read_target_rule"]


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), Mapping):
            return config[key]
    return config


def target_model_type(config: Mapping[str, Any]) -> str:
    """What vLLM tests: ``hf_text_config.model_type``."""
    return str(_text_config(config).get("model_type") or config.get("model_type") or "")


def eagle3_rename(arch: str, keep_suffixed: bool = True) -> str:
    """EAGLEConfig's rename for method eagle3 (``keep_suffixed=False``: older releases)."""
    if keep_suffixed and (arch.startswith("Eagle3") or arch.endswith("Eagle3")):
        return arch
    return f"Eagle3{arch}"


# --- asking the installed vLLM ---------------------------------------------------------------

def _speculative_config_class() -> Any:
    for module in ("vllm.config.speculative", "vllm.config"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        cls = getattr(mod, "SpeculativeConfig", None)
        if cls is not None:
            return cls
    return None


def read_target_rule(source: str) -> dict[str, Any]:
    """The eagle3 target check in ``SpeculativeConfig``'s source.

    ``{"kind": "list", "list": [...], "function": name}`` for a substring allow-list,
    ``{"kind": "llama-only", ...}`` for ``"llama" not in ...model_type``, or
    ``{"kind": "none"}`` when no model-type check mentions eagle3.
    """
    tree = ast.parse(textwrap.dedent(source))
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        text = ast.unparse(fn)
        if "eagle3" not in text or "model_type" not in text:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)) \
                    and node.value.elts and all(isinstance(e, ast.Constant) and isinstance(
                        e.value, str) for e in node.value.elts):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if names and "supported" in names[0]:
                    return {"kind": "list", "name": names[0], "function": fn.name,
                            "list": [e.value for e in node.value.elts]}  # type: ignore[attr-defined]
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                    and isinstance(node.left.value, str) and len(node.ops) == 1 \
                    and isinstance(node.ops[0], ast.NotIn) \
                    and "model_type" in ast.unparse(node.comparators[0]):
                return {"kind": "llama-only" if node.left.value == "llama" else "single",
                        "function": fn.name, "list": [node.left.value]}
    return {"kind": "none"}


def _registry() -> Any:
    try:
        from vllm.model_executor.models import ModelRegistry  # type: ignore[import-not-found]
    except Exception:  # any import failure means: cannot ask
        return None
    return ModelRegistry


def _supported_archs(registry: Any) -> set[str] | None:
    try:
        return set(registry.get_supported_archs())
    except Exception:
        return None


def _target_interface(registry: Any, archs: list[str]) -> tuple[bool | None, str]:
    """Does the target's model class implement SupportsEagle3? (None: cannot tell.)"""
    try:
        from vllm.model_executor.models.interfaces import (  # type: ignore[import-not-found]
            supports_eagle3,
        )
    except Exception:
        return None, "this vLLM has no SupportsEagle3 interface to ask"
    for arch in archs:
        model = getattr(registry, "models", {}).get(arch)
        if model is None:
            continue
        try:
            cls = model.load_model_cls()
        except Exception as exc:
            return None, f"cannot load {arch} to ask: {type(exc).__name__}: {exc}"
        return bool(supports_eagle3(cls)), f"{arch} ({cls.__module__}.{cls.__name__})"
    return None, f"none of {archs} is in the model registry"


def _draft_answer(draft: Mapping[str, Any], registry: Any) -> dict[str, Any]:
    spec_type = draft.get("speculators_model_type")
    archs = [str(a) for a in draft.get("architectures") or []]
    if spec_type:
        try:
            algos = importlib.import_module("vllm.transformers_utils.configs.speculators.algos")
            supported = sorted(getattr(algos, "SUPPORTED_SPECULATORS_TYPES", {}))
        except ImportError:
            return {"accepted": False, "format": "speculators", "value": spec_type,
                    "reason": "this vLLM has no speculators-format support "
                              "(vllm.transformers_utils.configs.speculators is missing)",
                    "hint": "export the drafter in the EAGLE format (LlamaForCausalLMEagle3)"
                            " or use a newer vLLM"}
        ok = spec_type in supported
        return {"accepted": ok, "format": "speculators", "value": spec_type,
                "expected": supported,
                "reason": f"speculators_model_type {spec_type!r} "
                          + ("is" if ok else "is not") + f" in {supported}"}
    renamed, how = None, "EAGLEConfig"
    try:
        from vllm.transformers_utils.configs.eagle import (  # type: ignore[import-not-found]
            EAGLEConfig,
        )
        cfg = EAGLEConfig(model=dict(draft), method="eagle3")
        renamed = [str(a) for a in getattr(cfg, "architectures", None) or []]
    except Exception as exc:
        how = f"the documented rename (EAGLEConfig failed: {type(exc).__name__})"
    if not renamed:
        renamed = [eagle3_rename(a) for a in archs]
    supported = _supported_archs(registry) if registry is not None else None
    if supported is None:
        return {"accepted": None, "format": "eagle", "value": archs, "renamed": renamed,
                "reason": "cannot read the model registry"}
    hits = [a for a in renamed if a in supported]
    return {"accepted": bool(hits), "format": "eagle", "value": archs, "renamed": renamed,
            "expected": sorted(a for a in supported if "Eagle3" in a),
            "reason": f"{how} renames {archs} to {renamed}, "
                      + (f"{hits[0]} is registered" if hits else
                         "which this vLLM's model registry does not have")}


def probe(target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None
          ) -> dict[str, Any]:
    """The installed vLLM's answer; run it in vLLM's interpreter. Never raises."""
    try:
        vllm = importlib.import_module("vllm")
    except Exception as exc:
        return {"installed": False, "error": f"{type(exc).__name__}: {exc}"}
    version = getattr(vllm, "__version__", None)
    if version is None:
        try:
            from importlib.metadata import version as dist_version
            version = dist_version("vllm")
        except Exception:
            version = "unknown"
    answer: dict[str, Any] = {"installed": True, "source": "installed", "version": version,
                              "path": os.path.dirname(getattr(vllm, "__file__", "") or "")}
    model_type = target_model_type(target_config)
    archs = [str(a) for a in target_config.get("architectures") or []]
    cls = _speculative_config_class()
    rule: dict[str, Any]
    if cls is None:
        rule = {"kind": "unknown", "reason": "no SpeculativeConfig in vllm.config"}
    else:
        try:
            rule = read_target_rule(inspect.getsource(cls))
            rule["where"] = ".".join(p for p in (cls.__module__, cls.__qualname__,
                                                 rule.get("function")) if p)
        except (OSError, TypeError, SyntaxError) as exc:
            rule = {"kind": "unknown", "reason": f"cannot read its source: {exc}"}
    registry = _registry()
    interface, iface_how = (_target_interface(registry, archs) if registry is not None
                            else (None, "no model registry to ask"))
    if rule["kind"] in ("list", "llama-only", "single"):
        listed = any(s in model_type for s in rule["list"])
        accepted: bool | None = listed and interface is not False
        reason = (f"model_type {model_type!r} " + ("matches" if listed else "matches none of")
                  + f" {rule['list']} ({rule['where']})")
        if listed and interface is False:
            reason += f"; but {iface_how} does not implement SupportsEagle3"
    elif rule["kind"] == "none":
        accepted = interface
        reason = (f"no model-type list in {rule.get('where')}; the target class decides: "
                  + iface_how + ("" if interface is None else
                                 (" implements SupportsEagle3" if interface else
                                  " does not implement SupportsEagle3")))
    else:
        accepted, reason = None, rule.get("reason", "unknown rule")
    answer["target"] = {"accepted": accepted, "model_type": model_type, "rule": rule,
                        "interface": interface, "reason": reason}
    if draft_config is not None:
        answer["draft"] = _draft_answer(draft_config, registry)
    return answer


# --- the fallback table ----------------------------------------------------------------------

@dataclass(frozen=True)
class Era:
    first: str                 # first version the rule is known in (approximate)
    last: str | None           # last version, None: up to the newest known
    kind: str                  # "llama-only" | "list" | "interface"
    targets: tuple[str, ...]   # substrings of model_type (for "interface": known families)
    keep_suffixed: bool        # EAGLEConfig keeps X...Eagle3 names (else always prefixes)
    speculators: bool          # speculators-format drafters load
    evidence: str


#: The eagle3 rules as found in vLLM's source; version bounds are approximate (the rule is
#: what matters, and the host's own vLLM is always asked first).
FALLBACK_TABLE: tuple[Era, ...] = (
    Era("0.8.0", "0.9.2", "llama-only", ("llama",), False, False,
        'vllm/config.py SpeculativeConfig._verify_args: `"llama" not in '
        'self.target_model_config.hf_text_config.model_type` -> "Eagle3 is only supported '
        'for Llama models"; reported for qwen3 in vllm-project/vllm#22152 (2025-08)'),
    Era("0.10.0", "0.10.1", "list", ("llama", "qwen"), True, False,
        "vllm/config.py SpeculativeConfig._verify_args: eagle3_target_supported = "
        '["llama", "qwen"]'),
    Era("0.10.2", "0.11.0", "list", ("llama", "qwen", "minicpm", "gpt_oss"), True, True,
        "vllm/config/speculative.py SpeculativeConfig._verify_args: eagle3_target_supported"
        " (quoted in vllm-project/vllm#31254 and #32765)"),
    Era("0.11.1", "0.13.0", "list", ("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl",
                                     "hunyuan_v1_dense", "afmoe"), True, True,
        "vllm/config/speculative.py SpeculativeConfig._verify_args: eagle3_target_supported"),
    Era("0.14.0", "0.20.2", "list", ("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl",
                                     "hunyuan_v1_dense", "afmoe", "nemotron_h", "deepseek_v2",
                                     "deepseek_v3", "kimi_k2", "kimi_k25", "minimax_m2",
                                     "gemma4"), True, True,
        "vllm/config/speculative.py SpeculativeConfig._verify_args: "
        "aux_hidden_states_supported (also for extract_hidden_states and dflash); the "
        "latest entries (minimax_m2, gemma4) arrived late in this range"),
    Era("0.21.0", None, "interface", ("llama", "qwen", "minicpm", "gpt_oss", "hunyuan",
                                      "afmoe", "nemotron_h", "deepseek", "kimi", "minimax",
                                      "gemma4"), True, True,
        "vllm/config/speculative.py SpeculativeConfig._verify_args has no model-type list;"
        " the target class must implement SupportsEagle3 "
        "(vllm/model_executor/models/interfaces.py), checked at load: 'Model does not "
        "support EAGLE3 interface'"),
)


def _version_tuple(text: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", text.split("+", 1)[0])[:3]
    return tuple(int(n) for n in nums) + (0,) * (3 - len(nums[:3]))


def era_for(version: str | None) -> Era | None:
    """The last era that starts at or before ``version``; None before eagle3 existed."""
    if not version:
        return None
    v = _version_tuple(version)
    found = None
    for era in FALLBACK_TABLE:
        if _version_tuple(era.first) <= v:
            found = era
    return found


def _era_accepts(era: Era, model_type: str, draft: Mapping[str, Any] | None
                 ) -> tuple[bool, bool | None]:
    target = any(s in model_type for s in era.targets)
    if draft is None:
        return target, None
    if draft.get("speculators_model_type"):
        return target, era.speculators and draft.get("speculators_model_type") == "eagle3"
    archs = [str(a) for a in draft.get("architectures") or []]
    renamed = [eagle3_rename(a, era.keep_suffixed) for a in archs]
    # registered eagle3 drafter architectures in every era: Eagle3LlamaForCausalLM; the
    # suffixed LlamaForCausalLMEagle3 only where names ending in Eagle3 are kept
    known = {"Eagle3LlamaForCausalLM"} | ({"LlamaForCausalLMEagle3"} if era.keep_suffixed
                                         else set())
    return target, any(r in known for r in renamed)


def first_accepting(target_config: Mapping[str, Any],
                    draft_config: Mapping[str, Any] | None) -> str | None:
    """The first version in the table whose rules accept this pair (None: no known one)."""
    model_type = target_model_type(target_config)
    for era in FALLBACK_TABLE:
        t_ok, d_ok = _era_accepts(era, model_type, draft_config)
        if t_ok and d_ok is not False:
            return era.first
    return None


def fallback_answer(version: str | None, target_config: Mapping[str, Any],
                    draft_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """What :data:`FALLBACK_TABLE` says for ``version`` (or, unknown, for each era)."""
    model_type = target_model_type(target_config)
    verdicts = [(era, *_era_accepts(era, model_type, draft_config)) for era in FALLBACK_TABLE]
    first_ok = next((f"{e.first}" for e, t, d in verdicts if t and d is not False), None)
    era = era_for(version)
    if version and era is None:
        reason = (f"FALLBACK (vLLM not importable here): vLLM {version} predates eagle3 "
                  f"(first in about {FALLBACK_TABLE[0].first})")
        answer: dict[str, Any] = {
            "installed": False, "source": "fallback", "version": version, "era": None,
            "target": {"accepted": False, "model_type": model_type, "interface": None,
                       "rule": {"kind": "none"}, "reason": reason}}
        if draft_config is not None:
            answer["draft"] = {"accepted": False, "format": "eagle", "reason": reason,
                               "value": draft_config.get("architectures")}
        return answer
    chosen = era or FALLBACK_TABLE[-1]
    _e, t_ok, d_ok = next(v for v in verdicts if v[0] is chosen)
    span = f"{chosen.first}..{chosen.last or 'newest'}"
    label = (f"FALLBACK (vLLM not importable here; rules for vLLM {span} from the table in "
             f"pipeline/vllm_compat.py, approximate versions)")
    hedge = "" if chosen.kind != "interface" else \
        " (families believed to implement SupportsEagle3; unverified without vLLM)"
    target = {"accepted": t_ok, "model_type": model_type, "interface": None,
              "rule": {"kind": chosen.kind, "list": list(chosen.targets)},
              "reason": f"{label}: model_type {model_type!r} "
                        + ("matches" if t_ok else "matches none of")
                        + f" {list(chosen.targets)}{hedge}; source: {chosen.evidence}"
                        + (f"; first accepted in vLLM {first_ok}" if first_ok else
                           "; no known vLLM accepts it")}
    answer = {"installed": False, "source": "fallback", "version": version, "era": span,
              "target": target}
    if draft_config is not None:
        spec_type = draft_config.get("speculators_model_type")
        answer["draft"] = {
            "accepted": d_ok, "format": "speculators" if spec_type else "eagle",
            "value": spec_type or draft_config.get("architectures"),
            "reason": f"{label}: " + (
                ("speculators-format drafters load" if chosen.speculators else
                 "no speculators-format support") if spec_type else
                ("names ending in Eagle3 are kept" if chosen.keep_suffixed else
                 "every architecture is prefixed with Eagle3"))}
    return answer


# --- running the probe in the host's vLLM interpreter ----------------------------------------

def ask(python: str | None, target_config: Mapping[str, Any],
        draft_config: Mapping[str, Any] | None, timeout: float = 300.0) -> dict[str, Any]:
    """:func:`probe` in ``python`` (default: this interpreter), in a child process."""
    with tempfile.TemporaryDirectory(prefix="vllm-compat-") as tmp:
        inp, out = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
        with open(inp, "w") as fh:
            json.dump({"target": target_config, "draft": draft_config}, fh)
        try:
            proc = subprocess.run([python or sys.executable, "-m", "pipeline.vllm_compat",
                                   "--input", inp, "--out", out], capture_output=True,
                                  text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"installed": False, "error": f"cannot run the probe: {exc}"}
        try:
            with open(out) as fh:
                return dict(json.load(fh))
        except (OSError, ValueError):
            tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
            return {"installed": False, "error": f"the probe failed (exit {proc.returncode})"
                                                 f": {tail}"}


def cli_version(command: list[str], timeout: float = 120.0) -> str | None:
    """``vllm --version`` of a server executable (another environment's vLLM)."""
    try:
        proc = subprocess.run([*command, "--version"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\b(\d+\.\d+(?:\.\d+)?[\w.+-]*)", proc.stdout.strip().splitlines()[-1]
                  if proc.returncode == 0 and proc.stdout.strip() else "")
    return m.group(1) if m else None


def compat_checks(target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None,
                  *, python: str | None = None, version: str | None = None,
                  command: list[str] | None = None, timeout: float = 300.0
                  ) -> tuple[list[Check], dict[str, Any]]:
    """Named checks: vllm_installed, vllm_eagle3_target, vllm_eagle3_drafter (with a
    drafter); and the raw answer, for metrics."""
    answer = ask(python, target_config, draft_config, timeout)
    checks: list[Check] = []
    if answer.get("installed"):
        checks.append(Check("vllm_installed", True, value=answer.get("version"),
                            message=f"vllm {answer.get('version')} at {answer.get('path')}"))
    else:
        why = answer.get("error") or "not importable"
        if version is None and command:
            version = cli_version(command)
        where = python or sys.executable
        checks.append(Check("vllm_installed", False, value=None, expected="vllm importable",
                            message=f"no vLLM in {where} ({why}); install it there "
                                    "(pip install vllm), or set `vllm_python` to the "
                                    "interpreter that has it"))
        answer = {**fallback_answer(version, target_config, draft_config),
                  "error": answer.get("error")}
    t = answer["target"]
    first = first_accepting(target_config, None)
    advice = (f"; by the table of known rules, vLLM {first} and later accept this model_type"
              if first else "; no vLLM release known here accepts this model_type: it "
                            "needs a vLLM patch (model class with SupportsEagle3)")
    checks.append(Check("vllm_eagle3_target", t["accepted"] is not False,
                        value=t["model_type"],
                        expected=t["rule"].get("list") or t["rule"].get("kind"),
                        message=t["reason"] + (advice if t["accepted"] is False else "")
                        + ("" if t["accepted"] is not None else " (could not decide: "
                                                                "vLLM decides at load)")))
    if draft_config is not None:
        d = answer["draft"]
        checks.append(Check("vllm_eagle3_drafter", d["accepted"] is not False,
                            value=d.get("value"), expected=d.get("expected"),
                            message=d["reason"] + (f"; {d['hint']}" if d.get("hint") else "")))
    return checks, answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ask the installed vLLM whether it serves "
                                                 "a verifier with an EAGLE-3 drafter.")
    parser.add_argument("--input", required=True, help="JSON {target: config, draft: config}")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with open(args.input) as fh:
        data = json.load(fh)
    answer = probe(data.get("target") or {}, data.get("draft"))
    with open(args.out, "w") as fh:
        json.dump(answer, fh, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
