"""The EAGLE-3 drafter: model, config, training-time-test forward, KV-cache step, loading.

Layout, in vLLM's names (``llama_eagle3.py``) so a state dict exports as is::

    embed_tokens  [V, H]      the verifier's, frozen (not exported by default: vLLM shares it)
    fc            [H, 3*Ht]   fuses the three aux hidden states
    midlayer.*                one Llama decoder layer; q/k/v take 2H = [norm(embed), norm(hidden)]
      input_layernorm, hidden_norm, post_attention_layernorm,
      self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj
    norm          [H]
    lm_head       [D, H]      the verifier's lm_head rows for the draft ids, frozen
    d2t [D] int64, t2d [V] bool

One step (vLLM's order): ``residual = hidden`` (or the normed hidden with
``norm_before_residual``), attention over ``cat(input_layernorm(embed), hidden_norm(hidden))``,
add, post-attention norm, MLP, add = ``prenorm``; logits come from ``lm_head(norm(prenorm))``
and ``prenorm`` is the next step's hidden input.

Positions: the drafter's row ``i`` reads verifier state ``h_i`` and token ``x_{i+1}`` at
position ``i`` and predicts ``x_{i+2}``; its ``k``-th unrolled step at row ``i`` stands for the
draft token at position ``i + k``, as in vLLM, where step ``k`` attends to the step-0 keys of
rows ``<= i`` and to the keys of steps ``1..k`` at row ``i`` (:func:`ttt_attention`).
:meth:`Eagle3Drafter.step` is the same computation with a KV cache, for inference.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.eagle3.model.drafter_files import (
    DrafterConfig,
    load_safetensors,
    read_exported,
    verifier_heads,
)
from pipeline.errors import ActionError

__all__ = ["DrafterConfig", "Eagle3Drafter", "load_drafter", "verifier_heads", "verifier_matrix"]

ATTN_IMPLS = ("sdpa", "math", "flex")


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        # Stay in the input's dtype (fp32 master weights would otherwise promote a bf16
        # activation to fp32 and double the traffic of everything after it).
        return self.weight.to(dtype) * x32.to(dtype)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        h, hd = cfg.hidden_size, cfg.head_dim
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.q_proj = nn.Linear(2 * h, self.nh * hd, bias=False)
        self.k_proj = nn.Linear(2 * h, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * h, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, h, bias=False)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def out(self, o: torch.Tensor) -> torch.Tensor:
        b, _, s, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.norm_before_residual = cfg.norm_before_residual

    def pre(self, embeds: torch.Tensor, hidden: torch.Tensor):
        """(attention input [.., 2H], residual)."""
        if self.norm_before_residual:
            hidden = self.hidden_norm(hidden)
            residual = hidden
        else:
            residual = hidden
            hidden = self.hidden_norm(hidden)
        return torch.cat([self.input_layernorm(embeds), hidden], dim=-1), residual

    def post(self, attn_out: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = residual + attn_out
        return h + self.mlp(self.post_attention_layernorm(h))


def rope_cache(head_dim: int, theta: float, positions: torch.Tensor, dtype: torch.dtype):
    acc = torch.promote_types(dtype, torch.float32)
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                         dtype=acc) / head_dim))
    freqs = positions.to(acc)[..., None] * inv
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # cos/sin [S, hd] or [B, S, hd]; x [B, heads, S, hd]. Neox-style halves, as Llama uses.
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _expand_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                  impl: str = "sdpa") -> torch.Tensor:
    """Attention of the ``k``-th unrolled step (``k = len(keys) - 1``).

    Query row ``i`` sees ``keys[0]`` at rows ``<= i`` (causal) and ``keys[1..k]`` at row ``i``
    only (its own earlier draft steps). ``q`` [B, nh, S, hd]; keys/values [B, nkv, S, hd].
    """
    k_steps = len(keys) - 1
    groups = q.shape[1] // keys[0].shape[1]
    s = q.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    if k_steps == 0 and impl != "math":
        return F.scaled_dot_product_attention(q, _expand_kv(keys[0], groups),
                                              _expand_kv(values[0], groups), is_causal=True)
    if impl == "math":
        k0 = _expand_kv(keys[0], groups)
        v0 = _expand_kv(values[0], groups)
        scores = (q @ k0.transpose(-1, -2)) * scale
        causal = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        diag = [(q * _expand_kv(km, groups)).sum(-1, keepdim=True) * scale for km in keys[1:]]
        acc = torch.promote_types(q.dtype, torch.float32)
        probs = torch.softmax(torch.cat([scores, *diag], dim=-1).to(acc), dim=-1).to(q.dtype)
        out = probs[..., :s] @ v0
        for m, vm in enumerate(values[1:]):
            out = out + probs[..., s + m: s + m + 1] * _expand_kv(vm, groups)
        return out
    kcat = _expand_kv(torch.cat(keys, dim=2), groups)
    vcat = _expand_kv(torch.cat(values, dim=2), groups)
    if impl == "flex":
        return _flex_attention(q, kcat, vcat, s, k_steps)
    return F.scaled_dot_product_attention(q, kcat, vcat, attn_mask=ttt_mask(s, k_steps, q.device))


_MASKS: dict[tuple[int, int, str], torch.Tensor] = {}


def ttt_mask(s: int, k_steps: int, device: torch.device) -> torch.Tensor:
    key = (s, k_steps, str(device))
    if key not in _MASKS:
        i = torch.arange(s, device=device)[:, None]
        j = torch.arange(s * (k_steps + 1), device=device)[None, :]
        block, pos = j // s, j % s
        _MASKS[key] = ((block == 0) & (pos <= i)) | ((block > 0) & (pos == i))
    return _MASKS[key]


_FLEX: dict[tuple[int, int, str], Any] = {}
_flex_fn: Any = None


def _flex_attention(q, k, v, s: int, k_steps: int) -> torch.Tensor:
    """Block-sparse version of the same mask (GPU, compiled): fully masked tiles are skipped,
    so the diagonal blocks of earlier steps cost almost nothing."""
    global _flex_fn
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if _flex_fn is None:
        _flex_fn = torch.compile(flex_attention) if q.is_cuda else flex_attention
    key = (s, k_steps, str(q.device))
    if key not in _FLEX:
        def mask_mod(b, h, qi, kv):
            return ((kv < s) & (kv <= qi)) | ((kv >= s) & (kv % s == qi))
        _FLEX[key] = create_block_mask(mask_mod, None, None, s, s * (k_steps + 1),
                                       device=q.device)
    return _flex_fn(q, k, v, block_mask=_FLEX[key])


class Eagle3Drafter(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = MidLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.embed_tokens.weight.requires_grad_(False)
        self.lm_head.weight.requires_grad_(False)
        if cfg.parallel:
            if cfg.mask_token_id is None or not 0 <= cfg.mask_token_id < cfg.vocab_size:
                raise ActionError(f"a peagle drafter needs a mask_token_id in 0.."
                                  f"{cfg.vocab_size - 1}, got {cfg.mask_token_id}")
            # P-EAGLE's learned stand-in for the verifier's aux states at the rows not yet
            # drafted: vLLM's buffer of the same name, fed through fc like real states
            # (speculators' shape [1, 1, 3Ht]; vLLM views it as [1, 3Ht]). Small at first:
            # a unit-scale vector makes fc's output a large residual that swamps the mask
            # rows, and their depths stayed at chance longer (tiny verifier, 5 epochs:
            # held-out pos2 0.31 from randn, 0.55 from 0.02 * randn).
            self.mask_hidden = nn.Parameter(
                0.02 * torch.randn(1, 1, 3 * cfg.target_hidden_size))

    # -- setup ---------------------------------------------------------------------------
    def init_from_verifier(self, embed: torch.Tensor, lm_head: torch.Tensor, d2t: torch.Tensor,
                           t2d: torch.Tensor) -> None:
        """Copy the verifier's embeddings and its lm_head rows for the draft ids (frozen)."""
        with torch.no_grad():
            self.embed_tokens.weight.copy_(embed)
            draft_ids = torch.arange(d2t.numel()) + d2t
            self.lm_head.weight.copy_(lm_head[draft_ids])
            self.d2t.copy_(d2t)
            self.t2d.copy_(t2d)

    def compile_blocks(self) -> None:
        """``torch.compile`` the elementwise-heavy pieces of a step (norms, rotary, the SiLU
        gate, residual adds) so they fuse; matmuls still go to cuBLAS and attention to its
        kernels. For the GPU: eager, these small ops cost about as much as the matmuls.

        Compiled for dynamic shapes: batches of varying length must not recompile (static
        compiles per length stalled a run with variable-length batches on the H200)."""
        layer, attn = self.midlayer, self.midlayer.self_attn
        layer.pre = torch.compile(layer.pre, dynamic=True)
        layer.post = torch.compile(layer.post, dynamic=True)
        attn.qkv = torch.compile(attn.qkv, dynamic=True)
        self.norm.forward = torch.compile(self.norm.forward, dynamic=True)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def draft_ids_to_target(self, ids: torch.Tensor) -> torch.Tensor:
        return ids + self.d2t[ids]

    def mask_rows(self, batch: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """P-EAGLE's inputs at the rows it drafts in parallel: ``(ids [B, R], hidden
        [B, R, H])``, the mask token and ``fc(mask_hidden)``, as vLLM's proposer feeds them
        (``parallel_drafting_token_id`` and ``combine_hidden_states(mask_hidden)``)."""
        device = self.fc.weight.device
        ids = torch.full((batch, rows), int(self.config.mask_token_id), dtype=torch.long,
                         device=device)
        hidden = self.fc(self.mask_hidden.reshape(1, 1, -1).to(self.fc.weight.dtype))
        return ids, hidden.expand(batch, rows, -1)

    # -- training-time test ----------------------------------------------------------------
    def forward(self, aux: torch.Tensor, input_ids: torch.Tensor, steps: int,
                attn_impl: str = "sdpa") -> list[torch.Tensor]:
        return self.ttt_forward(aux, input_ids, steps, attn_impl)

    def ttt_forward(self, aux: torch.Tensor, input_ids: torch.Tensor, steps: int,
                    attn_impl: str = "sdpa") -> list[torch.Tensor]:
        """Normed outputs of ``steps`` unrolled draft steps, each [B, S, H].

        ``aux`` [B, S, 3Ht] are the verifier's aux states for tokens ``x_0..x_{S-1}``; step
        ``k`` at row ``i`` reads token ``x_{i+1+k}`` (0 past the end; such rows carry no loss).

        P-EAGLE (``config.parallel``): step 0 is the same; step ``k >= 1`` at row ``i`` is
        the parallel-drafting row at position ``i + k`` of the round whose last verified
        row is ``i``: it reads the mask token and ``fc(mask_hidden)`` in place of a token
        and a pre-norm output, and attends exactly as the unrolled step does (step-0 rows
        ``<= i`` and its own round's rows ``1..k``), which is what vLLM's one forward over
        ``[..., bonus row, k-1 mask rows]`` computes.
        """
        b, s = aux.shape[:2]
        layer = self.midlayer
        attn = layer.self_attn
        hidden = self.fc(aux.to(self.fc.weight.dtype))
        positions = torch.arange(s + steps, device=aux.device)
        cos_all, sin_all = rope_cache(attn.hd, self.config.rope_theta, positions, hidden.dtype)
        padded = F.pad(input_ids, (0, steps + 1))
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        outs = []
        for k in range(steps):
            if k and self.config.parallel:
                ids, hidden = self.mask_rows(b, s)
                embeds = self.embed_tokens(ids).to(hidden.dtype)
            else:
                embeds = self.embed_tokens(padded[:, 1 + k: 1 + k + s]).to(hidden.dtype)
            x, residual = layer.pre(embeds, hidden)
            q, kk, vv = attn.qkv(x, cos_all[k: k + s], sin_all[k: k + s])
            keys.append(kk)
            values.append(vv)
            o = ttt_attention(q, keys, values, attn_impl)
            prenorm = layer.post(attn.out(o), residual)
            outs.append(self.norm(prenorm))
            hidden = prenorm
        return outs

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        return self.lm_head(normed)

    # -- inference with a KV cache ----------------------------------------------------------
    def step(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
             cache: DrafterCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One drafter forward over new rows, appending to ``cache``.

        ``input_ids`` [B, L] (target ids), ``hidden`` [B, L, H] (``fc(aux)`` for rows backed by
        the verifier, the previous step's prenorm output for draft rows), ``positions`` [L]
        or [B, L]. New rows attend to every cached row and causally among themselves.
        Returns ``(draft_logits [B, L, D], prenorm [B, L, H])``.
        """
        layer, attn = self.midlayer, self.midlayer.self_attn
        embeds = self.embed_tokens(input_ids).to(hidden.dtype)
        x, residual = layer.pre(embeds, hidden)
        cos, sin = rope_cache(attn.hd, self.config.rope_theta, positions, hidden.dtype)
        q, k, v = attn.qkv(x, cos, sin)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.append(k, v)
        groups = attn.nh // attn.nkv
        new = q.shape[2]
        mask = torch.ones(new, past + new, dtype=torch.bool, device=q.device)
        mask[:, past:] = torch.ones(new, new, dtype=torch.bool, device=q.device).tril()
        o = F.scaled_dot_product_attention(q, _expand_kv(k, groups), _expand_kv(v, groups),
                                           attn_mask=mask)
        prenorm = layer.post(attn.out(o), residual)
        return self.lm_head(self.norm(prenorm)), prenorm


class DrafterCache:
    """Keys and values of every row the drafter has processed, [B, nkv, T, hd]."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def truncate(self, length: int) -> None:
        """Drop rows past ``length`` (rejected draft tokens)."""
        if self.k is not None:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


# -- files ---------------------------------------------------------------------------------
CHECKPOINT_CONFIG = "drafter_config.json"
CHECKPOINT_WEIGHTS = "model.safetensors"


def save_checkpoint_weights(model: Eagle3Drafter, directory: Path) -> None:
    """The training-side format: every tensor (embeddings too) plus ``drafter_config.json``."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    tmp = directory / f".{CHECKPOINT_WEIGHTS}.tmp"
    save_file(state, str(tmp), metadata={"format": "eagle3-drafter-checkpoint/1"})
    tmp.replace(directory / CHECKPOINT_WEIGHTS)
    (directory / CHECKPOINT_CONFIG).write_text(json.dumps(model.config.to_dict(), indent=2))


def load_drafter(path: Path, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype | None = None, embed_from: Path | None = None
                 ) -> Eagle3Drafter:
    """Load a drafter from a training checkpoint or an exported directory (either format).

    Exported directories usually omit ``embed_tokens`` (vLLM shares the verifier's); pass
    ``embed_from`` (the verifier directory) to fill it, else it stays zero. ``dtype`` None keeps
    the stored dtype of the weights.
    """
    path = Path(path)
    if (path / CHECKPOINT_CONFIG).is_file():
        cfg = DrafterConfig.from_dict(json.loads((path / CHECKPOINT_CONFIG).read_text()))
        state = load_safetensors(path / CHECKPOINT_WEIGHTS)
    elif (path / "config.json").is_file():
        cfg, state = read_exported(path)
    else:
        raise ActionError("not a drafter directory (no drafter_config.json or config.json)",
                          where=str(path))
    model = Eagle3Drafter(cfg)
    if "fc.weight" in state:
        # Parameters take the stored dtype first: load_state_dict copies *into* them.
        model.to(dtype=state["fc.weight"].dtype)
    if "embed_tokens.weight" not in state and embed_from is not None:
        state["embed_tokens.weight"] = verifier_matrix(Path(embed_from), "embed")
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise ActionError(f"drafter weights do not fit its config ({str(exc).splitlines()[-1]})",
                          where=str(path)) from None
    missing = [m for m in missing if m != "embed_tokens.weight"]
    if missing or unexpected:
        raise ActionError(f"drafter weights do not match its config (missing {missing}, "
                          f"unexpected {unexpected})", where=str(path))
    if dtype is not None:
        model.to(dtype=dtype)
    return model.to(device).eval()


def verifier_matrix(verifier: Path, which: str) -> torch.Tensor:
    """The verifier's input embedding (``embed``) or output head (``lm_head``) weight, read
    from its safetensors files without building the model."""
    from safetensors import safe_open

    files = sorted(Path(verifier).glob("*.safetensors"))
    if not files:
        raise ActionError("no *.safetensors weights in the verifier directory",
                          where=str(verifier))
    embed_keys = ("model.embed_tokens.weight", "embed_tokens.weight",
                  "model.language_model.embed_tokens.weight")
    head_keys = ("lm_head.weight",)
    wanted = embed_keys if which == "embed" else head_keys
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for key in wanted:
                if key in fh.keys():  # noqa: SIM118
                    return fh.get_tensor(key)
    cfg_path = Path(verifier) / "config.json"
    tied = cfg_path.is_file() and json.loads(cfg_path.read_text()).get("tie_word_embeddings")
    if which == "lm_head" and tied:  # the head is the embedding matrix
        return verifier_matrix(verifier, "embed")
    raise ActionError(f"no {which} weight found in the verifier's safetensors",
                      where=str(verifier))
