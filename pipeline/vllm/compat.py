"""Will this vLLM serve this verifier with this EAGLE-3 drafter? Asked of vLLM's own code.

The answer changed across vLLM releases, and the seed lost a day to it (docs/serving.md):

- which target ``model_type`` eagle3 accepts: ``SpeculativeConfig._verify_args`` first
  required ``"llama"`` in it, then matched a list of substrings (``eagle3_target_supported``,
  later ``aux_hidden_states_supported``) that grew release by release; the newest (0.33.0,
  read from its code) have no list: the target's model class must implement
  ``SupportsEagle3``, which vLLM checks only when it loads the model (``Model does not
  support EAGLE3 interface``);
- which drafter it loads: an EAGLE-style config's ``architectures`` are renamed by
  ``EAGLEConfig`` (``X`` -> ``Eagle3X``; later ``X`` is kept when it already starts or ends
  with ``Eagle3``, e.g. ``LlamaForCausalLMEagle3``) and must then be in the model
  registry; a speculators-style config (``speculators_model_type``) needs that type in
  ``SUPPORTED_SPECULATORS_TYPES``, which older releases lack entirely.

So :func:`compat_checks` does not hard-code a list. :func:`ask` runs
:mod:`pipeline.vllm.probe` in the host's vLLM interpreter, by file path from a scratch
directory: that interpreter usually cannot import this project, and vLLM's imports and
logs stay out of the caller. The probe reads the rule from the installed
``SpeculativeConfig`` source (``inspect`` + ``ast``), asks the installed ``EAGLEConfig``
how it renames the drafter and the installed ``ModelRegistry`` whether that architecture
exists and whether the target class supports eagle3. Only when vLLM is not importable does
the answer come from :data:`FALLBACK_TABLE`, the rules as found in vLLM's source, with the
evidence cited and every answer labelled as a fallback.

It returns named :class:`pipeline.actions.Check` s: ``vllm_installed``,
``vllm_eagle3_target``, ``vllm_eagle3_drafter`` (the last two ``from_table`` when the table
answered: shown as TABLE, not PASS). The preflight stage and the checkpoint
verification use them. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.actions import Check
from pipeline.vllm.probe import eagle3_rename, read_target_rule, target_model_type

__all__ = ["FALLBACK_TABLE", "ask", "compat_checks", "fallback_answer", "package_version",
           "read_target_rule"]

PROBE = Path(__file__).with_name("probe.py")
# Runs the probe file as __main__ without putting its directory (or the caller's) first
# on sys.path: pipeline/ holds modules named like common packages (errors, spec, ...).
_BOOT = ("import runpy, sys; sys.argv = sys.argv[1:]; "
         "runpy.run_path(sys.argv[0], run_name='__main__')")


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
    read: str | None = None   # the release whose installed code confirmed it


#: The eagle3 rules as found in vLLM's source. ``read``: the release whose installed code
#: was read to confirm the row (the others come from quotes of vLLM's source in its issues
#: and changelogs); every bound not read so is approximate. The host's own vLLM is always
#: asked first.
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
    Era("0.21.0", None, "interface", ("llama", "mistral", "qwen", "minicpm", "gpt_oss",
                                      "hunyuan", "afmoe", "nemotron_h", "deepseek_v",
                                      "kimi_k2", "kimi_k25", "minimax_m2", "gemma4",
                                      "granite", "apertus", "phi3", "mimo_v2", "plamo3"),
        True, True,
        "vllm/config/speculative.py SpeculativeConfig has no model-type list; the target "
        "class must implement SupportsEagle3 (vllm/model_executor/models/interfaces.py), "
        "checked when the model loads (v1/worker/gpu_model_runner.py: 'Model does not "
        "support EAGLE3 interface but aux_hidden_state_outputs was requested'); the "
        "families are those whose model class implements it in 0.33.0 (llama, deepseek_v2/"
        "v3 and kimi_k2 through DeepseekV3ForCausalLM, kimi_k25, qwen2/3, gemma4, ...; "
        "not gemma3); where this era starts is approximate", read="0.33.0"),
)


#: P-EAGLE (speculators type ``peagle``, served with ``parallel_drafting``): read in vLLM
#: 0.26.0's transformers_utils/configs/speculators/algos.py (update_peagle) and
#: model_executor/models/llama_eagle3.py (mask_hidden); earlier releases not read here.
PEAGLE_READ = "0.26.0"


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
    if draft.get("speculators_model_type") == "peagle":
        return target, era.last is None  # the newest era, where PEAGLE_READ lies
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
    bounds = (f"read from vLLM {chosen.read}'s code, other versions approximate"
              if chosen.read else "approximate versions")
    label = (f"FALLBACK (vLLM not importable here; rules for vLLM {span} from the table in "
             f"pipeline/vllm/compat.py, {bounds})")
    hedge = "" if chosen.kind != "interface" else (
        " (families whose model class implements SupportsEagle3"
        + (f" in vLLM {chosen.read}" if chosen.read else "")
        + "; this host's classes were not asked)")
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
        said = (("speculators-format drafters load" if chosen.speculators else
                 "no speculators-format support") if spec_type else
                ("names ending in Eagle3 are kept" if chosen.keep_suffixed else
                 "every architecture is prefixed with Eagle3"))
        if spec_type == "peagle":
            known = version is None or _version_tuple(version) >= _version_tuple(PEAGLE_READ)
            d_ok = True if known else None
            said = (f"speculators type 'peagle' (P-EAGLE, served with parallel_drafting) "
                    f"is read in vLLM {PEAGLE_READ}'s algos.py"
                    + ("" if known else f"; whether {version} has it is not known here"))
        answer["draft"] = {
            "accepted": d_ok, "format": "speculators" if spec_type else "eagle",
            "value": spec_type or draft_config.get("architectures"),
            "reason": f"{label}: {said}"}
    return answer


# --- running the probe in the host's vLLM interpreter ----------------------------------------

def ask(python: str | None, request: Mapping[str, Any], timeout: float = 300.0
        ) -> dict[str, Any]:
    """:mod:`pipeline.vllm.probe`'s answers in ``python`` (default: this interpreter), in a
    child process started from a scratch directory. ``request`` as the probe reads it
    (``ask``, ``target``, ``draft``, ...); a child that cannot run answers every question
    with ``{"installed": False, "error": ...}``."""
    questions = list(request.get("ask") or ["compat"])
    with tempfile.TemporaryDirectory(prefix="vllm-probe-") as tmp:
        inp, out = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
        with open(inp, "w") as fh:
            json.dump(dict(request), fh, default=str)
        try:
            proc = subprocess.run([python or sys.executable, "-c", _BOOT, str(PROBE),
                                   "--input", inp, "--out", out], capture_output=True,
                                  text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                  cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as exc:
            failed = {"installed": False, "error": f"cannot run the probe: {exc}"}
            return {q: failed for q in questions}
        try:
            with open(out) as fh:
                return dict(json.load(fh))
        except (OSError, ValueError):
            tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
            failed = {"installed": False,
                      "error": f"the probe failed (exit {proc.returncode}): {tail}"}
            return {q: failed for q in questions}


_VERSION_CODE = ("from importlib.metadata import version; print(version('vllm'))")


def _interpreter_of(command: list[str]) -> str | None:
    """The Python that runs a server command: ``[python, -m, vllm...]`` names it; a
    console script (``/opt/vllm/bin/vllm``) names it in its ``#!`` line, or sits beside it."""
    if not command:
        return None
    first = command[0]
    name = os.path.basename(first)
    if re.fullmatch(r"python(\d+(\.\d+)?)?", name):
        return first
    path = first if os.sep in first else (_which(first) or "")
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            line = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        line = ""
    if line.startswith("#!"):
        parts = line[2:].split()
        if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
            parts = parts[1:]
        if parts and "python" in os.path.basename(parts[0]):
            return parts[0]
    for sibling in ("python", "python3"):
        candidate = os.path.join(os.path.dirname(path), sibling)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _which(name: str) -> str | None:
    from shutil import which
    return which(name)


