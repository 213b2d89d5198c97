"""Prompt shapes and reasoning reassembly against recorded response shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.eagle3.text.chat import assemble, parse_prompt, split_think, think_problem
from pipeline.eagle3.text.openai_backend import RequestFailed, parse_response
from pipeline.errors import ActionError

pytestmark = pytest.mark.ml

FIXTURES = json.loads((Path(__file__).parents[1] / "fixtures" / "openai_responses.json").read_text())


@pytest.mark.parametrize("case", FIXTURES["cases"], ids=lambda c: c["name"])
def test_reassembly_of_recorded_responses(case):
    completion = parse_response(case["response"])
    got = assemble(completion.content, completion.reasoning)
    assert got.text == case["expected"]
    assert got.has_reasoning is case["has_reasoning"]
    assert think_problem(got.text) is None
    assert completion.finish_reason == case["response"]["choices"][0]["finish_reason"]


def test_reassembled_reasoning_splits_back_exactly():
    case = FIXTURES["cases"][0]
    message = case["response"]["choices"][0]["message"]
    reasoning, answer = split_think(assemble(message["content"],
                                             message["reasoning_content"]).text)
    assert (reasoning, answer) == (message["reasoning_content"], message["content"])


def test_template_opened_think_gets_its_tag_back():
    got = assemble("thinking</think>answer", None)
    assert got.text == "<think>thinking</think>answer" and got.restored_open_tag


def test_odd_response_shape_is_a_failed_request():
    with pytest.raises(RequestFailed, match="unexpected response shape"):
        parse_response({"error": {"message": "model not found"}})


@pytest.mark.parametrize("text,problem", [
    ("plain answer", None),
    ("<think>a</think>b", None),
    ("  <think>a</think>b", None),
    ("<think>a<think>b</think>c", "2 <think> vs 1 </think>"),
    ("<think>a</think>b<think>c</think>d", "2 think blocks"),
    ("</think>a<think>b", "</think> before <think>"),
    ("x <think>a</think>b", "text before <think>"),
])
def test_think_problems(text, problem):
    assert think_problem(text) == problem


def test_prompt_shapes_give_the_same_messages():
    a = parse_prompt({"id": "1", "messages": [{"role": "user", "content": "hi"}]}, "f:1")
    b = parse_prompt({"id": "1", "prompt": "hi"}, "f:2")
    c = parse_prompt({"id": "1", "conversations": [{"from": "human", "value": "hi"},
                                                   {"from": "gpt", "value": "old"}]}, "f:3")
    assert a.messages == b.messages == c.messages == [{"role": "user", "content": "hi"}]


def test_missing_id_is_a_stable_hash():
    one = parse_prompt({"prompt": "hello"}, "f:1")
    two = parse_prompt({"prompt": "hello"}, "f:9")
    assert one.id == two.id and one.id.startswith("p-")
    assert parse_prompt({"prompt": "other"}, "f:1").id != one.id


@pytest.mark.parametrize("obj,match", [
    ({"question": "hi"}, "unknown prompt shape"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
     "last message must be the user's"),
    ({"messages": [{"role": "robot", "content": "a"}]}, "unknown role"),
    (["not", "an", "object"], "must be a JSON object"),
])
def test_bad_prompts_name_the_line(obj, match):
    with pytest.raises(ActionError, match=match) as err:
        parse_prompt(obj, "prompts.jsonl:7")
    assert str(err.value).startswith("prompts.jsonl:7: ")
