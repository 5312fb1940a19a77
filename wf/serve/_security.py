"""What every request passes before it reaches a route: the ``Host`` check (``_hosts``), the
body size limit and the time a body may take to arrive, the token (a bearer header, or the session
cookie the login form sets), and the cross-site check.

Webhook URLs (``/webhooks/{token}``) need no token — their unguessable token is their
authorisation — and are the only state-changing requests another site may send. Everything else
that changes state must come from this site: a browser says where a request comes from
(``Origin``, ``Sec-Fetch-Site``), and the web UI's forms also carry a CSRF token.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import urllib.parse
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wf._exceptions import UsageError
from wf.serve._errors import ApiError, Sending, error_response
from wf.serve._hosts import ServedHosts

log = logging.getLogger("wf.serve")

MAX_HEAD = 16 << 10
"""Bytes a request's line and headers may take (``docs/http.md``, "Slow and idle
connections")."""

SESSION_COOKIE = "wf_session"
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_OPEN = ("/login", "/static/", "/webhooks/", "/favicon.ico")


class Secrets:
    """The server's token (None: no authentication, loopback only) and what derives from it."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        key = token.encode() if token else secrets.token_bytes(32)
        self._key = key
        self.session = hmac.new(key, b"wf-session", hashlib.sha256).hexdigest()
        self.csrf = hmac.new(key, b"wf-csrf", hashlib.sha256).hexdigest()

    def bearer_ok(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token."""
        if self.token is None:
            return True
        if not header or not header.lower().startswith("bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self.token.encode())

    def token_ok(self, given: str) -> bool:
        """Whether a token typed into the login form is the server's."""
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def cookie_ok(self, cookies: dict[str, str]) -> bool:
        """Whether the session cookie is this server's."""
        value = cookies.get(SESSION_COOKIE, "")
        return self.token is None or hmac.compare_digest(value.encode(), self.session.encode())

    def csrf_ok(self, given: str | None) -> bool:
        """Whether a form's CSRF token is this server's."""
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())

    def flash_mac(self, run_id: str, kind: str, text: str) -> str:
        """The MAC of a message (``kind``: ``msg`` or ``err``) a form's answer redirects to
        ``run_id``'s page with: the page shows a message only with its MAC, so a link cannot
        make it say anything (a lure that reads as this server's own words)."""
        signed = "\0".join(("wf-flash", run_id, kind, text)).encode("utf-8", "surrogatepass")
        return hmac.new(self._key, signed, hashlib.sha256).hexdigest()[:32]

    def flash_ok(self, run_id: str, kind: str, text: str, mac: str) -> bool:
        """Whether ``mac`` is the MAC of that message (``flash_mac``)."""
        return hmac.compare_digest(mac.encode(), self.flash_mac(run_id, kind, text).encode())


def check_token(token: str) -> None:
    """Refuse a token that cannot protect anything or cannot be sent (``UsageError``): blank,
    shorter than 8 characters, with spaces around it (``Authorization: Bearer T`` drops them),
    or with characters an HTTP header cannot carry (control characters, non-ASCII)."""
    if not token.strip():
        raise UsageError("--token must not be blank")
    if token != token.strip():
        raise UsageError("--token must not start or end with whitespace")
    if len(token) < 8:
        raise UsageError("--token must be at least 8 characters")
    if not all(" " <= c <= "~" for c in token):
        raise UsageError("--token must be printable ASCII (it travels in an Authorization header)")


