"""What every request passes before it reaches a route: the body size limit, the token (a
bearer header, or the session cookie the login form sets), and the cross-site check.

Webhook URLs (``/webhooks/{token}``) need no token — their unguessable token is their
authorisation — and are the only state-changing requests another site may send. Everything else
that changes state must come from this site: a browser says where a request comes from
(``Origin``, ``Sec-Fetch-Site``), and the web UI's forms also carry a CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import urllib.parse
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wf.serve._errors import ApiError, error_response

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


def _cookies(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in raw.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out[name] = value
    return out


class Guard:
    """ASGI middleware: body size limit, authentication and the cross-site check."""

    def __init__(self, app: ASGIApp, *, keys: Secrets, max_body: int) -> None:
        self.app = app
        self.keys = keys
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope["path"]
        method: str = scope["method"]
        refusal = self._refusal(path, method, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, self._limited(receive, headers), send)

    def _refusal(self, path: str, method: str, headers: dict[str, str]) -> Any:
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
        if changes and _cross_site(headers):
            return error_response(
                403, "forbidden", "cross-site requests may not change anything here"
            )
        return None

    def _limited(self, receive: Receive, headers: dict[str, str]) -> Receive:
        if "content-length" in headers:
            return receive  # checked against the limit already
        seen = 0
        limit = self.max_body

        async def counting() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ApiError(413, "too_large", f"request bodies are limited to {limit} bytes")
            return message

        return counting


def _too_large(limit: int) -> Any:
    return error_response(413, "too_large", f"request bodies are limited to {limit} bytes")


def _cross_site(headers: dict[str, str]) -> bool:
    """Whether a browser says the request comes from another site."""
    if headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = headers.get("origin")
    if not origin or origin == "null":
        return origin == "null"
    return urllib.parse.urlsplit(origin).netloc != headers.get("host", "")
