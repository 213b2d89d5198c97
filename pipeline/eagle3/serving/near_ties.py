"""Where a speculative answer parts from plain greedy decoding: a near-tie, or a lossy drafter.

Speculative decoding is lossless in exact arithmetic. In bfloat16 it is lossless up to
rounding: the verifier scores k+1 tokens in one pass where plain decoding scores one, so
its kernels run other shapes and round differently, and where plain's two best tokens are
almost level, the other one can win. A 3.1B verifier served with EAGLE-3 at k=5 did this
on one prompt of 32 at c=1 (H100, vLLM 0.26.0, 2026-12-07), while k=3 gave every answer
equal; a drafter that breaks the guarantee gives wrong tokens anywhere.

So a difference is judged by the plain server's own logits at the first token where the
two answers part: the same context (the prompt's token ids and the tokens both produced)
sent back as a one-token completion with ``logprobs``, and the margin between plain's
token and the speculative one read off. A margin within ``limit`` nats is a near-tie that
rounding can turn (either way: the question is itself a prefill, another kernel shape);
anything wider, or a speculative token outside plain's top ``TOP_LOGPROBS``, is a real
difference. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.vllm.openai_client import post_json

__all__ = ["DEFAULT_TIE_MARGIN", "MAX_JUDGED", "TOP_LOGPROBS", "Divergence", "Judge",
           "TieVerdict", "adjudicate", "judge_places"]

# A judgement, not a measurement yet: bfloat16 rounding moves a logit by hundredths to
# tenths of a nat, and a drafter that breaks losslessness proposes tokens that plain rates
# far lower. Every judged margin is recorded (metrics.outputs_ties) to set it from data.
DEFAULT_TIE_MARGIN = 0.5
TOP_LOGPROBS = 20  # vLLM's default --max-logprobs
MAX_JUDGED = 32  # questions to the plain server per candidate; more places: not judged


@dataclass(frozen=True)
class Divergence:
    """The first token at which one speculative answer parts from plain's."""

    prompt: str
    at: int                         # index of the first differing generated token
    spec_token: int
    plain_token: int
    context: tuple[int, ...]        # the prompt's token ids + the tokens both produced

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.prompt, self.at, self.spec_token, self.plain_token)


@dataclass(frozen=True)
class TieVerdict:
    divergence: Divergence
    # plain's logprob of its own token minus of the speculative one; inf: that one is not
    # in plain's top TOP_LOGPROBS. The question is a prefill of the whole context, a third
    # kernel shape, so at a true near-tie it may put the speculative token ahead by a hair
    # (a small negative margin): a near-tie either way.
    margin: float | None
    error: str | None = None        # why the plain server could not be asked

    def near_tie(self, limit: float) -> bool:
        return self.error is None and self.margin is not None and abs(self.margin) <= limit

    def to_json(self) -> dict[str, Any]:
        d = self.divergence
        margin = None if self.margin is None or math.isinf(self.margin) else \
            round(self.margin, 4)
        return {"prompt": d.prompt, "at": d.at, "spec_token": d.spec_token,
                "plain_token": d.plain_token, "context_tokens": len(d.context),
                "margin": margin, "outside_top": self.margin is not None and
                math.isinf(self.margin), "error": self.error}


def _token_id(key: str) -> int | None:
    # return_tokens_as_token_ids renders each token as "token_id:<id>"
    head, _, tail = key.partition(":")
    return int(tail) if head == "token_id" and tail.lstrip("-").isdigit() else None


