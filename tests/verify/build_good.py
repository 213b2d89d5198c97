"""Build the verify tests' good tiny drafter, once, and keep it while its inputs hold.

``python -m tests.verify.build_good OUT`` (or ``--cache DIR``) runs the EAGLE-3 stages
in-process as the runner starts them: a tiny reasoning verifier (7 layers, hidden 64), 600 synthetic chats, vocab
mapping, drafter training, export in vLLM's EAGLE format, and a P-EAGLE drafter of the same
data exported as speculators ``peagle``; then writes ``OUT/manifest.json``
naming every file of this repository the build imported, with its sha256, and the
versions of the libraries that shape the numbers.

:func:`cached` is what the session fixture calls: a cache entry (under pytest's cache
directory) is reused when every file in its manifest still has the recorded digest and
the versions match, so editing the verification code does not rebuild it, while editing
a stage, the task generator or these parameters does. The build runs in a child process:
its ``sys.modules`` at the end are exactly what it depended on, and the thread count is
set before torch starts. Concurrent sessions wait on a lock rather than build twice, and a
session whose tests need the drafter starts the build as soon as they are collected
(:func:`start`), so in a full run it overlaps the tests before them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "manifest.json"
ENTRY = "good"
LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")

# Small enough for the test budget, large enough for a drafter whose acceptance length is
# well above 2 at k=3 (the tests measure that it falls when something is broken) and whose
# loss tells its aux layers apart (the probe's paired t about 6 to 8). Measured: 120
# verifier steps of 16 give tau 3.18 in 60% of the time of 120 steps of 32 (tau 3.05);
# 80 of 24 gave 2.56, 60 of 32 gave 2.50 with a probe t near 1 (docs/PERFORMANCE.md).
VERIFIER = {"prompts": 24, "seed": 0, "vocab_size": 400, "corpus_files": 6, "hidden_size": 64,
            "layers": 7, "heads": 4, "kv_heads": 2, "intermediate_size": 128,
            "train_samples": 2000, "steps": 120, "batch_size": 16, "lr": 0.003,
            "check_prompts": 4, "min_reasoning_rate": 0.0, "device": "cpu"}
SAMPLES = 600
TRAIN = {"epochs": 5, "ttt_steps": 3, "lr": 0.003, "batch_size": 16, "batch_tokens": 2048,
         "holdout": 0.1, "device": "cpu", "log_every": 1000}
# The P-EAGLE drafter of the same data (parallel drafting; its mask depths learn slower:
# held-out est. tau about 2.3 after these 5 epochs against EAGLE-3's 2.8).
PEAGLE = {**TRAIN, "method": "peagle"}


def build(root: Path) -> dict[str, Any]:
    """Run the stages into ``root``; return the paths the tests use."""
    from pipeline.eagle3 import build_verifier as verifier
    from pipeline.eagle3 import clean, export, hidden_states, tokenize, train, vocab
    from tests.eagle3.conftest import ok, run_stage, synthetic_samples, write_jsonl

    rc, result = run_stage(verifier, root, out=root / "verifier",
                           prompts_out=root / "prompts.jsonl", **VERIFIER)
    assert rc == 0 and result is not None and result.ok, result
    v = root / "verifier"
    samples = write_jsonl(root / "generated" / "samples.jsonl", synthetic_samples(SAMPLES, 1))
    ok(clean, root, samples=samples, out=root / "clean", require_think=True)
    ok(tokenize, root, samples=root / "clean", verifier=v, out=root / "tokens")
    ok(hidden_states, root, tokens=root / "tokens", verifier=v, out=root / "hidden",
       shard_tokens=8000, batch_tokens=2048, device="cpu", dtype="float32")
    ok(vocab, root, freqs=root / "tokens", verifier=v, draft_vocab=128,
       out=root / "vocab.safetensors")
    ok(train, root, hidden_states=root / "hidden", verifier=v, vocab=root / "vocab.safetensors",
       out=root / "train", **TRAIN)
    ok(export, root, checkpoint=root / "train", out=root / "drafter", format="eagle",
       dtype="bfloat16")
    ok(train, root, hidden_states=root / "hidden", verifier=v, vocab=root / "vocab.safetensors",
       out=root / "train_peagle", **PEAGLE)
    ok(export, root, checkpoint=root / "train_peagle", out=root / "peagle", dtype="bfloat16")
    shutil.rmtree(root / "hidden")  # tens of MB the tests do not read
    return paths(root)


def paths(root: Path) -> dict[str, Any]:
    return {"dir": root / "drafter", "verifier": root / "verifier",
            "prompts": root / "prompts.jsonl", "exclude": root / "generated" / "samples.jsonl",
            "train": root / "train", "root": root, "peagle": root / "peagle",
            "peagle_train": root / "train_peagle", "tokens": root / "tokens",
            "vocab": root / "vocab.safetensors"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def _dependencies() -> dict[str, str]:
    """This repository's files the build imported, relative path -> sha256."""
    deps = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not os.path.isabs(file):
            continue
        path = Path(file).resolve()
        if path.suffix == ".py" and ROOT in path.parents and ".venv" not in path.parts \
                and path.is_file():
            deps[str(path.relative_to(ROOT))] = _sha256(path)
    return dict(sorted(deps.items()))


