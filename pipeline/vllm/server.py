"""Starting ``vllm serve``: its argv, whether its port is free, and the line that says why
it died.

- :func:`serve_argv` builds ``vllm serve TARGET --speculative-config '{"method":"eagle3",
  ...}' ...`` as an argv list (never shell text).
- :func:`port_in_use` / :func:`port_owner` say whether something already listens on a
  port, and which process: a health check that passes against *another* server on that
  port would be worse than a failure.
- :func:`startup_phases` reads what vLLM's log says its start cost: model load,
  torch.compile, CUDA-graph capture, the engine's whole init.
- :func:`capture_failure` says whether a server that died did so in its CUDA-graph capture
  (a traceback through vLLM's cudagraph code), the death a speculation schedule vLLM 0.26
  cannot capture ends in, and with which line;
- :func:`error_line` picks the server's own reason out of its log: vLLM prints the real
  cause (e.g. ``Eagle3 is only supported for [...] models. Got ...model_type='kimi_k2'``)
  and then a generic ``Engine core initialization failed. See root cause above.``, so the
  last error line is usually the wrong one.

Standard library only.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["byte_size", "capture_failure", "command_arg", "error_line", "json_value",
           "listener_pid", "port_in_use", "port_owner", "serve_argv", "startup_phases"]


def command_arg(text: str) -> list[str]:
    """``["python", "-m", "x"]`` (JSON) or one executable path; never split as shell text."""
    if text.lstrip().startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a JSON list: {text!r} ({exc})") from None
        if not value or not all(isinstance(v, str) for v in value):
            raise argparse.ArgumentTypeError("command must be a non-empty list of strings")
        return value
    return [text]


_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)")


def byte_size(text: str) -> int:
    """``4294967296``, ``4G`` (GiB) or ``4.5g`` (10^9): a size in bytes, read as vLLM reads
    ``--kv-cache-memory-bytes`` (upper-case suffixes are powers of 1024, lower-case of
    1000)."""
    m = _SIZE.fullmatch(str(text).strip())
    if not m or (not m.group(2) and "." in m.group(1)):
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (e.g. 4294967296, "
                                         "4G, 512M)")
    number, suffix = float(m.group(1)), m.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    size = int(number * scale)
    if size <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return size


def json_value(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not valid JSON: {text!r} ({exc})") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(f"expected a JSON {kind.__name__}, got {text!r}")
        return value
    return parse


def serve_argv(command: Sequence[str], target: str, *, port: int, host: str | None = None,
               draft: str | None = None, num_speculative_tokens: int = 3,
               draft_tensor_parallel_size: int | None = 1, tensor_parallel_size: int = 1,
               max_model_len: int | None = None, gpu_memory_utilization: float | None = None,
               kv_cache_memory_bytes: int | None = None,
               served_model_name: str | None = None, reasoning_parser: str | None = None,
               trust_remote_code: bool = False,
               speculative_config: Mapping[str, Any] | None = None,
               method: str = "eagle3", extra_args: Sequence[str] = (),
               parallel_drafting: bool = False) -> list[str]:
    """The ``vllm serve`` command line. ``draft=None`` serves the target alone (baseline);
    ``parallel_drafting`` for a P-EAGLE drafter (vLLM 0.26.0: method eagle3 with
    ``"parallel_drafting": true``; the drafter's speculators config names the mask token)."""
    argv = [*command, "serve", target, "--port", str(port)]
    if host:
        argv += ["--host", host]
    if tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    if gpu_memory_utilization:
        argv += ["--gpu-memory-utilization", f"{gpu_memory_utilization:g}"]
    if kv_cache_memory_bytes:
        argv += ["--kv-cache-memory-bytes", str(int(kv_cache_memory_bytes))]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if reasoning_parser:
        argv += ["--reasoning-parser", reasoning_parser]
    if trust_remote_code:
        argv.append("--trust-remote-code")
    if draft is not None:
        config: dict[str, Any] = {"method": method, "model": draft,
                                  "num_speculative_tokens": int(num_speculative_tokens)}
        if draft_tensor_parallel_size is not None:
            config["draft_tensor_parallel_size"] = int(draft_tensor_parallel_size)
        if parallel_drafting:
            config["parallel_drafting"] = True
        config.update(speculative_config or {})
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    return argv + [str(a) for a in extra_args]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Can nobody bind ``host:port`` because something already does?"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # not SO_REUSEADDR's lenient check: we want to know about listeners, and a
        # socket in TIME_WAIT does not stop a server that sets SO_REUSEADDR itself
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10:
                continue
            local, state, inode = parts[1], parts[3], parts[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(inode)
    return inodes


def listener_pid(port: int) -> int | None:
    """The process listening on ``port``, if we can see it (same user or root, Linux)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    return int(proc.name)
            except OSError:
                continue
    return None


def port_owner(port: int) -> str | None:
    """``pid 1234 (python3 -m vllm.entrypoints...)`` for the listener on ``port``, if we
    can see it (same user or root, Linux); None otherwise."""
    pid = listener_pid(port)
    if pid is None:
        return None
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            "utf-8", "replace").strip()
    except OSError:
        cmd = "?"
    return f"pid {pid} ({cmd[:120]})"


_EXCEPTION = re.compile(r"(?:^|\s)((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)): (.+)$")
_PYDANTIC = re.compile(r"Value error, (.+?)(?: \[type=.*)?$")
# Lines vLLM prints after the real cause; never the reason itself.
_WRAPPERS = ("See root cause above", "Engine core initialization failed",
             "validation error for", "EngineCore failed to start", "Worker failed")


def error_line(lines: Sequence[str]) -> str | None:
    """The line of a server log that best says why it failed, or None."""
    candidates: list[str] = []
    for raw in lines:
        line = raw.strip()
        m = _PYDANTIC.search(line)
        if m:
            candidates.append(m.group(1).strip())
            continue
        m = _EXCEPTION.search(line)
        if m and not any(w in line for w in _WRAPPERS):
            candidates.append(f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}")
    if candidates:
        return candidates[-1][:400]
    for raw in reversed(lines):  # no exception: the last ERROR-level line, else the last one
        if " ERROR " in f" {raw} " and not any(w in raw for w in _WRAPPERS):
            return raw.strip()[:400]
    for raw in reversed(lines):
        if raw.strip():
            return raw.strip()[:400]
    return None


# a traceback frame in vLLM's CUDA-graph code (vllm/v1/worker/gpu/cudagraph_utils.py and
# its spec_decode twin; the V1 runner's cuda_graph helpers)
_CAPTURE_FRAME = re.compile(r'File "[^"]*(?:cudagraph|cuda_graph)[^"]*\.py"')


def capture_failure(lines: Sequence[str]) -> str | None:
    """The reason a dead server gave, when its traceback runs through vLLM's CUDA-graph
    code (its capture, or the sizes it captures for); None otherwise."""
    last = max((i for i, line in enumerate(lines) if _CAPTURE_FRAME.search(line)),
               default=None)
    if last is None:
        return None
    source = None
    for line in lines[last + 1:]:
        text = line.strip()
        if text.startswith("assert "):
            source = text
            continue
        m = _RAISED.match(text)
        if m:
            name, message = m.group(1), (m.group(2) or "").strip()
            return f"{name}: {message or source or '(no message)'}"
    return error_line(lines) or "it died in CUDA-graph capture"


_RAISED = re.compile(r"^(\w*(?:Error|Exception))(?::\s*(.*))?$")


# vLLM 0.2x's own start-up lines (the engine core's log; several per server when it
# starts a drafter too: they add up).
_PHASES = (
    ("model_load_s", re.compile(r"Model loading took [\d.]+ ?GiB and ([\d.]+) s")),
    ("torch_compile_s", re.compile(r"torch\.compile took ([\d.]+) s in total")),
    ("cuda_graphs_s", re.compile(r"Graph capturing finished in ([\d.]+) sec")),
    ("engine_init_s", re.compile(r"init engine \(profile, create kv cache, warmup model\) "
                                 r"took ([\d.]+) s")),
)


def startup_phases(lines: Sequence[str]) -> dict[str, float]:
    """Seconds per start-up phase that the server's log names (absent: not logged)."""
    out: dict[str, float] = {}
    for raw in lines:
        for name, pattern in _PHASES:
            m = pattern.search(raw)
            if m:
                out[name] = round(out.get(name, 0.0) + float(m.group(1)), 3)
    return out
