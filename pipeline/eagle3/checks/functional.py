"""Functional checks: does the drafter make the verifier faster, and is decoding still exact?

On held-out prompts, for the checkpoint and its baselines (a freshly initialised drafter
with the same config and vocab mapping, and a previous checkpoint when given):

- **plain greedy decoding** of the verifier alone: the reference output and the cost of
  one decoding step;
- **teacher-forced acceptance**: along the verifier's own greedy continuation, the share of
  rows where draft step ``k`` (given the earlier drafts were right) proposes the verifier's
  greedy token; ``tau ~= 1 + sum_k prod_{i<=k} acc_i``. With the verifier's hidden states
  at the checkpoint's aux ids and at ids shifted by one either way (the layer-id probe);
- **free-running** greedy chain speculative decoding (:mod:`pipeline.eagle3.model.specdecode`): vLLM's
  acceptance metrics, the cost of a draft and a verify step, and the output, which must
  equal the reference token for token (``lossless``);
- **projected speedup**: ``tau * t_plain / (t_verify + t_draft_per_round)`` from those
  costs on this hardware, and the loop's wall-clock ratio beside it
  (``reference_speedup_bound``). Both are the reference loop's: Python runs between its
  steps and nothing is captured in CUDA graphs, so its plain decoding is several times
  slower than an engine's and every ratio is inflated (on the H200, 2.17x here against
  1.42x served by vLLM at batch 1). They are upper bounds, shown but never gated on.

The drafter is loaded as vLLM would serve it (:mod:`pipeline.eagle3.checks.served_drafter`), so the numbers show
what serving would see.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.actions import Check
from pipeline.eagle3.checks.served_drafter import NotServable, load_served, untrained_like
from pipeline.eagle3.model.checkpoint_files import DrafterLayout
from pipeline.eagle3.model.drafter import Eagle3Drafter
from pipeline.eagle3.model.specdecode import (
    DecodeStats,
    Timer,
    VerifierSteps,
    first_divergence,
    greedy_decode,
    speculative_decode,
)
from pipeline.eagle3.text.heldout import HeldOutPrompt
from pipeline.eagle3.training.ttt import TTTLoss, acceptance_length, position_accuracy
from pipeline.errors import ActionError

Log = Callable[[str], None]


CONFIG_ORDER = "probe:config-order"


@dataclass
class DrafterResult:
    name: str
    aux_layer_ids: list[int]
    tf: TeacherForced | None = None
    stats: DecodeStats | None = None
    timer: Timer | None = None
    seconds: float = 0.0
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    probe: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def tf_acc(self) -> list[float]:
        return self.tf.acc if self.tf else []

    @property
    def tf_tau(self) -> float:
        return acceptance_length(self.tf_acc)

    @property
    def tf_loss(self) -> float:
        return sum(self.tf.losses) / max(len(self.tf.losses), 1) if self.tf else 0.0

    @property
    def tau(self) -> float:
        return self.stats.acceptance_length if self.stats else self.tf_tau

    @property
    def per_token(self) -> float | None:
        return self.seconds / self.stats.tokens if self.stats and self.stats.tokens else None

    def projected(self, plain: Timer) -> float | None:
        """``tau * t_plain / (t_verify + t_drafting)``: medians of the measured steps (a
        round's drafting is its k drafter forwards), so a burst of load elsewhere on the
        machine does not swing the figure."""
        if self.timer is None:
            return None
        t_plain, t_verify = plain.median("plain"), self.timer.median("verify")
        t_draft = self.timer.median("draft_round")
        if t_plain is None or t_verify is None or t_draft is None:
            return None
        return self.tau * t_plain / (t_verify + t_draft)


@dataclass
class FunctionalSettings:
    k: int = 3
    max_new_tokens: int = 96
    seed: int = 0
    min_gain: float = 0.1          # tau over the untrained drafter
    max_regression: float = 0.05   # tau under the previous checkpoint
    probe_t: float = 2.0           # a shifted aux set fits better: paired t of its lower loss
    probe_rel: float = 0.005       # ... and by at least this share of the configured loss
    tf_tolerance: float = 0.3      # |tau free-running - tau teacher-forced|
    baselines_free_running: bool = True
    probe: bool = True


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = {eos} if isinstance(eos, int) else set(eos or [])
    if not ids and tokenizer.eos_token_id is not None:
        ids = {int(tokenizer.eos_token_id)}
    return ids


@dataclass
class TeacherForced:
    """Per-position agreement counts, and the training loss of each sequence."""

    correct: torch.Tensor
    counted: torch.Tensor
    losses: list[float] = field(default_factory=list)

    @property
    def acc(self) -> list[float]:
        return [float(c) / float(n) if float(n) else 0.0
                for c, n in zip(self.correct, self.counted, strict=True)]


@torch.no_grad()
def teacher_forced(verifier: Any, drafters: dict[str, Eagle3Drafter],
                   sequences: list[tuple[list[int], int]], k: int,
                   probe_sets: dict[str, list[int]]) -> dict[str, TeacherForced]:
    """Teacher-forced agreement along each sequence's continuation, per drafter.

    ``sequences`` are ``(prompt + greedy output, prompt length)``; rows predicting the
    tokens after the first generated one count (the first comes from the verifier's
    prefill, not from a draft). ``probe_sets``: extra aux id sets run with the first
    drafter. Besides agreement, each sequence's training loss (the cross-entropy against
    the verifier's distribution restricted to the draft vocab, summed over the ``k``
    steps): a drafter fits the layers it was trained on best, which the probe compares.
    """
    device = next(verifier.parameters()).device
    head = verifier.get_output_embeddings().weight
    first = next(iter(drafters.values()))
    runs = [(name, d, d.config.aux_layer_ids) for name, d in drafters.items()]
    runs += [(name, first, aux) for name, aux in probe_sets.items()]
    losses = {}
    for name, drafter, _ in runs:
        dtype = drafter.fc.weight.dtype
        ids = torch.arange(drafter.d2t.numel(), device=drafter.d2t.device) + drafter.d2t
        losses[name] = TTTLoss(drafter, head[ids.to(head.device)].to(dtype), k, decay=1.0)
    out = {name: TeacherForced(torch.zeros(k), torch.zeros(k)) for name, _, _ in runs}
    for ids, p in sequences:
        x = torch.tensor([ids], device=device)
        hs = verifier(input_ids=x, output_hidden_states=True, use_cache=False).hidden_states
        mask = torch.zeros(1, len(ids), dtype=torch.uint8, device=device)
        mask[0, p + 1:] = 1
        for name, drafter, aux_ids in runs:
            dtype = drafter.fc.weight.dtype
            aux = torch.cat([hs[a] for a in aux_ids], dim=-1).to(dtype)
            last = hs[-1].to(dtype)
            c, n = position_accuracy(drafter, head.to(dtype), aux, last, x, mask, k)
            total, _, _ = losses[name](aux, last, x, mask)
            out[name].correct.add_(c.cpu())
            out[name].counted.add_(n.cpu())
            out[name].losses.append(float(total))
    return out


def paired_t(a: list[float], b: list[float]) -> tuple[float, float]:
    """(mean of a - b, its t statistic) over paired samples."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    n = len(d)
    mean = sum(d) / n if n else 0.0
    if n < 2:
        return mean, 0.0
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    return mean, (mean / (var / n) ** 0.5) if var > 0 else (float("inf") if mean else 0.0)


