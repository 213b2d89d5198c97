"""Child process for tests/cli/test_interrupt_exit.py: `harness ARGS` through its real entry
point, with a real SIGINT sent to itself at one chosen moment:

    python interrupt_at.py POINT ARGS...

POINT: `parse` (while the payload is read: before the write), `commit` (right after the
COMMIT returned), `close` (as the store starts closing, after the answer was printed), or
`notes` (in main's last cleanup, NOTES.clear())."""

import os
import signal
import sys

import harness.cli.hot as hot
import harness.context as context
import harness.formats as formats
import state.db.connection as connection
from harness.cli.main import main

point, args = sys.argv[1], sys.argv[2:]


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode


if point == "parse":
    real_parse = formats.parse

    def parse(*a, **k):  # type: ignore[no-untyped-def]
        ctrl_c()
        return real_parse(*a, **k)

    formats.parse = parse
elif point == "commit":
    real_end = connection.Connections._end

    def _end(self, raw, cur, *, commit):  # type: ignore[no-untyped-def]
        real_end(self, raw, cur, commit=commit)
        if commit:
            ctrl_c()

    connection.Connections._end = _end
elif point == "close":
    real_close = hot.close

    def close() -> None:
        ctrl_c()
        real_close()

    hot.close = close
elif point == "notes":
    class Notes(list):
        def clear(self) -> None:
            ctrl_c()
            super().clear()

    context.NOTES = Notes(context.NOTES)
    import harness.cli.main as cli_main  # noqa: F401 - it reads NOTES from harness.context
else:
    sys.exit(f"unknown point {point!r}")

sys.argv = ["harness", *args]
main()
