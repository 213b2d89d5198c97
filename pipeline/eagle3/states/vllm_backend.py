"""``hidden_states --backend vllm``: the verifier's states from vLLM's own extraction.

For checkpoints transformers cannot hold (FP8/INT4 as shipped, a verifier that needs tensor
parallelism in the engine's kernels), the verifier runs inside vLLM with its speculative
method ``extract_hidden_states`` and the ``ExampleHiddenStatesConnector``: every prompt is
prefilled once (``max_tokens=1``), the engine stacks the chosen layers' states in a
cache-only KV layer and the connector writes them to one safetensors file per request
(``hidden_states`` ``[T, n_ids, H]``, ``token_ids`` ``[T]``). vLLM itself is not changed.

This module reads those files and writes the shards of :mod:`pipeline.eagle3.states.shards` exactly as the ``hf``
backend does (the same order of samples, tensors, metadata and index), through the same
writer (:mod:`pipeline.eagle3.states.shard_writer`), so ``train`` cannot tell the two apart and the stage says
when the disk is the bottleneck in the same words.

Layer ids (:func:`engine_layer_ids`, :func:`hf_states`): vLLM's aux id ``k`` for ``k < N``
is ``hidden_states + residual`` before decoder layer ``k`` runs: the input of layer ``k``,
the tensor Hugging Face returns as ``output_hidden_states[k]``. They differ at ``N``: vLLM's
id ``N`` is the residual stream after the last layer *before* the final norm, Hugging Face's
``output_hidden_states[N]`` is after it. The shards' ``last`` is the final norm's output (the
input of ``lm_head``), so the engine is asked for the aux ids plus ``N`` and the final
RMSNorm (its weight read from the checkpoint, its eps from the config) is applied here.

The engine is driven through a small interface (:class:`Engine`: ``states(prompts)`` and
``close()``); :class:`VllmEngine` is the real one and imports vLLM lazily, so the stage code
runs on images without it, and the tests drive the same logic with a stand-in built on the
Hugging Face model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from pipeline.eagle3.common import Progress, dtype_name, log
from pipeline.eagle3.states.shard_writer import WritePipeline
from pipeline.errors import ActionError, exc_line
from pipeline.vllm.model_files import text_config

__all__ = ["Engine", "FinalNorm", "VllmEngine", "engine_layer_ids", "extract_with_engine",
           "hf_states", "open_engine"]

# Architectures whose final norm is not ``weight * x / rms(x)`` (Gemma's is ``(1 + weight)``):
# ``last`` would be wrong, so they are refused rather than converted.
_OTHER_NORMS = ("gemma",)
_NORM_KEYS = ("model.norm.weight", "language_model.model.norm.weight",
              "model.language_model.norm.weight")


def engine_layer_ids(aux_layers: list[int], num_layers: int) -> list[int]:
    """The ids vLLM is asked for: the aux ids (ascending, as :func:`pipeline.eagle3.common.choose_aux_layers`
    leaves them) and ``num_layers``, the pre-norm final state ``last`` is made from."""
    if list(aux_layers) != sorted(set(aux_layers)) or not all(
            0 <= k < num_layers for k in aux_layers):
        raise ValueError(f"aux layers {aux_layers} must be ascending ids in 0..{num_layers - 1}")
    return [*aux_layers, num_layers]


class FinalNorm:
    """The verifier's final RMSNorm, as Hugging Face computes it: normalise in fp32, cast
    back, multiply by the weight."""

    def __init__(self, weight: Any, eps: float):
        self.weight, self.eps = weight, float(eps)

    def to(self, device: Any) -> FinalNorm:
        return FinalNorm(self.weight.to(device), self.eps)

    def __call__(self, x: Any) -> Any:
        import torch

        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight.to(device=x.device, dtype=x.dtype) * y.to(x.dtype)

    @classmethod
    def of(cls, verifier: Path, vcfg: dict[str, Any]) -> FinalNorm:
        """Read the final norm's weight from the checkpoint (norms stay unquantized in FP8 and
        INT4 checkpoints) and its eps from the config."""
        from pipeline.eagle3.model.checkpoint_files import WeightSet, weight_files

        text = text_config(vcfg)
        model_type = str(text.get("model_type", vcfg.get("model_type", "")))
        where = str(Path(verifier) / "config.json")
        if model_type.startswith(_OTHER_NORMS):
            raise ActionError(f"--backend vllm does not support {model_type!r}: its final norm "
                              "is not a plain RMSNorm, so 'last' cannot be made from vLLM's "
                              "pre-norm state", where=where, hint="use --backend hf")
        eps = text.get("rms_norm_eps", vcfg.get("rms_norm_eps"))
        if not isinstance(eps, (int, float)):
            raise ActionError("config.json has no rms_norm_eps (the final norm's eps)",
                              where=where)
        with WeightSet.open(weight_files(Path(verifier))) as ws:
            key = next((k for k in _NORM_KEYS if k in ws), None)
            if key is None:
                raise ActionError(f"no final norm weight ({', '.join(_NORM_KEYS)}) in the "
                                  "checkpoint", where=str(verifier))
            weight = ws.get(key)
        if weight.shape != (int(text.get("hidden_size", vcfg["hidden_size"])),):
            raise ActionError(f"{key} has shape {list(weight.shape)}, not [hidden_size]",
                              where=str(verifier))
        return cls(weight, eps)


def hf_states(states: Any, ids: list[int], num_layers: int,
              norm: FinalNorm) -> tuple[Any, Any]:
    """Convert one prompt's engine states ``[T, len(ids), H]`` (vLLM's ids, ascending) into
    the shards' ``aux`` ``[T, 3H]`` (HF ``output_hidden_states[k]`` for each aux id, in
    order) and ``last`` ``[T, H]`` (the final norm's output)."""
    if states.dim() != 3 or states.shape[1] != len(ids) or ids[-1] != num_layers:
        raise ValueError(f"engine states of shape {list(states.shape)} for ids {ids}")
    aux = states[:, :-1, :].reshape(states.shape[0], -1)
    last = norm(states[:, -1, :])
    return aux, last


class Engine(Protocol):
    """What the backend drives: one call per group of prompts, states in prompt order."""

    def states(self, prompts: list[list[int]]) -> list[Any]:
        """For each prompt (token ids), its states ``[len(prompt), len(ids), H]``."""
        ...

    def close(self) -> None: ...


def scratch_dir(out: Path, given: Path | None, need_bytes: int) -> tuple[Path, bool]:
    """Where the connector writes its per-request files: ``given``, else a fresh directory in
    /dev/shm (memory, so the states touch the disk once, in the shards) when it has room for
    ``need_bytes`` twice over, else one beside the shards. Returns ``(dir, made_here)``."""
    if given is not None:
        Path(given).mkdir(parents=True, exist_ok=True)
        return Path(given), False
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * need_bytes:
        return Path(tempfile.mkdtemp(prefix="eagle3-hs-", dir=shm)), True
    Path(out).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".engine-", dir=out)), True


