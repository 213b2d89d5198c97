"""clean: each defect is rejected with its reason, into quarantine; nothing is deleted."""

from __future__ import annotations

import json

import pytest

from pipeline.eagle3 import clean

from ..conftest import run_stage, write_jsonl

pytestmark = pytest.mark.ml


def sample(sid, answer, *, roles=("user", "assistant"), finish="stop", question=None):
    msgs = [{"role": r, "content": question or f"q {sid}"} for r in roles[:-1]]
    msgs.append({"role": roles[-1], "content": answer})
    return {"id": sid, "messages": msgs, "finish_reason": finish}


def test_each_defect_has_its_reason(tmp_path):
    rows = [
        sample("good1", "<think>r</think>answer"),
        sample("good2", "<think>r2</think>another", question="other"),
        sample("empty", "   "),
        sample("after", "<think>only thinking</think>  "),
        sample("trunc", "<think>r</think>cut", finish="length"),
        sample("open", "<think>never closed"),
        sample("unbal", "<think>a<think>b</think>c"),
        sample("order", "<think>r</think>a", roles=("assistant", "user")),
        sample("nothink", "just an answer"),
        sample("good1", "<think>r</think>different id reuse"),
        {**sample("dupe", "<think>r</think>answer"), "messages":
         sample("good1", "<think>r</think>answer")["messages"]},
        "not even an object",
    ]
    src = write_jsonl(tmp_path / "in" / "samples.jsonl", rows)
    src_text = src.read_text() + "{torn json\n"
    src.write_text(src_text)
    rc, result = run_stage(clean, tmp_path, samples=src.parent, out=tmp_path / "out",
                           require_think=True, max_reject_rate=0.95)
    assert rc == 0 and result.ok
    m = result.metrics
    assert (m["total"], m["kept"]) == (13, 2)
    assert {k.removeprefix("rejected_"): v for k, v in m.items() if k.startswith("rejected_")} \
        == {"empty": 2, "truncated": 2, "unbalanced_think": 1, "wrong_role_order": 1,
            "missing_think": 1, "duplicate": 2, "malformed": 2}
    kept = [json.loads(x)["id"] for x in
            (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert kept == ["good1", "good2"]
    rejected = [json.loads(x) for x in
                (tmp_path / "out" / "quarantine" / "rejected.jsonl").read_text().splitlines()]
    assert len(rejected) == 11 and all(r["reason"] and "sample" in r for r in rejected)
    assert {r["line"] for r in rejected if r["reason"] == "duplicate"} == {10, 11}
    assert src.read_text() == src_text  # the input is never rewritten


def test_previous_outputs_go_to_quarantine_not_away(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [sample("x", "<think>r</think>a")])
    out = tmp_path / "out"
    assert run_stage(clean, tmp_path, samples=src, out=out)[0] == 0
    first = (out / "samples.jsonl").read_text()
    src2 = write_jsonl(tmp_path / "b.jsonl", [sample("y", "<think>r</think>b")])
    assert run_stage(clean, tmp_path, samples=src2, out=out)[0] == 0
    stale = list((out / "quarantine").glob("stale-*/out-samples.jsonl"))
    assert len(stale) == 1 and stale[0].read_text() == first
    assert json.loads((out / "samples.jsonl").read_text())["id"] == "y"


def test_too_many_rejects_fail_the_check(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [sample("x", ""), sample("y", "<think>r</think>a")])
    rc, result = run_stage(clean, tmp_path, samples=src, out=tmp_path / "out",
                           max_reject_rate=0.2)
    assert rc == 1
    assert {c.name: c.passed for c in result.checks} == {"kept": True, "reject_rate": False}
