"""Pipeline spec loading: the happy path, defaults, ordering, and every error with its place."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pipeline.actions import params_to_argv
from pipeline.errors import SpecError
from pipeline.spec.durations import format_duration, parse_duration
from pipeline.spec.load import load_spec, parse_spec
from pipeline.spec.models import HostSpec, Stage
from pipeline.stage_graph import topological_order

EXAMPLE = """\
pipeline: eagle3-remote
hosts:
  gpu:
    host: gpu-container
    port: 2222
    user: root
    key: ~/.ssh/id_ed25519
    workdir: /data/eagle3
    python: /opt/venv/bin/python
    env: {HF_HOME: /data/hf, SEED: 7}
    insecure_host_key: false
defaults: {host: local, retries: 1, timeout: 12h}
stages:
  - name: generate
    todo: Generate 10K synthetic samples (reasoning kept in <think>)
    priority: high
    host: gpu
    action: eagle3.generate
    with: {samples: 10000, out: data/synth}
    checks: [reasoning_capture]
  - name: note_done
    needs: [generate]
    run: echo "generated" > done.txt
    outputs: [done.txt]
  - name: train
    needs: generate
    priority: L
    host: gpu
    action: eagle3.train
    timeout: 1h30m
    retries: 0
  - name: verify
    needs: [train, note_done]
    action: eagle3.verify
    gate: {min_acceptance_length: 2.0, min_position_acceptance: [0.6, 0.4]}
"""


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_for(tmp_path: Path, text: str) -> SpecError:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    assert "\n" not in str(err)
    return err


def test_example_loads_with_defaults_applied(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE)
    p = load_spec(path)
    assert p.name == "eagle3-remote" and p.path == path
    gpu, local = p.hosts["gpu"], p.hosts["local"]
    assert gpu.is_ssh and gpu.port == 2222 and gpu.env == {"HF_HOME": "/data/hf", "SEED": "7"}
    assert gpu.key == str(Path("~/.ssh/id_ed25519").expanduser())
    assert not local.is_ssh and local.workdir == str(tmp_path.resolve())
    gen, note, train, verify = p.stages
    assert (gen.priority, note.priority, train.priority) == ("high", "medium", "low")
    assert note.host == "local" and note.retries == 1 and note.timeout == 12 * 3600
    assert train.retries == 0 and train.timeout == 5400
    assert train.needs == ["generate"] and note.todo == "note_done"
    assert verify.gate.to_json() == {"min_acceptance_length": 2.0,
                                     "min_position_acceptance": [0.6, 0.4]}
    assert p.host_for("train") is gpu and p.host_for(note) is local
    assert [s.name for s in p.order()] == ["generate", "note_done", "train", "verify"]


def test_order_respects_needs_over_file_order() -> None:
    p = parse_spec({"pipeline": "x", "stages": [
        {"name": "c", "needs": ["b"], "run": "true"},
        {"name": "a", "run": "true"},
        {"name": "b", "needs": ["a"], "run": "true"},
        {"name": "d", "run": "true"},
    ]})
    assert [s.name for s in p.order()] == ["a", "b", "c", "d"]
    assert [s.name for s in topological_order(p.stages)] == ["a", "b", "c", "d"]


def test_builtin_command_keeps_params_as_argv_items(tmp_path: Path) -> None:
    p = load_spec(write(tmp_path, EXAMPLE))
    gen = p.stage("generate")
    argv = gen.command(p.host_for(gen), result_path="/r/result.json")
    assert argv == ["/opt/venv/bin/python", "-m", "pipeline.eagle3.generate",
                    "--samples", "10000", "--out", "data/synth", "--result", "/r/result.json"]
    nasty = "$(touch pwned); `id` | x && y\n'\""
    stage = Stage(name="s", action="eagle3.train", with_={"note": nasty, "dry_run": True})
    assert stage.command(HostSpec())[3:] == ["--note", nasty, "--dry-run",
                                            "--result", "result.json"]


def test_the_verifier_building_action_keeps_its_old_name_as_an_alias(tmp_path: Path) -> None:
    old = parse_spec({"pipeline": "x", "stages": [
        {"name": "verifier", "action": "eagle3.verifier", "with": {"out": "v"}}]})
    new = parse_spec({"pipeline": "x", "stages": [
        {"name": "verifier", "action": "eagle3.build_verifier", "with": {"out": "v"}}]})
    assert old.stages[0].action == new.stages[0].action == "eagle3.build_verifier"
    assert old.stages[0].command(HostSpec())[:3] == ["python3", "-m",
                                                     "pipeline.eagle3.build_verifier"]
    err = error_for(tmp_path, "pipeline: x\nstages:\n  - {name: v, action: eagle3.verifyer}\n")
    assert "unknown action 'eagle3.verifyer'" in str(err)


def test_run_command_is_the_users_text_under_bash(tmp_path: Path) -> None:
    p = load_spec(write(tmp_path, EXAMPLE))
    note = p.stage("note_done")
    assert note.command(p.host_for(note)) == ["bash", "-c", 'echo "generated" > done.txt']
    assert note.env_for(p.hosts["gpu"], {"X": "1"}) == {"HF_HOME": "/data/hf", "SEED": "7",
                                                       "X": "1"}


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("15m", 900), ("12h", 43200), ("1h30m", 5400), ("2d", 172800),
    (45, 45), (1.5, 1.5), ("30", 30), ("1h 5s", 3605), ("0.5h", 1800),
])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "-5", "0", "1m1h", "1h1h", "h", True, None, [1]])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration(text)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (5400, 90, 0, 86461)] == ["1h30m", "1m30s", "0s",
                                                                  "1d1m1s"]


# --- errors: each names the file, the stage and the field ---------------------------------

STAGES_HEAD = """\
pipeline: p
hosts:
  gpu: {host: example.org}
