"""The ``harness`` entry point, and the one place errors are rendered.

Exit codes: 0 ok, 1 an error you can act on, 2 usage, 3 a database or host that cannot be
reached, 4 a timeout, 130 interrupted (129/143: SIGHUP/SIGTERM to ``harness run``, 143:
SIGTERM to ``harness tui --web``). Errors are one plain line on stderr; ``--json`` output
goes to stdout.

The commands an agent runs on every todo change (``todowrite``, ``todoread``, ``next``,
``harness hook ...``) are parsed and run by :mod:`harness.cli.hot` without importing
click or the rest of the CLI; anything else, or any option those do not know, goes to
the click application (:mod:`harness.cli.app`), so both routes behave the same.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from harness.cli import hot
from harness.errors import EXIT_INTERRUPTED, KNOWN_ERRORS, exit_code, render


def main(argv: Sequence[str] | None = None) -> None:
    main_thread = threading.current_thread() is threading.main_thread()
    own_sigint = signal.getsignal(signal.SIGINT) if main_thread else None
    previous = sys.unraisablehook
    code = EXIT_INTERRUPTED
    try:
        lost: list[BaseException] = []

        def unraisable(info: Any) -> None:
            # A Ctrl-C landing in a finalizer or a GC callback (a pooled connection's) is
            # "ignored" by Python: printed, then lost, and the command exits 0.
            if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
                lost.append(info.exc_value)
                return
            previous(info)

        sys.unraisablehook = unraisable
        landed = False
        try:
            code = _run(list(sys.argv[1:] if argv is None else argv))
        finally:
            # The outcome is decided: from here a Ctrl-C changes nothing and shows no
            # traceback. One held after a write landed is dropped: the write stands.
            landed = _quiet(main_thread)
        if lost and code == 0 and not landed:
            print("error: interrupted", file=sys.stderr)
            code = EXIT_INTERRUPTED
    except KeyboardInterrupt:
        # It landed in the cleanup above, before SIGINT was ignored (nothing was held).
        _quiet(main_thread)
        print("error: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    finally:
        sys.unraisablehook = previous
        if argv is not None and main_thread:
            # Called in-process (tests, scripts): their handler back. A process's own
            # entry (argv None) exits with SIGINT ignored.
            signal.signal(signal.SIGINT, own_sigint)
    sys.exit(code)


def _quiet(main_thread: bool) -> bool:
    """Ignore SIGINT from now on; True if a write committed while Ctrl-C was held
    (:func:`state.interrupts.hold_after_commit`)."""
    if not main_thread:
        return False
    from state.interrupts import held_commit, release_held

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    landed = held_commit()
    release_held(quiet=True)
    return landed


# Commands not run again whole when the store goes away: the long-lived ones and `run`
# retry each of their own steps; a hook has its own budget and spool; `verify` would
# compute again; `db` looks after the store itself.
NOT_RETRIED = frozenset({"run", "mcp", "tui", "watch-codex", "hook", "verify", "db"})


def _command(args: list[str]) -> str | None:
    """The command word of a line (after any global --db/--session and their values)."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--db", "--session", "-s"):
            i += 2
            continue
        if not a.startswith("-"):
            return a
        i += 1
    return None


def _line(args: list[str]) -> int:
    """One attempt at a command line."""
    try:
        code = hot.run(args)
        if code is None:
            from harness.cli.app import run

            code = run(args)
        return code
    finally:
        hot.close()


def _run(args: list[str]) -> int:
    from harness.context import NOTES

    try:
        word = _command(args)
        if word is None or word in NOT_RETRIED:
            code = _line(args)
        else:
            # A command meets a server that went away (a restart, a cut network): it runs
            # again from the top, until the store's retry budget is spent. Its writes carry
            # keys, so a write whose commit had landed unseen is not written twice.
            from state import retry

            code = retry.run(lambda: _line(args), what=f"`harness {word}`")
        if code == 0:
            for line in dict.fromkeys(NOTES):
                print(line, file=sys.stderr)
        return code
    except KeyboardInterrupt:
        # Before a write's COMMIT (after it, Ctrl-C is held: hot.todowrite), or during
        # the store's close (its final WAL checkpoint) in a command that holds nothing.
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KNOWN_ERRORS as exc:
        print(render(exc), file=sys.stderr)
        return exit_code(exc)
    except BrokenPipeError:
        return 0
    finally:
        NOTES.clear()
        hot.forget_input()


def __getattr__(name: str) -> Any:
    if name == "cli":  # the click group, for scripts/gen_cli_docs.py and friends
        from harness.cli.app import cli

        return cli
    raise AttributeError(name)


if __name__ == "__main__":
    main()
