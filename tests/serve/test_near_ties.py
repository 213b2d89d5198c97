"""Judging where an answer parts from plain: against the stand-in server, and without one."""

from __future__ import annotations

import math

from pipeline.eagle3.serving.near_ties import Divergence, adjudicate
from tests.sshd import free_port


def _place(n: int, spec: int, prompt: str = "p") -> Divergence:
    # the stand-in's prompt ids are >= 1000, its answers count up from 0 below 97
    return Divergence(prompt, n, spec, n % 97, (1001, 1002, *range(n)))


def test_margins_from_the_plain_servers_own_logprobs(fake_server) -> None:
    url, _ = fake_server("--fake-tie-margin", "0.25")
    (flipped,) = adjudicate([_place(5, 6)], fake_server("--fake-tie-margin", "-0.03")[0],
                            "tiny")
    assert math.isclose(flipped.margin, -0.03) and flipped.near_tie(0.5)  # a hair the other way
    near, outside, disagrees, absent = adjudicate(
        [_place(5, 6), _place(7, 50), Divergence("p", 3, 4, 9, (1001, 0, 1, 2)),
         Divergence("p", 3, 4, 60, (1001, 0, 1, 2))], url, "tiny")
    assert near.error is None and math.isclose(near.margin, 0.25, abs_tol=1e-9)
    assert near.near_tie(0.5) and not near.near_tie(0.1)
    # a token outside plain's top logprobs is no near-tie at any margin
    assert outside.margin == math.inf and not outside.near_tie(100.0)
    assert outside.to_json()["outside_top"] is True and outside.to_json()["margin"] is None
    # plain now rates the speculative token far above the token it answered with: no tie
    assert disagrees.margin < -10 and not disagrees.near_tie(0.5)
    # plain's own recorded token is not among its top choices at all: said, not judged
    assert absent.margin is None and "is not among its top logprobs" in absent.error


def test_a_plain_server_gone_is_asked_once() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    verdicts = adjudicate([_place(5, 6), _place(6, 7), _place(7, 8)], url, "tiny",
                          timeout=5)
    assert [v.error for v in verdicts] == ["connection refused",
                                           "not asked: connection refused",
                                           "not asked: connection refused"]
    assert not any(v.near_tie(10.0) for v in verdicts)