class VllmEngine:
    """vLLM's ``LLM`` with ``extract_hidden_states`` and the hidden-states connector."""

    def __init__(self, verifier: Path, ids: list[int], *, tensor_parallel_size: int,
                 dtype: str, max_model_len: int, scratch: Path,
                 gpu_memory_utilization: float, enforce_eager: bool,
                 trust_remote_code: bool, engine_args: dict[str, Any]):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise ActionError(f"--backend vllm needs vLLM ({exc})",
                              hint="pip install 'todo-harness[serve]' on the GPU host") from None
        self.scratch = Path(scratch)
        has_tokenizer = any((Path(verifier) / f).is_file()
                            for f in ("tokenizer.json", "tokenizer_config.json"))
        kwargs: dict[str, Any] = dict(
            model=str(verifier), tensor_parallel_size=tensor_parallel_size, dtype=dtype,
            max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager, trust_remote_code=trust_remote_code,
            # token ids go in; a tokenizer that needs remote code is never loaded
            skip_tokenizer_init=not has_tokenizer,
            # a cached prefix is not recomputed, so its states would not be captured again
            enable_prefix_caching=False,
            speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                "draft_model_config": {"hf_config": {
                                    "eagle_aux_hidden_state_layer_ids": list(ids)}}},
            kv_transfer_config={"kv_connector": "ExampleHiddenStatesConnector",
                                "kv_role": "kv_producer",
                                "kv_connector_extra_config": {
                                    "shared_storage_path": str(self.scratch)}})
        kwargs.update(engine_args)
        try:
            self.llm = LLM(**kwargs)
        except (ValueError, RuntimeError, OSError, NotImplementedError) as exc:
            raise ActionError(f"vLLM cannot start the verifier ({exc_line(exc)})",
                              where=str(verifier)) from None
        self.params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)

    def states(self, prompts: list[list[int]]) -> list[Any]:
        import torch
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
            cleanup_hidden_states,
            load_hidden_states,
        )

        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], self.params,
                                 use_tqdm=False)
        states = []
        for prompt, out in zip(prompts, outs, strict=True):
            path = (out.kv_transfer_params or {}).get("hidden_states_path")
            if not path:
                raise ActionError("vLLM returned no hidden_states_path (is the connector "
                                  "configured?)")
            data = load_hidden_states(path)  # waits for the connector's write (a file lock)
            cleanup_hidden_states(path)
            got = data["token_ids"].to(torch.long)
            if got.numel() != len(prompt) or not torch.equal(got, torch.tensor(prompt)):
                raise ActionError(f"vLLM's hidden states are for other token ids "
                                  f"({got.numel()} ids for a prompt of {len(prompt)})")
            hs = data["hidden_states"]
            if not bool(hs.abs().amax() > 0):
                # the drafter step did not run for this prompt (nothing was captured)
                raise ActionError(f"vLLM captured no hidden states for a prompt of "
                                  f"{len(prompt)} tokens (all zeros)")
            states.append(hs)
        return states

    def close(self) -> None:
        # the engine core runs in its own process; stop it rather than leave it to exit
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and callable(getattr(core, "shutdown", None)):
            core.shutdown()


