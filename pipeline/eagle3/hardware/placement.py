"""Where the verifier runs: one device, a device map over several, or tensor parallelism.

Every stage that runs the verifier (``generate --backend local``, ``hidden_states``,
``train --online``, ``verify``'s functional checks) takes these flags
(:func:`add_placement_args`, :func:`placement_from_args`) and loads the verifier through
:func:`pipeline.eagle3.hardware.memory_plan.load_placed`:

- no placement flags: the whole model on ``--device`` (as before);
- ``--device-map auto|balanced|balanced_low_0|sequential`` or a JSON map of module to device,
  and/or ``--max-memory`` (JSON, per device: ``{"0": "60GiB", "cpu": "200GiB"}``): the
  big-model placement of accelerate (``infer_auto_device_map``, the function transformers'
  own ``device_map="auto"`` calls) decides which modules go where, on the model built on the
  meta device; transformers then loads straight into that map and accelerate's hooks move
  activations between devices. Modules mapped to ``disk`` need ``--offload-folder``;
- ``--tp-plan auto`` under ``torchrun``: transformers' tensor parallelism (the
  architecture's ``base_model_tp_plan``), every rank holding its shard.

This module turns the flags into a :class:`Placement` and, for a device map, asks
accelerate for the map (:func:`resolve_device_map`); :mod:`pipeline.eagle3.hardware.memory_plan` prints what each
device will hold before loading and refuses a plan that does not fit. accelerate is
imported only when a device map or ``--max-memory`` is asked for.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.eagle3.hardware.distributed import local_rank, rank, world_size
from pipeline.errors import ActionError

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
GiB = 1 << 30


def add_placement_args(p: argparse.ArgumentParser, tp: bool = True) -> None:
    """``--device-map``, ``--max-memory``, ``--offload-folder`` and (``tp``) ``--tp-plan``."""
    p.add_argument("--device-map", default=None,
                   help="spread the verifier over devices with accelerate's big-model "
                        "placement: auto, balanced, balanced_low_0, sequential, or a JSON map "
                        'of module to device ({"model.layers.0": 0, "lm_head": "cpu"}); '
                        "--max-memory alone implies auto")
    p.add_argument("--max-memory", default=None,
                   help='JSON: the most verifier weights per device, e.g. {"0": "60GiB", '
                        '"cpu": "200GiB"} (GPU index, "cpu", "disk")')
    p.add_argument("--offload-folder", type=Path, default=None,
                   help="where modules placed on 'disk' are kept (needed when the map "
                        "offloads to disk)")
    if tp:
        p.add_argument("--tp-plan", choices=("auto",), default=None,
                       help="tensor parallelism under torchrun (transformers' tp_plan for "
                            "the architecture); rank 0 writes the outputs")


@dataclass
class Placement:
    device: Any                      # the main device (a torch.device)
    device_map: str | dict[str, Any] | None = None
    max_memory: dict[Any, int] | None = None
    offload_folder: Path | None = None
    tp: bool = False

    @property
    def spread(self) -> bool:
        return self.device_map is not None or self.max_memory is not None

    @property
    def writes(self) -> bool:
        """Whether this process writes the stage's outputs and logs its plan (under tensor
        parallelism every rank runs the same forwards; rank 0 alone writes)."""
        return not self.tp or rank() == 0

    def describe(self) -> str:
        if self.tp:
            return f"tensor parallel over {world_size()} ranks"
        if self.spread:
            mm = (" max_memory " + json.dumps({str(k): gib(v) for k, v in
                                               self.max_memory.items()})
                  if self.max_memory else "")
            shown = ("a JSON map" if isinstance(self.device_map, dict) else
                     self.device_map or "auto")
            return f"device map {shown}{mm}"
        return f"on {self.device}"


def placement_from_args(args: argparse.Namespace, device: Any) -> Placement:
    """Validate the placement flags; one-line errors name the flag."""
    device_map = _parse_device_map(getattr(args, "device_map", None))
    max_memory = _parse_max_memory(getattr(args, "max_memory", None))
    tp = getattr(args, "tp_plan", None) == "auto"
    if tp and (device_map is not None or max_memory is not None):
        raise ActionError("--tp-plan and --device-map/--max-memory are exclusive: tensor "
                          "parallelism shards every layer over the ranks, a device map "
                          "places whole layers")
    if tp and world_size() < 2:
        raise ActionError("--tp-plan auto needs several processes: run the stage under "
                          "torchrun --nproc-per-node N")
    if not tp and world_size() > 1 and (device_map is not None or max_memory is not None):
        raise ActionError("--device-map/--max-memory under torchrun would load a full "
                          "verifier per rank; use --tp-plan auto, or one process")
    folder = getattr(args, "offload_folder", None)
    if tp:
        import torch

        device = (torch.device("cuda", local_rank()) if torch.cuda.is_available()
                  else torch.device("cpu"))
    return Placement(device=device, device_map=device_map, max_memory=max_memory,
                     offload_folder=Path(folder) if folder else None, tp=tp)


def _parse_device_map(value: Any) -> str | dict[str, Any] | None:
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        raw: Any = value
    elif isinstance(value, str) and value.strip().startswith("{"):
        try:
            raw = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ActionError(f"--device-map is not valid JSON ({exc.msg})") from None
    elif value in DEVICE_MAPS:
        return str(value)
    else:
        raise ActionError(f"--device-map {value!r}: expected one of {', '.join(DEVICE_MAPS)} "
                          "or a JSON map of module name to device")
    if not isinstance(raw, dict) or not raw:
        raise ActionError("--device-map JSON must be a non-empty mapping of module to device")
    return {str(k): _device_key(v, f"--device-map[{k!r}]") for k, v in raw.items()}


def _device_key(value: Any, where: str) -> int | str:
    """accelerate's spelling of a device: a GPU index, ``cpu`` or ``disk``."""
    if isinstance(value, bool):
        raise ActionError(f"{where}: {value!r} is not a device")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("cpu", "disk"):
            return v
        m = re.fullmatch(r"(?:cuda:)?(\d+)", v)
        if m:
            return int(m.group(1))
        if v == "cuda":
            return 0
    raise ActionError(f"{where}: {value!r} is not a device (a GPU index like 0 or "
                      "\"cuda:0\", \"cpu\" or \"disk\")")


