"""The registry of agents (harness/agents/registry.py): each row is one folder with its
`agent.py`, and every command that reaches agents reaches each of them through it: the
hook (both routes), install and uninstall, prime, doctor, import's formats."""

from __future__ import annotations

import pytest

from harness.agents.registry import AGENTS, agent, agents, by_format
from harness.cli import hot
from tests.conftest import ROOT


def test_each_agent_is_one_folder_and_one_row() -> None:
    folders = {p.parent.name for p in (ROOT / "harness" / "agents").glob("*/agent.py")}
    assert len(folders) == len(AGENTS) == 6
    for name, target in AGENTS.items():
        module, _, attr = target.partition(":")
        assert (module.split(".")[2], attr) in {(f, "AGENT") for f in folders}, target
        a = agent(name)
        assert a.name == name and a.actor == f"agent:{name}" and a.title and a.program
        assert a.prime_note and a.hook_help and a.formats and a.todo_tools and a.notices
    formats = [f for a in agents() for f in a.formats]
    assert len(formats) == len(set(formats))
    assert all(by_format(f) is not None and f in by_format(f).formats for f in formats)


@pytest.mark.parametrize("name", list(AGENTS))
def test_the_commands_reach_each_agent(cli, db_path, name: str) -> None:
    a = agent(name)
    line = ["hook", name] + (["--event", a.hook_events[0]] if a.hook_events else [])
    assert hot.parse(line) is not None  # the fast route knows its options
    assert hot.parse([*line, "install"]) is None  # a subcommand is click's
    helped = cli(["hook", name, "--help"])
    assert helped.code == 0 and a.hook_help.split("\n")[0][:40] in " ".join(helped.out.split())
    if a.install_help is not None:
        for verb in ("install", "uninstall"):
            assert cli(["hook", name, verb, "--help"]).code == 0
    primed = cli(["prime", "--agent", name, "--no-list"])
    assert primed.code == 0 and a.prime_note in primed.out
    imports = " ".join(cli(["import", "--help"]).out.split())
    assert all(f in imports for f in a.formats)
