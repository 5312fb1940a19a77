"""The remote client: ``wf.start``, ``wf.get_run`` and ``wf.resume_hook`` over HTTP.

``wf.configure(url=..., token=...)`` (or ``WF_URL`` and ``WF_TOKEN``) points a program at a
``wf serve``: it then needs neither the store nor the workflows' code, only their names and
input. Errors come back as the library's own (``RunNotFound``, ``RunFailed``, ``HookError``…).
httpx is imported only when a remote is used.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

from wf._exceptions import (
    HookError,
    ResultExpired,
    RunAlreadyExists,
    RunCancelled,
    RunNotFound,
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
from wf.store._limits import check_name

_LONG_POLL = 30.0


class RemoteError(WFError):
    """The server answered with an error the library has no name for (401, 403, 5xx)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"{message} (HTTP {status} {kind})")
        self.status = status
        self.kind = kind


class RemoteClient:
    """Talks to a ``wf serve`` at ``url``, with ``token`` if it needs one."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"a wf server URL starts with http:// or https://, not {url!r}")
        import importlib.util

        if importlib.util.find_spec("httpx") is None:  # said here, not at the first request
            from wf._extras import install_hint

            raise UsageError(f"httpx is not installed: {install_hint('serve')} adds it")
        self.url = url.rstrip("/")
        self.token = token or None
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"RemoteClient({self.url!r})"

    def _client(self, timeout: float | None = None) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        limit = self.timeout if timeout is None else timeout
        return httpx.AsyncClient(
            base_url=self.url + "/api/v1", headers=headers, timeout=httpx.Timeout(limit)
        )

    async def call(
        self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        """One request; its JSON, or the library's error for the server's error."""
        import httpx

        if "json" in kwargs:  # encoded here: a lone surrogate goes as its JSON escape
            kwargs["content"] = json_body(kwargs.pop("json"))
            kwargs["headers"] = {**kwargs.get("headers", {}), "Content-Type": "application/json"}
        try:
            async with self._client(timeout) as client:
                response = await client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise WFError(f"cannot reach the wf server at {self.url}: {exc}") from None
        return _answer(response)

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
        answer = await self.call("POST", "/runs", json=body)
        return RemoteRun(str(answer["id"]), self)

    def run(self, run_id: str) -> RemoteRun:
        """A handle on run ``run_id`` of this server (``wf.get_run`` with a remote)."""
        return RemoteRun(run_id, self)

    async def resume_hook(self, token: str, payload: Any) -> RemoteRun:
        """Deliver ``payload`` to the hook with ``token`` (validated by the server)."""
        from pydantic_core import to_jsonable_python

        path = "/hooks/" + urllib.parse.quote(check_name("a hook token", token), safe="")
        answer = await self.call("POST", path, json=to_jsonable_python(payload))
        return RemoteRun(str(answer["run_id"]), self)

    async def list_runs(self, **query: Any) -> dict[str, Any]:
        """``GET /runs`` with its filters."""
        params = {k: v for k, v in query.items() if v not in (None, [], "")}
        answer: dict[str, Any] = await self.call("GET", "/runs", params=params)
        return answer


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


def _answer(response: Any) -> Any:
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code < 300:
        return data
    error = (data or {}).get("error") if isinstance(data, dict) else None
    kind = str((error or {}).get("type") or "error")
    message = str((error or {}).get("message") or response.reason_phrase)
    status = response.status_code
    path = response.request.url.path
    if status == 404 and "/hooks/" in path:
        raise HookError(message)
    found = error if isinstance(error, dict) else {}
    if status == 404 and isinstance(found.get("stream"), str):
        streams = [str(s) for s in found.get("streams") or ()]
        raise StreamNotFound(str(found.get("run_id")), found["stream"], streams)
    if status == 404 and isinstance(found.get("run_id"), str):
        # The run's id, and when retention deleted it: the same error a local reader gets.
        run_id, deleted_at = found["run_id"], found.get("deleted_at")
        if isinstance(deleted_at, int | float):
            raise ResultExpired(run_id, deleted_at, str(found.get("reason") or "retention"))
        raise RunNotFound(run_id)
    if status == 404 and "/runs/" in path:
        raise RunNotFound(message)  # a server that did not say which run: still about one
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
    raise RemoteError(status, kind, message)


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
        return detail_record(await self.client.call("GET", self._path(), params=_NO_EVENTS))

    async def status(self) -> RunStatus:
        """The run's status."""
        return (await self.record()).status

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the run to end (long polls) and return its output, or raise as
        ``wf.Run.result`` does (``RunFailed``, ``RunCancelled``, ``TimeoutError``)."""
        from wf.engine._codec import decode

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = _LONG_POLL
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            data = await self.client.call(
                "GET", self._path("/result"), params={"wait": wait}, timeout=wait + 30
            )
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
        data = await self.client.call(
            "POST", self._path("/cancel"), params=params, timeout=None if wait else 60
        )
        if "runs" in data:
            return bool(data["runs"] and data["runs"][0]["sent"])
        return bool(data["sent"])

    async def wake_up(self, *, wait: bool = False) -> bool:
        """End the run's current sleeps now; False if it had already ended."""
        data = await self.client.call(
            "POST", self._path("/wake"), params={"wait": str(wait).lower()}
        )
        return bool(data["sent"])

    async def read_stream(
        self, name: str | None = None, start: int = 0, *, follow: bool = True
    ) -> AsyncIterator[bytes]:
        """The chunks of byte stream ``name``, as the server sends them, until it closes; then
        ``wf.StreamIncomplete`` if its writer was cut off (the run's ``stream_info`` says so:
        the server ends such a body without its last chunk)."""
        import httpx

        name = "default" if name is None else check_name("a stream name", name)
        path = self._path("/streams/" + urllib.parse.quote(name, safe=""))
        params = {"start": start, "follow": str(follow).lower()}
        url = self.client.url
        cut: httpx.TransportError | None = None
        async with self.client._client(timeout=None) as client:
            try:
                async with client.stream("GET", path, params=params) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        _answer(response)
                    try:
                        async for chunk in response.aiter_raw():
                            yield chunk
                    except httpx.RemoteProtocolError as exc:
                        cut = exc  # the body ended early: cut off, or the connection dropped
            except httpx.TransportError as exc:
                raise WFError(f"cannot reach the wf server at {url}: {exc}") from None
        detail = await self.client.call("GET", self._path(), params=_NO_EVENTS)
        info = (detail.get("stream_info") or {}).get(name) or {}
        ended = info.get("closed") or RunStatus(detail["status"]).is_terminal
        if ended and info.get("complete") is False:
            raise StreamIncomplete(self.id, name, str(info.get("cut_step") or "?"))
        if cut is not None:
            raise WFError(f"the wf server at {url} ended the stream early: {cut}") from None

    async def watch(self) -> AsyncIterator[RunEvent]:
        """The run's events (``wf.RunEvent``) as they happen, until the terminal one: the
        server says when the run changed (server-sent events), its journal says what."""
        import json

        from wf.engine._watch import _from_record, events_of

        record = await self.record()
        if record.status.is_terminal:  # as a local run's watch: its outcome only
            yield _from_record(record)
            return
        seen = 0
        async with self.client._client(timeout=None) as client:
            params = {"run": self.id}
            async with client.stream("GET", "/events", params=params) as response:
                if response.status_code >= 400:
                    await response.aread()
                    _answer(response)
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    json.loads(line[6:])
                    more = True
                    while more:
                        # Only what the journal gained, a page at a time: the run's whole
                        # document (18 MB for 30,000 steps) once per change would not do.
                        page = await self.client.call(
                            "GET", self._path("/events"), params={"start": seen}
                        )
                        for found in events_of(self.id, page["events"]):
                            yield found
                            if found.is_terminal:
                                return
                        seen, more = page["next_start"], page["more"]

    async def retry(self) -> None:
        """Queue one more attempt of a failed run (``UsageError`` if it has not failed)."""
        await self.client.call("POST", self._path("/retry"))


_configured: RemoteClient | None = None


def configure_remote(url: str | None, token: str | None = None) -> RemoteClient | None:
    """Use the server at ``url`` (None: stop using one) for ``wf.start`` & co."""
    global _configured
    _configured = RemoteClient(url, token) if url else None
    return _configured


def remote_client() -> RemoteClient | None:
    """The server this program talks to: ``wf.configure(url=...)``, else ``WF_URL``."""
    if _configured is not None:
        return _configured
    url = os.environ.get("WF_URL")
    if not url:
        return None
    return RemoteClient(url, os.environ.get("WF_TOKEN"))
