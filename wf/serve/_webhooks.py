"""``/webhooks/{token}``: a request to a webhook resumes its run with the request's body.

See ``wf.engine._webhooks`` for the workflow's side. Here: the token, method and body are
checked (404, 405, 400), the delivery is posted to the run's inbox, and the reply is the
webhook's static one, or the one the run writes to ``wf:webhook:<delivery>`` — or 202 after
the webhook's timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from wf._exceptions import HookError
from wf.serve import _params as params
from wf.serve._errors import ApiError, error_response
from wf.serve._state import state
from wf.store import DELIVERY_KEPT, Store, WebhookDelivery
from wf.store._base import _reads_in_batches

log = logging.getLogger("wf.serve")
_DROPPED_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})


def delivery_id(token: str, key: str | None) -> str:
    """The id of a delivery: derived from the idempotency key (so a retry has the same one),
    else random."""
    if not key:
        return secrets.token_hex(16)
    return hashlib.sha256(f"{token}\0{key}".encode()).hexdigest()[:32]


class _Reply(Response):
    """A webhook's reply: one the connection still cannot take when it is sent (the server
    refuses it, the caller left) is said in one log line, never as a traceback."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except Exception as exc:  # said in one line; the server closes the connection
            log.warning(
                "%s %s: the reply could not be sent: %s",
                scope.get("method"),
                scope.get("path"),
                f"{type(exc).__name__}: {exc}",
            )


def reply_response(reply: dict[str, Any]) -> Response:
    """An HTTP response from a webhook reply (static, or written by the run).

    A webhook's URL shares its origin with the web UI, so the reply is never sniffed
    (``nosniff``), cannot run script there (``Content-Security-Policy: sandbox``, unless the
    workflow sets its own policy) and sets no cookie (one recorded before they were refused
    is dropped). A recorded reply that HTTP cannot carry (written before such replies were
    refused) is answered ``502 bad_reply`` and said in one log line."""
    from wf._exceptions import UsageError
    from wf.engine._webhooks import COOKIE_HEADERS, NO_BODY_STATUSES, _check_reply

    status = reply.get("status", 200)
    kept = {
        str(name): value
        for name, value in (reply.get("headers") or {}).items()
        if str(name).lower() not in COOKIE_HEADERS
    }
    try:
        _check_reply(status, kept)
    except UsageError as exc:
        log.warning("a webhook reply cannot be sent: %s", exc)
        return error_response(502, "bad_reply", f"the run's reply cannot be sent: {exc}")
    headers = {name.lower(): value for name, value in kept.items()}
    headers["x-content-type-options"] = "nosniff"
    headers.setdefault("content-security-policy", "sandbox")
    kind = reply.get("kind", "json")
    body = reply.get("body")
    if status in NO_BODY_STATUSES:
        return _Reply(status_code=status, headers=headers)  # HTTP gives them no body
    if kind == "text":
        headers.setdefault("content-type", "text/plain; charset=utf-8")
        return _Reply(str(body), status_code=status, headers=headers)
    if kind == "base64":
        try:
            data = _base64_body(body)
        except ValueError as exc:
            log.warning("a webhook reply cannot be sent: %s", exc)
            return error_response(502, "bad_reply", f"the run's reply cannot be sent: {exc}")
        headers.setdefault("content-type", "application/octet-stream")
        return _Reply(data, status_code=status, headers=headers)
    if kind == "json" and isinstance(body, str) and "kind" in reply:
        content = body.encode()  # written by the run: already JSON text
    else:
        content = json.dumps(body).encode()
    headers.setdefault("content-type", "application/json")
    return _Reply(content, status_code=status, headers=headers)


def _base64_body(body: Any) -> bytes:
    """The bytes of a reply's base64 body, decoded strictly: ``ValueError`` for anything but
    standard base64 text. Lenient decoding dropped what is not of the alphabet, so a body
    of stray characters was sent as an empty 200. No whitespace either, line breaks
    included: ``request.respond`` records ``base64.b64encode``'s, which has none, so any is
    a chunk the run wrote itself, and which of its characters count is not for the server
    to guess."""
    if not isinstance(body, str):
        raise ValueError(f"its base64 body is a {type(body).__name__}, not text")
    try:
        return base64.b64decode(body, validate=True)
    except ValueError as exc:  # binascii.Error; a non-ASCII str too
        raise ValueError(f"its base64 body is not base64: {exc}") from None


