"""Whether Gemini CLI is about to compress its chat, read from what it has written.

Gemini CLI gives a hook no way to add context after a compression: its ``PreCompress``
answer is ignored, and it fires before *every* request to the model, whether or not
the history gets compressed (google-gemini/gemini-cli#18083; it runs before the
threshold check). The request that follows a compression carries what the hooks of the
step before it answered (``AfterTool``'s context rides on the tool's result,
``BeforeAgent``'s on the prompt), so the list must go out then, on the same evidence
Gemini CLI decides with.

Gemini CLI compresses before a request when the prompt of the last answer took at least
``model.compressionThreshold`` (settings; default 0.5) of the model's context window
(1,048,576 tokens for every Gemini model; 256,000 for Gemma 4), as the answer's
``usageMetadata.promptTokenCount`` said. Its chat recording (the hook payload's
``transcript_path``) keeps that count on the answer, as ``"tokens": {"input": N, ...}``;
when it rewrites the history (a compression, or a resume), it writes the whole history
again (``{"$set": {"messages": [...]}}``) and counts afresh, so an answer's count before
such a rewrite no longer counts.

Read from the file's tail (the last answer is there); a missing or unreadable transcript
or setting is "no compression due". A threshold Gemini CLI takes from its remote
experiments (Google-account sign-ins) is not visible here, nor is the experimental
``contextManagement`` mode: compressions those make are not foreseen, and the list comes
back at the next start or resume. A ``/compress`` is certain (``PreCompress`` with
``trigger: manual``): the list goes out with the next prompt.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.paths import gemini_dir

TAIL_BYTES = 256 * 1024
DEFAULT_THRESHOLD = 0.5
TOKEN_LIMIT = 1_048_576
GEMMA_4_TOKEN_LIMIT = 256_000
_TOKENS = re.compile(rb'"tokens"\s*:\s*\{\s*"input"\s*:\s*(\d+)')
_MODEL = re.compile(rb'"model"\s*:\s*"([^"]{1,80})"')
_REWRITE = re.compile(rb'\{\s*"\$set"\s*:\s*\{\s*"messages"\s*:')


def last_prompt_tokens(transcript: Path) -> tuple[int, str] | None:
    """(the prompt tokens of the last answer, its model), or None when the history was
    rewritten since, or the transcript holds no answer yet."""
    try:
        with transcript.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - TAIL_BYTES))
            tail = fh.read(TAIL_BYTES)
    except OSError:
        return None
    counts = list(_TOKENS.finditer(tail))
    if not counts:
        return None
    last = counts[-1]
    rewrites = list(_REWRITE.finditer(tail))
    if rewrites and rewrites[-1].start() > last.start():
        return None
    # The answer's model is on the same record, after its tokens.
    model = _MODEL.search(tail, last.end())
    line_end = tail.find(b"\n", last.end())
    if model and (line_end < 0 or model.start() < line_end):
        name = model.group(1).decode("utf-8", "replace")
    else:
        name = ""
    return int(last.group(1)), name


def token_limit(model: str) -> int:
    return GEMMA_4_TOKEN_LIMIT if model.startswith("gemma-4") else TOKEN_LIMIT


def _setting(path: Path) -> float | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    value = model.get("compressionThreshold") if isinstance(model, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def threshold(project: Path | None) -> float:
    """``model.compressionThreshold`` as Gemini CLI merges its settings: the system
    file overrides the project's, which overrides the user's."""
    system = Path(os.environ.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH")
                  or "/etc/gemini-cli/settings.json")
    places = [system]
    if project is not None:
        places.append(project / ".gemini" / "settings.json")
    places.append(gemini_dir() / "settings.json")
    for place in places:
        value = _setting(place)
        if value is not None:
            return value
    return DEFAULT_THRESHOLD


def compression_due(payload: Mapping[str, Any]) -> bool:
    """Whether Gemini CLI will compress its history before its next request."""
    raw = payload.get("transcript_path")
    if not isinstance(raw, str) or not raw:
        return False
    last = last_prompt_tokens(Path(raw))
    if last is None:
        return False
    tokens, model = last
    cwd = payload.get("cwd")
    project = Path(cwd) if isinstance(cwd, str) and cwd else None
    return tokens >= threshold(project) * token_limit(model)
