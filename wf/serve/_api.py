"""The JSON API under ``/api/v1``: start, list, read, long-poll, control runs; resume hooks;
read byte streams and step logs; server-sent events of run changes. Described by
``/api/v1/openapi.json`` (``_openapi``) and ``docs/http.md``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Send

from wf import _frames, admin
from wf._exceptions import HookError
from wf._tasks import in_thread_alone
from wf.admin import _feed as admin_feed
from wf.admin._control import check_stream, live_hook, resume_hook_sent, stream_start
from wf.admin._logs import log_page
from wf.admin._read import existing_run, heavy, readable
from wf.serve import _params as params
from wf.serve._errors import ApiError, ApiJSON
from wf.serve._routing import by_method
from wf.serve._state import state
from wf.store import RunRecord

_MAX_WAIT = 300.0
_KEEPALIVE = 15.0


def record_json(record: RunRecord) -> dict[str, Any]:
    """A run record as the API gives it (values in wf's tagged JSON)."""
    return record.to_json()


async def list_runs(request: Request) -> Response:
    """``GET /api/v1/runs``: a page of runs, newest first."""
    query = request.query_params
    search = params.search(request)
    page = await admin.list_runs(
        state(request).store,
        status=params.statuses(query.getlist("status")) or None,
        workflow=params.list_name(request, "workflow"),
        limit=params.integer(request, "limit", 50, 1, params.MAX_LIMIT),
        before=params.before(request),
        parent_id=params.present_id(request, "parent"),
        search=search,
        **params.list_filters(request),
    )
    body: dict[str, Any] = {
        "runs": [record_json(r) for r in page.runs],
        "next_before": page.next_before,
        "damaged": [fault.to_json() for fault in page.damaged],
    }
    if search is not None:
        # A search by a part of an id reads runs (no index holds substrings), at most
        # SEARCH_BUDGET per request: say how many, and where to search further when the bound
        # stopped it (0 read: found from an index).
        body["searched"] = page.searched
        body["search_further"] = page.next_before if page.exhausted else None
    return ApiJSON(body)


async def start_run(request: Request) -> Response:
    """``POST /api/v1/runs``: start a run of a workflow (by name or target) with its input."""
    from wf.serve._start import start

    body = await params.json_body(request)
    record, created = await start(state(request), body)
    return ApiJSON(
        {"id": record.id, "status": record.status.value}, status_code=201 if created else 200
    )


async def get_run(request: Request) -> Response:
    """``GET /api/v1/runs/{id}``: the record with steps, hooks, streams, children, why;
    ``?events=false`` leaves the journal out (``GET /api/v1/runs/{id}/events`` pages it)."""
    run_id = params.run_id(request)
    events = params.flag(request, "events", True)
    detail = await admin.run_detail(state(request).store, run_id)
    if heavy(detail):
        # A long run's document (18 MB for 30,000 steps), or one with big values, is laid out
        # and encoded in a thread, so that the server answers other requests meanwhile.
        return await in_thread_alone(lambda: ApiJSON(admin.http_detail_json(detail, events=events)))
    return ApiJSON(admin.http_detail_json(detail, events=events))


async def read_events(request: Request) -> Response:
    """``GET /api/v1/runs/{id}/events?start=K&limit=N``: the run's journal events from index
    ``start`` on, oldest first, at most ``limit`` of them (``wf.admin.journal_page``); pass
    ``next_start`` as ``start`` for the next page (``more``: it is stored already)."""
    run_id = params.run_id(request)
    start = params.integer(request, "start", 0, 0, 10**9)
    limit = params.integer(request, "limit", params.MAX_LIMIT, 1, params.MAX_LIMIT)
    page = await admin.journal_page(state(request).store, run_id, start=start, limit=limit)
    return ApiJSON(page.to_json())


def result_json(record: RunRecord) -> dict[str, Any]:
    """``{"id", "status", "output"}`` of an ended run, ``{"id", "status", "error"}`` if it
    failed, ``{"id", "status"}`` while it goes on. The error is the recorded one whole (type,
    message, module, qualname, args, fields, traceback), so a client rebuilds the same
    ``wf.RunFailed`` a local reader gets."""
    data: dict[str, Any] = {"id": record.id, "status": record.status.value}
    if record.status.value == "completed":
        data["output"] = readable(record.output)  # text with lone surrogates as text
    elif record.status.value == "failed":
        data["error"] = record.error or {"type": "Exception", "message": ""}
    return data


async def get_result(request: Request) -> Response:
    """``GET /api/v1/runs/{id}/result?wait=S``: 200 once the run ended, 202 while it goes on."""
    run_id = params.run_id(request)
    wait = params.number(request, "wait", 0.0, _MAX_WAIT)
    store = state(request).store
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        record = await existing_run(store, run_id)  # deleted: when and why, as GET /runs/{id}
        if record.status.is_terminal:
            return ApiJSON(result_json(record))
        remaining = deadline - loop.time()
        if remaining <= 0 or state(request).stopping.is_set() or await request.is_disconnected():
            return ApiJSON(result_json(record), status_code=202)
        await admin_feed.wait_for_run(store, run_id, min(remaining, 1.0))


async def cancel_run(request: Request) -> Response:
    """``POST /api/v1/runs/{id}/cancel`` (``?children=true``: the whole tree; ``?wait=true``:
    until it ended, at most ``_MAX_WAIT`` seconds)."""
    run_id = params.run_id(request)
    engine = state(request).engine
    wait = params.flag(request, "wait", False)
    children = params.flag(request, "children", False)
    async with _given_up(request, wait) as stop:
        if children:
            results = await admin.cancel_tree(
                engine, run_id, wait=wait, within=_MAX_WAIT, stop=stop
            )
            return ApiJSON({"runs": [dataclasses.asdict(r) for r in results]})
        result = await admin.cancel(engine, run_id, wait=wait, within=_MAX_WAIT, stop=stop)
    return ApiJSON(_control_json(result))


@contextlib.asynccontextmanager
async def _given_up(request: Request, watch: bool) -> AsyncIterator[asyncio.Event]:
    """An event set once the client has gone or the server begins to stop (looked at every
    second while ``watch``): a ``?wait`` then ends, and nobody keeps a waiter for a client
    that left."""
    gone = asyncio.Event()
    stopping = state(request).stopping

    async def look() -> None:
        while not (stopping.is_set() or await request.is_disconnected()):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await stopping.wait()
        gone.set()

    watcher = asyncio.ensure_future(look()) if watch else None
    try:
        yield gone
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


def _control_json(result: admin.ControlResult) -> dict[str, Any]:
    data: dict[str, Any] = {"id": result.run_id, "sent": result.sent, "status": result.status}
    if result.refused is not None:
        data["refused"] = result.refused
    return data


async def wake_run(request: Request) -> Response:
    """``POST /api/v1/runs/{id}/wake``: end the run's current sleeps now (``?wait=true``: and
    wait until it ended, at most ``_MAX_WAIT`` seconds)."""
    engine = state(request).engine
    wait = params.flag(request, "wait", False)
    run_id = params.run_id(request)
    async with _given_up(request, wait) as stop:
        result = await admin.wake(engine, run_id, wait=wait, within=_MAX_WAIT, stop=stop)
    return ApiJSON(_control_json(result))


async def retry_run(request: Request) -> Response:
    """``POST /api/v1/runs/{id}/retry``: queue another attempt of a failed run (its completed
    steps replay); 409 for a run that has not failed."""
    from wf.serve._start import retry

    run_id = await retry(state(request), params.run_id(request))
    record = await existing_run(state(request).store, run_id)
    return ApiJSON({"id": run_id, "status": record.status.value})


async def resume_hook(request: Request) -> Response:
    """``POST /api/v1/hooks/{token}``: deliver the JSON body to the hook as its payload.

    With an ``Idempotency-Key`` header, a repeat with the same key delivers nothing new and
    answers the same run, also once the run has ended. ``message`` is the id of the inbox
    message that carried the payload, which the run journals with it (``hook_payload``; a
    ``hook_payload_refused`` says the run refused it): null for a keyed delivery."""
    from wf._remote import IDEMPOTENCY_HEADER
    from wf.engine._hooks import kept_resume
    from wf.store._limits import check_key

    token = params.token(request)
    key = request.headers.get(IDEMPOTENCY_HEADER) or None  # empty: none, as for a webhook
    if key is not None:
        check_key(key)
    payload = await params.json_body(request, required=False)
    engine = state(request).engine
    if key is not None and (owner := await kept_resume(engine, token, key)) is not None:
        return ApiJSON({"run_id": owner.id, "message": None})
    try:
        await live_hook(engine.store, token)
    except HookError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    run_id, message = await resume_hook_sent(engine, token, payload, key=key)
    return ApiJSON({"run_id": run_id, "message": message})


async def list_hooks(request: Request) -> Response:
    """``GET /api/v1/hooks?run=ID``: live hooks, oldest first, and those that cannot be read."""
    run_id = params.present_id(request, "run")
    return ApiJSON((await admin.hook_page(state(request).store, run_id)).to_json())


async def read_logs(request: Request) -> Response:
    """``GET /api/v1/runs/{id}/logs?start=K&limit=N&step=NAME&wait=S``: the run's step log
    entries from index ``start`` on, oldest first, at most ``limit`` of them.

    ``next_start`` is where the next page begins (pass it as ``start``); with ``wait``, a
    request that finds no entries from ``start`` waits up to that many seconds for some (or
    for the run's end) before answering: a client follows a run's logs by asking again from
    ``next_start`` until ``more`` is false and the run has ended. ``step`` keeps one step's
    entries (the indices still count every entry, so paging is the same).
    """
    page = await log_page(
        state(request).store,
        params.run_id(request),
        start=params.integer(request, "start", 0, 0, 10**9),
        limit=params.integer(request, "limit", params.MAX_LIMIT, 1, params.MAX_LIMIT),
        step=request.query_params.get("step") or None,
        wait=params.number(request, "wait", 0.0, _MAX_WAIT),
        gone=_gone(request),
    )
    return ApiJSON(page.to_json())


def _gone(request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether a wait for ``request`` is to end: its client went away, or the server begins
    to stop (it answers then, as ``result?wait`` does, instead of being cut off later)."""
    stopping = state(request).stopping

    async def gone() -> bool:
        return stopping.is_set() or await request.is_disconnected()

    return gone


_SEND_PIECE = 256 * 1024
"""A stream's bytes are sent at most this many at a time."""


async def read_stream(request: Request) -> Response:
    """``GET /api/v1/runs/{id}/streams/{name}?start=K&follow=true``: the stream's bytes,
    chunked, following new chunks until the stream closes (or its run ends)."""
    run_id = params.run_id(request)
    name = params.stream_name(request)
    start = params.integer(request, "start", 0, -(10**9), 10**9)
    follow = params.flag(request, "follow", True)
    # A page that asks the run how the stream stands once its body ends (the web UI) takes a
    # cut-off body ended as any other: a browser may drop the bytes before a dropped end.
    abort = params.flag(request, "abort_cut_off", True)
    # Each chunk's length before its bytes (``wf._frames``): the remote client keeps the
    # stream's chunks apart so (the terminal UI numbered the 256 KB pieces of a big one).
    framed = params.flag(request, "framed", False)
    store = state(request).store
    # Before the body: a deleted run (when and why, as GET /runs/{id}) or a stream the run
    # has not (a 404 naming its streams) is the answer. Not open yet: followed, a run that is
    # not finished may still open it (it is waited for).
    await check_stream(store, run_id, name, follow=follow)
    first: dict[str, str] = {}
    if start < 0:
        # From the end: the chunk that is now (0 on a stream not written yet: every chunk
        # written after), said, so that a reader cut off (a restart) asks again from the chunk
        # it reached, not for the last chunks there are by then.
        start = await stream_start(store, run_id, name, start)
        first[_frames.START_HEADER] = str(start)

    async def body() -> AsyncIterator[bytes]:
        async for chunk in admin.follow_stream(store, run_id, name, start, follow=follow):
            head = _frames.head(len(chunk)) if framed else b""
            if len(chunk) <= _SEND_PIECE:
                yield head + chunk if head else chunk
                continue
            # HTTP framing copies what it sends: a chunk of 10 MB held the loop ~0.15 s, and
            # three readers kept other requests waiting. HTTP keeps no chunks apart anyway.
            for offset in range(0, len(chunk), _SEND_PIECE):
                piece = chunk[offset : offset + _SEND_PIECE]
                yield head + piece if offset == 0 and head else piece

    return _LongBody(
        body(),
        request,
        abort_cut_off=abort,
        cut_when_stopping=True,
        media_type="application/octet-stream",
        headers={
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            **({_frames.FRAMING_HEADER: _frames.FRAMING} if framed else {}),
            **first,
        },
    )


class _LongBody(StreamingResponse):
    """A body that may go on for long: a byte stream's (followed), or server-sent events.

    It ends when the server begins to stop (``state.stopping``), as the ``?wait`` requests
    answer then, instead of being cancelled by uvicorn's shutdown 5 s later with a traceback:
    server-sent events end as any body (the browser connects again), a byte stream without
    its last chunk (``cut_when_stopping``: its reader must not take it for the whole stream).

    A store failure meanwhile (``wf.StoreError``: Redis went away) ends it without its last
    chunk, and is one line of the server's log, as a failed request's is (``on_error``).

    One whose writer was cut off (``wf.StreamIncomplete``) ends without the body's last
    chunk, as a connection that dropped does: every HTTP client then says the body is
    incomplete (curl exits 18, ``fetch`` rejects), and no reader takes a cut-off answer for a
    whole one. The run's ``stream_info`` says why (``complete: false``). With
    ``abort_cut_off=False`` it ends as any body does (for a reader that asks the run)."""

    def __init__(
        self,
        content: Any,
        request: Request,
        *,
        abort_cut_off: bool = True,
        cut_when_stopping: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(content, **kwargs)
        self.abort_cut_off = abort_cut_off
        self.cut_when_stopping = cut_when_stopping
        self.stopping = state(request).stopping
        self.path = request.url.path

    async def stream_response(self, send: Send) -> None:
        from wf._exceptions import StoreError, StreamIncomplete

        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )

        async def pump() -> None:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        pumping = asyncio.ensure_future(pump())
        stopped = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({pumping, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pumping.cancel()
            raise
        finally:
            stopped.cancel()
        if not pumping.done():  # the server begins to stop
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pumping
            if self.cut_when_stopping:
                return
        else:
            try:
                pumping.result()
            except StreamIncomplete:
                if self.abort_cut_off:
                    return
            except StoreError as exc:  # one line, no traceback (``on_error``'s for a request)
                logging.getLogger("wf.serve").warning("GET %s: %s", self.path, exc)
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def events(request: Request) -> Response:
    """``GET /api/v1/events`` (``?run=ID``): server-sent events, one ``run`` event per change
    of a run's status (or, for one run, of its journal too)."""
    one = params.present_id(request, "run")
    store = state(request).store
    if one is not None:
        await existing_run(store, one)
    source = _run_events(request, one) if one else _store_events(request)
    return _LongBody(
        source,
        request,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _sse(data: dict[str, Any]) -> bytes:
    return f"event: run\ndata: {json.dumps(data)}\n\n".encode()


def _change(record: RunRecord, events: int | None = None) -> dict[str, Any]:
    data = {
        "id": record.id,
        "workflow": record.workflow,
        "status": record.status.value,
        "updated_at": record.updated_at,
    }
    if events is not None:
        data["events"] = events
    return data


async def _run_events(request: Request, run_id: str) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    last: tuple[Any, ...] | None = None
    # Ends once the run is gone, or damaged since the stream began.
    changes = admin_feed.run_changes(state(request).store, run_id, _KEEPALIVE)
    async with contextlib.aclosing(changes):
        async for record, events in changes:
            if await request.is_disconnected():
                return
            key = (record.status, record.updated_at, events)
            if key != last:
                last = key
                yield _sse(_change(record, events))
            else:
                yield b": keep-alive\n\n"


async def _store_events(request: Request) -> AsyncIterator[bytes]:
    newest = state(request).newest(_KEEPALIVE)
    yield b"retry: 2000\n\n"
    version, records = await newest.after(0)  # what is there now: not news
    while True:
        # Only what the last look listed: a stream open for days holds 100 runs, not every run
        # that passed through the newest 100 (one that drops out never comes back).
        seen = {record.id: (record.status, record.updated_at) for record in records}
        if await request.is_disconnected():
            return
        version, records = await newest.after(version)
        changed = [r for r in records if seen.get(r.id) != (r.status, r.updated_at)]
        for record in changed:
            yield _sse(_change(record))
        if not changed:
            yield b": keep-alive\n\n"


async def store_info(request: Request) -> Response:
    """``GET /api/v1/store``: which store this server serves, and whether it drives runs."""
    server = state(request)
    engine = server.engine
    found = dataclasses.replace(
        admin.store_info(server.store),
        drives=server.drive,
        deployment=None if engine.any_deployment else engine.deployment,
    )
    return ApiJSON(found.to_json())


async def openapi(request: Request) -> Response:
    """``GET /api/v1/openapi.json``: the OpenAPI document of this API."""
    from wf.serve._openapi import document

    return ApiJSON(document())


def routes() -> list[BaseRoute]:
    """The API's routes, mounted under ``/api/v1``."""
    from wf.serve import _upkeep

    return [
        by_method("/runs", GET=list_runs, POST=start_run),
        Route("/runs/{id}", get_run, methods=["GET"]),
        Route("/runs/{id}/result", get_result, methods=["GET"]),
        Route("/runs/{id}/cancel", cancel_run, methods=["POST"]),
        Route("/runs/{id}/wake", wake_run, methods=["POST"]),
        Route("/runs/{id}/retry", retry_run, methods=["POST"]),
        Route("/runs/{id}/events", read_events, methods=["GET"]),
        Route("/runs/{id}/logs", read_logs, methods=["GET"]),
        Route("/runs/{id}/streams/{name:path}", read_stream, methods=["GET"]),
        Route("/hooks", list_hooks, methods=["GET"]),
        Route("/hooks/{token:path}", resume_hook, methods=["POST"]),
        Route("/events", events, methods=["GET"]),
        Route("/store", store_info, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *_upkeep.routes(),
    ]
