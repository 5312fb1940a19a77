"""What every request passes before it reaches a route: the ``Host`` check (``_hosts``), the
body size limit and the time a body may take to arrive, the token (a bearer header, or the session
cookie the login form sets), and the cross-site check.

Webhook URLs (``/webhooks/{token}``) need no token — their unguessable token is their
authorisation — and are the only state-changing requests another site may send. Everything else
that changes state must come from this site: a browser says where a request comes from
(``Origin``, ``Sec-Fetch-Site``; a request that says it twice is refused), the API takes only
JSON bodies on the routes that change state (a browser must ask first before sending JSON to
another site), and the web UI's forms also carry a CSRF token bound to the session cookie.

The session cookie is signed with its issue time and expires after ``SESSION_MAX_AGE``. Wrong
tokens are logged (a line per client address at most every ``FAILURE_LOG_EVERY`` seconds, with
a count) and an address that sent ``FAILURE_BURST`` wrong ones within ``FAILURE_WINDOW``
seconds is answered 429 until the window ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wf._exceptions import UsageError
from wf._remote import API_HEADER, API_VERSION
from wf.serve._errors import ApiError, Sending, error_response, for_pages
from wf.serve._hosts import ServedHosts

log = logging.getLogger("wf.serve")

MAX_HEAD = 16 << 10
"""Bytes a request's line and headers may take (``docs/http.md``, "Slow and idle
connections")."""

SESSION_COOKIE = "wf_session"
SESSION_MAX_AGE = 12 * 3600
"""Seconds a session cookie is good for (its ``Max-Age``, and checked against the issue time
signed into it)."""
FAILURE_BURST = 10
"""Wrong tokens from one client address within ``FAILURE_WINDOW`` seconds before it gets 429."""
FAILURE_WINDOW = 60.0
FAILURE_LOG_EVERY = 60.0
"""Seconds between two log lines about one client address's wrong tokens."""
_TRACKED = 10_000
"""Client addresses whose failures are remembered (the oldest are forgotten first)."""
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_OPEN = ("/login", "/static/", "/webhooks/", "/favicon.ico")
_SINGLE = ("host", "origin", "sec-fetch-site")
"""Headers a request may carry at most once (two ``Origin`` headers: which one is true?)."""


class _Failed:
    __slots__ = ("count", "logged_at", "start", "unlogged")

    def __init__(self, now: float) -> None:
        self.start = now
        self.count = 0
        self.logged_at: float | None = None
        self.unlogged = 0


