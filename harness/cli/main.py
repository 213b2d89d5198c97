"""The ``harness`` entry point, and the one place errors are rendered.

Exit codes: 0 ok, 1 an error you can act on, 2 usage, 3 a database or host that cannot be
reached, 4 a timeout, 130 interrupted (129/143: SIGHUP/SIGTERM to ``harness run``). Errors
are one plain line on stderr; ``--json`` output goes to stdout.

The commands an agent runs on every todo change (``todowrite``, ``todoread``, ``next``,
``harness hook ...``) are parsed and run by :mod:`harness.cli.hot` without importing
click or the rest of the CLI; anything else, or any option those do not know, goes to
the click application (:mod:`harness.cli.app`), so both routes behave the same.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from harness.cli import hot
from harness.errors import EXIT_INTERRUPTED, KNOWN_ERRORS, exit_code, render


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    lost: list[BaseException] = []
    previous = sys.unraisablehook

    def unraisable(info: Any) -> None:
        # A Ctrl-C landing in a finalizer or a GC callback (a pooled connection's) is
        # "ignored" by Python: printed, then lost, and the command exits 0.
        if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
            lost.append(info.exc_value)
            return
        previous(info)

    sys.unraisablehook = unraisable
    try:
        code = _run(args)
        if lost and code == 0:
            print("error: interrupted", file=sys.stderr)
            code = EXIT_INTERRUPTED
    finally:
        sys.unraisablehook = previous
    sys.exit(code)


def _run(args: list[str]) -> int:
    from harness.context import NOTES

    try:
        try:
            code = hot.run(args)
            if code is None:
                from harness.cli.app import run

                code = run(args)
        finally:
            hot.close()
        if code == 0:
            for line in NOTES:
                print(line, file=sys.stderr)
        return code
    except KeyboardInterrupt:
        # Also a Ctrl-C during the store's close (its final WAL checkpoint).
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KNOWN_ERRORS as exc:
        print(render(exc), file=sys.stderr)
        return exit_code(exc)
    except BrokenPipeError:
        return 0
    finally:
        NOTES.clear()


def __getattr__(name: str) -> Any:
    if name == "cli":  # the click group, for scripts/gen_cli_docs.py and friends
        from harness.cli.app import cli

        return cli
    raise AttributeError(name)


if __name__ == "__main__":
    main()
