"""Helpers every EAGLE-3 stage uses: config hashes, JSONL, progress lines, devices.

Standard library at import time; torch is imported inside the functions that need it so
that light stages (clean) start fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import ActionError

CONFIG_FILE = ".config.json"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def config_hash(config: Mapping[str, Any]) -> str:
    """Short stable hash of a stage's output-shaping parameters."""
    return hashlib.sha256(canonical_json(dict(config)).encode()).hexdigest()[:16]


def guard_config(out_dir: Path, config: Mapping[str, Any], *, stage: str,
                 hint: str = "use a fresh output directory, or rerun with the original "
                             "parameters") -> str:
    """Record ``config``'s hash in ``out_dir``, or refuse if the directory holds another one.

    A resumed stage must never mix outputs made under two configurations (half the shards
    with one aux-layer set, half with another look fine and train a broken drafter).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / CONFIG_FILE
    digest = config_hash(config)
    stored = _stored_config(path)
    if stored is not None:
        if stored.get("hash") != digest:
            changed = sorted(k for k in set(stored.get("config", {})) | set(config)
                             if stored.get("config", {}).get(k) != _jsonable(config.get(k)))
            raise ActionError(
                f"{stage} outputs here were made with another configuration "
                f"(hash {stored.get('hash')} != {digest}; changed: {', '.join(changed) or '?'})",
                where=str(path),
                hint=hint)
        return digest
    atomic_write_text(path, json.dumps({"stage": stage, "hash": digest,
                                        "config": _jsonable(dict(config))}, indent=2))
    return digest


def config_differs(out_dir: Path, config: Mapping[str, Any]) -> bool:
    """Whether ``out_dir`` holds outputs recorded under another configuration than
    ``config`` (what :func:`guard_config` would refuse); False where it holds none."""
    try:
        stored = _stored_config(Path(out_dir) / CONFIG_FILE)
    except ActionError:
        return True  # unreadable: not this configuration's
    return stored is not None and stored.get("hash") != config_hash(config)


def _stored_config(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ActionError(f"unreadable config record ({exc})", where=str(path)) from None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide results from other users
    os.replace(tmp, path)


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)``; a line that is not JSON is an error naming file:line."""
    path = Path(path)
    if not path.is_file():
        raise ActionError("file not found", where=str(path))
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ActionError(f"not valid JSON ({exc.msg})",
                                  where=f"{path}:{lineno}") from None


def resolve_jsonl(path: Path, default_name: str) -> Path:
    """A stage input given as a directory means the directory's ``default_name`` file."""
    path = Path(path)
    return path / default_name if path.is_dir() else path


def log(msg: str) -> None:
    print(msg, flush=True)


class Progress:
    """Progress lines with rates, at most one every ``every`` seconds (stdout is the job log)."""

    def __init__(self, label: str, total: int | None = None, every: float = 5.0,
                 unit: str = "samples"):
        self.label, self.total, self.every, self.unit = label, total, every, unit
        self.start = self.last = time.perf_counter()
        self.items = 0
        self.tokens = 0

    def update(self, items: int = 0, tokens: int = 0, extra: str = "", force: bool = False) -> None:
        self.items += items
        self.tokens += tokens
        now = time.perf_counter()
        if force or now - self.last >= self.every:
            self.last = now
            log(self.line(extra))

    def line(self, extra: str = "") -> str:
        dt = max(time.perf_counter() - self.start, 1e-9)
        done = f"{self.items}/{self.total}" if self.total else f"{self.items}"
        parts = [f"[{self.label}] {done}", f"{self.items / dt:.1f} {self.unit}/s"]
        if self.tokens:
            parts.append(f"{self.tokens / dt:.0f} tokens/s")
        if self.total and self.items:
            parts.append(f"eta {max(self.total - self.items, 0) * dt / self.items:.0f}s")
        if extra:
            parts.append(extra)
        return " ".join(parts)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def add_threads_arg(parser: Any) -> None:
    """``--threads N`` for a stage that runs torch on the CPU."""
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="CPU threads for torch's intra-op and inter-op pools (default: "
                             "OMP_NUM_THREADS, which `harness run` sets for a CPU stage on its "
                             "own machine to fit the cores other work leaves; else torch's "
                             "choice)")


def use_threads(args: Any = None) -> None:
    """Give torch the thread count the stage was given (``--threads``, else
    ``OMP_NUM_THREADS``, which ``harness run`` sets for a CPU stage on its own machine), for
    its intra-op and inter-op pools alike, and say so in the log. Given none, torch keeps
    its own choice (one thread per core), and the log says that too. It reads the
    environment and never writes it: tests run stages in-process, and one stage's count
    must not become the next one's.
    """
    import torch

    given = getattr(args, "threads", None)
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given is not None:
        if given < 1:
            raise ActionError(f"--threads {given}: give at least 1")
        n = given
        why = (os.environ.get("HARNESS_THREADS_WHY") if text == str(n) else None) \
            or f"--threads {n}"
    elif text.isdigit() and int(text) >= 1:
        n = int(text)
        why = os.environ.get("HARNESS_THREADS_WHY") or f"OMP_NUM_THREADS={n}"
    else:
        log(f"threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} "
            "inter-op (torch's choice: OMP_NUM_THREADS is not set)")
        return
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # only before inter-op work starts; it has, so it keeps its own
        pass
    log(f"threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} "
        f"inter-op ({why})")


