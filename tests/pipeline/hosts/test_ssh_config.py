"""The user's ssh_config, and host keys on every hop, against real sshds.

A jump host on 127.0.0.2 and a target on 127.0.0.3: fabric drops a ProxyJump hop whose
address equals the target's and connects directly, so the two must differ. That the
target was reached through the jump host is read from the jump host's own log (each
forwarded channel is logged there at DEBUG1), not assumed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.runner import Runner
from pipeline.errors import HostUnreachable
from pipeline.hosts.ssh import SSHExecutor
from pipeline.spec.load import load_spec
from pipeline.spec.models import HostSpec
from state.store import Store
from tests.sshd import SSHServer, free_port, keygen

pytestmark = pytest.mark.ssh


def write_config(path: Path, jump: SSHServer, target: SSHServer, **target_fields: str) -> Path:
    """An ssh_config with a ``bastion`` alias and a ``gpu-box`` alias behind it."""
    fields = {"HostName": "127.0.0.3", "Port": str(target.port), "User": target.user,
              "IdentityFile": str(target.user_key), "ProxyJump": "bastion", **target_fields}
    lines = ["Host bastion", "  HostName 127.0.0.2", f"  Port {jump.port}",
             f"  User {jump.user}", f"  IdentityFile {jump.user_key}", "",
             "Host gpu-box"]
    lines += [f"  {k} {v}" for k, v in fields.items() if v]
    path.write_text("\n".join(lines) + "\n")
    return path


def known_hosts(path: Path, *servers: SSHServer) -> Path:
    path.write_text("".join(s.host_key_line + "\n" for s in servers))
    return path


def forwards_to(jump: SSHServer, target: SSHServer) -> int:
    """How many channels the jump host opened to the target's address and port."""
    return len(re.findall(rf"connected to 127\.0\.0\.3 port {target.port}\b",
                          jump.log_text()))


def logins(server: SSHServer) -> int:
    return server.log_text().count("Accepted publickey")


def test_a_stage_reaches_its_host_only_through_the_proxyjump_of_an_ssh_config(
        tmp_path: Path, store: Store, jump: SSHServer, target: SSHServer) -> None:
    config = write_config(tmp_path / "ssh_config", jump, target)
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "pipeline: through-bastion\n"
        "hosts:\n"
        f"  gpu: {{host: gpu-box, ssh_config: {config}, "
        f"known_hosts: {known_hosts(tmp_path / 'known_hosts', jump, target)}, "
        f"workdir: {tmp_path / 'remote'}}}\n"
        "stages:\n"
        "  - {name: where, host: gpu, run: 'echo \"on $SSH_CONNECTION\" > where.txt; "
        "echo reached', outputs: [where.txt]}\n")
    before_forwards, before_logins = forwards_to(jump, target), logins(target)
    sid = store.create_session("s", actor="human")
    lines: list[str] = []
    report = Runner(store, sid, load_spec(spec), out=lines.append, poll_interval=0.05).run()
    assert report.ok, lines
    run = store.runs(sid)[0]
    assert (run.state, store.log(run.id)[0]) == ("succeeded", "reached\n")
    # SSH_CONNECTION on the target names the server end the client reached
    assert (tmp_path / "remote" / "where.txt").read_text().split()[3:5] == \
        ["127.0.0.3", str(target.port)]
    new_logins = logins(target) - before_logins
    assert new_logins >= 1
    # every login on the target came through a channel of the jump host
    assert forwards_to(jump, target) - before_forwards == new_logins


@pytest.mark.parametrize("field", ["Port", "User", "IdentityFile"])
def test_a_spec_field_overrides_the_ssh_config(tmp_path: Path, jump: SSHServer,
                                               target: SSHServer, field: str) -> None:
    wrong = {"Port": str(free_port("127.0.0.3")), "User": "nobody-here",
             "IdentityFile": keygen(tmp_path / "stranger") and str(tmp_path / "stranger")}
    config = write_config(tmp_path / "ssh_config", jump, target, **{field: wrong[field]})
    kh = known_hosts(tmp_path / "known_hosts", jump, target)
    base = HostSpec(name="gpu", host="gpu-box", ssh_config=str(config), known_hosts=str(kh),
                    connect_timeout=5)
    with pytest.raises(HostUnreachable), SSHExecutor(base) as ex:  # the config's value is used
        ex.run(["true"])
    override = {"Port": {"port": target.port}, "User": {"user": target.user},
                "IdentityFile": {"key": str(target.user_key)}}[field]
    with SSHExecutor(base.model_copy(update=override)) as ex:
        assert ex.run(["echo", "ok"]).stdout == "ok\n"
        assert (ex._conn.host, ex._conn.port) == ("127.0.0.3", target.port)


