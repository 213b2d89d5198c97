"""`harness check` says how much disk a spec's offline hidden states would need."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from pipeline.eagle3.plan.disk_estimate import estimates
from pipeline.eagle3.text.datafiles import read_tokens
from pipeline.spec.load import load_spec
from tests.conftest import example_copy, run_cli

pytestmark = pytest.mark.ml


def test_tiny_example_bound_from_the_spec(tmp_path):
    # A copy, so its workdir is empty even where the main job has run in this checkout.
    path = example_copy("eagle3-tiny.yaml", tmp_path)
    (est,) = estimates(load_spec(path))
    # nothing made yet: generate's 1600 samples x tokenize's max_length 256, hidden 128, fp32
    assert (est.stage, est.online, est.exact) == ("hidden_states", False, False)
    assert est.tokens == 1600 * 256 and est.hidden == 128 and est.itemsize == 4
    assert est.bytes == 1600 * 256 * 4 * 128 * 4
    out = run_cli(["check", str(path)])
    assert out.code == 0, out.err
    assert "disk: hidden_states: offline hidden states need at most 838.9 MB" in out.out


def test_the_main_job_spec_checks_after_a_run(tiny_data, tmp_path):
    """`harness check examples/eagle3-tiny.yaml` in a checkout where the README's main job
    has run: its workdir holds the tokens and the verifier, so the figure is exact."""
    path = example_copy("eagle3-tiny.yaml", tmp_path)
    work = tmp_path / "runs" / "eagle3-tiny"
    shutil.copytree(tiny_data["tokens"], work / "data" / "tokens")
    shutil.copytree(tiny_data["verifier"], work / "verifier")
    tokens = int(read_tokens(tiny_data["tokens"])["offsets"][-1])
    (est,) = estimates(load_spec(path))
    assert est.exact and est.tokens == tokens and est.hidden == 64
    out = run_cli(["check", str(path)])
    assert out.code == 0, out.err
    assert "disk: hidden_states: offline hidden states need " in out.out
    assert "at most" not in out.out


def test_exact_count_from_an_existing_tokens_file(tiny_data, tmp_path):
    """A local workdir that already holds the tokens and the verifier: exact figures."""
    work = tmp_path / "work"
    shutil.copytree(tiny_data["tokens"], work / "data" / "tokens")
    shutil.copytree(tiny_data["verifier"], work / "verifier")
    spec = {"pipeline": "p", "hosts": {"local": {"workdir": str(work)}},
            "stages": [{"name": "hs", "action": "eagle3.hidden_states",
                        "with": {"tokens": "data/tokens", "verifier": "verifier", "out": "h",
                                 "save_dtype": "bfloat16"}},
                       {"name": "online", "action": "eagle3.train", "needs": ["hs"],
                        "with": {"online": True, "tokens": "data/tokens",
                                 "verifier": "verifier", "out": "t", "device": "cpu"}}]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    tokens = int(read_tokens(tiny_data["tokens"])["offsets"][-1])
    hs, online = estimates(load_spec(path))
    assert hs.exact and hs.tokens == tokens and hs.hidden == 64 and hs.itemsize == 2
    assert hs.bytes == tokens * 4 * 64 * 2
    assert online.online and online.itemsize == 4  # fp32 on the CPU
    out = run_cli(["check", str(path), "--json"])
    assert out.code == 0, out.err
    disk = json.loads(out.out)["offline_disk"]
    assert [d["bytes"] for d in disk] == [tokens * 512, tokens * 1024]
    text = run_cli(["check", str(path)]).out
    assert "disk: online: online training, no shards; offline would need" in text
