"""One good tiny drafter checkpoint, built with the EAGLE-3 stages, and broken copies.

``tests.verify.build_good`` runs the stages as the runner starts them: a tiny reasoning
verifier (7 layers, hidden 64), 600 synthetic chats, vocab mapping, five epochs of drafter
training, export in vLLM's EAGLE format. Larger than the EAGLE-3 tests' own fixture: a
drafter must be good enough (acceptance length ~3 at k=3) for "it fell" to be measurable.
It is cached between sessions while the files the build imports are unchanged, so a
loaded machine pays for it once. Held-out prompts are the verifier stage's prompt file
(another seed than the drafter's samples). Each broken variant is a copy of the good
directory with one thing changed, the way such checkpoints arise in practice
(``VARIANTS``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from pipeline.actions import StageResult, params_to_argv, read_result  # noqa: E402

# Small enough for the test budget, large enough for stable acceptance figures.
FUNCTIONAL = {"samples": 6, "max_new_tokens": 48, "k": 3, "device": "cpu", "threads": 1}


_BUILDING: list[subprocess.Popen] = []


def _cache_dir(config: pytest.Config) -> Path | None:
    cache = getattr(config, "cache", None)
    return Path(cache.mkdir("verify-good")) if cache is not None else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tests that need the good drafter were collected: start building it now (when the
    cache has no valid one), so that in a full run it overlaps the tests before them."""
    from tests.verify.build_good import start

    cache_dir = _cache_dir(session.config)
    if cache_dir is None or session.config.option.collectonly:
        return
    if any("good" in getattr(item, "fixturenames", ()) for item in session.items):
        proc = start(cache_dir, cache_dir / "build.log")
        if proc is not None:
            _BUILDING.append(proc)


def pytest_sessionfinish(session: pytest.Session) -> None:
    for proc in _BUILDING:  # a session that ended first (-x, Ctrl-C): stop the build
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)


@pytest.fixture(scope="session")
def good(request, tmp_path_factory) -> dict[str, Any]:
    """Built once (``tests.verify.build_good``: about 60 s on a quiet 2-core machine, 130 s
    with the machine fully loaded) and kept in pytest's cache until a file the build
    imports changes; a session without the cache plugin builds it in a temporary
    directory."""
    from tests.verify.build_good import cached

    return cached(_cache_dir(request.config), tmp_path_factory.mktemp("verify-good"))


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


LISTED = [4, 2, 3]  # a non-ascending order: vLLM feeds the states as [2, 3, 4] whatever


def _fc_blocks_in_listed_order(t: dict[str, Any]) -> None:
    """fc as a drafter trained with ``--aux-layers 4,2,3`` in config order has it: its
    input column blocks take h4, h2, h3 (the good drafter's blocks take h2, h3, h4)."""
    w = t["fc.weight"]
    blocks = dict(zip([2, 3, 4], w.chunk(3, dim=1), strict=True))
    t["fc.weight"] = torch.cat([blocks[a] for a in LISTED], dim=1).contiguous()


def _aux_listed(c: dict[str, Any]) -> None:
    c["eagle_aux_hidden_state_layer_ids"] = list(LISTED)
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(LISTED)


def _aux_repeated(c: dict[str, Any]) -> None:
    """What the default [2, N//2, N-3] gives on a 6-layer verifier: [2, 3, 3]."""
    c["eagle_aux_hidden_state_layer_ids"] = [2, 3, 3]
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 3, 3]


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
    # trained in the listed order [4, 2, 3]: vLLM feeds it permuted states
    "aux_order_trained": (_fc_blocks_in_listed_order, _aux_listed),
    # the good drafter with its ids listed as [4, 2, 3]: vLLM serves it as before
    "aux_order_listed": (None, _aux_listed),
    "aux_repeated": (None, _aux_repeated),
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