stages:
  - name: prep
    run: "true"
  - name: gen
    needs: [prep]
    action: eagle3.generate
"""


def test_unknown_stage_key_suggests(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD + "    timout: 1h\n")
    assert err.where == f"{tmp_path / 'p.yaml'}: stages[1] (gen).timout"
    assert err.message == "unknown key 'timout' (did you mean 'timeout'?)"


def test_unknown_keys_elsewhere(tmp_path: Path) -> None:
    err = error_for(tmp_path, "pipeline: p\nstage: []\nstages: [{name: a, run: 'true'}]\n")
    assert err.where.endswith("p.yaml: stage")
    assert "did you mean 'stages'?" in err.message
    err = error_for(tmp_path, STAGES_HEAD.replace("host: example.org", "host: h, prot: 22"))
    assert err.where.endswith(": hosts.gpu.prot") and "did you mean 'port'?" in err.message
    err = error_for(tmp_path, STAGES_HEAD + "defaults: {retires: 2}\n")
    assert err.where.endswith(": defaults.retires") and "'retries'" in err.message


def test_missing_needs_target(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD.replace("needs: [prep]", "needs: [perp]"))
    assert err.where.endswith("p.yaml: stages[1] (gen).needs")
    assert err.message == "unknown stage 'perp' (did you mean 'prep'?)"


def test_cycle_is_named(tmp_path: Path) -> None:
    err = error_for(tmp_path, """\
        pipeline: p
        stages:
          - {name: a, run: "true", needs: [c]}
          - {name: b, run: "true", needs: [a]}
          - {name: c, run: "true", needs: [b]}
          - {name: d, run: "true", needs: [d]}
        """)
    assert err.where.endswith("p.yaml: stages[0] (a).needs")
    assert err.message == "needs form a cycle: a -> c -> b -> a"
    err = error_for(tmp_path, 'pipeline: p\nstages: [{name: d, run: "true", needs: d}]\n')
    assert err.message == "needs form a cycle: d -> d"


@pytest.mark.parametrize("patch, where", [
    ("    host: gpu2\n", "stages[1] (gen).host"),
    ("defaults: {host: gpuu}\n", "defaults.host"),
])
def test_unknown_host(tmp_path: Path, patch: str, where: str) -> None:
    err = error_for(tmp_path, STAGES_HEAD + patch)
    assert err.where.endswith(f"p.yaml: {where}")
    assert "unknown host" in err.message and "(did you mean 'gpu'?)" in err.message
    assert "(hosts: gpu, local)" in err.message


def test_gateway_must_be_a_known_ssh_host(tmp_path: Path) -> None:
    text = "pipeline: p\nhosts:\n  gpu: {host: h, gateway: %s}\n  box: {workdir: /x}\n" \
           "stages: [{name: a, run: 'true'}]\n"
    err = error_for(tmp_path, text % "bastion")
    assert err.where.endswith(": hosts.gpu.gateway") and "unknown host 'bastion'" in err.message
    err = error_for(tmp_path, text % "box")
    assert "gateway 'box' is not an SSH host" in err.message
    err = error_for(tmp_path, text % "gpu")
    assert "gateways form a loop: gpu -> gpu" in err.message


def test_local_hosts_refuse_ssh_fields(tmp_path: Path) -> None:
    err = error_for(tmp_path, "pipeline: p\nhosts:\n  local: {port: 22}\n"
                              "stages: [{name: a, run: 'true'}]\n")
    assert err.where.endswith(": hosts.local.port") and "for SSH hosts" in err.message
    err = error_for(tmp_path, "pipeline: p\nhosts:\n  local: {host: x}\n"
                              "stages: [{name: a, run: 'true'}]\n")
    assert err.where.endswith(": hosts.local.host")


@pytest.mark.parametrize("value", ["1x", "forever", "-3", "0"])
def test_bad_duration(tmp_path: Path, value: str) -> None:
    err = error_for(tmp_path, STAGES_HEAD + f"    timeout: '{value}'\n")
    assert err.where.endswith("p.yaml: stages[1] (gen).timeout")
    assert err.message.startswith(f"bad duration '{value}'")


def test_bad_priority(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD + "    priority: urgent\n")
    assert err.where.endswith("p.yaml: stages[1] (gen).priority")
    assert err.message == "bad priority 'urgent': use high, medium or low (or H, M, L)"


def test_duplicate_stage_names(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD + "  - name: prep\n    run: 'false'\n")
    assert err.where.endswith("p.yaml: stages[2] (prep).name")
    assert err.message == "duplicate stage name 'prep' (first at stages[0])"


def test_broken_yaml_has_line_and_column(tmp_path: Path) -> None:
    err = error_for(tmp_path, "pipeline: p\nstages:\n  - name: a\n    run: [unclosed\n")
    path = tmp_path / "p.yaml"
    assert err.where is not None and err.where.startswith(f"{path}:")
    line, col = err.where.rsplit(":", 2)[1:]
    assert int(line) >= 4 and int(col) >= 1
    assert err.message.startswith("broken YAML:")


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD + "    needs: [prep]\n")
    assert err.where == f"{tmp_path / 'p.yaml'}:10:5"
    assert "duplicate key 'needs' (first given on line 8)" in err.message


def test_both_or_neither_action_and_run(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD + "    run: echo hi\n")
    assert err.where.endswith("p.yaml: stages[1] (gen)")
    assert err.message == "has both `action` and `run`: a stage runs one of them"
    err = error_for(tmp_path, "pipeline: p\nstages:\n  - name: lonely\n    todo: nothing\n")
    assert err.where.endswith("p.yaml: stages[0] (lonely)")
    assert "needs `action`" in err.message
    err = error_for(tmp_path, "pipeline: p\nstages:\n  - {name: a, run: x, with: {n: 1}}\n")
    assert err.where.endswith("stages[0] (a).with")


def test_unknown_action(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD.replace("eagle3.generate", "eagle3.generat"))
    assert err.where.endswith("p.yaml: stages[1] (gen).action")
    assert err.message == "unknown action 'eagle3.generat' (did you mean 'eagle3.generate'?)"


@pytest.mark.parametrize("text, where, words", [
    ("stages: [{name: a, run: 'true'}]\n", "p.yaml", "missing required key 'pipeline'"),
    ("pipeline: p\nstages: []\n", "p.yaml: stages", "needs at least one entry"),
    ("pipeline: p\nstages: {a: 1}\n", "p.yaml: stages", "expected a list"),
    ("pipeline: p\nstages: [{run: 'true'}]\n", "p.yaml: stages[0]",
     "missing required key 'name'"),
    ("pipeline: p\nstages: [{name: a, run: 'true', retries: -1}]\n",
     "p.yaml: stages[0] (a).retries", "greater than or equal to 0"),
    ("pipeline: p\nstages: [{name: a, run: 'true', gate: {min_x: high}}]\n",
     "p.yaml: stages[0] (a).gate.min_x", "expected a number"),
    ("pipeline: p\nstages: [{name: 'a b', run: 'true'}]\n", "p.yaml: stages[0].name",
     "bad stage name 'a b'"),
    ("pipeline: p\nstages: [{name: a, run: 'true', env: {BAD-NAME: 1}}]\n",
     "p.yaml: stages[0] (a).env.BAD-NAME", "bad environment variable name"),
    ("[1, 2]\n", "p.yaml", "expected a mapping"),
    ("", "p.yaml", "got an empty file"),
])
def test_shape_errors(tmp_path: Path, text: str, where: str, words: str) -> None:
    err = error_for(tmp_path, text)
    assert err.where is not None and err.where.endswith(where)
    assert words in err.message


def test_spec_error_is_one_line_with_location(tmp_path: Path) -> None:
    err = error_for(tmp_path, STAGES_HEAD + "    timeout: soon\n")
    assert str(err) == (f"{tmp_path / 'p.yaml'}: stages[1] (gen).timeout: bad duration "
                        "'soon': use seconds or a duration such as 90s, 15m, 12h, 1h30m")


def test_params_to_argv_round_trip_shape() -> None:
    assert params_to_argv({"a": [1, 2], "b": False, "c": None}) == ["--a", "[1, 2]", "--no-b"]
