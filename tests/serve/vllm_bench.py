"""vLLM's own benchmark client (``vllm bench serve``) on the CPU, for the tests that hold
our served benchmark against it.

vLLM cannot serve here, but its benchmark client is Python: ``vllm.benchmarks.serve`` and
what it imports. It is installed once into a folder of its own under
``$HARNESS_VLLM_BENCH_CACHE`` (default ``~/.cache/todo-harness/vllm-bench``), named
``vllm-<version>``:

- ``site/``: the Python files of the vLLM wheel at :data:`VLLM`, downloaded with pip (about
  300 MB, CUDA kernels included) and kept without its compiled parts (about 40 MB); the
  wheel itself is deleted;
- ``deps/``: the packages its benchmark path imports that the project's venv lacks
  (:data:`DEPS`, with their own dependencies), installed with ``pip --target``.

torch (CPU) and transformers come from the project's venv, which runs it:
``PYTHONPATH=site:deps python bench/serving/vllm_bench_driver.py``. ``scripts/test`` fills the
cache in the background while pip installs the project (``.venv/bin/python
tests/serve/vllm_bench.py``), under a lock, marked done only when finished, as
tests/agents/real/npm.py does for the agent programs.

Without pip's index the test is a named skip; with ``CI`` set it fails, because CI must run
it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VLLM = "0.26.0"
# What vllm.benchmarks.serve and its `custom` dataset import beyond torch, transformers,
# numpy, aiohttp and tqdm (found by importing it against the project's venv).
DEPS = ("pybase64==1.5.1", "pillow==13.0.0", "msgspec==0.23.0", "cbor2==6.3.0",
        "pyzmq==27.3.0", "openai-harmony==0.0.8", "openai==3.60.0", "cachetools==8.0.2",
        "pandas==3.1.1")
DONE = ".installed"
_AS_SCRIPT = False


class Unavailable(Exception):
    """It cannot be installed here, when this file runs as a script."""


def cache_dir() -> Path:
    raw = os.environ.get("HARNESS_VLLM_BENCH_CACHE")
    root = Path(raw).expanduser() if raw else Path.home() / ".cache" / "todo-harness" / \
        "vllm-bench"
    return root / f"vllm-{VLLM}"


def _cannot(why: str) -> None:
    if _AS_SCRIPT:
        raise Unavailable(why)
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"vllm bench serve must run in CI, but {why}")
    pytest.skip(why)


def _pip(*args: str, timeout: float) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q",
                           *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).split())[-400:]
        _cannot(f"pip {args[0]} failed: {tail}")


def pythonpath() -> str:
    """``site:deps``, installed on first use."""
    where = cache_dir()
    path = f"{where / 'site'}{os.pathsep}{where / 'deps'}"
    if (where / DONE).exists():
        return path
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f".{where.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a parallel worker may be installing it now
        if (where / DONE).exists():
            return path
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir()
        with tempfile.TemporaryDirectory(dir=where.parent) as tmp:
            _pip("download", "--no-deps", "--only-binary=:all:", "-d", tmp, f"vllm=={VLLM}",
                 timeout=1800)
            (wheel,) = Path(tmp).glob("vllm-*.whl")
            with zipfile.ZipFile(wheel) as z:
                keep = [n for n in z.namelist() if n.endswith(".py")
                        or n.startswith(f"vllm-{VLLM}.dist-info/")]
                z.extractall(where / "site", keep)
        _pip("install", "--no-compile", "--target", str(where / "deps"), *DEPS, timeout=1800)
        (where / DONE).write_text(f"vllm {VLLM}\n")
    return path


if __name__ == "__main__":
    _AS_SCRIPT = True
    try:
        print(f"vllm bench serve {VLLM}: {pythonpath()}")
    except (Unavailable, OSError, subprocess.TimeoutExpired) as exc:
        print(f"!! vllm bench serve {VLLM} not installed: {exc}", file=sys.stderr)
        sys.exit(1)
