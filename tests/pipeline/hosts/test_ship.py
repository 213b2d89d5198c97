"""Shipping the pipeline package: once per content hash, and what runs is what was hashed."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pipeline
from pipeline.hosts.executor import Executor
from pipeline.hosts.ship import code_dir, code_env, ensure_shipped, package_hash


def test_hash_ignores_caches_and_sees_edits(tmp_path: Path) -> None:
    copy = tmp_path / "pipeline"
    shutil.copytree(Path(pipeline.__file__).parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    base = package_hash(copy)
    assert base == package_hash(Path(pipeline.__file__).parent)
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (copy / ".swp").write_text("editor")
    assert package_hash(copy) == base
    (copy / "errors.py").write_text((copy / "errors.py").read_text() + "\n# edited\n")
    assert package_hash(copy) != base
    (copy / "errors.py").rename(copy / "errors2.py")
    assert package_hash(copy) not in (base,)


def test_ship_once_then_nothing(executor: Executor) -> None:
    digest, shipped = ensure_shipped(executor)
    assert shipped and digest == package_hash()
    target = Path(code_dir(executor.workdir, digest))
    assert (target / "pipeline" / "actions.py").read_bytes() == \
        (Path(pipeline.__file__).parent / "actions.py").read_bytes()
    assert not list(target.rglob("__pycache__"))
    before = {p: os.stat(p).st_mtime_ns for p in [target, *target.rglob("*")]}
    inode = target.stat().st_ino

    again, shipped_again = ensure_shipped(executor)
    assert (again, shipped_again) == (digest, False)
    assert {p: os.stat(p).st_mtime_ns for p in [target, *target.rglob("*")]} == before
    assert target.stat().st_ino == inode
    assert sorted(os.listdir(target.parent)) == [digest]  # no half-shipped leftovers

    # what runs on the host is the shipped copy, not this checkout
    probe = "import pipeline.actions as a; print(a.__file__)"
    out = executor.run([sys.executable, "-c", probe], env=code_env(executor.workdir, digest),
                       cwd="/")
    assert out.stdout.strip() == str(target / "pipeline" / "actions.py")
