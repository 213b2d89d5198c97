"""The commands people type every day stay off the heavy modules.

Each runs through the real entry point in a fresh interpreter, on a store that exists,
and must not have imported SQLAlchemy, SQLModel, pydantic, paramiko, PyYAML, Textual or
the MCP SDK: importing those was most of the ~0.9 s such a command cost
(docs/PERFORMANCE.md, "Everyday commands"; bench/ui/cli_latency.py measures it). The heavy
command modules are loaded when a command is named (harness/cli/app.py, COMMANDS);
`harness --help` lists them from summaries that must say what their own help says.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from tests import import_probe
from tests.conftest import ROOT

HEAVY = {"sqlalchemy", "sqlmodel", "pydantic", "pydantic_core", "paramiko", "fabric",
         "invoke", "yaml", "textual", "rich", "mcp", "anyio", "jsonschema", "psycopg",
         "plotext", "pygal"}
CASES: dict[str, list[str]] = {
    "--help": ["--help"], "--version": ["--version"], "list": ["list"],
    "list-json": ["list", "--json", "--status", "pending"], "show": ["show", "t1"],
    "show-json": ["show", "t1", "--json"], "add": ["add", "a new one", "-p", "high"],
    "start": ["start", "t2"], "done": ["done", "t3"], "block": ["block", "t4", "-r", "why"],
    "unblock": ["unblock", "t5"], "prio": ["prio", "t6", "low"], "move": ["move", "t7", "--up"],
    "edit": ["edit", "t8", "new text"], "note": ["note", "t9", "a note"],
    "depend": ["depend", "t10", "t1"], "cancel": ["cancel", "t11"], "log": ["log", "-n", "5"],
    "log-json": ["log", "--json"], "session-list": ["session", "list"],
    "session-new": ["session", "new", "other", "--no-use"],
    "session-use": ["session", "use", "bench"], "where": ["where"], "next": ["next"],
    "show-help": ["show", "--help"], "metrics": ["metrics"],
    "metrics-json": ["metrics", "--json"],
}


@pytest.fixture(scope="module")
def warm_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return import_probe.warm_store(tmp_path_factory.mktemp("cli-latency"), (
        (["session", "new", "bench"], ""), (["todowrite"], import_probe.TODOS)))


def _probe(env: dict[str, str], args: list[str]) -> tuple[dict, str]:
    return import_probe.probe(env, args, "", HEAVY)


@pytest.mark.sqlite
@pytest.mark.parametrize("case", sorted(CASES))
def test_everyday_commands_do_not_import_heavy_modules(warm_store: dict[str, str],
                                                       case: str) -> None:
    probe, err = _probe(warm_store, CASES[case])
    assert probe["code"] in (0, None, 1), err  # `next` says 1 when nothing is ready
    assert "error" not in err, err
    assert probe["heavy"] == [], f"harness {' '.join(CASES[case])} imported {probe['heavy']}"


@pytest.mark.sqlite
def test_a_heavy_command_still_loads_when_named(warm_store: dict[str, str]) -> None:
    probe, err = _probe(warm_store, ["check", "--help"])
    assert probe["code"] in (0, None), err
    assert "pydantic" in probe["heavy"]  # the pipeline spec: this is the lazy route working


def test_the_help_listing_says_what_each_command_says() -> None:
    """`harness --help` shows COMMANDS' summaries; loaded, each command must list the same."""
    from harness.cli.app import COMMANDS

    for name, (module, attr, summary) in COMMANDS.items():
        cmd = getattr(importlib.import_module(f"harness.cli.{module}"), attr)
        assert isinstance(cmd, click.Command) and cmd.name == name, name
        stand_in = click.Command(name, help=summary)
        for limit in range(20, 200, 7):
            assert stand_in.get_short_help_str(limit) == cmd.get_short_help_str(limit), name


def test_every_command_a_module_registers_is_in_the_table() -> None:
    """A command module's register() is what it offers; a command added there but not to
    COMMANDS would never be reachable."""
    from harness.cli.app import COMMANDS

    for path in sorted((ROOT / "harness" / "cli").glob("*.py")):
        module = importlib.import_module(f"harness.cli.{path.stem}")
        if not hasattr(module, "register"):
            continue
        group = click.Group()
        module.register(group)
        for name, cmd in group.commands.items():
            assert name in COMMANDS, f"{name} (from {path.name}) is missing in COMMANDS"
            mod, attr, _ = COMMANDS[name]
            assert (mod, getattr(module, attr, None)) == (path.stem, cmd), name


