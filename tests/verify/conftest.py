"""One good tiny drafter checkpoint, built once with the EAGLE-3 stages, and broken copies.

The stages run in-process as the runner starts them (``tests.eagle3.conftest`` helpers): a
tiny reasoning verifier (7 layers, hidden 64), 600 synthetic chats, vocab mapping, five
epochs of drafter training, export in vLLM's EAGLE format. Larger than the EAGLE-3 tests'
own fixture: a drafter must be good enough (acceptance length ~3 at k=3) for "it fell" to
be measurable. Held-out prompts are the verifier stage's prompt file (another seed than
the drafter's samples). Each broken variant is a copy of the good directory with one
thing changed, the way such checkpoints arise in practice (``VARIANTS``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from pipeline.actions import StageResult, params_to_argv, read_result  # noqa: E402
from tests.eagle3.conftest import ok, run_stage, synthetic_samples, write_jsonl  # noqa: E402

# Small enough for the test budget, large enough for stable acceptance figures.
FUNCTIONAL = {"samples": 10, "max_new_tokens": 64, "k": 3, "device": "cpu", "threads": 2}


@pytest.fixture(scope="session")
def good(tmp_path_factory) -> dict[str, Any]:
    from pipeline.eagle3 import clean, export, hidden_states, tokenize, train, verifier, vocab

    root = tmp_path_factory.mktemp("verify-good")
    rc, result = run_stage(
        verifier, root, out=root / "verifier", prompts_out=root / "prompts.jsonl", prompts=24,
        seed=0, vocab_size=400, corpus_files=6, hidden_size=64, layers=7, heads=4, kv_heads=2,
        intermediate_size=128, train_samples=2000, steps=120, batch_size=32, lr=0.003,
        check_prompts=4, min_reasoning_rate=0.0, device="cpu")
    assert rc == 0 and result is not None and result.ok, result
    v = root / "verifier"
    samples = write_jsonl(root / "generated" / "samples.jsonl", synthetic_samples(600, 1))
    ok(clean, root, samples=samples, out=root / "clean", require_think=True)
    ok(tokenize, root, samples=root / "clean", verifier=v, out=root / "tokens")
    ok(hidden_states, root, tokens=root / "tokens", verifier=v, out=root / "hidden",
       shard_tokens=8000, batch_tokens=2048, device="cpu", dtype="float32")
    ok(vocab, root, freqs=root / "tokens", verifier=v, draft_vocab=128,
       out=root / "vocab.safetensors")
    ok(train, root, hidden_states=root / "hidden", verifier=v, vocab=root / "vocab.safetensors",
       out=root / "train", epochs=5, ttt_steps=3, lr=0.003, batch_size=16, batch_tokens=2048,
       holdout=0.1, device="cpu", log_every=1000)
    ok(export, root, checkpoint=root / "train", out=root / "drafter", format="eagle",
       dtype="bfloat16")
    return {"dir": root / "drafter", "verifier": v, "prompts": root / "prompts.jsonl",
            "exclude": samples, "train": root / "train", "root": root}


def verify_params(good: dict[str, Any], checkpoint: Path, functional: bool = True,
                  **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"checkpoint": checkpoint, "verifier": good["verifier"],
                              "functional": functional}
    if functional:
        params.update(data=good["prompts"], exclude=good["exclude"], **FUNCTIONAL)
    return {**params, **extra}


def run_verify(tmp: Path, params: dict[str, Any], capsys: Any = None
               ) -> tuple[int, StageResult | None]:
    """The stage's own ``main``, as the runner starts it; returns (exit code, result)."""
    from pipeline.eagle3 import verify

    result = Path(tmp) / "verify-result.json"
    if result.exists():
        result.unlink()
    rc = verify.main([*params_to_argv(params), "--result", str(result)])
    return rc, (read_result(result) if result.exists() else None)


def checks(result: StageResult) -> dict[str, Any]:
    return {c.name: c for c in result.checks}


