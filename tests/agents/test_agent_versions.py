"""tests/agents/real/npm.py: which versions of each agent program the real-program tests
run on, and HARNESS_AGENT_VERSIONS, which scripts/agents_latest sets to try npm's newest."""

from __future__ import annotations

import pytest

from tests.agents.real import npm


def test_the_pins_run_claude_code_on_two_versions_newest_first() -> None:
    claude = npm.PROGRAMS["claude-code"]
    assert len(claude.versions) == 2
    assert tuple(map(int, claude.versions[0].split("."))) > \
        tuple(map(int, claude.versions[1].split(".")))
    for prog in npm.PROGRAMS.values():
        assert prog.versions and prog.tests


def test_overrides_name_programs_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    assert npm.overrides("claude-code=2.1.400, codex=0.172.0+0.171.0") == {
        "claude-code": ("2.1.400",), "codex": ("0.172.0", "0.171.0")}
    monkeypatch.setenv(npm.VERSIONS_ENV, "opencode=1.19.0")
    assert npm.versions("opencode") == ("1.19.0",)
    assert npm.versions("codex") == npm.PROGRAMS["codex"].versions  # not named: pinned
    for bad in ("claude=2.1.400", "codex", "codex="):
        with pytest.raises(ValueError, match=npm.VERSIONS_ENV):
            npm.overrides(bad)
