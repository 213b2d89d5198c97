"""Aux layer ids as vLLM uses them: sorted and de-duplicated, the target's states
concatenated in ascending layer order whatever order the config lists.

The good drafter was trained with [2, 3, 4]. ``aux_order_trained`` is the drafter a
training run with ``--aux-layers 4,2,3`` in config order makes: fc's input column blocks
take h4, h2, h3 and the config lists [4, 2, 3]. Read in config order (as verify did
before) it is exactly the good drafter and passes; vLLM feeds it [h2, h3, h4], and it
must fail. ``aux_order_listed`` is the
good drafter with its ids merely listed as [4, 2, 3]: vLLM serves it as before.
"""

from __future__ import annotations

import json

import pytest

from pipeline.eagle3.checks.structural import structural_checks
from pipeline.eagle3.common import vllm_aux_order
from pipeline.eagle3.model.checkpoint_files import VerifierInfo

from .conftest import FUNCTIONAL, checks, run_verify, verify_params
from .test_vllm_answers import harness_elsewhere

pytestmark = pytest.mark.ml


def test_vllms_order_is_sorted_and_unique() -> None:
    assert vllm_aux_order([4, 2, 3]) == [2, 3, 4]
    assert vllm_aux_order([2, 3, 3]) == [2, 3]
    assert vllm_aux_order([2, 3, 4]) == [2, 3, 4]


def test_structural_checks_flag_order_and_repeats(good, variants):
    v = VerifierInfo.read(good["verifier"])
    listed = {c.name: c for c in structural_checks(variants("aux_order_listed"), v).checks}
    assert listed["aux_layer_ids"].passed
    order = listed["aux_layer_order"]
    assert not order.passed and order.value == [4, 2, 3] and order.expected == [2, 3, 4]
    assert "vLLM sorts the ids and feeds the states as [2, 3, 4]" in order.message
    good_checks = {c.name: c for c in structural_checks(good["dir"], v).checks}
    assert good_checks["aux_layer_order"].passed
    repeated = structural_checks(variants("aux_repeated"), v)
    by = {c.name: c for c in repeated.checks}
    ids = by["aux_layer_ids"]
    assert not ids.passed and "[3] repeated in [2, 3, 3]" in ids.message
    assert "feeds 2 states [2, 3] to an fc built for 3" in ids.message
    assert repeated.metrics["vllm_aux_layer_ids"] == [2, 3]


def test_a_drafter_trained_in_listed_order_fails_as_vllm_runs_it(good, variants, tmp_path):
    """Through `harness verify`, from another directory, as a user runs it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    flags = [x for k, val in FUNCTIONAL.items() for x in (f"--{k.replace('_', '-')}",
                                                             str(val))
             if k not in ("threads",)]
    r = harness_elsewhere(["--db", str(tmp_path / "state.db"), "verify",
                           str(variants("aux_order_trained")), "--verifier",
                           str(good["verifier"]), "--data", str(good["prompts"]),
                           "--exclude", str(good["exclude"]), *flags, "--no-record",
                           "--json"], elsewhere)
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    by = {c["name"]: c for c in out["result"]["checks"]}
    m = out["result"]["metrics"]
    assert by["loads"]["passed"] and by["loads"]["value"] == [2, 3, 4]
    assert "fed in vLLM's ascending order [2, 3, 4]" in by["loads"]["message"]
    assert by["lossless"]["passed"]  # still exact: only the drafts are another network's
    # On these tiny models which layers feed the drafter barely moves top-1 acceptance
    # (docs/verify.md); the training loss shows the permutation plainly: the drafter fits
    # its listed order far better than the order vLLM feeds.
    probe = by["aux_layer_probe"]
    assert not probe["passed"] and probe["value"] == "config order [4, 2, 3]", probe
    fit = m["aux_probe"]["config order [4, 2, 3]"]
    assert fit["loss"] < m["aux_probe"]["configured"]["loss"] and fit["t"] > 5
    assert "trained in the listed order" in probe["message"]
    assert "Permute fc.weight's input column blocks to the order [2, 3, 4]" in probe["message"]
    assert not by["aux_layer_order"]["passed"]
    assert sorted(n for n, c in by.items() if not c["passed"]) == ["aux_layer_order",
                                                                   "aux_layer_probe"]


def test_ids_merely_listed_out_of_order_serve_as_before(good, variants, tmp_path):
    rc, result = run_verify(tmp_path, verify_params(good, variants("aux_order_listed")))
    assert rc == 1  # aux_layer_order only
    c = checks(result)
    failed = sorted(name for name, check in c.items() if not check.passed)
    assert failed == ["aux_layer_order"], [(n, c[n].message) for n in failed]
    assert result.metrics["acceptance_length"] > 2.0
    assert c["loads"].value == [2, 3, 4]
    # the probe tried the listed order and found the drafter fits vLLM's better
    assert "config order [4, 2, 3]" in result.metrics["aux_probe"]


def test_repeated_ids_do_not_load(good, variants, tmp_path):
    rc, result = run_verify(tmp_path, verify_params(good, variants("aux_repeated"),
                                                    samples=2, max_new_tokens=8))
    c = checks(result)
    assert rc == 1 and not c["loads"].passed
    assert "vLLM de-duplicates them to [2, 3]" in c["loads"].message
