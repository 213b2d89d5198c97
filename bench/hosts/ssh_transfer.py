"""How fast do files move to and from a host without SFTP, against one with it?

Two real sshds on 127.0.0.1 (tests/sshd.py): one with the ``Subsystem sftp`` line, one
without. The same 50 MB random file goes up (``SSHExecutor.put``) and comes back
(``SSHExecutor.get``) through each: over SFTP (paramiko's client, what fabric's put/get use)
and over raw exec channels (``pipeline/hosts/transfer.py``: ``cat`` on the host, sha256 checked
on both ends). In the same run, OpenSSH's own client doing the same ``cat`` is the
reference for what the link gives, and fabric's ``run(..., in_stream=file)`` (the obvious
way that is not used) is timed on a small file. Every copy is verified by sha256.

    python -m bench.hosts.ssh_transfer               # 50 MB, 5 rounds
    python -m bench.hosts.ssh_transfer --mb 200 --rounds 3

Prints one table: median and best MiB/s per way and direction.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.hosts.ssh import SSHExecutor
from tests.sshd import SSHServer


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def openssh(server: SSHServer, remote_cmd: str, stdin: Path | None,
            stdout: Path | None) -> None:
    argv = ["ssh", "-q", "-i", str(server.user_key), "-p", str(server.port),
            "-o", f"UserKnownHostsFile={server.known_hosts}", "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes", f"{server.user}@127.0.0.1", remote_cmd]
    with open(stdin or os.devnull, "rb") as fin, open(stdout or os.devnull, "wb") as fout:
        subprocess.run(argv, stdin=fin, stdout=fout, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--in-stream-kb", type=int, default=2,
                        help="size of the file sent through fabric's in_stream")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as tmp_s:
        tmp = Path(tmp_s)
        src = tmp / "src.bin"
        with src.open("wb") as fh:
            for _ in range(args.mb):
                fh.write(os.urandom(1 << 20))
        digest = sha256(src)
        with_sftp = SSHServer(tmp / "sftp")
        without = SSHServer(tmp / "nosftp", sftp=False)
        with_sftp.start()
        without.start()
        ways = [("SFTP (paramiko, as fabric put/get)", with_sftp),
                ("exec channel + sha256 (no-SFTP host)", without)]
        times: dict[tuple[str, str], list[float]] = {}
        try:
            executors = [SSHExecutor(server.host_spec(workdir=str(tmp / "remote")))
                         for _label, server in ways]
            for ex in executors:
                ex.run(["true"])
            # Rounds interleave the ways, so the load of a shared machine hits them alike.
            for i in range(args.rounds):
                for (label, _server), ex in zip(ways, executors, strict=True):
                    remote = f"up-{i}.bin"
                    times.setdefault((label, "put"), []).append(
                        timed(lambda r=remote, e=ex: e.put(src, r)))
                    assert sha256(Path(ex.resolve(remote))) == digest
                    back = tmp / "back.bin"
                    times.setdefault((label, "get"), []).append(
                        timed(lambda r=remote, e=ex, b=back: e.get(r, b)))
                    assert sha256(back) == digest
                    back.unlink()
                    Path(ex.resolve(remote)).unlink()
                target = tmp / "remote" / "openssh.bin"
                label = "OpenSSH client, ssh host cat (reference)"
                times.setdefault((label, "put"), []).append(
                    timed(lambda t=target: openssh(with_sftp, f"cat > {t}", src, None)))
                assert sha256(target) == digest
                back = tmp / "back-openssh.bin"
                times.setdefault((label, "get"), []).append(
                    timed(lambda t=target, b=back: openssh(with_sftp, f"cat {t}", None, b)))
                assert sha256(back) == digest
            assert [ex.has_sftp for ex in executors] == [True, False]
            for ex in executors:
                ex.close()
            small = tmp / "small.bin"
            small.write_bytes(os.urandom(args.in_stream_kb * 1024))
            host = without.host_spec(workdir=str(tmp / "remote"))
            with SSHExecutor(host) as ex:
                conn = ex._connection()
                with small.open("rb") as fh:
                    took = timed(lambda: conn.run(f"cat > {tmp / 'remote' / 'small.bin'}",
                                                  in_stream=fh, hide=True))
            in_stream_rate = len(small.read_bytes()) / took
        finally:
            with_sftp.stop()
            without.stop()
    rows = [(label, direction, t) for (label, direction), t in times.items()]
    base = {direction: statistics.median([args.mb / t for t in took])
            for label, direction, took in rows if label.startswith("SFTP")}
    print(f"{args.mb} MiB random file, {args.rounds} rounds, loopback sshd, sha256 verified\n")
    print("| way | direction | median MiB/s | best MiB/s | x SFTP, same direction |")
    print("| --- | --- | --- | --- | --- |")
    for label, direction, took in rows:
        rates = [args.mb / t for t in took]
        med = statistics.median(rates)
        print(f"| {label} | {direction} | {med:.1f} | {max(rates):.1f} | "
              f"{med / base[direction]:.2f} |")
    print(f"| fabric run(in_stream=file), {args.in_stream_kb} KB | put | "
          f"{in_stream_rate / 2**20:.4f} ({in_stream_rate:.0f} B/s) | | "
          f"{in_stream_rate / 2**20 / base['put']:.5f} |")


if __name__ == "__main__":
    main()
