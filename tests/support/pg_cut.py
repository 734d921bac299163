"""A TCP relay to the test PostgreSQL server that can lose a connection right after a COMMIT.

`CommitCutter` relays bytes both ways between a store and the server. Armed (`arm()`),
it watches what the server sends back for the next `CommandComplete` of a `COMMIT`
(the message the server sends once the commit is durable, `synchronous_commit = on`)
and, instead of passing it on, closes both sides: the server has committed, and the
client is never told. What a dropped network, a restarted proxy or a killed pooler
does at the worst moment, made deterministic.

The URL it gives (`url`) asks for no TLS (`sslmode=disable`), so the messages can be read.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

# CommandComplete ('C'), its length (4 + len("COMMIT\0") = 11), the tag.
_COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"


class CommitCutter:
    """Relay to the server of `url`; `url` of its own; `arm()` cuts after the next COMMIT."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._server = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        netloc = parts.netloc.rsplit("@", 1)
        user = f"{netloc[0]}@" if len(netloc) == 2 else ""
        query = f"{parts.query}&sslmode=disable" if parts.query else "sslmode=disable"
        self.url = urlunsplit(
            (parts.scheme, f"{user}127.0.0.1:{port}", parts.path, query, parts.fragment)
        )
        self._armed = threading.Event()
        self.cuts = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        """Cut the connection whose server next acknowledges a COMMIT, once."""
        self._armed.set()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._server)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._relay, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._relay, args=(server, client, True), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket, from_server: bool) -> None:
        tail = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if from_server and self._armed.is_set():
                    seen = tail + data
                    if _COMMIT_DONE in seen:
                        self._armed.clear()
                        self.cuts += 1
                        break  # the acknowledgement never reaches the client
                    tail = seen[-len(_COMMIT_DONE) :]
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
