"""From a host entry to a fabric ``Connection``: the user's ssh_config, the spec's overrides,
and host keys checked on every hop.

``host:`` may be a ``Host`` alias of the ssh_config (``~/.ssh/config`` and
``/etc/ssh/ssh_config``, or the file ``ssh_config:`` names): its ``HostName``, ``User``,
``Port``, ``IdentityFile``, ``IdentitiesOnly`` and ``ProxyJump`` apply, and a field the
entry gives (``user``, ``port``, ``key``, ``gateway``) overrides each. fabric resolves the
alias and builds one ``Connection`` per ``ProxyJump`` hop; what it gets wrong is fixed here:

- every hop's client starts with ``AutoAddPolicy`` and loads no known_hosts, and fabric
  ignores ``UserKnownHostsFile``: each hop is :func:`pipeline.hosts.hostkeys.secure`\\ d with its
  own ``UserKnownHostsFile``, else the entry's ``known_hosts``, else ``~/.ssh/known_hosts``;
- hops get no connect timeout, and ``~`` in an ``IdentityFile`` is left to paramiko;
- a ``ProxyJump`` hop whose address equals the target's is dropped by fabric without a word
  (it connects directly): the tests use distinct loopback addresses for that reason.

``StrictHostKeyChecking accept-new`` in the ssh_config is honoured (the user asked for it
there); ``no`` is not: keys stay checked, and ``insecure_host_key: true`` on the entry is the
one way to turn that off.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from fabric import Config, Connection

from pipeline.errors import HostUnreachable
from pipeline.hosts.hostkeys import default_known_hosts, secure
from pipeline.spec.models import HostSpec

__all__ = ["Hop", "Route", "known_hosts_name", "make_route"]


@dataclass
class Hop:
    """One client on the way: where it goes and which known_hosts files vouch for it."""

    conn: Connection
    files: list[str]
    record_into: str | None = None  # accept-new: where a first-seen key is written

    @property
    def name(self) -> str:
        """The host as known_hosts writes it: ``host`` on port 22, else ``[host]:port``."""
        return known_hosts_name(self.conn.host, self.conn.port)


@dataclass
class Route:
    """The connection to open and every hop of it, the target first."""

    conn: Connection
    hops: list[Hop] = field(default_factory=list)

    def hop_for(self, hostname: str) -> Hop | None:
        return next((h for h in self.hops if h.conn.host == hostname), None)

    @property
    def via(self) -> str:
        """`` via bastion (127.0.0.2:22)`` for messages, or nothing."""
        jumps = [h.conn for h in self.hops[1:]]
        return "".join(f" via {_where(c)}" for c in jumps)


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def make_route(spec: HostSpec, hosts: Mapping[str, HostSpec],
               seen: tuple[str, ...] = ()) -> Route:
    """The ``Connection`` for ``spec`` with host keys set on every client, unopened."""
    gateway: Route | None = None
    if spec.gateway:
        if spec.gateway in seen or spec.gateway not in hosts:
            raise HostUnreachable(f"bad gateway {spec.gateway!r} for {spec.name}",
                                  where=spec.name, retryable=False)
        gateway = make_route(hosts[spec.gateway], hosts, (*seen, spec.name))
    timeout = max(1, math.ceil(spec.connect_timeout))
    kwargs: dict[str, object] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if spec.key:
        if not os.path.isfile(spec.key):
            raise HostUnreachable(f"key file {spec.key} does not exist", where=spec.name,
                                  retryable=False)
        # Only the configured key: an agent or ~/.ssh keys would make auth depend on
        # whoever happens to run the harness.
        kwargs.update(key_filename=[spec.key], look_for_keys=False, allow_agent=False)
    conn = Connection(spec.host, user=spec.user, port=spec.port, connect_timeout=timeout,
                      connect_kwargs=kwargs, config=_config(spec),
                      gateway=gateway.conn if gateway else None)
    if spec.key:  # the entry's key overrides the ssh_config's IdentityFile, not joins it
        conn.connect_kwargs["key_filename"] = [spec.key]
    else:
        _identities(conn)
    target = Hop(conn, *_known_hosts(spec, conn, target=True))
    if spec.known_hosts and not os.path.exists(spec.known_hosts) and not target.record_into:
        raise HostUnreachable(f"known_hosts file {spec.known_hosts} does not exist",
                              where=spec.name, retryable=False)
    secure(conn.client, target.files, accept_new=target.record_into,
           insecure=spec.insecure_host_key)
    route = Route(conn, [target])
    if gateway is not None:
        route.hops += gateway.hops
        return route
    hop = conn.gateway  # ProxyJump hops fabric built from the ssh_config
    while isinstance(hop, Connection):
        hop.connect_timeout = timeout
        hop.connect_kwargs.update(banner_timeout=timeout, auth_timeout=timeout)
        _identities(hop)
        step = Hop(hop, *_known_hosts(spec, hop, target=False))
        secure(hop.client, step.files, accept_new=step.record_into)
        route.hops.append(step)
        hop = hop.gateway
    return route


def _config(spec: HostSpec) -> Config:
    if spec.ssh_config is None:
        return Config()  # ~/.ssh/config and /etc/ssh/ssh_config, as ssh reads them
    if not os.path.isfile(spec.ssh_config):
        raise HostUnreachable(f"ssh_config file {spec.ssh_config} does not exist",
                              where=spec.name, retryable=False)
    return Config(runtime_ssh_path=spec.ssh_config)


def _identities(conn: Connection) -> None:
    """``~`` expanded in IdentityFile; ``IdentitiesOnly yes`` keeps agent and default keys
    out, as ssh does."""
    keys = conn.connect_kwargs.get("key_filename")
    if isinstance(keys, str):
        keys = [keys]
    if keys:
        conn.connect_kwargs["key_filename"] = [os.path.expanduser(k) for k in keys]
    if str(conn.ssh_config.get("identitiesonly", "")).lower() == "yes":
        conn.connect_kwargs.update(look_for_keys=False, allow_agent=False)


def _known_hosts(spec: HostSpec, conn: Connection, *,
                 target: bool) -> tuple[list[str], str | None]:
    """The files that vouch for ``conn``'s key, and where accept-new records a new one.

    The target: the entry's ``known_hosts``, else the ssh_config's ``UserKnownHostsFile``,
    else ``~/.ssh/known_hosts``. A hop from the ssh_config: its own ``UserKnownHostsFile``
    first (the user wrote it for that host), then the entry's file.
    """
    configured = [os.path.expanduser(p) for p in
                  str(conn.ssh_config.get("userknownhostsfile", "")).split() if p]
    named = [spec.known_hosts] if spec.known_hosts else []
    if target:
        files = named or configured or [default_known_hosts()]
    else:
        files = configured or named or [default_known_hosts()]
    record: str | None = None
    if spec.host_key == "accept-new" and spec.known_hosts and files[0] == spec.known_hosts:
        record = spec.known_hosts
    elif str(conn.ssh_config.get("stricthostkeychecking", "")).lower() == "accept-new":
        record = files[0]
    return files, record


def _where(conn: Connection) -> str:
    alias = conn.original_host
    real = f"{conn.host}:{conn.port}"
    return f"{alias} ({real})" if alias != conn.host else real
