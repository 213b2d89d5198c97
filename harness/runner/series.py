"""The series a job records, read from its log as it streams (``pipeline.series`` has the
line format).

:class:`SeriesReader` is fed the same chunks the store's log gets (byte offset, text) and
gives back the points of the lines completed so far, each keyed by the byte offset where
its line starts, so a point is stored once however often its bytes are read (a runner
that re-attaches reads on from the stored log's end, and picks up the line it had begun).
"""

from __future__ import annotations

from pipeline.series import MAX_LINE, PREFIX, BadLine, parse
from state.series import SeriesPoint
from state.store import utcnow

MAX_REPORTED = 3  # bad lines said on the terminal per run; the rest are only counted


class SeriesReader:
    """Points from one run's log. ``offset`` is where the reading starts; ``tail`` the
    unfinished last line of what is already stored before it (when re-attaching)."""

    def __init__(self, run_id: int, offset: int, tail: str = ""):
        self.run_id = run_id
        self._buf = tail  # the line being written (its last MAX_LINE characters at most)
        self._start = offset - len(tail.encode())  # where that line began: the point's key
        self._skip = False  # that line is longer than any series line: drop it
        self.bad = 0  # lines that meant to be points but could not be read
        self._said: list[str] = []

    def feed(self, start: int, text: str, *, final: bool = False) -> list[SeriesPoint]:
        """The points completed by ``text``, which begins at byte ``start`` of the log;
        ``final``: the log has ended, so an unfinished last line counts as finished."""
        points: list[SeriesPoint] = []
        now = utcnow()
        pos = start
        pieces = text.split("\n")
        for i, piece in enumerate(pieces):
            if not self._skip:
                self._buf += piece
                self._trim()
            pos += len(piece.encode())
            if i == len(pieces) - 1:
                break
            if not self._skip:  # a newline ends the line
                self._read(points, now)
            self._buf, self._skip = "", False
            pos += 1
            self._start = pos
        if final and (self._buf or self._skip):
            if not self._skip:
                self._read(points, now)
            self._buf, self._skip = "", False
            self._start = pos
        return points

    def _read(self, points: list[SeriesPoint], now: str) -> None:
        try:
            p = parse(self._buf)
        except BadLine as exc:
            self._bad(str(exc))
            return
        if p is None:
            return
        lo, hi = p.spread if p.spread is not None else (None, None)
        points.append(SeriesPoint(run_id=self.run_id, start=self._start, metric=p.metric,
                                  axis=p.axis, x=p.x, y=p.y, labels=dict(p.labels), lo=lo,
                                  hi=hi, ts=now))

    def _trim(self) -> None:
        """A line still being written is not kept whole when it grows past any series
        line's length (a progress bar redrawn with ``\\r`` for minutes): only what follows
        its last ``\\r`` counts, and nothing once even that is too long."""
        if len(self._buf) <= MAX_LINE:
            return
        tail = self._buf.rsplit("\r", 1)[-1]
        if len(tail) <= MAX_LINE:
            self._buf = tail
            return
        if tail.lstrip().startswith(PREFIX):
            self._bad(f"longer than {MAX_LINE} bytes")
        self._buf, self._skip = "", True

    def _bad(self, why: str) -> None:
        self.bad += 1
        if self.bad <= MAX_REPORTED:
            more = (f" (further bad {PREFIX.strip()} lines of this run are not reported)"
                    if self.bad == MAX_REPORTED else "")
            self._said.append(f"skipped the {PREFIX.strip()} line at byte {self._start} of "
                              f"the log: {why}{more}")

    def take_messages(self) -> list[str]:
        """What to say about skipped lines since last asked."""
        said, self._said = self._said, []
        return said


def unfinished_line(text: str) -> str:
    """The end of a stored log after its last newline: the line the job was writing."""
    tail = text.rsplit("\n", 1)[-1]
    return tail if len(tail) <= MAX_LINE else ""


__all__ = ["SeriesReader", "unfinished_line"]
