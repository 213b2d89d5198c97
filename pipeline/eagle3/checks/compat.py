"""Compatibility checks: would this host's vLLM serve this verifier with this drafter?

The question is asked of the installed vLLM itself, in its own interpreter, in one child
process (:func:`pipeline.vllm.compat.ask` running :mod:`pipeline.vllm.probe`): the target
``model_type`` rule, the drafter architecture after ``EAGLEConfig``'s rename, the
registry, whether its EAGLE-3 Llama model reads ``norm_before_residual``, and what its
loader does with the checkpoint's tensors. Where vLLM is not importable, the answers come
from the tables of known vLLM behaviour: every such check is ``from_table`` (shown as
TABLE, never PASS), its message says FALLBACK, and ``vllm_checks_from_table`` counts them
(a gate's ``require_vllm: true`` holds it at 0).

Checks: ``vllm_source`` (which vLLM answered, or that the table did: a failure only with
``require_vllm`` or when the named ``python`` has no vLLM), ``vllm_eagle3_target``,
``vllm_eagle3_drafter``, ``vllm_norm_flags`` (a drafter trained with
``norm_before_residual`` needs a vLLM whose EAGLE-3 Llama model reads that flag; a build
that ignores it runs another network than the one trained, with no error) and
``vllm_weights`` (:mod:`pipeline.eagle3.checks.vllm_weights`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.actions import TABLE_CHECKS, Check
from pipeline.eagle3.checks.vllm_weights import table_sources, vllm_sources, weights_check
from pipeline.eagle3.model.checkpoint_files import (
    DrafterLayout,
    VerifierInfo,
    WeightSet,
    weight_files,
)
from pipeline.vllm.compat import ask, compat_checks


def compatibility_checks(verifier: VerifierInfo, layout: DrafterLayout, checkpoint: Path, *,
                         python: str | None = None, version: str | None = None,
                         command: list[str] | None = None, require_vllm: bool = False
                         ) -> tuple[list[Check], dict[str, Any]]:
    """(checks, metrics) of the compatibility layer."""
    draft = layout.raw if layout.fmt in ("eagle", "speculators") else None
    checks: list[Check] = []
    if layout.fmt == "checkpoint":
        checks.append(Check("vllm_format", False, value="training checkpoint",
                            expected="eagle or speculators export",
                            message="vLLM cannot load a training checkpoint: export it "
                                    "(eagle3.export) and verify the export"))
    questions = ["compat", "norm"] + (["weights"] if draft is not None else [])
    answers = ask(python, {"ask": questions, "target": verifier.config, "draft": draft,
                           "verifier_dir": str(verifier.directory.resolve()),
                           "drafter_dir": str(Path(checkpoint).resolve())})
    raw, answer = compat_checks(verifier.config, draft, python=python, version=version,
                                command=command, answer=answers.get("compat") or {})
    installed = bool(answer.get("installed"))
    changes: list[str] = []
    for c in raw:
        if c.name == "vllm_installed":
            msg = (c.message if installed else
                   f"FALLBACK: {c.message}; the answers below come from the table of known "
                   "vLLM rules, not from a vLLM install")
            # Naming an interpreter says "this is the serving vLLM": it must answer.
            must = require_vllm or python is not None
            checks.append(Check("vllm_source", installed or not must,
                                value=answer.get("version") if installed else "fallback table",
                                expected="installed vLLM" if must else None,
                                message=msg, from_table=not installed))
            continue
        checks.append(c)
        if not c.passed:
            changes.append(c.message)
    norm = _norm_flag_check(layout, answers.get("norm") or {})
    checks.append(norm)
    if not norm.passed:
        changes.append(norm.message)
    metrics: dict[str, Any] = {"vllm_version": answer.get("version"),
                               "vllm_compat_source": "vllm" if installed else "fallback",
                               "vllm_changes_needed": changes}
    if draft is not None:
        weights, sources = _weights_check(layout, verifier, checkpoint, installed,
                                          answer.get("version"), answers.get("weights") or {})
        checks.append(weights)
        metrics["vllm_weight_sources"] = sources
        if not weights.passed:
            changes.append(weights.message)
    metrics[TABLE_CHECKS] = sum(1 for c in checks if c.from_table)
    return checks, metrics


def _weights_check(layout: DrafterLayout, verifier: VerifierInfo, checkpoint: Path,
                   installed: bool, version: str | None, answer: dict[str, Any]
                   ) -> tuple[Check, dict[str, Any]]:
    own_vocab = (layout.draft_vocab_size or verifier.vocab_size) != verifier.vocab_size
    if installed and "checkpoint" in answer:
        sources = vllm_sources(answer, version)
        return weights_check(sources, own_vocab=own_vocab), sources
    with WeightSet.open(weight_files(checkpoint)) as ws:
        names = list(ws.tensors)
    sources = table_sources(layout, names, verifier.vocab_size)
    note = (f"vLLM {version} could not be asked ({answer.get('error')})"
            if installed and answer.get("error") else "")
    check = weights_check(sources, own_vocab=own_vocab, note=note)
    check.from_table = True
    return check, sources


def _norm_flag_check(layout: DrafterLayout, probe: dict[str, Any]) -> Check:
    if not layout.norm_before_residual:
        return Check("vllm_norm_flags", True, value=False,
                     message="norm_before_residual is off: every vLLM EAGLE-3 build runs it")
    said = ("" if "norm_before_residual" in layout.raw else
            " (not in the config: vLLM's speculators reader defaults it to true)")
    if probe.get("installed") and "reads" in probe:
        ok = bool(probe["reads"])
        return Check("vllm_norm_flags", ok, value=True,
                     expected="a vLLM that reads norm_before_residual",
                     message=f"vLLM {probe.get('version')} "
                             + ("reads norm_before_residual" if ok else
                                f"does not read norm_before_residual ({probe.get('path')}): it "
                                "would serve the drafter without it and acceptance drops; "
                                "upgrade vLLM or retrain without --norm-before-residual")
                             + said)
    return Check("vllm_norm_flags", True, value=True, from_table=True,
                 message="FALLBACK (no vLLM here to ask): the drafter needs "
                         "norm_before_residual" + said + "; make sure the serving vLLM's "
                         "llama_eagle3.py reads it (builds that ignore it run another "
                         "network, silently)")
