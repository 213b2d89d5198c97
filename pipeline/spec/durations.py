"""Durations as people write them in a pipeline spec: ``90s``, ``15m``, ``12h``, ``1h30m``, ``2d``.

A bare number (or a string of digits) is seconds. Standard library only.
"""

from __future__ import annotations

import re

__all__ = ["format_duration", "parse_duration"]

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?[dhms])+")
_HINT = "use seconds or a duration such as 90s, 15m, 12h, 1h30m"


def parse_duration(value: object) -> float:
    """Seconds in ``value``; raises ValueError with a one-line reason when it is not a duration."""
    # bool is an int subclass; `timeout: yes` is a typo, not one second.
    if isinstance(value, bool):
        raise ValueError(f"bad duration {value!r}: {_HINT}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif _WHOLE.fullmatch(text):
            units = [unit for _, unit in _PART.findall(text)]
            # "30m1h" or "1h1h" is more likely a mistake than a sum.
            if len(set(units)) != len(units) or units != sorted(units, key="dhms".index):
                raise ValueError(f"bad duration {value!r}: {_HINT}")
            seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
        else:
            raise ValueError(f"bad duration {value!r}: {_HINT}")
    else:
        raise ValueError(f"bad duration {value!r}: {_HINT}")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"bad duration {value!r}: must be more than zero")
    return seconds


def format_duration(seconds: float) -> str:
    """``5400`` -> ``1h30m``; the inverse of :func:`parse_duration` for whole seconds."""
    rest = round(seconds)
    if rest <= 0:
        return "0s"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            out += f"{n}{unit}"
    return out
