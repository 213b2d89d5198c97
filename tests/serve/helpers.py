"""Pieces the serving tests share: tiny model directories, a stand-in nvidia-smi, the fake
vLLM server's command, and a way to see which of its processes are still alive."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import DATA, ROOT

FAKE_VLLM = str(ROOT / "tests" / "fake_vllm.py")
FAKE_COMMAND = [sys.executable, FAKE_VLLM]
STANDIN_VLLM = DATA / "fake_vllm_pkg"
CHAT_PROMPTS = str(ROOT / "examples" / "prompts" / "chat.jsonl")


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A valid .safetensors file of zeros: {name: (dtype, shape)}."""
    sizes = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "BOOL": 1}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def make_models(root: Path, *, model_type: str = "llama", arch: str = "LlamaForCausalLM",
                draft_arch: str = "LlamaForCausalLMEagle3", d2t: bool = True,
                hidden: int = 64, vocab: int = 1000) -> tuple[Path, Path]:
    """A verifier and an EAGLE-3 drafter directory: configs and weight files of zeros."""
    target, draft = root / "verifier", root / "drafter"
    target.mkdir(parents=True)
    draft.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": [arch], "model_type": model_type, "hidden_size": hidden,
        "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": vocab}))
    write_safetensors(target / "model.safetensors", {
        "model.embed_tokens.weight": ("BF16", [vocab, hidden]),
        "lm_head.weight": ("BF16", [vocab, hidden])})
    (draft / "config.json").write_text(json.dumps({
        "architectures": [draft_arch], "model_type": "llama", "hidden_size": hidden,
        "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": vocab,
        "draft_vocab_size": 100, "target_hidden_size": hidden}))
    tensors = {"fc.weight": ("BF16", [hidden, 3 * hidden]), "lm_head.weight": ("BF16",
                                                                           [100, hidden]),
               "t2d": ("BOOL", [vocab])}
    if d2t:
        tensors["d2t"] = ("I64", [100])
    write_safetensors(draft / "model.safetensors", tensors)
    return target, draft


def fake_gpu_bin(root: Path, rows: list[str] | None) -> Path:
    """A directory with an `nvidia-smi` that prints ``rows`` as --query-gpu CSV (None: no
    nvidia-smi at all, so the host has no GPU as far as the preflight can tell)."""
    bin_dir = root / "fakebin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if rows is not None:
        (bin_dir / "gpus.csv").write_text("".join(r + "\n" for r in rows))
        smi = bin_dir / "nvidia-smi"
        smi.write_text('#!/bin/sh\ncat "$(dirname "$0")/gpus.csv"\n')
        smi.chmod(0o755)
    return bin_dir


def fake_processes(port: int) -> list[int]:
    """Live (not zombie) processes of the fake server on ``port``, its engine child included."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        text = [a.decode(errors="replace") for a in argv]
        mine = (FAKE_VLLM in text and str(port) in text) or \
            ("fake-engine-core" in text and f"--port={port}" in text)
        if mine:
            found.append(int(proc.name))
    return found


def wait_gone(port: int, deadline_s: float = 15) -> list[int]:
    """Wait for the fake server on ``port`` to vanish; return what is left."""
    end = time.monotonic() + deadline_s
    while (left := fake_processes(port)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def kill_fakes(port: int) -> None:
    for pid in fake_processes(port):
        subprocess.run(["kill", "-KILL", str(pid)], check=False)


def host_entry(ssh_host, **extra) -> dict:
    """The spec entry of the test sshd host (a `hosts:` value)."""
    keep = ("host", "port", "user", "key", "known_hosts", "workdir", "python")
    return {**{k: v for k, v in ssh_host.model_dump(mode="json").items() if k in keep},
            **extra}


def write_spec(path: Path, hosts: dict, stages: list[dict]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"pipeline": "serve-test", "hosts": hosts,
                                    "stages": stages}, sort_keys=False))
    return path


def other_python(root: Path, *, paths: list[Path] = (), dists: dict[str, str] | None = None,
                 scripts: dict[str, str] | None = None) -> Path:
    """A Python of another environment, as a serving vLLM's usually is: a venv without
    pip (so it cannot import this project), ``paths`` on its sys.path through a ``.pth``
    file, ``dists`` installed as bare package metadata (name -> version) and ``scripts``
    in its ``bin`` (name -> Python source, run by that interpreter). Returns its python."""
    if not (root / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                       capture_output=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True,
                               cwd=root).stdout.strip())
    (site / "extra_paths.pth").write_text("".join(f"{p}\n" for p in paths))
    for name, version in (dists or {}).items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n"
                                       f"Version: {version}\n")
    for name, source in (scripts or {}).items():
        script = root / "bin" / name
        script.write_text(f"#!{python}\n{source}")
        script.chmod(0o755)
    return python
