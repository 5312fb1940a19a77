"""Webhooks: hooks with a URL, resumed by an HTTP request to ``wf serve``.

``wf.create_webhook(Payload, method="POST", respond=...)`` is a hook whose ``.url`` (built from
``WF_BASE_URL``) a payment provider, a chat platform or a form can call. The server validates
the request's JSON body against ``Payload`` and delivers it with the request's method, headers
and query: ``await hook.next()`` gives the body, ``await hook.request()`` the whole request.

The reply: a static ``respond`` (a status, or ``(status, body)``, or ``(status, body,
headers)``) is sent at once. Without it the caller's request waits while the run decides,
``await request.respond(status, body, headers)``: a step that writes the reply to the run's
byte stream ``wf:webhook:<delivery>``, which the server follows (any server process, whoever
drives the run). A reply that takes longer than the webhook's ``timeout`` gets 202 instead;
the run still has the payload. A reply sets no cookie (``Set-Cookie`` is a ``UsageError``):
the webhook's URL shares its origin with the web UI.

A provider that retries a delivery sends the same idempotency key (``Idempotency-Key``, or
the header named by ``idempotency_header``): the delivery's id is derived from it, so a
retried delivery reaches the workflow once and the retry gets the first delivery's reply.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
from collections.abc import Awaitable
from typing import Any, TypeVar, overload

from wf._exceptions import UsageError, finite_seconds
from wf.engine._codec import decode
from wf.engine._context import require_run
from wf.engine._hooks import WEBHOOK_ENVELOPE, Hook, create_hook
from wf.engine._signature import validate_value
from wf.engine._step import step
from wf.engine._streams import stream_writer

T = TypeVar("T")

REPLY_STREAM = "wf:webhook:"
"""Prefix of the byte streams that carry a webhook's reply (``wf:webhook:<delivery id>``)."""
_ENVELOPE = WEBHOOK_ENVELOPE
DEFAULT_BASE_URL = "http://127.0.0.1:8420"
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 3600.0
"""The longest a webhook's caller may be kept waiting for the run's reply (seconds)."""

MAX_REPLY = 1 << 20
"""The most bytes a reply the run writes (``request.respond``) takes as recorded: its body
(base64 for ``bytes``) and headers, as JSON. ``respond`` refuses a bigger one where it makes
a reply, never where it replays one; the server sends the first chunk of a reply stream as
recorded (a reply recorded before this bound, or a stream the run wrote itself, may be bigger)
and never reads past it."""
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
COOKIE_HEADERS = frozenset({"set-cookie", "set-cookie2"})
"""Headers (lower case) a webhook reply may not carry."""


