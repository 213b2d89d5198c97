"""Hold Ctrl-C off the few bytecodes where a write takes or gives back its lock.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread. One that
lands after ``BEGIN IMMEDIATE`` returned but before the code that would roll it back is
entered leaves the writer lock taken and the transaction open; every later write of that
process then waits out the busy timeout (30 s) and fails, including the ones a Ctrl-C'd
``harness run`` makes while it stops its servers. Measured before this guard: 39 of 400
Ctrl-Cs landing at random moments of a write loop leaked the lock (tests/test_interrupts.py
runs the same loop).

:class:`InterruptGate` defers SIGINT while closed and delivers it where the caller opens
the gate, inside the block that cleans up. Only the main thread with Python's own SIGINT
handler is touched: other threads never see KeyboardInterrupt, and a program that
installed its own handler keeps it.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

try:
    # The C module under ``signal``: the public wrappers convert to and from enums, which
    # made these calls 2.4 us each, 20 us of every write; these take 0.2.
    import _signal as _raw
except ImportError:  # pragma: no cover - another interpreter
    _raw = signal  # type: ignore[no-redef]

__all__ = ["InterruptGate"]

_SIGINT = int(signal.SIGINT)
_DEFAULT = signal.default_int_handler


class InterruptGate:
    """Closed: a SIGINT is recorded, not raised. :meth:`open` raises the recorded one."""

    def __init__(self) -> None:
        self._pending = False
        self._installed = False

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        self._pending = True

    def close(self) -> None:
        if self._installed or threading.get_ident() != threading.main_thread().ident:
            return
        if _raw.getsignal(_SIGINT) is not _DEFAULT:
            return
        _raw.signal(_SIGINT, self._defer)
        self._installed = True

    def open(self) -> None:
        """Give SIGINT back to Python; raise KeyboardInterrupt if one came meanwhile."""
        if not self._installed:
            return
        # An interrupt arriving anywhere in here is raised: through the flag while _defer
        # is installed, by Python's own handler after.
        self._installed = False
        _raw.signal(_SIGINT, _DEFAULT)
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def discard(self) -> None:
        """Give SIGINT back, dropping a recorded one (an exception is already on its way)."""
        self._pending = False
        if self._installed:
            self._installed = False
            _raw.signal(_SIGINT, _DEFAULT)
