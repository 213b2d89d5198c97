"""A pipeline that builds its verifier, on paper: memory, disk and time of each stage.

``harness check`` prints this, with the campaign plan (:mod:`pipeline.eagle3.plan.campaign_plan`),
for a spec whose ``plan:`` section names no ``verifier_config``: the verifier is then the one
its ``eagle3.build_verifier`` stage builds, at the shape that stage's ``with:`` gives.

- **Training the verifier**: fp32 weights, gradients and AdamW's two moments (16 bytes a
  parameter), the bf16 copy autocast keeps of the weights, and the activations of one
  micro-batch (:func:`activation_bytes_per_position`), against the GPU's memory.
- **Servers started together**: every ``eagle3.serve`` stage on a host, counted as up at
  once. That is an upper bound: the runner stops a server once no stage still to run
  needs it, so a sweep's servers are gone before a later server starts. Each holds the
  verifier's bf16 weights (vLLM serves an fp32 checkpoint in bf16), its drafter's, its
  ``kv_cache_memory_bytes`` and :data:`SERVER_RUNTIME_BYTES`; vLLM also refuses to start
  unless its ``gpu_memory_utilization`` share of the GPU is free. A server counts the
  larger of the two, and the sum must fit the GPU. A transformers stage that runs while
  servers are up (in the runner's order) adds its weights to theirs.
- **Disk** of each stage's outputs, and **time**, an estimate: compute at
  :data:`ASSUMED_MFU` of the GPU's bf16 peak (:data:`BUILD_MFU` for building a verifier),
  or the weights read once per decoding step at its bandwidth plus
  :data:`EAGER_SECONDS_PER_LAYER` a layer, whichever is longer.

Standard library only: ``harness check`` runs where torch may not be installed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from pipeline.eagle3.hardware.gpu_peaks import GpuPeak, gpu_peak
from pipeline.eagle3.plan.disk_estimate import _size, estimates
from pipeline.errors import ActionError
from pipeline.vllm.server import byte_size

# Per server, beyond weights and KV cache: the activations of vLLM's profile run, its CUDA
# graphs and the CUDA context. An estimate, not measured at this size.
SERVER_RUNTIME_BYTES = 1_500_000_000
VLLM_UTILIZATION = 0.9       # vLLM's default gpu_memory_utilization
# The share of the bf16 peak a large matmul-bound step is assumed to reach; the drafter's
# training step reached 35-58% on an H200 (docs/PERFORMANCE.md, "EAGLE-3 stages on the GPU").
ASSUMED_MFU = 0.4
# Building a verifier in transformers (eager Llama, bf16 autocast over fp32 weights, fused
# AdamW, micro-batches of 16 rows) reached 18.5% on an H100 at 3.1B parameters
# (examples/eagle3-3b.yaml, 2026-12-07): its estimate uses that, not the drafter's share.
BUILD_MFU = 0.185
# A transformers decoding step costs at least this per layer in Python and kernel launches:
# the reference loop's plain step took 17.5 ms for the 18-layer verifier on an H200
# (docs/PERFORMANCE.md).
EAGER_SECONDS_PER_LAYER = 17.5e-3 / 18
# Positions a synthetic chat row takes once padded in its batch: rows averaged 62 tokens
# and batches of 64 padded them to 86 with the 2048-token tokenizer. An estimate for others.
ROW_POSITIONS = 96
THINK_TAGS = 2               # <think> and </think>, added to the BPE vocab
BUILD_DEFAULTS = dict(hidden_size=128, layers=7, heads=4, kv_heads=2, intermediate_size=384,
                      vocab_size=1024, steps=300, batch_size=32, arch="llama")
DRAFT_VOCAB = 32000          # eagle3.vocab's --draft-vocab default
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def built_config(spec: Any) -> tuple[dict[str, Any], Any]:
    """The config.json the spec's ``eagle3.build_verifier`` stage will write, and the stage."""
    st = next((s for s in spec.stages if s.action == "eagle3.build_verifier"), None)
    if st is None:
        raise ActionError("the plan names no verifier_config and no eagle3.build_verifier "
                          "stage builds one", where="plan")
    p = {**BUILD_DEFAULTS, **st.params}
    if p["arch"] not in ("llama", "qwen3"):
        raise ActionError(f"the plan counts built llama and qwen3 verifiers, not {p['arch']}",
                          where=f"stages ({st.name})")
    h, heads = int(p["hidden_size"]), int(p["heads"])
    cfg = {"model_type": p["arch"], "hidden_size": h, "num_hidden_layers": int(p["layers"]),
           "num_attention_heads": heads, "num_key_value_heads": int(p["kv_heads"]),
           "intermediate_size": int(p["intermediate_size"]),
           "vocab_size": int(p["vocab_size"]) + THINK_TAGS, "tie_word_embeddings": False}
    if p["arch"] == "qwen3":
        cfg["head_dim"] = max(8, 2 * h // heads)
    return cfg, st


def head_dim(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def drafter_params(cfg: dict[str, Any], draft_vocab: int) -> int:
    """An EAGLE-3 drafter for ``cfg`` as exported: fc 3H -> H, one layer whose attention
    reads 2H, the verifier's MLP width, three norms and the final one, lm_head over the
    draft vocab (the embeddings are the verifier's)."""
    h, hd = int(cfg["hidden_size"]), head_dim(cfg)
    q, kv = int(cfg["num_attention_heads"]) * hd, int(cfg["num_key_value_heads"]) * hd
    return (3 * h * h + 2 * h * (q + 2 * kv) + q * h + 3 * h * int(cfg["intermediate_size"])
            + 4 * h + draft_vocab * h)


def kv_bytes_per_token(cfg: dict[str, Any], layers: int | None = None) -> int:
    """K and V of every layer (or ``layers``) in bf16."""
    n = int(cfg["num_hidden_layers"]) if layers is None else layers
    return n * 2 * int(cfg["num_key_value_heads"]) * head_dim(cfg) * 2


def activation_bytes_per_position(cfg: dict[str, Any], *, autocast: bool,
                                  checkpointing: bool) -> int:
    """What the backward keeps per position of a Llama layer stack, with sdpa (no
    attention matrix): about 18 H + 8 MLP + 4 KV-width bytes a layer under bf16 autocast
    (the residual stream and norms in fp32, the matmul inputs and outputs in bf16), twice
    that without it; with checkpointing only each layer's fp32 input, plus one layer."""
    h, mlp = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    kv = int(cfg["num_key_value_heads"]) * head_dim(cfg)
    layer = (18 * h + 8 * mlp + 4 * kv) * (1 if autocast else 2)
    layers = int(cfg["num_hidden_layers"])
    return layers * 4 * h + layer if checkpointing else layers * layer


@dataclass
class TrainingNeed:
    stage: str
    state: int           # fp32 weights + gradients + AdamW moments
    autocast_copy: int   # bf16 weights autocast caches for the forward
    activations: int
    rows: int            # rows a forward takes (the micro-batch)
    capacity: int

    @property
    def total(self) -> int:
        return self.state + self.autocast_copy + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


@dataclass
class ServerNeed:
    stage: str
    weights: int
    kv: int | None       # kv_cache_memory_bytes (None: vLLM sizes it from its share)
    utilization: float
    capacity: int

    @property
    def own(self) -> int:
        """What the server holds: weights, KV cache and the runtime (its whole share
        when vLLM sizes the KV cache itself)."""
        if self.kv is None:
            return int(self.utilization * self.capacity)
        return self.weights + self.kv + SERVER_RUNTIME_BYTES

    @property
    def share(self) -> int:
        return int(self.utilization * self.capacity)

    @property
    def counted(self) -> int:
        return max(self.own, self.share)


@dataclass
class StageCost:
    stage: str
    seconds: float | None
    how: str
    disk: int | None
    disk_how: str
    limit: float | None   # the stage's timeout in seconds (None: no limit)

    @property
    def over_limit(self) -> bool:
        return self.seconds is not None and self.limit is not None and self.seconds > self.limit


@dataclass
class RunCosts:
    gpu: GpuPeak | None
    gpu_name: str | None
    capacity: int
    params: int
    weight_bytes: int                      # bf16
    training: TrainingNeed | None
    servers: list[ServerNeed] = field(default_factory=list)
    beside: list[tuple[str, int, int]] = field(default_factory=list)  # stage, own, servers'
    stages: list[StageCost] = field(default_factory=list)

    @property
    def servers_total(self) -> int:
        return sum(s.counted for s in self.servers)

    @property
    def servers_fit(self) -> bool:
        return self.servers_total <= self.capacity

    def lines(self) -> list[str]:
        cap = _size(self.capacity)
        peak = (f"{self.gpu.model}: {self.gpu.bf16_tflops:g} TFLOP/s bf16, "
                f"{self.gpu.hbm_tb_s:g} TB/s" if self.gpu else
                f"GPU {self.gpu_name or '(none named)'}: no peak known, no times")
        out = [f"plan: built verifier {self.params:,} params: {_size(self.weight_bytes)} in "
               f"bf16; {peak}"]
        t = self.training
        if t is not None:
            out.append(
                f"plan: {t.stage} training: weights, gradients and AdamW state "
                f"{_size(t.state)} (16 B a parameter) + autocast copy {_size(t.autocast_copy)}"
                f" + activations {_size(t.activations)} ({t.rows} rows a forward, estimate) = "
                f"{_size(t.total)} of {cap}: {'fits' if t.fits else 'DOES NOT FIT'}")
        if self.servers:
            kv = sum(s.kv or 0 for s in self.servers)
            util = sum(s.utilization for s in self.servers)
            out.append(
                f"plan: {len(self.servers)} servers started together: weights "
                f"{_size(sum(s.weights for s in self.servers))} + KV cache {_size(kv)} + "
                f"runtime {_size(SERVER_RUNTIME_BYTES * len(self.servers))} (estimate); "
                f"gpu_memory_utilization {util:.2f} in all; each counted at the larger of "
                f"what it holds and its share: {_size(self.servers_total)} of {cap}")
            if not self.servers_fit:
                out.append(f"plan: WARNING: the {len(self.servers)} servers started together "
                           f"need {_size(self.servers_total)}, more than the GPU's {cap}: "
                           f"lower kv_cache_memory_bytes or gpu_memory_utilization, or serve "
                           f"fewer at once")
        for stage, own, servers in self.beside:
            if own + servers > self.capacity:
                out.append(f"plan: WARNING: {stage} runs beside servers holding "
                           f"{_size(servers)} and needs {_size(own)} of its own: "
                           f"{_size(own + servers)} of {cap}")
        for c in self.stages:
            when = (f"about {_minutes(c.seconds)} (estimate: {c.how})" if c.seconds is not None
                    else f"no estimate ({c.how})")
            limit = f"; limit {_minutes(c.limit)}" if c.limit is not None else ""
            over = " OVER ITS LIMIT" if c.over_limit else ""
            disk = f"; disk {_size(c.disk)} ({c.disk_how})" if c.disk else ""
            out.append(f"plan: {c.stage}: {when}{limit}{over}{disk}")
        total = sum(c.disk or 0 for c in self.stages)
        if total:
            out.append(f"plan: disk of every stage's outputs: about {_size(total)}")
        return out

    def to_json(self) -> dict[str, Any]:
        t = self.training
        return {
            "gpu": self.gpu.model if self.gpu else self.gpu_name,
            "peak_bf16_tflops": self.gpu.bf16_tflops if self.gpu else None,
            "hbm_tb_s": self.gpu.hbm_tb_s if self.gpu else None,
            "gpu_memory": self.capacity, "params": self.params,
            "weight_bytes": self.weight_bytes,
            "training": None if t is None else {
                "stage": t.stage, "state_bytes": t.state, "autocast_copy_bytes":
                t.autocast_copy, "activation_bytes": t.activations, "rows": t.rows,
                "total": t.total, "fits": t.fits},
            "servers": [{"stage": s.stage, "weights": s.weights, "kv_cache_memory_bytes": s.kv,
                         "gpu_memory_utilization": s.utilization, "holds": s.own,
                         "counted": s.counted} for s in self.servers],
            "servers_kv_bytes": sum(s.kv or 0 for s in self.servers),
            "servers_utilization": round(sum(s.utilization for s in self.servers), 4),
            "servers_total": self.servers_total, "servers_fit": self.servers_fit,
            "beside_servers": [{"stage": n, "own": o, "servers": s} for n, o, s in self.beside],
            "stages": [{"stage": c.stage, "seconds": c.seconds, "how": c.how, "disk": c.disk,
                        "disk_how": c.disk_how, "limit": c.limit, "over_limit": c.over_limit}
                       for c in self.stages]}


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def run_costs(spec: Any, cfg: dict[str, Any], params: int, capacity: int,
              gpu_name: str | None) -> RunCosts:
    """The costs of ``spec``'s stages with the verifier ``cfg`` (``params`` parameters) on
    one GPU of ``capacity`` bytes named ``gpu_name``."""
    gpu = gpu_peak(gpu_name)
    costs = RunCosts(gpu, gpu_name, capacity, params, 2 * params, None)
    draft_vocab = next((int(s.params.get("draft_vocab") or DRAFT_VOCAB) for s in spec.stages
                        if s.action == "eagle3.vocab"), DRAFT_VOCAB)
    drafter = drafter_params(cfg, draft_vocab)
    up: list[ServerNeed] = []
    scale = spec.defaults.timeout_scale
    for st in spec.order():
        par = st.params
        if st.action == "eagle3.build_verifier":
            costs.training = _training(st.name, cfg, params, par, capacity)
        if st.action == "eagle3.serve":
            up.append(_server(st, par, params, drafter, capacity))
        elif up and _on_gpu(st):
            own = params * (4 if st.action == "eagle3.verify" and
                            par.get("dtype", "float32") == "float32" else 2)
            costs.beside.append((st.name, own, sum(s.counted for s in up)))
        seconds, how = _seconds(st, cfg, params, drafter, gpu, spec)
        disk, disk_how = _disk(st, cfg, params, drafter, spec)
        base = st.timeout if st.timeout is not None else spec.defaults.timeout
        costs.stages.append(StageCost(st.name, seconds, how, disk, disk_how,
                                      base * scale if base is not None else None))
    costs.servers = up
    return costs


def _on_gpu(st: Any) -> bool:
    if st.action not in ("eagle3.build_verifier", "eagle3.generate", "eagle3.train",
                         "eagle3.verify", "eagle3.hidden_states"):
        return False
    if st.action == "eagle3.train" and not st.params.get("online"):
        return False
    return str(st.params.get("device", "auto")) not in ("cpu",)


def _training(name: str, cfg: dict[str, Any], params: int, par: dict[str, Any],
              capacity: int) -> TrainingNeed:
    gpu = str(par.get("device", "cpu")).startswith("cuda")
    autocast = par.get("autocast", "auto") == "bf16" or (par.get("autocast", "auto") == "auto"
                                                          and gpu)
    rows = int(par.get("micro_batch") or par.get("batch_size") or BUILD_DEFAULTS["batch_size"])
    act = activation_bytes_per_position(cfg, autocast=autocast,
                                        checkpointing=bool(par.get("grad_checkpointing")))
    return TrainingNeed(name, 16 * params, 2 * params if autocast else 0,
                        act * rows * ROW_POSITIONS, rows, capacity)


def _server(st: Any, par: dict[str, Any], params: int, drafter: int,
            capacity: int) -> ServerNeed:
    kv = par.get("kv_cache_memory_bytes")
    try:
        kv_bytes = byte_size(str(kv)) if kv is not None else None
    except argparse.ArgumentTypeError as exc:
        raise ActionError(f"kv_cache_memory_bytes: {exc}", where=f"stages ({st.name})") \
            from None
    speculative = par.get("speculative", True) is not False
    util = float(par.get("gpu_memory_utilization") or VLLM_UTILIZATION)
    return ServerNeed(st.name, 2 * params + (2 * drafter if speculative else 0), kv_bytes,
                      util, capacity)


def _decode(steps: int, weight_bytes: int, layers: int, gpu: GpuPeak) -> float:
    """Seconds of ``steps`` decoding steps: the weights read once each at the bandwidth,
    or the per-layer overhead, whichever is longer."""
    return steps * max(weight_bytes / (gpu.hbm_tb_s * 1e12), layers * EAGER_SECONDS_PER_LAYER)


def _seconds(st: Any, cfg: dict[str, Any], params: int, drafter: int, gpu: GpuPeak | None,
             spec: Any) -> tuple[float | None, str]:
    par = st.params
    if st.action == "eagle3.serve":
        return None, "a server, started in the background"
    if st.action == "eagle3.benchmark":
        return _bench_seconds(par)
    if st.action not in ("eagle3.build_verifier", "eagle3.generate", "eagle3.train",
                         "eagle3.verify"):
        return None, "CPU work or a command: not estimated"
    if gpu is None:
        return None, "no GPU peak known"
    rate = gpu.bf16_tflops * 1e12 * ASSUMED_MFU
    layers = int(cfg["num_hidden_layers"])
    matmul = params - int(cfg["vocab_size"]) * int(cfg["hidden_size"])  # not the lookup
    if st.action == "eagle3.build_verifier":
        positions = int(par.get("steps") or BUILD_DEFAULTS["steps"]) * int(
            par.get("batch_size") or BUILD_DEFAULTS["batch_size"]) * ROW_POSITIONS
        factor = 8 if par.get("grad_checkpointing") else 6
        built = gpu.bf16_tflops * 1e12 * BUILD_MFU
        return factor * matmul * positions / built, (
            f"{factor}N x {positions:,} positions at {BUILD_MFU:.1%} of peak, as measured "
            "at 3.1B")
    if st.action == "eagle3.generate":
        samples, batch = int(par.get("samples") or 0), int(par.get("batch_size") or 32)
        steps = -(-samples // max(1, batch)) * int(par.get("max_new_tokens") or 256)
        return _decode(steps, 2 * params, layers, gpu), f"{steps:,} decoding steps"
    if st.action == "eagle3.train":
        tokens = _tokens_bound(spec, par)
        if tokens is None:
            return None, "tokens not known before the run"
        epochs = int(par.get("epochs") or 1)
        flops = (2 * matmul + 6 * drafter * int(par.get("ttt_steps") or 3)) * tokens * epochs
        return flops / rate, (f"the verifier's forward and the drafter's {par.get('ttt_steps', 3)}"
                              f" steps over at most {tokens:,} tokens x {epochs} epochs")
    # verify: plain, speculative, untrained and (given) the previous checkpoint's decoding
    passes = 3 + (1 if par.get("previous") else 0)
    steps = int(par.get("samples") or 32) * int(par.get("max_new_tokens") or 256) * passes
    width = 4 if par.get("dtype", "float32") == "float32" else 2
    return _decode(steps, width * params, layers, gpu), (
        f"{steps:,} decoding steps at batch 1 ({passes} passes)")


def _tokens_bound(spec: Any, par: dict[str, Any]) -> int | None:
    for d in estimates(spec):
        if d.tokens:
            return d.tokens
    return None


def _bench_seconds(par: dict[str, Any]) -> tuple[float | None, str]:
    levels = par.get("concurrency") or [1]
    urls = par.get("url")
    servers = 1 + (len(urls) if isinstance(urls, dict) else 1)
    trials = int(par.get("max_trials") or par.get("trials") or 1)
    per = float(par.get("min_seconds") or 3)
    seconds = len(levels) * servers * trials * per
    if par.get("level_budget"):
        seconds = min(seconds, len(levels) * float(par["level_budget"]))
    extra = float(par.get("extra_budget") or 0)
    return seconds + extra, (f"{len(levels)} levels x {servers} servers x {trials} trials "
                             f"of {per:g} s" + (f", then up to {extra:g} s for the levels "
                                                "still wide" if extra else "")
                             + ", warm-up not counted")


def _disk(st: Any, cfg: dict[str, Any], params: int, drafter: int,
          spec: Any) -> tuple[int | None, str]:
    par = st.params
    if st.action == "eagle3.build_verifier":
        width = DTYPE_BYTES.get(str(par.get("save_dtype") or "float32"), 4)
        return width * params, f"weights in {par.get('save_dtype') or 'float32'}"
    if st.action == "eagle3.generate":
        # the answer's text (about 4 bytes a token) and the prompt, as JSON
        n = int(par.get("samples") or 0) * (4 * int(par.get("max_new_tokens") or 256) + 400)
        return n, "at most: the answers' text as JSON"
    if st.action == "eagle3.tokenize":
        tokens = _tokens_bound(spec, {})
        return (5 * tokens, "at most: int32 ids and a mask byte a token") if tokens else \
            (None, "")
    if st.action == "eagle3.train":
        epochs = int(par.get("epochs") or 1)
        # each epoch's checkpoint: fp32 weights (with the frozen embeddings) and AdamW state
        emb = int(cfg["vocab_size"]) * int(cfg["hidden_size"])
        return epochs * (4 * (drafter + emb) + 8 * drafter), (
            f"{epochs} checkpoints of fp32 weights and AdamW state")
    if st.action == "eagle3.export":
        width = DTYPE_BYTES.get(str(par.get("dtype") or "bfloat16"), 2)
        return width * drafter, "the drafter's weights"
    return None, ""
