"""The line-by-line edit of Codex's config.toml that `harness hook codex install` makes:
everything else kept, a table found however its header is spelt, and a value set another
way an error that says what to set, never a file Codex cannot read."""

from __future__ import annotations

import pytest

from harness.agents.codex.config import set_value, tomllib
from harness.errors import InputError


def test_appends_a_table_to_a_file_without_it() -> None:
    text = '# mine\nmodel = "o3"\n'
    out = set_value(text, ["tools", "update_plan"], "enabled", True, where="c")
    assert out == '# mine\nmodel = "o3"\n\n[tools.update_plan]\nenabled = true\n'
    assert set_value("", ["a"], "b", "x", where="c") == '[a]\nb = "x"\n'


def test_sets_the_key_inside_the_existing_table_and_keeps_the_rest() -> None:
    text = ('[tools.update_plan]  # the plan tool\nenabled = false\nmax_payload_bytes = 9\n'
            '\n[projects."/srv/a b"]\ntrust_level = "trusted"\n')
    out = set_value(text, ["tools", "update_plan"], "enabled", True, where="c")
    assert out == text.replace("enabled = false", "enabled = true")
    out = set_value(text, ["projects", "/srv/a b"], "note", "ok", where="c")
    assert tomllib.loads(out)["projects"]["/srv/a b"] == {"trust_level": "trusted",
                                                          "note": "ok"}
    assert out.index('note = "ok"') < out.index("\n", out.index("trust_level")) + 2


def test_a_quoted_key_with_dots_and_colons_is_one_part() -> None:
    key = "/home/ana/p/.codex/hooks.json:post_tool_use:0:0"
    out = set_value("", ["hooks", "state", key], "trusted_hash", "sha256:ab", where="c")
    again = set_value(out, ["hooks", "state", key], "trusted_hash", "sha256:cd", where="c")
    assert tomllib.loads(again)["hooks"]["state"][key] == {"trusted_hash": "sha256:cd"}
    assert again.count("[hooks.state.") == 1


@pytest.mark.parametrize("text", [
    "tools = { update_plan = { enabled = false } }\n",
    "[tools]\nupdate_plan.enabled = false\n",
])
def test_a_value_set_another_way_is_an_error_that_says_what_to_set(text: str) -> None:
    with pytest.raises(InputError) as info:
        set_value(text, ["tools", "update_plan"], "enabled", True, where="config.toml")
    assert "cannot set tools.update_plan.enabled = true" in str(info.value)
    assert "set it yourself" in str(info.value)


def test_install_refuses_a_config_it_cannot_read_and_writes_nothing(tmp_path) -> None:
    from tests.conftest import harness_subprocess

    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text("model = \n")
    r = harness_subprocess(["hook", "codex", "install"], cwd=tmp_path,
                           env={"CODEX_HOME": str(home), "HOME": str(tmp_path)})
    assert r.returncode == 1
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "config.toml" in err and "not valid TOML" in err
    assert "Traceback" not in err
    assert not (tmp_path / ".codex").exists()
    assert (home / "config.toml").read_text() == "model = \n"


def test_a_codex_that_cannot_hash_leaves_the_trust_to_the_person(tmp_path) -> None:
    from tests.conftest import harness_subprocess

    failing = tmp_path / "codex"  # an older or broken Codex: app-server exits at once
    failing.write_text("#!/bin/sh\necho 'unknown command app-server' >&2\nexit 2\n")
    failing.chmod(0o755)
    home = tmp_path / "codex-home"
    home.mkdir()
    r = harness_subprocess(["hook", "codex", "install", "--codex", str(failing)],
                           cwd=tmp_path, env={"CODEX_HOME": str(home), "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "could not ask Codex for the hooks' hashes" in out and "(/hooks)" in out
    assert (tmp_path / ".codex" / "hooks.json").exists()
    assert tomllib.loads((home / "config.toml").read_text()) == {
        "tools": {"update_plan": {"enabled": True}}}