def test_hostname_alias_and_identityfile_without_a_jump(tmp_path: Path, sshd: SSHServer
                                                        ) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host box\n  HostName 127.0.0.1\n  Port {sshd.port}\n"
                      f"  User {sshd.user}\n  IdentityFile {sshd.user_key}\n"
                      "  IdentitiesOnly yes\n")
    host = HostSpec(name="box", host="box", ssh_config=str(config),
                    known_hosts=str(sshd.known_hosts))
    with SSHExecutor(host) as ex:
        assert ex.run(["echo", "by alias"]).stdout == "by alias\n"
        assert ex._conn.gateway is None
        assert ex._conn.connect_kwargs["look_for_keys"] is False


def test_the_jump_host_key_is_checked_too(tmp_path: Path, jump: SSHServer,
                                          target: SSHServer) -> None:
    config = write_config(tmp_path / "ssh_config", jump, target)
    only_target = known_hosts(tmp_path / "only_target", target)
    host = HostSpec(name="gpu", host="gpu-box", ssh_config=str(config),
                    known_hosts=str(only_target))
    with pytest.raises(HostUnreachable) as info, SSHExecutor(host) as ex:
        ex.run(["true"])
    assert "host key unknown" in info.value.message
    assert f"[127.0.0.2]:{jump.port}" in info.value.message and not info.value.retryable
    assert only_target.read_text() == target.host_key_line + "\n"  # nothing was added
    impostor = keygen(tmp_path / "impostor").split()
    lying = tmp_path / "lying"
    lying.write_text(f"[127.0.0.2]:{jump.port} {impostor[0]} {impostor[1]}\n"
                     + target.host_key_line + "\n")
    host = host.model_copy(update={"known_hosts": str(lying)})
    with pytest.raises(HostUnreachable) as info, SSHExecutor(host) as ex:
        ex.run(["true"])
    assert f"host key for [127.0.0.2]:{jump.port} changed" in info.value.message


def test_a_hops_own_user_known_hosts_file_is_honoured(tmp_path: Path, jump: SSHServer,
                                                      target: SSHServer) -> None:
    hop_file = known_hosts(tmp_path / "bastion_known_hosts", jump)
    config = write_config(tmp_path / "ssh_config", jump, target)
    config.write_text(config.read_text().replace(
        "Host gpu-box", f"  UserKnownHostsFile {hop_file}\n\nHost gpu-box", 1))
    host = HostSpec(name="gpu", host="gpu-box", ssh_config=str(config),
                    known_hosts=str(known_hosts(tmp_path / "target_only", target)))
    with SSHExecutor(host) as ex:
        assert ex.run(["echo", "ok"]).stdout == "ok\n"


# --- accept-new and changed keys -------------------------------------------------------

@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own, to show the user's ~/.ssh is never written."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_accept_new_records_a_first_seen_key_into_the_named_file_only(
        tmp_path: Path, sshd: SSHServer, home: Path) -> None:
    named = tmp_path / "keys" / "known_hosts"  # does not exist yet
    host = sshd.host_spec(known_hosts=str(named), host_key="accept-new")
    with SSHExecutor(host) as ex:
        assert ex.run(["echo", "first"]).stdout == "first\n"
    assert named.read_text() == sshd.host_key_line + "\n"
    with SSHExecutor(host) as ex:  # known now: nothing more is written
        assert ex.run(["echo", "second"]).stdout == "second\n"
    assert named.read_text() == sshd.host_key_line + "\n"
    assert not (home / ".ssh").exists()
    # without accept-new, the same unknown key is refused and nothing is written
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(HostUnreachable, match="host key unknown"), \
            SSHExecutor(sshd.host_spec(known_hosts=str(empty))) as ex:
        ex.run(["true"])
    assert empty.read_text() == ""


@pytest.mark.parametrize("mode", ["check", "accept-new"])
def test_a_changed_key_is_refused_in_one_line_with_both_fingerprints(
        tmp_path: Path, sshd: SSHServer, mode: str) -> None:
    import paramiko

    impostor = keygen(tmp_path / "impostor").split()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {impostor[0]} {impostor[1]}\n")
    host = sshd.host_spec(known_hosts=str(wrong), host_key=mode)
    with pytest.raises(HostUnreachable) as info, SSHExecutor(host) as ex:
        ex.run(["true"])
    message = str(info.value)
    known = paramiko.Ed25519Key(filename=str(tmp_path / "impostor")).fingerprint
    offered = paramiko.Ed25519Key(filename=str(sshd.host_key)).fingerprint
    assert "\n" not in message and not info.value.retryable
    assert f"host key for [127.0.0.1]:{sshd.port} changed" in message
    assert f"known ssh-ed25519 {known}" in message
    assert f"offered ssh-ed25519 {offered}" in message
    assert wrong.read_text().count("\n") == 1  # accept-new did not take the new key


def test_spec_refuses_accept_new_without_a_named_file(tmp_path: Path) -> None:
    from pipeline.errors import SpecError

    spec = tmp_path / "p.yaml"
    spec.write_text("pipeline: x\nhosts:\n  gpu: {host: box, host_key: accept-new}\n"
                    "stages:\n  - {name: a, host: gpu, run: echo}\n")
    with pytest.raises(SpecError, match=r"hosts\.gpu\.host_key: .*name one"):
        load_spec(spec)