def valid(entry: Path) -> bool:
    """Does the cache entry still describe what a build would make now?"""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("versions") != _versions() or manifest.get("params") != _params():
        return False
    for rel, digest in manifest.get("files", {}).items():
        path = ROOT / rel
        if not path.is_file() or _sha256(path) != digest:
            return False
    return all(p.exists() for p in paths(entry).values())


def _params() -> dict[str, Any]:
    return {"verifier": VERIFIER, "samples": SAMPLES, "train": TRAIN, "peagle": PEAGLE}


def cached(cache_dir: Path | None, scratch: Path) -> dict[str, Any]:
    """The good drafter's paths: from ``cache_dir`` when valid, else built there (or, with
    no cache, in ``scratch``), by a child process. A build already running (see
    :func:`start`) is waited for rather than repeated."""
    if cache_dir is None:
        _run_child([str(scratch)])
        return paths(scratch)
    _run_child(["--cache", str(cache_dir)])
    return paths(cache_dir / ENTRY)


def start(cache_dir: Path, log: Path) -> subprocess.Popen | None:
    """Begin making the cache entry in the background, unless it is valid already: the
    session's first test that needs it then waits only for what is left."""
    if valid(cache_dir / ENTRY):
        return None
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        return subprocess.Popen(_child_argv(["--cache", str(cache_dir)]), cwd=ROOT,
                                env=_child_env(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _child_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "tests.verify.build_good", *args]


def _child_env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    # one thread: two on a loaded 2-core box took 2.5 times as long (218 s against 88 s)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def _run_child(args: list[str]) -> None:
    proc = subprocess.run(_child_argv(args), cwd=ROOT, env=_child_env(), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise RuntimeError(f"building the good drafter failed (exit {proc.returncode}):\n"
                           f"{tail}")


def ensure(cache_dir: Path) -> Path:
    """Under the cache's lock (a concurrent session waits for this one's result): the
    entry, built in place when it is not valid (its configs record absolute paths; the
    manifest, written last, marks it complete)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    entry = cache_dir / ENTRY
    with open(cache_dir / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not valid(entry):
            shutil.rmtree(entry, ignore_errors=True)
            _build(entry)
    return entry


def _build(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    build(out)
    manifest = {"params": _params(), "versions": _versions(), "files": _dependencies(),
                "seconds": round(time.perf_counter() - t0, 1)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"built in {manifest['seconds']} s: {out}", flush=True)


def main(argv: list[str]) -> int:
    """``OUT``: build there; ``--cache DIR``: make ``DIR/good`` valid (see :func:`ensure`)."""
    if argv[:1] == ["--cache"]:
        ensure(Path(argv[1]))
    else:
        _build(Path(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
