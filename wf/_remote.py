"""The remote client: ``wf.start``, ``wf.get_run`` and ``wf.resume_hook`` over HTTP.

``wf.configure(url=..., token=...)`` (or ``WF_URL`` and ``WF_TOKEN``) points a program at a
``wf serve``: it then needs neither the store nor the workflows' code, only their names and
input. Errors come back as the library's own (``RunNotFound``, ``RunFailed``, ``HookError``…).
httpx is imported only when a remote is used.

Connections are kept and reused: one ``httpx.AsyncClient`` per client and event loop (an
AsyncClient belongs to the loop it first ran on, and a program may call ``asyncio.run`` more
than once), closed when that loop shuts down (``_Pools``) or the client is configured away
(once no request of it is in flight: configuring again never cuts off a long poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from wf._exceptions import (
    HookError,
    ResultExpired,
    RunAlreadyExists,
    RunCancelled,
    RunNotFound,
    ServerRefused,
    ServerUnavailable,
    StoreCorrupted,
    StoreError,
    StreamIncomplete,
    StreamNotFound,
    UsageError,
    WFError,
)
from wf.engine._ref import WorkflowRef
from wf.engine._run import Run, run_failed
from wf.engine._watch import RunEvent
from wf.store import RunRecord, RunStatus
from wf.store._limits import check_key, check_name

T = TypeVar("T")

_LONG_POLL = 30.0

API_HEADER = "WF-API"
API_VERSION = "1"
"""The version of the JSON API this client speaks. A ``wf serve`` names its own in the
``WF-API`` header of every answer under ``/api/``; the client refuses an answer without it
(another server on that address, a proxy's page) or with another version, rather than read
another shape of JSON as a wf answer."""

TIMEOUT = 60.0
"""Seconds a request waits for the server's answer unless ``WF_TIMEOUT`` says otherwise (a
long poll waits as long as it asked for, and that much more)."""


KEEPALIVE = 4.0
"""Seconds an idle connection is kept for the next request: less than the 5 s after which
``wf serve`` closes it (``timeout_keep_alive``), so the client never sends on a connection
the server is closing."""

_RETRIED = frozenset({"GET", "HEAD", "PUT", "DELETE"})
"""Methods sent again when the connection fails before an answer (a kept connection the server
dropped, a restart: ``RemoteClient.call``): the same request twice does what it does once. A
``POST`` is only when its caller says it is safe (``again``: a start with a run id, a cancel, a
hook's payload with an idempotency key); another (a start without an id, a retry, a wake-up,
which ends the run's current sleeps: sent twice, it could end the next one too) fails as
``ServerUnavailable``."""


RIDE_OUT = 300.0
"""Seconds a follow (``wf run``'s wait, ``wf logs -f``, ``wf watch``, ``wf stream -f``, ``wf
cancel``'s wait) keeps asking a server it reached before and can no longer reach (a restart,
a deploy): as a local command rides out a store outage (``OUTAGE_LIMIT``)."""
RIDE_OUT_RETRY = (0.5, 5.0)
"""Seconds before the first try again, and at most between two (doubling)."""

say_outage: Callable[[str], None] | None = None
"""Where a ride-out's two lines go (the server does not answer; it answers again): the CLI
sets it to its stderr; else the ``wf.remote`` logger's warnings."""


IDEMPOTENCY_HEADER = "Idempotency-Key"
"""The header a keyed ``wf.resume_hook`` sends its key in (``POST /api/v1/hooks/{token}``)."""


def default_timeout() -> float:
    """``WF_TIMEOUT`` (seconds, above 0), else ``TIMEOUT``; a ``UsageError`` naming the
    variable when it is not such a number."""
    return seconds_variable("WF_TIMEOUT", TIMEOUT)


def seconds_variable(name: str, default: float) -> float:
    """The environment variable ``name`` as a number of seconds above 0 (finite), else
    ``default`` when it is unset or blank; a ``UsageError`` naming it when it is no such
    number."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{name} must be a number of seconds above 0, not {raw!r}")
    return seconds


def check_token(token: str | None) -> str | None:
    """``token`` if it can be sent as ``Authorization: Bearer <token>``: printable ASCII. A
    ``UsageError`` saying why otherwise (a non-ASCII letter, a newline: httpx would fail
    on it at the first request, with no word of the token)."""
    if not token:
        return token
    bad = next((c for c in token if not (" " <= c <= "~")), None)
    if bad is not None:
        what = "a non-ASCII character" if ord(bad) > 0x7F else "a control character"
        raise UsageError(
            f"the token cannot go in an HTTP header: it holds {what} (at position "
            f"{token.index(bad)}); a token is printable ASCII"
        )
    return token


def check_timeout(value: object, name: str = "timeout") -> float:
    """``value`` as seconds above 0 and finite; a ``UsageError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{name} must be a number of seconds above 0, not {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be a number of seconds above 0, not {value!r}")
    return float(value)


class _Pools:
    """One ``httpx.AsyncClient`` per event loop. Each is held by an async generator started on
    its loop: the loop's ``shutdown_asyncgens`` (which ``asyncio.run`` and ``asyncio.Runner``
    call before closing it) closes that generator, and so the client and its sockets, on the
    loop they belong to; asyncio has no other hook for a loop's end. A client's connections
    refer to its loop, so entries are dropped explicitly (then, or once the loop is found
    closed), not left to the loop's collection."""

    def __init__(self) -> None:
        self.held: dict[asyncio.AbstractEventLoop, tuple[Any, AsyncGenerator[None, None]]] = {}

    async def get(self, make: Any) -> Any:
        """This loop's client, made by ``make()`` on first use."""
        loop = asyncio.get_running_loop()
        found = self.held.get(loop)
        if found is not None and not found[0].is_closed:
            return found[0]
        for gone in [other for other in self.held if other.is_closed()]:
            del self.held[gone]  # closed without shutdown_asyncgens: nothing left to do there
        client = make()
        keeper = _keep(self.held, loop, client)
        await keeper.asend(None)  # now one of the loop's async generators, closed at its end
        self.held[loop] = (client, keeper)
        return client

    def close(self) -> None:
        """Close every loop's client: on a running loop at once (a task), on another when it
        runs next or shuts down."""
        held = list(self.held.items())
        self.held.clear()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, (_client, keeper) in held:
            if loop.is_closed():
                continue
            if loop is running:
                task = loop.create_task(keeper.aclose())
                _closing.add(task)
                task.add_done_callback(_closing.discard)
            else:
                asyncio.run_coroutine_threadsafe(keeper.aclose(), loop)


_closing: set[asyncio.Task[None]] = set()
"""Closes under way of clients configured away (held so that they are not collected)."""


async def _keep(
    held: dict[asyncio.AbstractEventLoop, Any], loop: asyncio.AbstractEventLoop, client: Any
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        if held.get(loop, (None,))[0] is client:
            del held[loop]
        await client.aclose()


class RemoteClient:
    """Talks to a ``wf serve`` at ``url``, with ``token`` if it needs one; each request waits
    at most ``timeout`` seconds for its answer (default: ``WF_TIMEOUT``, else 60)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"a wf server URL starts with http:// or https://, not {url!r}")
        if timeout is None:
            timeout = default_timeout()
        import importlib.util

        if importlib.util.find_spec("httpx") is None:  # said here, not at the first request
            from wf._extras import install_hint

            raise UsageError(f"httpx is not installed: {install_hint('serve')} adds it")
        self.url = url.rstrip("/")
        self.token = check_token(token) or None
        self.timeout = timeout
        self._pools = _Pools()
        self._in_flight = 0
        self._retired = False  # configured away: closed when its last request ends
        self.reached = False
        """Whether the server answered a request of this client: a server that stops
        answering since is one that restarts (a follow rides it out, ``riding_out``), not a
        wrong address (said at once)."""

    @property
    def settings(self) -> tuple[str, str | None, float]:
        """What the client was made of: a client of the same settings is this one again."""
        return (self.url, self.token, self.timeout)

    def __repr__(self) -> str:
        return f"RemoteClient({self.url!r})"

    def _make(self) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        # No cap on connections (a producer's many long polls each hold one, as before): only
        # on those kept idle.
        limits = httpx.Limits(
            max_connections=None, max_keepalive_connections=100, keepalive_expiry=KEEPALIVE
        )
        return httpx.AsyncClient(
            base_url=self.url + "/api/v1",
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            limits=limits,
        )

    async def session(self) -> Any:
        """The ``httpx.AsyncClient`` of the running event loop, its connections reused by
        every request on that loop (a long poll or a stream sets its own timeout)."""
        return await self._pools.get(self._make)

    def close(self) -> None:
        """Close the connections kept (a running loop's at once, another loop's when it runs
        next or shuts down), or, while requests are in flight, once the last of them ends (a
        long poll is not cut off); a later request opens new ones."""
        if self._in_flight:
            self._retired = True
        else:
            self._pools.close()

    @contextlib.asynccontextmanager
    async def _using(self) -> AsyncIterator[Any]:
        """This loop's ``httpx.AsyncClient``, counted in flight while the caller uses it."""
        self._in_flight += 1
        try:
            yield await self.session()
        finally:
            self._in_flight -= 1
            if self._retired and not self._in_flight:
                self._retired = False
                self._pools.close()

    async def call(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None = None,
        again: bool = False,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """One request; its JSON, or the library's error for the server's error.

        A request safe to send again (``_RETRIED`` methods, or ``again``: a ``POST`` the same
        twice does what it does once, as a start with a run id, a cancel, a hook's payload
        with an idempotency key) whose connection drops before the answer is sent again at
        once (a kept connection the server closed); when the server then refuses the
        connection, it restarts: the request is sent again once it answers (``Outage``, up to
        ``RIDE_OUT`` seconds, and not past ``deadline``, a ``time.monotonic()``). Another
        ``POST`` whose connection drops fails as ``ServerUnavailable`` saying it may have been
        done."""
        answer, _ = await self.call_resent(
            method, path, timeout=timeout, again=again, deadline=deadline, **kwargs
        )
        return answer

    async def call_resent(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None = None,
        again: bool = False,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> tuple[Any, bool]:
        """``call``'s answer, and whether it answers a request sent again after a restart cut
        it: the first send may have been done, so "nothing to do" can mean "done already"."""
        import httpx

        if "json" in kwargs:  # encoded here: a lone surrogate goes as its JSON escape
            kwargs["content"] = json_body(kwargs.pop("json"))
            kwargs["headers"] = {**kwargs.get("headers", {}), "Content-Type": "application/json"}
        limit = self.timeout if timeout is None else timeout
        safe = method in _RETRIED or again
        tried = 0
        closed_under = False
        outage: Outage | None = None  # a restart cut the request: it is ridden out
        while True:
            tried += 1
            try:
                async with self._using() as client:
                    response = await client.request(
                        method, path, timeout=httpx.Timeout(limit), **kwargs
                    )
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                failure = self.unreachable(exc, limit)
                if not safe:
                    failure.args = (
                        f"{failure} ({method} {path} may have been done already: it is not "
                        "sent again, as it is not safe to send twice)",
                    )
                    raise failure from None
                if outage is None and tried == 1:
                    continue  # a kept connection dropped under the request: once more at once
                if outage is None:
                    raise failure from None  # dropped twice: a server that drops it, no restart
            except httpx.TransportError as exc:
                failure = self.unreachable(exc, limit)
                if outage is None and not (safe and tried > 1):
                    raise failure from None
                # Dropped, then refused: the server restarts. Sent again once it answers.
                outage = outage or Outage(self, deadline=deadline)
            except RuntimeError as exc:
                # Closed (from another thread's configure) before the request was sent: the
                # request never left, so any method goes again once, on a fresh client.
                if not _closed_client(exc):
                    raise
                if closed_under:
                    raise self.unreachable(exc, limit) from None
                closed_under = True
                tried -= 1
                continue
            else:
                self.reached = True
                if outage is not None:
                    outage.answered()
                return _answer(response, self), outage is not None
            try:
                await outage.failed(failure)  # raises a timeout, and past RIDE_OUT
            except ServerUnavailable:
                failure.unreached = False  # ridden out already: a follow's Outage raises it
                raise failure from None

    @contextlib.asynccontextmanager
    async def streaming(self, method: str, path: str, **kwargs: Any) -> AsyncIterator[Any]:
        """``httpx.AsyncClient.stream`` on this loop's client, counted in flight while read; a
        client closed before the request left is replaced once (as in ``call``)."""
        for last in (False, True):
            async with self._using() as client:
                try:
                    opened = client.stream(method, path, **kwargs)
                    response = await opened.__aenter__()
                    self.reached = True
                except RuntimeError as exc:
                    if not _closed_client(exc):
                        raise
                    if last:
                        raise self.unreachable(exc, self.timeout) from None
                    continue
                try:
                    yield response
                except BaseException as exc:
                    await opened.__aexit__(type(exc), exc, exc.__traceback__)
                    raise
                await opened.__aexit__(None, None, None)
                return

    def unreachable(self, exc: Exception, timeout: float | None) -> ServerUnavailable:
        """The error of a request that got no answer: the server cannot be reached, or took
        longer than ``timeout`` seconds (httpx's timeouts carry no text: the class is named)."""
        import httpx

        why = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TimeoutException) and timeout is not None:
            why = f"timed out after {timeout:g} s" + (f" ({exc})" if str(exc) else "")
            limit = "WF_TIMEOUT or wf.configure(timeout=...) sets the limit"
            why += f" ({type(exc).__name__}; {limit})"
        error = ServerUnavailable(f"cannot reach the wf server at {self.url}: {why}")
        # Refused or dropped (not slow): what a restart looks like, which a follow rides out.
        error.unreached = not isinstance(exc, httpx.TimeoutException)
        return error

    async def riding_out(
        self, request: Callable[[], Awaitable[T]], *, deadline: float | None = None
    ) -> T:
        """``request()``'s answer; while the server cannot be reached (refused, dropped: a
        restart), ``request()`` again after 0.5 s, then up to every 5 s, for up to
        ``RIDE_OUT`` seconds (``Outage``), or until ``deadline`` (``time.monotonic()``) if
        sooner. For a follow: a server this client never reached (``reached``: a wrong
        address) is said at once."""
        outage = Outage(self, deadline=deadline)
        while True:
            try:
                answer = await request()
            except ServerUnavailable as exc:
                if not self.reached:
                    raise
                await outage.failed(exc)
                continue
            outage.answered()
            return answer

    def not_wf(self, what: str, status: int | None = None) -> ServerUnavailable:
        """The error of an answer no wf server of this API version gives."""
        return ServerUnavailable(
            f"{self.url}: not a wf server (or one of an incompatible version): {what}", status
        )

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Around the reading of an answer (``what``: its request): an answer of another
        shape (a key missing, a value of another type) is the server's fault, said in one
        line as ``not_wf``, never a ``KeyError`` of this client."""
        try:
            yield
        except StoreCorrupted as exc:  # a record that does not read (as a damaged file's)
            raise self.not_wf(f"its answer to {what} is not of the shape expected ({exc})") from exc
        except WFError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, KeyError) and exc.args:
                text = f"no {exc.args[0]!r} in it"
            else:
                text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            shape = f"its answer to {what} is not of the shape expected ({text})"
            raise self.not_wf(shape) from exc

    # -- the library's verbs ----------------------------------------------------------------

    async def start(
        self,
        workflow: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str | None = None,
        detach: bool = False,
    ) -> RemoteRun:
        """Start a run of ``workflow`` (a ``@wf.workflow`` or its name) on the server."""
        from pydantic_core import to_jsonable_python

        name = workflow if isinstance(workflow, str) else getattr(workflow, "name", None)
        if not isinstance(name, str):
            raise UsageError(f"wf.start() needs a @wf.workflow or its name, got {workflow!r}")
        target = getattr(workflow, "target", None)
        named = {"target": target} if isinstance(workflow, WorkflowRef) and target != name else {}
        body: dict[str, Any] = {
            **(named or {"workflow": name}),
            "args": to_jsonable_python(list(args)),
            "kwargs": to_jsonable_python(kwargs),
        }
        if run_id is not None:
            body["id"] = run_id
        run_options = getattr(workflow, "run_options", None)
        if run_options is not None:
            body["options"] = run_options.to_json()
        # With its id a start is safe to send again: the server answers the run it started.
        answer = await self.call("POST", "/runs", json=body, again=run_id is not None)
        return RemoteRun(self.text(answer, "id", "POST /runs"), self)

    def text(self, answer: Any, key: str, what: str) -> str:
        """The string at ``answer[key]`` (a run's id, say); ``not_wf`` if it is none."""
        with self.reading(what):
            found = answer[key]
            if not isinstance(found, str):
                from wf.store._limits import with_article

                raise TypeError(f"{key} is {with_article(type(found).__name__)}, not a string")
            return found

    def run(self, run_id: str) -> RemoteRun:
        """A handle on run ``run_id`` of this server (``wf.get_run`` with a remote)."""
        return RemoteRun(run_id, self)

    async def resume_hook(self, token: str, payload: Any, *, key: str | None = None) -> RemoteRun:
        """Deliver ``payload`` to the hook with ``token`` (validated by the server). With a
        ``key`` (sent as ``Idempotency-Key``) a request whose answer was lost is sent again:
        the server delivers it once."""
        return (await self.resume_hook_sent(token, payload, key=key))[0]

    async def resume_hook_sent(
        self, token: str, payload: Any, *, key: str | None = None
    ) -> tuple[RemoteRun, str | None]:
        """``resume_hook``, and the id of the inbox message that carried the payload, as the
        server names it (None for a keyed delivery, or from a server that does not say)."""
        from pydantic_core import to_jsonable_python

        path = "/hooks/" + urllib.parse.quote(check_name("a hook token", token), safe="")
        headers = {} if key is None else {IDEMPOTENCY_HEADER: check_key(key)}
        answer = await self.call(
            "POST",
            path,
            json=to_jsonable_python(payload),
            headers=headers,
            again=key is not None,
        )
        run = RemoteRun(self.text(answer, "run_id", "POST /hooks/{token}"), self)
        with self.reading("POST /hooks/{token}"):
            message = answer.get("message")  # absent from an older server's answer
        if message is not None:
            message = self.text(answer, "message", "POST /hooks/{token}")
        return run, message

    async def list_runs(self, **query: Any) -> dict[str, Any]:
        """``GET /runs`` with its filters (an answer that is not an object: ``not_wf``)."""
        params = {k: v for k, v in query.items() if v not in (None, [], "")}
        answer = await self.call("GET", "/runs", params=params)
        if not isinstance(answer, dict):
            raise self.not_wf("its answer to GET /runs is not a JSON object")
        return answer


class Outage:
    """A follow's wait for a server it can no longer reach, or that ended its feed early.

    ``failed(error)`` sleeps before the next try (0.5 s, doubling up to 5 s), or raises
    ``error`` when it is no such failure (an answer, a timeout), past ``RIDE_OUT`` seconds of
    a server that cannot be reached, or past ``deadline`` (``time.monotonic()``). A server
    that cannot be reached is said once, and ``answered()`` says once that it answers again.
    A feed the server ended early (``feed_ended``: it stops, or a proxy ends such responses
    at once) is said once per follow and opened again after the same growing pauses, with no
    limit (the server answers each time, and each opening reads the run anew); a feed that
    lasted ``RIDE_OUT_RETRY[1]`` seconds is opened again after the shortest pause."""

    def __init__(self, client: RemoteClient, *, deadline: float | None = None) -> None:
        self.client = client
        self.deadline = deadline
        self.since: float | None = None  # cannot be reached since
        self.pause = RIDE_OUT_RETRY[0]
        self.opened: float | None = None  # when the server last answered
        self.ended_said = False

    async def failed(self, error: ServerUnavailable) -> None:
        if not getattr(error, "unreached", False):
            raise error
        now = time.monotonic()
        left = math.inf if self.deadline is None else self.deadline - now
        if getattr(error, "ended", False):
            if self.opened is not None and now - self.opened >= RIDE_OUT_RETRY[1]:
                self.pause = RIDE_OUT_RETRY[0]  # it lasted: not a feed ended at once
            if not self.ended_said:
                self.ended_said = True
                _say(f"{error}; opening it again")
        elif self.since is None:
            self.since = now
            _say(f"{error}; trying again for up to {max(0.0, min(RIDE_OUT, left)):.3g}s")
        elif now - self.since >= RIDE_OUT:
            raise error
        if left <= 0:
            raise error
        await asyncio.sleep(min(self.pause, left))
        self.pause = min(self.pause * 2, RIDE_OUT_RETRY[1])

    def answered(self) -> None:
        self.opened = time.monotonic()
        if self.since is not None:
            _say(
                f"the wf server at {self.client.url} answers again "
                f"(after {self.opened - self.since:.1f}s)"
            )
            self.since, self.pause = None, RIDE_OUT_RETRY[0]


def feed_ended(client: RemoteClient) -> ServerUnavailable:
    """The error of a run's feed the server ended before the run ended (it stops, or a proxy
    ends it): ``Outage.failed`` opens it again."""
    error = ServerUnavailable(f"the wf server at {client.url} ended the run's feed early")
    error.unreached = error.ended = True
    return error


def say_done_again(request: str) -> None:
    """Say that ``request``, sent again after a restart cut it, found it done (by the first
    send): it is read as done, not as "nothing was done"."""
    _say(f"{request} was sent again after a restart; it had been done")


def _say(line: str) -> None:
    if say_outage is not None:
        say_outage(line)
    else:
        import logging

        logging.getLogger("wf.remote").warning("%s", line)


def _closed_client(exc: RuntimeError) -> bool:
    """Whether ``exc`` is httpx refusing a request on a client already closed."""
    return "client has been closed" in str(exc)


def json_body(value: Any) -> bytes:
    """``value`` as a request body: compact JSON in UTF-8, as httpx's ``json=`` sends it, but
    with any lone surrogate (``"\\ud800"``, which a JSON string may hold and the server accepts)
    sent as its escape rather than failing to encode. The common case stays one C-speed pass;
    only a body that cannot be UTF-8 is encoded again, all in ASCII escapes."""
    import json

    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def _answer(response: Any, client: RemoteClient) -> Any:
    """The JSON of a wf server's answer, or the library's error for its error."""
    _identify(response, client)
    try:
        data = response.json()
    except ValueError:
        data = None
    status = response.status_code
    request = f"{response.request.method} {response.request.url.path}"
    if 200 <= status < 300:
        if data is None and response.content.strip():
            raise client.not_wf(f"its answer to {request} is not JSON", status)
        return data
    error = (data or {}).get("error") if isinstance(data, dict) else None
    kind = str((error or {}).get("type") or "error") if isinstance(error, dict) else "error"
    message = str((error or {}).get("message") or response.reason_phrase)
    if not isinstance(error, dict):
        raise client.not_wf(f"{request} answered HTTP {status} without a wf error", status)
    path = response.request.url.path
    if status in (401, 403):
        # A token is the user's to fix (exit 2), whether none was given or the server's differs.
        raise ServerRefused(
            f"the wf server at {client.url} refused the request: {message} (HTTP {status} {kind})",
            status,
        )
    if status == 404 and "/hooks/" in path:
        raise HookError(message)
    found = error
    if status == 404 and isinstance(found.get("stream"), str):
        streams = [str(s) for s in found.get("streams") or ()]
        raise StreamNotFound(str(found.get("run_id")), found["stream"], streams)
    if status == 404 and isinstance(found.get("run_id"), str):
        # The run's id, and when retention deleted it: the same error a local reader gets.
        run_id, deleted_at = found["run_id"], found.get("deleted_at")
        if isinstance(deleted_at, int | float):
            raise ResultExpired(run_id, deleted_at, str(found.get("reason") or "retention"))
        raise RunNotFound(run_id)
    if status in (404, 405):
        # A wf server names the run it has not; a route it has not is another version's.
        raise client.not_wf(f"{request} answered HTTP {status} {kind}: {message}", status)
    if status == 409:
        raise RunAlreadyExists(message)
    if status == 400 and "/hooks/" in path:
        raise HookError(message)
    if status == 400:
        raise _usage_error(found.get("exception"))(message)
    if status == 413:
        # Bad input, as any other (exit 2): a server bounds request bodies; the local store not.
        raise UsageError(
            f"the wf server at {_origin(response)} takes request bodies of at most "
            f"{_body_limit(message)}, and this one is larger (HTTP 413)"
        )
    if kind == "store_damaged":
        raise StoreCorrupted(message)  # as a local reader of that store gets it
    if kind == "store_unavailable":
        raise StoreError(message)  # as a local caller of that store gets it (exit 3)
    if status == 429 or status >= 500:
        raise _failed(response, client, f"{message} (HTTP {status} {kind})")
    # 408, 415, 421, 431: the request, as the server checks them (its words say what to fix)
    raise UsageError(
        f"the wf server at {client.url} refused the request: {message} (HTTP {status} {kind})"
    )


def _identify(response: Any, client: RemoteClient) -> None:
    """Refuse an answer that is not a wf server's of this API version (``API_HEADER``). A
    500, 502, 503, 504 or 429 without it is a failure on the way there (a proxy before a
    server that is down or busy), and reads as one."""
    version = response.headers.get(API_HEADER)
    if version == API_VERSION:
        return
    status = response.status_code
    request = f"{response.request.method} {response.request.url.path}"
    if version is None and status in (429, 500, 502, 503, 504):
        raise _failed(response, client, f"HTTP {status} {response.reason_phrase}")
    if version is None:
        shown = response.headers.get("content-type") or "no content type"
        raise client.not_wf(
            f"{request} answered HTTP {status} ({shown}) without the {API_HEADER} header",
            status,
        )
    raise client.not_wf(
        f"it speaks API version {version[:20]!r}; this client speaks {API_VERSION}", status
    )


def _failed(response: Any, client: RemoteClient, what: str) -> ServerUnavailable:
    """A server that failed (5xx) or is busy (429): try again, after ``Retry-After`` if said."""
    status = response.status_code
    after = response.headers.get("retry-after", "")
    when = f"try again in {after} s" if after.isascii() and after.isdigit() else "try again later"
    if status == 429 and "try again" in what:
        return ServerUnavailable(f"the wf server at {client.url} is busy: {what}", status)
    verb = "is busy" if status == 429 else "failed"
    return ServerUnavailable(f"the wf server at {client.url} {verb}: {what}; {when}", status)


def _origin(response: Any) -> str:
    url = response.request.url
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}"


def _body_limit(message: str) -> str:
    """The server's limit in its 413's words (``limited to 1048576 bytes``), else 1 MiB's."""
    import re

    found = re.search(r"(\d+) bytes", message)
    size = int(found.group(1)) if found else 1 << 20
    return f"{size} bytes ({size / (1 << 20):g} MiB)" if size % (1 << 10) == 0 else f"{size} bytes"


def _usage_error(name: Any) -> type[UsageError]:
    """The kind of ``wf.UsageError`` a 400 names (``InputValidationError``, ``LoadError``...),
    the class a local caller gets; ``UsageError`` itself for any other name."""
    from wf import _exceptions

    found = getattr(_exceptions, name, None) if isinstance(name, str) else None
    if isinstance(found, type) and issubclass(found, UsageError) and "__init__" not in vars(found):
        return found
    return UsageError


def detail_record(data: dict[str, Any]) -> RunRecord:
    """The record in ``GET /api/v1/runs/{id}``'s answer: its ``queue`` is the detail's queue
    state, with the run's queue name inside it."""
    queue = data.get("queue")
    name = queue.get("queue") if isinstance(queue, dict) else queue
    return RunRecord.from_json({**data, "queue": name})


_NO_EVENTS = {"events": "false"}
"""``GET /api/v1/runs/{id}`` without the journal: what reading a record needs (a run of 30,000
steps' detail is 18 MB with it)."""


class RemoteRun(Run[Any]):
    """A ``wf.Run`` on a server: the same methods, over HTTP."""

    def __init__(self, run_id: str, client: RemoteClient) -> None:
        super().__init__(run_id)
        self.client = client

    def __repr__(self) -> str:
        return f"<wf.Run {self.id} at {self.client.url}>"

    def _path(self, tail: str = "") -> str:
        return "/runs/" + urllib.parse.quote(self.id, safe="") + tail

    async def record(self) -> RunRecord:
        """The run's record, as the server reads it (its detail without the journal)."""
        data = await self.client.call("GET", self._path(), params=_NO_EVENTS)
        with self.client.reading("GET /runs/{id}"):
            return detail_record(data)

    async def status(self) -> RunStatus:
        """The run's status."""
        return (await self.record()).status

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the run to end (long polls) and return its output, or raise as
        ``wf.Run.result`` does (``RunFailed``, ``RunCancelled``, ``TimeoutError``). A server
        that stops answering meanwhile (a restart) is asked again (``RemoteClient.riding_out``:
        up to ``RIDE_OUT`` seconds, and not past ``timeout``)."""
        from wf.engine._codec import decode

        deadline = None if timeout is None else time.monotonic() + timeout

        async def poll() -> Any:
            wait = _LONG_POLL
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            return await self.client.call(
                "GET",
                self._path("/result"),
                params={"wait": wait},
                timeout=wait + self.client.timeout,
                deadline=deadline,
            )

        while True:
            try:
                data = await self.client.riding_out(poll, deadline=deadline)
            except ServerUnavailable as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    # Down at the deadline: the timeout is what the caller asked about.
                    raise TimeoutError(f"run {self.id} did not finish within {timeout} s") from exc
                raise
            with self.client.reading("GET /runs/{id}/result"):
                status = data["status"]
            if status == "completed":
                return decode(data.get("output"))
            if status == "cancelled":
                raise RunCancelled(self.id)
            if status == "failed":
                raise run_failed(self.id, data.get("error") or {})
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} did not finish within {timeout} s")

    async def settle(self, timeout: float | None = None) -> RunRecord:
        """Wait until the run ended or waits on something outside it; its record."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            data = await self.client.call("GET", self._path(), params=_NO_EVENTS)
            with self.client.reading("GET /runs/{id}"):
                record = detail_record(data)
            # A message in its inbox (a hook payload, a wake-up) is something left to do.
            if record.status.is_terminal or (
                record.status is RunStatus.SUSPENDED
                and (record.wake_at is None or record.wake_at > time.time())
                and not data.get("inbox")
            ):
                return record
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} did not settle within {timeout} s")
            await asyncio.sleep(0.2)

    async def cancel(self, *, wait: bool = False, children: bool = False) -> bool:
        """Ask the run to stop; False if it had already ended."""
        params = {"wait": str(wait).lower(), "children": str(children).lower()}
        data, resent = await self.client.call_resent(
            "POST", self._path("/cancel"), params=params, timeout=None if wait else 60, again=True
        )
        with self.client.reading("POST /runs/{id}/cancel"):
            answer = (
                (data["runs"] or [{"sent": False, "status": None}])[0] if "runs" in data else data
            )
            sent, status = bool(answer["sent"]), answer["status"]
        if resent and not sent and status == "cancelled":
            say_done_again(f"POST /runs/{self.id}/cancel")  # the first send cancelled it
            return True
        return sent

    async def wake_up(self, *, wait: bool = False) -> bool:
        """End the run's current sleeps now; False if it had already ended. Not sent again
        when its connection drops (``ServerUnavailable``): a second would end the next sleep."""
        data = await self.client.call(
            "POST", self._path("/wake"), params={"wait": str(wait).lower()}
        )
        with self.client.reading("POST /runs/{id}/wake"):
            return bool(data["sent"])

    async def read_stream(
        self, name: str | None = None, start: int = 0, *, follow: bool = True
    ) -> AsyncIterator[bytes]:
        """The chunks of byte stream ``name``, as the store has them (the server sends each
        one's length before it: ``wf._frames``; a server that does not, the pieces it sends),
        until it closes; then ``wf.StreamIncomplete`` if its writer was cut off (the run's
        ``stream_info`` says so: the server ends such a body without its last chunk). A
        restart of the server meanwhile is ridden out as ``wf stream -f`` rides it out
        (``read_parts``): read on from the chunk it reached, each chunk given once."""
        async for chunk in self.read_parts(name, start, follow=follow):
            yield chunk

    async def read_parts(
        self, name: str | None = None, start: int = 0, *, follow: bool = True, whole: bool = True
    ) -> AsyncIterator[bytes]:
        """``read_stream``'s chunks (``whole=False``: the parts the server sends, a big chunk
        never held whole), followed across a restart of the server: a dropped or refused
        connection is asked again (``Outage``: up to ``RIDE_OUT`` seconds unreachable) from
        the chunk it reached, never from ``start`` again, a chunk cut halfway read again
        whole and its bytes given once. A server this client never reached is a
        ``ServerUnavailable`` at once. ``run.read_stream`` and ``wf stream -f``
        (``HttpAdmin.follow_stream``) read through here."""
        from wf import _frames

        outage = Outage(self.client)
        reached = False
        # The chunk read next, a restart reads on from it (never from ``start`` again); None
        # while not known (``start`` from the end of a stream the server did not number).
        at: int | None = start if start >= 0 else None
        received = 0  # bytes yielded, for a server that does not frame its chunks
        given = False  # anything yielded: till then, asking from ``start`` again repeats nothing
        into = 0  # bytes of chunk ``at`` yielded (``whole=False``): left out when read again

        def first(number: int) -> None:
            nonlocal at
            at = number  # ``start`` counted from the end: the server says which chunk that is

        while True:
            chunks = _frames.Chunks()  # a chunk cut off halfway is read again whole
            skip = received  # a server that does not frame: read from ``start`` again
            seen = 0  # bytes of chunk ``at`` read in this request
            try:
                parts = self.stream_parts(
                    name, start if at is None else at, follow=follow, on_start=first
                )
                async for part, ends in parts:
                    # An outage ends with progress, not with an answer: a body cut at the
                    # same byte every time (a proxy's size limit) must not be read forever.
                    reached = True
                    if ends is None:  # pieces, whose count says nothing of the chunks
                        at = None if start < 0 else start
                        if len(part) <= skip:
                            skip -= len(part)
                            continue
                        part, skip = part[skip:], 0
                        received += len(part)
                        outage.answered()
                        given = True
                        yield part
                        continue
                    if whole:
                        chunk = chunks.add(part, ends)
                        if chunk is None:
                            continue
                        at = None if at is None else at + 1
                        outage.answered()
                        given = True
                        yield chunk
                        continue
                    before, seen = seen, seen + len(part)
                    fresh = part[into - before :] if into > before else part
                    into = max(into, seen)
                    if ends:
                        at, into, seen = None if at is None else at + 1, 0, 0
                    if fresh:
                        outage.answered()
                        given = True
                        yield fresh
                outage.answered()
                return
            except ServerUnavailable as exc:
                # Cut off by the server's stop (a restart): read on from where it was, or
                # from ``start`` while nothing came. A server this client never reached (a
                # wrong URL) is said at once.
                reached = reached or exc.cut or self.client.reached
                if not (follow and reached and (at is not None or not given)):
                    raise
                await outage.failed(exc)

    async def stream_parts(
        self,
        name: str | None = None,
        start: int = 0,
        *,
        follow: bool = True,
        on_start: Callable[[int], None] | None = None,
    ) -> AsyncIterator[tuple[bytes, bool | None]]:
        """``read_stream``'s bytes as they arrive, a big chunk never held whole: each part
        with whether it ends its chunk (None: the server does not frame its chunks, so
        nothing is known of them). ``on_start`` is given the number of the first chunk, when
        ``start`` counts from the end and the server says it (``wf._frames.START_HEADER``)."""
        import httpx

        from wf import _frames

        name = "default" if name is None else check_name("a stream name", name)
        path = self._path("/streams/" + urllib.parse.quote(name, safe=""))
        params = {"start": start, "follow": str(follow).lower(), "framed": "true"}
        url = self.client.url
        cut: httpx.TransportError | None = None
        framed = False
        number: int | None = start if start >= 0 else None  # the chunk read next, when known
        try:
            async with self.client.streaming("GET", path, params=params) as response:
                if response.status_code >= 300 or API_HEADER not in response.headers:
                    await response.aread()
                    _answer(response, self.client)
                framed = response.headers.get(_frames.FRAMING_HEADER) == _frames.FRAMING
                first = response.headers.get(_frames.START_HEADER, "")
                if start < 0 and framed and first.isascii() and first.isdigit():
                    number = int(first)
                    if on_start:
                        on_start(number)
                frames = _frames.Unframer()
                try:
                    async for piece in response.aiter_raw():
                        if not framed:
                            yield piece, None
                            continue
                        for part in frames.feed(piece):
                            if part[1] and number is not None:
                                number += 1
                            yield part
                except httpx.RemoteProtocolError as exc:
                    cut = exc  # the body ended early: cut off, or the connection dropped
                if cut is None and frames.partial:  # ended inside a chunk: never a whole body
                    cut = httpx.RemoteProtocolError("the body ended inside a chunk")
        except httpx.TransportError as exc:
            raise self.client.unreachable(exc, self.client.timeout) from None
        error = ServerUnavailable(f"the wf server at {url} ended the stream early: {cut}")
        error.unreached = True  # dropped (the server stops, say): a follow reads on
        error.cut = True
        try:
            detail = await self.client.call("GET", self._path(), params=_NO_EVENTS)
        except ServerUnavailable as exc:
            if cut is None or not getattr(exc, "unreached", False):
                raise  # not an outage (a timeout, no wf server, one waited out): its own error
            raise error from None  # the server went away meanwhile: a cut, read on
        with self.client.reading("GET /runs/{id}"):
            info = (detail.get("stream_info") or {}).get(name) or {}
            ended = info.get("closed") or RunStatus(detail["status"]).is_terminal
        # The server cuts an incomplete stream's body after its last chunk: framed, a cut
        # before the stream's last chunk is the network's (a restart), and a follow reads on.
        chunks = info.get("chunks")
        short = framed and number is not None and isinstance(chunks, int) and number < chunks
        if ended and info.get("complete") is False and not (cut is not None and short):
            raise StreamIncomplete(self.id, name, str(info.get("cut_step") or "?"))
        if cut is not None:
            raise error from None

    async def watch(self) -> AsyncIterator[RunEvent]:
        """The run's events (``wf.RunEvent``) as they happen, until the terminal one: the
        server says when the run changed (server-sent events), its journal says what. A
        server that stops answering meanwhile (a restart), or ends the feed early, is asked
        again (``Outage``: up to ``RIDE_OUT`` seconds unreachable), and the events go on
        after those told already."""
        outage = Outage(self.client)
        seen = 0  # events told: a watch opened again goes on after them
        while True:
            told = 0
            try:
                # Opened again, it reads the journal even of a run that ended meanwhile: the
                # events of the outage come before the terminal one.
                async for event in self._watch_once(outage.answered, replay=seen > 0):
                    told += 1
                    if told <= seen and not event.is_terminal:
                        continue
                    seen = max(seen, told)
                    yield event
                    if event.is_terminal:
                        return
            except ServerUnavailable as exc:
                if not self.client.reached:
                    raise  # never answered: a wrong address, said at once
                await outage.failed(exc)
                continue
            await outage.failed(feed_ended(self.client))

    async def _watch_once(
        self, answered: Callable[[], None], *, replay: bool = False
    ) -> AsyncIterator[RunEvent]:
        """``watch`` over one opening of the run's feed, from the run's first event; it ends
        when the server ends the feed. ``answered()`` once the server answers. A run ended
        already tells its outcome only, or with ``replay`` its journal (a watch opened again
        after an outage the run ended in). ``ServerUnavailable`` when it cannot be reached or
        drops the connection."""
        import json

        import httpx

        from wf.engine._watch import _from_record

        record = await self.record()
        answered()
        seen = 0
        if record.status.is_terminal:  # as a local run's watch: its outcome only
            more = replay
            while more:
                found_events, seen, more = await self._events_page(seen)
                for found in found_events:
                    yield found
                    if found.is_terminal:
                        return
            yield _from_record(record)
            return
        params = {"run": self.id}
        # The server sends a keep-alive every 15 s: a read waits that long, and the answer's
        # own time (``WF_TIMEOUT``) more.
        timeout = httpx.Timeout(self.client.timeout, read=15.0 + self.client.timeout)
        try:
            async with self.client.streaming(
                "GET", "/events", params=params, timeout=timeout
            ) as response:
                if response.status_code >= 300 or API_HEADER not in response.headers:
                    await response.aread()
                    _answer(response, self.client)
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    json.loads(line[6:])
                    more = True
                    while more:
                        # Only what the journal gained, a page at a time: the run's whole
                        # document (18 MB for 30,000 steps) once per change would not do.
                        found_events, seen, more = await self._events_page(seen)
                        for found in found_events:
                            yield found
                            if found.is_terminal:
                                return
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise self.client.unreachable(exc, None) from None  # dropped: the server stops
        except httpx.TransportError as exc:
            raise self.client.unreachable(exc, self.client.timeout) from None

    async def _events_page(self, start: int) -> tuple[list[RunEvent], int, bool]:
        """The run's journal events from ``start``, a page: the events, where the next page
        starts, and whether there is more."""
        from wf.engine._watch import events_of

        page = await self.client.call("GET", self._path("/events"), params={"start": start})
        with self.client.reading("GET /runs/{id}/events"):
            found = list(events_of(self.id, page["events"]))
            return found, int(page["next_start"]), bool(page["more"])

    async def retry(self) -> None:
        """Queue one more attempt of a failed run (``UsageError`` if it has not failed)."""
        await self.client.call("POST", self._path("/retry"))


_configured: RemoteClient | None = None
_from_env: tuple[tuple[str, str | None, str], RemoteClient] | None = None
"""The client ``WF_URL`` names, with the variables it was made of: kept (its connections
with it) while they stay the same."""


def configure_remote(
    url: str | None, token: str | None = None, timeout: float | None = None
) -> RemoteClient | None:
    """Use the server at ``url`` (None: stop using one) for ``wf.start`` & co, each request
    waiting at most ``timeout`` seconds (default: ``WF_TIMEOUT``, else 60). The same settings
    again keep the client in use; the client another replaces has its connections closed once
    its requests in flight have ended."""
    global _configured
    if timeout is not None:
        timeout = check_timeout(timeout)
    made = RemoteClient(url, token, timeout=timeout) if url else None
    if _configured is not None and made is not None and made.settings == _configured.settings:
        return _configured
    if _configured is not None:
        _configured.close()
    _configured = made
    return _configured


def remote_client() -> RemoteClient | None:
    """The server this program talks to: ``wf.configure(url=...)``, else ``WF_URL``."""
    global _from_env
    if _configured is not None:
        return _configured
    url = os.environ.get("WF_URL")
    if not url:
        return None
    key = (url, os.environ.get("WF_TOKEN"), os.environ.get("WF_TIMEOUT", ""))
    if _from_env is None or _from_env[0] != key:
        try:
            check_token(key[1])
        except UsageError as exc:
            raise UsageError(f"WF_TOKEN: {exc}") from None
        made = RemoteClient(url, key[1])
        if _from_env is not None:
            _from_env[1].close()
        _from_env = (key, made)
    return _from_env[1]