def _margin(verifier: Any, ids: list[int]) -> float:
    """Top-1 minus top-2 logit of the verifier's next token after ``ids`` (a near-tie
    explains a divergence by rounding; a wide margin means a bug)."""
    device = next(verifier.parameters()).device
    with torch.no_grad():
        logits = verifier(input_ids=torch.tensor([ids], device=device),
                          use_cache=False).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def run_functional(*, verifier: Any, tokenizer: Any, checkpoint: Path,
                   layout: DrafterLayout | None, previous: Path | None,
                   prompts: list[HeldOutPrompt], settings: FunctionalSettings,
                   device: torch.device, dtype: torch.dtype, log: Log = print
                   ) -> tuple[list[Check], dict[str, Any], str]:
    """(checks, metrics, one-line headline) of the functional layer."""
    s = settings
    checks: list[Check] = []
    metrics: dict[str, Any] = {"k": s.k, "prompts": len(prompts),
                               "max_new_tokens": s.max_new_tokens,
                               "functional_dtype": str(dtype).removeprefix("torch.")}
    try:
        served = load_served(checkpoint, verifier, device, dtype, layout)
    except (NotServable, ActionError) as exc:
        msg = exc.message if isinstance(exc, ActionError) else str(exc)
        checks.append(Check("loads", False, value=None, expected="loads as vLLM would",
                            message=f"not run: {msg}"))
        return checks, metrics, f"functional checks not run ({msg})"
    checks.append(Check("loads", True, value=served.model.config.aux_layer_ids,
                        message="; ".join(served.notes) or "loads as vLLM would load it "
                                                            "(aux ids, d2t from the files)"))
    drafters: dict[str, Eagle3Drafter] = {"checkpoint": served.model,
                                          "untrained": untrained_like(served.model, verifier,
                                                                      s.seed)}
    if previous is not None:
        try:
            drafters["previous"] = load_served(previous, verifier, device, dtype).model
        except NotServable as exc:
            raise ActionError(f"the previous checkpoint does not load: {exc}",
                              where=str(previous)) from None
    t0 = time.perf_counter()
    refs, results, plain = _decode_all(verifier, tokenizer, drafters, prompts, s, device, log)
    _teacher_force(verifier, drafters, prompts, refs, results, s, served.config_aux)
    metrics["functional_seconds"] = round(time.perf_counter() - t0, 2)
    log("[verify] teacher-forced: " + ", ".join(f"{r.name} tau {r.tf_tau:.3f}"
                                               for r in results.values()))
    ck = results["checkpoint"]
    st = ck.stats
    assert st is not None and ck.timer is not None
    proj = ck.projected(plain.timer)
    measured = plain.per_token / ck.per_token if ck.per_token else None
    metrics.update(_timing_notes(proj, measured, device))
    metrics.update({
        "tau": round(st.acceptance_length, 4),
        "acceptance_length": round(st.acceptance_length, 4),
        "acceptance_rate": round(st.acceptance_rate, 4),
        "acceptance_per_position": [round(x, 4) for x in st.per_position],
        "position_acceptance": [round(x, 4) for x in st.per_position],
        "conditional_acceptance": [round(x, 4) for x in st.conditional],
        "drafts": st.drafts, "draft_tokens": st.draft_tokens, "accepted_tokens": st.accepted,
        "generated_tokens": st.tokens,
        "teacher_forced_acceptance": [round(x, 4) for x in ck.tf_acc],
        "teacher_forced_tau": round(ck.tf_tau, 4),
        "projected_speedup": _r(proj),
        "reference_speedup_bound": _r(measured),
        "plain_step_ms": _ms(plain.timer.median("plain")),
        "verify_step_ms": _ms(ck.timer.median("verify")),
        "draft_step_ms": _ms(ck.timer.median("draft")),
        "draft_ms_per_round": _ms(ck.timer.median("draft_round")),
        "plain_ms_per_token": _ms(plain.per_token),
        "spec_ms_per_token": _ms(ck.per_token),
    })
    for name in ("untrained", "previous"):
        r = results.get(name)
        if r is None:
            continue
        metrics[f"{name}_teacher_forced_tau"] = round(r.tf_tau, 4)
        if r.stats is not None:
            metrics[f"{name}_acceptance_length"] = round(r.stats.acceptance_length, 4)
            metrics[f"{name}_acceptance_per_position"] = [round(x, 4)
                                                          for x in r.stats.per_position]
            metrics[f"{name}_projected_speedup"] = _r(r.projected(plain.timer))
    if previous is not None:
        metrics["previous_checkpoint"] = str(previous)

    checks += _checks(results, s, metrics)
    parallel = served.model.config.parallel
    metrics["method"] = served.model.config.method
    headline = (f"acceptance {st.acceptance_rate:.0%} (τ {st.acceptance_length:.2f}) at "
                f"k={s.k}{' (P-EAGLE: parallel drafting)' if parallel else ''}; "
                f"pos1 {st.per_position[0]:.0%}")
    # The reference loop's speed is no engine's: it is named as a bound, never "measured".
    if measured is not None:
        headline += f"; reference-loop bound {measured:.2f}x"
    if proj is not None:
        headline += f"{',' if measured is not None else ';'} projected {proj:.2f}x"
    if measured is not None or proj is not None:
        headline += " (not served: eagle3.benchmark measures the engine)"
    if metrics["timings_indicative"]:
        headline += " (CPU timings: indicative only)"
    return checks, metrics, headline


