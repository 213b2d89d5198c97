"""What a model directory holds, read without loading it: config, weight bytes, tensor names.

A model is a local directory, or a Hugging Face id found in the local hub cache
(``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``): GPU hosts are often
offline, so a model that is in neither place is reported, not downloaded. Tensor names
come from each ``.safetensors`` header (8-byte little-endian length, then JSON), so a
70B checkpoint is inspected in milliseconds. Standard library only.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ModelFiles", "hub_cache_dirs", "read_model", "resolve_model_dir",
           "safetensors_names", "text_config"]


def hub_cache_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def resolve_model_dir(name: str) -> Path | None:
    """A local directory for ``name``: itself, or its newest snapshot in the hub cache."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if name.count("/") != 1 or name.startswith(("/", ".", "~")):
        return None
    repo = "models--" + name.replace("/", "--")
    for cache in hub_cache_dirs():
        snapshots = cache / repo / "snapshots"
        if snapshots.is_dir():
            found = sorted((p for p in snapshots.iterdir() if (p / "config.json").exists()),
                           key=lambda p: p.stat().st_mtime)
            if found:
                return found[-1]
    return None


def safetensors_names(path: Path) -> dict[str, Any]:
    """The header of one ``.safetensors`` file: tensor name -> {dtype, shape, ...}."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 * 1024 * 1024:
            raise ValueError(f"{path}: header of {length} bytes is not plausible")
        header = json.loads(fh.read(length))
    header.pop("__metadata__", None)
    return header


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config, as vLLM's ``hf_text_config`` picks it."""
    for key in ("text_config", "llm_config", "language_config"):
        inner = config.get(key)
        if isinstance(inner, dict):
            return inner
    return config


@dataclass
class ModelFiles:
    name: str
    path: Path | None
    config: dict[str, Any] = field(default_factory=dict)
    weight_bytes: int = 0
    weight_files: int = 0
    tensors: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def model_type(self) -> str:
        return str(text_config(self.config).get("model_type") or self.config.get(
            "model_type") or "")

    @property
    def architectures(self) -> list[str]:
        return [str(a) for a in self.config.get("architectures") or []]


def read_model(name: str, *, headers: bool = True) -> ModelFiles:
    """Config, weight size and (with ``headers``) tensor names of a model."""
    path = resolve_model_dir(name)
    info = ModelFiles(name=name, path=path)
    if path is None:
        info.problems.append(f"{name} is neither a directory nor in the Hugging Face cache "
                             f"({', '.join(str(d) for d in hub_cache_dirs())})")
        return info
    try:
        info.config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        info.problems.append(f"cannot read {path / 'config.json'}: {exc}")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        files = sorted(path.glob("*.bin")) + sorted(path.glob("*.pt"))
    for f in files:
        try:
            info.weight_bytes += f.stat().st_size  # follows the hub cache's blob links
        except OSError as exc:
            info.problems.append(f"cannot stat {f}: {exc}")
            continue
        info.weight_files += 1
        if headers and f.suffix == ".safetensors":
            try:
                info.tensors.update(safetensors_names(f))
            except (OSError, ValueError) as exc:
                info.problems.append(f"cannot read the header of {f.name}: {exc}")
    if not files:
        info.problems.append(f"no weight files (*.safetensors, *.bin) in {path}")
    return info
