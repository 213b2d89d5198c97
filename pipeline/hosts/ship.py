"""Ship the ``pipeline`` package to a host, once per content hash.

Stage commands on a host run ``python -m pipeline.<...>`` with
``PYTHONPATH=<workdir>/.harness/code/<hash>``, so a host always runs exactly the code the
harness hashed, and an old copy can never be mistaken for the current one (the seed lost
time to stale hand-copied scripts). A host that already holds the hash gets nothing.

The hash covers the sorted relative paths and bytes of every file in the package except
``__pycache__``, compiled files and dot-files.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pipeline.errors import ExecutorError
from pipeline.hosts.executor import Executor

__all__ = ["CODE_DIR", "code_dir", "code_env", "ensure_shipped", "package_files",
           "package_hash"]

CODE_DIR = ".harness/code"
_PACKAGE = Path(__file__).resolve().parents[1]  # pipeline/


def package_files(root: Path = _PACKAGE) -> Iterator[tuple[str, Path]]:
    """``(relative posix path, path)`` of every shipped file, in sorted order."""
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
            continue
        if path.is_file() and path.suffix not in (".pyc", ".pyo"):
            found.append((rel.as_posix(), path))
    yield from sorted(found)


def package_hash(root: Path = _PACKAGE) -> str:
    """sha256 over the package's paths and contents; the name of its directory on hosts."""
    digest = hashlib.sha256()
    for rel, path in package_files(root):
        data = path.read_bytes()
        # lengths keep ("ab", "c") and ("a", "bc") apart
        digest.update(f"{len(rel)}:{rel}:{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def code_dir(workdir: str, digest: str) -> str:
    """The directory to put on ``PYTHONPATH``; it holds ``pipeline/``."""
    return f"{workdir}/{CODE_DIR}/{digest}"


def code_env(workdir: str, digest: str) -> dict[str, str]:
    return {"PYTHONPATH": code_dir(workdir, digest)}


def ensure_shipped(executor: Executor, workdir: str | None = None, *,
                   root: Path = _PACKAGE) -> tuple[str, bool]:
    """Make sure ``<workdir>/.harness/code/<hash>/pipeline`` exists on the host.

    Returns ``(hash, shipped)``; ``shipped`` is False when the host already had it and
    nothing was sent. The copy is unpacked beside its final place and renamed into it, so a
    directory named for a hash is always complete.
    """
    workdir = executor.resolve(workdir) if workdir else executor.workdir
    digest = package_hash(root)
    final = code_dir(workdir, digest)
    q = shlex.quote
    if _has(executor, final):
        return digest, False
    with tempfile.TemporaryDirectory(prefix="harness-ship-") as tmp:
        tarball = Path(tmp) / "pipeline.tar.gz"
        with tarfile.open(tarball, "w:gz") as tar:
            for rel, path in package_files(root):
                tar.add(path, arcname=f"pipeline/{rel}", recursive=False)
        stage = f"{workdir}/{CODE_DIR}/.incoming-{digest[:12]}-{os.getpid()}-{os.urandom(4).hex()}"
        remote_tar = executor.put(tarball, f"{stage}.tar.gz")
    script = (
        f"mkdir -p {q(stage)} && tar -xzf {q(remote_tar)} -C {q(stage)} && rm -f {q(remote_tar)}"
        f" || exit 1\n"
        # another harness may have shipped the same hash meanwhile: keep theirs
        f"if [ -d {q(final)} ]; then rm -rf {q(stage)}; else mv {q(stage)} {q(final)}; fi\n"
    )
    executor.run(script)
    if not _has(executor, final):
        raise ExecutorError(f"shipped code did not arrive in {final}", where=executor.host.name)
    return digest, True


def _has(executor: Executor, final: str) -> bool:
    result = executor.run(["test", "-d", f"{final}/pipeline"], warn=True, cwd="/")
    return result.exit_code == 0
