"""Secrets in job logs stay masked however the log is cut into reads."""

from __future__ import annotations

from pathlib import Path

from harness.runner.logs import LogReader
from pipeline.hosts.executor import JobHandle
from pipeline.hosts.local import LocalExecutor
from pipeline.spec.models import HostSpec
from state.store import Store
from tests.runner.test_runner import make_runner, write_spec

TOKEN = "hf_s3cr3t_split_value"


def test_a_secret_printed_in_two_halves_is_stored_masked(tmp_path: Path, store: Store) -> None:
    """The job prints the first 7 characters, sleeps past several reads, prints the rest."""
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "leaky", "run": 'printf "token %s" "${HF_TOKEN:0:7}"; sleep 1.5; '
                                 'printf "%s done\\n" "${HF_TOKEN:7}"',
         "env": {"HF_TOKEN": TOKEN}}])
    runner = make_runner(store, spec)  # polls (and reads the log) every 0.05 s
    runner.run()
    run = store.runs(runner.sid)[0]
    assert run.state == "succeeded", runner.lines
    log, end = store.log(run.id)
    assert log == "token " + "*" * len(TOKEN) + " done\n"
    assert end == len(log.encode())
    assert not any(TOKEN[:7] in line for line in runner.lines)


def reader_on(tmp_path: Path, secrets: list[str]) -> tuple[LogReader, Path]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = run_dir / "log"
    log.write_bytes(b"")
    handle = JobHandle(run_id="r", host="local", run_dir=str(run_dir), pid=None, command="")
    return LogReader(LocalExecutor(HostSpec(workdir=str(tmp_path))), handle, 0, secrets), log


def test_only_a_tail_that_could_start_a_secret_waits(tmp_path: Path) -> None:
    reader, log = reader_on(tmp_path, [TOKEN, "another-secret"])
    log.write_bytes(b"[train] 3/10 eta 12s\n")
    assert reader.read() == (0, "[train] 3/10 eta 12s\n")  # nothing held: shown at once
    with log.open("ab") as fh:
        fh.write(b"key hf_s3")
    assert reader.read() == (21, "key ")  # "hf_s3" may be the start of the token
    with log.open("ab") as fh:
        fh.write(b"cr3t_split_value and hf_s")
    assert reader.read() == (25, "*" * len(TOKEN) + " and ")
    assert reader.read() is None
    assert reader.read(final=True) == (25 + len(TOKEN) + 5, "hf_s")  # the job ended


def test_a_multibyte_character_after_a_held_tail_is_kept_whole(tmp_path: Path) -> None:
    reader, log = reader_on(tmp_path, ["ümlaut-secret"])
    log.write_bytes("ok ü".encode())
    assert reader.read() == (0, "ok ")
    with log.open("ab") as fh:
        fh.write("ber ümlaut-secret €".encode())
    chunk = reader.read()
    assert chunk is not None and chunk[1] == "über " + "*" * len("ümlaut-secret".encode()) + " €"
