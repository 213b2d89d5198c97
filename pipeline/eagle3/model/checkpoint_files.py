"""A drafter checkpoint on disk, read lazily: its config, its weight files, one tensor at a time.

Three layouts are recognised (the verification reports which):

- ``eagle``: ``config.json`` with ``architectures`` naming an EAGLE-3 Llama drafter
  (``LlamaForCausalLMEagle3``; vLLM's own ``Eagle3LlamaForCausalLM`` also loads), weights
  ``midlayer.*`` (vLLM renames them ``layers.0.*``; both load);
- ``speculators``: ``config.json`` with ``speculators_model_type: "eagle3"``
  (``architectures: ["Eagle3Speculator"]``) or ``"peagle"`` (``["PEagleSpeculator"]``, a
  P-EAGLE drafter: ``mask_token_id``, and a ``mask_hidden`` tensor), the Llama fields
  under ``transformer_layer_config``, weights ``layers.0.*``;
- ``checkpoint``: this pipeline's training checkpoint (``drafter_config.json``), or a train
  output directory (``state.json`` names the latest).

Weights are ``*.safetensors`` (one file, or shards listed by
``model.safetensors.index.json``). Headers are read and validated with
``safetensors.safe_open``; tensor data is read only when asked for, by tensor, by row range
or in blocks, with plain file reads (no mapping of the file), so a checker never holds the
whole checkpoint in memory. Standard library, torch and safetensors only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.eagle3.model.drafter_files import SPECULATORS_ARCHS
from pipeline.errors import ActionError

EAGLE_ARCHS = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
INDEX_FILE = "model.safetensors.index.json"


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ActionError(f"not valid JSON ({exc.msg}, line {exc.lineno})",
                          where=str(path)) from None
    except OSError as exc:
        raise ActionError(f"unreadable ({exc.strerror or exc})", where=str(path)) from None
    if not isinstance(data, dict):
        raise ActionError("not a JSON object", where=str(path))
    return data


def resolve_checkpoint_dir(path: Path) -> Path:
    """A train output directory means its latest checkpoint; anything else is itself."""
    path = Path(path)
    if not path.exists():
        raise ActionError("checkpoint not found", where=str(path))
    if not path.is_dir():
        raise ActionError("a checkpoint is a directory (config.json + *.safetensors)",
                          where=str(path))
    state = path / "state.json"
    if state.is_file() and not (path / "config.json").is_file():
        latest = read_json(state).get("checkpoint")
        if not isinstance(latest, str):
            raise ActionError("state.json names no checkpoint", where=str(state))
        return path / latest
    return path


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of a model directory, in a stable order."""
    directory = Path(directory)
    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ActionError("no weight_map in the index", where=str(index))
        files = sorted({directory / str(f) for f in weight_map.values()})
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise ActionError(f"shard listed in the index is missing: {missing[0].name}",
                              where=str(index))
        return files
    files = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    if files:
        return files
    if any(directory.glob("*.bin")) or any(directory.glob("*.pt")):
        raise ActionError("weights are pickled (*.bin/*.pt), not safetensors",
                          where=str(directory),
                          hint="save them with safetensors; verification reads safetensors "
                               "headers and streams tensors")
    raise ActionError("no weights (*.safetensors) in the directory", where=str(directory))


@dataclass
class TensorInfo:
    name: str
    file: Path
    dtype: str           # safetensors' names: BF16, F16, F32, I64, BOOL, ...
    shape: list[int]
    start: int = 0       # absolute byte offset of the data in the file
    nbytes: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass
