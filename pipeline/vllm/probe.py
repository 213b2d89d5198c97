"""Questions asked of an installed vLLM, in vLLM's own interpreter.

The serving vLLM usually lives in another environment than this project (its own venv,
its own torch), which cannot import ``pipeline``. So this file is self-contained: the
standard library at module level, vLLM and torch only inside the functions that need
them. :func:`pipeline.vllm.compat.ask` runs it by path, from a scratch working
directory (nothing there can shadow vLLM's imports)::

    PY -c "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], \
           run_name='__main__')" .../pipeline/vllm/probe.py --input IN.json --out OUT.json

``IN.json`` is ``{"target": config, "draft": config, "ask": [...], "verifier_dir": ...,
"drafter_dir": ...}``; ``OUT.json`` gets one answer per question:

- ``compat`` (:func:`compat`): the eagle3 target rule read from ``SpeculativeConfig``'s
  source, ``supports_eagle3`` of the target's model class, the drafter architecture after
  ``EAGLEConfig``'s rename and whether the registry has it;
- ``norm`` (:func:`norm_flag`): does this vLLM's ``llama_eagle3.py`` read
  ``norm_before_residual``;
- ``weights`` (:func:`weight_sources`): vLLM's own EAGLE-3 drafter class, built on the meta
  device from the verifier's and drafter's configs through vLLM's config classes
  (:mod:`pipeline.vllm.drafter`, loaded by path beside this file), fed the checkpoint's
  tensor names and shapes through its own ``load_weights``: which of its parameters the
  checkpoint fills (from which tensors), which it takes from the target, which stay at
  their initial values, which tensors it ignores or refuses. No weight data is read and
  no memory is spent on the model.

Every function answers with a dict and never raises: a failure is the answer's ``error``.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import os
import runpy
import sys
import textwrap
import traceback
from collections.abc import Mapping
from typing import Any


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


def _error(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}" if text else type(exc).__name__


def installed_version() -> tuple[str | None, str]:
    """``(version, path)`` of the importable vLLM, from its package metadata first (that
    needs no import, and ``vllm --version`` crashes on a machine without a GPU)."""
    version = None
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version
        try:
            version = dist_version("vllm")
        except PackageNotFoundError:
            version = None
    except ImportError:
        version = None
    path = ""
    try:
        vllm = importlib.import_module("vllm")
        version = version or getattr(vllm, "__version__", None)
        path = os.path.dirname(getattr(vllm, "__file__", "") or "")
    except Exception:
        pass
    return version, path


# --- compat: the eagle3 rules of this vLLM ---------------------------------------------------

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
            return None, f"cannot load {arch} to ask: {_error(exc)}"
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


def compat(target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None
           ) -> dict[str, Any]:
    """This vLLM's answer: would it serve this target with this drafter?"""
    try:
        importlib.import_module("vllm")
    except Exception as exc:
        return {"installed": False, "error": _error(exc)}
    version, path = installed_version()
    answer: dict[str, Any] = {"installed": True, "source": "installed",
                              "version": version or "unknown", "path": path}
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
                                  " does not implement SupportsEagle3, so vLLM refuses it "
                                  "when it loads the model ('Model does not support EAGLE3 "
                                  "interface')")))
    else:
        accepted, reason = None, rule.get("reason", "unknown rule")
    answer["target"] = {"accepted": accepted, "model_type": model_type, "rule": rule,
                        "interface": interface, "reason": reason}
    if draft_config is not None:
        answer["draft"] = _draft_answer(draft_config, registry)
    return answer


# --- norm: does this vLLM read norm_before_residual ------------------------------------------

def norm_flag() -> dict[str, Any]:
    try:
        from vllm.model_executor.models import llama_eagle3 as m  # type: ignore[import-not-found]
        src = inspect.getsource(m)
    except Exception as exc:
        return {"installed": "vllm" in sys.modules, "error": _error(exc)}
    return {"installed": True, "version": installed_version()[0],
            "reads": "norm_before_residual" in src, "path": m.__file__}


# --- weights: what vLLM's loader fills from the checkpoint -----------------------------------

def _safetensors_headers(directory: str) -> list[tuple[str, str, list[int]]]:
    """``(name, dtype, shape)`` of every tensor in the directory's safetensors files, from
    their JSON headers (no data read, no safetensors package needed)."""
    out = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, name), "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for key, info in header.items():
            if key != "__metadata__":
                out.append((key, str(info["dtype"]), [int(x) for x in info["shape"]]))
    return out


_TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
                 "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
                 "BOOL": "bool"}


_DRAFTER: dict[str, Any] = {}


def vllm_drafter() -> dict[str, Any]:
    """The namespace of ``drafter.py`` beside this file, run by path once: this file
    itself runs outside the package, where ``pipeline`` cannot be imported."""
    if not _DRAFTER:
        here = os.path.dirname(os.path.abspath(__file__))
        _DRAFTER.update(runpy.run_path(os.path.join(here, "drafter.py")))
    return _DRAFTER


