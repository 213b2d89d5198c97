"""A person at the keyboard, at random: hundreds of keys, chosen by a seeded generator from
what each screen offers (the board and its detail, log and verification tabs, the charts,
replay, help, the prompts and the command palette), on a store like the main job's at
80x24, while a running stage's points and log lines keep arriving. The TUI must still be
running at the end, with nothing raised on the way.

A failure names the seed and the last keys, so the walk can be replayed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from textual.command import CommandPalette

from state.store import Store
from tests.tui.walk.main_job import NOW, LiveSeries, build
from tui.app import HarnessApp
from tui.screens.board import BoardScreen
from tui.screens.charts import ChartScreen
from tui.screens.help import HelpScreen
from tui.screens.prompt import PromptScreen
from tui.screens.replay import ReplayScreen

pytestmark = pytest.mark.anyio

SIZE = (80, 24)
KEYS = 250
MOVES = ["j", "k", "j", "k", "g", "G", "up", "down", "pageup", "pagedown", "home", "end"]
# Keys that change a todo are in, a few times less often than looking around: `q` (quit)
# is left out on the screens where it quits.
BOARD = [*MOVES, *MOVES, "tab", "shift+tab", "1", "2", "3", "2", "3", "i", "c", "c", "c", "r",
         "question_mark", "ctrl+p", "ctrl+p", "s", "d", "x", "u", "plus", "minus", "K", "J", "b", "a",
         "e", "n", "escape"]
CHARTS = ["escape", "c", "question_mark", "j", "k", "down", "pagedown", "tab", "ctrl+p"]
REPLAY = ["left", "right", "left", "right", "home", "end", "left_square_bracket",
          "right_square_bracket", "1", "3", "i", "j", "k", "G", "question_mark", "f", "escape",
          "r", "tab", "ctrl+p"]
HELP = ["escape", "question_mark", "q", "j", "down"]
PROMPT = ["w", "a", "i", "t", "space", "backspace", "enter", "escape", "escape"]
# Palette queries that find our commands and harmless ones of Textual's (none quits).
PALETTE = ["chart", "replay", "prio", "detail", "log", "verif", "intern", "move", "start",
           "note", "keys", "theme"]


def next_keys(rng: random.Random, screen: object) -> list[str]:
    if isinstance(screen, CommandPalette):
        if rng.random() < 0.2:
            return ["escape"]
        return [*rng.choice(PALETTE), *rng.choice([[], ["down"], ["down", "down"]]),
                rng.choice(["enter", "enter", "escape"])]
    if isinstance(screen, PromptScreen):
        return [rng.choice(PROMPT)]
    if isinstance(screen, HelpScreen):
        return [rng.choice(HELP)]
    if isinstance(screen, ChartScreen):
        return [rng.choice(CHARTS)]
    if isinstance(screen, ReplayScreen):
        return [rng.choice(REPLAY)]
    if isinstance(screen, BoardScreen):
        return [rng.choice(BOARD)]
    return ["escape"]  # a screen of Textual's own (the theme picker): back out of it


@pytest.mark.parametrize("seed", [44])
async def test_a_random_walk_over_every_screen_leaves_the_tui_running(
        tmp_path: Path, seed: int) -> None:
    path = tmp_path / "main-job.db"
    store = Store.open(str(path))
    sid = build(store)
    live = LiveSeries(path, sid)
    app = HarnessApp(store, sid, clock=lambda: NOW)
    rng = random.Random(seed)
    pressed: list[str] = []
    seen: set[str] = set()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.settled()
            live.start()
            # The newcomer's keys first (issue 44): the charts of the last todo, back, up.
            for key in ["G", "c", "escape", "k", "k"]:
                await pilot.press(key)
                pressed.append(key)
                await pilot.pause(0.05)
            step = 0
            while len(pressed) < KEYS:
                if app.return_code is not None or not app.is_running:
                    break  # it ended (Textual sets the code as an exception ends it)
                seen.add(type(app.screen).__name__)
                keys = next_keys(rng, app.screen)
                await pilot.press(*keys)  # each key waits till the app is idle again
                pressed.extend(keys)
                step += 1
                if step % 25 == 0:  # now and then, let the store thread catch up
                    await app.settled()
            assert app.return_code is None and app.is_running, (
                f"seed {seed}: the TUI stopped; last keys {pressed[-25:]}")
    finally:
        live.halt.set()
        live.join(10)
        store.close()
    assert live.written > 20  # the series really did keep arriving
    # The walk went everywhere a person can (it is seeded, so this holds for the seed).
    assert {"BoardScreen", "ChartScreen", "ReplayScreen", "HelpScreen", "PromptScreen",
            "CommandPalette"} <= seen, seen
