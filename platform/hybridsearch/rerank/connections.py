"""The reranker service's connection limits on uvicorn's h11 protocol (:func:`guarded_protocol`): a client has
``header_timeout`` seconds to send a request's headers (counted from the connection, or from the first byte of a
later request on it) and is then cut off with 408, so slow senders cannot hold connections; a connection over
``max_connections`` is answered 503 with ``Retry-After`` at once and closed. :class:`ConnectionGuard` counts what
they did."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass
class ConnectionGuard:
    """The connection limits of one served app (:func:`hybridsearch.rerank.service.serve`), and what they did:
    connections open now, refused over ``max_connections``, cut off for sending their headers slower than
    ``header_timeout``."""

    header_timeout: float
    max_connections: int
    open: int = 0
    refused: int = 0
    timed_out: int = 0


_REFUSED = b'{"error": "too_many_connections", "detail": "the service holds max_connections connections"}'
REFUSED_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    b"Connection: close\r\nContent-Length: " + str(len(_REFUSED)).encode() + b"\r\n\r\n" + _REFUSED)
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
#: seconds a refused connection is kept half-closed so that its client reads the 503 before the close
REFUSED_LINGER_S = 1.0


def guarded_protocol(guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with ``guard``'s limits: a header timeout per request and a connection cap."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _refused = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[arg-type]
            guard.open += 1
            if guard.open > guard.max_connections:
                guard.refused += 1
                self._refused = True
                self.transport.write(REFUSED_RESPONSE)
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                self._timer = self.loop.call_later(REFUSED_LINGER_S, self.transport.close)
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            guard.open -= 1
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # read and dropped until the linger ends
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                if self._timer is None:  # the first bytes of a request: its headers are now due
                    self._arm()
            else:
                self._disarm()  # headers in (or the connection is going): the app and its body timeout take over

        def _arm(self) -> None:
            self._timer = self.loop.call_later(guard.header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _headers_late(self) -> None:
            self._timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                guard.timed_out += 1
                self.transport.write(TIMEOUT_RESPONSE)
                self.transport.close()

    return GuardedH11Protocol
