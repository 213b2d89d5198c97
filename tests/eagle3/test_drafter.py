"""The drafter: TTT attention, its equivalence with KV-cache inference, and the loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipeline.eagle3.model.drafter import DrafterCache, DrafterConfig, Eagle3Drafter, ttt_mask
from pipeline.eagle3.training.ttt import SoftCrossEntropy, TTTLoss, step_weights

pytestmark = pytest.mark.ml


def tiny_drafter(dtype=torch.float64, seed=0, **over) -> Eagle3Drafter:
    torch.manual_seed(seed)
    cfg = DrafterConfig(**{**dict(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=60, draft_vocab_size=24, target_hidden_size=32,
        aux_layer_ids=[2, 3, 4], target_num_layers=7), **over})
    model = Eagle3Drafter(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        ids = torch.sort(torch.randperm(60)[:24]).values
        model.d2t.copy_(ids - torch.arange(24))
        model.t2d.zero_()
        model.t2d[ids] = True
    return model.to(dtype)


def test_ttt_mask_shape():
    mask = ttt_mask(3, 2, torch.device("cpu")).int()
    assert mask.tolist() == [[1, 0, 0, 1, 0, 0, 1, 0, 0],
                             [1, 1, 0, 0, 1, 0, 0, 1, 0],
                             [1, 1, 1, 0, 0, 1, 0, 0, 1]]


@pytest.mark.parametrize("norm_before_residual", [False, True])
def test_attention_implementations_agree(norm_before_residual):
    model = tiny_drafter(norm_before_residual=norm_before_residual)
    aux = torch.randn(2, 11, 96, dtype=torch.float64)
    ids = torch.randint(0, 60, (2, 11))
    math = model.ttt_forward(aux, ids, 5, "math")
    sdpa = model.ttt_forward(aux, ids, 5, "sdpa")
    for a, b in zip(math, sdpa, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_unrolled_steps_equal_kv_cache_inference():
    """Step k of training at row n is what inference computes for the k-th draft token after
    position n: same logits, through a real KV cache, feeding back the prenorm state."""
    model = tiny_drafter()
    s, steps, n = 10, 4, 5  # n + steps < s: every token the steps read is inside the row
    aux = torch.randn(1, s, 96, dtype=torch.float64)
    ids = torch.randint(0, 60, (1, s + steps + 1))
    with torch.no_grad():
        unrolled = [model.logits(o) for o in model.ttt_forward(aux, ids[:, :s], steps)]
        cache = DrafterCache()
        logits, prenorm = model.step(ids[:, 1:n + 2], model.fc(aux[:, :n + 1]),
                                     torch.arange(n + 1), cache)
        torch.testing.assert_close(logits[:, n], unrolled[0][:, n], rtol=1e-12, atol=1e-12)
        hidden = prenorm[:, n:n + 1]
        for k in range(1, steps):
            logits, hidden = model.step(ids[:, n + 1 + k: n + 2 + k], hidden,
                                        torch.tensor([n + k]), cache)
            torch.testing.assert_close(logits[:, 0], unrolled[k][:, n], rtol=1e-12, atol=1e-12)
        assert cache.length == n + steps
        cache.truncate(n + 1)
        assert cache.length == n + 1


@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_parallel_depths_equal_one_kv_cache_forward_with_mask_rows(impl):
    """P-EAGLE: depth k of training at row n is what vLLM's parallel drafting computes for
    draft k+1 after position n: one forward over the verified rows and k mask rows (the
    mask token, fc(mask_hidden)) at the next positions, against the same cache."""
    model = tiny_drafter(method="peagle", mask_token_id=7)
    s, steps, n = 10, 4, 5
    aux = torch.randn(1, s, 96, dtype=torch.float64)
    ids = torch.randint(0, 60, (1, s + 1))
    with torch.no_grad():
        depths = [model.logits(o) for o in model.ttt_forward(aux, ids[:, :s], steps, impl)]
        cache = DrafterCache()
        mask_ids, mask_hidden = model.mask_rows(1, steps - 1)
        assert mask_ids.tolist() == [[7] * (steps - 1)]
        logits, _ = model.step(torch.cat([ids[:, 1:n + 2], mask_ids], 1),
                               torch.cat([model.fc(aux[:, :n + 1]), mask_hidden], 1),
                               torch.arange(n + steps), cache)
        for k in range(steps):
            torch.testing.assert_close(logits[:, n + k], depths[k][:, n], rtol=1e-12,
                                       atol=1e-12)
        # the mask rows are not the tokens: another mask_hidden changes depths 2.., not 1
        model.mask_hidden.add_(1.0)
        moved = [model.logits(o) for o in model.ttt_forward(aux, ids[:, :s], steps, impl)]
    torch.testing.assert_close(moved[0], depths[0], rtol=0, atol=0)
    assert not torch.allclose(moved[1], depths[1])


def test_parallel_training_learns_mask_hidden_and_keeps_embeddings_frozen():
    model = tiny_drafter(dtype=torch.float32, seed=3, method="peagle", mask_token_id=7)
    assert any(p is model.mask_hidden for p in model.trainable_parameters())
    loss_fn = TTTLoss(model, torch.randn(24, 32), steps=3, decay=1.0)
    torch.manual_seed(4)
    batch = (torch.randn(4, 16, 96), torch.randn(4, 16, 32), torch.randint(0, 60, (4, 16)),
             torch.ones(4, 16, dtype=torch.uint8))
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=3e-3)
    before, embed = model.mask_hidden.detach().clone(), model.embed_tokens.weight.clone()
    losses = []
    for _ in range(40):
        loss, _correct, counted = loss_fn(*batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    assert counted.tolist() == [4 * 14, 4 * 13, 4 * 12]
    assert not torch.equal(model.mask_hidden, before)
    assert torch.equal(model.embed_tokens.weight, embed)


def test_a_parallel_drafter_needs_a_mask_token():
    from pipeline.errors import ActionError

    with pytest.raises(ActionError, match=r"mask_token_id in 0\.\.59, got 60"):
        tiny_drafter(method="peagle", mask_token_id=60)


def test_soft_cross_entropy_matches_autograd_reference():
    torch.manual_seed(1)
    logits = torch.randn(2, 7, 24, dtype=torch.float64, requires_grad=True)
    target = torch.softmax(torch.randn(2, 9, 24, dtype=torch.float64), -1)[:, 1:8]  # a view
    w = (torch.rand(2, 7) > 0.3).double()
    loss, correct = SoftCrossEntropy.apply(logits, target, w, 3)
    ref = (F.cross_entropy(logits.transpose(1, 2), target.transpose(1, 2),
                           reduction="none") * w).sum()
    torch.testing.assert_close(loss.double(), ref, rtol=1e-6, atol=1e-6)
    assert correct == (w * (logits.argmax(-1) == target.argmax(-1))).sum()
    loss.backward()
    grad = logits.grad.clone()
    logits.grad = None
    ref.backward()
    torch.testing.assert_close(grad, logits.grad, rtol=1e-6, atol=1e-6)


def test_step_weights_alignment():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0]], dtype=torch.uint8)  # assistant tokens 2..4
    # step 0, row i predicts token i+2: rows 0..2 count
    assert step_weights(mask, 0, 5).tolist() == [[1, 1, 1, 0, 0]]
    # step 2, row i predicts token i+4: row 0 counts (token 4); rows past the end never
    assert step_weights(mask, 2, 3).tolist() == [[1, 0, 0]]


def test_ttt_loss_decreases_on_a_fixed_batch():
    model = tiny_drafter(dtype=torch.float32, seed=3)
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 1.0)
    target_head = torch.randn(24, 32)
    loss_fn = TTTLoss(model, target_head, steps=3)
    torch.manual_seed(4)
    aux, last = torch.randn(4, 16, 96), torch.randn(4, 16, 32)
    ids = torch.randint(0, 60, (4, 16))
    mask = torch.ones(4, 16, dtype=torch.uint8)
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=3e-3)
    frozen = model.lm_head.weight.clone(), model.embed_tokens.weight.clone()
    losses = []
    for _ in range(60):
        loss, correct, counted = loss_fn(aux, last, ids, mask)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]
    assert counted.tolist() == [4 * 14, 4 * 13, 4 * 12]
    assert correct[0] / counted[0] > 0.5
    # frozen really means frozen
    assert torch.equal(model.lm_head.weight, frozen[0])
    assert torch.equal(model.embed_tokens.weight, frozen[1])


@pytest.mark.slow
def test_compiled_blocks_match_eager_and_do_not_recompile_per_length():
    """The GPU option --compile-blocks, checked where a C compiler exists (inductor's CPU
    backend): same loss and gradients, and batches of new lengths reuse the compiled code."""
    import shutil

    from torch._dynamo.utils import counters

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for torch.compile's CPU backend")
    eager = tiny_drafter(dtype=torch.float32, seed=5)
    compiled = tiny_drafter(dtype=torch.float32, seed=5)
    compiled.compile_blocks()
    head = torch.randn(24, 32)
    shapes = [(2, 12), (3, 20), (2, 29), (4, 17)]
    graphs = []
    for b, s in shapes:
        torch.manual_seed(s)
        batch = (torch.randn(b, s, 96), torch.randn(b, s, 32), torch.randint(0, 60, (b, s)),
                 torch.ones(b, s, dtype=torch.uint8))
        losses = []
        for model in (eager, compiled):
            model.zero_grad()
            loss = TTTLoss(model, head, steps=3)(*batch)[0]
            loss.backward()
            losses.append((loss.detach(), model.fc.weight.grad.clone()))
        torch.testing.assert_close(losses[0][0], losses[1][0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(losses[0][1], losses[1][1], rtol=1e-4, atol=1e-5)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[-1] == graphs[0], graphs  # no recompilation for new lengths