class Failures:
    """Failed authentications per client address, in bounded memory: logged at most once per
    ``FAILURE_LOG_EVERY`` seconds per address (with how many there were), and an address with
    ``FAILURE_BURST`` failures in a ``FAILURE_WINDOW`` is refused until the window ends."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._seen: OrderedDict[str, _Failed] = OrderedDict()

    def blocked(self, address: str) -> float | None:
        """Seconds until ``address`` may try again, or None when it may now. A refused try
        counts in the next log line."""
        found = self._seen.get(address)
        if found is None or found.count < FAILURE_BURST:
            return None
        left = FAILURE_WINDOW - (self._now() - found.start)
        if left <= 0:
            return None
        self._note(address, found, "refused (too many wrong tokens)")
        return left

    def failed(self, address: str, how: str) -> None:
        """Note a wrong token from ``address`` (``how``: where it was given)."""
        now = self._now()
        found = self._seen.get(address)
        if found is None:
            found = self._seen[address] = _Failed(now)
            while len(self._seen) > _TRACKED:
                self._seen.popitem(last=False)
        elif now - found.start >= FAILURE_WINDOW:
            found.start, found.count = now, 0
        found.count += 1
        self._note(address, found, how)

    def _note(self, address: str, found: _Failed, how: str) -> None:
        now = self._now()
        self._seen.move_to_end(address)
        found.unlogged += 1
        if found.logged_at is None or now - found.logged_at >= FAILURE_LOG_EVERY:
            since = "" if found.logged_at is None else f" in the last {now - found.logged_at:.0f} s"
            log.warning(
                "failed authentication from %s: %d wrong token(s)%s (last: %s)",
                address,
                found.unlogged,
                since,
                how,
            )
            found.logged_at, found.unlogged = now, 0


class Secrets:
    """The server's token (None: no authentication, loopback only) and what derives from it.

    ``now``: the clock session cookies' issue times and failed logins are measured by.
    ``https``: the server's public URL is https (its cookies are ``Secure``).
    """

    def __init__(
        self, token: str | None, *, now: Callable[[], float] = time.time, https: bool = False
    ) -> None:
        self.token = token
        self._key = token.encode() if token else secrets.token_bytes(32)
        self.now = now
        self.https = https
        self.failures = Failures(now)

    def _mac(self, purpose: str, value: str) -> str:
        signed = f"{purpose}\0{value}".encode("utf-8", "surrogatepass")
        return hmac.new(self._key, signed, hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        """A session cookie's value: its issue time, a nonce, and their MAC."""
        body = f"{int(self.now())}.{secrets.token_urlsafe(12)}"
        return f"{body}.{self._mac('wf-session', body)}"

    def session_ok(self, value: str) -> bool:
        """Whether ``value`` is a session cookie this server issued less than
        ``SESSION_MAX_AGE`` seconds ago."""
        body, _, mac = value.rpartition(".")
        issued = body.partition(".")[0]
        if not (issued.isascii() and issued.isdigit()):
            return False
        if not hmac.compare_digest(mac.encode(), self._mac("wf-session", body).encode()):
            return False
        age = self.now() - int(issued)
        return -60 <= age < SESSION_MAX_AGE

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

    def cookie_ok(self, cookies: Mapping[str, str]) -> bool:
        """Whether the session cookie is this server's, and still good."""
        return self.token is None or self.session_ok(cookies.get(SESSION_COOKIE, ""))

    def csrf(self, cookies: Mapping[str, str]) -> str:
        """The CSRF token of the forms a page shows to the holder of ``cookies``: the MAC of
        its session cookie, so only a page behind the session shows it (with no server token,
        there is no session: one token per server process, never shown on an open page)."""
        session = cookies.get(SESSION_COOKIE, "") if self.token is not None else ""
        return self._mac("wf-csrf", session)

    def csrf_ok(self, given: str | None, cookies: Mapping[str, str]) -> bool:
        """Whether a form's CSRF token is the one of the session that sent it."""
        return given is not None and hmac.compare_digest(
            given.encode(), self.csrf(cookies).encode()
        )

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
        path: str = scope["path"]
        send = _nosniff(send, api=path.startswith("/api/"))
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method: str = scope["method"]
        refusal = self._refusal(path, method, headers, scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        sending = Sending(send)
        await self.app(scope, self._limited(receive, headers, lambda: sending.started), sending)

    def _refusal(self, path: str, method: str, headers: dict[str, str], scope: Scope) -> Any:
        server = scope.get("server")
        page = for_pages(path)  # the web UI's refusals are pages, the API's JSON
        repeated = _repeated(scope["headers"])
        if repeated is not None:
            return error_response(
                400,
                "bad_request",
                f"a request may carry one {repeated} header, not several",
                page=page,
            )
        host = headers.get("host")
        if not self.hosts.serves(host, scope.get("scheme", "http"), server):
            shown = repr(host[:100]) if host is not None else "(none)"
            return error_response(
                421,
                "misdirected",
                f"this server does not answer to the host {shown}: use its own address "
                "(or give wf serve --base-url with the name it is reached by)",
            )  # JSON, a few bytes: no page of this server's for a name it does not serve
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        head += sum(len(name) + len(value) for name, value in scope["headers"])
        if head > MAX_HEAD:
            # The server limits a head that arrives in pieces; one sent whole is counted here.
            return error_response(
                431,
                "too_large",
                f"a request's line and headers are limited to {MAX_HEAD} bytes",
                page=page,
            )
        length = headers.get("content-length")
        if length is not None and not _length_within(length, self.max_body):
            return _too_large(self.max_body, page=page)
        open_path = path.startswith(_OPEN)
        if self.keys.token is not None and not open_path:
            refusal = self._unauthenticated(path, headers, scope)
            if refusal is not None:
                return refusal
        changes = method not in _SAFE and not path.startswith("/webhooks/")
        if changes and self._cross_site(headers, server):
            return error_response(
                403, "forbidden", "cross-site requests may not change anything here", page=page
            )
        if changes and path.startswith("/api/") and not _json_or_empty(headers):
            # A page on another site may send a form or text/plain without asking first; JSON
            # it must ask for (a CORS preflight, which this server never grants).
            return error_response(
                415,
                "unsupported_media_type",
                "this API takes JSON: send Content-Type: application/json",
            )
        return None

    def _unauthenticated(self, path: str, headers: dict[str, str], scope: Scope) -> Any:
        """The answer to a request without a good token or session cookie (None: it has one).
        A wrong bearer token is a failure of its client address (``Failures``)."""
        if self.keys.cookie_ok(_cookies(headers.get("cookie", ""))):
            return None
        authorization = headers.get("authorization")
        if authorization is not None:
            address = client_address(scope)
            wait = self.keys.failures.blocked(address)
            if wait is not None:
                return too_many(wait, page=for_pages(path))
            if self.keys.bearer_ok(authorization):
                return None
            self.keys.failures.failed(address, f"{scope['method']} {path[:100]}")
        if path.startswith("/api/"):
            # A wrong token is not a missing one: the one given is to be fixed, not added.
            message = (
                "this server needs a token: Authorization: Bearer <token>"
                if authorization is None
                else "the token given (Authorization: Bearer) is not this server's"
            )
            return error_response(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})
        from starlette.responses import RedirectResponse

        where = urllib.parse.quote(path, safe="/")
        return RedirectResponse(f"/login?next={where}", status_code=303)

    def _cross_site(self, headers: dict[str, str], server: Any) -> bool:
        """Whether a browser says the request comes from another site: ``Sec-Fetch-Site``, or
        an ``Origin`` that is not one of the names this server answers to."""
        if headers.get("sec-fetch-site", "").strip().lower() == "cross-site":
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