def open_engine(verifier: Path, ids: list[int], **kwargs: Any) -> Engine:
    """The engine the stage drives (tests replace this with a stand-in)."""
    return VllmEngine(verifier, ids, **kwargs)


def engine_groups(order: list[int], lengths: dict[int, int], batch_tokens: int,
                  max_prompts: int) -> list[list[int]]:
    """Consecutive samples of ``order`` per engine call, at most ``batch_tokens`` prompt
    tokens (the engine packs them itself: no padding) and ``max_prompts`` prompts."""
    groups: list[list[int]] = []
    cur: list[int] = []
    acc = 0
    for i in order:
        if cur and (acc + lengths[i] > batch_tokens or len(cur) >= max_prompts):
            groups.append(cur)
            cur, acc = [], 0
        cur.append(i)
        acc += lengths[i]
    if cur:
        groups.append(cur)
    return groups


def extract_with_engine(engine: Engine, tokens: dict[str, Any], plan: list[tuple[int, int]],
                        todo: list[int], aux_layers: list[int], num_layers: int,
                        hidden: int, norm: FinalNorm, out: Path, digest: str, save_dtype: Any,
                        args: Any, on_shard, device: Any) -> dict[str, Any]:
    """The ``todo`` shards of ``plan`` through ``engine``, written as the ``hf`` backend
    writes them: the same sample order in each shard (longest first, as
    :func:`pipeline.eagle3.states.extraction.plan_batches` orders them), the same tensors and metadata.

    Per engine call: the prompts' states come back on the host, go to ``device`` for the id
    conversion and the final norm, and into a free buffer of the write pipeline, whose
    background thread writes them while the next call runs. The forward waiting for a free
    buffer is the disk being the bottleneck, as in the ``hf`` backend.
    """
    import torch

    from pipeline.eagle3.states.extraction import (
        open_shard,
        plan_batches,
        shard_series,
        write_report,
    )

    ids = engine_layer_ids(aux_layers, num_layers)
    offsets, input_ids = tokens["offsets"], tokens["input_ids"]
    cap = args.batch_tokens
    method = getattr(args, "write_method", "pwrite")
    n_bufs = max(2, int(getattr(args, "write_buffers", 4)))
    pin = device.type == "cuda"
    pipeline = WritePipeline([
        (torch.empty(cap, 3 * hidden, dtype=save_dtype, pin_memory=pin),
         torch.empty(cap, hidden, dtype=save_dtype, pin_memory=pin)) for _ in range(n_bufs)])
    total = sum(int(offsets[plan[i][1]] - offsets[plan[i][0]]) for i in todo)
    progress = Progress("hidden_states", total=sum(plan[i][1] - plan[i][0] for i in todo))
    engine_seconds = 0.0
    try:
        for shard in todo:
            s, e = plan[shard]
            lengths = {i: int(offsets[i + 1] - offsets[i]) for i in range(s, e)}
            if max(lengths.values()) > cap:
                raise ActionError(f"a sample of {max(lengths.values())} tokens exceeds "
                                  f"--batch-tokens {cap}", where=str(tokens["path"]))
            order = [s + j for batch in plan_batches([lengths[i] for i in range(s, e)], cap,
                                                     args.max_batch_size) for j in batch]
            writer = open_shard(out, shard, (s, e), order, tokens, digest=digest,
                                aux_layers=aux_layers, hidden=hidden, save_dtype=save_dtype,
                                method=method, stats=pipeline.stats)
            cursor = 0
            for group in engine_groups(order, lengths, cap, args.max_batch_size):
                prompts = [input_ids[offsets[i]:offsets[i + 1]].tolist() for i in group]
                t0 = time.perf_counter()
                got = engine.states(prompts)
                engine_seconds += time.perf_counter() - t0
                t = sum(len(p) for p in prompts)
                aux_buf, last_buf = pipeline.buffer()
                row = 0
                for states in got:
                    aux, last = hf_states(states.to(device, non_blocking=pin), ids, num_layers,
                                          norm)
                    if not (torch.isfinite(aux).all() and torch.isfinite(last).all()):
                        raise ActionError(f"NaN or Inf in the verifier's hidden states for "
                                          f"samples {s}..{e - 1}", where=str(args.verifier))
                    n = aux.shape[0]
                    aux_buf[row:row + n].copy_(aux.to(save_dtype))
                    last_buf[row:row + n].copy_(last.to(save_dtype))
                    row += n
                if row != t:
                    raise ActionError(f"the engine returned {row} rows for {t} prompt tokens")
                pipeline.rows(writer, cursor, t, (aux_buf, last_buf))
                cursor += t
                progress.update(len(group), t)

            def finish(writer=writer, shard=shard, n=e - s):
                on_shard(shard)
                log(f"[hidden_states] wrote {writer.path.name} ({n} samples)")
                shard_series(shard + 1, progress, pipeline.stats.bytes)

            pipeline.finish(writer, finish)
    finally:
        pipeline.close()
    elapsed = progress.elapsed
    log(progress.line())
    stats: dict[str, Any] = {"tokens_per_s": round(total / elapsed, 1) if elapsed else None,
                             "extract_seconds": round(elapsed, 2),
                             "engine_seconds": round(engine_seconds, 2),
                             "backend": "vllm", "engine_dtype": dtype_name(save_dtype)}
    stats.update(write_report(pipeline, elapsed, method))
    return stats


