"""A TCP proxy on 127.0.0.1 that forwards every connection to a store until ``hold()``, then accepts new
connections and never answers them: a store that stopped answering (issue 64). Or it holds only the requests
whose bytes hold a marker (the objects under a prefix: a store that stops answering once a job reads them).
Standard library only: it is test code; its threads are daemons, closed with ``close()``.
"""

from __future__ import annotations

import socket
import threading


class HoldingProxy:
    """Forwards to ``127.0.0.1:upstream_port`` (None: never), until ``hold()``; a request whose bytes hold
    ``hold_marker`` is never forwarded nor answered, nor is anything after it on its connection.

    Attributes:
        url: ``http://127.0.0.1:PORT``, where clients connect.
    """

    def __init__(self, upstream_port: int | None, *, hold_marker: bytes | None = None) -> None:
        self._upstream_port = upstream_port
        self._hold_marker = hold_marker
        self._holding = upstream_port is None
        self._sockets: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        """From now on, a new connection is taken and never answered."""
        self._holding = True

    def close(self) -> None:
        for sock in [self._server, *self._sockets]:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            self._sockets.append(client)
            if self._holding or self._upstream_port is None:
                continue  # held: read nothing, answer nothing
            upstream = socket.create_connection(("127.0.0.1", self._upstream_port))
            self._sockets.append(upstream)
            for source, target, marker in ((client, upstream, self._hold_marker), (upstream, client, None)):
                threading.Thread(target=_pump, args=(source, target, marker), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket, hold_marker: bytes | None) -> None:
    try:
        while data := source.recv(1 << 16):
            if hold_marker is not None and hold_marker in data:
                return  # held: this request and the connection stay unanswered
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # either side closed: the other pump ends too
