"""``HttpAdmin``: the ``wf.admin.Admin`` API over a ``wf serve`` (``WF_URL``).

The server's JSON (``docs/http.md``) is turned into the admin dataclasses here, once, so a
front end renders a remote run exactly as it renders one of the store here, and never opens
a store or imports the workflows' code.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from wf._exceptions import ServerUnavailable as ServerUnavailableError
from wf.admin._explain import explain
from wf.admin._model import (
    Attempt,
    Compensations,
    ControlResult,
    EventPage,
    Explanation,
    Failure,
    HookPage,
    Operation,
    Race,
    RunDetail,
    RunLink,
    RunPage,
    SchedulePage,
    StoreInfo,
    StreamInfo,
)
from wf.admin._read import JOURNAL_PAGE, check_journal_page, readable
from wf.store import Fault, HookRecord, RunRecord

T = TypeVar("T")

if TYPE_CHECKING:
    from wf._remote import RemoteClient
    from wf.admin._deployments import DeploymentPage
    from wf.admin._logs import LogPage
    from wf.engine._deployments import DeploymentSummary
    from wf.engine._retention import Sweep
    from wf.engine._watch import RunEvent
    from wf.store import LogEntry, RunStatus, Schedule, StoreStats
    from wf.store._base import Progress

_ENDED = ("completed", "failed", "cancelled")
_PAGE = 500
"""The most runs ``GET /api/v1/runs`` (or events ``GET /api/v1/runs/{id}/events``) answers
at once (``wf.serve._params.MAX_LIMIT``)."""
_LOG_WAIT = 30.0
"""Seconds one request of a followed log waits for new entries (a long poll)."""
_LINK = ("id", "workflow", "status")
UPKEEP_TIMEOUT = 3600.0
"""Seconds a remote ``wf gc`` or ``wf store verify`` waits at least for the server's answer."""


def _path(run_id: str, tail: str = "") -> str:
    from wf.store._ids import validate_run_id

    return "/runs/" + urllib.parse.quote(validate_run_id(run_id), safe="") + tail


def detail_of(data: dict[str, Any], now: float) -> RunDetail:
    """The ``RunDetail`` of ``GET /api/v1/runs/{id}``'s answer."""
    from wf._remote import detail_record

    parent = data.get("parent")
    queue = data.get("queue") or {}
    record = detail_record(data)
    # Its values shown as the local detail shows them (text with lone surrogates as text).
    shown = dataclasses.replace(
        record, input=readable(record.input), output=readable(record.output)
    )
    return RunDetail(
        run=shown,
        steps=[
            Operation(**{**row, "spans": [Attempt(**span) for span in row.get("spans", [])]})
            for row in data["steps"]
        ],
        events=data["events"],
        errors=[Failure(**failure) for failure in data["errors"]],
        hooks=[HookRecord(**hook) for hook in data["hooks"]],
        streams=[
            StreamInfo(name, info["chunks"], info["closed"], info["complete"], info["cut_step"])
            for name, info in sorted(data["stream_info"].items())
        ],
        children=[RunLink(**child) for child in data["children"]],
        parent=None
        if parent is None
        else RunLink(parent["id"], parent["workflow"], parent["status"]),
        races=[Race(**race) for race in data["races"]],
        compensations=Compensations(**data["compensations"]),
        deployment={
            "pinned": data.get("deployment"),
            "recorded": data.get("code_hash"),
            "current": None,
        },
        replays=None,
        inbox=list(data.get("inbox") or []),
        now=now,
        queue=queue,
        schedule=data.get("schedule"),
        recoveries=data.get("recoveries") or [],
        driver_gone=data.get("driver_gone"),
        damaged=[_fault(fault) for fault in data.get("damaged") or []],
    )


