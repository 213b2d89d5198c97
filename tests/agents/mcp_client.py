"""Talking to a real `harness mcp` subprocess through the SDK's own stdio client."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.conftest import ROOT


def server_env(db: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if k.startswith("HARNESS_") or k in ("HOME", "PATH", "LANG")}
    return {**keep, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db), **(extra or {})}


@asynccontextmanager
async def mcp_session(db: Path, *, client: str = "test-agent", args: tuple[str, ...] = (),
                      env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "harness", "mcp", *args],
                                   env=server_env(db, env), cwd=str(ROOT))
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write), \
                ClientSession(read, write, client_info=types.Implementation(
                    name=client, version="1.0")) as session:
            await session.initialize()
            yield session


def data(result: types.CallToolResult) -> dict[str, Any]:
    """The structured answer of a successful call (the text must say the same)."""
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error, f"expected a tool error, got {result.content[0].text[:300]}"
    return result.content[0].text

