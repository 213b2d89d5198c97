"""A pydantic ValidationError of a spec as one :class:`SpecError`: the first problem, worded
for the YAML author, with ``where`` pointing at the field (``eagle3.yaml: stages[3]
(train).timeout``) and the nearest known key suggested."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from pipeline.errors import SpecError
from pipeline.spec.models import Defaults, HostSpec, Pipeline, Stage

__all__ = ["from_validation", "suggest"]


def suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


_MODELS: dict[str, type[BaseModel]] = {"hosts": HostSpec, "stages": Stage,
                                       "defaults": Defaults}


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed in the mapping at ``loc``, for "did you mean"."""
    if not loc:
        model: type[BaseModel] = Pipeline
    elif loc[0] in _MODELS and (loc[0] == "defaults" or len(loc) == 2):
        model = _MODELS[loc[0]]
    else:
        return []
    keys = [f.alias or name for name, f in model.model_fields.items()]
    return [k for k in keys if not (model is HostSpec and k == "name")]


def _where(source: str, loc: tuple[Any, ...], data: Mapping[str, Any]) -> str:
    text = ""
    for i, item in enumerate(loc):
        if item == "[key]":
            continue
        if isinstance(item, int):
            text += f"[{item}]"
            if loc[:i] == ("stages",):
                stages = data.get("stages")
                try:
                    name = stages[item].get("name")  # type: ignore[index,union-attr]
                except (AttributeError, IndexError, KeyError, TypeError):
                    name = None
                if isinstance(name, str):
                    text += f" ({name})"
        else:
            text += f".{item}" if text else str(item)
    return f"{source}: {text}" if text else source


def from_validation(exc: ValidationError, source: str, data: Mapping[str, Any]) -> SpecError:
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err["loc"])
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        message = f"unknown key {key!r}{suggest(key, _keys_at(loc[:-1]))}"
    elif kind == "missing":
        message = f"missing required key {loc[-1]!r}"
        loc = loc[:-1]  # point at the mapping that lacks it
    elif kind in ("model_type", "dict_type", "model_attributes_type"):
        message = f"expected a mapping, got {_show(given)}"
    elif kind == "list_type":
        message = f"expected a list, got {_show(given)}"
    elif kind == "too_short":
        message = "needs at least one entry"
    elif kind == "value_error":
        message = str(err["msg"]).removeprefix("Value error, ")
    else:
        msg = str(err["msg"])
        message = f"{msg[:1].lower()}{msg[1:]}, got {_show(given)}"
    extra = len(errors) - 1
    if extra:
        message += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return SpecError(" ".join(message.split()), where=_where(source, loc, data))


def _show(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
