"""What the serving vLLM says about a checkpoint, asked the way a user asks it:
``harness verify CHECKPOINT --vllm-python PY`` from any directory, PY being another
environment's Python that cannot import this project; and the answers that follow vLLM
0.33's own code (norm_before_residual's default, the weights its loader fills, the
version read from package metadata)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.eagle3.checks.compat import compatibility_checks
from pipeline.eagle3.model.checkpoint_files import VerifierInfo, read_layout
from pipeline.vllm.compat import compat_checks, package_version
from tests.serve.helpers import STANDIN_VLLM, other_python

from .conftest import checks, run_verify, verify_params

pytestmark = pytest.mark.ml


@pytest.fixture(scope="session")
def standin_python(tmp_path_factory) -> Path:
    """Another environment with a vLLM of the newest shape (no model-type list, the target
    class decides through SupportsEagle3): the stand-in package on its path, not ours."""
    root = tmp_path_factory.mktemp("vllm-env")
    return other_python(root / "venv", paths=[STANDIN_VLLM / "interface"])


def harness_elsewhere(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`harness ARGS` as a user runs it: from another directory, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)


def test_the_other_environment_cannot_import_this_project(standin_python, tmp_path):
    probe = subprocess.run([str(standin_python), "-c", "import vllm, pipeline"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert "No module named 'pipeline'" in probe.stderr


def test_verify_with_vllm_python_from_another_directory(good, standin_python, tmp_path):
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    r = harness_elsewhere(["--db", str(tmp_path / "state.db"), "verify", str(good["dir"]),
                           "--verifier", str(good["verifier"]), "--no-functional",
                           "--vllm-python", str(standin_python), "--no-record", "--json"],
                          elsewhere)
    assert r.returncode == 0, r.stderr
    by = {c["name"]: c for c in json.loads(r.stdout)["result"]["checks"]}
    assert by["vllm_source"]["passed"] and by["vllm_source"]["value"] == "0.21.0", \
        by["vllm_source"]
    assert "implements SupportsEagle3" in by["vllm_eagle3_target"]["message"]
    assert "FALLBACK" not in by["vllm_eagle3_target"]["message"]
    # The stand-in has no config classes to build vLLM's drafter with: the weights answer
    # comes from the table, and says why.
    assert by["vllm_weights"]["passed"]
    assert "could not be asked" in by["vllm_weights"]["message"]
    # ...and so it alone is shown apart from what vLLM answered
    assert [n for n, c in by.items() if c["from_table"]] == ["vllm_weights"]
    out = json.loads(r.stdout)["result"]
    assert out["metrics"]["vllm_checks_from_table"] == 1
    assert out["summary"].endswith("all checks passed; 1 vLLM check from the table: install "
                                   "vLLM to check it for real")
    assert not list(elsewhere.iterdir())  # nothing left behind in the caller's directory


def test_a_broken_vllm_install_is_not_called_missing(tmp_path, good):
    """vLLM is there but its import fails: the message says so, not 'install it'."""
    broken = tmp_path / "broken"
    (broken / "vllm").mkdir(parents=True)
    (broken / "vllm" / "__init__.py").write_text("raise RuntimeError('libcudart.so.13: "
                                                 "cannot open shared object file')\n")
    python = other_python(tmp_path / "venv", paths=[broken])
    cfg = VerifierInfo.read(good["verifier"]).config
    checks_, _ = compat_checks(cfg, read_layout(good["dir"]).raw, python=str(python))
    msg = checks_[0].message
    assert not checks_[0].passed and "libcudart.so.13" in msg
    assert "failed to import" in msg and "pip install vllm" not in msg


def test_the_version_comes_from_package_metadata_when_vllm_version_crashes(tmp_path, good):
    """On a machine without a GPU, `vllm --version` dies inferring the device; the
    interpreter behind the command still knows its version from the package metadata."""
    crash = ("import sys\nprint('Traceback (most recent call last):', file=sys.stderr)\n"
             "print('RuntimeError: Failed to infer device type', file=sys.stderr)\n"
             "sys.exit(1)\n")
    other_python(tmp_path / "venv", dists={"vllm": "0.33.0"}, scripts={"vllm": crash})
    command = [str(tmp_path / "venv" / "bin" / "vllm")]
    assert subprocess.run([*command, "--version"], capture_output=True).returncode == 1
    assert package_version(command) == "0.33.0"
    cfg = VerifierInfo.read(good["verifier"]).config
    _checks, answer = compat_checks(cfg, read_layout(good["dir"]).raw, command=command)
    assert answer["source"] == "fallback" and answer["version"] == "0.33.0"
    assert answer["era"] == "0.21.0..newest"
    assert "read from vLLM 0.33.0's code" in answer["target"]["reason"]


def _edit_config(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_speculators_without_norm_before_residual_is_read_as_vllm_reads_it(good, tmp_path):
    """vLLM's speculators reader defaults norm_before_residual to true; an EAGLE-style
    config without the key is read with false."""
    from pipeline.eagle3 import export
    from tests.eagle3.conftest import ok

    ok(export, tmp_path, checkpoint=good["train"], out=tmp_path / "spec",
       format="speculators", dtype="bfloat16")
    assert read_layout(tmp_path / "spec").norm_before_residual is False  # written: false
    bare = _edit_config(tmp_path / "spec", tmp_path / "spec-bare", norm_before_residual=None)
    assert read_layout(bare).norm_before_residual is True
    eagle = _edit_config(good["dir"], tmp_path / "eagle-bare", norm_before_residual=None)
    assert read_layout(eagle).norm_before_residual is False
    v = VerifierInfo.read(good["verifier"])
    compat, _ = compatibility_checks(v, read_layout(bare), bare)
    norm = next(c for c in compat if c.name == "vllm_norm_flags")
    assert norm.value is True and "defaults it to true" in norm.message


def test_the_weights_vllm_fills_and_those_it_takes_from_the_target(good, variants):
    """Without vLLM here the table answers: the good export fills every parameter but the
    embeddings, which come from the target; a missing d2t or norm stays at vLLM's initial
    value, silently, which the check names."""
    v = VerifierInfo.read(good["verifier"])

    def weights(d: Path):
        compat, metrics = compatibility_checks(v, read_layout(d), d)
        return next(c for c in compat if c.name == "vllm_weights"), \
            metrics["vllm_weight_sources"]

    check, sources = weights(good["dir"])
    assert check.passed, check.message
    assert sources["source"] == "table" and check.message.startswith("FALLBACK")
    assert sources["target"] == ["model.embed_tokens.weight"]
    assert sources["ignored"] == ["t2d"] and sources["initial"] == []
    assert sorted(sources["checkpoint"]["model.layers.0.self_attn.qkv_proj.weight"]) == [
        "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.q_proj.weight",
        "midlayer.self_attn.v_proj.weight"]
    assert len(sources["checkpoint"]) == 11
    check, _ = weights(variants("no_d2t"))
    assert not check.passed
    assert "draft_id_to_target_id at its initial value (zeros: the identity map)" \
        in check.message


def test_a_missing_norm_is_named_by_the_weights_check(good, tmp_path):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "no-norm"
    shutil.copytree(good["dir"], d)
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["norm.weight"]
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    rc, result = run_verify(tmp_path, verify_params(good, d, functional=False))
    c = checks(result)
    assert rc == 1 and not c["vllm_weights"].passed
    assert "model.norm.weight at its initial value (ones)" in c["vllm_weights"].message
    assert not c["keys"].passed  # the structural layer says it too
