"""Series: the ``@series`` line format, reading it from a streaming log, keeping the points
in the store, and a person's own shell stage recording one through the real runner
(locally and over a real sshd), with no EAGLE-3 code anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.runner.series import SeriesReader, unfinished_line
from pipeline.series import MAX_LINE, BadLine, emit, line, parse
from state.series import SeriesPoint
from state.store import Store
from tests.runner.test_runner import make_runner, ssh_entry, write_spec


def test_a_line_reads_back_as_its_point() -> None:
    text = line("heldout_acc", 3, 0.8125, axis="epoch", labels={"position": 2},
                spread=[0.8, float("inf")])
    assert text.startswith("@series {")
    p = parse(text)
    assert p is not None
    assert (p.metric, p.axis, p.x, p.y, dict(p.labels), p.spread) == \
        ("heldout_acc", "epoch", 3, 0.8125, {"position": 2}, (0.8, None))
    assert parse(line("loss", 1, float("nan"))).y is None  # type: ignore[union-attr]
    assert parse(line("tau", "epoch-001", 2.5, axis="checkpoint")).x == "epoch-001"  # type: ignore[union-attr]
    # a progress bar drew on the line first: its last state is the point
    assert parse("50% |####   \r" + line("loss", 2, 1.0)).x == 2  # type: ignore[union-attr]
    assert parse("loss 2.31 at step 250") is None
    assert parse("  @series") is None  # not followed by a space and JSON


@pytest.mark.parametrize(("text", "why"), [
    ('@series {"metric": "loss", "x": 1}', "no 'y'"),
    ('@series {"metric": "loss", "x": 1, "y": "high"}', "'y' must be a number"),
    ('@series {"metric": "1oss", "x": 1, "y": 2}', "metric must be a name"),
    ('@series {"metric": "loss", "x": true, "y": 2}', "'x' must be a finite number"),
    ('@series {"metric": "loss", "x": 1, "y": 2, "colour": "red"}', "unknown field 'colour'"),
    ('@series {"metric": "loss", "x": 1, "y": 2, "labels": {"k": "a\\u0000b"}}',
     "printable"),
    ('@series {"metric": "loss", "x": 1, "y": 2, "spread": [1]}', "'spread' must be"),
    ("@series [1, 2]", "not a JSON object"),
    ("@series {loss: 1}", "not JSON"),
    ('@series {"metric": "loss", "x": 1, "y": 2, "labels": {"a": "' + "x" * MAX_LINE + '"}}',
     "longer than"),
])
def test_a_bad_line_says_why(text: str, why: str) -> None:
    with pytest.raises(BadLine, match=why):
        parse(text)


def test_stages_print_points_only_in_a_harness_job(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HARNESS_RUN_ID", raising=False)
    monkeypatch.delenv("HARNESS_SERIES", raising=False)
    emit("loss", 1, 2.0)
    assert capsys.readouterr().out == ""  # a stage run by hand prints nothing for machines
    monkeypatch.setenv("HARNESS_RUN_ID", "r4")
    emit("loss", 1, 2.0)
    monkeypatch.setenv("HARNESS_SERIES", "0")
    emit("loss", 2, 2.0)
    assert capsys.readouterr().out == line("loss", 1, 2.0) + "\n"


def test_the_reader_keys_points_by_their_lines_offset_across_chunks() -> None:
    log = ("step 1\n" + line("loss", 1, 3.0) + "\n" + "é progress\r" + line("loss", 2, 2.5)
           + "\n" + '@series {"metric": "loss"}\n' + line("lr", 2, 0.01)).encode()
    whole = SeriesReader(7, 0).feed(0, log.decode(), final=True)
    assert [(p.metric, p.x, p.y) for p in whole] == [("loss", 1, 3.0), ("loss", 2, 2.5),
                                                     ("lr", 2, 0.01)]
    starts = [p.start for p in whole]
    assert starts[0] == len(b"step 1\n") and log[starts[2]:].startswith(b"@series")
    # The same bytes in chunks of 5 (a line, and a character, cut anywhere) give the same
    # points at the same offsets.
    reader = SeriesReader(7, 0)
    got: list[SeriesPoint] = []
    at = 0
    pending = b""
    for i in range(0, len(log), 5):
        pending += log[i:i + 5]
        try:
            text = pending.decode()
        except UnicodeDecodeError:
            continue  # the log reader hands over whole characters only
        got += reader.feed(at, text)
        at += len(pending)
        pending = b""
    assert [(p.x, p.y) for p in got] == [(1, 3.0), (2, 2.5)]  # the last line is unended
    got += reader.feed(at, "", final=True)
    assert [p.start for p in got] == starts
    assert reader.bad == 1
    bad_at = log.index(b'@series {"metric": "loss"}')
    assert reader.take_messages() == [
        f"skipped the @series line at byte {bad_at} of the log: no 'x'"]


def test_a_reader_that_resumes_mid_line_reads_that_line_whole() -> None:
    stored = "epoch 1\n" + line("loss", 1, 3.0)[:20]
    end = len(stored.encode())
    reader = SeriesReader(1, end, unfinished_line(stored))
    points = reader.feed(end, line("loss", 1, 3.0)[20:] + "\n")
    assert [(p.x, p.y, p.start) for p in points] == [(1, 3.0, len(b"epoch 1\n"))]


def test_a_progress_bar_that_never_ends_its_line_is_not_kept_whole() -> None:
    reader = SeriesReader(1, 0)
    at = 0
    for _ in range(2000):  # 2000 redraws of one line: far past any series line
        chunk = "\r" + "#" * 40
        assert reader.feed(at, chunk) == []
        at += len(chunk)
    assert len(reader._buf) <= MAX_LINE
    points = reader.feed(at, "\r" + line("loss", 9, 1.0) + "\n")
    assert [(p.x, p.start) for p in points] == [(9, 0)]  # keyed by where its line began


def test_points_are_stored_once_and_read_back_in_order(store: Store) -> None:
    sid = store.create_session("s", actor="human")
    with store.write(sid, "runner") as tx:
        r1 = tx.queue_run(todo_id=None, host="local")
        r2 = tx.queue_run(todo_id=None, host="local")
    pts = SeriesReader(r1.id, 0).feed(0, "\n".join([
        line("loss", 1, 3.0), line("loss", 2, float("nan")),
        line("acc", 1, 0.5, axis="epoch", labels={"position": 1}, spread=[0.4, 0.6])]),
        final=True)
    other = SeriesReader(r2.id, 0).feed(0, line("tau", "untrained", 1.1,
                                                axis="checkpoint") + "\n")
    for _ in range(2):  # a second watcher reading the same bytes adds nothing
        with store.write(sid, "runner") as tx:
            tx.append_points(pts + other)
    got = store.series([r1.id, r2.id])
    assert [(p.run_id, p.metric, p.x, p.y, dict(p.labels), p.lo, p.hi) for p in got] == [
        (r1.id, "loss", 1, 3.0, {}, None, None), (r1.id, "loss", 2, None, {}, None, None),
        (r1.id, "acc", 1, 0.5, {"position": 1}, 0.4, 0.6),
        (r2.id, "tau", "untrained", 1.1, {}, None, None)]
    assert store.series_runs(sid) == {r1.id: 3, r2.id: 1}
    assert store.series([]) == []
    assert len(store.events(sid)) == 3  # the session and two runs: points are no events


SCRIPT = """
echo "starting"
for i in 1 2 3; do
  echo "@series {\\"metric\\": \\"loss\\", \\"x\\": $i, \\"y\\": $((10 - i))}"
