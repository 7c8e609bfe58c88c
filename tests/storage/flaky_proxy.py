"""A seeded fault-injecting, shaping HTTP proxy in front of the GCS emulator: a flaky, slow object store.

It listens on 127.0.0.1 only and forwards every request to the emulator, except for a seeded random
fraction of them, which meet one of these faults (chosen in turn by the same seeded generator):

- ``503``: a GCS-style JSON error "503 Service Unavailable", the request not forwarded;
- ``429``: likewise "429 Too Many Requests" (rate limited);
- ``drop_before``: the connection is closed without an answer, the request not forwarded;
- ``drop_after``: the request *is* forwarded and done by the emulator, then the connection is
  closed without an answer. The client cannot tell it from ``drop_before``: this is the fault where
  a retried non-idempotent call (an upload with ``ifGenerationMatch=0``, a delete, a copy) meets
  the result of its own first try.

Resumable upload sessions behave as on Cloud Storage, which fake-gcs-server does not do by itself
(it appends a re-sent chunk a second time and answers 404 for a finished session): google-cloud-
storage retries a chunk by sending the same byte range again, and Cloud Storage keeps the bytes it
already has and answers with the range it holds; a finished session answers with the object
again. The proxy does that: it trims a re-sent chunk to the bytes the session lacks (answering 308
itself when it lacks none) and replays a finished session's answer. Without this, a ``drop_after``
on a chunk would test the emulator's gap, not this project's code.

It also shapes every answer as a real object store's: a fixed latency before the answer's first
byte (counted from when the request was read, so the emulator's own time is inside it) and a cap on
the bytes per second of each connection (the body is written in slices, each sent no sooner than
the cap allows). Both are settable while it runs (``set_shaping``), for tests and benchmarks.

Seeded: the sequence of decisions is fixed by the seed; which request meets which decision depends
on the order requests arrive (threads and worker processes interleave). ``faults`` counts what was
injected, by kind. Bounded: at most ``max_consecutive_faults`` faults in a row (so a retrying client
always gets through), and the server stops itself after ``lifetime_seconds`` if nobody stopped it.
Standard library only: it is test code.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import json
import random
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

FAULT_KINDS = ("503", "429", "drop_before", "drop_after")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
               "content-length"}
Answer = tuple[int, str, list[tuple[str, str]], bytes]  # status, reason, headers, body
_CONTENT_RANGE = re.compile(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)")
_ERRORS = {"503": (503, "Service Unavailable", "backendError"), "429": (429, "Too Many Requests", "rateLimitExceeded")}


def _pop_header(headers: dict[str, str], name: str) -> str | None:
    """Removes a header whatever its case (clients send ``content-range`` as well as ``Content-Range``)."""
    for key in [k for k in headers if k.lower() == name.lower()]:
        value = headers.pop(key)
        return value
    return None


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client closing its kept-alive connection
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class FlakyProxy:
    """Forwards HTTP/1.1 requests from ``url`` to ``upstream`` and injects faults into some of them.

    Args:
        upstream: the emulator, ``http://127.0.0.1:PORT``.
        fault_fraction: the share of requests that meet a fault (0 to 1).
        seed: seeds the generator that decides which requests fail and how.
        port: the port to listen on (0: any free port).
        max_consecutive_faults: after this many faults in a row the next request always goes through.
        lifetime_seconds: the proxy shuts itself down after this long.
        latency_seconds: the wait before each answer's first byte.
        bytes_per_second: the cap on each connection's answer bytes per second; None: no cap.
    """

    def __init__(self, upstream: str, *, fault_fraction: float, seed: int, port: int = 0,
                 max_consecutive_faults: int = 3, lifetime_seconds: float = 900.0, latency_seconds: float = 0.0,
                 bytes_per_second: float | None = None) -> None:
        if not 0.0 <= fault_fraction <= 1.0:
            raise ValueError(f"fault_fraction must be within [0, 1], got {fault_fraction}")
        self.set_shaping(latency_seconds=latency_seconds, bytes_per_second=bytes_per_second)
        host, _, upstream_port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(upstream_port))
        self.fault_fraction = fault_fraction
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._in_a_row = 0
        self._max_in_a_row = max_consecutive_faults
        self.requests = 0
        self.media_reads: collections.Counter[str] = collections.Counter()  # object path -> GETs of its bytes
        self.faults: collections.Counter[str] = collections.Counter()
        self.faulted_methods: collections.Counter[str] = collections.Counter()
        self._scripted: list[tuple[str, str, str]] = []  # (kind, method, path part): faults asked for by a test
        self.resent_chunks = 0  # chunk PUTs trimmed or answered because the session had those bytes
        self._session_offset: dict[str, int] = {}  # resumable session path -> bytes it holds
        self._session_done: dict[str, Answer] = {}
        self._server = _QuietServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="flaky-proxy", daemon=True)
        self._timer = threading.Timer(lifetime_seconds, self.stop)
        self._timer.daemon = True
        self._started = False
        self._stopped = False

    @property
    def num_faults(self) -> int:
        return sum(self.faults.values())

    def start(self) -> "FlakyProxy":
        self._thread.start()
        self._timer.start()
        self._started = True
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._timer.cancel()
        if self._started:
            self._server.shutdown()
        self._server.server_close()

    def set_shaping(self, *, latency_seconds: float, bytes_per_second: float | None) -> None:
        """Sets the latency before each answer's first byte and the per-connection bandwidth cap (None: none)."""
        if latency_seconds < 0:
            raise ValueError(f"latency_seconds must be >= 0, got {latency_seconds}")
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be > 0 or None, got {bytes_per_second}")
        self.latency_seconds = latency_seconds
        self.bytes_per_second = bytes_per_second

    def set_fault_fraction(self, fault_fraction: float) -> None:
        with self._lock:
            self.fault_fraction = fault_fraction

    def reset(self, *, seed: int, fault_fraction: float) -> None:
        """Starts a fresh decision sequence and fresh counters (one per test, so each reproduces alone)."""
        with self._lock:
            self._random = random.Random(seed)
            self.fault_fraction = fault_fraction
            self._in_a_row = 0
            self.requests = 0
            self.media_reads.clear()
            self.faults.clear()
            self.faulted_methods.clear()
            self.resent_chunks = 0

    def fail_next(self, kind: str, method: str, path_contains: str = "") -> None:
        """Gives the next ``method`` request whose path contains ``path_contains`` the fault ``kind``."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {FAULT_KINDS}")
        with self._lock:
            self._scripted.append((kind, method, path_contains))

    def _decide(self, method: str, path: str) -> str | None:
        """The fault for the next request, or None to forward it; counted."""
        with self._lock:
            self.requests += 1
            if method == "GET" and ("alt=media" in path or not path.startswith("/storage/")):  # JSON or XML API
                self.media_reads[urllib.parse.unquote(path.partition("?")[0])] += 1  # obstore escapes "-", "."
            for i, (kind, wanted_method, part) in enumerate(self._scripted):
                if method == wanted_method and part in path:
                    del self._scripted[i]
                    self.faults[kind] += 1
                    self.faulted_methods[method] += 1
                    return kind
            # Both draws are always made, so the decision sequence depends only on the seed.
            hit = self._random.random() < self.fault_fraction
            kind = FAULT_KINDS[self._random.randrange(len(FAULT_KINDS))]
            if not hit or self._in_a_row >= self._max_in_a_row:
                self._in_a_row = 0
                return None
            self._in_a_row += 1
            self.faults[kind] += 1
            self.faulted_methods[method] += 1
            return kind

    def _session_request(self, path: str, headers: dict[str, str], body: bytes) -> tuple[Answer | None, bytes]:
        """For a PUT to a resumable session: (an answer to give without forwarding, or None; the body
        to forward, trimmed to the bytes the session lacks, ``headers`` fixed to match)."""
        match = _CONTENT_RANGE.fullmatch(_pop_header(headers, "Content-Range") or "")
        with self._lock:
            if path in self._session_done:
                self.resent_chunks += 1
                return self._session_done[path], body
            held = self._session_offset.get(path, 0)
        if match is not None:
            headers["Content-Range"] = match.group(0)
        if match is None or match.group(1) is None:
            return None, body  # a status query, or an empty final chunk
        start, end, total = int(match.group(1)), int(match.group(2)), match.group(3)
        if start >= held:
            return None, body
        with self._lock:
            self.resent_chunks += 1
        if end + 1 <= held and (total == "*" or end + 1 < int(total)):
            return (308, "Permanent Redirect", [("Range", f"bytes=0-{held - 1}")], b""), body
        headers["Content-Range"] = f"bytes {held}-{end}/{total}"
        return None, body[held - start:]

    def _session_answered(self, path: str, headers: dict[str, str], answer: Answer) -> None:
        status = answer[0]
        match = _CONTENT_RANGE.fullmatch(headers.get("Content-Range", ""))
        with self._lock:
            if status in (200, 201):
                self._session_done[path] = answer
            elif status == 308 and match is not None and match.group(2) is not None:
                self._session_offset[path] = int(match.group(2)) + 1

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall
            _upstream: http.client.HTTPConnection | None = None

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the counters say what happened

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _drop(self) -> None:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _forward(self, body: bytes) -> Answer:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                session = self.command == "PUT" and "upload_id=" in self.path
                if session:
                    answer, body = proxy._session_request(self.path, headers, body)
                    if answer is not None:
                        return answer
                headers["Content-Length"] = str(len(body))
                for attempt in range(2):  # a kept-alive upstream connection may have been closed by the emulator
                    if self._upstream is None:
                        self._upstream = http.client.HTTPConnection(*proxy._upstream, timeout=60)
                    try:
                        self._upstream.request(self.command, self.path, body=body, headers=headers)
                        response = self._upstream.getresponse()
                        answer = response.status, response.reason, response.getheaders(), response.read()
                        if session:
                            proxy._session_answered(self.path, headers, answer)
                        return answer
                    except (http.client.HTTPException, OSError):
                        self._upstream.close()
                        self._upstream = None
                        if attempt:
                            raise
                raise AssertionError("unreachable")

            def _wait_first_byte(self, received: float) -> None:
                delay = received + proxy.latency_seconds - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

            def _write_paced(self, data: bytes) -> None:
                """Writes the body no faster than the cap: each slice (1/50 s of it) once its time has come."""
                rate = proxy.bytes_per_second
                if rate is None:
                    self.wfile.write(data)
                    return
                view, started, sent = memoryview(data), time.monotonic(), 0
                step = max(1 << 12, int(rate / 50))
                while sent < len(view):
                    part = view[sent:sent + step]
                    sent += len(part)
                    early = started + sent / rate - time.monotonic()  # no byte arrives before the cap allows
                    if early > 0:
                        time.sleep(early)
                    self.wfile.write(part)

            def _handle(self) -> None:
                body = self._read_body()
                received = time.monotonic()
                fault = proxy._decide(self.command, self.path)
                if fault == "drop_before":
                    self._drop()
                    return
                if fault in _ERRORS:
                    code, reason, why = _ERRORS[fault]
                    payload = json.dumps({"error": {"code": code, "message": f"injected: {reason}",
                                                    "errors": [{"reason": why, "message": reason}]}}).encode()
                    self._wait_first_byte(received)
                    self.send_response(code, reason)
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                try:
                    status, reason, headers, data = self._forward(body)
                except (http.client.HTTPException, OSError):
                    self._drop()  # the emulator itself failed: the client sees a dropped connection
                    return
                if fault == "drop_after":
                    self._drop()
                    return
                self._wait_first_byte(received)
                self.send_response(status, reason)
                for key, value in headers:
                    if key.lower() not in _HOP_BY_HOP and key.lower() not in ("server", "date"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self._write_paced(data)

            def finish(self) -> None:
                if self._upstream is not None:
                    self._upstream.close()
                super().finish()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        return Handler


@contextmanager
def flaky_proxy(upstream: str, *, fault_fraction: float, seed: int, port: int = 0, latency_seconds: float = 0.0,
                bytes_per_second: float | None = None) -> Iterator[FlakyProxy]:
    """A started ``FlakyProxy``, stopped when the block ends (its own timer stops it otherwise)."""
    proxy = FlakyProxy(upstream, fault_fraction=fault_fraction, seed=seed, port=port, latency_seconds=latency_seconds,
                       bytes_per_second=bytes_per_second).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def wait_until_listening(url: str, timeout_seconds: float = 5.0) -> None:
    host, _, port = url.removeprefix("http://").partition(":")
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