PLACEMENT_FLAGS = ("device_map", "max_memory", "offload_folder", "tp_plan")


def check_args(args: Any) -> None:
    """Flags of the ``hf`` backend's placement mean nothing to vLLM (it places the weights
    itself, over ``--tensor-parallel-size`` GPUs): refused, not ignored."""
    given = [f"--{k.replace('_', '-')}" for k in PLACEMENT_FLAGS
             if getattr(args, k, None) is not None]
    if given:
        raise ActionError(f"{', '.join(given)} place the verifier for --backend hf; vLLM "
                          "places it itself", hint="use --tensor-parallel-size with "
                                                   "--backend vllm")
    if args.tensor_parallel_size < 1:
        raise ActionError(f"--tensor-parallel-size must be at least 1, got "
                          f"{args.tensor_parallel_size}")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ActionError(f"--gpu-memory-utilization must be in (0, 1], got "
                          f"{args.gpu_memory_utilization}")
    if args.engine_args is not None and not isinstance(args.engine_args, dict):
        raise ActionError(f"--engine-args must be a JSON object, got {args.engine_args!r}")


def stored_bytes(verifier: Path) -> int:
    from pipeline.eagle3.model.checkpoint_files import weight_files

    return sum(f.stat().st_size for f in weight_files(Path(verifier)))