def test_help_lists_every_command_without_loading_any() -> None:
    code = ("import sys, click; from harness.cli.app import cli; "
            "ctx = click.Context(cli, info_name='harness', **cli.context_settings); "
            "print(cli.get_help(ctx)); "
            "print('LOADED', sorted(m for m in sys.modules if m.endswith('_cmds') or "
            "m.split('.')[0] in ('pydantic', 'sqlalchemy', 'yaml')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=60)
    lazy_help, loaded = r.stdout.rsplit("LOADED ", 1)
    assert loaded.strip() == "[]", r.stderr
    from harness.cli.app import COMMANDS, cli

    for name in COMMANDS:  # load them all: the listing must not change
        cli.get_command(click.Context(cli), name)
    # The context as `harness --help` makes it: click caches a command's help option
    # from the first context that asks, so a bare Context would depend on test order.
    ctx = click.Context(cli, info_name="harness", **cli.context_settings)
    assert cli.get_help(ctx) == lazy_help.rstrip("\n")


URLS = ["postgresql://u:p@h:5432/db", "postgres://h/db", "postgresql+psycopg://u@h/db",
        "postgresql://u:p%40ss%2Fw@127.0.0.1:60119/bench_1?sslmode=require&connect_timeout=3",
        "postgresql://[::1]:5433/db", "postgresql:///db?host=/tmp", "postgresql://h",
        "postgresql://us%20er:p+w@h/d%2Fb", "postgresql://u:@h/db", "postgresql://h/"]


@pytest.mark.parametrize("url", URLS)
def test_postgres_urls_read_as_sqlalchemy_reads_them(url: str) -> None:
    """The public URL keys the user's config: read by hand it must come out the same."""
    from sqlalchemy.engine import make_url

    from state.db import pg
    from state.location import normalize_url, public_url

    sa = make_url(url).set(drivername="postgresql+psycopg")
    assert normalize_url(url) == sa.render_as_string(hide_password=False)
    assert public_url(normalize_url(url)) == sa.render_as_string(hide_password=True)
    if pg.parse(url) is None:  # not plain (here: host in the query): SQLAlchemy read it
        assert "host=" in url


@pytest.mark.postgres
def test_postgres_todowrite_does_not_import_sqlalchemy(pg_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": pg_url,
           "HARNESS_DATA_DIR": str(tmp_path / "data"),
           "HARNESS_CONFIG_DIR": str(tmp_path / "config")}
    subprocess.run([sys.executable, "-m", "harness", "todoread"], env=env, check=True,
                   capture_output=True, timeout=120)  # creates the schema (SQLAlchemy)
    heavy = HEAVY  # psycopg 3 too: everyday commands connect with psycopg2 (state/db/pg.py)
    for args, stdin in ((["todowrite"], import_probe.TODOS), (["list"], ""),
                        (["show", "t3"], ""), (["done", "t3"], "")):
        probe, err = import_probe.probe(env, args, stdin, heavy)
        assert probe["code"] in (0, None), err
        assert probe["heavy"] == [], f"{args} on PostgreSQL imported {probe['heavy']}"
    r = subprocess.run([sys.executable, "-m", "harness", "show", "t3"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert "status: pending -> completed" in r.stdout, r.stdout + r.stderr


@pytest.mark.postgres
def test_a_pooled_postgres_reader_dropped_by_the_server_is_replaced(
        pg_url: str, pg_cluster: Any) -> None:
    """psycopg2 without the engine keeps the engine's pre-ping: a pooled connection the
    server dropped (a restart, an idle timeout) is found dead and replaced, unseen."""
    import time

    from state.store import Store

    with Store.open(pg_url) as s:
        assert s._conn._pg is not None  # the light route, not the engine
        sid = s.create_session("s", actor="human")
        s.events(sid)  # the reader's connection goes back to the pool
        pids = [c.info.backend_pid for c in s._conn._idle]
        assert pids
        for pid in pids:
            pg_cluster.sql(f"SELECT pg_terminate_backend({pid})")
        time.sleep(0.1)
        assert [e.kind for e in s.events(sid)] == ["session.created"]
        assert not {c.info.backend_pid for c in s._conn._idle} & set(pids)