def package_version(command: list[str], timeout: float = 60.0) -> str | None:
    """The vLLM version of a server command (another environment's vLLM), read from its
    interpreter's package metadata: ``vllm --version`` imports the platform and crashes
    on a machine without a GPU. ``--version`` is only the last resort."""
    python = _interpreter_of(command)
    if python:
        try:
            proc = subprocess.run([python, "-c", _VERSION_CODE], capture_output=True,
                                  text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                  cwd=tempfile.gettempdir())
            lines = proc.stdout.strip().splitlines()
            if proc.returncode == 0 and lines and re.fullmatch(r"\d+\.\d+\S*", lines[-1]):
                return lines[-1]
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        proc = subprocess.run([*command, "--version"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\b(\d+\.\d+(?:\.\d+)?[\w.+-]*)", proc.stdout.strip().splitlines()[-1]
                  if proc.returncode == 0 and proc.stdout.strip() else "")
    return m.group(1) if m else None


def installed_check(answer: Mapping[str, Any], python: str | None) -> Check:
    """``vllm_installed`` for a probe's ``compat`` answer."""
    if answer.get("installed"):
        return Check("vllm_installed", True, value=answer.get("version"),
                     message=f"vllm {answer.get('version')} at {answer.get('path')}")
    why = answer.get("error") or "not importable"
    where = python or sys.executable
    if "No module named 'vllm'" in why or "not importable" in why:
        fix = ("install it there (pip install vllm), or set `vllm_python` to the "
               "interpreter that has it")
    else:
        fix = ("vLLM is there but failed to import or answer: run "
               f"`{where} -c 'import vllm'` to see why")
    return Check("vllm_installed", False, value=None, expected="vllm importable",
                 message=f"no usable vLLM in {where} ({why}); {fix}")


def compat_checks(target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None,
                  *, python: str | None = None, version: str | None = None,
                  command: list[str] | None = None, timeout: float = 300.0,
                  answer: Mapping[str, Any] | None = None
                  ) -> tuple[list[Check], dict[str, Any]]:
    """Named checks: vllm_installed, vllm_eagle3_target, vllm_eagle3_drafter (with a
    drafter); and the raw answer, for metrics. ``answer``: a probe's ``compat`` answer
    already asked (else it is asked here)."""
    if answer is None:
        answer = ask(python, {"ask": ["compat"], "target": dict(target_config),
                              "draft": None if draft_config is None else dict(draft_config)},
                     timeout)["compat"]
    checks = [installed_check(answer, python)]
    table = not answer.get("installed")
    if table:
        if version is None and command:
            version = package_version(command)
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
                                                                "vLLM decides at load)"),
                        from_table=table))
    if draft_config is not None:
        d = answer["draft"]
        checks.append(Check("vllm_eagle3_drafter", d["accepted"] is not False,
                            value=d.get("value"), expected=d.get("expected"),
                            message=d["reason"] + (f"; {d['hint']}" if d.get("hint") else ""),
                            from_table=table))
    return checks, dict(answer)
