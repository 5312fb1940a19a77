"""``wf.admin.Admin``: the application API every front end renders, with two backends.

``LocalAdmin`` reads a store and controls runs through an engine on it; ``HttpAdmin``
(``wf.admin._http``) asks a ``wf serve``. Both return the same dataclasses, so a front end
(the CLI, the terminal UI, the web UI) builds one client, calls one method and renders::

    async with wf.admin.connect() as client:     # WF_URL set: over HTTP; else the store here
        page = await client.list_runs(status=["failed"], limit=20)
        detail = await client.run_detail(page.runs[0].id)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from wf._exceptions import RunNotFound, StoreCorrupted, StoreError
from wf.admin import _control, _logs, _read
from wf.admin._explain import explain
from wf.admin._model import (
    ControlResult,
    EventPage,
    Explanation,
    HookPage,
    RunDetail,
    RunPage,
    SchedulePage,
    StoreInfo,
)
from wf.admin._read import existing_run as existing_run  # where it lived: still importable
from wf.store import collect_faults
from wf.store._limits import check_name

if TYPE_CHECKING:
    from wf.admin._deployments import DeploymentPage
    from wf.admin._logs import LogPage
    from wf.engine._deployments import DeploymentSummary
    from wf.engine._engine import Engine
    from wf.engine._retention import Sweep
    from wf.engine._watch import RunEvent
    from wf.store import HookRecord, LogEntry, RunRecord, RunStatus, Schedule, Store, StoreStats
    from wf.store._base import Progress


COMPACT_AFTER = 60.0
"""``gc`` compacts runs that ended longer ago than this (as a worker does)."""
COMPACT_ALL = 1 << 62
"""``gc`` compacts every run it can."""
CHANGE_WAIT = 15.0
"""Seconds ``changes`` waits on the store's notification before it waits again (a yield
then would say nothing changed; the server's change stream keeps alive as often)."""


