"""Host entries beyond the basics: ssh_config fields, host keys, Slurm resources, and the
registry that picks each host's executor."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import registry
from pipeline.errors import SpecError
from pipeline.hosts.executor import executor_for
from pipeline.hosts.slurm import sbatch_flags
from pipeline.spec.load import load_spec
from pipeline.spec.models import HostSpec
from tests.conftest import ROOT


def load(tmp_path: Path, hosts: str):
    path = tmp_path / "p.yaml"
    path.write_text(f"pipeline: p\nhosts:\n{hosts}stages: [{{name: a, run: 'true'}}]\n")
    return load_spec(path)


def error_for(tmp_path: Path, hosts: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load(tmp_path, hosts)
    assert "\n" not in str(info.value)
    return info.value


def test_ssh_fields_left_out_defer_to_the_ssh_config(tmp_path: Path) -> None:
    spec = load(tmp_path, "  gpu: {host: gpu-box, ssh_config: conf/ssh_config}\n")
    gpu = spec.hosts["gpu"]
    assert (gpu.port, gpu.user, gpu.key) == (None, None, None)
    assert gpu.ssh_config == str(tmp_path / "conf" / "ssh_config")  # relative to the spec
    assert gpu.label == "gpu-box"
    assert HostSpec(name="x", host="h", port=2222, user="me").label == "me@h:2222"


@pytest.mark.parametrize("hosts, where, says", [
    ("  gpu: {host: h, host_key: accept-new}\n", "hosts.gpu.host_key", "name one"),
    ("  gpu: {host: h, host_key: accept-new, known_hosts: k, insecure_host_key: true}\n",
     "hosts.gpu.host_key", "contradict"),
    ("  gpu: {host: h, host_key: trust-me}\n", "hosts.gpu.host_key", "input should be"),
    ("  box: {ssh_config: c}\n", "hosts.box.ssh_config", "for SSH hosts"),
    ("  box: {partition: gpu}\n", "hosts.box.partition", "add `scheduler: slurm`"),
    ("  hpc: {scheduler: slurmm}\n", "hosts.hpc.scheduler", "did you mean 'slurm'?"),
    ("  local: {scheduler: slurm}\n", "hosts.local.scheduler", "its own name"),
    ("  hpc: {scheduler: slurm, gpus: 'a100:x'}\n", "hosts.hpc.gpus", "type:count"),
    ("  hpc: {scheduler: slurm, mem: lots}\n", "hosts.hpc.mem", "64G"),
    ("  hpc: {scheduler: slurm, time: soon}\n", "hosts.hpc.time", "bad duration"),
    ("  hpc: {scheduler: slurm, sbatch: [--qos=high, high]}\n", "hosts.hpc.sbatch[1]",
     "not a flag"),
])
def test_bad_host_entries(tmp_path: Path, hosts: str, where: str, says: str) -> None:
    err = error_for(tmp_path, hosts)
    assert err.where.endswith(f"p.yaml: {where}"), err.where
    assert says in err.message, err.message


def test_slurm_resources_become_sbatch_flags(tmp_path: Path) -> None:
    spec = load(tmp_path, "  hpc: {scheduler: slurm, host: login.example.org, partition: gpu,"
                          " account: proj, nodes: 2, gpus: 'h100:8', cpus: 16, mem: 200G,"
                          " time: 1h30m, sbatch: [--qos=high, --exclusive]}\n")
    hpc = spec.hosts["hpc"]
    assert hpc.label == "hpc (slurm via login.example.org)"
    assert sbatch_flags(hpc, "key-r1", "/w/r") == [
        "--parsable", "--job-name=key-r1", "--chdir=/w/r", "--output=/w/r/log",
        "--open-mode=append", "--partition=gpu", "--account=proj", "--nodes=2",
        "--gres=gpu:h100:8", "--cpus-per-task=16", "--mem=200G", "--time=01:30:00",
        "--qos=high", "--exclusive"]
    assert sbatch_flags(HostSpec(name="x", scheduler="slurm", time=90000), "k", "/r")[-1] \
        == "--time=1-01:00:00"  # 25 hours


def test_the_registry_picks_each_kind_and_a_new_one_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert registry.executor_kind(HostSpec()) == "local"
    assert registry.executor_kind(HostSpec(name="g", host="h")) == "ssh"
    slurm = HostSpec(name="c", scheduler="slurm", host="login")
    assert registry.executor_kind(slurm) == "slurm"
    assert registry.executor_kind(slurm, transport=True) == "ssh"
    # a plugin's scheduler: its module, registered, is what the spec accepts and runs
    plugin = tmp_path / "plugin_pbs.py"
    plugin.write_text("from pipeline.hosts.local import LocalExecutor\n\n"
                      "class PBSExecutor(LocalExecutor):\n    kind = 'pbs'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.SCHEDULERS, "pbs", "plugin_pbs:PBSExecutor")
    spec = load(tmp_path, "  hpc: {scheduler: pbs, workdir: w}\n")
    with executor_for(spec.hosts["hpc"]) as ex:
        assert type(ex).__name__ == "PBSExecutor" and ex.run(["echo", "hi"]).stdout == "hi\n"
    with pytest.raises(ValueError, match="module:Class"):
        registry.register_executor("bad", "no-colon")


def test_slurm_and_registry_modules_do_not_import_fabric() -> None:
    code = ("import json, sys, pipeline.registry, pipeline.hosts.slurm, pipeline.hosts.slurm_watch, "
            "pipeline.spec.host_checks; print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                         capture_output=True, env={"PYTHONPATH": str(ROOT)}).stdout
    assert not {"fabric", "paramiko"} & {m.split(".")[0] for m in __import__("json").loads(out)}


def test_a_launcher_takes_the_interpreters_place_and_keeps_the_argv(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("pipeline: p\nstages:\n  - name: train\n    action: eagle3.clean\n"
                    "    with: {samples: 'a b.jsonl', out: '$(rm -rf x)'}\n"
                    "    launcher: srun \"$HARNESS_PYTHON\"\n")
    stage = load_spec(path).stages[0]
    argv = stage.command(HostSpec(), result_path="/r/result.json")
    assert argv[:4] == ["bash", "-c", 'srun "$HARNESS_PYTHON" "$@"', "launcher"]
    assert argv[4:] == ["-m", "pipeline.eagle3.clean", "--samples", "a b.jsonl",
                        "--out", "$(rm -rf x)", "--result", "/r/result.json"]
    path.write_text("pipeline: p\nstages:\n  - {name: a, run: echo, launcher: srun}\n")
    with pytest.raises(SpecError, match=r"stages\[0\] \(a\)\.launcher: .*built-in"):
        load_spec(path)


@pytest.mark.sqlite  # no store is involved; one backend is enough
def test_the_remote_and_slurm_examples_pass_harness_check(cli) -> None:
    remote = cli(["check", str(ROOT / "examples" / "eagle3-remote.yaml")])
    assert remote.code == 0, remote.err
    assert re.search(r"generate\s+on gpu-box\s", remote.out)  # the ssh_config alias alone
    spec = load_spec(ROOT / "examples" / "eagle3-remote.yaml")
    gpu = spec.hosts["gpu"]
    assert (gpu.host, gpu.port, gpu.user, gpu.key) == ("gpu-box", None, None, None)
    slurm = cli(["check", str(ROOT / "examples" / "eagle3-slurm.yaml")])
    assert slurm.code == 0, slurm.err
    assert re.search(r"train\s+on gpu16 \(slurm via hpc-login\)", slurm.out), slurm.out
    train = load_spec(ROOT / "examples" / "eagle3-slurm.yaml").stage("train")
    assert train.command(HostSpec())[:2] == ["bash", "-c"]
    assert "torch.distributed.run" in train.command(HostSpec())[2]
