"""A job's log, from its host into the store.

The host's log is read by byte offset. The store keeps text, so only whole UTF-8
characters are taken (the rest waits for the next read), and the values of secrets are
masked with asterisks of the same byte length, so stored offsets still match the host's.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.executor import Executor, JobHandle

LOG_FLUSH_BYTES = 64 * 1024
LOG_FLUSH_SECONDS = 1.0

Chunk = tuple[int, str]  # (byte offset in the host's log, text)


class LogReader:
    """Reads one job's log onward from ``offset``, a chunk at a time."""

    def __init__(self, ex: Executor, handle: JobHandle, offset: int, secrets: Iterable[str]):
        self.ex = ex
        self.handle = handle
        self.offset = offset
        self.secrets = list(secrets)
        self._pending = b""

    def read(self, *, final: bool = False) -> Chunk | None:
        """The next chunk, or None when nothing new was written. ``final`` takes every
        byte, even a character cut short (the job has ended: nothing will complete it)."""
        data, _next = self.ex.tail(self.handle, self.offset + len(self._pending))
        data = self._pending + data
        if not data:
            self._pending = b""
            return None
        cut = len(data) if final else utf8_boundary(data)
        text = mask(data[:cut].decode("utf-8", errors="replace"), self.secrets)
        start = self.offset
        self.offset, self._pending = start + cut, data[cut:]
        return (start, text) if text else None


def mask(text: str, secrets: Iterable[str]) -> str:
    """Secret values in job output become asterisks of the same byte length, so stored
    offsets still match the host's log."""
    for value in secrets:
        if len(value) >= 4 and value in text:
            text = text.replace(value, "*" * len(value.encode()))
    return text


def utf8_boundary(data: bytes) -> int:
    """The length of the longest prefix of ``data`` that ends on a character boundary."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return len(data)
        if b >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)
