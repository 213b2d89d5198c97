"""vocab: d2t/t2d invariants, deterministic ties, small vocabularies, and bad input."""

from __future__ import annotations

import pytest
import torch

from pipeline.eagle3 import vocab
from pipeline.eagle3.text.datafiles import mapping_problem, read_vocab, write_freqs
from pipeline.eagle3.vocab import build_mapping

from ..conftest import run_stage

pytestmark = pytest.mark.ml


def invariant_holds(d2t, t2d, draft):
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool
    assert d2t.shape == (draft,) and int(t2d.sum()) == draft
    assert torch.equal(torch.arange(draft) + d2t, t2d.nonzero().flatten())
    assert mapping_problem(d2t, t2d) is None


def test_most_frequent_ids_sorted_ascending():
    counts = torch.tensor([0, 5, 1, 9, 0, 7, 3, 0])
    d2t, t2d = build_mapping(counts, 3)
    invariant_holds(d2t, t2d, 3)
    assert (torch.arange(3) + d2t).tolist() == [1, 3, 5]
    assert d2t.tolist() == [1, 2, 3]


def test_ties_go_to_the_lower_id_whatever_the_order():
    counts = torch.zeros(50, dtype=torch.int64)
    counts[[40, 7, 23, 11, 3]] = 4  # five-way tie for three places
    counts[30] = 9
    d2t, _ = build_mapping(counts, 4)
    assert (torch.arange(4) + d2t).tolist() == [3, 7, 11, 30]
    for _ in range(3):  # no dependence on the sort's internals
        assert torch.equal(build_mapping(counts.clone(), 4)[0], d2t)


def test_vocab_smaller_than_requested_fills_or_shrinks():
    counts = torch.zeros(20, dtype=torch.int64)
    counts[[4, 9, 15]] = torch.tensor([3, 2, 1])
    d2t, t2d = build_mapping(counts, 6, fill_unseen=True)
    invariant_holds(d2t, t2d, 6)
    assert (torch.arange(6) + d2t).tolist() == [0, 1, 2, 4, 9, 15]  # seen + lowest unseen
    d2t, t2d = build_mapping(counts, 6, fill_unseen=False)
    invariant_holds(d2t, t2d, 3)
    assert (torch.arange(3) + d2t).tolist() == [4, 9, 15]


def test_stage_writes_a_consistent_mapping(tiny_data):
    d2t, t2d, _ = read_vocab(tiny_data["vocab"])
    invariant_holds(d2t, t2d, 128)


def test_frequency_file_for_another_vocab(tiny_data, tmp_path):
    freqs = write_freqs(tmp_path, torch.ones(123, dtype=torch.int64))
    rc, result = run_stage(vocab, tmp_path, freqs=freqs, verifier=tiny_data["verifier"],
                           draft_vocab=10, out=tmp_path / "v")
    assert rc == 1
    assert result.error.startswith(f"{freqs}: frequencies are for a vocab of 123")


def test_draft_vocab_larger_than_target(tiny_data, tmp_path):
    rc, result = run_stage(vocab, tmp_path, freqs=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], draft_vocab=100000, out=tmp_path / "v")
    assert rc == 1
    assert result.error.startswith(f"{tiny_data['verifier'] / 'config.json'}: draft vocab 100000")


def test_inconsistent_mapping_file_is_refused(tmp_path):
    from pipeline.eagle3.text.datafiles import write_vocab
    from pipeline.errors import ActionError

    d2t, t2d = build_mapping(torch.arange(10), 4)
    d2t[0] += 1  # points draft id 0 at a token t2d does not hold
    path = write_vocab(tmp_path / "bad.safetensors", d2t, t2d)
    with pytest.raises(ActionError, match="inconsistent vocab mapping"):
        read_vocab(path)