def client_address(scope: Scope) -> str:
    """The address a request comes from (the proxy's client when uvicorn trusts the proxy)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def too_many(wait: float, *, page: bool = False) -> Any:
    """The answer to a client address that sent too many wrong tokens (``page``: to a
    browser, as a page)."""
    seconds = max(1, int(wait + 0.999))
    return error_response(
        429,
        "too_many_requests",
        f"too many wrong tokens from this address: try again in {seconds} s",
        {"Retry-After": str(seconds)},
        page=page,
    )


def _repeated(raw: list[tuple[bytes, bytes]]) -> str | None:
    """The first of the headers a request may carry once that it carries more than once."""
    seen = set()
    for name, _ in raw:
        lowered = name.decode("latin-1").lower()
        if lowered in _SINGLE:
            if lowered in seen:
                return lowered.title()
            seen.add(lowered)
    return None


def _json_or_empty(headers: dict[str, str]) -> bool:
    """Whether a request's body is JSON by its ``Content-Type`` (``application/json``, or
    ``application/…+json``), or it has no body (no type, and no length or length 0)."""
    given = headers.get("content-type")
    if given is None:
        return headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers
    media = given.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _nosniff(send: Send, *, api: bool = False) -> Send:
    """``send`` with ``X-Content-Type-Options: nosniff`` on every answer that lacks it: a JSON
    answer that echoes a request's text is never read as a page. With ``api``, the answer
    also says it comes from a wf server, and which version of the API (``WF-API: 1``): the
    remote client refuses an answer without it, as another server's or version's."""
    identity = (API_HEADER.encode("ascii"), API_VERSION.encode("ascii"))

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers") or [])
            if not any(name.lower() == b"x-content-type-options" for name, _ in headers):
                headers.append((b"x-content-type-options", b"nosniff"))
            if api:
                headers.append(identity)
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _length_within(length: str, limit: int) -> bool:
    """Whether a ``Content-Length`` is a number of bytes of at most ``limit``. Leading zeros
    are dropped first, and more than 19 digits is past any limit: ``int()`` refuses a string of
    more than 4,300 digits, which a head of 16 KiB has room for."""
    digits = length.lstrip("0") or "0"
    return length.isascii() and length.isdigit() and len(digits) <= 19 and int(digits) <= limit


def _too_large(limit: int, *, page: bool) -> Any:
    said = f"request bodies are limited to {limit} bytes"
    return error_response(413, "too_large", said, page=page)