def _parse_max_memory(value: Any) -> dict[Any, int] | None:
    if value is None or value == "":
        return None
    raw = value
    if isinstance(value, str):
        try:
            raw = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ActionError(f"--max-memory is not valid JSON ({exc.msg})",
                              hint='e.g. {"0": "60GiB", "cpu": "200GiB"}') from None
    if not isinstance(raw, dict) or not raw:
        raise ActionError("--max-memory must be a JSON mapping of device to size",
                          hint='e.g. {"0": "60GiB", "cpu": "200GiB"}')
    out: dict[Any, int] = {}
    for k, v in raw.items():
        key = _device_key(k, f"--max-memory key {k!r}")
        out[key] = _size(v, f"--max-memory[{k!r}]")
    return out


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def _size(value: Any, where: str) -> int:
    """``"60GiB"``, ``"60GB"`` or bytes; accelerate's spelling of sizes."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise ActionError(f"{where}: {value!r} is not a size (e.g. \"60GiB\", \"500MB\" or a "
                      "number of bytes)")


def gib(n: int | None) -> str:
    if n is None:
        return "?"
    if n >= GiB / 10:
        return f"{n / GiB:.2f} GiB"
    return f"{n / (1 << 20):.2f} MiB"


def meta_model(verifier: Path, dtype: Any) -> Any:
    """The verifier built on the meta device from its config: names, shapes, dtypes, no
    memory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(verifier))
    except (OSError, ValueError) as exc:
        raise ActionError(f"cannot read the verifier's config ({str(exc).splitlines()[0]})",
                          where=str(verifier / "config.json")) from None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


def device_label(d: Any) -> str:
    return f"cuda:{d}" if isinstance(d, int) else str(d)


def accelerate_key(device: Any) -> Any:
    """A torch.device as accelerate's key."""
    if getattr(device, "type", None) == "cuda":
        return device.index or 0
    return "cpu"


