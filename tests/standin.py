"""A stand-in HTTP(S) server on 127.0.0.1 that answers every request with one canned reply.

It lets the real ``elasticsearch`` client meet a 401, a 403 or an untrusted TLS certificate without a
cluster, so the translation and printing of those errors is tested end to end.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Canned:
    """What the stand-in answers (``body`` None: an empty body, as Elasticsearch answers HEAD) and what it saw."""

    status: int = 200
    body: dict[str, Any] | None = None
    head_status: int | None = None
    paths: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)  # GET answers by exact path
    requests: list[tuple[str, str]] = field(default_factory=list)
    connections: int = 0
    url: str = ""


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def _answer(self, status: int, body: dict[str, Any] | None) -> None:
        self.server.canned.requests.append((self.command, self.path))
        raw = b"" if body is None or self.command == "HEAD" else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        c = self.server.canned
        self._answer(*c.paths.get(self.path, (c.status, c.body)))

    def do_HEAD(self) -> None:
        c = self.server.canned
        self._answer(c.head_status or c.status, None)

    do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def __init__(self, canned: Canned, tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.canned, self.tls = canned, tls

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        self.canned.connections += 1
        if self.tls is None:
            return sock, addr
        return self.tls.wrap_socket(sock, server_side=True), addr  # a failed handshake is an OSError: dropped


def serve(canned: Canned, tls: ssl.SSLContext | None) -> Iterator[Canned]:
    server = _Server(canned, tls)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    canned.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    try:
        yield canned
    finally:
        server.shutdown()
        server.server_close()