class WeightSet:
    """The safetensors files of one model: every tensor's name, dtype, shape and place from
    the headers; data read on demand with plain reads (whole, by rows, or in blocks)."""

    files: list[Path]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    _buffer: bytearray = field(default_factory=bytearray)

    @classmethod
    def open(cls, files: list[Path]) -> WeightSet:
        from safetensors import SafetensorError, safe_open

        ws = cls(files=list(files))
        for f in ws.files:
            try:
                # safe_open validates the file (header, offsets against the size); the
                # header's own offsets then let reads fetch exactly the bytes asked for,
                # without mapping the file.
                with safe_open(str(f), framework="pt") as handle:
                    offsets = _data_offsets(f)
                    ws.metadata[f.name] = dict(handle.metadata() or {})
                    for name in handle.keys():  # noqa: SIM118 (a method, not a dict)
                        sl = handle.get_slice(name)
                        start, end = offsets[name]
                        info = TensorInfo(name, f, str(sl.get_dtype()), list(sl.get_shape()),
                                          start, end - start)
                        if name in ws.tensors:
                            ws.duplicates.append(name)
                        ws.tensors[name] = info
            except (SafetensorError, OSError, RuntimeError, ValueError, KeyError) as exc:
                raise ActionError(f"unreadable safetensors file ({_first_line(exc)})",
                                  where=str(f),
                                  hint="the file is truncated or not safetensors: "
                                       "copy or export it again") from None
        return ws

    def close(self) -> None:
        self._buffer = bytearray()

    def __enter__(self) -> WeightSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str) -> Any:
        """The whole tensor, read with plain file reads (small tensors: d2t, t2d, norms;
        or every tensor, one at a time, when a drafter is loaded)."""
        info = self.tensors[name]
        rows = info.shape[0] if info.shape else 1
        return self.rows(name, 0, rows) if info.shape else self._read(info, info.start,
                                                                      info.nbytes, [])

    def rows(self, name: str, start: int, stop: int) -> Any:
        """Rows ``start:stop`` of a tensor, reading only their bytes."""
        info = self.tensors[name]
        if not info.shape:
            return self.get(name)
        start, stop = max(start, 0), min(stop, info.shape[0])
        row_bytes = info.nbytes // info.shape[0] if info.shape[0] else 0
        return self._read(info, info.start + start * row_bytes,
                          max(stop - start, 0) * row_bytes, [max(stop - start, 0),
                                                             *info.shape[1:]])

    def _read(self, info: TensorInfo, offset: int, nbytes: int, shape: list[int]) -> Any:
        dtype = _TORCH_DTYPES.get(info.dtype)
        if dtype is None:
            raise ActionError(f"tensor {info.name} has dtype {info.dtype}, which cannot be "
                              "read", where=str(info.file))
        buf = bytearray(nbytes)
        try:
            with open(info.file, "rb", buffering=0) as fh:
                fh.seek(offset)
                got = fh.readinto(buf) if nbytes else 0
        except OSError as exc:
            raise ActionError(f"cannot read tensor {info.name} ({exc.strerror or exc})",
                              where=str(info.file)) from None
        if got != nbytes:
            raise ActionError(f"tensor {info.name} is cut short", where=str(info.file))
        if not nbytes:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(buf, dtype=dtype).reshape(shape)

    def blocks(self, name: str, block_bytes: int = 1 << 23) -> Iterator[Any]:
        """The tensor's data, flat, in blocks read with plain file reads into one reused
        buffer (so the file is not mapped and memory stays at one block). Each block is a
        1-D tensor valid until the next one is read."""
        info = self.tensors[name]
        dtype = _TORCH_DTYPES.get(info.dtype)
        if dtype is None:
            raise ActionError(f"tensor {name} has dtype {info.dtype}, which cannot be scanned",
                              where=str(info.file))
        item = torch.empty((), dtype=dtype).element_size()
        block = max(block_bytes // item, 1) * item
        if len(self._buffer) < min(block, info.nbytes):
            self._buffer = bytearray(min(block, max(info.nbytes, 1)))
        with open(info.file, "rb", buffering=0) as fh:
            fh.seek(info.start)
            done = 0
            while done < info.nbytes:
                n = min(block, info.nbytes - done)
                view = memoryview(self._buffer)[:n]
                got = fh.readinto(view)
                if got != n:
                    raise ActionError(f"tensor {name} is cut short", where=str(info.file))
                done += n
                yield torch.frombuffer(view, dtype=dtype)

    @property
    def total_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def _data_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """name -> (start, end) absolute byte offsets, from the safetensors header: an 8-byte
    little-endian length, then that many bytes of JSON; data follows."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    base = 8 + n
    return {k: (base + int(v["data_offsets"][0]), base + int(v["data_offsets"][1]))
            for k, v in header.items() if k != "__metadata__"}


_TORCH_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
                 "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
                 "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def sha256_files(files: list[Path], block: int = 1 << 22) -> tuple[str, list[dict[str, Any]]]:
    """The checkpoint's digest, streaming: a single file's own sha256, or for shards the
    sha256 of ``"<name> <sha256>\\n"`` lines in name order. Also each file's digest."""
    per: list[dict[str, Any]] = []
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            while chunk := fh.read(block):
                h.update(chunk)
        per.append({"file": f.name, "bytes": f.stat().st_size, "sha256": h.hexdigest()})
    if len(per) == 1:
        return per[0]["sha256"], per
    manifest = "".join(f"{p['file']} {p['sha256']}\n" for p in sorted(per,
                                                                      key=lambda p: p["file"]))
    return hashlib.sha256(manifest.encode()).hexdigest(), per


@dataclass
class DrafterLayout:
    """What the config says, as vLLM reads it (``None`` where the config does not say)."""

    fmt: str                              # eagle | speculators | checkpoint | unknown
    config_path: Path
    raw: dict[str, Any]
    architectures: list[str]
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    num_hidden_layers: int | None = None
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    target_hidden_size: int | None = None
    aux_layer_ids: list[int] | None = None     # as the config lists them
    aux_layer_ids_source: str = ""
    #: fc input blocks vLLM builds: num_aux_hidden_states, else the length of
    #: eagle_config's ids, else 3 (llama_eagle3.py); ours: one per aux id
    fc_blocks: int = 3
    norm_before_residual: bool = False
    torch_dtype: str | None = None
    target_num_layers: int | None = None
    #: eagle3, or peagle (parallel drafting: a speculators peagle config, or a training
    #: checkpoint of ``train --method peagle``)
    method: str = "eagle3"
    mask_token_id: Any = None   # as the config says it (the checks judge it)
    problems: list[str] = field(default_factory=list)   # contradictions inside the config

    @property
    def layer_prefixes(self) -> tuple[str, ...]:
        """Names the one decoder layer's weights may carry in this format."""
        if self.fmt == "speculators":
            return ("layers.0.",)
        if self.fmt == "eagle":
            return ("midlayer.", "layers.0.")
        return ("midlayer.",)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_layout(directory: Path) -> DrafterLayout:
    """Parse the drafter's config without judging it (the checks judge)."""
    directory = Path(directory)
    if (directory / "config.json").is_file():
        path = directory / "config.json"
        raw = read_json(path)
        archs = [str(a) for a in raw.get("architectures") or []]
        if raw.get("speculators_model_type") is not None or any(
                a in SPECULATORS_ARCHS.values() for a in archs):
            fmt = "speculators"
            llama = raw.get("transformer_layer_config")
            llama = llama if isinstance(llama, dict) else {}
        elif any(a in EAGLE_ARCHS for a in archs):
            fmt, llama = "eagle", raw
        else:
            fmt, llama = "unknown", raw
    elif (directory / "drafter_config.json").is_file():
        path = directory / "drafter_config.json"
        raw = read_json(path)
        archs = ["Eagle3Drafter (training checkpoint)"]
        fmt, llama = "checkpoint", raw
    else:
        raise ActionError("not a drafter directory (no config.json or drafter_config.json)",
                          where=str(directory))
    lay = DrafterLayout(fmt=fmt, config_path=path, raw=raw, architectures=archs)
    lay.hidden_size = _int(llama.get("hidden_size"))
    lay.intermediate_size = _int(llama.get("intermediate_size"))
    lay.num_attention_heads = _int(llama.get("num_attention_heads"))
    lay.num_key_value_heads = _int(llama.get("num_key_value_heads")) or lay.num_attention_heads
    lay.head_dim = _int(llama.get("head_dim"))
    if lay.head_dim is None and lay.hidden_size and lay.num_attention_heads:
        lay.head_dim = lay.hidden_size // lay.num_attention_heads
    lay.num_hidden_layers = 1 if fmt == "checkpoint" else _int(llama.get("num_hidden_layers"))
    lay.vocab_size = _int(llama.get("vocab_size"))
    lay.draft_vocab_size = _int(raw.get("draft_vocab_size"))
    lay.target_hidden_size = _int(raw.get("target_hidden_size"))
    if fmt == "speculators":
        lay.method = "peagle" if (raw.get("speculators_model_type") == "peagle" or
                                  SPECULATORS_ARCHS["peagle"] in archs) else "eagle3"
    elif fmt == "checkpoint":
        lay.method = str(raw.get("method") or "eagle3")
    lay.mask_token_id = raw.get("mask_token_id")
    # vLLM's defaults differ by format: the speculators reader sets true when the key is
    # absent for eagle3 (algos.update_eagle3) and false for peagle (update_peagle); an
    # EAGLE-style config is read with getattr(..., False).
    lay.norm_before_residual = bool(raw.get("norm_before_residual", fmt == "speculators"
                                            and lay.method == "eagle3"))
    lay.torch_dtype = raw.get("torch_dtype") or llama.get("torch_dtype") or raw.get("dtype")
    training = raw.get("eagle3_training") if isinstance(raw.get("eagle3_training"), dict) else {}
    lay.target_num_layers = _int(training.get("target_num_layers")) or (
        _int(raw.get("target_num_layers")) if fmt == "checkpoint" else None)

    top = raw.get("aux_layer_ids") if fmt == "checkpoint" else \
        raw.get("eagle_aux_hidden_state_layer_ids")
    eagle_cfg = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    nested = eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
    if top is not None and nested is not None and list(top) != list(nested):
        lay.problems.append(f"eagle_aux_hidden_state_layer_ids {top} differs from "
                            f"eagle_config.eagle_aux_hidden_state_layer_ids {nested}")
    chosen = top if top else nested  # vLLM: an empty top-level list falls through too
    if chosen is not None:
        if isinstance(chosen, list) and all(_int(x) is not None for x in chosen):
            lay.aux_layer_ids = [int(x) for x in chosen]
            lay.aux_layer_ids_source = "config"
        else:
            lay.problems.append(f"aux layer ids are not a list of integers: {chosen!r}")
    if fmt == "checkpoint":
        lay.fc_blocks = len(lay.aux_layer_ids or ()) or 3
    else:
        # the speculators reader builds vLLM's config from transformer_layer_config and
        # copies the aux ids to its top level only, so eagle_config is that of the layer
        # config there
        base = llama if fmt == "speculators" else raw
        inner = base.get("eagle_config") if isinstance(base.get("eagle_config"), dict) else {}
        listed = inner.get("eagle_aux_hidden_state_layer_ids")
        declared = _int(base.get("num_aux_hidden_states"))
        lay.fc_blocks = declared or (len(listed) if isinstance(listed, list) and listed else 3)
    if eagle_cfg.get("use_aux_hidden_state") is False:
        lay.problems.append("eagle_config.use_aux_hidden_state is false: vLLM would not "
                            "feed the verifier's aux hidden states to this EAGLE-3 drafter")
    return lay


@dataclass
class VerifierInfo:
    directory: Path
    config: dict[str, Any]
    vocab_size: int
    hidden_size: int
    num_layers: int
    model_type: str

    @classmethod
    def read(cls, directory: Path) -> VerifierInfo:
        directory = Path(directory)
        if not directory.is_dir():
            raise ActionError("verifier directory not found", where=str(directory))
        path = directory / "config.json"
        if not path.is_file():
            raise ActionError("no config.json: not a Hugging Face model directory",
                              where=str(directory))
        cfg = read_json(path)
        text = cfg
        for key in ("text_config", "llm_config", "language_config"):
            if isinstance(cfg.get(key), dict):
                text = cfg[key]
        fields = {}
        for key in ("vocab_size", "hidden_size", "num_hidden_layers"):
            value = _int(text.get(key, cfg.get(key)))
            if value is None:
                raise ActionError(f"config.json lacks an integer {key!r}", where=str(path))
            fields[key] = value
        return cls(directory, cfg, fields["vocab_size"], fields["hidden_size"],
                   fields["num_hidden_layers"],
                   str(text.get("model_type") or cfg.get("model_type") or ""))

    def head_weights(self) -> tuple[WeightSet, str]:
        """The verifier's weights (opened lazily) and the name of its output head."""
        ws = WeightSet.open(weight_files(self.directory))
        for name in ("lm_head.weight", "language_model.lm_head.weight"):
            if name in ws:
                return ws, name
        if self.config.get("tie_word_embeddings", False):
            for name in ("model.embed_tokens.weight", "embed_tokens.weight",
                         "model.language_model.embed_tokens.weight"):
                if name in ws:
                    return ws, name
        ws.close()
        raise ActionError("no lm_head weight in the verifier's safetensors",
                          where=str(self.directory))
