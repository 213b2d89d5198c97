"""Servers that start together: serve stages with ``wait: false`` start their servers and
end, the runner waits for all of them (on their host, each to its own health timeout)
before the first stage that needs them, and a server that dies while loading blocks its
serve stage with its own error and the stage that needed it, leaving nothing running."""

from __future__ import annotations

import json

import pytest

from state.store import Store
from tests.serve.helpers import kill_fakes, wait_gone, write_spec
from tests.serve.test_serve_pipeline import bench, runner, runs_of, serve, todos, world
from tests.sshd import free_port

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
__all__ = ["world"]  # the fixture, used by name


def test_servers_start_together_and_the_benchmark_waits_for_them(world, store: Store) -> None:
    w = world
    k1_port = free_port()
    slow = ("--fake-startup-s", "1.5")
    try:
        spec = write_spec(w.tmp / "serve.yaml", w.hosts, [
            serve("serve_baseline", w, w.base_port, speculative=False, extra=slow,
                  wait=False, kv_cache_memory_bytes="64M"),
            serve("serve_spec", w, w.spec_port, extra=slow, wait=False),
            serve("serve_k1", w, k1_port, extra=slow, wait=False, num_speculative_tokens=1),
            {**bench(w, ["serve_baseline", "serve_spec", "serve_k1"], concurrency=[1],
                     requests=4),
             "with": {**bench(w, [], concurrency=[1], requests=4)["with"],
                      "url": {"spec": f"http://127.0.0.1:{w.spec_port}",
                              "k1": f"http://127.0.0.1:{k1_port}"}}},
        ])
        r = runner(store, spec)
        report = r.run()
        assert report.ok, "\n".join(r.lines)
        sid = r.sid
        serves = {name: runs_of(store, sid, name)[0] for name in
                  ("serve_baseline", "serve_spec", "serve_k1")}
        # each serve stage started its server and ended without waiting for it...
        for run in serves.values():
            assert run.result["metrics"]["waited"] is False
            assert run.result["metrics"]["service"]["ready"] is False
        assert "--kv-cache-memory-bytes 67108864" in \
            serves["serve_baseline"].result["metrics"]["command"]
        # ...and the runner waited for all three before the benchmark, once
        waits = [ln for ln in r.lines if "started without waiting:" in ln]
        assert len(waits) == 1 and waits[0].startswith("[benchmark] waiting for 3 server(s)")
        for name, run in serves.items():
            ready = run.job["service_ready"]
            assert ready["model"] and ready["startup_s"] >= 1.5, ready
            assert any(ln.startswith(f"[{name}] r{run.id} server ") and "answering after" in ln
                       for ln in r.lines)
        bench_run = runs_of(store, sid, "benchmark")[0]
        levels = bench_run.result["metrics"]["levels"]
        assert {lv["role"] for lv in levels} == {"baseline", "spec", "k1"}
        assert all(lv["completed"] == 4 for lv in levels)
        assert bench_run.result["metrics"]["candidates"]["k1"]["k"] == 1
        # the todo of each server says how long it took to answer
        notes = [e for e in store.events(sid) if e.kind == "todo.noted"]
        assert sum("answering after" in json.dumps(e.payload) for e in notes) == 3
        # and every server stopped when the run ended
        for port in (w.base_port, w.spec_port, k1_port):
            assert wait_gone(port) == []
    finally:
        kill_fakes(k1_port)


def test_a_server_that_dies_while_loading_blocks_its_stage_and_the_benchmark(
        world, store: Store) -> None:
    w = world
    spec = write_spec(w.tmp / "serve.yaml", w.hosts, [
        serve("serve_baseline", w, w.base_port, speculative=False, wait=False,
              extra=("--fake-startup-s", "1")),
        serve("serve_spec", w, w.spec_port, wait=False, extra=(
            "--fake-die-after", "2", "--fake-die-message",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB")),
        bench(w, ["serve_baseline", "serve_spec"], concurrency=[1], requests=2),
    ])
    r = runner(store, spec)
    assert not r.run().ok
    t = todos(store, r.sid)
    spec_run = runs_of(store, r.sid, "serve_spec")[0]
    error = ("the server exited during start: OutOfMemoryError: CUDA out of memory. Tried "
             "to allocate 9.00 GiB")
    assert t["serve_spec"].status == "blocked"
    assert t["serve_spec"].blocked_reason == f"r{spec_run.id} server failed to start: {error}"
    assert t["benchmark"].status == "blocked"
    assert f"needs a server that did not start: serve_spec's server (r{spec_run.id}) did " \
        f"not start: {error}" in t["benchmark"].blocked_reason
    assert spec_run.job["service"]["state"] == "stopped"
    # the one that came up was waited for, and stopped with the run
    assert runs_of(store, r.sid, "serve_baseline")[0].job["service_ready"]["model"]
    for port in (w.base_port, w.spec_port):
        assert wait_gone(port) == []
