"""Errors of the HTTP API: one JSON shape, ``{"error": {"type", "message"}}``, and the status
that goes with each kind of failure."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wf._exceptions import (
    HookError,
    InputValidationError,
    LoadError,
    ResultExpired,
    RunAlreadyExists,
    RunNotFound,
    StoreCorrupted,
    StoreError,
    StreamNotFound,
    UsageError,
    ValueEncodingError,
    WorkflowNotFound,
)


class ApiJSON(JSONResponse):
    """A JSON response that also carries strings no UTF-8 can (lone surrogates, from a request
    or an older store): those travel as ``\\ud800`` escapes, which JSON allows."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


class ApiError(Exception):
    """An error answered as ``{"error": {"type", "message", **fields}}`` with ``status``;
    ``fields`` carry what a client rebuilds the library's error from (a missing run's id)."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        headers: dict[str, str] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers
        self.fields = fields or {}


def for_pages(path: str) -> bool:
    """Whether the answers to ``path`` are the web UI's (pages, errors too), not the API's or a
    webhook's (JSON, read by programs)."""
    return not (path + "/").startswith(("/api/", "/webhooks/"))  # "/api" too


def error_response(
    status: int,
    type_: str,
    message: str,
    headers: dict[str, str] | None = None,
    fields: dict[str, Any] | None = None,
    *,
    page: bool = False,
) -> Response:
    """The JSON error body with its status; with ``page``, a page that says the message (the
    web UI's answer to a browser: ``for_pages``)."""
    if page:
        from wf.serve._html import error_page

        return error_page(status, message, headers)
    body = {"error": {"type": type_, "message": message, **(fields or {})}}
    return ApiJSON(body, status_code=status, headers=headers)


def classify(exc: BaseException) -> ApiError | None:
    """The API error a library exception stands for; None for an unexpected one (a 500)."""
    if isinstance(exc, ApiError):
        return exc
    fields: dict[str, Any]
    if isinstance(exc, StreamNotFound):
        fields = {"run_id": exc.run_id, "stream": exc.name, "streams": exc.streams}
        return ApiError(404, "not_found", str(exc), fields=fields)
    if isinstance(exc, ResultExpired):
        fields = {"run_id": exc.run_id, "deleted_at": exc.deleted_at, "reason": exc.reason}
        return ApiError(404, "not_found", str(exc), fields=fields)
    if isinstance(exc, RunNotFound):
        return ApiError(404, "not_found", str(exc), fields={"run_id": exc.run_id})
    if isinstance(exc, RunAlreadyExists):
        return ApiError(409, "conflict", str(exc))
    if isinstance(exc, StoreCorrupted):
        # The item asked for cannot be read (a damaged file or row): the server's data, not a
        # bug; every other item is still served. The message names the file.
        return ApiError(500, "store_damaged", str(exc))
    if isinstance(exc, StoreError):
        # The store failed as a whole (read-only, full, unreachable): not a bug of the server,
        # and maybe over soon. The message names the file or operation.
        return ApiError(503, "store_unavailable", str(exc))
    if isinstance(exc, WorkflowNotFound | LoadError):
        # Named, as a kind of UsageError is below: the client raises the same class.
        fields = {"exception": type(exc).__name__}
        return ApiError(400, "workflow_not_found", str(exc), fields=fields)
    if isinstance(exc, HookError | InputValidationError | ValueEncodingError | UsageError):
        # A kind of UsageError is named, so that the client raises the same class.
        named = type(exc) is not UsageError and isinstance(exc, UsageError)
        fields = {"exception": type(exc).__name__} if named else {}
        return ApiError(400, "bad_request", str(exc), fields=fields)
    return None


class Sending:
    """An ASGI ``send`` that remembers whether the answer has started (after which no other
    answer can be given)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)


class Answered:
    """ASGI middleware: an unexpected exception is answered as a ``500 internal`` and logged
    once, with its traceback, by ``on_error``. Left to Starlette's outermost middleware, it
    would be answered the same but raised again for the server to log a second time. An
    exception after the answer started is the server's to log (once), and it ends the
    connection. A client that left while its body was read (Starlette's
    ``ClientDisconnect``: it went away, or the HTTP parser refused the rest of its body) has
    nobody to answer: that is no error, and nothing is logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sending = Sending(send)
        try:
            await self.app(scope, receive, sending)
        except ClientDisconnect:
            return
        except Exception as exc:
            if sending.started:
                raise
            response = await on_error(Request(scope), exc)
            await response(scope, receive, send)


async def on_error(request: Request, exc: Exception) -> Response:
    """Starlette exception handler: a library error as its API error, anything else as 500."""
    import logging

    error = classify(exc)
    page = for_pages(request.scope["path"])
    if error is None:
        logging.getLogger("wf.serve").error("%s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, "internal", f"{type(exc).__name__}: {exc}", page=page)
    if error.type in ("store_damaged", "store_unavailable"):  # one line, no traceback
        logging.getLogger("wf.serve").warning("%s %s: %s", request.method, request.url.path, exc)
    return error_response(
        error.status, error.type, error.message, error.headers, error.fields, page=page
    )


async def on_http_exception(request: Request, exc: Any) -> Response:
    """Starlette's own 404/405 (no such route, wrong method) in the API's shape."""
    status = int(getattr(exc, "status_code", 500))
    names = {
        400: "bad_request",  # e.g. a form with more fields than Starlette parses
        404: "not_found",
        405: "method_not_allowed",
        413: "too_large",
    }
    detail = str(getattr(exc, "detail", "") or "")
    return error_response(
        status,
        names.get(status, "http_error"),
        detail,
        getattr(exc, "headers", None),
        page=for_pages(request.scope["path"]),
    )
