"""Writing hidden-state shards while the verifier keeps running.

:class:`StreamingShard` is one shard file (the format is in :mod:`pipeline.eagle3.states.shards`) written in place:
header and small tensors first, then ``aux`` and ``last`` rows as batches arrive, in pieces
on a thread pool. Two ways to put the bytes in the file:

- ``pwrite`` (default): ``os.pwrite`` of each piece. Linux takes the file's inode lock for
  every buffered write, so pieces of one file are copied into the page cache one at a time,
  whatever the number of threads;
- ``mmap``: the file is mapped and the pieces are copied into the mapping by several
  threads at once (page faults on distinct pages run in parallel). ``bench/eagle3/gpu.py``
  measures both on the GPU host.

:class:`WritePipeline` is the background side of extraction: it waits for a batch's copy to
pinned memory, submits its pieces, hands the pinned buffer back when the last piece is
written (not when the batch is submitted: several batches are in flight at once), closes a
shard when all of its rows are in, and counts the bytes and the seconds during which any
write was in flight: the write bandwidth the stage reports.
"""

from __future__ import annotations

import json
import mmap
import os
import queue
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

WRITE_PIECE = 8 << 20  # bytes per parallel write
WRITE_METHODS = ("pwrite", "mmap")
_POOL: ThreadPoolExecutor | None = None

_DTYPE_NAMES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "int64": "I64",
                "int32": "I32", "uint8": "U8", "bool": "BOOL"}


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="shard-write")
    return _POOL


class WriteStats:
    """Bytes written and the wall seconds during which at least one write was running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0
        self.active = 0.0
        self._inflight = 0
        self._since = 0.0

    def begin(self) -> None:
        with self._lock:
            if self._inflight == 0:
                self._since = time.perf_counter()
            self._inflight += 1

    def end(self, nbytes: int) -> None:
        with self._lock:
            self._inflight -= 1
            self.bytes += nbytes
            if self._inflight == 0:
                self.active += time.perf_counter() - self._since

    @property
    def gb_per_s(self) -> float | None:
        return self.bytes / self.active / 1e9 if self.active > 0 else None


def _raw(t: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy (and without numpy). The caller
    keeps ``t`` alive while the view is used."""
    import ctypes

    if not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError("need a contiguous CPU tensor")
    nbytes = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B")


def _pwrite_all(fd: int, t: Any, at: int) -> None:
    view = _raw(t)
    done = 0
    while done < len(view):  # pwrite may write less than asked
        done += os.pwrite(fd, view[done:], at + done)


