"""What does sending a command's environment on the channel's standard input cost over SSH?

A real sshd on 127.0.0.1 (tests/sshd.py). The same command, ``true`` with a 40-variable
environment (one of them a 40-character token), runs three ways through one
``SSHExecutor``: with the environment on the channel's stdin and evaluated by the remote
shell (what ``run(env=...)`` and ``start_detached`` do now), with the same values as
``export`` lines inside the command (the old way, which put them in the host's process
list; the baseline), and with no environment at all (fabric's ``run``, the floor). A
detached job's launch is timed too, each way.

    python -m bench.hosts.ssh_env                # 40 rounds
    python -m bench.hosts.ssh_env --rounds 100

Prints one table: median and best milliseconds per way.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.hosts import jobscripts
from pipeline.hosts.ssh import SSHExecutor
from tests.sshd import SSHServer


def timed(fn: Callable[[], object], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = SSHServer(Path(tmp) / "sshd")
        server.start()
        try:
            ex = SSHExecutor(server.host_spec(workdir=str(Path(tmp) / "work")))
            env = {f"VAR_{i}": f"value-{i}-" + "x" * 20 for i in range(39)}
            env["HF_TOKEN"] = "hf_" + secrets.token_hex(20)
            script = "true"
            exports = jobscripts.export_lines(env)
            sent = jobscripts.stdin_env(env)
            data = sent.data
            ex.run(["true"])  # connect once, outside the timings
            n = iter(range(10 ** 6))
            argv = ["true"]

            def launch(way: str) -> None:
                job = ex._job_inputs(f"bench-{way}-{next(n)}", argv, env, None)
                text = jobscripts.launch_script(job.run_dir, job.wrapper, job.description)
                if way == "stdin":
                    ex._shell_env(text, job.env, 60)
                else:
                    ex._shell(jobscripts.export_lines(job.env) + text, 60)

            rows = [
                ("command, env on stdin (now)", timed(
                    lambda: ex._shell_input(sent.prelude + script, data, 60),
                    args.rounds)),
                ("command, env in the command line (old)", timed(
                    lambda: ex._shell(exports + script, 60), args.rounds)),
                ("command, no env (fabric run)", timed(
                    lambda: ex._shell(script, 60), args.rounds)),
                ("detached launch, env on stdin (now)", timed(
                    lambda: launch("stdin"), args.rounds)),
                ("detached launch, env in the command line (old)", timed(
                    lambda: launch("argv"), args.rounds)),
            ]
            ex.close()
        finally:
            server.stop()
    width = max(len(r[0]) for r in rows)
    print(f"{'way':<{width}}  median ms  best ms  ({args.rounds} rounds, "
          f"{len(data)} bytes of environment)")
    for name, times in rows:
        print(f"{name:<{width}}  {statistics.median(times):9.1f}  {min(times):7.1f}")


if __name__ == "__main__":
    main()
