"""Training-time test: the unrolled loss against the verifier, and per-position accuracy.

Alignment (row ``i`` of a sample of length ``n``): draft step ``k`` (0-based) at row ``i``
predicts token ``x_{i+2+k}``; the verifier's distribution for that token is its output at row
``i+1+k``, restricted to the draft vocab and renormalised. The row counts when ``x_{i+2+k}`` is
an assistant token (loss mask) and exists. Step ``k``'s loss is the mean over counted rows
of the cross-entropy ``-sum_v p_verifier(v) log q_draft(v)`` (the KL up to a constant), and
the total is ``sum_k decay**k * loss_k``.

:class:`SoftCrossEntropy` computes that loss in fp32 over row chunks and keeps only the
gradient (in the logits' dtype) for backward, rather than fp32 copies of the logits and their
log-softmax: the draft-vocab logits are the largest tensors of a step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.eagle3.model.drafter import Eagle3Drafter


def _soft_ce_chunk(logits: torch.Tensor, p: torch.Tensor, w: torch.Tensor):
    """(loss sum, d loss / d logits, argmax agreements) for rows of one chunk, in fp32."""
    lf = logits.float()
    logq = lf - torch.logsumexp(lf, dim=-1, keepdim=True)
    p = p.float()
    w = w.float()
    loss = -(w * (p * logq).sum(-1)).sum()
    grad = ((logq.exp() - p) * w[:, None]).to(logits.dtype)
    correct = (w * (lf.argmax(-1) == p.argmax(-1)).float()).sum()
    return loss, grad, correct


_chunk_fn = _soft_ce_chunk


def compile_loss(enabled: bool = True) -> None:
    """Fuse the chunk's elementwise passes into a few kernels with ``torch.compile`` (GPU):
    eager, the loss re-reads the [rows, draft_vocab] block about eight times."""
    global _chunk_fn
    _chunk_fn = torch.compile(_soft_ce_chunk, dynamic=True) if enabled else _soft_ce_chunk


class SoftCrossEntropy(torch.autograd.Function):
    """``sum(w * CE(p, softmax(logits)))`` and the count of rows where argmaxes agree.

    ``logits`` [B, L, D], ``target_p`` [B, L, D] (rows sum to 1; a strided view is fine),
    ``weights`` [B, L] float. Returns ``(loss_sum, correct)``; only the first has a gradient,
    computed in the forward pass (the loss ends the graph) and kept in the logits' dtype.
    """

    @staticmethod
    def forward(ctx, logits, target_p, weights, chunk: int = 4096):
        b, length, _ = logits.shape
        loss = torch.zeros((), dtype=torch.float32, device=logits.device)
        correct = torch.zeros((), dtype=torch.float32, device=logits.device)
        grad = torch.empty_like(logits)
        for bi in range(b):
            for r0 in range(0, length, chunk):
                r1 = min(length, r0 + chunk)
                l_c, g_c, c_c = _chunk_fn(logits[bi, r0:r1], target_p[bi, r0:r1],
                                          weights[bi, r0:r1])
                loss += l_c
                correct += c_c
                grad[bi, r0:r1] = g_c
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss.to(grad.dtype), None, None, None


def step_weights(loss_mask: torch.Tensor, k: int, rows: int) -> torch.Tensor:
    """[B, rows]: 1 where draft step ``k`` at row ``i`` predicts an existing assistant token."""
    padded = F.pad(loss_mask.float(), (0, k + 3))
    return padded[:, 2 + k: 2 + k + rows]


class TTTLoss(nn.Module):
    """Drafter + frozen target head -> total loss. A module so DDP can wrap it as a whole.

    ``target_head`` [D, Ht] are the verifier's lm_head rows for the draft ids; the verifier's
    restricted distribution is ``softmax(last @ target_head.T)``.
    """

    def __init__(self, drafter: Eagle3Drafter, target_head: torch.Tensor, steps: int,
                 decay: float = 0.8, attn_impl: str = "sdpa", chunk: int = 4096):
        super().__init__()
        self.drafter = drafter
        self.register_buffer("target_head", target_head, persistent=False)
        self.steps, self.decay, self.attn_impl, self.chunk = steps, decay, attn_impl, chunk

    def forward(self, aux: torch.Tensor, last: torch.Tensor, input_ids: torch.Tensor,
                loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(total_loss, correct[steps], counted[steps])`` (agreement with the verifier's
        argmax inside the draft vocab, as cheap training-time accuracy)."""
        s = aux.shape[1]
        with torch.no_grad():
            target_logits = F.linear(last.to(self.target_head.dtype), self.target_head)
            target_p = torch.softmax(target_logits.float(), dim=-1)
        outs = self.drafter(aux, input_ids, self.steps, self.attn_impl)
        total = aux.new_zeros((), dtype=torch.float32)
        correct, counted = [], []
        for k, normed in enumerate(outs):
            rows = s - 2 - k
            if rows <= 0:
                zero = aux.new_zeros((), dtype=torch.float32)
                correct.append(zero)
                counted.append(zero)
                continue
            w = step_weights(loss_mask, k, rows)
            logits = self.drafter.logits(normed[:, :rows])
            loss_sum, right = SoftCrossEntropy.apply(
                logits, target_p[:, 1 + k: 1 + k + rows], w, self.chunk)
            n = w.sum()
            total = total + (self.decay ** k) * loss_sum / n.clamp(min=1.0)
            correct.append(right)
            counted.append(n)
        return total, torch.stack(correct), torch.stack(counted)


@torch.no_grad()
def position_accuracy(drafter: Eagle3Drafter, verifier_head: torch.Tensor, aux: torch.Tensor,
                      last: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor,
                      steps: int, attn_impl: str = "sdpa",
                      chunk: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position ``(correct[steps], counted[steps])`` against the verifier's full argmax.

    Position ``k+1`` counts the rows where the drafter's greedy token, mapped through ``d2t``,
    equals the verifier's own greedy token at that place: the acceptance rate of greedy
    drafting at that position given the earlier drafts were accepted (teacher forcing).
    """
    b, s, _ = last.shape
    flat = last.reshape(-1, last.shape[-1])
    verifier_top = torch.cat([F.linear(flat[i:i + chunk].to(verifier_head.dtype),
                                       verifier_head).argmax(-1)
                              for i in range(0, flat.shape[0], chunk)]).view(b, s)
    outs = drafter(aux, input_ids, steps, attn_impl)
    correct = torch.zeros(steps, device=aux.device)
    counted = torch.zeros(steps, device=aux.device)
    for k, normed in enumerate(outs):
        rows = s - 2 - k
        if rows <= 0:
            continue
        w = step_weights(loss_mask, k, rows)
        draft_top = drafter.draft_ids_to_target(drafter.logits(normed[:, :rows]).argmax(-1))
        hit = (draft_top == verifier_top[:, 1 + k: 1 + k + rows]).float()
        correct[k] = (hit * w).sum()
        counted[k] = w.sum()
    return correct, counted


def acceptance_length(acc: list[float]) -> float:
    """Expected tokens per verifier step under greedy chain drafting: 1 + sum of the products
    of per-position conditional acceptance rates."""
    total, run = 1.0, 1.0
    for a in acc:
        run *= a
        total += run
    return total


def summarize(correct: Any, counted: Any) -> list[float]:
    return [float(c) / float(n) if float(n) else 0.0 for c, n in zip(correct, counted, strict=True)]