class StreamingShard:
    """A safetensors file written in place, under a temporary name renamed by :meth:`close`
    (a shard exists whole or not at all).

    Layout (the format's rules: one JSON header padded to 8 bytes, then the tensors' bytes
    back to back): ``aux``, ``last``, ``offsets``, ``sample_index``, ``input_ids``,
    ``loss_mask``; every tensor starts at a multiple of its element size.
    """

    def __init__(self, path: Path, *, rows: int, hidden: int, dtype: Any,
                 small: dict[str, Any], meta: dict[str, Any], method: str = "pwrite",
                 stats: WriteStats | None = None):
        if method not in WRITE_METHODS:
            raise ValueError(f"unknown write method {method!r}")
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.rows, self.hidden, self.method = rows, hidden, method
        self.stats = stats or WriteStats()
        itemsize = dtype.itemsize
        name = _DTYPE_NAMES[str(dtype).removeprefix("torch.")]
        header: dict[str, Any] = {"__metadata__": {k: str(v) for k, v in meta.items()}}
        cursor = 0
        self._aux_at = cursor
        header["aux"] = {"dtype": name, "shape": [rows, 3 * hidden],
                         "data_offsets": [cursor, cursor + rows * 3 * hidden * itemsize]}
        cursor += rows * 3 * hidden * itemsize
        self._last_at = cursor
        header["last"] = {"dtype": name, "shape": [rows, hidden],
                          "data_offsets": [cursor, cursor + rows * hidden * itemsize]}
        cursor += rows * hidden * itemsize
        placed = []
        for key in ("offsets", "sample_index", "input_ids", "loss_mask"):
            t = small[key].contiguous()
            nbytes = t.numel() * t.element_size()
            header[key] = {"dtype": _DTYPE_NAMES[str(t.dtype).removeprefix("torch.")],
                           "shape": list(t.shape), "data_offsets": [cursor, cursor + nbytes]}
            placed.append((cursor, t))
            cursor += nbytes
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        self._data_at = 8 + len(blob)
        self.size = self._data_at + cursor
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, self.size)
        head = struct.pack("<Q", len(blob)) + blob
        if os.pwrite(self._fd, head, 0) != len(head):
            raise OSError(f"short write of the header of {self.tmp}")
        for at, t in placed:
            if t.numel():
                _pwrite_all(self._fd, t, self._data_at + at)
        self._row_aux = 3 * hidden * itemsize
        self._row_last = hidden * itemsize
        self._map: mmap.mmap | None = None
        self._bytes: Any = None
        if method == "mmap" and self.size:
            import torch

            self._map = mmap.mmap(self._fd, self.size)
            self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)

    def _pieces(self, row: int, aux: Any, last: Any) -> list[tuple[Any, int]]:
        n = aux.shape[0]
        if row + n > self.rows:
            raise ValueError(f"rows {row}..{row + n} past {self.rows}")
        jobs = []
        for tensor, base, row_bytes in ((aux, self._aux_at, self._row_aux),
                                        (last, self._last_at, self._row_last)):
            step = max(1, WRITE_PIECE // row_bytes)
            for a in range(0, n, step):
                jobs.append((tensor[a:a + step], self._data_at + base + (row + a) * row_bytes))
        return jobs

    def _write_piece(self, t: Any, at: int) -> None:
        import torch

        nbytes = t.numel() * t.element_size()
        self.stats.begin()
        try:
            if self._bytes is not None:
                # torch's copy releases the GIL: the pool's threads fill pages in parallel.
                self._bytes[at:at + nbytes].copy_(t.contiguous().view(-1).view(torch.uint8))
            else:
                _pwrite_all(self._fd, t, at)
        finally:
            self.stats.end(nbytes)

    def submit_rows(self, row: int, aux: Any, last: Any) -> list[Future]:
        """Start writing rows ``row .. row+len(aux)`` of both tensors (contiguous CPU
        tensors, kept alive by the caller until the futures are done)."""
        return [_pool().submit(self._write_piece, t, at)
                for t, at in self._pieces(row, aux, last)]

    def write_rows(self, row: int, aux: Any, last: Any) -> None:
        """The same, waiting for the pieces."""
        for fut in self.submit_rows(row, aux, last):
            fut.result()

    def close(self) -> None:
        self._release()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._release()

    def _release(self) -> None:
        if self._map is not None:
            self._bytes = None
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class WritePipeline:
    """The writer side of extraction, on one background thread (see the module docstring).

    ``rows(...)`` and ``finish(...)`` queue work in order; the first failure is re-raised in
    the caller's thread by the next call or by :meth:`close`. ``stall`` counts the seconds
    the caller waited for a free buffer: the time the verifier stood still for the disk.
    """

    def __init__(self, buffers: list[tuple[Any, Any]]):
        self.stats = WriteStats()
        self.stall = 0.0
        self.error: BaseException | None = None
        self._free: queue.Queue = queue.Queue()
        for b in buffers:
            self._free.put(b)
        self._jobs: queue.Queue = queue.Queue(maxsize=2 * max(1, len(buffers)))
        self._pending: dict[int, list[Future]] = {}
        self._thread = threading.Thread(target=self._loop, daemon=True, name="shard-assembler")
        self._thread.start()

    def buffer(self) -> tuple[Any, Any]:
        """A free pinned buffer pair; waits (and counts the wait) while all are in flight."""
        t0 = time.perf_counter()
        while True:
            self._raise()
            try:
                got = self._free.get(timeout=0.5)
            except queue.Empty:
                continue
            self.stall += time.perf_counter() - t0
            return got

    def rows(self, writer: StreamingShard, row: int, t: int, bufs: tuple[Any, Any],
             event: Any = None) -> None:
        self._put(("rows", writer, row, t, bufs, event))

    def finish(self, writer: StreamingShard, then: Any) -> None:
        self._put(("finish", writer, then))

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()
        self._raise()

    def _put(self, job: Any) -> None:
        self._raise()
        self._jobs.put(job)

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if self.error is not None:
                if job[0] == "finish":
                    for fut in self._pending.pop(id(job[1]), []):
                        fut.exception()  # wait: the descriptor must outlive its writes
                    job[1].abort()
                continue
            try:
                if job[0] == "rows":
                    self._rows(*job[1:])
                else:
                    self._finish(*job[1:])
            except BaseException as exc:  # re-raised in the caller's thread
                self.error = exc

    def _rows(self, writer: StreamingShard, row: int, t: int, bufs: tuple[Any, Any],
              event: Any) -> None:
        if event is not None:
            event.synchronize()  # the copy to pinned memory has landed
        aux_buf, last_buf = bufs
        writer.stats = self.stats
        futures = writer.submit_rows(row, aux_buf[:t], last_buf[:t])
        left = [len(futures)]
        lock = threading.Lock()

        def done(fut: Future) -> None:
            if fut.exception() is not None and self.error is None:
                self.error = fut.exception()
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                self._free.put(bufs)

        self._pending.setdefault(id(writer), []).extend(futures)
        if not futures:
            self._free.put(bufs)
        for fut in futures:
            fut.add_done_callback(done)

    def _finish(self, writer: StreamingShard, then: Any) -> None:
        for fut in self._pending.pop(id(writer), []):
            fut.result()
        writer.close()
        then()