def _timing_notes(proj: float | None, measured: float | None, device: torch.device
                  ) -> dict[str, Any]:
    """What the two speedups are (shown beside them): the reference loop's, which runs
    Python between steps and no CUDA graphs, so no engine reaches them; on a CPU they say
    even less about a GPU. Neither gates (pipeline.served_gates)."""
    cpu = device.type == "cpu"
    notes = {}
    if proj is not None:
        notes["projected_speedup"] = "projected from the reference loop's median step " \
            "costs" + (f"; the loop itself ran {measured:.2f}x" if measured is not None
                       else "") + "; not served" + (
            "; CPU timings are indicative only" if cpu else "")
    if measured is not None:
        notes["reference_speedup_bound"] = "wall clock of the reference loop over plain " \
            "decoding: an upper bound no engine reaches; not served" + (
                "; CPU timings are indicative only" if cpu else "")
    return {"metric_notes": notes, "timings_indicative": cpu}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 4)


@dataclass
class PlainRun:
    timer: Timer
    tokens: int = 0
    seconds: float = 0.0

    @property
    def per_token(self) -> float:
        return self.seconds / max(self.tokens, 1)


def _decode_all(verifier: Any, tokenizer: Any, drafters: dict[str, Eagle3Drafter],
                prompts: list[HeldOutPrompt], s: FunctionalSettings, device: torch.device,
                log: Log) -> tuple[list[list[int]], dict[str, DrafterResult], PlainRun]:
    """Plain greedy and speculative decoding of every prompt, interleaved prompt by prompt
    so that a change in the machine's load shifts both costs alike."""
    eos = _eos_ids(verifier, tokenizer)
    base = VerifierSteps(verifier, drafters["checkpoint"].config.aux_layer_ids)
    # The first forwards pay for lazy initialisation: warm both paths up, untimed.
    greedy_decode(base, prompts[0].ids, min(8, s.max_new_tokens), eos)
    speculative_decode(base, drafters["checkpoint"], prompts[0].ids, s.k,
                       min(8, s.max_new_tokens), eos, DecodeStats(k=s.k))
    plain = PlainRun(Timer(device))
    results = {name: DrafterResult(name, d.config.aux_layer_ids) for name, d in drafters.items()}
    running = {name: d for name, d in drafters.items()
               if name == "checkpoint" or s.baselines_free_running}
    steps = {name: VerifierSteps(verifier, d.config.aux_layer_ids) for name, d in running.items()}
    for name in running:
        results[name].stats, results[name].timer = DecodeStats(k=s.k), Timer(device)
    refs: list[list[int]] = []
    for p in prompts:
        t = time.perf_counter()
        ref = greedy_decode(base, p.ids, s.max_new_tokens, eos, plain.timer)
        plain.seconds += time.perf_counter() - t
        plain.tokens += len(ref)
        refs.append(ref)
        for name, drafter in running.items():
            r = results[name]
            assert r.stats is not None
            t = time.perf_counter()
            got = speculative_decode(steps[name], drafter, p.ids, s.k, s.max_new_tokens, eos,
                                     r.stats, r.timer)
            r.seconds += time.perf_counter() - t
            r.stats.tokens += len(got)
            at = first_divergence(got, ref)
            if at is not None:
                r.mismatches.append({"prompt": p.id, "at": at,
                                     "margin": _margin(verifier, p.ids + ref[:at])})
    log(f"[verify] plain greedy: {len(prompts)} prompts, {plain.tokens} tokens, "
        f"{plain.per_token * 1e3:.2f} ms/token")
    for name in running:
        r = results[name]
        assert r.stats is not None
        log(f"[verify] free-running {name}: tau {r.stats.acceptance_length:.3f}, per "
            f"position {[round(x, 3) for x in r.stats.per_position]}, "
            f"{r.per_token * 1e3:.2f} ms/token"
            + (f", {len(r.mismatches)} MISMATCHES" if r.mismatches else ""))
    return refs, results, plain


