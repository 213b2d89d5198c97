"""The key config file, and `harness tui` at the CLI edge."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import InputError
from tests.conftest import harness_subprocess, run_cli
from tui.keys import ALL_KEYS, KNOWN_IDS, config_path, load_keymap


def write_config(text: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_no_config_file_means_the_defaults() -> None:
    assert not config_path().exists()
    assert load_keymap() == {}


def test_keys_are_read_by_id() -> None:
    write_config('[keys]\n"todo.done" = "D"\n"todo.priority-up" = "plus, K"\n')
    assert load_keymap() == {"todo.done": "D", "todo.priority-up": "plus,K"}


def test_every_binding_has_a_unique_id_per_screen() -> None:
    from tui.keys import BOARD_KEYS, REPLAY_KEYS

    for keys in (BOARD_KEYS, REPLAY_KEYS):
        ids = [k.id for k in keys]
        assert len(ids) == len(set(ids))
    assert {k.id for k in ALL_KEYS} == KNOWN_IDS
    assert {"todo.start", "todo.done", "todo.cancel", "todo.block", "todo.unblock",
            "todo.priority-up", "todo.priority-down", "todo.move-up", "todo.move-down",
            "todo.add", "todo.edit", "todo.note", "app.help"} <= KNOWN_IDS


@pytest.mark.parametrize(("text", "says"), [
    ('[keys\n"todo.done" = "D"\n', "not valid TOML"),
    ('[keys]\n"todo.finish" = "D"\n', "unknown binding id 'todo.finish'"),
    ('[keys]\n"todo.done" = 4\n', "must be a string"),
    ('[keys]\n"todo.done" = "d,,x"\n', "must be a string"),
    ('[colours]\nx = 1\n', "unknown section(s) colours"),
    ('keys = "d"\n', "[keys] must be a table"),
])
def test_broken_config_is_an_error_naming_the_file(text: str, says: str) -> None:
    path = write_config(text)
    with pytest.raises(InputError) as err:
        load_keymap()
    assert says in str(err.value)
    assert str(path) in str(err.value)


def test_cli_reports_a_broken_config_on_one_line(cli) -> None:
    path = write_config('[keys]\n"todo.finish" = "D"\n')
    result = cli(["tui"])
    assert result.code == 1
    assert result.err.count("\n") == 1
    assert "unknown binding id 'todo.finish'" in result.err and str(path) in result.err


def test_cli_needs_a_terminal(db_path: Path) -> None:
    result = harness_subprocess(["--db", str(db_path), "tui"])
    assert result.returncode == 2
    assert b"harness tui needs a terminal" in result.stderr
    assert b"Traceback" not in result.stderr


def test_cli_help_and_registration() -> None:
    result = run_cli(["tui", "--help"])
    assert result.code == 0
    assert "--replay" in result.out and "--session" in result.out
    assert "tui" in run_cli(["--help"]).out
