"""Ctrl-C at chosen moments of `harness todowrite` and `harness todoread` (a real SIGINT
the process sends itself, tests/data/interrupt_at.py): a write that landed exits 0 with
its answer and its notes, one that did not exits 130 with neither, and no moment shows
a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from state.store import Store
from tests.conftest import ROOT, harness_subprocess

CHILD = ROOT / "tests" / "data" / "interrupt_at.py"
LIST = {"todos": [{"content": "Regenerate samples", "status": "in_progress",
                   "activeForm": "Regenerating samples"}]}


def at(point: str, db: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db)}
    return subprocess.run([sys.executable, str(CHILD), point, *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=60)


def contents(db: Path) -> list[str]:
    with Store.open(str(db)) as s:
        row = s.session_by_name("default")
        return [t.content for t in s.todos(row.id)] if row else []


@pytest.fixture
def store_with_a_persons_todo(db_path: Path) -> Path:
    r = harness_subprocess(["add", "Check the tokenizer"], env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    return db_path


@pytest.mark.parametrize("point", ["commit", "close", "notes"])
def test_a_ctrl_c_after_the_commit_exits_0_with_the_answer_and_notes(
        store_with_a_persons_todo: Path, point: str) -> None:
    db = store_with_a_persons_todo
    r = at(point, db, "todowrite", stdin=json.dumps(LIST))
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    assert contents(db) == ["Check the tokenizer", "Regenerate samples"]
    assert json.loads(r.stdout)  # the answer the agent reads
    assert "kept t1 'Check the tokenizer'" in r.stderr  # and the write's note
    assert "interrupted" not in r.stderr


def test_a_ctrl_c_before_the_commit_exits_130_without_notes(
        store_with_a_persons_todo: Path) -> None:
    db = store_with_a_persons_todo
    r = at("parse", db, "todowrite", stdin=json.dumps(LIST))
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 130
    assert r.stderr.strip() == "error: interrupted"
    assert r.stdout == ""
    assert contents(db) == ["Check the tokenizer"]


@pytest.mark.parametrize("point", ["close", "notes"])
def test_a_ctrl_c_in_mains_cleanup_shows_no_traceback(store_with_a_persons_todo: Path,
                                                      point: str) -> None:
    r = at(point, store_with_a_persons_todo, "todoread")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 130
    assert r.stderr.strip().endswith("error: interrupted")
