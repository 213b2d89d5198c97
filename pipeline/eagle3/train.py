"""Action ``eagle3.train``: train the EAGLE-3 drafter with training-time test.

Input: hidden-state shards, the vocab mapping and the verifier (embeddings, lm_head, shape).
Output in ``OUT``: ``checkpoints/epoch-NNN/`` (``model.safetensors`` + ``drafter_config.json``,
loadable with :func:`pipeline.eagle3.model.drafter.load_drafter`, and ``trainer.pt`` with optimizer, schedule and
history) after every epoch, and ``state.json`` naming the latest
(:mod:`pipeline.eagle3.training.checkpoints`). Export turns a checkpoint into what vLLM loads.

The drafter (docs/eagle3.md, "train"): ``fc`` 3Ht -> H, one decoder layer with 2H attention input,
norm, ``lm_head`` over the draft vocab from the verifier's rows (frozen), the verifier's
embeddings (frozen). Loss: ``--ttt-steps`` unrolled steps against the verifier's distribution
restricted to the draft vocab (:mod:`pipeline.eagle3.training.ttt`). AdamW (fused on GPU) with linear warmup and
cosine decay, gradient clipping, bf16 autocast on GPU.

``--method peagle`` trains a P-EAGLE drafter for vLLM's parallel drafting
(:mod:`pipeline.eagle3.model.peagle`): the same network plus a learned ``mask_hidden``; position 1 reads the
verifier's states, positions 2..k the mask token (``--mask-token-id``, else chosen from
the data and recorded) and ``fc(mask_hidden)``, all ``k`` depths of every position in one
forward with the attention vLLM's single drafting forward has. Each depth weighs the same
in the loss by default (``--step-decay`` 1.0, speculators' recipe; 0.8 for eagle3).

Resume: an ``OUT`` with a ``state.json`` continues after its last finished epoch, with the
same result as an uninterrupted run; ``OUT/.config.json`` refuses other settings.
``--stop-after-epochs`` ends a run early on purpose (time-boxed jobs). Warm start
(``--init-from``) keeps that drafter's own ``d2t``/``t2d``; a ``--vocab`` that maps
differently is refused, since the frozen lm_head rows would then score the wrong tokens.

Multi-GPU: run under ``torchrun --nproc-per-node N -m pipeline.eagle3.train ...`` (DDP;
each rank takes every N-th batch; rank 0 writes).

Online (``--online --tokens DIR`` in place of ``--hidden-states``): the frozen verifier runs
in this process, batch by batch, and no shard is written (:mod:`pipeline.eagle3.training.online`); same batches,
resume and held-out evaluation as offline. ``--device-map``/``--max-memory`` spread that
verifier over devices (:mod:`pipeline.eagle3.hardware.placement`); ``--device`` is the drafter's.

Checks: every epoch finished; held-out position-1 accuracy reaches ``--min-acc1``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, json_arg, make_parser, run_action
from pipeline.eagle3.common import (
    DTYPES,
    add_threads_arg,
    config_differs,
    guard_config,
    log,
    use_threads,
)
from pipeline.eagle3.hardware.distributed import Dist, wrap_ddp
from pipeline.eagle3.hardware.placement import add_placement_args
from pipeline.eagle3.model.peagle import METHODS
from pipeline.eagle3.training import checkpoints
from pipeline.eagle3.training.train_setup import build_drafter, online_data
from pipeline.errors import ActionError
from pipeline.series import emit

ACTION = "eagle3.train"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Train the EAGLE-3 drafter (training-time test), from "
                            "hidden-state shards or online from the verifier.")
    p.add_argument("--hidden-states", type=Path, default=None,
                   help="hidden_states' output directory (offline training)")
    p.add_argument("--verifier", type=Path, required=True)
    add_bool_arg(p, "online", False,
                 "run the frozen verifier here, batch by batch, instead of reading shards "
                 "(needs --tokens; writes no hidden states)")
    p.add_argument("--tokens", type=Path, default=None,
                   help="online: tokenize's output directory")
    p.add_argument("--aux-layers", type=json_arg, default=None,
                   help="online: three distinct layer ids, used ascending (default vLLM's "
                        "[2, N//2, N-3]); offline takes the shards' own")
    p.add_argument("--verifier-dtype", default="auto", choices=DTYPES,
                   help="online: the verifier's compute dtype (auto: bf16 on a GPU, fp32 on "
                        "the CPU, as hidden_states)")
    p.add_argument("--vocab", type=Path, default=None,
                   help="vocab.safetensors (optional with --init-from)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--init-from", type=Path, default=None,
                   help="warm start from this drafter (checkpoint or exported directory)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--stop-after-epochs", type=int, default=None,
                   help="stop after this many epochs in total (resume later)")
    p.add_argument("--method", choices=METHODS, default="eagle3",
                   help="eagle3 (sequential drafting) or peagle (P-EAGLE: all k drafts in "
                        "one forward, vLLM's parallel_drafting)")
    p.add_argument("--mask-token-id", type=int, default=None,
                   help="peagle: the mask token of the parallel rows (default: the special "
                        "token the training data holds least, recorded in the checkpoint)")
    p.add_argument("--ttt-steps", type=int, default=3,
                   help="draft positions trained (peagle: the parallel depths, k)")
    p.add_argument("--step-decay", type=float, default=None,
                   help="loss weight decay per step (default 0.8; 1.0 for peagle)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup-ratio", type=float, default=0.03)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=0.5)
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch (per rank)")
    p.add_argument("--batch-tokens", type=int, default=16384, help="padded tokens per batch")
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--holdout", type=float, default=0.05, help="share of samples held out")
    p.add_argument("--eval-batches", type=int, default=50)
    p.add_argument("--intermediate-size", type=int, default=None,
                   help="drafter MLP width (default: the verifier's)")
    add_bool_arg(p, "norm-before-residual", False,
                 "residual is the normed hidden state (speculators' default is True)")
    p.add_argument("--attn", choices=("sdpa", "math", "flex"), default="sdpa",
                   help="attention of the unrolled steps; flex (block-sparse, compiled, GPU "
                        "only) is faster: +15%% with compiled blocks on variable-length "
                        "batches on an H200, see docs/PERFORMANCE.md")
    p.add_argument("--on-other-config", choices=("refuse", "restart"), default="refuse",
                   help="when OUT holds checkpoints trained under other settings: refuse "
                        "(default), or restart: discard them and train from the first "
                        "epoch (a run that diverged, rerun at another lr)")
    add_bool_arg(p, "compile-loss", True, "on a GPU, torch.compile the fp32 loss chunks")
    add_bool_arg(p, "compile-blocks", True,
                 "on a GPU, torch.compile the drafter's norms/rotary/gates so they fuse "
                 "(dynamic shapes: no recompile per batch length)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    add_placement_args(p, tp=False)
    p.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    p.add_argument("--loss-curve", type=int, default=0, metavar="N",
                   help="record the loss of the first N optimizer steps, averaged over all "
                        "ranks, as the result's loss_curve (one sync per recorded step); "
                        "compares runs of different world sizes at the same global batch")
    p.add_argument("--min-acc1", type=float, default=0.0,
                   help="fail unless held-out position-1 accuracy reaches this")
    add_threads_arg(p)
    return p


def _file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def lr_factor(step: int, total: int, warmup: int, min_ratio: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t))


def run(args: argparse.Namespace) -> StageResult:
    import torch

    from pipeline.eagle3.common import verifier_config
    from pipeline.eagle3.model.drafter import save_checkpoint_weights, verifier_matrix
    from pipeline.eagle3.training.train_data import Prefetcher, TrainData
    from pipeline.eagle3.training.ttt import (
        TTTLoss,
        acceptance_length,
        position_accuracy,
        summarize,
    )

    if not 1 <= args.ttt_steps <= 16:
        raise ActionError(f"--ttt-steps must be in 1..16 (3..7 is usual), got {args.ttt_steps}")
    if args.method != "peagle" and args.mask_token_id is not None:
        raise ActionError("--mask-token-id is for --method peagle")
    if args.step_decay is None:
        args.step_decay = 1.0 if args.method == "peagle" else 0.8
    result = StageResult(action=ACTION)
    dist = Dist(args.device)
    device = dist.device
    if not dist.main:
        args.result = None  # one result per run: rank 0's
    vcfg = verifier_config(Path(args.verifier))
    plan = None  # the verifier's memory plan, online
    if args.online:
        data, plan = online_data(args, vcfg, dist)
    else:
        if args.hidden_states is None:
            raise ActionError("give --hidden-states (offline), or --online with --tokens")
        if args.tokens is not None or args.aux_layers is not None:
            raise ActionError("--tokens and --aux-layers are for --online; offline training "
                              "takes both from the hidden states")
        data = TrainData(Path(args.hidden_states), seed=args.seed, holdout=args.holdout,
                         max_length=args.max_length)
        if int(data.index["hidden_size"]) != int(vcfg["hidden_size"]):
            raise ActionError(f"hidden states have hidden size {data.index['hidden_size']}, "
                              f"the verifier {vcfg['hidden_size']}",
                              where=str(Path(args.hidden_states) / "index.json"))
    torch.manual_seed(args.seed)  # the drafter's initialisation, whatever loaded before
    drafter = build_drafter(args, vcfg, data.aux_layers, data)
    if drafter.config.parallel and dist.main:
        log(f"[train] P-EAGLE mask token {drafter.config.mask_token_choice}")
    out = Path(args.out)
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
           if k not in ("result", "stop_after_epochs", "log_every", "device", "min_acc1",
                        "on_other_config",
                        "eval_batches", "compile_loss", "compile_blocks", "attn",
                        "device_map", "max_memory", "offload_folder")}
    if args.method == "eagle3":  # keys absent as before: earlier runs resume as they were
        del cfg["method"], cfg["mask_token_id"]
    else:
        cfg["mask_token_id"] = drafter.config.mask_token_id
    cfg["hidden_states_config"] = data.index["config_hash"]
    cfg["vocab_sha"] = _file_digest(Path(args.vocab) if Path(args.vocab).is_file() else
                                    Path(args.vocab) / "vocab.safetensors") if args.vocab else None
    if args.on_other_config == "restart" and dist.main and config_differs(out, cfg):
        checkpoints.discard(out)
    digest = guard_config(out, cfg, stage=ACTION, hint=(
        "use a fresh output directory, rerun with the original parameters, or pass "
        "on_other_config: restart to discard them")) if dist.main else None
    dist.barrier()

    on_gpu = device.type == "cuda"
    if args.attn == "flex" and not on_gpu:
        raise ActionError("--attn flex needs a GPU (its backward does not run on the CPU)")
    if on_gpu and args.compile_loss:
        from pipeline.eagle3.training.ttt import compile_loss

        compile_loss(True)
    if on_gpu and args.compile_blocks:
        drafter.compile_blocks()
    d_ids = torch.arange(drafter.d2t.numel()) + drafter.d2t
    verifier_head = verifier_matrix(Path(args.verifier), "lm_head")
    target_head = verifier_head[d_ids].float()
    drafter.to(device)
    model = TTTLoss(drafter, target_head.to(device), args.ttt_steps, args.step_decay, args.attn)
    train_model: Any = model
    if dist.world > 1:
        train_model = wrap_ddp(model, dist.local_rank if on_gpu else None)
    params = drafter.trainable_parameters()
    opt_kwargs: dict[str, Any] = {"lr": args.lr, "betas": (0.9, 0.95),
                                  "weight_decay": args.weight_decay}
    if on_gpu:
        opt_kwargs["fused"] = True
    optimizer = torch.optim.AdamW(params, **opt_kwargs)
    steps_per_epoch = len(data.epoch_batches(0, args.batch_size, args.batch_tokens, dist.rank,
                                             dist.world))
    if steps_per_epoch == 0:
        raise ActionError("no training batch: too few samples for the batch size and ranks",
                          where=str(args.hidden_states))
    total_steps = steps_per_epoch * args.epochs
    warmup = max(1, int(args.warmup_ratio * total_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total_steps, warmup, args.min_lr_ratio))

    start_epoch, history = checkpoints.resume(out, drafter, optimizer, scheduler, device)
    if start_epoch:
        log(f"[train] resuming after epoch {start_epoch} from {out / checkpoints.STATE}")
        if dist.main:
            for record in history:  # the resumed run's charts start where training did
                _epoch_series(record)
    heldout_head = verifier_head.to(device)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else
                torch.autocast("cpu", enabled=False))
    last_epoch = args.epochs if args.stop_after_epochs is None else min(args.epochs,
                                                                        args.stop_after_epochs)
    log(f"[train] {len(data.train)} train / {len(data.heldout)} held-out samples, "
        f"{steps_per_epoch} steps/epoch x {args.epochs} epochs, "
        + (f"P-EAGLE depths {args.ttt_steps} (mask token {drafter.config.mask_token_id}), "
           if drafter.config.parallel else f"ttt {args.ttt_steps}, ") +
        f"draft vocab {drafter.d2t.numel()}, {sum(p.numel() for p in params)} trainable "
        f"params, {device}, world {dist.world}")
    train_tokens = 0
    first_loss: float | None = None
    curve: list[float] = []
    t_train = time.perf_counter()
    step = start_epoch * steps_per_epoch  # optimizer steps so far: the charts' x
    for epoch in range(start_epoch, last_epoch):
        drafter.train()
        batches = data.epoch_batches(epoch, args.batch_size, args.batch_tokens, dist.rank,
                                     dist.world)
        # Online, one batch ahead: the verifier's forward for the next batch is queued
        # (its launches overlap the drafter's step) while this one trains.
        prefetch = Prefetcher(data, batches, pin=on_gpu, depth=1 if args.online else 4)
        acc_c = torch.zeros(args.ttt_steps, device=device)
        acc_n = torch.zeros(args.ttt_steps, device=device)
        loss_sum = torch.zeros((), device=device)
        t0 = time.perf_counter()
        tokens = 0
        logged = (0.0, 0)  # the loss sum and batch count at the last progress line
        try:
            for i, cpu_batch in enumerate(prefetch):
                b = cpu_batch.to(device)
                with autocast:
                    loss, correct, counted = train_model(b.aux, b.last, b.input_ids, b.loss_mask)
                loss.backward()
                if first_loss is None and epoch == 0 and i == 0:
                    first_loss = float(loss.detach())  # one sync, for comparisons
                if len(curve) < args.loss_curve:
                    curve.append(float(dist.all_sum(loss.detach().clone())) / dist.world)
                torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                # Accumulate on the device: reading a value back every step would stall
                # the GPU queue.
                loss_sum += loss.detach()
                acc_c += correct
                acc_n += counted
                tokens += cpu_batch.tokens
                step += 1
                at_log = (i + 1) % args.log_every == 0 or i + 1 == len(batches)
                if at_log:
                    _stop_if_diverged(loss_sum, dist, epoch, i + 1, len(batches),
                                      scheduler.get_last_lr()[0])
                if dist.main and at_log:
                    dt = time.perf_counter() - t0
                    accs = " ".join(f"{a:.3f}" for a in summarize(acc_c, acc_n))
                    total, lr, rate = float(loss_sum), scheduler.get_last_lr()[0], \
                        tokens * dist.world / dt
                    log(f"[train] epoch {epoch + 1} step {i + 1}/{len(batches)} loss "
                        f"{total / (i + 1):.4f} acc [{accs}] lr {lr:.2e} {rate:.0f} tokens/s")
                    # the chart's loss is the mean since the last point, not since the
                    # epoch began: a curve that does not restart each epoch
                    emit("loss", step, (total - logged[0]) / (i + 1 - logged[1]))
                    emit("lr", step, lr)
                    emit("tokens_per_s", step, rate)
                    logged = (total, i + 1)
        finally:
            prefetch.close()
        if on_gpu:
            torch.cuda.synchronize(device)
        epoch_seconds = time.perf_counter() - t0  # the training steps, not the evaluation
        train_tokens += tokens
        heldout = _evaluate(drafter, heldout_head, data, args, device, autocast, dist,
                            position_accuracy)
        record = {"epoch": epoch + 1, "train_loss": float(loss_sum) / max(1, len(batches)),
                  "train_acc": summarize(acc_c, acc_n), "heldout_acc": heldout,
                  "est_acceptance_length": acceptance_length(heldout),
                  "tokens_per_s": tokens * dist.world / (time.perf_counter() - t0),
                  "seconds": round(epoch_seconds, 2)}
        if dist.world > 1:
            flat = torch.cat([p.detach().float().flatten() for p in params])
            record["ranks_in_sync"] = dist.same_everywhere(
                torch.stack([flat.sum(), flat.abs().sum(), flat.pow(2).sum()]))
        history.append(record)
        if dist.main:
            _epoch_series(record)
            log(f"[train] epoch {epoch + 1} held-out per-position accuracy: " +
                " ".join(f"pos{k + 1} {a:.3f}" for k, a in enumerate(heldout)) +
                f" (est. acceptance length {record['est_acceptance_length']:.2f})")
            checkpoints.save(out, epoch + 1, drafter, optimizer, scheduler, history, digest,
                  save_checkpoint_weights)
        dist.barrier()
    # DDP and gloo objects sit in reference cycles; left to be collected in interpreter
    # shutdown they kill a rank with std::terminate (SIGABRT) after a good run: 7 of 30
    # runs of bench/eagle3/ddp_exit.py. Dist.close collects them before destroying the group.
    del train_model
    dist.close()

    finished = len(history) and history[-1]["epoch"] == args.epochs
    result.metrics["history"] = history
    if history:
        acc = history[-1]["heldout_acc"]
        result.metrics.update({f"heldout_acc_pos{k + 1}": round(a, 4)
                               for k, a in enumerate(acc)})
        result.metrics["est_acceptance_length"] = round(history[-1]["est_acceptance_length"], 3)
    result.metrics["epochs_done"] = history[-1]["epoch"] if history else 0
    timed = [h["seconds"] for h in history if "seconds" in h]
    if timed:  # this run's epochs (a resumed run's earlier ones keep their own record)
        result.metrics["epoch_seconds"] = round(sum(timed) / len(timed), 2)
    result.metrics["method"] = args.method
    if drafter.config.parallel:
        result.metrics["mask_token_id"] = drafter.config.mask_token_id
        result.metrics["mask_token_choice"] = drafter.config.mask_token_choice
    if first_loss is not None:
        result.metrics["first_step_loss"] = first_loss
    if curve:
        result.metrics["loss_curve"] = [round(x, 5) for x in curve]
    result.metrics["data"] = "online" if args.online else "shards"
    if args.online:
        data.close()
        result.metrics["memory_plan"] = plan.to_json()
        result.metrics["offline_bytes_avoided"] = data.offline_bytes
    result.metrics["train_seconds"] = round(time.perf_counter() - t_train, 2)
    from pipeline.eagle3.hardware.memory_plan import measured_peaks

    peaks = measured_peaks()  # this rank's devices: the verifier's too, online
    if peaks:
        result.metrics["device_peak_gib"] = peaks
    if train_tokens:
        result.metrics["train_tokens_per_s"] = round(
            train_tokens * dist.world / result.metrics["train_seconds"], 1)
    last = checkpoints.latest(out)
    if last is not None:
        result.artifacts.append(str(last))
    stopped_early = args.stop_after_epochs is not None and args.stop_after_epochs < args.epochs
    result.check("epochs", bool(finished) or stopped_early,
                 value=result.metrics["epochs_done"], expected=args.epochs,
                 message="stopped early on purpose (--stop-after-epochs)" if stopped_early
                 else "")
    if dist.world > 1:
        in_sync = all(h.get("ranks_in_sync", False) for h in history if "ranks_in_sync" in h)
        result.metrics["world_size"] = dist.world
        result.check("ranks_in_sync", in_sync, value=in_sync,
                     message="trainable weights identical on every rank after each epoch")
    acc1 = history[-1]["heldout_acc"][0] if history else 0.0
    result.check("heldout_acc_pos1", acc1 >= args.min_acc1, value=round(acc1, 4),
                 expected=f">= {args.min_acc1}",
                 message="drafter greedy token == verifier greedy token, position 1")
    result.summary = (f"train{' (P-EAGLE)' if drafter.config.parallel else ''}: epoch "
                      f"{result.metrics['epochs_done']}/{args.epochs}, held-out "
                      f"accuracy " + " ".join(f"pos{k + 1} {a:.3f}" for k, a in enumerate(
                          history[-1]["heldout_acc"] if history else [])))
    return result


def _stop_if_diverged(loss_sum, dist, epoch: int, step: int, steps: int, lr: float) -> None:
    """End the stage at the first progress point whose summed loss is not finite.

    A diverged drafter stays NaN for every later step (a 155M drafter at lr 6e-4 on a 3.1B
    verifier did, 2026-12-07): training on would spend the remaining epochs and then fail
    the accuracy check with no word of why. Checked where the progress line already reads
    the loss back, and summed over ranks so that every rank stops together."""
    import torch

    bad = dist.all_sum((~torch.isfinite(loss_sum)).float().reshape(1))
    if float(bad) > 0:
        raise ActionError(
            f"training diverged: the loss is not finite by epoch {epoch + 1} step "
            f"{step}/{steps} (lr {lr:.2e} there)",
            hint="lower --lr (a larger drafter needs a smaller one), or raise --warmup-ratio")


def _epoch_series(record: dict[str, Any]) -> None:
    """One epoch's points: held-out accuracy per position (the lines of one chart), the
    acceptance length it implies, and the epoch's training loss."""
    epoch = record["epoch"]
    for k, acc in enumerate(record["heldout_acc"]):
        emit("heldout_acc", epoch, acc, axis="epoch", labels={"position": k + 1})
    emit("est_acceptance_length", epoch, record["est_acceptance_length"], axis="epoch")
    emit("train_loss", epoch, record["train_loss"], axis="epoch")


def _evaluate(drafter, verifier_head, data, args, device, autocast, dist, position_accuracy):
    import torch

    drafter.eval()
    correct = torch.zeros(args.ttt_steps, device=device)
    counted = torch.zeros(args.ttt_steps, device=device)
    batches = data.eval_batches(args.batch_size, args.batch_tokens)[: args.eval_batches]
    for batch in batches[dist.rank::dist.world]:
        b = data.load(batch).to(device)
        with autocast:
            c, n = position_accuracy(drafter, verifier_head, b.aux, b.last, b.input_ids,
                                     b.loss_mask, args.ttt_steps, args.attn)
        correct += c
        counted += n
    dist.all_sum(correct)
    dist.all_sum(counted)
    return [float(c) / float(n) if float(n) else 0.0 for c, n in zip(correct, counted, strict=True)]


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv, setup=use_threads)


if __name__ == "__main__":
    raise SystemExit(main())
