"""Strict YAML reading for pipeline specs: safe loading, duplicate keys refused, errors on one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import SpecError

__all__ = ["read_yaml"]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping.

    PyYAML keeps the last value silently, so a second ``timeout:`` in a stage would quietly
    win; in a spec that is always a mistake.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it properly
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {first})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """The document in ``path``; a :class:`SpecError` at ``FILE:LINE:COL`` when it is not YAML."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the pipeline file: {exc}", where=str(path)) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise SpecError(f"broken YAML: {' '.join(problem.split())}", where=where) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"broken YAML: {' '.join(str(exc).split())}", where=str(path)) from None
