"""A command's environment on its shell's standard input (``Executor._shell_input``), on
this machine and over a real sshd with and without SFTP: values arrive byte for byte, a
command may write much to both streams at once, time limits hold, and an environment cut
short runs nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipeline.errors import CommandTimeout
from pipeline.hosts import jobscripts
from pipeline.hosts.executor import Executor

TRICKY = {
    "HF_TOKEN": "hf_it's a \"token\" $(touch pwned) `id`\nsecond line\n",
    # a value that holds an end line of the kind the reader stops at, and one ending in one
    "LOOKS_LIKE_THE_END": "# harness-env-end-0123456789abcdef\nexport X=1",
    "EMPTY": "",
}


def test_tricky_values_arrive_byte_for_byte(executor: Executor) -> None:
    r = executor.run(["python3", "-c", "import json, os; print(json.dumps("
                      "{k: os.environ.get(k) for k in ['LOOKS_LIKE_THE_END', 'EMPTY', 'X']}))"],
                     env=TRICKY)
    assert r.stdout.strip() == ('{"LOOKS_LIKE_THE_END": "# harness-env-end-0123456789abcdef'
                                '\\nexport X=1", "EMPTY": "", "X": null}')
    # a secret is masked in the output: compare its hash
    token = executor.run(["python3", "-c", "import hashlib, os; print(hashlib.sha256("
                          "os.environ['HF_TOKEN'].encode()).hexdigest())"], env=TRICKY)
    assert token.stdout.strip() == hashlib.sha256(TRICKY["HF_TOKEN"].encode()).hexdigest()
    assert not list(Path(executor.workdir).rglob("pwned"))  # evaluated once, as data


def test_much_output_on_both_streams_at_once(executor: Executor) -> None:
    """Both streams are read as they come: 3 MiB on each (more than a channel's window)
    written in turns never stalls."""
    script = ("i=0; while [ $i -lt 48 ]; do head -c 65536 /dev/zero | tr '\\0' o; "
              "head -c 65536 /dev/zero | tr '\\0' e >&2; i=$((i+1)); done")
    r = executor.run(script, env={"HF_TOKEN": "hf_abcdef"}, timeout=60)
    assert (len(r.stdout), len(r.stderr)) == (48 << 16, 48 << 16)
    assert set(r.stdout) == {"o"} and set(r.stderr) == {"e"}


def test_a_time_limit_holds_with_an_environment(executor: Executor) -> None:
    with pytest.raises(CommandTimeout) as caught:
        executor.run(["sleep", "30"], env={"HF_TOKEN": "hf_abcdef"}, timeout=1)
    assert caught.value.result.exit_code in (124, 137)


def test_an_environment_cut_short_runs_nothing(executor: Executor) -> None:
    sent = jobscripts.stdin_env({"HF_TOKEN": "hf_abcdef"})
    code, out, err = executor._shell_input(sent.prelude + "echo ran", sent.data[:-4], 30)
    assert (code, out) == (1, "")
    assert "the environment arrived cut short" in err
