"""Check a stage's ``with:`` parameters against the flags its built-in action accepts.

A misspelt parameter otherwise surfaces only when its stage starts: after the hours the
stages before it took (the seed lost days to problems that showed up late). Each action
module exposes ``build_parser()``; its flags are the truth. Importing an action may import
torch, so :func:`check_params` is called by ``harness check``/``harness run`` on the
harness's machine, where it is skipped (and says so) when the action cannot be imported.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
from typing import Any

from pipeline.actions import BUILTIN_ACTIONS
from pipeline.errors import SpecError

__all__ = ["check_params", "known_flags"]


def known_flags(action: str) -> set[str] | None:
    """The parameter names ``action`` accepts (``dry_run`` for ``--dry-run``), or None
    when its module cannot be imported here (e.g. no torch on this machine)."""
    try:
        module = importlib.import_module(BUILTIN_ACTIONS[action])
    except ImportError:
        return None
    build = getattr(module, "build_parser", None)
    if build is None:
        return None
    parser: argparse.ArgumentParser = build()
    names: set[str] = set()
    for opt in parser._option_string_actions:  # argparse keeps no public list of them
        if opt.startswith("--"):
            name = opt[2:].replace("-", "_")
            names.add(name)
            if name.startswith("no_"):
                names.add(name[3:])
    return names - {"help", "result"}


def check_params(spec: Any, source: str) -> list[str]:
    """Raise :class:`SpecError` at the first unknown parameter of a built-in stage.

    Returns the actions that could not be checked here (their modules did not import).
    """
    unchecked: list[str] = []
    cache: dict[str, set[str] | None] = {}
    for i, stage in enumerate(spec.stages):
        if stage.action is None:
            continue
        if stage.action not in cache:
            cache[stage.action] = known_flags(stage.action)
        flags = cache[stage.action]
        if flags is None:
            if stage.action not in unchecked:
                unchecked.append(stage.action)
            continue
        for key in stage.params:
            if key not in flags:
                close = difflib.get_close_matches(key, sorted(flags), n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise SpecError(
                    f"unknown parameter {key!r} for {stage.action}{hint}",
                    where=f"{source}: stages[{i}] ({stage.name}).with.{key}",
                    hint=f"`python -m {BUILTIN_ACTIONS[stage.action]} --help` lists them")
    return unchecked
