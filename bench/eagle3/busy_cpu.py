"""The main job on a busy CPU: one copy alone, then copies started together, as typed.

Each copy is `harness run eagle3-tiny.yaml` exactly as the README has it, with nothing set
by hand (``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` are removed from its environment), in
a folder of its own: its own copy of ``examples/eagle3-tiny.yaml`` (whose workdir,
``runs/eagle3-tiny``, is relative to the spec file, so each copy writes under its own
folder) and its own store (``--db``). ``--before REF`` runs the same copies on the code at
REF first, back to back with this tree's. The machine's load is sampled every 5 s.

    python -m bench.eagle3.busy_cpu [--copies 2] [--before REF] [--at REF] [--no-alone]
                                    [--out DIR]

Prints one table (wall time of each copy, the ratio to the copy alone, the CPU threads
its stages got, the train and verify figures it ended with, the load seen) and writes
``busy_cpu.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "eagle3-tiny.yaml"
BY_HAND = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "HARNESS_DB", "HARNESS_SESSION")


class Load:
    """The 1-minute load average every ``every`` seconds while a phase runs."""

    def __init__(self, every: float = 5.0):
        self.every = every
        self.samples: list[float] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._halt.is_set():
            self.samples.append(os.getloadavg()[0])
            self._halt.wait(self.every)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._halt.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        s = self.samples or [os.getloadavg()[0]]
        return {"min": min(s), "mean": round(statistics.fmean(s), 2), "max": max(s)}


def start_copy(tree: Path, folder: Path) -> subprocess.Popen[str]:
    folder.mkdir(parents=True)
    spec = folder / EXAMPLE.name
    shutil.copy(EXAMPLE, spec)
    env = {k: v for k, v in os.environ.items() if k not in BY_HAND}
    env.update(PYTHONPATH=str(tree), HARNESS_DATA_DIR=str(folder / "data"),
               HARNESS_CONFIG_DIR=str(folder / "config"))
    out = (folder / "harness-run.log").open("w")
    return subprocess.Popen([sys.executable, "-m", "harness", "--db", str(folder / "state.db"),
                             "run", str(spec)], cwd=tree, env=env, stdout=out,
                            stderr=subprocess.STDOUT, text=True)


def read_copy(folder: Path, wall: float, code: int) -> dict[str, Any]:
    """What a copy left: its figures from its store (the stage results), and the threads
    its stages' logs say they got."""
    from state.store import Store

    text = (folder / "harness-run.log").read_text(errors="replace")
    store = Store.open(str(folder / "state.db"))
    try:
        runs = {r.stage: r for r in store.runs() if r.state == "succeeded"}
        got = {}
        for stage, run in runs.items():
            log, _end = store.log(run.id)
            said = re.search(r"^threads: (\d+) intra-op", log, re.M)
            got[stage] = int(said.group(1)) if said else None
    finally:
        store.close()
    train = (runs["train"].result or {}).get("metrics", {}) if "train" in runs else {}
    verify = (runs["verify"].result or {}).get("metrics", {}) if "verify" in runs else {}
    per_position = verify.get("acceptance_per_position") or [None]
    return {"folder": str(folder), "wall_s": round(wall, 1), "exit": code,
            "completed": bool(re.search(r"^done: 9/9 completed", text, re.M)),
            "threads": got, "train_acc1": train.get("heldout_acc_pos1"),
            "verify_acc1": per_position[0], "tau": verify.get("tau")}


def phase(tree: Path, out: Path, label: str, copies: int) -> dict[str, Any]:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"== {label}: {copies} cop{'y' if copies == 1 else 'ies'} at once ({uptime})",
          flush=True)
    with Load() as load:
        t0 = time.monotonic()
        folders = [out / f"{label.replace(' ', '-')}-{i + 1}" for i in range(copies)]
        procs = [(folder, start_copy(tree, folder)) for folder in folders]
        ended: dict[int, float] = {}
        while len(ended) < len(procs):  # each copy's own end, whichever ends first
            for i, (_folder, proc) in enumerate(procs):
                if i not in ended and proc.poll() is not None:
                    ended[i] = time.monotonic() - t0
            time.sleep(0.5)
        results = [read_copy(folder, ended[i], proc.returncode)
                   for i, (folder, proc) in enumerate(procs)]
    end = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {"label": label, "copies": results, "load": load.summary(), "uptime_start": uptime,
            "uptime_end": end}


def _pct(x: Any) -> str:
    return f"{x:.0%}" if isinstance(x, (int, float)) else "-"


def table(phases: list[dict[str, Any]]) -> str:
    alone = {p["label"].split(" ")[0]: p["copies"][0]["wall_s"] for p in phases
             if len(p["copies"]) == 1}
    rows = ["| code | copies at once | copy | wall | x alone | threads its stages got "
            "| train acc@1 | verify acc@1, τ | load (1-min avg: min / mean / max) |",
            "|" + " --- |" * 9]
    for p in phases:
        code = p["label"].split(" ")[0]
        for i, c in enumerate(p["copies"], 1):
            ratio = f"{c['wall_s'] / alone[code]:.2f}x" if code in alone else "-"
            got = sorted({n for n in c["threads"].values() if n is not None})
            tau = f"{c['tau']:.2f}" if isinstance(c["tau"], (int, float)) else "-"
            rows.append(
                f"| {code} | {len(p['copies'])} | {i} | {c['wall_s'] / 60:.1f} min"
                f"{'' if c['completed'] else ' (not completed)'} | {ratio} "
                f"| {', '.join(map(str, got)) or 'torch default'} | {_pct(c['train_acc1'])} "
                f"| {_pct(c['verify_acc1'])}, {tau} | {p['load']['min']:.1f} / "
                f"{p['load']['mean']:.1f} / {p['load']['max']:.1f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--before", metavar="REF", help="also run the copies on the code at REF")
    ap.add_argument("--at", metavar="REF",
                    help="the code to measure as 'after', exported from REF (default: this "
                         "tree, as it is while the copies run)")
    ap.add_argument("--no-alone", action="store_true", help="skip the copy alone")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="busy-cpu-"))
    out.mkdir(parents=True, exist_ok=True)
    from bench.before_tree import export_tree

    trees: list[tuple[str, Path]] = [
        (args.at[:10], export_tree(args.at, out / "at-tree")) if args.at else ("after", ROOT)]
    if args.before:
        trees.append(("before", export_tree(args.before, out / "before-tree")))
    phases = []
    for name, tree in trees:
        if not args.no_alone:
            phases.append(phase(tree, out, f"{name} alone", 1))
        phases.append(phase(tree, out, f"{name} together", args.copies))
        (out / "busy_cpu.json").write_text(json.dumps(phases, indent=2))
        print(table(phases), flush=True)
    print(f"\n{os.cpu_count()} CPUs; files in {out}")


if __name__ == "__main__":
    main()