async def webhook(request: Request) -> Response:
    """Deliver a request to the webhook with the URL's token."""
    from wf.engine._hooks import deliver
    from wf.engine._webhooks import REPLY_STREAM, envelope

    token = params.token(request)
    server = state(request)
    hook = await server.store.get_hook(token)
    config = (hook.schema or {}).get("webhook") if hook is not None else None
    if hook is None or not isinstance(config, dict):
        if (retried := await _retried(request, token)) is not None:
            return retried
        raise ApiError(404, "not_found", "no live webhook at this URL")
    if (await server.store.get_run(hook.run_id)).status.is_terminal:
        if (retried := await _retried(request, token)) is not None:
            return retried
        raise ApiError(404, "not_found", "no live webhook at this URL (its run has ended)")
    method = str(config.get("method", "POST"))
    if request.method != method:
        raise ApiError(405, "method_not_allowed", f"this webhook takes {method}", {"Allow": method})
    # An empty body: no payload, None. A key given twice is the caller's to mean (the last
    # counts): a webhook takes what other services send.
    body = await params.json_body(request, required=False, unique_keys=False)
    empty = body is None and not (await request.body()).strip()
    header = str(config.get("idempotency_header") or "Idempotency-Key")
    key = request.headers.get(header)
    delivery = delivery_id(token, key)
    meta = {
        "id": delivery,
        "method": request.method,
        "headers": {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_HEADERS},
        "query": dict(request.query_params),
        # Every pair in order: ``?tag=a&tag=b`` is two tags, and ``query`` keeps one name once.
        "query_items": [list(pair) for pair in request.query_params.multi_items()],
    }
    try:
        run = await deliver(server.engine, hook, body, wrap=lambda value: envelope(value, meta))
    except HookError as exc:
        said = f"the request has no body (no payload, None): {exc}" if empty else str(exc)
        raise ApiError(400, "bad_request", said) from None
    static = config.get("respond")
    if key:
        reply = static if isinstance(static, dict) else None
        at = server.engine.clock.now()
        await _keep(request, WebhookDelivery(delivery, token, run.id, header.lower(), reply, at))
    if isinstance(static, dict):
        return reply_response(static)
    timeout = float(config.get("timeout") or 10.0)
    written = await _await_reply(request, run.id, REPLY_STREAM + delivery, timeout)
    if written is None:
        return JSONResponse({"run_id": run.id, "status": "accepted"}, status_code=202)
    return _recorded_reply(written)


async def _await_reply(request: Request, run_id: str, stream: str, timeout: float) -> bytes | None:
    """The reply the run writes to ``stream`` (its first chunk, as written), or None after
    ``timeout`` (or if the run ends without one). Read in a batch of ``STREAM_BATCH_BYTES``
    (``MAX_REPLY``), whatever else the run writes to the stream."""
    store = state(request).store
    try:
        async with asyncio.timeout(timeout):
            async for chunk in store.stream_chunks(run_id, stream, 0, poll=1.0):
                return chunk
    except TimeoutError:
        return None
    return None


def _recorded_reply(chunk: bytes) -> Response:
    """The response to a reply the run wrote (the first chunk of its reply stream), sent as
    recorded whatever its size: ``MAX_REPLY`` bounds a reply where ``respond`` makes it, and a
    reply recorded before that bound (or a stream the run wrote itself) is the run's reply,
    as replaying the run takes it. The server holds the chunk already when it reads it.

    A chunk that is no reply (a run wrote the stream itself: not JSON, no object, headers
    that are no mapping) is answered ``502 bad_reply`` and said in one log line, as a reply
    HTTP cannot carry is (``reply_response``)."""
    try:
        reply = json.loads(chunk)
        if not isinstance(reply, dict):
            raise TypeError(f"a JSON {type(reply).__name__}, not an object")
        return reply_response(reply)
    # binascii.Error is a ValueError; RecursionError: a chunk nested too deep to parse.
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.warning("a webhook reply cannot be sent: the run's reply is no reply: %s", why)
        return error_response(502, "bad_reply", f"the run's reply cannot be sent: {why}")