done
printf '@series {"metric": "accuracy", "axis": "epoch", "x": 1, '
sleep 0.3
printf '"y": 0.75, "labels": {"split": "held-out"}}\\n'
echo '@series {"metric": "broken"}'
echo done
"""


def test_a_shell_stage_records_a_series_through_the_runner(tmp_path: Path,
                                                           store: Store) -> None:
    script = tmp_path / "mine.sh"
    script.write_text(SCRIPT)
    spec = write_spec(tmp_path / "p.yaml", [{"name": "mine", "run": f"sh {script}"}])
    runner = make_runner(store, spec)
    assert runner.run().ok, runner.lines
    run = store.runs(runner.sid)[0]
    got = [(p.metric, p.axis, p.x, p.y, dict(p.labels)) for p in store.series([run.id])]
    assert got == [("loss", "step", 1, 9.0, {}), ("loss", "step", 2, 8.0, {}),
                   ("loss", "step", 3, 7.0, {}),
                   ("accuracy", "epoch", 1, 0.75, {"split": "held-out"})]
    log, _ = store.log(run.id)
    assert log.count("@series") == 5  # the log keeps every line as printed
    echoed = "\n".join(runner.lines)
    assert "starting" in echoed and "@series {" not in echoed  # points are not echoed
    assert any("[mine] skipped the @series line at byte" in ln and "no 'x'" in ln
               for ln in runner.lines), runner.lines


@pytest.mark.ssh
@pytest.mark.sqlite
def test_a_shell_stage_over_ssh_records_its_series(tmp_path: Path, store: Store,
                                                   ssh_host) -> None:
    spec = write_spec(tmp_path / "p.yaml", hosts={"gpu": ssh_entry(ssh_host)}, stages=[
        {"name": "remote", "host": "gpu", "run": SCRIPT}])
    runner = make_runner(store, spec)
    assert runner.run().ok, runner.lines
    run = store.runs(runner.sid)[0]
    points = store.series([run.id])
    assert [p.metric for p in points] == ["loss"] * 3 + ["accuracy"]
    log, _ = store.log(run.id)
    assert json.loads(log.splitlines()[1].removeprefix("@series "))["y"] == 9
