"""Connections that send nothing, or a request's head a byte at a time, are closed.

uvicorn closes an idle connection only after a response (``timeout_keep_alive``): a connection
that never completes a request's head (a slow-loris client, or one that opens and says nothing)
is kept for ever, and enough of them exhaust the server. Its HTTP protocol is wrapped here with
a deadline for the head of each request: armed when the connection opens and after each
response, disarmed when a request's head is complete (the app then runs; the body's arrival is
bounded by the guard, ``_security``). A connection past it is closed without an answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

HEADER_TIMEOUT = 10.0
"""Seconds a connection has to send a request's head (its line and headers)."""

log = logging.getLogger("wf.serve")


def deadline_protocol(header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, else h11, as uvicorn picks it) with a
    ``header_timeout`` deadline for each request's head."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class DeadlineProtocol(base):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:  # a request's head is complete: the app has it
                self._disarm()

        def on_response_complete(self) -> None:
            before = self.cycle
            super().on_response_complete()
            if self.cycle is before and not self.transport.is_closing():
                self._arm()  # waiting for the next request on this connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being answered (pipelined heads wait for it)
            client = self.client
            where = f"{client[0]}:{client[1]}" if client else "a client"
            log.debug("closed the connection of %s: no request within %gs", where, header_timeout)
            self.transport.close()

    return DeadlineProtocol
