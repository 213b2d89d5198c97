"""Reference greedy chain speculative decoding: a verifier, an EAGLE-3 drafter, KV caches.

One prompt at a time (batch 1), exactly as a serving engine runs one sequence:

1. The verifier prefills the prompt ``x_0..x_{p-1}`` and picks ``x_p`` (greedy). Its aux
   hidden states for rows ``0..p-1`` (Hugging Face ``output_hidden_states[k]``, the input
   of decoder layer ``k``, at the drafter's ``aux_layer_ids``) go to the drafter.
2. The drafter's row ``i`` reads token ``x_{i+1}`` and ``fc(aux_i)`` at position ``i``; the
   last row predicts the first draft token. Each further draft step reads the previous
   draft token and the previous step's pre-norm output, one position on. ``k`` drafts.
   A P-EAGLE drafter (``config.parallel``) drafts them in the same forward as the new
   rows instead, as vLLM's parallel drafting does (:mod:`pipeline.eagle3.model.peagle`): ``k - 1`` rows after
   them read the mask token and ``fc(mask_hidden)`` at the next positions, row ``m``
   giving draft ``m + 1``; those rows leave the drafter's cache after the round.
3. The verifier runs ``[x_p, d_1..d_k]`` in one forward. Draft ``d_j`` is accepted while it
   equals the verifier's own greedy token; the first disagreement (or the token after the
   last draft) is the verifier's bonus token. Rejected rows are cropped from both caches;
   the accepted rows' aux states feed the drafter in the next round (vLLM recomputes the
   drafter rows from verifier states in the same way).

Counts follow vLLM's spec-decode metrics: one *draft* per verify round that proposed
tokens, ``accepted_per_pos[j]`` counts rounds whose draft was accepted up to position
``j+1``; mean acceptance length is ``1 + accepted / drafts``; the per-position rate is
``accepted_per_pos[j] / drafts_reaching[j]`` (equal to vLLM's ``/ drafts`` when every round
drafts ``k`` tokens; near the token budget a round drafts fewer, so the denominators say how
many rounds reached that position).

The output must equal :func:`greedy_decode` of the verifier alone (the loop is lossless):
:mod:`pipeline.eagle3.checks.functional` asserts it on every run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from pipeline.eagle3.model.drafter import DrafterCache, Eagle3Drafter


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Seconds of each kind of forward (``verify``, ``draft``, ``plain``), synchronised on a
    GPU so a time is the kernel's, not the launch's."""

    def __init__(self, device: torch.device):
        self.device = device
        self.times: dict[str, list[float]] = {}

    def run(self, kind: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        _sync(self.device)
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        _sync(self.device)
        self.times.setdefault(kind, []).append(time.perf_counter() - t0)
        return out

    def add(self, kind: str, seconds: float) -> None:
        self.times.setdefault(kind, []).append(seconds)

    def median(self, kind: str) -> float | None:
        xs = sorted(self.times.get(kind, []))
        return xs[len(xs) // 2] if xs else None


class VerifierSteps:
    """The verifier as the loop uses it: logits and the concatenated aux states of new rows
    against a Hugging Face KV cache."""

    def __init__(self, model: Any, aux_layer_ids: Iterable[int]):
        import inspect

        self.model = model
        self.aux = list(aux_layer_ids)
        self.device = next(model.parameters()).device
        # transformers 5.2x renamed ``past_key_values`` to ``cache`` (the old name warns).
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache()

    @staticmethod
    def crop(cache: Any, length: int) -> None:
        """Keep the first ``length`` rows. A negative count (rows to drop) means the same in
        every transformers release; a positive one changed meaning in 5.2x."""
        extra = cache.get_seq_length() - length
        if extra > 0:
            cache.crop(-extra)

    @torch.no_grad()
    def forward(self, ids: list[int], cache: Any, want_aux: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(logits [L, V] fp32, aux [L, len(aux)*H] or None)`` for the new rows ``ids``."""
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=x, use_cache=True, output_hidden_states=want_aux,
                         **{self._cache_arg: cache})
        aux = None
        if want_aux:
            aux = torch.cat([out.hidden_states[k][0] for k in self.aux], dim=-1)
        return out.logits[0].float(), aux


@dataclass
class DecodeStats:
    """What one decoding loop measured, summed over prompts."""

    k: int
    tokens: int = 0              # generated tokens
    drafts: int = 0              # verify rounds that proposed at least one draft token
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    reaching_pos: list[int] = field(default_factory=list)
    seconds: float = 0.0         # wall time of the loops (prefill included)

    def __post_init__(self) -> None:
        self.accepted_per_pos = self.accepted_per_pos or [0] * self.k
        self.reaching_pos = self.reaching_pos or [0] * self.k

    @property
    def acceptance_length(self) -> float:
        """vLLM's mean acceptance length: ``1 + accepted / drafts``."""
        return 1.0 + self.accepted / self.drafts if self.drafts else 1.0

    @property
    def acceptance_rate(self) -> float:
        """vLLM's acceptance rate: ``accepted / draft tokens``."""
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def per_position(self) -> list[float]:
        """Share of rounds accepted up to position ``j+1`` (vLLM's per-position rate)."""
        return [a / n if n else 0.0 for a, n in zip(self.accepted_per_pos, self.reaching_pos,
                                                    strict=True)]

    @property
    def conditional(self) -> list[float]:
        """Acceptance at position ``j+1`` given position ``j`` was accepted."""
        out, prev = [], None
        for j, rate in enumerate(self.per_position):
            base = 1.0 if j == 0 else prev
            out.append(rate / base if base else 0.0)
            prev = rate
        return out


def greedy_decode(verifier: VerifierSteps, prompt: list[int], max_new: int,
                  eos_ids: set[int], timer: Timer | None = None) -> list[int]:
    """Plain greedy decoding with a KV cache: the reference output and the baseline cost."""
    timer = timer or Timer(verifier.device)
    cache = verifier.new_cache()
    logits, _ = timer.run("prefill", verifier.forward, prompt, cache, False)
    out = [int(logits[-1].argmax())]
    while len(out) < max_new and out[-1] not in eos_ids:
        logits, _ = timer.run("plain", verifier.forward, [out[-1]], cache, False)
        out.append(int(logits[-1].argmax()))
    return out


@torch.no_grad()
def speculative_decode(verifier: VerifierSteps, drafter: Eagle3Drafter, prompt: list[int],
                       k: int, max_new: int, eos_ids: set[int], stats: DecodeStats,
                       timer: Timer | None = None) -> list[int]:
    """Greedy chain speculative decoding of one prompt; ``stats`` is updated in place."""
    timer = timer or Timer(verifier.device)
    device = verifier.device
    dtype = drafter.fc.weight.dtype
    vcache = verifier.new_cache()
    dcache = DrafterCache()

    logits, aux = timer.run("prefill", verifier.forward, prompt, vcache)
    out = [int(logits[-1].argmax())]
    seq = len(prompt)                 # rows the verifier has cached
    pend_aux = aux                    # verifier rows the drafter has not read yet
    pend_ids = [*prompt[1:], out[-1]]  # the token each of those rows reads (x_{i+1})
    pos0 = 0                          # position of the first pending row
    while len(out) < max_new and out[-1] not in eos_ids:
        n_draft = min(k, max_new - len(out) - 1)
        m = len(pend_ids)
        _sync(device)
        t_round = time.perf_counter()
        # The drafter reads the verifier's rows, then drafts one token per step (P-EAGLE:
        # all of them in that same forward, from mask rows).
        hidden = drafter.fc(pend_aux.to(dtype))[None]
        ids = torch.tensor([pend_ids], dtype=torch.long, device=device)
        masks = max(n_draft - 1, 0) if drafter.config.parallel else 0
        if masks:
            mask_ids, mask_hidden = drafter.mask_rows(1, masks)
            ids, hidden = torch.cat([ids, mask_ids], 1), torch.cat([hidden, mask_hidden], 1)
        positions = torch.arange(pos0, pos0 + m + masks, device=device)
        dlogits, pre = timer.run("draft", drafter.step, ids, hidden, positions, dcache)
        drafts: list[int] = []
        if drafter.config.parallel:
            best = dlogits[0, m - 1: m - 1 + n_draft].argmax(-1)
            drafts = [int(t) for t in drafter.draft_ids_to_target(best)]
        for j in range(0 if drafter.config.parallel else n_draft):
            if j:
                ids = torch.tensor([[drafts[-1]]], dtype=torch.long, device=device)
                positions = torch.tensor([pos0 + m - 1 + j], device=device)
                dlogits, pre = timer.run("draft", drafter.step, ids, pre, positions, dcache)
            best = dlogits[0, -1].argmax()
            drafts.append(int(drafter.draft_ids_to_target(best)))
            pre = pre[:, -1:]
        _sync(device)
        if drafts:
            timer.add("draft_round", time.perf_counter() - t_round)
        # The verifier checks [last token, drafts...] in one forward.
        kind = "verify" if drafts else "plain"
        logits, aux = timer.run(kind, verifier.forward, [out[-1], *drafts], vcache)
        greedy = logits.argmax(-1).tolist()
        a = 0
        while a < len(drafts) and drafts[a] == greedy[a]:
            a += 1
        new = [*drafts[:a], greedy[a]]
        if drafts:
            stats.drafts += 1
            stats.draft_tokens += len(drafts)
            stats.accepted += a
            for j in range(len(drafts)):
                stats.reaching_pos[j] += 1
                if j < a:
                    stats.accepted_per_pos[j] += 1
        verifier.crop(vcache, seq + a + 1)
        dcache.truncate(pos0 + m)
        seq += a + 1
        pos0 += m
        pend_aux = aux[: a + 1]
        pend_ids = new
        for t in new:
            out.append(t)
            if t in eos_ids or len(out) >= max_new:
                break
    return out


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (or the shorter length), None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