def weight_sources(verifier_dir: str, drafter_dir: str) -> dict[str, Any]:
    """Which parameters of vLLM's drafter the checkpoint fills, through vLLM's own
    ``load_weights``, fed meta tensors with the checkpoint's names, dtypes and shapes."""
    try:
        import torch
        from vllm.config import set_current_vllm_config  # type: ignore[import-not-found]
        from vllm.model_executor.model_loader.weight_utils import (  # type: ignore[import-not-found]
            default_weight_loader,
        )
    except Exception as exc:
        return {"error": f"cannot import vLLM's loader: {_error(exc)}"}
    drafter = vllm_drafter()
    try:
        config = drafter["vllm_configs"](verifier_dir, drafter_dir)
        model, cls_name = drafter["build_drafter"](config, device="meta")
    except Exception as exc:
        return {"error": f"vLLM cannot build the drafter: {_error(exc)}",
                "where": traceback.format_exc(limit=-2).strip().splitlines()[-3:]}
    fed: dict[str, list[str]] = {}
    current: list[str] = []

    def recorder(param_name: str, loader: Any) -> Any:
        def load(param: Any, loaded: Any, *args: Any, **kwargs: Any) -> Any:
            fed.setdefault(param_name, []).extend(current)
            return loader(param, loaded, *args, **kwargs)
        return load

    params = dict(model.named_parameters())
    for name, param in params.items():
        param.weight_loader = recorder(name, getattr(param, "weight_loader",
                                                     default_weight_loader))
    refused: dict[str, str] = {}
    ignored: list[str] = []
    tensors = _safetensors_headers(drafter_dir)

    def meta(dtype: str, shape: list[int]) -> Any:
        return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES.get(dtype, "float32")),
                           device="meta")

    # A parallel-drafting (P-EAGLE) drafter copies ``mask_hidden`` into a buffer, not
    # through a weight loader, and its load_weights refuses any call whose tensors lack
    # it: so it goes with every call, and on its own once (a wrong size fails the copy).
    parallel = bool(getattr(model, "use_parallel_drafting", False))
    mask = next(((n, meta(d, s)) for n, d, s in tensors if "mask_hidden" in n), None)
    buffers: dict[str, list[str]] = {}
    load_error = None
    if parallel and mask is None:  # each tensor alone; vLLM's verdict on the whole below
        model.use_parallel_drafting = False
    with set_current_vllm_config(config):
        for name, dtype, shape in tensors:
            current[:] = [name]
            before = sum(len(v) for v in fed.values())
            batch = [(name, meta(dtype, shape))]
            if parallel and mask is not None and name != mask[0]:
                batch.append(mask)
            try:
                model.load_weights(batch)
            except Exception as exc:
                refused[name] = _error(exc)
                continue
            if parallel and mask is not None and name == mask[0]:
                buffers["mask_hidden"] = [name]
            elif sum(len(v) for v in fed.values()) == before:
                ignored.append(name)
        model.use_parallel_drafting = parallel
        if parallel and mask is None:
            try:
                model.load_weights([])  # vLLM's own verdict on a drafter without it
            except Exception as exc:
                load_error = _error(exc)
    own_lm = bool(getattr(model, "has_own_lm_head", True))
    own_embed = bool(getattr(model, "has_own_embed_tokens", True))
    target: list[str] = []
    for name in params:
        if name in fed:
            continue
        # vLLM's proposer shares the target's layer when the checkpoint has none
        # (llm_base_proposer._maybe_share_embeddings / _maybe_share_lm_head)
        shared_embed = name.endswith("embed_tokens.weight") and not own_embed
        shared_head = name.startswith("lm_head.") and not own_lm
        if shared_embed or shared_head:
            target.append(name)
    initial = [n for n in params if n not in fed and n not in target]
    if parallel and "mask_hidden" not in buffers:
        initial.append("mask_hidden")
    return {"class": cls_name,
            "params": {n: {"shape": list(p.shape), "from": fed.get(n, [])}
                       for n, p in params.items()},
            "checkpoint": {**{n: fed[n] for n in params if n in fed}, **buffers},
            "target": target, "initial": initial, "ignored": ignored, "refused": refused,
            "parallel_drafting": parallel, "load_error": load_error,
            "aux_layer_ids": drafter["aux_ids"](config)}



# --- entry point -----------------------------------------------------------------------------

def answer(request: Mapping[str, Any]) -> dict[str, Any]:
    ask = list(request.get("ask") or ["compat"])
    out: dict[str, Any] = {}
    for question in ask:
        try:
            if question == "compat":
                out["compat"] = compat(request.get("target") or {}, request.get("draft"))
            elif question == "norm":
                out["norm"] = norm_flag()
            elif question == "weights":
                out["weights"] = weight_sources(str(request["verifier_dir"]),
                                                str(request["drafter_dir"]))
            else:
                out[question] = {"error": f"unknown question {question!r}"}
        except Exception as exc:  # an answer, never a crash: the caller reads the file
            out[question] = {"error": _error(exc)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ask the installed vLLM about an EAGLE-3 "
                                                 "drafter and its verifier.")
    parser.add_argument("--input", required=True, help="JSON request (see the module doc)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with open(args.input) as fh:
        request = json.load(fh)
    result = answer(request)
    with open(args.out, "w") as fh:
        json.dump(result, fh, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
