"""Keep secrets out of anything that is shown, logged or stored.

A variable is secret when its name (case-insensitive) contains ``TOKEN``, ``SECRET``,
``PASSWORD``, ``PASSWD``, ``CREDENTIAL``, ``PRIVATE`` or ``KEY``, or starts with ``AWS_``.
Matching is deliberately broad (``AWS_ACCESS_KEY_ID``, ``KEY_ID``, ``SSH_KEY_PATH`` are
redacted too): hiding a harmless value costs a little debugging, showing a secret cannot be
undone. The one exception is ``TOKENIZERS_*`` (Hugging Face tokenizers settings such as
``TOKENIZERS_PARALLELISM``), which name no secret and are set in most ML jobs.

The job still receives the real values; only descriptions of it (``Result.command``,
``JobHandle.command``, the ``cmd`` file on the host) carry ``***``. Standard library only.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["REDACTED", "describe", "is_secret_name", "redact_env", "redact_text",
           "secret_values"]

REDACTED = "***"
_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "KEY")
_PREFIXES = ("AWS_",)
_NOT_SECRET_PREFIXES = ("TOKENIZERS_",)


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper.startswith(_NOT_SECRET_PREFIXES):
        return False
    return upper.startswith(_PREFIXES) or any(m in upper for m in _MARKERS)


def redact_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of ``env`` with secret values replaced by ``***``."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in (env or {}).items()}


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of a secret value replaced by ``***``.

    For output that may echo a secret back (a failing command printing its environment).
    Values shorter than 4 characters are left alone: masking every ``1`` helps nobody.
    """
    for value in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def secret_values(env: Mapping[str, str] | None) -> list[str]:
    return [v for k, v in (env or {}).items() if is_secret_name(k) and v]


def describe(command: Sequence[str] | str, env: Mapping[str, str] | None = None,
             cwd: str | None = None) -> str:
    """A one-line, shell-quoted, redacted description of a command, for people and logs.

    ``cd /data && HF_TOKEN=*** python -m pipeline.eagle3.train --epochs 3``
    """
    text = command if isinstance(command, str) else shlex.join(command)
    assigns = " ".join(f"{k}={shlex.quote(v)}" if v != REDACTED else f"{k}={REDACTED}"
                       for k, v in redact_env(env).items())
    text = f"{assigns} {text}" if assigns else text
    text = f"cd {shlex.quote(cwd)} && {text}" if cwd else text
    return redact_text(text, secret_values(env)).replace("\n", "\\n")
