"""eagle3.serve with a P-EAGLE drafter: ``parallel_drafting`` in the speculative config
vLLM gets, decided from the drafter's config, and the choices it was not trained for
refused before any server starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.actions import params_to_argv, read_result
from pipeline.eagle3 import serve
from pipeline.vllm.server import port_in_use, serve_argv
from pipeline.vllm.service import stop_group
from tests.serve.helpers import FAKE_COMMAND, kill_fakes, make_models
from tests.sshd import free_port


def _peagle(draft: Path) -> Path:
    """The drafter's files under a speculators peagle config, as eagle3.export writes it."""
    peagle = draft.parent / "peagle"
    peagle.mkdir()
    (peagle / "model.safetensors").write_bytes((draft / "model.safetensors").read_bytes())
    layer = json.loads((draft / "config.json").read_text())
    (peagle / "config.json").write_text(json.dumps({
        "architectures": ["PEagleSpeculator"], "speculators_model_type": "peagle",
        "transformer_layer_config": layer, "draft_vocab_size": 100, "mask_token_id": 0,
        "speculators_config": {"algorithm": "peagle", "proposal_methods": [
            {"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": {"name_or_path": "verifier"}}}))
    return peagle


def _serve(tmp_path: Path, port: int, **params) -> tuple[int, object]:
    result = tmp_path / f"serve-{port}.json"
    rc = serve.main([*params_to_argv({"port": port, "command": FAKE_COMMAND,
                                      "health_timeout": 60, "stop_grace": 3, **params}),
                     "--result", str(result)])
    return rc, read_result(result)


def test_serve_argv_asks_for_parallel_drafting() -> None:
    argv = serve_argv(["vllm"], "/m/verifier", port=8002, draft="/m/peagle",
                      parallel_drafting=True)
    assert json.loads(argv[-1]) == {"method": "eagle3", "model": "/m/peagle",
                                    "num_speculative_tokens": 3,
                                    "draft_tensor_parallel_size": 1, "parallel_drafting": True}


def test_a_peagle_drafter_is_served_with_parallel_drafting(tmp_path: Path, capsys) -> None:
    target, draft = make_models(tmp_path / "models")
    port = free_port()
    try:
        rc, result = _serve(tmp_path, port, target=str(target), draft=str(_peagle(draft)),
                            extra_args=["--fake-step-ms", "1"])
        assert rc == 0, result.error
        # the runner it will get, said before it starts (the served step is that runner's)
        assert "note: vLLM 0.26 serves parallel drafting on its V1 model runner" in (
            capsys.readouterr().out)
        assert result.metrics["parallel_drafting"] is True
        assert '"parallel_drafting":true' in result.metrics["command"]
        assert "P-EAGLE, parallel drafting, k=3" in result.summary
        service = result.metrics["service"]
        stop_group(service["pgid"], 3.0, service["start_time"])
    finally:
        kill_fakes(port)


@pytest.mark.parametrize("which, flag, says", [
    ("peagle", False, "the drafter is a P-EAGLE drafter (speculators peagle)"),
    ("eagle", True, "parallel drafting needs a P-EAGLE drafter"),
])
def test_a_drafting_mode_the_drafter_was_not_trained_for_is_refused(tmp_path: Path, which,
                                                                    flag, says) -> None:
    target, draft = make_models(tmp_path / "models")
    chosen = _peagle(draft) if which == "peagle" else draft
    port = free_port()
    rc, result = _serve(tmp_path, port, target=str(target), draft=str(chosen),
                        parallel_drafting=flag)
    assert rc == 1 and result.error.startswith(f"{chosen / 'config.json'}: {says}")
    assert not port_in_use(port)
