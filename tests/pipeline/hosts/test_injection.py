"""Hostile text goes through every path into a shell and arrives byte for byte, unexecuted."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.hosts.executor import Executor
from pipeline.spec.models import HostSpec, Stage

from ..conftest import wait_for

NASTY = [
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned",
    "| touch pwned",
    "&& touch pwned",
    "' ; touch pwned; '",
    '" ; touch pwned; "',
    "a\nb; touch pwned\n",
    "$HOME ${PATH} \\ * ~ %s {}",
    "-n",
    "",
]
# Arguments are written as JSON so every byte is compared, newlines and quotes included.
DUMP = ("import json, os, sys; json.dump({'argv': sys.argv[2:], "
        "'env': {k: v for k, v in os.environ.items() if k.startswith('NASTY_')}}, "
        "open(sys.argv[1], 'w'))")


def no_pwned(*roots: Path) -> None:
    for root in roots:
        assert not list(root.rglob("pwned")), f"something ran in {root}"
    assert not Path("/pwned").exists() and not (Path.home() / "pwned").exists()


def nasty_env() -> dict[str, str]:
    return {f"NASTY_{i}": v for i, v in enumerate(NASTY)}


def test_run_passes_argv_env_and_cwd_verbatim(executor: Executor, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    executor.run([sys.executable, "-c", DUMP, str(out), *NASTY], env=nasty_env())
    got = json.loads(out.read_text())
    assert got == {"argv": NASTY, "env": nasty_env()}
    for name in NASTY:
        if not name or name in ("-n",):
            continue
        weird = Path(executor.workdir) / name.replace("/", "_")
        weird.mkdir(parents=True, exist_ok=True)
        assert executor.run(["pwd"], cwd=weird.name).stdout == f"{weird}\n"
    no_pwned(tmp_path)


def test_detached_job_and_run_dir_names_verbatim(executor: Executor, tmp_path: Path) -> None:
    for i, name in enumerate(n for n in NASTY if n not in ("", "-n")):
        out = tmp_path / f"job{i}.json"
        handle = executor.start_detached(name, [sys.executable, "-c", DUMP, str(out), *NASTY],
                                         env=nasty_env())
        assert handle.run_dir == f"{executor.workdir}/.harness/runs/{name}"
        assert os.path.isdir(handle.run_dir)
        assert wait_for(executor, handle).state == "succeeded"
        assert json.loads(out.read_text()) == {"argv": NASTY, "env": nasty_env()}
        assert executor.start_detached(name, ["true"]).attached
    assert sorted(os.listdir(f"{executor.workdir}/.harness/runs")) == \
        sorted(n for n in NASTY if n not in ("", "-n"))
    no_pwned(tmp_path)


def test_action_params_reach_the_action_verbatim(executor: Executor, tmp_path: Path) -> None:
    params = {f"p{i}": v for i, v in enumerate(NASTY) if v}
    stage = Stage(name="s", todo="$(touch pwned) `touch pwned`", action="eagle3.train",
                  with_=params)
    argv = stage.command(HostSpec(python=sys.executable), result_path="; touch pwned")
    out = tmp_path / "action.json"
    # the same argv, with the module swapped for a dumper: python -m would need eagle3 code
    executor.run([sys.executable, "-c", DUMP, str(out), *argv[3:]])
    got = json.loads(out.read_text())["argv"]
    expected = []
    for key, value in params.items():
        expected += [f"--{key}", value]
    assert got == [*expected, "--result", "; touch pwned"]
    no_pwned(tmp_path)


def test_run_stage_is_shell_by_design_but_only_once(executor: Executor, tmp_path: Path) -> None:
    stage = Stage(name="s", run='printf "%s" "$(echo generated)" > done.txt; echo \'$(no)\'')
    result = executor.run(stage.command(HostSpec()))
    assert (Path(executor.workdir) / "done.txt").read_text() == "generated"
    assert result.stdout == "$(no)\n"


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                    blacklist_characters="\x00")),
                     max_size=4),
       value=st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                            blacklist_characters="\x00")))
def test_any_text_round_trips_locally(tmp_path: Path, args: list[str], value: str) -> None:
    from pipeline.hosts.local import LocalExecutor

    out = tmp_path / "any.json"
    ex = LocalExecutor(HostSpec(workdir=str(tmp_path)))
    ex.run([sys.executable, "-c", DUMP, str(out), *args], env={"NASTY_V": value})
    assert json.loads(out.read_text()) == {"argv": args, "env": {"NASTY_V": value}}