def next_token_logprobs(base_url: str, model: str, context: Sequence[int], *,
                        api_key: str | None = None, timeout: float = 30.0
                        ) -> tuple[dict[int, float] | None, str | None]:
    """Plain's top :data:`TOP_LOGPROBS` next tokens after ``context`` with their logprobs
    (raw, before any sampling setting), or why they could not be had."""
    answer = post_json(base_url.rstrip("/") + "/v1/completions", {
        "model": model, "prompt": list(context), "max_tokens": 1, "temperature": 0,
        "logprobs": TOP_LOGPROBS, "return_tokens_as_token_ids": True}, timeout=timeout,
        api_key=api_key)
    if not answer.ok:
        return None, answer.describe()
    try:
        top = answer.json()["choices"][0]["logprobs"]["top_logprobs"][0]
        out = {tid: float(lp) for key, lp in top.items()
               if (tid := _token_id(str(key))) is not None}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None, "the answer has no top_logprobs with token ids"
    return (out, None) if out else (None, "the answer has no top_logprobs with token ids")


def adjudicate(divergences: Sequence[Divergence], base_url: str, model: str, *,
               api_key: str | None = None, timeout: float = 30.0) -> list[TieVerdict]:
    """One verdict per divergence, each from one request to the plain server. After the
    first request that fails (a server gone or silent past ``timeout``, or one that gives
    no logprobs) the rest are not asked: the check fails on any error anyway, and a run
    ending with its servers must not wait ``timeout`` a place."""
    verdicts: list[TieVerdict] = []
    gone: str | None = None
    for d in divergences:
        if gone is not None:
            verdicts.append(TieVerdict(d, None, f"not asked: {gone}"))
            continue
        top, error = next_token_logprobs(base_url, model, d.context, api_key=api_key,
                                         timeout=timeout)
        if top is None:
            verdicts.append(TieVerdict(d, None, error))
            gone = error or "no answer"
            continue
        best = top.get(d.plain_token)
        if best is None:
            verdicts.append(TieVerdict(d, None, f"plain's own token {d.plain_token} is not "
                                       "among its top logprobs now: the server answers "
                                       "differently than it did"))
            continue
        theirs = top.get(d.spec_token)
        verdicts.append(TieVerdict(d, math.inf if theirs is None else best - theirs))
    return verdicts


# asks the plain server about the places where answers part from its own
Judge = Callable[[list[Divergence]], list[TieVerdict]]


def judge_places(places: Sequence[Divergence], unplaced: int, differ: int, judge: Judge,
                 limit: float) -> tuple[bool, str, list[dict[str, Any]]]:
    """Whether each of ``differ`` differing answers parts from plain at a near-tie, the
    words the check adds, and a row per judged place. ``unplaced`` answers had no token
    ids to judge by: with any, nothing passes."""
    if unplaced or not places or len(places) > MAX_JUDGED:
        why = (f"{unplaced} differing answer(s) without token ids to judge by"
               if unplaced or not places else
               f"{len(places)} places to judge, more than {MAX_JUDGED}")
        return False, f"; not judged as near-ties: {why}", []
    verdicts = judge(list(places))
    rows = [v.to_json() for v in verdicts]
    errors = [v for v in verdicts if v.error]
    if errors:
        return False, f"; the plain server could not judge them: {errors[0].error}", rows
    wide = [v for v in verdicts if not v.near_tie(limit)]
    if not wide:
        most = max(abs(v.margin) for v in verdicts if v.margin is not None)
        return True, (f"; the {differ} that differ part at {len(places)} place(s), each a "
                      f"near-tie of plain's own logits (margin {most:.3f} nats at most, "
                      f"<= {limit:g} allowed): rounding in the verifier's k+1-token pass, "
                      "not a lossy drafter"), rows
    worst = wide[0]
    d = worst.divergence
    how = ("not among plain's top choices" if worst.margin == math.inf else
           f"{worst.margin:.3f} nats below plain's token" if worst.margin > 0 else
           f"{-worst.margin:.3f} nats above plain's own token now: plain disagrees with "
           "its own answer")
    return False, (f"; {len(wide)} of {len(places)} place(s) are no near-tie: prompt "
                   f"{d.prompt} at token {d.at}, spec's token {d.spec_token} is {how} "
                   f"({d.plain_token}; <= {limit:g} nats would be rounding)"), rows