_PRUNE_EVERY = 3600.0
"""A server prunes the deliveries kept over ``DELIVERY_KEPT`` ago at most this often (s)."""


async def _keep(request: Request, delivery: WebhookDelivery) -> None:
    """Keep a delivery that carried an idempotency key, and now and then prune the old ones.

    A store that fails here costs only the late retry's reply (it would get 404), never this
    delivery's: the failure is one log line."""
    server = state(request)
    now = delivery.at
    try:
        await server.store.save_delivery(delivery)
        if server.pruned_at is None or now - server.pruned_at >= _PRUNE_EVERY:
            server.pruned_at = now
            await server.store.prune_deliveries(now - DELIVERY_KEPT)
    except Exception as exc:  # said in one line: the delivery itself went through
        from wf.admin._words import short_token

        log.warning(
            "webhook %r: delivery %s could not be kept for retries: %s",
            short_token(delivery.token),  # the token is all that authorises its URL
            delivery.id,
            f"{type(exc).__name__}: {exc}",
        )


RETRY_HEADERS = 32
"""How many of a request's headers a retry after the run ended may carry its key in (the
first ones, leaving out ``_NEVER_KEYS``)."""

_NEVER_KEYS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "authorization",
        "connection",
        "content-length",
        "content-type",
        "cookie",
        "host",
        "proxy-authorization",
        "transfer-encoding",
        "user-agent",
    }
)
"""Standard request headers, never an idempotency key's: not tried for a retry."""


async def _retried(request: Request, token: str) -> Response | None:
    """The first reply, for a retried delivery (the same idempotency key) that comes after
    the webhook's hook was released (its run ended); None when no such delivery is kept (or
    it was made over ``DELIVERY_KEPT`` ago).

    The hook's record is gone, so the header that names the key is not known any more: the
    request's first ``RETRY_HEADERS`` headers (leaving out the standard ones that never carry
    a key) are tried, in one store read (the delivery kept says which header carried its
    key). The work is bounded whatever the request carries: anyone may post to any URL."""
    from wf.engine._webhooks import REPLY_STREAM

    server = state(request)
    headers: dict[str, set[str]] = {}
    for name, value in request.headers.items():
        if name.lower() in _NEVER_KEYS:
            continue
        if len(headers) >= RETRY_HEADERS and delivery_id(token, value) not in headers:
            break
        headers.setdefault(delivery_id(token, value), set()).add(name.lower())
    kept = await server.store.get_deliveries(list(headers))
    since = server.engine.clock.now() - DELIVERY_KEPT
    for found in kept.values():
        if found.token != token or found.header not in headers[found.id] or found.at <= since:
            continue
        if found.reply is not None:
            return reply_response(found.reply)
        chunks: list[bytes] = []
        with contextlib.suppress(Exception):  # the run deleted since: no reply to give
            chunks = await _first_chunk(server.store, found.run_id, REPLY_STREAM + found.id)
        if chunks:
            return _recorded_reply(chunks[0])  # a reply it cannot send is a 502, not a 202
        return JSONResponse({"run_id": found.run_id, "status": "accepted"}, status_code=202)
    return None


async def _first_chunk(store: Store, run_id: str, stream: str) -> list[bytes]:
    """The first chunk of ``stream`` (none if it has none): the reply, never the rest a run
    wrote after it (a retry read a run's 24 MiB stream whole to send a reply of 40 bytes)."""
    if _reads_in_batches(type(store)):
        return (await store.read_chunks(run_id, stream, 0, max_bytes=0))[0][:1]
    return (await store.read_chunks(run_id, stream, 0))[0][:1]  # a store of the older contract