class HttpAdmin:
    """``Admin`` over the JSON API of a ``wf serve``."""

    def __init__(self, remote: RemoteClient) -> None:
        self.remote = remote

    def _poll(self, wait: float) -> float:
        """The timeout of a request the server holds up to ``wait`` seconds (a long poll):
        that, and as long again as any answer may take (``WF_TIMEOUT``)."""
        return wait + self.remote.timeout

    async def list_runs(
        self,
        *,
        status: Sequence[RunStatus | str] | None = None,
        workflow: str | None = None,
        limit: int = 50,
        before: str | None = None,
        parent_id: str | None = None,
        search: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> RunPage:
        from wf.admin._read import check_listing

        # Checked here as the local backend checks them: the same error, the same words.
        named = {"workflow": workflow, "queue": queue, "group": group, "deployment": deployment}
        checked = check_listing(
            status=status,
            limit=limit,
            before=before,
            parent_id=parent_id,
            names=named,
            search=search,
        )
        statuses = [s.value for s in checked or ()]
        runs: list[RunRecord] = []
        damaged: list[Fault] = []
        searched = 0
        while True:
            # The server answers at most _PAGE runs a request: a longer page is several.
            page = await self.remote.list_runs(
                status=",".join(statuses),
                workflow=workflow,
                limit=min(limit - len(runs), _PAGE),
                before=before,
                parent=parent_id,
                search=search,
                queue=queue,
                group=group,
                deployment=deployment,
            )
            with self.remote.reading("GET /runs"):
                runs += [RunRecord.from_json(r) for r in page["runs"]]
                damaged += [_fault(fault) for fault in page.get("damaged") or ()]
                before = page.get("next_before")
                # A search says how far it read; a bounded one where to go on
                # (``search_further``).
                searched += int(page.get("searched") or 0)
                exhausted = page.get("search_further") is not None
            # A search goes on like any listing: its next request starts past this one.
            if before is None or len(runs) >= limit or exhausted:
                return RunPage(runs, before, searched, exhausted, damaged)

    async def newest_run(self) -> str | None:
        page = await self.remote.list_runs(limit=1)
        with self.remote.reading("GET /runs"):
            runs = page["runs"]
            return str(runs[0]["id"]) if runs else None

    async def run_detail(self, run_id: str, *, replay: bool = False) -> RunDetail:
        """The run's detail as the server reads it. ``replay`` is not done over HTTP (the
        check imports the workflow's code, which a server is never asked to): ``replays``
        stays None."""
        data = await self.remote.call("GET", _path(run_id))
        with self.remote.reading("GET /runs/{id}"):
            return detail_of(data, time.time())

    async def explain(self, run_id: str) -> Explanation:
        return explain(await self.run_detail(run_id))

    async def journal_page(
        self, run_id: str, *, start: int = 0, limit: int = JOURNAL_PAGE
    ) -> EventPage:
        check_journal_page(start, limit)  # the same words as the local backend's
        events: list[dict[str, Any]] = []
        while True:
            # The server answers at most _PAGE events a request: a longer page is several.
            params = {"start": start + len(events), "limit": min(limit - len(events), _PAGE)}
            page = await self.remote.call("GET", _path(run_id, "/events"), params=params)
            with self.remote.reading("GET /runs/{id}/events"):
                events += list(page["events"])
                if not page["more"] or len(events) >= limit:
                    return EventPage(
                        str(page["run_id"]), events, start + len(events), bool(page["more"])
                    )

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        return (await self.hook_page(run_id)).hooks

    async def hook_page(self, run_id: str | None = None) -> HookPage:
        from wf.store._ids import validate_run_id

        # "" is no run's id (a local caller's UsageError), not "every run".
        params = {} if run_id is None else {"run": validate_run_id(run_id)}
        answer = await self.remote.call("GET", "/hooks", params=params)
        with self.remote.reading("GET /hooks"):
            damaged = [_fault(fault) for fault in answer.get("damaged") or ()]
            return HookPage([HookRecord(**hook) for hook in answer["hooks"]], damaged)

    async def resume_hook(self, token: str, payload: Any, *, key: str | None = None) -> str:
        return (await self.remote.resume_hook(token, payload, key=key)).id

    async def resume_hook_sent(
        self, token: str, payload: Any, *, key: str | None = None
    ) -> tuple[str, str | None]:
        run, message = await self.remote.resume_hook_sent(token, payload, key=key)
        return run.id, message

    async def settle(self, run_id: str) -> RunRecord:
        from wf.store._ids import validate_run_id

        return await self.remote.run(validate_run_id(run_id)).settle()

    async def cancel(
        self, run_id: str, *, wait: bool = False, children: bool = False
    ) -> list[ControlResult]:
        params = {"wait": str(wait).lower()}
        if children:
            params["children"] = "true"
        answer, resent = await self.remote.call_resent(
            "POST", _path(run_id, "/cancel"), params=params, timeout=None, again=True
        )
        with self.remote.reading("POST /runs/{id}/cancel"):
            runs = answer.get("runs") or [{"run_id": answer["id"], **answer}]
            results = [
                ControlResult(
                    r["run_id"],
                    bool(r["sent"]),
                    str(r["status"]),
                    damaged=tuple(_fault(f) for f in r.get("damaged") or ()),
                )
                for r in runs
            ]
        if resent and any(not r.sent and r.status == "cancelled" for r in results):
            from wf._remote import say_done_again

            # Sent again after a restart cut it: the first send cancelled them.
            say_done_again(f"POST /runs/{run_id}/cancel")
            results = [
                dataclasses.replace(r, sent=True) if r.status == "cancelled" else r for r in results
            ]
        if wait:
            # The server waits at most 300 s (and not past its own shutdown): follow the rest.
            results = [await self._ended(result) for result in results]
        return results

    async def _ended(self, result: ControlResult) -> ControlResult:
        from wf.store import RunStatus

        if not result.sent or RunStatus(result.status).is_terminal:
            return result
        # Its own ``wait`` ended at the server's stop: a restart is ridden out.
        record = await self.ended(result.run_id)
        return dataclasses.replace(result, status=record.status.value)

    async def wake(self, run_id: str, *, wait: bool = False) -> ControlResult:
        # Not sent again when cut (a second would end the run's next sleep too).
        answer = await self.remote.call("POST", _path(run_id, "/wake"), params={"wait": "false"})
        with self.remote.reading("POST /runs/{id}/wake"):
            refused = answer.get("refused")
            result = ControlResult(
                self.remote.text(answer, "id", "POST /runs/{id}/wake"),
                bool(answer["sent"]),
                str(answer["status"]),
                refused=None if refused is None else str(refused),
            )
        if not (wait and result.sent):
            return result
        # Woken, then ended or waiting again, as the local backend waits.
        record = await self.settle(result.run_id)
        return ControlResult(result.run_id, result.sent, record.status.value)

    async def _following(self, reached: bool, request: Callable[[], Awaitable[T]]) -> T:
        """``request()``, ridden out (``RemoteClient.riding_out``) once the server was
        ``reached`` by this follow; else its failure at once (a wrong URL is said now)."""
        return await (self.remote.riding_out(request) if reached else request())

    async def follow_stream(
        self,
        run_id: str,
        name: str = "default",
        start: int = 0,
        *,
        follow: bool = True,
        whole: bool = True,
    ) -> AsyncIterator[bytes]:
        from wf.store._ids import validate_run_id

        # The one ride-out of a stream's follow, ``run.read_stream``'s too.
        run = self.remote.run(validate_run_id(run_id))
        async for part in run.read_parts(name, start, follow=follow, whole=whole):
            yield part

    async def follow_logs(
        self, run_id: str, *, step: str | None = None, follow: bool = False
    ) -> AsyncIterator[LogEntry]:
        from wf.admin._logs import checked_logs, step_name

        step = step_name(step)  # the local backend's checks, and its words

        async def pages(start: int) -> tuple[list[dict[str, Any]], int, bool]:
            page = await self.journal_page(run_id, start=start)
            return page.events, page.next_start, page.more

        entries = self._follow_logs(run_id, step=step, follow=follow)
        async for entry in checked_logs(run_id, step, follow, entries, pages):
            yield entry

    async def log_page(
        self, run_id: str, *, start: int = 0, limit: int = 500, step: str | None = None
    ) -> LogPage:
        from wf.admin._logs import LogPage, step_name

        check_journal_page(start, limit)  # the local backend's checks, and its words
        step = step_name(step)
        entries: list[LogEntry] = []
        at = start
        while True:
            # A page longer than the server answers at once is asked for in several requests.
            params: dict[str, Any] = {"start": at, "limit": min(limit - (at - start), _PAGE)}
            if step is not None:
                params["step"] = step
            page = await self.remote.call("GET", _path(run_id, "/logs"), params=params)
            entries += page["entries"]
            at, more = int(page["next_start"]), bool(page["more"])
            if not more or at - start >= limit:
                return LogPage(str(page["run_id"]), str(page["status"]), entries, at, more)

    async def _follow_logs(
        self, run_id: str, *, step: str | None = None, follow: bool = False
    ) -> AsyncIterator[LogEntry]:
        start, reached = 0, False
        while True:
            params: dict[str, Any] = {"start": start, "wait": _LOG_WAIT if follow else 0}
            if step is not None:
                params["step"] = step
            page = await self._following(
                reached,
                functools.partial(
                    self.remote.call,
                    "GET",
                    _path(run_id, "/logs"),
                    params=params,
                    timeout=self._poll(params["wait"]),
                ),
            )
            reached = follow  # a follow rides out a restart from now on
            with self.remote.reading("GET /runs/{id}/logs"):
                entries: list[LogEntry] = list(page["entries"])
                start = int(page["next_start"])
                # The server reads the record before the entries: once it has ended, every
                # entry was in this answer.
                last = not page["more"] and (not follow or page["status"] in _ENDED)
            for entry in entries:
                yield entry
            if last:
                return

    async def start(
        self,
        target: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> str:
        body: dict[str, Any] = {"target": target}
        if input is not None:
            body["input"] = input
        if run_id is not None:
            body["id"] = run_id
        if options:
            # Checked by the server, as the local backend checks them (the same words).
            body["options"] = _options_json(options)
        # With its id a start is safe to send again: the server answers the run it started.
        answer = await self.remote.call("POST", "/runs", json=body, again=run_id is not None)
        return self.remote.text(answer, "id", "POST /runs")

    async def retry(self, run_id: str) -> str:
        from wf._exceptions import RunAlreadyExists, UsageError

        try:
            answer = await self.remote.call("POST", _path(run_id, "/retry"))
        except RunAlreadyExists as exc:  # the server's 409: the run has not failed
            raise UsageError(str(exc)) from None
        return self.remote.text(answer, "id", "POST /runs/{id}/retry")

    async def ended(self, run_id: str, *, hooks_only: bool = False) -> RunRecord:
        """The run's record once it ended (``hooks_only``: or once it waits for hooks alone,
        nothing in its inbox: only the outside finishes it, ``wf run`` returns). A server
        that stops answering meanwhile (a restart) is asked again (``RemoteClient.riding_out``,
        up to ``RIDE_OUT`` seconds)."""
        if hooks_only:
            return await self._ended_or_hooks_only(run_id)
        while True:
            result = await self.remote.riding_out(
                lambda: self.remote.call(
                    "GET", _path(run_id, "/result"), params={"wait": 30}, timeout=self._poll(30)
                )
            )
            with self.remote.reading("GET /runs/{id}/result"):
                ended = result["status"] in _ENDED
            if ended:
                return await self.remote.riding_out(self.remote.run(run_id).record)

    async def _ended_or_hooks_only(self, run_id: str) -> RunRecord:
        """``ended(hooks_only=True)``: the run's change feed says when it changed; a
        suspension is read whole (what it waits for, its inbox), as the local ``wf run``
        reads it (``wf.admin._words.outside_only``)."""
        from wf._remote import Outage, detail_record, feed_ended
        from wf.admin._words import outside_only

        run = self.remote.run(run_id)
        outage = Outage(self.remote)
        seen: tuple[Any, ...] | None = None
        while True:
            try:
                async for change in self._feed(run_id):
                    outage.answered()
                    status = change.get("status")
                    if status in _ENDED:
                        return await self.remote.riding_out(run.record)
                    key = (status, change.get("updated_at"), change.get("events"))
                    if status != "suspended" or key == seen:
                        continue
                    seen = key
                    data = await self.remote.riding_out(
                        lambda: self.remote.call("GET", _path(run_id), params={"events": "false"})
                    )
                    with self.remote.reading("GET /runs/{id}"):
                        record = detail_record(data)
                        inbox = data.get("inbox")
                    if record.status.is_terminal or (outside_only(record) and not inbox):
                        return record
            except ServerUnavailableError as exc:
                await outage.failed(exc)
            else:
                # The server ended the feed (it stops, or a proxy ends it) before the run
                # ended: opened again after a pause, as ``watch`` (not at once: a proxy that
                # ends it at once had it opened hundreds of times a second), said once.
                await outage.failed(feed_ended(self.remote))
            seen = None  # opened again: the run read again

    async def _feed(self, run_id: str) -> AsyncIterator[dict[str, Any]]:
        """The run's changes (``GET /api/v1/events?run=ID``), each as the server tells it
        (``id``, ``status``, ``updated_at``, ``events``), the first where it is now; it ends
        when the server ends it (stopping). ``ServerUnavailable`` when unreachable."""
        import json

        import httpx

        from wf._remote import API_HEADER, _answer
        from wf.store._ids import validate_run_id

        params = {"run": validate_run_id(run_id)}
        # The server sends a keep-alive every 15 s: a read waits that long, and the answer's
        # own time (``WF_TIMEOUT``) more.
        timeout = httpx.Timeout(self.remote.timeout, read=15.0 + self.remote.timeout)
        try:
            async with self.remote.streaming(
                "GET", "/events", params=params, timeout=timeout
            ) as response:
                if response.status_code >= 300 or API_HEADER not in response.headers:
                    await response.aread()
                    _answer(response, self.remote)
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        with self.remote.reading("GET /events"):
                            change = json.loads(line[6:])
                            if not isinstance(change, dict):
                                raise TypeError("a change that is not an object")
                        yield change
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise self.remote.unreachable(exc, None) from None  # dropped: the server stops
        except httpx.TransportError as exc:
            raise self.remote.unreachable(exc, self.remote.timeout) from None

    async def watch(self, run_id: str) -> AsyncIterator[RunEvent]:
        from wf.store._ids import validate_run_id

        # ``RemoteRun.watch`` rides out a restart of the server, and a feed ended early.
        async for event in self.remote.run(validate_run_id(run_id)).watch():
            yield event

    async def changes(self, run_id: str | None = None) -> AsyncIterator[None]:
        """The server's change stream (``GET /api/v1/events``, server-sent events): one yield
        per change it tells of (a run of the newest listed, or run ``run_id``)."""
        from wf._remote import API_HEADER, _answer
        from wf.store._ids import validate_run_id

        # A run's stream first tells where the run is now: yielded too, as a change may have
        # landed between the caller's read and the stream's start.
        params = {} if run_id is None else {"run": validate_run_id(run_id)}
        async with self.remote.streaming("GET", "/events", params=params) as response:
            if response.status_code >= 300 or API_HEADER not in response.headers:
                await response.aread()
                _answer(response, self.remote)  # the server's error, as any call's
            async for line in response.aiter_lines():
                if line.startswith("data: "):  # not the stream's retry hint, keep-alives
                    yield

    async def store_info(self) -> StoreInfo:
        answer = await self.remote.call("GET", "/store")
        with self.remote.reading("GET /store"):
            deployment = answer.get("deployment")
            return StoreInfo(
                str(answer["kind"]),
                str(answer["location"]),
                answer.get("drives", True),
                None if deployment is None else str(deployment),
            )

    # -- schedules, the store's upkeep, deployments ------------------------------------------

    async def list_schedules(self) -> list[dict[str, Any]]:
        return (await self.schedule_page()).schedules

    async def schedule_page(self) -> SchedulePage:
        answer = await self.remote.call("GET", "/schedules")
        with self.remote.reading("GET /schedules"):
            damaged = [_fault(fault) for fault in answer.get("damaged") or ()]
            schedules = list(answer["schedules"])
            for schedule in schedules:  # each as `wf schedules` reads it
                if not isinstance(schedule, dict) or not isinstance(schedule["id"], str):
                    raise TypeError("a schedule without an id")
            return SchedulePage(schedules, damaged)

    async def set_schedule(
        self, schedule_id: str, target: str, *, input: Any = None, **options: Any
    ) -> Schedule:
        from wf.store import Schedule

        body = {"target": target, "input": input, **options}
        answer = await self.remote.call("PUT", _schedule_path(schedule_id), json=body)
        with self.remote.reading("PUT /schedules/{id}"):
            return Schedule.from_json(answer)

    async def remove_schedule(self, schedule_id: str) -> bool:
        answer, resent = await self.remote.call_resent("DELETE", _schedule_path(schedule_id))
        with self.remote.reading("DELETE /schedules/{id}"):
            removed = bool(answer["removed"])
        if resent and not removed:
            from wf._remote import say_done_again

            say_done_again(f"DELETE /schedules/{schedule_id}")  # the first send removed it
            return True
        return removed

    async def pause_schedule(self, schedule_id: str) -> Schedule | None:
        return await self._schedule_switch(schedule_id, "pause")

    async def resume_schedule(self, schedule_id: str) -> Schedule | None:
        return await self._schedule_switch(schedule_id, "resume")

    async def _schedule_switch(self, schedule_id: str, action: str) -> Schedule | None:
        from wf.store import Schedule

        answer = await self.remote.call("POST", f"{_schedule_path(schedule_id)}/{action}")
        with self.remote.reading(f"POST /schedules/{{id}}/{action}"):
            found = answer["schedule"]
            return None if found is None else Schedule.from_json(found)

    async def gc(
        self,
        *,
        older_than: str | None = None,
        workflow: str | None = None,
        statuses: list[str] | None = None,
        dry_run: bool = False,
        on_progress: Progress | None = None,
    ) -> Sweep:
        """``wf gc`` done by the server; ``on_progress`` is not called (no progress crosses
        HTTP: the request answers when the sweep is over)."""
        from wf.engine._retention import Sweep

        body = {
            "older_than": older_than,
            "workflow": workflow,
            "statuses": statuses,
            "dry_run": dry_run,
        }
        answer = await self.remote.call("POST", "/store/gc", json=body, timeout=self._upkeep())
        with self.remote.reading("POST /store/gc"):
            return Sweep(
                deleted=list(answer["runs"]),
                bytes=int(answer["bytes"]),
                scanned=int(answer["scanned"]),
                kept_for_family=int(answer["kept_for_family"]),
                dry_run=bool(answer["dry_run"]),
                tombstones_pruned=int(answer["tombstones_pruned"]),
                compacted=int(answer.get("compacted", 0)),
                compact_failed=_text_or_none(answer.get("compact_failed")),
                damaged=[_fault(fault) for fault in answer.get("damaged") or ()],
            )

    def _upkeep(self) -> float:
        """How long ``gc`` and ``verify`` wait for the server: a sweep of a large store takes
        minutes and answers only at its end, so ``WF_TIMEOUT``'s limit, meant for a read,
        would cut it off (at least ``UPKEEP_TIMEOUT``)."""
        return max(self.remote.timeout, UPKEEP_TIMEOUT)

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        """``wf store verify`` done by the server (``on_progress``: as for ``gc``)."""
        answer = await self.remote.call("GET", "/store/verify", timeout=self._upkeep())
        with self.remote.reading("GET /store/verify"):
            return [str(problem) for problem in answer["problems"]]

    async def store_stats(self) -> StoreStats:
        from wf.store import StoreStats

        answer = await self.remote.call("GET", "/store/stats")
        with self.remote.reading("GET /store/stats"):
            return StoreStats(**answer)

    async def deployments(self) -> tuple[list[DeploymentSummary], int, bool]:
        from wf.engine._deployments import DeploymentSummary

        answer = await self.remote.call("GET", "/deployments")
        with self.remote.reading("GET /deployments"):
            found = [DeploymentSummary(**summary) for summary in answer["deployments"]]
            truncated = bool(answer.get("truncated", False))
            return found, int(answer["workers_of_any_deployment"]), truncated

    async def deployment_page(self) -> DeploymentPage:
        from wf.admin._deployments import DeploymentPage
        from wf.engine._deployments import DeploymentSummary

        answer = await self.remote.call("GET", "/deployments")
        with self.remote.reading("GET /deployments"):
            return DeploymentPage(
                [DeploymentSummary(**summary) for summary in answer["deployments"]],
                int(answer["workers_of_any_deployment"]),
                bool(answer.get("truncated", False)),
                [_fault(fault) for fault in answer.get("damaged") or ()],
            )


def _options_json(options: Mapping[str, Any]) -> Any:
    """Run options as ``POST /api/v1/runs`` takes them: ``at`` in ISO 8601, ``delay`` in
    seconds; anything else as given (the server says what does not fit)."""
    import datetime as dt

    if not isinstance(options, Mapping):
        return options
    found: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, dt.datetime):
            value = value.isoformat()
        elif isinstance(value, dt.timedelta):
            value = value.total_seconds()
        found[name] = value
    return found


def _schedule_path(schedule_id: str) -> str:
    """The schedule's URL path; an id that is not one is the same ``UsageError`` a local
    caller gets (``/schedules/`` or ``a/b`` would name another route)."""
    from wf.engine._schedules import check_id

    return "/schedules/" + urllib.parse.quote(check_id(schedule_id), safe="")


def _fault(data: dict[str, Any]) -> Fault:
    """A damaged item as a server describes it, every field kept (keys an older server does
    not send are left empty)."""
    kind, item, where, reason = (
        str(data.get(name) or "") for name in ("kind", "item", "where", "reason")
    )
    shown_as = data.get("shown_as")
    return Fault(
        kind,
        item,
        where,
        reason,
        data.get("failed") is True,
        data.get("again") is True,
        shown_as=shown_as if isinstance(shown_as, str) else "",
    )


def _text_or_none(value: object) -> str | None:
    """A text field a server may leave out or send as null (an older one never sends it)."""
    return None if value is None else str(value)
