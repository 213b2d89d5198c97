"""hidden_states: the aux-layer convention, resume, validation and bad input."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.eagle3 import hidden_states, tokenize
from pipeline.eagle3.common import default_aux_layers
from pipeline.eagle3.states.shards import ShardReader, list_shards, validate_shard
from pipeline.eagle3.text.datafiles import read_tokens
from pipeline.eagle3.training.train_data import TrainData
from pipeline.errors import ActionError
from pipeline.series import parse

from ..conftest import ok, run_stage

pytestmark = pytest.mark.ml


def test_default_aux_layers_follow_vllm():
    assert default_aux_layers(32) == [2, 16, 29]
    assert default_aux_layers(7) == [2, 3, 4]


def test_saved_aux_is_the_output_of_layer_k_minus_1(tiny_data):
    """Hooks on the decoder layers' *outputs*, independent of the stage's pre-hooks."""
    model = AutoModelForCausalLM.from_pretrained(str(tiny_data["verifier"])).eval()
    index, shards = list_shards(tiny_data["hidden"])
    aux_layers = index["aux_layers"]
    assert aux_layers == [2, 3, 4]  # 7-layer verifier, vLLM default
    reader = ShardReader(shards[1].path)
    sample = reader.sample(3)
    outputs = {}
    hooks = [model.model.layers[k - 1].register_forward_hook(
        lambda _m, _a, out, k=k: outputs.__setitem__(k, out[0] if isinstance(out, tuple)
                                                     else out)) for k in aux_layers]
    with torch.no_grad():
        full = model(sample["input_ids"].long()[None], output_hidden_states=True)
    for h in hooks:
        h.remove()
    hidden = model.config.hidden_size
    for j, k in enumerate(aux_layers):
        saved = sample["aux"][:, j * hidden:(j + 1) * hidden]
        torch.testing.assert_close(saved, outputs[k][0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(saved, full.hidden_states[k][0], rtol=1e-5, atol=1e-5)
    # `last` is the final norm's output: the verifier's logits are lm_head(last).
    torch.testing.assert_close(sample["last"], full.hidden_states[-1][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.lm_head(sample["last"]), full.logits[0], rtol=1e-4,
                               atol=1e-4)
    # An off-by-one (SGLang's counting) would not match.
    assert not torch.allclose(sample["aux"][:, :hidden], full.hidden_states[1][0], atol=1e-3)


def test_shards_cover_every_sample_once(tiny_data):
    tokens = read_tokens(tiny_data["tokens"])
    _, shards = list_shards(tiny_data["hidden"])
    assert len(shards) == tiny_data["shards"] > 1
    seen = []
    off = tokens["offsets"]
    for info in shards:
        reader = ShardReader(info.path)
        idx = reader.sample_index.tolist()
        # samples run longest first (little padding); sample_index maps them back
        lengths = [int(off[i + 1] - off[i]) for i in idx]
        assert lengths == sorted(lengths, reverse=True)
        assert sorted(idx) == list(range(info.sample_start, info.sample_start + len(idx)))
        for j, i in enumerate(idx):
            assert torch.equal(reader.sample(j)["input_ids"].long(),
                               tokens["input_ids"][off[i]:off[i + 1]].long())
        seen += idx
    assert sorted(seen) == list(range(len(tokens["ids"])))


def test_resume_skips_done_shards_and_refuses_another_config(tiny_data, tmp_path,
                                                             monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_SERIES", "1")  # as inside a harness job
    out = tmp_path / "hidden"
    shutil.copytree(tiny_data["hidden"], out)
    first = out / "shard-00000.safetensors"
    before = first.read_bytes()
    params = dict(tokens=tiny_data["tokens"], verifier=tiny_data["verifier"], out=out,
                  shard_tokens=4000, batch_tokens=2048, device="cpu", dtype="float32")
    (out / "shard-00001.safetensors").unlink()  # an interrupted run lost the second shard
    rc, result = run_stage(hidden_states, tmp_path, **params)
    assert rc == 0 and result.ok
    assert result.metrics["resumed_shards"] == tiny_data["shards"] - 1
    assert first.read_bytes() == before
    # the rates as the one shard it wrote was done (series for the charts)
    points = [p for p in map(parse, capsys.readouterr().out.splitlines()) if p is not None]
    assert [(p.metric, p.axis, p.x) for p in points] == [("tokens_per_s", "shard", 2),
                                                         ("disk_mb_s", "shard", 2)]
    assert all(p.y is not None and p.y > 0 for p in points)
    again = ShardReader(out / "shard-00001.safetensors").sample(0)["aux"]
    original = ShardReader(tiny_data["hidden"] / "shard-00001.safetensors").sample(0)["aux"]
    assert torch.equal(again, original)

    rc, result = run_stage(hidden_states, tmp_path, **{**params, "aux_layers": [1, 3, 5]})
    assert rc == 1
    assert result.error.startswith(f"{out / '.config.json'}: ")
    assert "aux_layers" in result.error


def test_truncated_shard_is_named(tiny_data, tmp_path):
    out = tmp_path / "hidden"
    shutil.copytree(tiny_data["hidden"], out)
    shard = out / "shard-00001.safetensors"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    index = json.loads((out / "index.json").read_text())
    tokens = read_tokens(tiny_data["tokens"])
    with pytest.raises(ActionError) as err:
        validate_shard(shard, tokens=tokens, hidden_size=64, aux_layers=index["aux_layers"],
                       config_hash=index["config_hash"], full=True)
    assert str(err.value).startswith(f"{shard}: ")
    with pytest.raises(ActionError) as err:  # training reads the same way
        TrainData(out, seed=0, holdout=0.1, max_length=512)
    assert str(err.value).startswith(f"{shard}: ")
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=out, shard_tokens=4000,
                           batch_tokens=2048, device="cpu", dtype="float32")
    assert rc == 1 and result.error.startswith(f"{shard}: ")


def test_nan_in_a_shard_fails_validation(tiny_data, tmp_path):
    from pipeline.eagle3.text.datafiles import write_safetensors

    src = ShardReader(tiny_data["hidden"] / "shard-00000.safetensors")
    rows = int(src.offsets[-1])
    tensors = {"aux": src.rows("aux", 0, rows), "last": src.rows("last", 0, rows),
               "input_ids": src.input_ids, "loss_mask": src.loss_mask, "offsets": src.offsets,
               "sample_index": src.sample_index}
    tensors["last"][5, 3] = float("nan")
    bad = tmp_path / "shard-00000.safetensors"
    write_safetensors(bad, tensors, src.meta)
    with pytest.raises(ActionError, match="NaN or Inf in 'last' rows") as err:
        validate_shard(bad, tokens=None, hidden_size=64, aux_layers=src.aux_layers,
                       config_hash=None, full=True)
    assert str(err.value).startswith(str(bad))


def test_aux_layer_out_of_range(tiny_data, tmp_path):
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=tmp_path / "h",
                           aux_layers=[2, 3, 7], device="cpu")
    assert rc == 1
    assert result.error.startswith(f"{tiny_data['verifier'] / 'config.json'}: aux layer id(s) "
                                   "[7] out of range for a 7-layer verifier")


@pytest.mark.parametrize("remove,message", [("config.json", "no config.json"),
                                            ("model.safetensors", "no weights")])
def test_verifier_directory_without_config_or_weights(tiny_data, tmp_path, remove, message):
    broken = tmp_path / "verifier"
    shutil.copytree(tiny_data["verifier"], broken)
    (broken / remove).unlink()
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=broken,
                           out=tmp_path / "h", device="cpu")
    assert rc == 1 and result.error.startswith(f"{broken}: {message}")
    if remove == "config.json":  # the first stage that reads it says the same
        rc, result = run_stage(tokenize, tmp_path, samples=tiny_data["root"] / "clean",
                               verifier=broken, out=tmp_path / "t")
        assert rc == 1 and result.error.startswith(f"{broken}: {message}")


@pytest.mark.parametrize("method", ["pwrite", "mmap"])
def test_streaming_shard_is_a_valid_safetensors_file(tmp_path, monkeypatch, method):
    """The in-place writer, with pieces small enough that the parallel path runs."""
    from safetensors.torch import load_file

    from pipeline.eagle3.states import shard_writer as shards

    monkeypatch.setattr(shards, "WRITE_PIECE", 64)
    torch.manual_seed(0)
    rows, hidden = 37, 8
    aux = torch.randn(rows, 3 * hidden).to(torch.bfloat16)
    last = torch.randn(rows, hidden).to(torch.bfloat16)
    small = {"offsets": torch.tensor([0, 20, 37]), "sample_index": torch.tensor([5, 4]),
             "input_ids": torch.arange(rows, dtype=torch.int32),
             "loss_mask": (torch.arange(rows) % 2).to(torch.uint8)}
    writer = shards.StreamingShard(tmp_path / "s.safetensors", rows=rows, hidden=hidden,
                                   dtype=torch.bfloat16, small=small, meta={"format": "x"},
                                   method=method)
    assert not (tmp_path / "s.safetensors").exists()  # only the temporary name until close
    writer.write_rows(20, aux[20:], last[20:])  # batches may land in any order
    writer.write_rows(0, aux[:20], last[:20])
    writer.close()
    assert writer.stats.bytes == rows * 4 * hidden * 2 and writer.stats.active > 0
    back = load_file(str(tmp_path / "s.safetensors"))
    assert torch.equal(back["aux"], aux) and torch.equal(back["last"], last)
    for key, value in small.items():
        assert torch.equal(back[key], value), key
    with pytest.raises(ValueError):
        shards.StreamingShard(tmp_path / "t.safetensors", rows=2, hidden=hidden,
                              dtype=torch.bfloat16, small=small, meta={}).write_rows(
            1, aux[:2], last[:2])


def test_choose_aux_layers_sorts_and_refuses_repeats():
    from pipeline.eagle3.common import choose_aux_layers

    assert choose_aux_layers(None, 32, "v") == ([2, 16, 29], "")
    ids, note = choose_aux_layers([29, 2, 16], 32, "v")
    assert ids == [2, 16, 29] and "sorted to [2, 16, 29]" in note and "ascending" in note
    with pytest.raises(ActionError, match=r"repeat an id for a 6-layer verifier") as err:
        choose_aux_layers(None, 6, "v/config.json")  # vLLM's default is [2, 3, 3] here
    assert str(err.value).startswith("v/config.json: vLLM's default aux layers")
    with pytest.raises(ActionError, match=r"aux layer ids \[1, 4, 1\] repeat an id"):
        choose_aux_layers([1, 4, 1], 7, "v")
    with pytest.raises(ActionError, match="a list of three integers"):
        choose_aux_layers([1, 2], 7, "v")
    with pytest.raises(ActionError, match="a list of three integers"):
        choose_aux_layers([1, 2, True], 7, "v")


def test_unsorted_aux_layers_are_stored_ascending(tiny_data, tmp_path, capsys):
    res = ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
             out=tmp_path / "h", aux_layers=[5, 1, 3], limit=20, device="cpu",
             dtype="float32")
    assert res.metrics["aux_layers"] == [1, 3, 5]
    index, shards = list_shards(tmp_path / "h")
    assert index["aux_layers"] == [1, 3, 5]
    assert ShardReader(shards[0].path).aux_layers == [1, 3, 5]
    assert capsys.readouterr().out.count("sorted to [1, 3, 5]") == 1
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=tmp_path / "d",
                           aux_layers=[2, 2, 4], device="cpu")
    assert rc == 1 and "repeat an id" in result.error


def test_a_slow_disk_is_reported_as_the_bottleneck(tiny_data, tmp_path, slow_disk, capsys):
    """A disk that only takes a batch once the forward is already waiting for a buffer
    (``slow_disk``): the stage measures the wait and says the disk is the bottleneck."""
    res = ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
             out=tmp_path / "h", limit=60, batch_tokens=512, write_buffers=2, device="cpu",
             dtype="float32")
    m = res.metrics
    assert m["write_stall_seconds"] >= 0.5 * 5  # at least 5 waits of at least 0.5 s
    assert m["disk_bound"] is True and m["write_stall_share"] > 0.1
    assert m["written_gb"] > 0 and m["write_gb_s"] > 0 and m["write_method"] == "pwrite"
    assert "the disk is the bottleneck" in capsys.readouterr().out
    assert _same_rows(tmp_path / "h", tiny_data["hidden"], limit=60)


def _same_rows(a, b, limit):
    """The first ``limit`` samples of two hidden-state directories hold the same states (up
    to the rounding of other batch shapes)."""
    def by_sample(d):
        out = {}
        for info in list_shards(d)[1]:
            r = ShardReader(info.path)
            for j, i in enumerate(r.sample_index.tolist()):
                if i < limit:
                    out[i] = r.sample(j)["aux"]
        return out

    x, y = by_sample(a), by_sample(b)
    return x.keys() == y.keys() and all(torch.allclose(x[k], y[k], atol=1e-5) for k in x)


def test_mmap_writes_give_the_same_shards(tiny_data, tmp_path):
    ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
       out=tmp_path / "h", shard_tokens=4000, batch_tokens=2048, device="cpu",
       dtype="float32", write_method="mmap", write_buffers=3)
    for a, b in zip(sorted(tiny_data["hidden"].glob("shard-*")),
                    sorted((tmp_path / "h").glob("shard-*")), strict=True):
        assert a.read_bytes() == b.read_bytes()
