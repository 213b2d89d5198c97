"""Write examples/kimi-k25-campaign.jsonl: the seed's campaign as an exported session.

The story (shared/seed): an agent (opencode) drives an EAGLE-3 drafter campaign for
Kimi-K2.5 on a GPU container over four days. The data fixes and the 10K-sample inference
complete, the vocab mapping is done, the checkpoint passes a *structural* check, the vLLM
integration is blocked by vLLM's eagle3 model-type whitelist and unblocked by a patch,
the benchmark is blocked at 15% acceptance and 0.66x throughput, and the pivot to SGLang
is added. People (``human``) and the pipeline runner (``runner``) write to the same list.

Everything goes through the harness's own code: agent lists through ``todowrite`` (the
three-way merge), people's changes through ``harness.todos``, the runner's runs and
verifications through the store's write transactions. Only the clock is set, so that the
events carry the story's times; the output is byte-for-byte reproducible:

    python scripts/make_kimi_campaign.py [-o examples/kimi-k25-campaign.jsonl]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import state.store as store_mod
import state.tx as tx_mod
from harness import formats
from harness import todos as uc
from harness.agents.todolist import todowrite
from harness.export import export_lines
from state.store import Store

SESSION = "kimi-k25-campaign"
AGENT = "agent:opencode"
START = datetime(2026, 2, 9, 8, 40, tzinfo=timezone.utc)

FIX = "Fix 01b_generate_synthetic.py: reasoning reassembly with <think>/</think> tokens"
CLEAN = "Clean up bad data (/data/eagle3/synth_25k/) on container"
INFER = "SCP fixed script to container and restart inference (10K samples)"
VOCAB = "Run vocab mapping (03_build_vocab_mapping.py, draft vocab 32000)"
HIDDEN = "Extract hidden states (aux layers 2, 30, 58) for the 10K samples"
TRAIN = "Train EAGLE-3 drafter, 5 epochs, warm start from the AQ-MedAI checkpoint"
CKPT = "Verify checkpoint format for vLLM (layers.0.* keys, config.json, d2t/t2d)"
VLLM = "Start vLLM with EAGLE-3 speculative decoding on Kimi-K2.5"
BENCH = "Benchmark speculative decoding throughput against no speculation"
SGLANG = "Pivot: serve the drafter with SGLang (SpecForge-style config) and re-measure"


class Clock:
    """The story's clock: each event a little after the one before."""

    def __init__(self) -> None:
        self.now = START

    def at(self, days: int = 0, hours: float = 0, minutes: float = 0) -> str:
        target = START + timedelta(days=days, hours=hours, minutes=minutes)
        self.now = max(self.now + timedelta(seconds=1), target)
        return self.iso()

    def iso(self) -> str:
        return self.now.isoformat(timespec="microseconds").replace("+00:00", "Z")

    def __call__(self) -> str:
        self.now += timedelta(milliseconds=250)
        return self.iso()


def agent_list(store: Store, sid: int, clock: Clock, when: str,
               items: list[tuple[str, str, str]]) -> None:
    """One opencode todowrite: the agent's whole list."""
    payload = {"todos": [{"content": c, "status": s, "priority": p} for c, s, p in items]}
    todowrite(store, sid, formats.parse(payload, "opencode"), actor=AGENT, ts=when,
              ref=f"call_{when[:19].replace('-', '').replace(':', '').replace('T', '_')}")


def num_of(store: Store, sid: int, content: str) -> int:
    return next(t.num for t in store.todos(sid) if t.content == content)