# -- broken variants -----------------------------------------------------------------------

def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_tensors(d: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    path = d / "model.safetensors"
    tensors = load_file(str(path))
    fn(tensors)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path),
              metadata={"format": "pt"})


def _edit_config(d: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    path = d / "config.json"
    cfg = json.loads(path.read_text())
    fn(cfg)
    path.write_text(json.dumps(cfg, indent=2))


def _no_d2t(t: dict[str, Any]) -> None:
    del t["d2t"]


def _d2t_absolute(t: dict[str, Any]) -> None:
    t["d2t"] = torch.arange(t["d2t"].numel()) + t["d2t"]


def _t2d_count(t: dict[str, Any]) -> None:
    t2d = t["t2d"].clone()
    t2d[(~t2d).nonzero()[0]] = True  # one more target id marked than there are draft ids
    t["t2d"] = t2d


def _fc_transposed(t: dict[str, Any]) -> None:
    t["fc.weight"] = t["fc.weight"].T.contiguous()


def _nan_layer(t: dict[str, Any]) -> None:
    w = t["midlayer.mlp.down_proj.weight"].clone()
    w[0, :3] = float("nan")
    t["midlayer.mlp.down_proj.weight"] = w


def _lm_head_permuted(t: dict[str, Any]) -> None:
    g = torch.Generator().manual_seed(1)
    t["lm_head.weight"] = t["lm_head.weight"][torch.randperm(t["lm_head.weight"].shape[0],
                                                             generator=g)]


def _random_weights(t: dict[str, Any]) -> None:
    """What a drafter that never trained looks like: fresh fc and decoder layer."""
    g = torch.Generator().manual_seed(7)
    for name, w in list(t.items()):
        if name == "fc.weight" or (name.startswith("midlayer.")
                                   and name.endswith("proj.weight")):
            t[name] = (torch.randn(w.shape, generator=g) / w.shape[1] ** 0.5).to(w.dtype)


def _wrong_arch(c: dict[str, Any]) -> None:
    c["architectures"] = ["LlamaForCausalLM"]


def _draft_vocab_larger(c: dict[str, Any]) -> None:
    c["draft_vocab_size"] = c["vocab_size"] + 64


def _hidden_mismatch(c: dict[str, Any]) -> None:
    c["target_hidden_size"] = c["hidden_size"] * 2


def _aux_off_by_one(c: dict[str, Any]) -> None:
    """The SpecForge mistake: its configs count layers one lower than vLLM reads them."""
    shifted = [a - 1 for a in c["eagle_aux_hidden_state_layer_ids"]]
    c["eagle_aux_hidden_state_layer_ids"] = shifted
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = shifted


# name -> (edit tensors, edit config)
VARIANTS: dict[str, tuple[Callable | None, Callable | None]] = {
    "no_d2t": (_no_d2t, None),
    "d2t_absolute": (_d2t_absolute, None),
    "t2d_count": (_t2d_count, None),
    "fc_transposed": (_fc_transposed, None),
    "nan_layer": (_nan_layer, None),
    "wrong_arch": (None, _wrong_arch),
    "draft_vocab_larger": (None, _draft_vocab_larger),
    "hidden_mismatch": (None, _hidden_mismatch),
    "lm_head_permuted": (_lm_head_permuted, None),
    "aux_off_by_one": (None, _aux_off_by_one),
    "random_weights": (_random_weights, None),
}


def make_variant(good_dir: Path, name: str, dst: Path) -> Path:
    tensors, config = VARIANTS[name]
    d = _copy(good_dir, dst / name)
    if tensors:
        _edit_tensors(d, tensors)
    if config:
        _edit_config(d, config)
    return d


@pytest.fixture(scope="session")
def variants(good, tmp_path_factory) -> Callable[[str], Path]:
    root = tmp_path_factory.mktemp("verify-variants")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = make_variant(good["dir"], name, root)
        return made[name]
    return get