def _teacher_force(verifier: Any, drafters: dict[str, Eagle3Drafter],
                   prompts: list[HeldOutPrompt], refs: list[list[int]],
                   results: dict[str, DrafterResult], s: FunctionalSettings,
                   config_aux: list[int]) -> None:
    n_layers = int(verifier.config.num_hidden_layers)
    ck = results["checkpoint"]
    probe_sets: dict[str, list[int]] = {}
    if s.probe:
        for shift in (-1, 1):
            moved = [a + shift for a in ck.aux_layer_ids]
            if all(0 <= a < n_layers for a in moved):
                probe_sets[f"probe:{shift:+d}"] = moved
        if config_aux and config_aux != ck.aux_layer_ids:
            # the states in the config's order: does the drafter fit that better than the
            # ascending order vLLM feeds? Then it was trained in the config's order.
            probe_sets[CONFIG_ORDER] = list(config_aux)
    sequences = [(p.ids + r, len(p.ids)) for p, r in zip(prompts, refs, strict=True)]
    tf = teacher_forced(verifier, drafters, sequences, s.k, probe_sets)
    for name in drafters:
        results[name].tf = tf[name]
    for label, aux_ids in probe_sets.items():
        gain, t = paired_t(ck.tf.losses, tf[label].losses)
        key = f"config order {aux_ids}" if label == CONFIG_ORDER else str(aux_ids)
        ck.probe[key] = {"tau": acceptance_length(tf[label].acc),
                                  "loss": sum(tf[label].losses) / len(tf[label].losses),
                                  "loss_gain": gain, "t": t}