def build(store: Store, clock: Clock) -> int:
    # Every event without an explicit time takes the story's clock.
    store_mod.utcnow = tx_mod.utcnow = clock
    clock.at(0, 0)
    sid = store.create_session(SESSION, actor="human", pipeline="eagle3-remote")

    # Day 1: the data bug (reasoning dropped from the training text) is found and fixed.
    H, P, IP, C = "high", "pending", "in_progress", "completed"
    agent_list(store, sid, clock, clock.at(0, 0, 5), [
        (FIX, IP, H), (CLEAN, P, H), (INFER, P, H), (VOCAB, P, H), (HIDDEN, P, H),
        (TRAIN, P, H), (CKPT, P, "medium"), (VLLM, P, H), (BENCH, P, "medium")])
    clock.at(0, 0, 20)
    uc.note(store, sid, num_of(store, sid, FIX), "reasoning_content must go back as "
            "<think>...</think> before the answer, through the Kimi chat template")
    agent_list(store, sid, clock, clock.at(0, 1, 10), [
        (FIX, C, H), (CLEAN, IP, H), (INFER, P, H), (VOCAB, P, H), (HIDDEN, P, H),
        (TRAIN, P, H), (CKPT, P, "medium"), (VLLM, P, H), (BENCH, P, "medium")])
    agent_list(store, sid, clock, clock.at(0, 1, 25), [
        (FIX, C, H), (CLEAN, C, H), (INFER, IP, H), (VOCAB, P, H), (HIDDEN, P, H),
        (TRAIN, P, H), (CKPT, P, "medium"), (VLLM, P, H), (BENCH, P, "medium")])

    # The runner: 10K samples of inference on the container, 5.3 hours.
    infer = num_of(store, sid, INFER)
    clock.at(0, 1, 30)
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=infer, host="gpu", stage="generate",
                           command="python 01b_generate_synthetic.py --samples 10000")
        tx.update_run(run.id, state="running", pid=48213, started_at=clock.iso(),
                      run_dir="/data/eagle3/runs/r1")
    clock.at(0, 6, 48)
    with store.write(sid, "runner") as tx:
        tx.update_run(run.id, state="succeeded", exit_code=0, ended_at=clock.iso(),
                      result={"samples": 10000, "errors": 0, "hours": 5.3})
        tx.record_verification(todo_id=infer, run_id=run.id, kind="reasoning_capture",
                               passed=True, verdict="10000/10000 samples keep their "
                               "<think> block (100% reasoning capture), 0 errors",
                               checks=[{"name": "reasoning_capture", "passed": True}],
                               metrics={"samples": 10000, "errors": 0, "capture": 1.0})
        tx.update_todo(infer, status="completed")

    # Day 2: vocab mapping, hidden states, training.
    agent_list(store, sid, clock, clock.at(1, 0, 15), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, IP, H), (HIDDEN, P, H),
        (TRAIN, P, H), (CKPT, P, "medium"), (VLLM, P, H), (BENCH, P, "medium")])
    agent_list(store, sid, clock, clock.at(1, 0, 50), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, IP, H),
        (TRAIN, P, H), (CKPT, P, "medium"), (VLLM, P, H), (BENCH, P, "medium")])
    agent_list(store, sid, clock, clock.at(1, 4, 40), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, C, H),
        (TRAIN, IP, H), (CKPT, P, "medium"), (VLLM, P, H), (BENCH, P, "medium")])
    train = num_of(store, sid, TRAIN)
    clock.at(1, 4, 45)
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=train, host="gpu", stage="train",
                           command="python 05_train_eagle3.py --epochs 5 "
                                   "--init AQ-MedAI/Kimi-K2-Instruct-eagle3")
        tx.update_run(run.id, state="running", pid=51177, started_at=clock.iso())
    clock.at(1, 7, 21)
    with store.write(sid, "runner") as tx:
        tx.update_run(run.id, state="succeeded", exit_code=0, ended_at=clock.iso(),
                      result={"epochs": 5, "minutes": 155.2, "checkpoint_gb": 4.5})
        tx.record_artifact(todo_id=train, run_id=run.id, path="/data/eagle3/ckpt/epoch_4",
                           size=4_831_838_208, kind="checkpoint")

    # Message 2997: the checkpoint "looks right", and four items are marked done.
    agent_list(store, sid, clock, clock.at(1, 7, 40), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, C, H),
        (TRAIN, C, H), (CKPT, IP, "medium"), (VLLM, P, H), (BENCH, P, "medium")])
    ckpt = num_of(store, sid, CKPT)
    clock.at(1, 7, 52)
    with store.write(sid, "runner") as tx:
        tx.record_verification(todo_id=ckpt, kind="checkpoint", passed=True,
                               artifact="/data/eagle3/ckpt/epoch_4",
                               verdict="structure only: layers.0.* keys, "
                                       "LlamaForCausalLMEagle3, d2t/t2d present; "
                                       "acceptance not measured",
                               checks=[{"name": "keys", "passed": True},
                                       {"name": "config", "passed": True},
                                       {"name": "d2t_t2d", "passed": True}],
                               metrics={"draft_vocab": 32000, "target_vocab": 163840})
    agent_list(store, sid, clock, clock.at(1, 8, 0), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, C, H),
        (TRAIN, C, H), (CKPT, C, "medium"), (VLLM, IP, H), (BENCH, P, "medium")])

    # The very next step: vLLM refuses eagle3 for model_type kimi_k2.
    vllm = num_of(store, sid, VLLM)
    clock.at(1, 8, 6)
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=vllm, host="gpu", stage="serve",
                           command="vllm serve moonshotai/Kimi-K2.5 --speculative-config "
                                   "'{\"method\":\"eagle3\",\"model\":\"/data/eagle3/ckpt/"
                                   "epoch_4\",\"num_speculative_tokens\":3}'")
        tx.update_run(run.id, state="running", pid=53002, started_at=clock.iso())
    clock.at(1, 8, 9)
    reason = ("vLLM 0.16 accepts eagle3 only for model types ['llama', 'qwen', 'minicpm', "
              "'gpt_oss', 'hunyuan_vl', 'hunyuan_v1_dense', 'afmoe']; Kimi-K2.5 is kimi_k2")
    with store.write(sid, "runner") as tx:
        tx.update_run(run.id, state="failed", exit_code=1, ended_at=clock.iso(),
                      reason=reason)
        tx.update_todo(vllm, status="blocked", blocked_reason=reason)
    clock.at(1, 8, 30)
    patch = uc.add(store, sid, "Patch vLLM's eagle3 model-type whitelist: add kimi_k2 and "
                   "deepseek_v3", priority="high").num
    uc.set_status(store, sid, patch, "in_progress")
    # The agent's format cannot say "blocked": its next list shows the item as pending,
    # and the merge keeps it blocked.
    agent_list(store, sid, clock, clock.at(1, 8, 41), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, C, H),
        (TRAIN, C, H), (CKPT, C, "medium"), (VLLM, P, H), (BENCH, P, "medium")])
    clock.at(1, 9, 5)
    uc.set_status(store, sid, patch, "completed")
    uc.note(store, sid, patch, "patched speculative config check on the container; "
            "kimi_k2 and deepseek_v3 added")
    clock.at(1, 9, 7)
    uc.unblock(store, sid, vllm)
    agent_list(store, sid, clock, clock.at(1, 9, 20), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, C, H),
        (TRAIN, C, H), (CKPT, C, "medium"), (VLLM, IP, H), (BENCH, P, "medium")])
    agent_list(store, sid, clock, clock.at(1, 10, 2), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, C, H),
        (TRAIN, C, H), (CKPT, C, "medium"), (VLLM, C, H), (BENCH, IP, "medium")])

    # Day 3: the benchmark. Function, not form: 15% acceptance, 0.66x throughput.
    bench = num_of(store, sid, BENCH)
    clock.at(2, 1, 0)
    uc.set_priority(store, sid, bench, "high")
    clock.at(2, 1, 5)
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=bench, host="gpu", stage="benchmark",
                           command="python bench_spec.py --prompts 200 --k 3")
        tx.update_run(run.id, state="running", pid=60114, started_at=clock.iso())
    clock.at(2, 2, 40)
    metrics = {"acceptance_rate": 0.15, "mean_acceptance_length": 1.45,
               "throughput_ratio": 0.66, "baseline_drafter_acceptance": 0.15}
    why = ("gate failed: acceptance 15% (trained drafter and AQ-MedAI baseline alike), "
           "throughput 0.66x of no speculation (need >= 1.1x)")
    with store.write(sid, "runner") as tx:
        tx.update_run(run.id, state="succeeded", exit_code=0, ended_at=clock.iso(),
                      result=metrics)
        tx.record_verification(todo_id=bench, run_id=run.id, kind="benchmark", passed=False,
                               verdict=why, metrics=metrics,
                               gate={"min_projected_speedup": 1.1,
                                     "min_acceptance_length": 2.0})
        tx.update_todo(bench, status="blocked", blocked_reason=why)
    clock.at(2, 3, 0)
    uc.note(store, sid, bench, "the checkpoint check passed on structure alone; "
            "'looks right' is not 'works'")

    # The pivot: the agent adds SGLang; people keep the vLLM lesson on the list.
    agent_list(store, sid, clock, clock.at(2, 3, 20), [
        (FIX, C, H), (CLEAN, C, H), (INFER, C, H), (VOCAB, C, H), (HIDDEN, C, H),
        (TRAIN, C, H), (CKPT, C, "medium"), (VLLM, C, H), (BENCH, P, H), (SGLANG, IP, H)])
    clock.at(3, 0, 30)
    uc.add(store, sid, "Check hidden-state layer ids (HF output_hidden_states vs SGLang "
           "off-by-one) before retraining", priority="high")
    return sid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("-o", "--output", type=Path,
                    default=root / "examples" / "kimi-k25-campaign.jsonl")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kimi-campaign-") as tmp:
        store = Store.open(str(Path(tmp) / "state.db"))
        real_clock = tx_mod.utcnow
        try:
            sid = build(store, Clock())
            lines = list(export_lines(store, sid))
        finally:
            store_mod.utcnow = tx_mod.utcnow = real_clock
            store.close()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.output} ({len(lines)} lines)")


if __name__ == "__main__":
    main()
