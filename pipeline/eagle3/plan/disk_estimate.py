"""The disk offline hidden states need for a pipeline's data, read from its spec.

``tokens x (3 aux + last) x hidden x bytes``: Kimi-K2's hidden size 7168 at bf16 is 57 KB a
token, so 10K samples of 2K tokens take 1.2 TB. ``harness check`` prints this for every
``eagle3.hidden_states`` stage (and for ``eagle3.train --online``, which needs none of it),
from what can be known before running:

- tokens: the tokens file when it already exists on this machine (its header only), else a
  bound from the stages before it: ``generate``'s ``samples`` times ``tokenize``'s
  ``max_length``;
- hidden size: the verifier's ``config.json`` when it exists, else the ``hidden_size`` of
  the ``eagle3.build_verifier`` stage that builds it;
- bytes: ``save_dtype`` (``auto``: fp32 for a CPU stage, else bf16).

Standard library only: ``harness check`` runs where torch may not be installed.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
TOKENIZE_MAX_LENGTH = 4096  # tokenize's --max-length default
VERIFIER_HIDDEN = 128       # the verifier stage's --hidden-size default


def offline_bytes(tokens: int, hidden: int, itemsize: int = 2, aux: int = 3) -> int:
    """Disk the shards of ``tokens`` tokens take: ``aux`` states plus ``last`` per token."""
    return tokens * (aux + 1) * hidden * itemsize


@dataclass
class DiskEstimate:
    stage: str
    online: bool
    tokens: int | None
    exact: bool                 # tokens counted from the file (else an upper bound)
    hidden: int | None
    itemsize: int
    how: str                    # where the numbers came from

    @property
    def bytes(self) -> int | None:
        if self.tokens is None or self.hidden is None:
            return None
        return offline_bytes(self.tokens, self.hidden, self.itemsize)

    def line(self) -> str:
        what = ("online training, no shards; offline would need" if self.online else
                "offline hidden states need")
        if self.bytes is None:
            return f"{self.stage}: {what} tokens x 4 x hidden x {self.itemsize} B ({self.how})"
        bound = "" if self.exact else "at most "
        return (f"{self.stage}: {what} {bound}{_size(self.bytes)} ({self.tokens:,} tokens x 4 "
                f"x {self.hidden} x {self.itemsize} B; {self.how})")

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "online": self.online, "tokens": self.tokens,
                "exact": self.exact, "hidden_size": self.hidden, "itemsize": self.itemsize,
                "bytes": self.bytes, "how": self.how}


def _size(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _header_rows(path: Path, key: str) -> int | None:
    """Rows of tensor ``key`` from a safetensors header, without reading the data."""
    try:
        with path.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > 100 << 20:
                return None
            header = json.loads(fh.read(n))
        return int(header[key]["shape"][0])
    except (OSError, ValueError, KeyError, IndexError, struct.error):
        return None


def estimates(spec: Any) -> list[DiskEstimate]:
    """One estimate per hidden_states stage and per online train stage of ``spec``."""
    stages = list(spec.stages)
    by_out: dict[str, Any] = {}
    for st in stages:
        out = st.params.get("out")
        if isinstance(out, str):
            by_out[out.rstrip("/")] = st
    found = []
    for st in stages:
        p = st.params
        online = st.action == "eagle3.train" and bool(p.get("online"))
        if st.action != "eagle3.hidden_states" and not online:
            continue
        host = spec.host_for(st)
        local = Path(host.workdir).expanduser() if (not host.is_ssh and host.workdir) else None
        tokens, exact, how = _tokens(p.get("tokens"), by_out, local)
        hidden, h_how = _hidden(p.get("verifier"), by_out, local)
        dtype = p.get("save_dtype") or p.get("verifier_dtype") or "auto"
        if dtype == "auto":
            dtype = "float32" if str(p.get("device", "auto")) == "cpu" else "bfloat16"
        found.append(DiskEstimate(st.name, online, tokens, exact, hidden,
                                  DTYPE_BYTES.get(str(dtype), 2), f"{how}; {h_how}"))
    return found


def _tokens(tokens: Any, by_out: dict[str, Any], local: Path | None
            ) -> tuple[int | None, bool, str]:
    if not isinstance(tokens, str):
        return None, False, "no tokens parameter"
    if local is not None:
        path = local / tokens
        path = path / "tokens.safetensors" if not path.name.endswith(".safetensors") else path
        rows = _header_rows(path, "input_ids")
        if rows is not None:
            return rows, True, f"counted in {path}"
    tok = by_out.get(tokens.rstrip("/"))
    if tok is None or tok.action != "eagle3.tokenize":
        return None, False, "tokens not made yet and no tokenize stage writes them"
    max_len = int(tok.params.get("max_length") or TOKENIZE_MAX_LENGTH)
    samples = _samples(tok.params.get("samples"), by_out)
    if samples is None:
        return None, False, "tokens not made yet; the sample count is not in the spec"
    return samples * max_len, False, (f"tokens not made yet: {samples} samples x "
                                      f"max_length {max_len}")


def _samples(source: Any, by_out: dict[str, Any], depth: int = 0) -> int | None:
    """The most samples a chain of clean/generate stages can produce."""
    if not isinstance(source, str) or depth > 8:
        return None
    key = source.rstrip("/")
    if key.endswith(".jsonl"):
        key = str(Path(key).parent)
    st = by_out.get(key)
    if st is None:
        return None
    if st.action == "eagle3.generate":
        n = st.params.get("samples")
        return int(n) if isinstance(n, int) else None
    if st.action == "eagle3.clean":
        return _samples(st.params.get("samples"), by_out, depth + 1)
    return None


def _hidden(verifier: Any, by_out: dict[str, Any], local: Path | None
            ) -> tuple[int | None, str]:
    if not isinstance(verifier, str):
        return None, "no verifier parameter"
    if local is not None:
        cfg = local / verifier / "config.json"
        try:
            h = json.loads(cfg.read_text()).get("hidden_size")
            if isinstance(h, int):
                return h, f"hidden size from {cfg}"
        except (OSError, ValueError):
            pass
    st = by_out.get(verifier.rstrip("/"))
    if st is not None and st.action == "eagle3.build_verifier":
        return int(st.params.get("hidden_size") or VERIFIER_HIDDEN), \
            f"hidden size of stage {st.name}"
    return None, "the verifier's hidden size is not known before it exists"