class Admin(Protocol):
    """What a front end can ask of wf, wherever the runs are.

    Every method raises the library's errors (``wf.RunNotFound``, ``wf.ResultExpired`` for a
    run retention deleted, ``wf.HookError``, ``wf.UsageError``), whichever the backend.
    """

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
        """A page of runs, newest first (``wf.admin.list_runs``'s filters)."""
        ...

    async def newest_run(self) -> str | None:
        """The id of the newest run, or None when there are no runs."""
        ...

    async def run_detail(self, run_id: str, *, replay: bool = False) -> RunDetail:
        """Everything about one run (``wf.admin.run_detail``)."""
        ...

    async def explain(self, run_id: str) -> Explanation:
        """Why the run is where it is (``wf.admin.explain`` of its detail)."""
        ...

    async def journal_page(
        self, run_id: str, *, start: int = 0, limit: int = _read.JOURNAL_PAGE
    ) -> EventPage:
        """The run's journal events from index ``start`` on, oldest first, at most ``limit``
        of them (``wf.admin.journal_page``)."""
        ...

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        """Live hooks (of one run, if given), oldest first."""
        ...

    async def hook_page(self, run_id: str | None = None) -> HookPage:
        """``list_hooks``, and the hooks left out because they cannot be read
        (``wf.admin.hook_page``)."""
        ...

    async def resume_hook(self, token: str, payload: Any, *, key: str | None = None) -> str:
        """Deliver ``payload`` to the hook with ``token``; the id of the run that owns it.
        With ``key``, a repeat delivers nothing new (``wf.resume_hook``)."""
        ...

    async def resume_hook_sent(
        self, token: str, payload: Any, *, key: str | None = None
    ) -> tuple[str, str | None]:
        """``resume_hook``, and the id of the inbox message that carried the payload, which
        the run journals with it (``hook_payload``'s ``message``): None when not known (a
        keyed delivery)."""
        ...

    async def settle(self, run_id: str) -> RunRecord:
        """Wait until the run ended or waits on something outside it; its record."""
        ...

    async def cancel(
        self, run_id: str, *, wait: bool = False, children: bool = False
    ) -> list[ControlResult]:
        """Cancel the run (with ``children``, its whole tree): one result per run, root first."""
        ...

    async def wake(self, run_id: str, *, wait: bool = False) -> ControlResult:
        """End the run's current sleeps; with ``wait``, until it ended or waits again."""
        ...

    def follow_stream(
        self,
        run_id: str,
        name: str = "default",
        start: int = 0,
        *,
        follow: bool = True,
        whole: bool = True,
    ) -> AsyncIterator[bytes]:
        """The chunks of a byte stream of the run (``wf.admin.follow_stream``). ``whole=False``:
        its bytes in parts of chunks as they arrive, for a reader that keeps no chunks apart
        (``wf stream``): over HTTP a big chunk is then never held whole (the store here reads
        whole chunks: they come so)."""
        ...

    def follow_logs(
        self, run_id: str, *, step: str | None = None, follow: bool = False
    ) -> AsyncIterator[LogEntry]:
        """The run's step log entries, oldest first (``wf.admin.follow_logs``)."""
        ...

    async def start(
        self,
        target: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> str:
        """Queue a run of ``target`` (``module:attr``) with JSON ``input`` (as ``wf run
        --input``: an object by name, an array by position, another value the single
        argument) and run ``options`` (``with_options``'s: ``priority``, ``group``, ``delay``
        in seconds, ``at``, ``max_attempts``, ``unique``...); its id. The run is driven by a
        worker (or the server), not here."""
        ...

    async def retry(self, run_id: str) -> str:
        """Queue another attempt of a failed run (completed steps replay); its id.
        ``wf.UsageError`` for a run that has not failed."""
        ...

    async def ended(self, run_id: str, *, hooks_only: bool = False) -> RunRecord:
        """Wait until the run has ended (driving it here if the backend may); its record.
        ``hooks_only``: also return once it waits for hooks alone with nothing in its inbox
        (only the outside finishes it: ``wf run`` returns then, unless ``--wait``)."""
        ...

    def watch(self, run_id: str) -> AsyncIterator[RunEvent]:
        """The run's events (``wf.RunEvent``) as they happen, until the terminal one."""
        ...

    def changes(self, run_id: str | None = None) -> AsyncIterator[None]:
        """Yields each time the runs (with ``run_id``: that run's record, journal, logs or
        streams) may have changed since the call, for a front end that shows them live to
        read again. It never says what changed, may yield when nothing did, and may stay
        quiet for a while (a front end reads again on a timeout of its own too). A run's
        feed ends once the run is gone. ``wf.RunNotFound`` for an unknown run."""
        ...

    async def log_page(
        self, run_id: str, *, start: int = 0, limit: int = 500, step: str | None = None
    ) -> LogPage:
        """The run's step log entries from index ``start`` on, at most ``limit``
        (``wf.admin.log_page``: ``GET /api/v1/runs/{id}/logs``)."""
        ...

    async def store_info(self) -> StoreInfo:
        """Which store the runs are in, and whether the backend drives them."""
        ...

    async def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule as JSON, with its last run's status (``wf.admin.list_schedules``)."""
        ...

    async def schedule_page(self) -> SchedulePage:
        """``list_schedules``, and the schedules left out because they cannot be read
        (``wf.admin.schedule_page``)."""
        ...

    async def set_schedule(
        self, schedule_id: str, target: str, *, input: Any = None, **options: Any
    ) -> Schedule:
        """Create or replace schedule ``schedule_id`` of the workflow at ``target``
        (``wf.schedule``'s options); everything is checked before it is stored."""
        ...

    async def remove_schedule(self, schedule_id: str) -> bool:
        """Remove a schedule (``wf.unschedule``); False if there was none."""
        ...

    async def pause_schedule(self, schedule_id: str) -> Schedule | None:
        """Pause a schedule: it fires nothing until resumed; the schedule after (None: there
        is none)."""
        ...

    async def resume_schedule(self, schedule_id: str) -> Schedule | None:
        """Resume a paused schedule from now (fires the pause passed over are not caught up);
        the schedule after (None: there is none)."""
        ...

    async def gc(
        self,
        *,
        older_than: str | None = None,
        workflow: str | None = None,
        statuses: list[str] | None = None,
        dry_run: bool = False,
        on_progress: Progress | None = None,
    ) -> Sweep:
        """Delete finished runs past their retention (``wf gc``); ``on_progress(done, total)``
        as it goes, where the work is done in this process."""
        ...

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        """Every problem of the store, one line each (``wf store verify``); ``on_progress``
        as for ``gc``."""
        ...

    async def store_stats(self) -> StoreStats:
        """What the store is and holds (``wf store info``)."""
        ...

    async def deployments(self) -> tuple[list[DeploymentSummary], int, bool]:
        """Each deployment's runs and live workers, the live workers of every deployment, and
        whether runs were left out (only the newest ``SCAN_LIMIT`` are read;
        ``wf deployments``)."""
        ...

    async def deployment_page(self) -> DeploymentPage:
        """``deployments`` as a ``DeploymentPage``, which also names the runs left out because
        they cannot be read (``damaged``)."""
        ...


def hook_order(hook: HookRecord) -> tuple[Any, ...]:
    """The one order of hook listings: oldest first, then by run and operation."""
    return (hook.created_at, hook.run_id, hook.op, hook.token)


async def list_hooks(store: Store, run_id: str | None = None) -> list[HookRecord]:
    """Live hooks of the store (of one run, if given), oldest first; ``wf.RunNotFound`` for
    an unknown run (a typo to report, not an empty list), ``wf.ResultExpired`` for a deleted
    one."""
    if run_id is not None:
        await _read.existing_run(store, run_id)
    return sorted(await store.list_hooks(run_id), key=hook_order)


async def hook_page(store: Store, run_id: str | None = None) -> HookPage:
    """``list_hooks``, and the hooks it left out because they cannot be read (named to the
    caller, not logged as the store's own find)."""
    with collect_faults() as damaged:
        hooks = await list_hooks(store, run_id)
    return HookPage(hooks, [f for f in damaged if f.kind == "hook"])


class LocalAdmin:
    """``Admin`` over an engine and its store, in this process."""

    def __init__(self, engine: Engine) -> None:
        self._engine: Engine | None = engine
        self.store = engine.store

    @classmethod
    def _reader(cls, store: Store) -> LocalAdmin:
        """A client that only reads ``store``: it has no engine (``reading``)."""
        client = cls.__new__(cls)
        client._engine, client.store = None, store
        return client

    @property
    def engine(self) -> Engine:
        """The engine that drives and controls runs here."""
        if self._engine is None:
            # Not built here: it would be current nowhere and blind to crossings (connect's).
            raise RuntimeError(
                "this client only reads the store (wf.admin._client.reading): drive or "
                "control runs through wf.admin.connect()"
            )
        return self._engine

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
        return await _read.list_runs(
            self.store,
            status=status,
            workflow=workflow,
            limit=limit,
            before=before,
            parent_id=parent_id,
            search=search,
            queue=queue,
            group=group,
            deployment=deployment,
        )

    async def newest_run(self) -> str | None:
        with collect_faults():  # a damaged newest run is passed over, not taken for the store's
            newest = await self.store.list_runs(limit=1)
        return newest[0].id if newest else None

    async def run_detail(self, run_id: str, *, replay: bool = False) -> RunDetail:
        record = await existing_run(self.store, run_id)
        # The engine's clock decides which sleeps are over (a test's fake clock, stable screens).
        now = self.now()
        return await _read.run_detail(self.store, record.id, now=now, replay=replay)

    async def explain(self, run_id: str) -> Explanation:
        return explain(await self.run_detail(run_id))

    async def journal_page(
        self, run_id: str, *, start: int = 0, limit: int = _read.JOURNAL_PAGE
    ) -> EventPage:
        return await _read.journal_page(self.store, run_id, start=start, limit=limit)

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        return await list_hooks(self.store, run_id)

    async def hook_page(self, run_id: str | None = None) -> HookPage:
        return await hook_page(self.store, run_id)

    async def resume_hook(self, token: str, payload: Any, *, key: str | None = None) -> str:
        return await _control.resume_hook(self.engine, token, payload, key=key)

    async def resume_hook_sent(
        self, token: str, payload: Any, *, key: str | None = None
    ) -> tuple[str, str | None]:
        return await _control.resume_hook_sent(self.engine, token, payload, key=key)

    async def settle(self, run_id: str) -> RunRecord:
        return await _control._run(self.engine, run_id).settle()

    async def cancel(
        self, run_id: str, *, wait: bool = False, children: bool = False
    ) -> list[ControlResult]:
        if children:
            return await _control.cancel_tree(self.engine, run_id, wait=wait)
        return [await _control.cancel(self.engine, run_id, wait=wait)]

    async def wake(self, run_id: str, *, wait: bool = False) -> ControlResult:
        from wf._exceptions import UsageError

        result = await _control.wake(self.engine, run_id, wait=False)
        if not (wait and result.sent):
            return result
        # Woken, then ended or waiting again: waiting for the end could be days.
        try:
            record = await self.settle(result.run_id)
        except UsageError as exc:  # its workflow does not import here
            return dataclasses.replace(result, undriven=str(exc))
        return dataclasses.replace(result, status=record.status.value)

    def follow_stream(
        self,
        run_id: str,
        name: str = "default",
        start: int = 0,
        *,
        follow: bool = True,
        whole: bool = True,
    ) -> AsyncIterator[bytes]:
        # The store reads whole chunks: ``whole=False`` has nothing to spare here.
        return _control.follow_stream(self.store, run_id, name, start, follow=follow)

    def follow_logs(
        self, run_id: str, *, step: str | None = None, follow: bool = False
    ) -> AsyncIterator[LogEntry]:
        return _logs.follow_logs(self.store, run_id, step=step, follow=follow)

    async def start(
        self,
        target: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> str:
        from wf.admin._start import run_request, start_checked, workflow_at

        workflow, canonical = workflow_at(target)
        request = run_request(workflow, input, options=options, target=canonical)
        return (await start_checked(self.engine, request, run_id=run_id))[0].id

    async def retry(self, run_id: str) -> str:
        return await _control.retry(self.engine, run_id)

    async def ended(self, run_id: str, *, hooks_only: bool = False) -> RunRecord:
        from wf._exceptions import RunCancelled, RunFailed
        from wf.admin._feed import wait_for_run
        from wf.admin._words import outside_only

        run = _control._run(self.engine, run_id)

        async def result() -> None:
            with contextlib.suppress(RunFailed, RunCancelled):
                await run.result()

        if not hooks_only:
            await result()
            return await run.record()
        ending = asyncio.ensure_future(result())
        try:
            while not ending.done():
                record = await run.record()
                if record.status.is_terminal:
                    break
                # Not while driven here: the suspension read may be one the drive ends.
                if (
                    outside_only(record)
                    and self.driving(run.id) is None
                    and not await self.store.read_inbox(run.id)
                ):
                    # Read again after the empty inbox: a driver elsewhere may have taken a
                    # message in since the first read (``wf.engine._run.settled_again``).
                    record = await run.record()
                    if outside_only(record):
                        return record
                    if record.status.is_terminal:
                        break
                waiting = asyncio.ensure_future(wait_for_run(self.store, run.id, 0.5))
                await asyncio.wait({ending, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
            await ending  # its error, if any
        finally:
            if not ending.done():
                ending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ending
        return await run.record()

    def watch(self, run_id: str) -> AsyncIterator[RunEvent]:
        return _control.watch(self.store, run_id)

    async def changes(self, run_id: str | None = None) -> AsyncIterator[None]:
        from wf.admin._feed import wait_for_change, wait_for_run

        if run_id is None:
            while True:
                await wait_for_change(self.store, CHANGE_WAIT)
                yield
        run_id = (await existing_run(self.store, run_id)).id
        while True:
            await wait_for_run(self.store, run_id, CHANGE_WAIT)
            try:
                await self.store.get_run(run_id)
            except (RunNotFound, StoreCorrupted):  # deleted, or damaged since: as HTTP's feed
                return
            yield

    # -- this process's own drives (no HTTP twin: a server drives its runs itself) ----------

    def driving(self, run_id: str) -> asyncio.Task[Any] | None:
        """The task of this process that drives the run, if one does (after ``cancel``,
        ``wake`` or ``drive`` started one): a front end tells its user when it fails. None
        for a client that only reads (``reading``): it drives nothing."""
        if self._engine is None:
            return None
        return self._engine.drivers.get(run_id)

    def drive(self, run_id: str) -> asyncio.Task[Any] | None:
        """Drive the run in this process unless it is driven here already (as ``Run.cancel``
        does), so that a run given a hook payload moves without a worker; the task that
        drives it here. Abandoned (interrupted on purpose: no death) when the client's block
        ends."""
        engine = self.engine
        if run_id not in engine.live and run_id not in engine.drivers:
            engine.drive_soon(run_id)
        return self.driving(run_id)

    def now(self) -> float:
        """The engine's clock (a test's fake clock gives stable screens); the system's for a
        client that only reads (``reading``), as a configured engine's would be."""
        if self._engine is None:
            return time.time()
        return self._engine.clock.now()

    async def log_page(
        self, run_id: str, *, start: int = 0, limit: int = 500, step: str | None = None
    ) -> LogPage:
        from wf.admin._logs import log_page

        return await log_page(self.store, run_id, start=start, limit=limit, step=step)

    async def store_info(self) -> StoreInfo:
        engine = self.engine
        return dataclasses.replace(
            _read.store_info(self.store),
            drives=engine.may_drive,
            deployment=None if engine.any_deployment else engine.deployment,
        )

    # -- schedules -------------------------------------------------------------------------

    async def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule as JSON, with its last run's status (``wf.admin.list_schedules``)."""
        return await _read.list_schedules(self.store)

    async def schedule_page(self) -> SchedulePage:
        """``list_schedules``, and the schedules left out because they cannot be read
        (``wf.admin.schedule_page``)."""
        return await _read.schedule_page(self.store)

    async def set_schedule(
        self, schedule_id: str, target: str, *, input: Any = None, **options: Any
    ) -> Schedule:
        """Create or replace schedule ``schedule_id`` of the workflow at ``target`` (``wf
        schedule set``, ``wf.schedule``'s options); everything is checked before it is stored."""
        from wf._exceptions import UsageError
        from wf.admin._start import workflow_at
        from wf.engine._cron import check_cron
        from wf.engine._schedules import register

        # The same words as a server's answer to a bad body, not a TypeError from the call.
        # register's keyword-only parameters, as the server's body takes them, but the two
        # this method takes itself.
        found = inspect.signature(register).parameters.values()
        known = frozenset(p.name for p in found if p.kind is p.KEYWORD_ONLY) - {"input", "target"}
        unknown = sorted(set(options) - known)
        if unknown:
            shown = ", ".join(repr(name) for name in unknown[:5])
            raise UsageError(
                f"unknown schedule option(s): {shown} (expected {', '.join(sorted(known))})"
            )
        check_cron(options.get("cron"))  # none: the same error as a bad one
        workflow, canonical = workflow_at(target)  # the same loading as a start's
        return await register(
            self.engine, schedule_id, workflow, input=input, target=canonical, **options
        )

    async def remove_schedule(self, schedule_id: str) -> bool:
        """Remove a schedule (``wf.unschedule``); False if there was none."""
        from wf.engine._schedules import check_id

        async with self.store.holding_schedule(check_id(schedule_id)):
            return await self.store.delete_schedule(schedule_id)

    async def pause_schedule(self, schedule_id: str) -> Schedule | None:
        """Pause a schedule: it fires nothing until resumed, and counts nothing missed
        meanwhile; the schedule after (None: there is none)."""
        from wf.engine._pausing import pause

        return await pause(self.store, schedule_id, self.engine.clock.now())

    async def resume_schedule(self, schedule_id: str) -> Schedule | None:
        """Resume a paused schedule: its next fire is the first after now (the fires the pause
        passed over are not caught up); the schedule after (None: there is none)."""
        from wf.engine._pausing import resume

        return await resume(self.store, schedule_id, self.engine.clock.now())

    # -- upkeep of the store ---------------------------------------------------------------

    async def gc(
        self,
        *,
        older_than: str | None = None,
        workflow: str | None = None,
        statuses: list[str] | None = None,
        dry_run: bool = False,
        on_progress: Progress | None = None,
    ) -> Sweep:
        """Delete finished runs past their retention (``wf store gc``): ``older_than`` as
        text (``"30d"``) overrides the retention; never pending, running or suspended runs.
        Unless ``dry_run``, tombstones past their keeping period are pruned too, and the
        runs that ended over ``COMPACT_AFTER`` seconds ago compacted (``Store.compact``).
        ``on_progress(scanned, total)``: finished runs looked at, of those the store counts."""
        from wf._config import retention_setting
        from wf._durations import parse_duration
        from wf.engine._retention import check_statuses, prune_tombstones, sweep
        from wf.store import DELIVERY_KEPT, RunStatus

        seconds = None if older_than is None else parse_duration(older_than, what="older_than")
        if workflow is not None:
            check_name("workflow", workflow)  # a name no run can carry is an error, not a crash
        check_statuses(statuses)
        self.engine.retention = retention_setting()
        progress = None
        if on_progress is not None:
            with collect_faults():  # a damaged schedule is no concern of gc's: verify's
                counts = (await self.store.store_info()).runs
            finished = [s.value for s in RunStatus if s.is_terminal]
            total = sum(counts.get(s, 0) for s in statuses or finished)

            def progress(scanned: int) -> None:
                on_progress(scanned, max(total, scanned))

        with collect_faults() as damaged:  # the caller names them (over HTTP too), not a log
            done = await sweep(
                self.engine,
                older_than=seconds,
                workflow=workflow,
                statuses=statuses,
                dry_run=dry_run,
                on_progress=progress,
            )
        done.damaged = list(damaged)
        if not dry_run:
            done.tombstones_pruned = await prune_tombstones(self.engine)
            # Webhook deliveries kept for late retries, past their day.
            await self.store.prune_deliveries(self.engine.clock.now() - DELIVERY_KEPT)
            # What is left takes less room: runs that ended a while ago are packed. Its
            # failure is said beside the deletions, which stand (the next gc packs again).
            # What it passes over is said with the rest, once: the same damaged bucket met
            # by the sweep and by the compaction was two lines (one from the store's log).
            with collect_faults() as passed:
                try:
                    done.compacted = await self.store.compact(
                        now=self.engine.clock.now(),
                        older_than=COMPACT_AFTER,
                        limit=COMPACT_ALL,
                        on_progress=on_progress,
                    )
                except (StoreError, RunNotFound) as error:
                    done.compact_failed = str(error)
            said = {(fault.kind, fault.item, fault.where) for fault in done.damaged}
            done.damaged += [f for f in passed if (f.kind, f.item, f.where) not in said]
        return done

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        """Every problem of the store's files and of its schedules, one line each (``wf store
        verify``); reports, never changes. ``on_progress(done, total)``: see
        ``Store.verify``."""
        from wf.engine._schedules import check_stored

        problems: list[str] = await self.store.verify(on_progress=on_progress)
        with collect_faults():  # the store's verify named the unreadable schedules already
            stored = await check_stored(self.store)
        return problems + stored

    async def store_stats(self) -> StoreStats:
        """Which store, its format, run counts by status, schedules, size (``wf store info``).
        Damaged schedules are left out of the count, unsaid: ``verify`` names them."""
        with collect_faults():
            return await self.store.store_info()

    async def deployments(self) -> tuple[list[DeploymentSummary], int, bool]:
        """Each deployment's runs and live workers (``wf.admin._deployments.deployments``)."""
        from wf.admin._deployments import deployments

        return await deployments(self.store)

    async def deployment_page(self) -> DeploymentPage:
        from wf.admin._deployments import deployment_page

        return await deployment_page(self.store)


@contextlib.asynccontextmanager
async def local(
    store: Store | None = None, *, on_crossing: Callable[[RunRecord], None] | None = None
) -> AsyncIterator[LocalAdmin]:
    """A ``LocalAdmin`` on ``store`` (default: the configured one, ``wf._config``), with an
    engine current within the block. On leaving, drives this process began are abandoned, each
    noted as interrupted on purpose (the next worker resumes them) and a store opened here is
    closed. ``on_crossing`` is told of each run it drives that is pinned to another
    deployment than the configured one."""
    from wf._config import default_store
    from wf.admin._engines import configured_engine, current

    opened = store is None
    store = default_store() if store is None else store
    try:
        engine = configured_engine(store, on_crossing=on_crossing)
        with current(engine):
            try:
                yield LocalAdmin(engine)
            finally:
                await engine.aclose()
    finally:
        if opened:
            await store.close()


@contextlib.asynccontextmanager
async def connect(
    *, on_crossing: Callable[[RunRecord], None] | None = None
) -> AsyncIterator[Admin]:
    """The client a front end uses: over HTTP when ``wf.configure(url=...)`` or ``WF_URL``
    names a ``wf serve`` (``WF_TOKEN`` its token), else on the configured store here
    (``on_crossing``: as for ``local``)."""
    from wf._setup import remote as configured_remote
    from wf.admin._http import HttpAdmin

    remote = configured_remote()
    if remote is not None:
        yield HttpAdmin(remote)
        return
    async with local(on_crossing=on_crossing) as client:
        yield client


@contextlib.asynccontextmanager
async def reading() -> AsyncIterator[Admin]:
    """``connect()`` for a front end that only reads (``wf runs``, ``wf inspect``): the same
    client, except that on the store here it has no engine (the engine is not even imported)
    and none is current in the block; the settings that engine would take are checked all
    the same. A method that drives or controls runs raises ``RuntimeError``: that takes
    ``connect()``, whose engine is current while it drives."""
    from wf._setup import remote as configured_remote

    remote = configured_remote()
    if remote is not None:
        from wf.admin._http import HttpAdmin

        yield HttpAdmin(remote)
        return
    from wf._config import default_store
    from wf.admin._engines import engine_settings

    engine_settings()  # a malformed one is said here as by every command (exit 2)
    store = default_store()
    try:
        yield LocalAdmin._reader(store)
    finally:
        await store.close()
