"""The /metrics parser and the spec-decode figures, on text shaped like vLLM's own output."""

from __future__ import annotations

import math

import pytest

from pipeline.vllm.metrics import parse_exposition, spec_delta, spec_snapshot


def page(engines: dict[str, dict], model: str = "meta-llama/Llama-3.1-8B-Instruct",
         extra: str = "") -> str:
    """A /metrics page as prometheus_client writes it for vLLM's v1 engine: counters named
    without `_total` in HELP/TYPE, samples with `_total`, `_created` beside them."""
    lines = []
    for key, help_text in (("drafts", "Number of spec decoding drafts."),
                           ("draft_tokens", "Number of draft tokens."),
                           ("accepted_tokens", "Number of accepted tokens.")):
        name = f"vllm:spec_decode_num_{key}"
        lines += [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"]
        for engine, c in engines.items():
            lab = f'engine="{engine}",model_name="{model}"'
            lines.append(f"{name}_total{{{lab}}} {float(c[key])}")
            lines.append(f"{name}_created{{{lab}}} 1.7330176e+09")
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    lines += [f"# HELP {name}_total Accepted tokens per draft position.",
              f"# TYPE {name}_total counter"]
    for engine, c in engines.items():
        for pos, v in enumerate(c["per_pos"]):
            lines.append(f'{name}_total{{engine="{engine}",model_name="{model}",'
                         f'position="{pos}"}} {float(v)}')
    lines += ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
              "# TYPE vllm:num_requests_running gauge",
              f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 0.0']
    return "\n".join(lines) + "\n" + extra


def counts(drafts, draft_tokens, accepted, per_pos) -> dict:
    return {"drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted,
            "per_pos": per_pos}


def test_one_engine_delta_gives_the_brief_formulas() -> None:
    before = spec_snapshot(page({"0": counts(100, 300, 150, [80, 50, 20])}))
    after = spec_snapshot(page({"0": counts(1100, 3300, 2250, [900, 850, 500])}))
    d = spec_delta(before, after)
    assert (d.drafts, d.draft_tokens, d.accepted) == (1000, 3000, 2100)
    assert d.per_position == [820, 800, 480]
    assert d.acceptance_rate == pytest.approx(0.7)
    assert d.acceptance_length == pytest.approx(3.1)
    assert d.acceptance_per_position == pytest.approx([0.82, 0.80, 0.48])
    assert d.tokens_per_draft == 3
    assert d.resets == [] and d.present and d.problems() == []


def test_several_engines_are_summed_and_a_model_can_be_kept() -> None:
    two = {"0": counts(10, 30, 12, [6, 4, 2]), "1": counts(20, 60, 30, [14, 10, 6])}
    snap = spec_snapshot(page(two))
    assert snap.engines == ("0", "1")
    d = spec_delta(spec_snapshot(""), snap)
    assert (d.drafts, d.accepted, d.per_position) == (30, 42, [20, 14, 8])
    # two models on one page (e.g. two served names): keep one by its model_name label
    mixed = page(two, model="a") + page({"0": counts(1000, 3000, 0, [0, 0, 0])}, model="b")
    only_a = spec_delta(spec_snapshot(""), spec_snapshot(mixed, model="a"))
    assert only_a.drafts == 30
    both = spec_delta(spec_snapshot(""), spec_snapshot(mixed))
    assert both.drafts == 1030
    assert spec_snapshot(mixed).model_names == ("a", "b")


def test_missing_counters_mean_no_speculation_not_zero_acceptance() -> None:
    plain = ("# TYPE vllm:generation_tokens_total counter\n"
             'vllm:generation_tokens_total{engine="0",model_name="m"} 5120.0\n')
    snap = spec_snapshot(plain)
    assert not snap.present
    d = spec_delta(snap, spec_snapshot(plain))
    assert not d.present
    assert d.acceptance_rate is None and d.acceptance_length is None
    assert d.acceptance_per_position == []


def test_counter_reset_between_scrapes_counts_only_the_new_life() -> None:
    two = {"0": counts(500, 1500, 900, [400, 300, 200]), "1": counts(40, 120, 60, [30, 20, 10])}
    # engine 1 restarted: its counters went down; engine 0 kept counting
    later = {"0": counts(600, 1800, 1000, [450, 330, 220]), "1": counts(10, 30, 15, [8, 5, 2])}
    d = spec_delta(spec_snapshot(page(two)), spec_snapshot(page(later)))
    assert d.drafts == 100 + 10
    assert d.accepted == 100 + 15
    assert d.per_position == [50 + 8, 30 + 5, 20 + 2]
    assert 'vllm:spec_decode_num_drafts{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"}' \
        in d.resets
    assert len(d.resets) == 3 + 3  # three totals and three positions of engine 1
    # an engine that vanished is reported, and contributes nothing
    gone = spec_delta(spec_snapshot(page(two)), spec_snapshot(page({"0": later["0"]})))
    assert gone.drafts == 100
    assert any(r.endswith("(gone)") for r in gone.resets)


def test_names_without_total_suffix_and_label_escapes() -> None:
    text = ('vllm:spec_decode_num_drafts{model_name="a \\"quoted\\" \\\\ name\\n",engine="0"} 4\n'
            'vllm:spec_decode_num_draft_tokens{engine="0",model_name="x"} 12 1733017600000\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",} 6.0 # {trace_id="x"} 1\n'
            '# EOF\n')
    page_ = parse_exposition(text)
    assert page_.skipped == []
    assert page_.samples[0].label("model_name") == 'a "quoted" \\ name\n'
    d = spec_delta(spec_snapshot(""), spec_snapshot(text))
    assert (d.drafts, d.draft_tokens, d.accepted) == (4, 12, 6)
    assert d.acceptance_length == 2.5


def test_unreadable_lines_are_skipped_and_named() -> None:
    text = ('vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
            'vllm:spec_decode_num_drafts_total{engine="1} 10\n'
            "vllm:broken_metric{} not-a-number\n"
            "just words\n"
            "vllm:gauge +Inf\n")
    p = parse_exposition(text)
    assert [n for n, _ in p.skipped] == [2, 3, 4]
    assert math.isinf(p.samples[-1].value)
    assert spec_snapshot(text).skipped[0][0] == 2


def test_inconsistent_counters_are_reported() -> None:
    bad = {"0": counts(10, 30, 40, [10, 20, 10])}
    d = spec_delta(spec_snapshot(""), spec_snapshot(page(bad)))
    problems = d.problems()
    assert any("exceed draft tokens" in p for p in problems)
    assert any("rises with position" in p for p in problems)


def openmetrics(text: str) -> str:
    """The same page as prometheus_client 0.26 writes it when a scrape negotiates
    OpenMetrics: HELP/TYPE name the counter without ``_total`` and keep the colon, while
    every sample name has the colon escaped to an underscore; ``# EOF`` ends it."""
    out = []
    for line in text.splitlines():
        if line.startswith("# "):
            kind, name, *rest = line[2:].split(" ", 2)
            out.append(" ".join(["#", kind, name.removesuffix("_total"), *rest]))
        elif line.startswith("vllm:"):
            out.append("vllm_" + line[len("vllm:"):])
        elif line:
            out.append(line)
    return "\n".join([*out, "# EOF"]) + "\n"


def test_openmetrics_spelling_gives_the_same_figures() -> None:
    before = page({"0": counts(100, 300, 150, [80, 50, 20])})
    after = page({"0": counts(1100, 3300, 2250, [900, 850, 500])})
    assert "vllm_spec_decode_num_drafts_total{" in openmetrics(after)
    plain = spec_delta(spec_snapshot(before), spec_snapshot(after))
    escaped = spec_delta(spec_snapshot(openmetrics(before)), spec_snapshot(openmetrics(after)))
    assert escaped.present and escaped.to_json() == plain.to_json()
    assert (escaped.drafts, escaped.accepted, escaped.per_position) == (1000, 2100,
                                                                         [820, 800, 480])
    # one scrape in each spelling (a proxy that negotiated differently): still one series
    mixed = spec_delta(spec_snapshot(before), spec_snapshot(openmetrics(after)))
    assert mixed.to_json() == plain.to_json()


def test_a_model_is_kept_by_any_of_its_served_names() -> None:
    # `--served-model-name primary alias`: vLLM labels the counters with the first name
    snap = page({"0": counts(10, 30, 12, [6, 4, 2])}, model="primary")
    assert spec_snapshot(snap, model="alias").present is False
    kept = spec_snapshot(snap, model=["alias", "primary"])
    assert kept.present and spec_delta(spec_snapshot(""), kept).drafts == 10