def pick_device(name: str = "auto") -> Any:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ActionError(f"unknown device {name!r} ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ActionError(f"device {name!r} asked for but CUDA is not available",
                          hint="use --device cpu or auto")
    return device


DTYPES = ("auto", "float32", "bfloat16", "float16")


def pick_dtype(name: str, device: Any) -> Any:
    """``auto`` is bf16 on a GPU (what the GPU path is tuned for) and fp32 on the CPU."""
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}[name]
    except KeyError:
        raise ActionError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}") from None


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def verifier_config(verifier: Path) -> dict[str, Any]:
    """Read ``config.json`` of a Hugging Face model directory, with errors naming the file."""
    verifier = Path(verifier)
    if not verifier.is_dir():
        raise ActionError("verifier directory not found", where=str(verifier))
    cfg_path = verifier / "config.json"
    if not cfg_path.is_file():
        raise ActionError("no config.json: not a Hugging Face model directory",
                          where=str(verifier))
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise ActionError(f"config.json is not valid JSON ({exc.msg})",
                          where=str(cfg_path)) from None
    for key in ("vocab_size", "hidden_size", "num_hidden_layers"):
        if not isinstance(cfg.get(key), int):
            raise ActionError(f"config.json lacks an integer {key!r}", where=str(cfg_path))
    return cfg


def check_verifier_weights(verifier: Path) -> None:
    names = [p.name for p in Path(verifier).iterdir()]
    if not any(n.endswith((".safetensors", ".bin")) or n.endswith(".safetensors.index.json")
               for n in names):
        raise ActionError("no weights (*.safetensors or *.bin) in the verifier directory",
                          where=str(verifier))


def load_verifier(verifier: Path, device: Any, dtype: Any) -> Any:
    """Load a causal LM for inference; bad directories give one-line errors."""
    from transformers import AutoModelForCausalLM

    verifier_config(verifier)
    check_verifier_weights(verifier)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(verifier), dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ActionError(f"cannot load the verifier ({str(exc).splitlines()[0]})",
                          where=str(verifier)) from None
    return model.to(device).eval()


def load_tokenizer(verifier: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(verifier))
    except (OSError, ValueError) as exc:
        raise ActionError(f"cannot load the tokenizer ({str(exc).splitlines()[0]})",
                          where=str(verifier)) from None


def default_aux_layers(num_layers: int) -> list[int]:
    """vLLM's default for EAGLE-3: ``[2, N // 2, N - 3]`` (HF ``output_hidden_states`` ids)."""
    return [2, num_layers // 2, num_layers - 3]


def vllm_aux_order(ids: list[int]) -> list[int]:
    """The aux ids as vLLM uses them: sorted and de-duplicated
    (``EagleModelMixin._set_aux_hidden_state_layers``: ``tuple(sorted(set(layers)))``); the
    target's states are concatenated in this order, whatever order the config lists."""
    return sorted(set(ids))


def choose_aux_layers(given: Any, num_layers: int, where: str) -> tuple[list[int], str]:
    """The aux layer ids a drafter is trained on: ``given`` (or vLLM's default), ascending.

    vLLM sorts the ids, drops repeats and concatenates the states in ascending order, so a
    drafter trained on another order or on a repeated id would read its ``fc`` inputs
    shuffled or short. Ids are therefore sorted here (the note returned says so, once) and
    a repeat is refused. Returns ``(ids, note)``; ``note`` is empty when nothing changed.
    """
    if given is None:
        ids = default_aux_layers(num_layers)
        if len(set(ids)) != len(ids):
            raise ActionError(
                f"vLLM's default aux layers [2, N//2, N-3] = {ids} repeat an id for a "
                f"{num_layers}-layer verifier (vLLM drops repeats, so fc would get fewer "
                "states than it was trained on)", where=where,
                hint="pass --aux-layers with three distinct ids in 0..N-1")
    else:
        ids = given
    if not (isinstance(ids, list) and len(ids) == 3
            and all(isinstance(k, int) and not isinstance(k, bool) for k in ids)):
        raise ActionError(f"aux layers must be a list of three integers, got {ids!r}",
                          where=where)
    bad = [k for k in ids if not 0 <= k < num_layers]
    if bad:
        raise ActionError(f"aux layer id(s) {bad} out of range for a {num_layers}-layer "
                          f"verifier (valid: 0..{num_layers - 1}; id k = input of layer k)",
                          where=where)
    ordered = vllm_aux_order(ids)
    if len(ordered) != len(ids):
        raise ActionError(f"aux layer ids {ids} repeat an id (vLLM drops repeats, so fc would "
                          "get fewer states than it was trained on)", where=where,
                          hint="give three distinct ids")
    note = "" if ordered == list(ids) else (
        f"aux layers {list(ids)} sorted to {ordered}: vLLM concatenates the aux states in "
        "ascending id order")
    return ordered, note


def seed_everything(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def env_summary() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return f"python {sys.version.split()[0]} torch {torch.__version__} on {gpu}"
