"""`harness check` plans a pipeline that builds its verifier: the 3B example's figures."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from pipeline.eagle3.hardware.gpu_peaks import gpu_peak, mfu
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "eagle3-3b.yaml"

# The 3B example's verifier counted by hand: per layer q, o 3072^2; k, v 3072 x 1024;
# MLP 3 x 3072 x 9216; two norms. Embeddings and lm_head over 2048 + 2 think tags.
LAYER = 2 * 3072 * 3072 + 2 * 3072 * 1024 + 3 * 3072 * 9216 + 2 * 3072
PARAMS = 28 * LAYER + 2 * 2050 * 3072 + 3072


def _edited(tmp_path: Path, edit) -> Path:
    doc = yaml.safe_load(SPEC.read_text())
    doc["hosts"]["local"]["workdir"] = str(tmp_path / "runs")
    edit(doc)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _costs(path: Path) -> dict:
    r = run_cli(["check", "--json", str(path)])
    assert r.code == 0, r.err
    return json.loads(r.out)["campaign_plan"]["stage_costs"]


def test_the_3b_example_is_planned_before_the_run() -> None:
    assert PARAMS == 3_095_583_744
    r = run_cli(["check", str(SPEC)])
    assert r.code == 0, r.err
    assert "WARNING" not in r.out
    assert "plan: built verifier 3,095,583,744 params: 6.2 GB in bf16; H100 SXM" in r.out
    assert "plan: 8 servers started together:" in r.out
    c = _costs(SPEC)
    assert c["params"] == PARAMS and c["weight_bytes"] == 2 * PARAMS
    t = c["training"]
    assert t["state_bytes"] == 16 * PARAMS and t["autocast_copy_bytes"] == 2 * PARAMS
    assert t["rows"] == 16 and t["fits"] and t["total"] < 80e9
    # eight servers of 1280 MiB of KV cache each, 0.12 of the GPU each
    assert len(c["servers"]) == 8 and c["servers_kv_bytes"] == 8 * 1280 * 2 ** 20
    assert c["servers_utilization"] == 0.96
    assert c["servers_fit"] and c["servers_total"] <= 80e9
    assert c["beside_servers"] == []  # every transformers stage runs before the servers
    stages = {s["stage"]: s for s in c["stages"]}
    assert stages["verifier"]["disk"] == 2 * PARAMS  # saved in bf16
    # every estimate is within its stage's limit
    assert not [s["stage"] for s in c["stages"] if s["over_limit"]]
    assert stages["verifier"]["seconds"] and stages["verifier"]["limit"] == 30 * 60


def test_servers_that_do_not_fit_are_warned_of_in_one_line(tmp_path: Path) -> None:
    def bigger_kv(doc):
        for st in doc["stages"]:
            if st.get("action") == "eagle3.serve":
                st["with"]["kv_cache_memory_bytes"] = "2G"
    path = _edited(tmp_path, bigger_kv)
    r = run_cli(["check", str(path)])
    assert r.code == 0, r.err  # a warning, not a refusal
    warns = [line for line in r.out.splitlines() if "WARNING" in line]
    assert warns == ["  plan: WARNING: the 8 servers started together need 80.9 GB, more "
                     "than the GPU's 80.0 GB: lower kv_cache_memory_bytes or "
                     "gpu_memory_utilization, or serve fewer at once"]
    assert not _costs(path)["servers_fit"]


def test_a_transformers_stage_beside_the_servers_counts_with_them(tmp_path: Path) -> None:
    def verify_after_servers(doc):
        doc["plan"]["gpu_memory"] = ["32GB"]
        st = next(s for s in doc["stages"] if s["name"] == "verify_peagle")
        st["needs"] = ["export_peagle", "serve_baseline", "serve_k1", "serve_k2"]
    path = _edited(tmp_path, verify_after_servers)
    c = _costs(path)
    beside = {b["stage"]: b for b in c["beside_servers"]}
    # verify holds the verifier in fp32 by default
    assert beside["verify_peagle"]["own"] == 4 * PARAMS
    assert beside["verify_peagle"]["servers"] == sum(
        s["counted"] for s in c["servers"] if s["stage"] in ("serve_baseline", "serve_k1",
                                                             "serve_k2"))
    r = run_cli(["check", str(path)])
    assert "  plan: WARNING: verify_peagle runs beside servers holding 27.7 GB and needs " \
           "12.4 GB of its own: 40.1 GB of 32.0 GB" in r.out.splitlines()


def test_a_plan_without_a_config_or_a_build_stage_is_one_line(tmp_path: Path) -> None:
    doc = {"pipeline": "p", "plan": {"gpus": 1, "gpu_memory": ["80GB"]},
           "stages": [{"name": "a", "run": "true"}]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = run_cli(["check", str(path)])
    assert r.code == 1 and "no eagle3.build_verifier stage" in r.err
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1


def test_gpu_peaks_by_model_name() -> None:
    assert gpu_peak("NVIDIA H100 80GB HBM3").model == "H100 SXM"
    assert gpu_peak("NVIDIA H100 PCIe").bf16_tflops == 756.0
    assert gpu_peak("NVIDIA H100 NVL").model == "H100 NVL"
    assert gpu_peak("NVIDIA H200").hbm_tb_s == 4.8
    assert gpu_peak("NVIDIA GH200 480GB").model == "GH200"
    assert gpu_peak("NVIDIA A100-SXM4-40GB").model == "A100 40GB"
    assert gpu_peak("Some Other GPU") is None and gpu_peak(None) is None
    assert mfu(989.4e12 * 0.5, 1.0, gpu_peak("H100")) == 0.5
    assert mfu(1e12, 1.0, None) is None
