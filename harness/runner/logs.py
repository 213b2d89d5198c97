"""A job's log, from its host into the store.

The host's log is read by byte offset. The store keeps text, so only whole UTF-8
characters are taken (the rest waits for the next read), and the values of secrets are
masked with asterisks of the same byte length, so stored offsets still match the host's.

A secret may be split across two reads (a job that prints half a token, then sleeps): the
end of a read that could be the start of a secret is held back until the next read shows
whether it is one, or until the job has ended. A held-back tail is at most one byte
shorter than the longest secret, and only ever a tail that matches a secret's beginning.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.hosts.executor import Executor, JobHandle

LOG_FLUSH_BYTES = 64 * 1024
LOG_FLUSH_SECONDS = 1.0
MIN_SECRET = 4  # shorter values are not masked: masking every "1" helps nobody

Chunk = tuple[int, str]  # (byte offset in the host's log, text)


class LogReader:
    """Reads one job's log onward from ``offset``, a chunk at a time."""

    def __init__(self, ex: Executor, handle: JobHandle, offset: int, secrets: Iterable[str]):
        self.ex = ex
        self.handle = handle
        self.offset = offset
        self.secrets = sorted({s.encode() for s in secrets if len(s) >= MIN_SECRET},
                              key=len, reverse=True)
        self._pending = b""

    def read(self, *, final: bool = False) -> Chunk | None:
        """The next chunk, or None when nothing new can be given yet. ``final`` takes every
        byte, even a character cut short or the start of a secret (the job has ended:
        nothing will complete them)."""
        data, _next = self.ex.tail(self.handle, self.offset + len(self._pending))
        data = self._pending + data
        if not data:
            self._pending = b""
            return None
        masked, spans = mask_bytes(data, self.secrets)
        if final:
            cut = len(data)
        else:
            cut = len(data) - secret_prefix_tail(data, self.secrets)
            # a secret found whole is masked whole: never cut through one
            cut = max([cut, *(end for start, end in spans if start < cut < end)])
            cut = utf8_boundary(masked[:cut])
        text = masked[:cut].decode("utf-8", errors="replace")
        start = self.offset
        self.offset, self._pending = start + cut, data[cut:]
        return (start, text) if text else None


def mask_bytes(data: bytes, secrets: Iterable[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    """``data`` with every occurrence of a secret (overlapping ones too) turned into
    asterisks of the same length, and the spans masked."""
    spans: list[tuple[int, int]] = []
    for value in secrets:
        at = data.find(value)
        while at != -1:
            spans.append((at, at + len(value)))
            at = data.find(value, at + 1)
    if not spans:
        return data, spans
    out = bytearray(data)
    for start, end in spans:
        out[start:end] = b"*" * (end - start)
    return bytes(out), spans


def secret_prefix_tail(data: bytes, secrets: Iterable[bytes]) -> int:
    """The length of the longest end of ``data`` that is the beginning (not the whole) of
    a secret: the part that must wait for the next read."""
    longest = 0
    for value in secrets:
        for k in range(min(len(value) - 1, len(data)), longest, -1):
            if data.endswith(value[:k]):
                longest = k
                break
    return longest


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
