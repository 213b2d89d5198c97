"""Compatibility checks: would this host's vLLM serve this verifier with this drafter?

The question is asked of the installed vLLM itself, in its own interpreter
(:func:`pipeline.vllm_compat.compat_checks`: the target ``model_type`` rule, the drafter
architecture after ``EAGLEConfig``'s rename, the registry). Where vLLM is not importable,
the answer comes from the table of known vLLM rules, and every message says FALLBACK.

Checks: ``vllm_source`` (which vLLM answered, or that the table did: a failure only with
``require_vllm`` or when the named ``python`` has no vLLM), ``vllm_eagle3_target``, ``vllm_eagle3_drafter``, and
``vllm_norm_flags``: a drafter trained with ``norm_before_residual`` needs a vLLM whose
EAGLE-3 Llama model reads that flag; a build that ignores it runs another network than
the one trained, with no error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from pipeline.actions import Check
from pipeline.eagle3.checkpoint_files import DrafterLayout
from pipeline.vllm_compat import compat_checks

# Asked in vLLM's interpreter: does its EAGLE-3 Llama drafter read norm_before_residual?
_NORM_PROBE = """
import inspect, json, sys
try:
    import vllm
    from vllm.model_executor.models import llama_eagle3 as m
except Exception as exc:
    print(json.dumps({"installed": "vllm" in sys.modules, "error": repr(exc)[:200]}))
else:
    src = inspect.getsource(m)
    print(json.dumps({"installed": True, "version": getattr(vllm, "__version__", None),
                      "reads": "norm_before_residual" in src, "path": m.__file__}))
"""


def _norm_probe(python: str | None, timeout: float = 120.0) -> dict[str, Any]:
    try:
        proc = subprocess.run([python or sys.executable, "-c", _NORM_PROBE],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"installed": False, "error": f"cannot run the probe: {exc}"}


def compatibility_checks(target_config: dict[str, Any], layout: DrafterLayout, *,
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
    raw, answer = compat_checks(target_config, draft, python=python, version=version,
                                command=command)
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
                                message=msg))
            continue
        checks.append(c)
        if not c.passed:
            changes.append(c.message)
    norm = _norm_flag_check(layout, python)
    checks.append(norm)
    if not norm.passed:
        changes.append(norm.message)
    metrics = {"vllm_version": answer.get("version"),
               "vllm_compat_source": "vllm" if installed else "fallback",
               "vllm_changes_needed": changes}
    return checks, metrics


def _norm_flag_check(layout: DrafterLayout, python: str | None) -> Check:
    if not layout.norm_before_residual:
        return Check("vllm_norm_flags", True, value=False,
                     message="norm_before_residual is off: every vLLM EAGLE-3 build runs it")
    probe = _norm_probe(python)
    if probe.get("installed") and "reads" in probe:
        ok = bool(probe["reads"])
        return Check("vllm_norm_flags", ok, value=True,
                     expected="a vLLM that reads norm_before_residual",
                     message=f"vLLM {probe.get('version')} "
                             + ("reads norm_before_residual" if ok else
                                f"does not read norm_before_residual ({probe.get('path')}): it "
                                "would serve the drafter without it and acceptance drops; "
                                "upgrade vLLM or retrain without --norm-before-residual"))
    return Check("vllm_norm_flags", True, value=True,
                 message="FALLBACK (no vLLM here to ask): the drafter needs "
                         "norm_before_residual; make sure the serving vLLM's llama_eagle3.py "
                         "reads it (builds that ignore it run another network, silently)")
