"""Fixtures of the serving tests: fake vLLM servers started as plain subprocesses."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.vllm.openai_client import get
from tests.serve.helpers import FAKE_COMMAND, kill_fakes
from tests.sshd import free_port


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator:
    """Start fake vLLM servers as plain subprocesses; all are killed afterwards."""
    started: list[tuple[subprocess.Popen, int]] = []

    def start(*extra: str, spec: dict | None = None) -> tuple[str, Path]:
        port = free_port()
        record = tmp_path / f"requests-{port}.jsonl"
        argv = [*FAKE_COMMAND, "serve", "tiny", "--port", str(port), "--host", "127.0.0.1",
                "--fake-record", str(record), *extra]
        if spec:
            argv += ["--speculative-config", json.dumps(spec)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                start_new_session=True)
        started.append((proc, port))
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 20
        while not get(f"{url}/health", timeout=1).ok:
            assert proc.poll() is None and time.monotonic() < end, "fake server did not start"
            time.sleep(0.05)
        return url, record
    yield start
    for proc, port in started:
        proc.kill()
        proc.wait(5)
        kill_fakes(port)
