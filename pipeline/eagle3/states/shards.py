"""Hidden-state shards: the file format, a lazy reader and the validation pass.

One shard (``shard-00000.safetensors``, a plain safetensors file) holds a contiguous range of
the tokens file's samples, packed in the order they were run (longest first, so batches pad
little); ``sample_index`` maps them back:

- ``aux`` ``[T, 3*H]``: the verifier's three aux hidden states, concatenated in the order of
  ``aux_layers`` (vLLM's convention: id ``k`` is the input of decoder layer ``k``, the output
  of layer ``k-1``, Hugging Face's ``output_hidden_states[k]``);
- ``last`` ``[T, H]``: the final hidden state after the model's last norm, the input of
  ``lm_head`` (``verifier_logits = last @ lm_head.T``): the training target;
- ``input_ids`` int32 ``[T]``, ``loss_mask`` uint8 ``[T]``, ``offsets`` int64 ``[n+1]``
  (sample ``j`` of the shard is rows ``offsets[j]:offsets[j+1]``), ``sample_index`` int64
  ``[n]`` (its index in the tokens file);
- metadata: ``format``, ``config_hash``, ``aux_layers`` (JSON), ``hidden_size``,
  ``sample_start`` (first sample of the range), ``num_samples``.

:class:`pipeline.eagle3.states.shard_writer.StreamingShard` writes the large tensors batch by batch straight from
(pinned) host memory into their place in the file, so extraction makes no extra host copies.

``OUT/index.json`` lists the shards, the aux layers and the verifier's shape; it is rewritten
after every shard, so a resumed run knows what is done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import ActionError

SHARD_FORMAT = "eagle3-hidden/1"
INDEX = "index.json"


def shard_name(i: int) -> str:
    return f"shard-{i:05d}.safetensors"


@dataclass
class ShardInfo:
    path: Path
    sample_start: int
    num_samples: int
    tokens: int


def read_index(hidden_dir: Path) -> dict[str, Any]:
    hidden_dir = Path(hidden_dir)
    path = hidden_dir / INDEX
    if not path.is_file():
        raise ActionError("no index.json: not a hidden-states directory (or extraction "
                          "never finished a shard)", where=str(hidden_dir))
    try:
        index = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ActionError(f"index.json is not valid JSON ({exc.msg})", where=str(path)) from None
    if index.get("format") != SHARD_FORMAT:
        raise ActionError(f"not a {SHARD_FORMAT} index", where=str(path))
    return index


def list_shards(hidden_dir: Path) -> tuple[dict[str, Any], list[ShardInfo]]:
    index = read_index(hidden_dir)
    shards = [ShardInfo(Path(hidden_dir) / s["file"], s["sample_start"], s["num_samples"],
                        s["tokens"]) for s in index["shards"]]
    if not shards:
        raise ActionError("index.json lists no shards", where=str(Path(hidden_dir) / INDEX))
    return index, shards


class ShardReader:
    """Lazy access to one shard's samples; a truncated or foreign file raises ActionError."""

    def __init__(self, path: Path):
        from safetensors import SafetensorError, safe_open

        self.path = Path(path)
        if not self.path.is_file():
            raise ActionError("shard missing", where=str(self.path))
        try:
            self._fh = safe_open(str(self.path), framework="pt")
            self.meta = self._fh.metadata() or {}
            keys = set(self._fh.keys())
        except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
            raise ActionError(f"unreadable shard ({str(exc).splitlines()[0]})",
                              where=str(self.path)) from None
        if self.meta.get("format") != SHARD_FORMAT:
            raise ActionError(f"not a {SHARD_FORMAT} shard", where=str(self.path))
        missing = {"aux", "last", "input_ids", "loss_mask", "offsets", "sample_index"} - keys
        if missing:
            raise ActionError(f"shard lacks {', '.join(sorted(missing))}", where=str(self.path))
        self.offsets = self._get("offsets")
        self.input_ids = self._get("input_ids")
        self.loss_mask = self._get("loss_mask")
        self.sample_index = self._get("sample_index")
        self.aux_layers = json.loads(self.meta.get("aux_layers", "[]"))
        self.hidden_size = int(self.meta.get("hidden_size", 0))
        self.sample_start = int(self.meta.get("sample_start", 0))
        self.num_samples = len(self.offsets) - 1

    def _get(self, key: str, rows: slice | None = None) -> Any:
        from safetensors import SafetensorError

        try:
            if rows is None:
                return self._fh.get_tensor(key)
            return self._fh.get_slice(key)[rows]
        except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
            raise ActionError(f"cannot read {key!r} ({str(exc).splitlines()[0]})",
                              where=str(self.path)) from None

    def shapes(self) -> dict[str, list[int]]:
        return {k: list(self._fh.get_slice(k).get_shape()) for k in ("aux", "last")}

    def sample(self, i: int) -> dict[str, Any]:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return {"aux": self._get("aux", slice(a, b)), "last": self._get("last", slice(a, b)),
                "input_ids": self.input_ids[a:b], "loss_mask": self.loss_mask[a:b]}

    def rows(self, key: str, a: int, b: int) -> Any:
        return self._get(key, slice(a, b))


def validate_shard(path: Path, *, tokens: dict[str, Any] | None, hidden_size: int,
                   aux_layers: list[int], config_hash: str | None, full: bool,
                   chunk_rows: int = 65536) -> ShardReader:
    """The validation pass for one shard: shapes, token ids, and (``full``) no NaN/Inf.

    Any problem is an ActionError naming the shard.
    """
    import torch

    reader = ShardReader(path)
    where = str(path)
    if config_hash is not None and reader.meta.get("config_hash") != config_hash:
        raise ActionError(f"shard made under another configuration (hash "
                          f"{reader.meta.get('config_hash')} != {config_hash})", where=where,
                          hint="extract into a fresh directory")
    if reader.aux_layers != list(aux_layers):
        raise ActionError(f"aux layers {reader.aux_layers} != {list(aux_layers)}", where=where)
    t = int(reader.offsets[-1])
    expected = {"aux": [t, 3 * hidden_size], "last": [t, hidden_size]}
    got = reader.shapes()
    if got != expected:
        raise ActionError(f"shapes {got} != {expected}", where=where)
    if reader.input_ids.numel() != t or reader.loss_mask.numel() != t:
        raise ActionError("input_ids/loss_mask length does not match offsets", where=where)
    if tokens is not None:
        off = tokens["offsets"]
        idx = reader.sample_index.tolist()
        if not idx or max(idx) >= len(off) - 1 or min(idx) < 0:
            raise ActionError("sample_index points outside the tokens file", where=where)
        ids = torch.cat([tokens["input_ids"][off[i]:off[i + 1]] for i in idx])
        mask = torch.cat([tokens["loss_mask"][off[i]:off[i + 1]] for i in idx])
        if ids.numel() != t or not torch.equal(ids.to(torch.int32),
                                               reader.input_ids.to(torch.int32)):
            raise ActionError(f"token ids differ from {tokens['path']} for samples "
                              f"{min(idx)}..{max(idx)}", where=where)
        if not torch.equal(mask, reader.loss_mask):
            raise ActionError("loss mask differs from the tokens file", where=where)
    if full:
        for key in ("aux", "last"):
            for a in range(0, t, chunk_rows):
                block = reader.rows(key, a, min(t, a + chunk_rows))
                if not torch.isfinite(block).all():
                    raise ActionError(f"NaN or Inf in {key!r} rows {a}..{a + len(block) - 1}",
                                      where=where)
    return reader