def resolve_device_map(model: Any, placement: Placement) -> dict[str, Any]:
    """accelerate's placement for ``placement`` on the meta-device ``model``."""
    try:
        from accelerate.utils import (
            check_device_map,
            get_balanced_memory,
            get_max_memory,
            infer_auto_device_map,
        )
    except ImportError:
        raise ActionError("--device-map/--max-memory need accelerate (in the eagle3 extra: "
                          "pip install accelerate)") from None
    no_split = list(getattr(model, "_no_split_modules", None) or [])
    mode = placement.device_map
    if isinstance(mode, dict):
        names = {n for n, _ in model.named_modules()}
        unknown = [k for k in mode if k and k not in names]
        if unknown:
            raise ActionError(f"--device-map names modules the verifier does not have: "
                              f"{', '.join(unknown[:5])}",
                              hint="module names as in model.named_modules(), e.g. "
                                   "model.layers.0, model.embed_tokens, lm_head")
        try:
            check_device_map(model, mode)
        except ValueError as exc:
            raise ActionError(f"--device-map leaves weights unplaced "
                              f"({str(exc).splitlines()[0][:200]})") from None
        return dict(mode)
    mode = mode or "auto"
    limits = dict(placement.max_memory) if placement.max_memory is not None else get_max_memory()
    if mode == "sequential":
        max_memory = limits
    else:
        max_memory = get_balanced_memory(model, max_memory=limits, no_split_module_classes=no_split,
                                         low_zero=mode == "balanced_low_0")
    return dict(infer_auto_device_map(model, max_memory=max_memory,
                                      no_split_module_classes=no_split))


def keep_on_first_device(device_map: dict[str, Any], model: Any, names: list[str]
                         ) -> tuple[dict[str, Any], list[str]]:
    """``device_map`` with the modules ``names`` (and nothing else) moved to the map's first
    device, for code that reads their weights directly; returns ``(map, moved)``."""
    gpus = sorted(d for d in device_map.values() if isinstance(d, int))
    main: Any = gpus[0] if gpus else "cpu"
    modules = {n for n, _ in model.named_modules()}
    out, moved = dict(device_map), []
    for name in names:
        if name not in modules:
            continue
        if name in out:
            if out[name] != main:
                out[name] = main
                moved.append(name)
            continue
        cover = max((k for k in out if k == "" or name.startswith(k + ".")), key=len,
                    default=None)
        if cover is not None and out[cover] != main:
            raise ActionError(f"--device-map places {name} (inside {cover or 'the model'!r}) "
                              f"on {out[cover]!r}; the functional checks read its weights: "
                              f"map {name!r} to {main!r} explicitly")
    return out, moved


def tp_sharded_patterns(model: Any) -> list[re.Pattern[str]]:
    """The module patterns transformers' tp_plan shards (``layers.*.mlp.gate_proj``)."""
    plan = dict(getattr(model.config, "base_model_tp_plan", None) or {})
    prefix = getattr(model, "base_model_prefix", "model")
    pats = []
    for key in plan:
        rx = re.escape(key).replace(r"\*", r"\d+")
        pats.append(re.compile(rf"(?:{re.escape(prefix)}\.)?{rx}"))
    return pats


def tp_load_kwargs() -> dict[str, Any]:
    """transformers >= 5.x takes ``distributed_config``; older releases ``tp_plan``."""
    import transformers

    config_cls = getattr(transformers, "DistributedConfig", None)
    if config_cls is not None:
        import inspect

        if "tp_plan" in inspect.signature(config_cls).parameters:
            return {"distributed_config": config_cls(tp_plan="auto")}
    return {"tp_plan": "auto"}


def input_device_of(device_map: dict[str, Any], fallback: Any) -> Any:
    """The execution device of the embedding: where input ids must be."""
    import torch

    best, dev = -1, None
    for prefix, d in device_map.items():
        name = "model.embed_tokens"
        if (prefix == "" or name == prefix or name.startswith(prefix + ".")) and \
                len(prefix) > best:
            best, dev = len(prefix), d
    if dev is None or dev == "disk":
        gpus = sorted(d for d in device_map.values() if isinstance(d, int))
        dev = gpus[0] if gpus else "cpu"
    if isinstance(dev, int):
        return torch.device("cuda", dev)
    return torch.device(dev) if dev != "disk" else fallback