def run_engine(verifier: Path, vcfg: dict[str, Any], tokens: dict[str, Any],
               plan: list[tuple[int, int]], todo: list[int], aux_layers: list[int],
               out: Path, digest: str, dtype: Any, save_dtype: Any, args: Any, on_shard,
               device: Any, longest: int) -> dict[str, Any]:
    """Start the engine, extract the ``todo`` shards, stop it; the stage's metrics."""
    n_layers, hidden = int(vcfg["num_hidden_layers"]), int(vcfg["hidden_size"])
    max_pos = vcfg.get("max_position_embeddings")
    if isinstance(max_pos, int) and longest >= max_pos:
        raise ActionError(f"a sample of {longest} tokens does not fit the verifier's "
                          f"max_position_embeddings {max_pos} (vLLM's max_model_len)",
                          where=str(tokens["path"]))
    # the drafter step (which captures the states) runs only while prompt + 1 fits
    max_len = min(max_pos, longest + 16) if isinstance(max_pos, int) else longest + 16
    norm = FinalNorm.of(verifier, vcfg)
    ids = engine_layer_ids(aux_layers, n_layers)
    tp = args.tensor_parallel_size
    weights = stored_bytes(verifier)
    log(f"[hidden_states] vLLM: weights as stored {weights / 2**30:.2f} GiB "
        f"({weights / tp / 2**30:.2f} GiB per GPU over {tp}); engine ids {ids} "
        f"(aux {aux_layers} + {n_layers}: the pre-norm final state)")
    per_call = args.batch_tokens * len(ids) * hidden * save_dtype.itemsize
    scratch, made = scratch_dir(out, args.engine_scratch, per_call)
    t0 = time.perf_counter()
    engine = None
    try:
        engine = open_engine(verifier, ids, tensor_parallel_size=tp, dtype=dtype_name(dtype),
                             max_model_len=max_len, scratch=scratch,
                             gpu_memory_utilization=args.gpu_memory_utilization,
                             enforce_eager=args.enforce_eager,
                             trust_remote_code=args.trust_remote_code,
                             engine_args=dict(args.engine_args or {}))
        start = time.perf_counter() - t0
        log(f"[hidden_states] vLLM started in {start:.1f}s")
        stats = extract_with_engine(engine, tokens, plan, todo, aux_layers, n_layers, hidden,
                                    norm.to(device), out, digest, save_dtype, args, on_shard,
                                    device)
    finally:
        if engine is not None:
            engine.close()
        if made:
            shutil.rmtree(scratch, ignore_errors=True)
    stats.update(engine_start_seconds=round(start, 2), tensor_parallel_size=tp,
                 stored_weight_bytes=weights, engine_layer_ids=ids)
    return stats
