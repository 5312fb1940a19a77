"""Connections that send nothing, or a request's head a byte at a time, are closed.

uvicorn closes an idle connection only after a response (``timeout_keep_alive``): a connection
that never completes a request's head (a slow-loris client, or one that opens and says nothing)
is kept for ever, and enough of them exhaust the server. Its HTTP protocol is wrapped here with
a deadline for the head of each request: armed when the connection opens and after each
response, disarmed when a request's head is complete (the app then runs; the body's arrival is
bounded by the guard, ``_security``). A connection past it is closed without an answer.

The same protocol answers a request that is not HTTP at all (a head h11 or httptools cannot
parse) under ``/api/`` as the API answers: ``400 bad_request`` in JSON, with the ``WF-API``
header (uvicorn's own answer is plain text without it, which the remote client takes for
another server's). The path is read from the start of the head as it arrives; one that
cannot be read gets uvicorn's answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from typing import Any

from wf._remote import API_HEADER, API_VERSION

HEADER_TIMEOUT = 10.0
"""Seconds a connection has to send a request's head (its line and headers)."""

HEAD_KEPT = 2048
"""Bytes of a request's head kept to tell its path should it prove malformed."""

log = logging.getLogger("wf.serve")


def deadline_protocol(header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, else h11, as uvicorn picks it) with a
    ``header_timeout`` deadline for each request's head."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class DeadlineProtocol(base):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None
        _head = b""
        """The start of the request head being read (``send_400_response``)."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            if (before is None or before.response_complete) and len(self._head) < HEAD_KEPT:
                self._head += data[: HEAD_KEPT - len(self._head)]
            super().data_received(data)
            if self.cycle is not before:  # a request's head is complete: the app has it
                self._head = b""
                self._disarm()

        def send_400_response(self, msg: str) -> None:
            """A head that cannot be parsed: under ``/api/`` answered as the API answers."""
            if not _under_api(self._head):
                super().send_400_response(msg)
                return
            body = json.dumps(
                {"error": {"type": "bad_request", "message": f"malformed HTTP request: {msg}"}}
            ).encode("ascii")
            self.transport.write(
                b"HTTP/1.1 400 Bad Request\r\n"
                b"content-type: application/json\r\n"
                b"content-length: %d\r\n"
                b"x-content-type-options: nosniff\r\n"
                b"%s: %s\r\n"
                b"connection: close\r\n\r\n%s"
                % (len(body), API_HEADER.encode("ascii"), API_VERSION.encode("ascii"), body)
            )
            self.transport.close()

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


def _under_api(head: bytes) -> bool:
    """Whether the request line that ``head`` starts with targets the API (``/api/``)."""
    parts = head.lstrip(b"\r\n").split(b"\r\n", 1)[0].split(b" ")
    if len(parts) < 2:
        return False
    target = parts[1].decode("latin-1")
    path = urllib.parse.urlsplit(target).path if "://" in target else target
    return path.startswith("/api/")
