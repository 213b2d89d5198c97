"""Fixtures for the TUI tests: a realistic session on a real SQLite file, and the app."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from state.store import Store
from tests.tui.campaign import NOW, build
from tui.app import HarnessApp


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Campaign:
    store: Store
    session_id: int
    name: str
    path: Path

    def app(self, **kwargs: object) -> HarnessApp:
        return HarnessApp(self.store, self.session_id, clock=lambda: NOW, **kwargs)


@pytest.fixture
def campaign(tmp_path: Path, db_path: Path) -> Iterator[Campaign]:
    """The mid-campaign session of tests/tui/campaign.py in the test's store."""
    store = Store.open(str(db_path))
    sid = build(store)
    yield Campaign(store, sid, "kimi-k25-eagle3", db_path)
    store.close()


@pytest.fixture
def twin(campaign: Campaign, tmp_path: Path) -> Path:
    """A copy of the campaign's store, for the CLI to do what the TUI does."""
    campaign.store.close()  # checkpoints the WAL into the file
    copy = tmp_path / "twin.db"
    shutil.copy(campaign.path, copy)
    campaign.store = Store.open(str(campaign.path))
    return copy


async def wait_until(pilot: Any, condition: Callable[[], bool], *, attempts: int = 400) -> bool:
    """Poll ``condition`` for up to ~10 s of frames: a busy machine lays out late."""
    for _ in range(attempts):
        if condition():
            return True
        await pilot.pause(0.025)
    return condition()