def _probe_verdict(key: str, fit: dict[str, float], ck: DrafterResult) -> str:
    how = f"loss lower by {fit['loss_gain']:.3f}, t {fit['t']:.1f} over the prompts"
    if key.startswith("config order"):
        return (f": the drafter fits the states in its config's {key} ({how}) better than "
                f"in the ascending order {ck.aux_layer_ids} vLLM concatenates them in: it "
                "was trained in the listed order, and vLLM would feed it permuted inputs. "
                f"Permute fc.weight's input column blocks to the order {ck.aux_layer_ids} "
                "and write the ids ascending, or retrain with ascending --aux-layers")
    return (f": the drafter fits {key} better ({how}), so its config's aux ids are off by "
            "one (SGLang/SpecForge count one lower than HF output_hidden_states); fix "
            "eagle_aux_hidden_state_layer_ids")


def _checks(results: dict[str, DrafterResult], s: FunctionalSettings,
            metrics: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    ck, un = results["checkpoint"], results["untrained"]
    bad = [(name, m) for name, r in results.items() for m in r.mismatches]
    ran = [n for n, r in results.items() if r.stats is not None]
    checks.append(Check(
        "lossless", not bad, value=len(bad), expected=0,
        message=f"speculative output equals plain greedy decoding on every prompt, for "
                f"{', '.join(ran)}" if not bad else
        "speculative output differs from plain greedy decoding: " + "; ".join(
            f"{name} on {m['prompt']} at token {m['at']} (verifier top-2 margin "
            f"{m['margin']:.2g}{', a near tie: rounding' if m['margin'] < 1e-3 else ''})"
            for name, m in bad[:3]) + " - the loop or the verifier's cache is wrong"))

    use_free = un.stats is not None
    mine, theirs = (ck.tau, un.tau) if use_free else (ck.tf_tau, un.tf_tau)
    learned = mine >= theirs + s.min_gain
    checks.append(Check(
        "better_than_untrained", learned, value=round(mine, 4),
        expected=f">= {theirs + s.min_gain:.3f} (untrained {theirs:.3f} + {s.min_gain:g})",
        message=f"{'free-running' if use_free else 'teacher-forced'} tau {mine:.3f} vs "
                f"{theirs:.3f} for a freshly initialised drafter"
        + ("" if learned else ": the weights carry no learned signal here (random, "
                              "untrained, or trained for another verifier, vocab mapping "
                              "or aux layers)")))
    if "previous" in results:
        pr = results["previous"]
        both_free = pr.stats is not None
        theirs = pr.tau if both_free else pr.tf_tau
        mine = ck.tau if both_free else ck.tf_tau
        checks.append(Check(
            "not_worse_than_previous", mine >= theirs - s.max_regression,
            value=round(mine, 4), expected=f">= {theirs - s.max_regression:.3f}",
            message=f"tau {mine:.3f} vs {theirs:.3f} for the previous checkpoint"
            + ("" if mine >= theirs - s.max_regression else
               ": this checkpoint regressed; keep the previous one")))

    if ck.probe:
        metrics["aux_probe"] = {"configured": {"aux": ck.aux_layer_ids,
                                               "tau": round(ck.tf_tau, 4),
                                               "loss": round(ck.tf_loss, 4)},
                                **{k: {m: round(x, 4) for m, x in v.items()}
                                   for k, v in ck.probe.items()}}
        shown = ", ".join(f"{k} tau {v['tau']:.3f} loss {v['loss']:.3f}"
                          for k, v in ck.probe.items())
        better = {k: v for k, v in ck.probe.items()
                  if v["t"] >= s.probe_t and v["loss_gain"] >= s.probe_rel * ck.tf_loss}
        if not learned:
            # A drafter without signal fits every shifted set equally badly: nothing to
            # judge there. One that fits its config's order clearly better than vLLM's
            # is another matter: that is why it has no signal as vLLM feeds it.
            better = {k: v for k, v in better.items() if k.startswith("config order")}
            metrics["aux_probe"]["judged"] = bool(better)
        if learned or better:
            worst = max(better.items(), key=lambda kv: kv[1]["t"]) if better else None
            checks.append(Check(
                "aux_layer_probe", worst is None,
                value=worst[0] if worst else ck.aux_layer_ids,
                expected=f"the ids {ck.aux_layer_ids}, in vLLM's order, fit best",
                message=f"configured {ck.aux_layer_ids} (as vLLM feeds them): tau "
                        f"{ck.tf_tau:.3f} loss {ck.tf_loss:.3f}; probed: {shown}"
                + ("" if worst is None else _probe_verdict(worst[0], worst[1], ck))))

    gap = abs(ck.tau - ck.tf_tau)
    checks.append(Check(
        "free_running_matches_teacher_forced", gap <= s.tf_tolerance, value=round(gap, 4),
        expected=f"<= {s.tf_tolerance:g}",
        message=f"tau free-running {ck.tau:.3f} vs teacher-forced {ck.tf_tau:.3f}"
        + ("" if gap <= s.tf_tolerance else
           ": the KV-cache inference path disagrees with the training-time forward")))
    return checks
