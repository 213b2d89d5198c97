"""A loopback TCP proxy that cuts connections, for the tests and benches of a store whose
server goes away (docs/ARCHITECTURE.md, "Reliability").

It forwards 127.0.0.1:``port`` to a target port, byte for byte, a thread pair per
connection. It can:

* ``cut(seconds)``: drop every connection (both ends closed at once, as a network that
  fails or a server host that dies) and refuse new ones (the listening socket is closed:
  connection refused) for that long, then listen again on the same port;
* ``drop()``: drop every connection, refusing nothing;
* ``stall()``: keep every connection open and forward nothing (its answers never come);
* ``drop_after_commit()``: let the next ``COMMIT`` of the PostgreSQL protocol through to
  the server and drop its connection before the server's answer comes back: the commit
  lands and the client never hears of it.

Run it by hand::

    python -m tests.tcp_proxy TARGET_PORT     # prints its port; cut with SIGUSR1 (4 s)
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from contextlib import suppress

# The simple-query message a DB-API COMMIT is: 'Q', its length, the text, NUL.
_COMMIT = b"Q" + struct.pack("!I", 4 + len(b"COMMIT") + 1) + b"COMMIT\x00"


def _hang_up(s: socket.socket) -> None:
    """Reset a connection: the peer learns at once, as when a proxy or a host dies.

    ``shutdown`` first: a plain ``close`` while our other thread is blocked reading the
    socket leaves it open (the read holds it), and the peer waits for ever."""
    with suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        s.close()


class _Link:
    """One client connection and its connection to the target."""

    def __init__(self, proxy: CutProxy, client: socket.socket, server: socket.socket):
        self.proxy, self.client, self.server = proxy, client, server
        self.ack_cut = False  # drop before the next answer reaches the client
        self.wrote = False  # this transaction sent the statement drop_after_commit waits for
        self.closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        for src, dst, up in ((self.client, self.server, True), (self.server, self.client, False)):
            threading.Thread(target=self._pump, args=(src, dst, up), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if up and self.proxy._commit_armed:
                    self.wrote = self.wrote or self.proxy._after in data
                    if _COMMIT in data:
                        with self.proxy._lock:
                            armed = self.proxy._commit_armed and self.wrote
                            if armed:
                                self.proxy._commit_armed = False
                        self.ack_cut = armed
                        self.wrote = False
                while self.proxy.stalled and not self.closed:
                    time.sleep(0.05)
                if not up and self.ack_cut:
                    # The server has answered the COMMIT: it is done. The client never
                    # hears it.
                    self.proxy.commits_cut += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.server):
            _hang_up(s)
        self.proxy._forget(self)


class CutProxy:
    """127.0.0.1:``port`` -> 127.0.0.1:``target``; see the module's docstring."""

    def __init__(self, target: int, host: str = "127.0.0.1"):
        self.target = target
        self.host = host
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._commit_armed = False
        self._after = b""
        self._listener: socket.socket | None = None
        self._stopped = False
        self.commits_cut = 0
        self.cuts = 0
        self.stalled = False
        self.port = self._listen(0)

    # -- control ---------------------------------------------------------------------------
    def drop(self) -> int:
        """Drop every connection now; returns how many."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
        return len(links)

    def cut(self, seconds: float, *, wait: bool = False) -> threading.Thread | None:
        """Drop every connection and refuse new ones for ``seconds``; in the background
        unless ``wait``."""
        self.cuts += 1
        self._stop_listening()
        self.drop()

        def restore() -> None:
            time.sleep(seconds)
            if not self._stopped:
                self._listen(self.port)
        if wait:
            restore()
            return None
        t = threading.Thread(target=restore, daemon=True)
        t.start()
        return t

    def stall(self, on: bool = True) -> None:
        """Keep every connection open and forward nothing, either way (a middlebox that
        lost its upstream, a server host frozen): a client waits for an answer that never
        comes. ``stall(False)`` forwards again."""
        self.stalled = on

    def drop_after_commit(self, after: bytes = b"INSERT INTO events") -> None:
        """The next COMMIT of a transaction that sent ``after`` (a statement's text: by
        default a store write's events) lands on the server, and its connection drops
        before the answer reaches the client."""
        with self._lock:
            self._after = after
            self._commit_armed = True

    def close(self) -> None:
        self._stopped = True
        self._stop_listening()
        self.drop()

    def __enter__(self) -> CutProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside ----------------------------------------------------------------------------
    def _listen(self, port: int) -> int:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for _ in range(100):
            try:
                s.bind((self.host, port))
                break
            except OSError:
                time.sleep(0.05)  # the old socket is going away
        else:
            s.bind((self.host, port))
        s.listen(128)
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()
        return s.getsockname()[1]

    def _stop_listening(self) -> None:
        s, self._listener = self._listener, None
        if s is not None:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with suppress(OSError):
                s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if listener is not self._listener:
                _hang_up(client)
                return
            try:
                server = socket.create_connection((self.host, self.target), timeout=5)
                server.settimeout(None)
                for s in (client, server):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # the server is down (or the client gone): hang up on it
                _hang_up(client)
                continue
            link = _Link(self, client, server)
            with self._lock:
                self._links.add(link)
            if listener is not self._listener:  # cut while it was being connected
                link.close()
                continue
            link.start()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)


if __name__ == "__main__":
    import signal
    import sys

    proxy = CutProxy(int(sys.argv[1]))
    print(proxy.port, flush=True)
    signal.signal(signal.SIGUSR1, lambda *_: proxy.cut(4.0))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.close()