def base_url() -> str:
    """Where ``wf serve`` is reached from outside: ``WF_BASE_URL``, else the default address."""
    return (os.environ.get("WF_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


def webhook_path(token: str) -> str:
    """The path of a webhook's URL on the server."""
    return "/webhooks/" + urllib.parse.quote(token, safe="")


def envelope(body: Any, request: dict[str, Any]) -> dict[str, Any]:
    """What a webhook delivery posts: the validated body and the request it came with."""
    return {_ENVELOPE: 1, "body": body, "request": request}


def reply_of(respond: Any) -> dict[str, Any] | None:
    """A static ``respond`` as ``{"status", "body", "headers"}`` (None: the run replies)."""
    if respond is None:
        return None
    headers: Any
    if isinstance(respond, int) and not isinstance(respond, bool):
        status, body, headers = respond, None, {}
    elif isinstance(respond, tuple) and len(respond) in (2, 3):
        status, body = respond[0], respond[1]
        headers = respond[2] if len(respond) == 3 else {}
    elif isinstance(respond, dict):
        status, body = respond.get("status", 200), respond.get("body")
        headers = respond.get("headers") or {}
    else:
        raise UsageError("respond= is a status, (status, body) or (status, body, headers)")
    _check_reply(status, headers, body)
    return {"status": status, "body": body, "headers": dict(headers)}


FRAMING_HEADERS = frozenset(
    {
        "connection",
        "content-length",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""Headers (lower case) that frame the HTTP message: the server sets them, a reply may not."""
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]|[^\x00-\xff]|^[ \t]|[ \t]$")
NO_BODY_STATUSES = frozenset({204, 304})
"""Statuses whose reply has no body (HTTP forbids one)."""


def _check_reply(status: Any, headers: Any, body: Any = None) -> None:
    """``UsageError`` for a reply the server could not send as given: a final status
    (200-599; a 1xx is not a reply), header names that are HTTP tokens, values on one line
    in Latin-1 without control characters or spaces around them, no header that frames the
    message or sets a cookie, no body with 204 or 304."""
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
        raise UsageError(f"a webhook reply's status is an HTTP status 200-599, not {status!r:.40}")
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise UsageError("a webhook reply's headers are a dict of strings")
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            raise UsageError(f"a webhook reply's header name {name!r:.60} is not an HTTP token")
        if _BAD_VALUE.search(value):
            raise UsageError(
                f"a webhook reply's header {name} has a value HTTP cannot carry: {value!r:.60}"
                " (control characters, line breaks, characters past U+00FF or spaces around it)"
            )
        if name.lower() in FRAMING_HEADERS:
            raise UsageError(
                f"a webhook reply cannot set {name}: the server frames the reply itself"
            )
    if any(name.lower() in COOKIE_HEADERS for name in headers):
        # Cookies set there land on the web UI's origin (wf_session too), and a caller's
        # cookies never reach the workflow: a reply's cookie only does harm.
        raise UsageError(
            "a webhook reply cannot set cookies: its URL shares the server's origin with the web UI"
        )
    if status in NO_BODY_STATUSES and body is not None:
        raise UsageError(f"a webhook reply with status {status} has no body (body=None)")


class WebhookRequest:
    """A request delivered to a webhook: ``.method``, ``.headers``, ``.query``, ``.json()``.

    ``.query`` maps each query parameter to its last value; ``.query_all(name)`` gives every
    value of a repeated one (``?tag=a&tag=b``), in order.

    ``await request.respond(status, body, headers)`` sends the HTTP reply (once), unless the
    webhook has a static ``respond``. ``body``: JSON-able (sent as JSON), ``str`` or ``bytes``.
    """

    def __init__(self, hook: Webhook[Any], body: Any, request: dict[str, Any]) -> None:
        self._hook = hook
        self._body = body
        self.id: str = str(request.get("id", ""))
        self.method: str = str(request.get("method", "POST"))
        self.headers: dict[str, str] = dict(request.get("headers") or {})
        self.query: dict[str, str] = dict(request.get("query") or {})
        items = request.get("query_items")
        # A request recorded before the pairs were kept has its ``query`` only.
        self._query_items: list[tuple[str, str]] = (
            [(str(name), str(value)) for name, value in items]
            if isinstance(items, list)
            else list(self.query.items())
        )
        self._answered = False

    def __repr__(self) -> str:
        return f"<wf.WebhookRequest {self.method} {self._hook.token!r}>"

    def query_all(self, name: str) -> list[str]:
        """Every value the query string gives ``name``, in order (``[]`` if none)."""
        return [value for key, value in self._query_items if key == name]

    def json(self) -> Any:
        """The request's body, decoded and validated against the webhook's type."""
        return self._body

    def respond(
        self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None
    ) -> Awaitable[None]:
        """Send the HTTP reply the caller waits for (a durable step: sent once). A payload
        delivered without an HTTP request (``wf.resume_hook``, ``wf hook resume``, the API's
        ``POST /api/v1/hooks/{token}``) has no caller: its reply is checked and goes nowhere,
        as one sent after the caller's ``timeout`` does."""
        if self._hook.respond is not None:
            raise UsageError("this webhook replies with its static respond= already")
        if self._answered:
            raise UsageError("this webhook request has its reply already: respond() once")
        _check_reply(status, headers or {}, body)
        if isinstance(body, bytes):
            kind, text = "base64", base64.b64encode(body).decode()
        elif isinstance(body, str):
            kind, text = "text", body
        else:
            kind, text = "json", json.dumps(body)
        size = len(_recorded(status, kind, text, dict(headers or {})))
        # Checked where the reply is made, never where it is replayed: a run in flight that
        # replied bigger under an older wf (no limit then) must replay as it ran.
        if size > MAX_REPLY and not self._hook._ctx.replaying:
            raise UsageError(
                f"a webhook reply takes at most {MAX_REPLY} bytes as recorded (its body, base64 "
                f"for bytes, and headers, as JSON), this one {size}"
            )
        self._answered = True
        if not self.id:
            return _nowhere()
        return send_reply(self.id, status, kind, text, dict(headers or {}))


async def _nowhere() -> None:
    """The reply to a payload no HTTP request brought."""


@step(name="wf.webhook_reply", max_retries=5)
async def send_reply(
    delivery: str, status: int, kind: str, body: str, headers: dict[str, str]
) -> None:
    """Write a webhook's reply where the server that holds the request follows it."""
    async with stream_writer(REPLY_STREAM + delivery) as writer:
        await writer.write(_recorded(status, kind, body, headers))


def _recorded(status: int, kind: str, body: str, headers: dict[str, str]) -> bytes:
    """A reply as its stream holds it (``MAX_REPLY`` bounds its size)."""
    return json.dumps({"status": status, "kind": kind, "body": body, "headers": headers}).encode()


class Webhook(Hook[T]):
    """A hook with a URL (``.url``). ``await .next()`` gives a request's decoded body;
    ``await .request()`` the whole ``WebhookRequest``."""

    def __init__(
        self,
        hook: Hook[T],
        *,
        method: str,
        respond: dict[str, Any] | None,
        timeout: float,
        idempotency_header: str,
    ) -> None:
        super().__init__(hook._ctx, hook.op, hook.token, hook.payload_type)
        self.method = method
        self.respond = respond
        self.timeout = timeout
        self.idempotency_header = idempotency_header

    def __repr__(self) -> str:
        return f"<wf.Webhook {self.method} {self.token!r}>"

    @property
    def url(self) -> str:
        """Where to send requests: ``WF_BASE_URL`` (or ``wf serve --base-url``) + the path."""
        return base_url() + webhook_path(self.token)

    def _schema(self) -> dict[str, Any]:
        schema = super()._schema()
        schema["webhook"] = {
            "method": self.method,
            "respond": self.respond,
            "timeout": self.timeout,
            "idempotency_header": self.idempotency_header,
        }
        return schema

    def request(self) -> Awaitable[WebhookRequest]:
        """Wait for the next request (the run suspends while none is there)."""
        return self._take(whole=True)

    def _accept(self, payloads: list[Any], index: int, whole: bool) -> Any:
        raw = decode(payloads[index])
        if isinstance(raw, dict) and raw.get(_ENVELOPE) == 1:
            request = dict(raw.get("request") or {})
            body = raw.get("body")
            delivery = request.get("id")
            if delivery and any(_delivery_of(p) == delivery for p in payloads[:index]):
                raise LookupError("a retried delivery")  # reaches the workflow once
        else:  # delivered by wf.resume_hook / the API, without an HTTP request
            request, body = {}, raw
        value = validate_value(self.payload_type, body, where=f"payload of hook {self.token!r}")
        return WebhookRequest(self, value, request) if whole else value


def _delivery_of(payload: Any) -> str | None:
    try:
        raw = decode(payload)
    except Exception:
        return None
    if isinstance(raw, dict) and raw.get(_ENVELOPE) == 1:
        request = raw.get("request") or {}
        return str(request.get("id")) if request.get("id") else None
    return None


@overload
def create_webhook(
    payload_type: type[T],
    *,
    method: str = "POST",
    respond: Any = None,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    idempotency_header: str = "Idempotency-Key",
) -> Webhook[T]: ...


@overload
def create_webhook(
    payload_type: Any = dict,
    *,
    method: str = "POST",
    respond: Any = None,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    idempotency_header: str = "Idempotency-Key",
) -> Webhook[Any]: ...


def create_webhook(
    payload_type: Any = dict,
    *,
    method: str = "POST",
    respond: Any = None,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    idempotency_header: str = "Idempotency-Key",
) -> Webhook[Any]:
    """Create a webhook: a hook with ``.url`` that ``wf serve`` resumes with a request's body.

    ``method``: the HTTP method it accepts (another gets 405). ``respond``: a static reply —
    a status, ``(status, body)`` or ``(status, body, headers)``; without it the workflow
    replies with ``await (await hook.request()).respond(...)`` within ``timeout`` seconds
    (the caller gets 202 after that; at most ``MAX_TIMEOUT``). A reply is one HTTP can carry
    (see ``_check_reply``) and sets no cookie, else ``UsageError``.
    ``idempotency_header``: the request header (an HTTP token) whose value identifies a
    delivery, so that a provider's retry reaches the workflow once.
    """
    require_run("wf.create_webhook()")
    method = method.upper()
    if method not in _METHODS:
        raise UsageError(f"a webhook's method is one of {', '.join(sorted(_METHODS))}")
    seconds = finite_seconds("a webhook's timeout", timeout)
    if not 0 < seconds <= MAX_TIMEOUT:
        raise UsageError(
            f"a webhook's timeout is more than 0 and at most {MAX_TIMEOUT:g} seconds,"
            f" not {timeout!r:.40}"
        )
    if not isinstance(idempotency_header, str) or not _TOKEN.fullmatch(idempotency_header):
        raise UsageError(
            "a webhook's idempotency_header is the name of an HTTP header (an HTTP token),"
            f" not {idempotency_header!r:.60}"
        )
    reply = reply_of(respond)
    hook = create_hook(payload_type, token=token)
    return Webhook(
        hook,
        method=method,
        respond=reply,
        timeout=seconds,
        idempotency_header=idempotency_header,
    )
