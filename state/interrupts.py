"""Hold Ctrl-C off the few bytecodes where a write takes or gives back its lock.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread. One that
lands after ``BEGIN IMMEDIATE`` returned but before the code that would roll it back is
entered leaves the writer lock taken and the transaction open; every later write of that
process then waits out the busy timeout (30 s) and fails, including the ones a Ctrl-C'd
``harness run`` makes while it stops its servers. Measured before this guard: 39 of 400
Ctrl-Cs landing at random moments of a write loop leaked the lock (tests/store/test_interrupts.py
runs the same loop).

:class:`InterruptGate` defers SIGINT while closed and delivers it where the caller opens
the gate, inside the block that cleans up. Only the main thread with Python's own SIGINT
handler (or SIGTERM/SIGHUP with :func:`stop_signals_raise`'s) is touched: other threads
never see KeyboardInterrupt, and a program that installed its own handler keeps it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

try:
    # The C module under ``signal``: the public wrappers convert to and from enums, which
    # made these calls 2.4 us each, 20 us of every write; these take 0.2.
    import _signal as _raw
except ImportError:  # pragma: no cover - another interpreter
    _raw = signal  # type: ignore[no-redef]

__all__ = ["InterruptGate", "TerminateRequested", "held_commit", "hold_after_commit",
           "keep_closed", "release_held", "stop_signals_raise"]

_SIGINT = int(signal.SIGINT)
_STOP_SIGNALS = (int(signal.SIGTERM), int(signal.SIGHUP))
_WATCHED = (_SIGINT, *_STOP_SIGNALS)
_DEFAULT = signal.default_int_handler


class TerminateRequested(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C would be (inside :func:`stop_signals_raise`),
    so one cleanup path serves all three: ``kill``, ``timeout`` or a closed terminal on a
    ``harness run`` stops its servers as Ctrl-C does, instead of leaving them on the GPU."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise_terminate(signum: int, frame: FrameType | None) -> None:
    raise TerminateRequested(signum)


_RAISING = (_DEFAULT, _raise_terminate)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Within: SIGTERM and SIGHUP raise :class:`TerminateRequested` (main thread only).
    A signal the process was started ignoring (``nohup``) stays ignored."""
    if threading.get_ident() != threading.main_thread().ident:
        yield
        return
    previous = []
    try:
        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is signal.SIG_DFL:
                previous.append((signum, signal.signal(signum, _raise_terminate)))
        yield
    finally:
        for signum, handler in previous:
            signal.signal(signum, handler)


class InterruptGate:
    """Closed: SIGINT (and SIGTERM/SIGHUP inside :func:`stop_signals_raise`) is recorded,
    not raised. :meth:`open` raises the recorded one."""

    def __init__(self) -> None:
        self._pending: int | None = None
        self._saved: list[tuple[int, object]] | None = None

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        if self._pending is None:
            self._pending = signum

    def close(self) -> None:
        if self._saved is not None or threading.get_ident() != threading.main_thread().ident:
            return
        saved = [(signum, handler) for signum in _WATCHED
                 if (handler := _raw.getsignal(signum)) in _RAISING]
        if not saved:
            return
        # Recorded before the swap: a SIGTERM raised between the two swaps must still find
        # SIGINT's handler here to be given back.
        self._saved = saved
        for signum, _ in saved:
            _raw.signal(signum, self._defer)

    def open(self) -> None:
        """Give the signals back; raise what one that came meanwhile would have raised."""
        saved = self._saved
        if saved is None:
            return
        # A signal arriving anywhere in here is raised: through _pending while _defer is
        # installed, by its own handler after.
        self._saved = None
        _restore(saved)
        pending, self._pending = self._pending, None
        if pending is not None:
            dict(saved)[pending](pending, None)  # type: ignore[operator]

    def discard(self) -> None:
        """Give the signals back, dropping a recorded one (an exception is on its way)."""
        self._pending = None
        saved, self._saved = self._saved, None
        _restore(saved or [])


def _restore(saved: list[tuple[int, object]]) -> None:
    """Every handler back, even when the first one back raises at once (its signal came)."""
    if not saved:
        return
    try:
        _raw.signal(*saved[0])  # type: ignore[arg-type]
    finally:
        _restore(saved[1:])


# -- a write that landed is not undone by a Ctrl-C ---------------------------------------
# `harness todowrite` commits, then prints the response and its notes, then closes the
# store. A Ctrl-C raised anywhere after the COMMIT used to exit 130, which tells the agent
# that a write failed when it landed. While holding, the first write to commit keeps its
# gate closed: later Ctrl-Cs are recorded, and the caller decides at the end.
_holding = False
_held: InterruptGate | None = None


def hold_after_commit() -> None:
    """From now on (main thread), a Ctrl-C after the next commit is held, not raised,
    until :func:`release_held`."""
    global _holding
    if threading.get_ident() == threading.main_thread().ident:
        _holding = True


def keep_closed(gate: InterruptGate) -> bool:
    """Called by a write right after its COMMIT, with its gate closed: True if the gate
    is to stay closed (the caller must then not open it)."""
    global _held
    if not _holding or _held is not None or gate._saved is None:
        return False
    _held = gate
    return True


def held_commit() -> bool:
    """Whether a write committed while Ctrl-C was held."""
    return _held is not None


def release_held(*, quiet: bool = False) -> bool:
    """Stop holding; True if a Ctrl-C came meanwhile, which is dropped (the write landed).
    ``quiet``: SIGINT stays ignored instead of getting its handler back (a process about to
    exit, which a last Ctrl-C must not give a traceback)."""
    global _holding, _held
    gate, _held, _holding = _held, None, False
    if gate is None:
        return False
    came = gate._pending is not None
    if quiet:
        _raw.signal(_SIGINT, _raw.SIG_IGN)
        gate._pending = None
        saved, gate._saved = gate._saved, None
        _restore([(signum, handler) for signum, handler in saved or [] if signum != _SIGINT])
    else:
        gate.discard()
    return came
