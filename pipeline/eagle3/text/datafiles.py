"""The small files passed between stages: tokens, token frequencies, vocab mapping.

All are safetensors with a ``format`` entry in their metadata, so a stage handed the wrong
file says so instead of failing on a shape later.

- tokens (``tokens.safetensors``): ``input_ids`` int32 ``[T]``, ``loss_mask`` uint8 ``[T]``,
  ``offsets`` int64 ``[n+1]`` (sample ``i`` is ``[offsets[i], offsets[i+1])``); metadata
  ``vocab_size``. Sample ids are in ``index.jsonl`` beside it.
- frequencies (``freqs.safetensors``): ``counts`` int64 ``[vocab_size]``, counts of each token
  id over loss-masked positions.
- vocab mapping (``vocab.safetensors``): ``d2t`` int64 ``[draft_vocab]`` (offsets:
  ``target_id = i + d2t[i]``) and ``t2d`` bool ``[target_vocab]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.errors import ActionError

TOKENS_FORMAT = "eagle3-tokens/1"
FREQS_FORMAT = "eagle3-freqs/1"
VOCAB_FORMAT = "eagle3-vocab/1"


def _resolve(path: Path, name: str) -> Path:
    """A directory, or a path without the ``.safetensors`` suffix, means ``path/name``."""
    path = Path(path)
    return path / name if path.is_dir() or path.suffix != ".safetensors" else path


def read_safetensors(path: Path, fmt: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Load every tensor and the metadata; a truncated or foreign file names itself."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise ActionError("file not found", where=str(path))
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise ActionError(f"unreadable safetensors file ({str(exc).splitlines()[0]})",
                          where=str(path)) from None
    if meta.get("format") != fmt:
        raise ActionError(f"not a {fmt} file (format {meta.get('format')!r})", where=str(path))
    return tensors, meta


def write_safetensors(path: Path, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
    """Write through a temporary name so a reader never sees half a file."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp),
              metadata={k: str(v) for k, v in meta.items()})
    tmp.replace(path)


def write_tokens(out: Path, ids: list[str], input_ids: Any, loss_mask: Any, offsets: Any,
                 vocab_size: int) -> Path:
    path = out / "tokens.safetensors"
    write_safetensors(path, {"input_ids": input_ids, "loss_mask": loss_mask, "offsets": offsets},
                      {"format": TOKENS_FORMAT, "vocab_size": vocab_size,
                       "num_samples": len(ids)})
    (out / "index.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    return path


def read_tokens(path: Path) -> dict[str, Any]:
    """``{"input_ids", "loss_mask", "offsets", "vocab_size", "ids", "path"}``."""
    path = _resolve(path, "tokens.safetensors")
    tensors, meta = read_safetensors(path, TOKENS_FORMAT)
    index = path.parent / "index.jsonl"
    ids = ([json.loads(line)["id"] for line in index.read_text().splitlines() if line.strip()]
           if index.exists() else [str(i) for i in range(len(tensors["offsets"]) - 1)])
    if len(ids) != len(tensors["offsets"]) - 1:
        raise ActionError(f"{len(ids)} ids for {len(tensors['offsets']) - 1} samples",
                          where=str(index))
    return {**tensors, "vocab_size": int(meta["vocab_size"]), "ids": ids, "path": path}


def write_freqs(out: Path, counts: Any) -> Path:
    path = out / "freqs.safetensors"
    write_safetensors(path, {"counts": counts},
                      {"format": FREQS_FORMAT, "vocab_size": int(counts.numel())})
    return path


def read_freqs(path: Path) -> tuple[Any, Path]:
    path = _resolve(path, "freqs.safetensors")
    tensors, _ = read_safetensors(path, FREQS_FORMAT)
    return tensors["counts"], path


def write_vocab(path: Path, d2t: Any, t2d: Any, extra: dict[str, Any] | None = None) -> Path:
    path = _resolve(path, "vocab.safetensors")
    write_safetensors(path, {"d2t": d2t, "t2d": t2d},
                      {"format": VOCAB_FORMAT, "draft_vocab_size": int(d2t.numel()),
                       "target_vocab_size": int(t2d.numel()), **(extra or {})})
    return path


def read_vocab(path: Path) -> tuple[Any, Any, Path]:
    path = _resolve(path, "vocab.safetensors")
    tensors, _ = read_safetensors(path, VOCAB_FORMAT)
    d2t, t2d = tensors["d2t"], tensors["t2d"]
    problem = mapping_problem(d2t, t2d)
    if problem:
        raise ActionError(f"inconsistent vocab mapping: {problem}", where=str(path))
    return d2t, t2d, path


def mapping_problem(d2t: Any, t2d: Any) -> str | None:
    """Why ``d2t``/``t2d`` break the EAGLE-3 invariant, or None.

    ``arange(draft) + d2t`` must equal ``t2d.nonzero()``: the draft ids, in order, are the
    target ids where ``t2d`` is True, sorted ascending.
    """
    import torch

    if d2t.dtype != torch.int64 or d2t.dim() != 1:
        return f"d2t must be int64 [draft_vocab], got {d2t.dtype} {list(d2t.shape)}"
    if t2d.dtype != torch.bool or t2d.dim() != 1:
        return f"t2d must be bool [target_vocab], got {t2d.dtype} {list(t2d.shape)}"
    if int(t2d.sum()) != d2t.numel():
        return f"t2d has {int(t2d.sum())} True entries for a draft vocab of {d2t.numel()}"
    target = torch.arange(d2t.numel()) + d2t
    if not torch.equal(target, t2d.nonzero().flatten()):
        return "arange(draft_vocab) + d2t != t2d.nonzero()"
    return None
