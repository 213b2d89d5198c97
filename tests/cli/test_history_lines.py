"""`harness show` and `harness log` print each event as one short line; --json keeps all.

The snapshots are of a real campaign's history (examples/kimi-k25-campaign.jsonl),
imported through the real CLI, run as a fresh process each time. Rewrite them after a
deliberate change with ``HARNESS_UPDATE_SNAPSHOTS=1`` and read the diff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.render import VALUE_WIDTH, describe
from harness.runner.ownership import host_record
from pipeline.spec.models import HostSpec
from state.store import Store
from tests.conftest import DATA, ROOT

CAMPAIGN = ROOT / "examples" / "kimi-k25-campaign.jsonl"
SNAPSHOTS = DATA / "history"
SESSION = "kimi-k25-campaign"
VIEWS = {"log": ["log"], "show-t3": ["show", "t3"], "show-t8": ["show", "t8"],
         "show-t9": ["show", "t9"]}


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("history")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(tmp / "state.db"),
           "HARNESS_DATA_DIR": str(tmp / "data"), "HARNESS_CONFIG_DIR": str(tmp / "config"),
           "HARNESS_SESSION": SESSION, "COLUMNS": "200"}
    _harness(env, "import", str(CAMPAIGN))
    return env


def _harness(env: dict[str, str], *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "harness", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.sqlite
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_history_matches_its_snapshot(campaign: dict[str, str], view: str) -> None:
    out = _harness(campaign, *VIEWS[view])
    snap = SNAPSHOTS / f"kimi-k25-{view}.txt"
    if os.environ.get("HARNESS_UPDATE_SNAPSHOTS") == "1":
        snap.write_text(out)
    assert out == snap.read_text()


@pytest.mark.sqlite
def test_every_history_line_is_short(campaign: dict[str, str]) -> None:
    lines = _harness(campaign, "log").splitlines()
    assert len(lines) == 55
    # number, time, actor, todo: ~45 columns; what changed, with values cut to VALUE_WIDTH
    assert max(len(line) for line in lines) <= 45 + 2 * VALUE_WIDTH + 40
    assert not any("{" in line or "None" in line for line in lines)


@pytest.mark.sqlite
def test_json_keeps_every_value_whole(campaign: dict[str, str]) -> None:
    events = json.loads(_harness(campaign, "log", "--json"))
    stored = [json.loads(line) for line in CAMPAIGN.read_text().splitlines()]
    stored = [e for e in stored if e.get("type") == "event"]
    assert [e["payload"] for e in events] == [e["payload"] for e in stored]
    assert all(e["description"] for e in events)
    shown = json.loads(_harness(campaign, "show", "t8", "--json"))
    reason = next(e for e in stored if e["kind"] == "run.updated"
                  and "reason" in e["payload"]["changes"])["payload"]["changes"]["reason"][1]
    assert len(reason) > VALUE_WIDTH  # cut in the line, whole here
    assert any(h["payload"].get("changes", {}).get("reason", [None, None])[1] == reason
               for h in shown["history"])


def test_a_runs_job_reads_as_where_it_runs(tmp_path: Path) -> None:
    """The runner records the whole host entry on the run; the line says where and which
    job, as the runner writes it (harness/runner/scheduler.py, supervise.py)."""
    with Store.open(str(tmp_path / "s.db")) as store:
        sid = store.create_session("s", actor="human")
        with store.write(sid, "runner") as tx:
            t = tx.create_todo("train")
            run = tx.queue_run(todo_id=t.num, host="local", stage="train")
            for _ in range(7):
                run = tx.queue_run(todo_id=t.num, host="local", stage="train")
            tx.update_run(run.id, job={"key": "abc", "host": host_record(HostSpec())},
                          owner="box:1")
            tx.update_run(run.id, state="running", pid=5625, run_dir="/w/r8")
            cluster = HostSpec(name="cluster", host="login1", scheduler="slurm")
            tx.update_run(run.id, job={"key": "abc", "host": host_record(cluster),
                                       "job_id": "4242"})
        lines = [describe(e) for e in store.events(sid) if e.kind == "run.updated"]
    assert lines == ["run r8 on local: owner: 'box:1'",
                     "run r8, pid 5625: queued -> running; run_dir: '/w/r8'",
                     "run r8 on cluster, slurm job 4242"]