def _cookies(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in raw.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out[name] = value
    return out


class Guard:
    """ASGI middleware: the ``Host`` check, body size and time limits, authentication and the
    cross-site check."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: Secrets,
        max_body: int,
        hosts: ServedHosts,
        body_timeout: float,
    ) -> None:
        self.app = app
        self.keys = keys
        self.max_body = max_body
        self.hosts = hosts
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _nosniff(send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope["path"]
        method: str = scope["method"]
        refusal = self._refusal(path, method, headers, scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        sending = Sending(send)
        await self.app(scope, self._limited(receive, headers, lambda: sending.started), sending)

    def _refusal(self, path: str, method: str, headers: dict[str, str], scope: Scope) -> Any:
        server = scope.get("server")
        host = headers.get("host")
        if not self.hosts.serves(host, scope.get("scheme", "http"), server):
            shown = repr(host[:100]) if host is not None else "(none)"
            return error_response(
                421,
                "misdirected",
                f"this server does not answer to the host {shown}: use its own address "
                "(or give wf serve --base-url with the name it is reached by)",
            )
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        head += sum(len(name) + len(value) for name, value in scope["headers"])
        if head > MAX_HEAD:
            # The server limits a head that arrives in pieces; one sent whole is counted here.
            return error_response(
                431, "too_large", f"a request's line and headers are limited to {MAX_HEAD} bytes"
            )
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return _too_large(self.max_body)
        open_path = path.startswith(_OPEN)
        if self.keys.token is not None and not open_path:
            cookie_ok = self.keys.cookie_ok(_cookies(headers.get("cookie", "")))
            if not (self.keys.bearer_ok(headers.get("authorization")) or cookie_ok):
                if path.startswith("/api/"):
                    return error_response(
                        401,
                        "unauthorized",
                        "this server needs a token: Authorization: Bearer <token>",
                        {"WWW-Authenticate": "Bearer"},
                    )
                from starlette.responses import RedirectResponse

                where = urllib.parse.quote(path, safe="/")
                return RedirectResponse(f"/login?next={where}", status_code=303)
        changes = method not in _SAFE and not path.startswith("/webhooks/")
        if changes and self._cross_site(headers, server):
            return error_response(
                403, "forbidden", "cross-site requests may not change anything here"
            )
        return None

    def _cross_site(self, headers: dict[str, str], server: Any) -> bool:
        """Whether a browser says the request comes from another site: ``Sec-Fetch-Site``, or
        an ``Origin`` that is not one of the names this server answers to."""
        if headers.get("sec-fetch-site") == "cross-site":
            return True
        origin = headers.get("origin")
        if origin is None:
            return False
        return not self.hosts.same_site(origin, server)

    def _limited(
        self, receive: Receive, headers: dict[str, str], answering: Callable[[], bool]
    ) -> Receive:
        """``receive`` with the body's size counted (when no ``Content-Length`` said it) and
        its arrival bounded: a body still incomplete after ``body_timeout`` seconds is a 408,
        or, once the answer has started (``answering()``: a stream that never read the body
        it was announced), the end of the request, as if the client had left.
        Once the body is complete, ``receive`` is the server's own (it waits for a disconnect
        as long as a response streams)."""
        counted = "content-length" not in headers  # else checked against the limit already
        seen = 0
        limit = self.max_body
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        complete = False

        async def bounded() -> Message:
            nonlocal seen, complete
            if complete:
                return await receive()
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                async with asyncio.timeout(max(remaining, 0.0)):
                    message = await receive()
            except TimeoutError:
                took = f"{self.body_timeout:g} s"
                if answering():
                    log.warning("a request's body did not arrive within %s: its answer ends", took)
                    return {"type": "http.disconnect"}
                raise ApiError(
                    408, "timeout", f"the request body did not arrive within {took}"
                ) from None
            if message["type"] == "http.request":
                complete = not message.get("more_body", False)
                if counted:
                    seen += len(message.get("body", b""))
                    if seen > limit:
                        raise ApiError(
                            413, "too_large", f"request bodies are limited to {limit} bytes"
                        )
            return message

        return bounded


def _nosniff(send: Send) -> Send:
    """``send`` with ``X-Content-Type-Options: nosniff`` on every answer that lacks it: a JSON
    answer that echoes a request's text is never read as a page."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers") or [])
            if not any(name.lower() == b"x-content-type-options" for name, _ in headers):
                headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
        await send(message)

    return sending


def _too_large(limit: int) -> Any:
    return error_response(413, "too_large", f"request bodies are limited to {limit} bytes")
