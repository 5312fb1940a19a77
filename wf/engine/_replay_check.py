"""Replaying stored journals against the current code, executing nothing (``wf check --replay``).

The check drives the workflow with a context in *check mode*: recorded operations return their
recorded results; the first operation the journal does not hold (the frontier of a run in
flight) stops the check without running it; a clock set far in the future makes every recorded
timer due; the lease writes nothing and the engine's store is a throwaway in-memory one, so the
real store is only read.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import dataclasses
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, cast

from wf._exceptions import NondeterminismError, StoreCorrupted, StoreError, WFError
from wf.engine._context import ReplayFrontier, RunContext, Suspending
from wf.engine._driver import _run_workflow, recorded_outcome
from wf.engine._engine import Engine
from wf.engine._workflow import resolve_workflow_off_loop
from wf.store import (
    Deleted,
    Event,
    HookRecord,
    InboxMessage,
    Lease,
    LogEntry,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleLock,
    Slot,
    Store,
    StoreStats,
    Tombstone,
    WebhookDelivery,
)
from wf.store._base import Pages, Pins, Progress

_FAR_FUTURE = 100 * 365 * 86400.0


@dataclasses.dataclass
class ReplayReport:
    """The outcome of replay-checking one run."""

    run_id: str
    workflow: str
    """The run's workflow; "" when its record and journal are too damaged to say."""
    status: str
    """``ok`` (replays), ``diverged`` (NondeterminismError), or ``error`` (cannot be checked)."""
    ops_recorded: int
    ops_replayed: int
    message: str = ""
    divergence: NondeterminismError | None = None
    events: int = 0
    """The journal's length when it was checked: a journal that grew since (a driver went on)
    was not checked as it is now (``wf deployments upgrade`` checks again)."""
    in_flight: bool = False
    """The run can still resume (pending, running, suspended): its replay stops at the
    journal's end, where its next drive goes on, so ``ops_replayed`` may be fewer than
    ``ops_recorded`` (a gathered step still running stops it before its siblings')."""

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (the ``--format json`` shape of ``wf check --replay``)."""
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "workflow": self.workflow or None,  # None: too damaged to say
            "status": self.status,
            "ops_recorded": self.ops_recorded,
            "ops_replayed": self.ops_replayed,
            "in_flight": self.in_flight,
            "message": self.message,
        }
        if self.divergence is not None:
            data["divergence"] = {
                "index": self.divergence.index,
                "recorded": self.divergence.recorded,
                "current": self.divergence.current,
                "location": self.divergence.location,
            }
        return data


class _FarClock:
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(0)


class _NullLease(Lease):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    async def append(self, events: Sequence[Event]) -> None:
        return None

    def append_soon(self, events: Sequence[Event]) -> None:
        return None

    async def save(self, record: RunRecord) -> None:
        return None

    async def ack_inbox(self, message_ids: Sequence[str]) -> None:
        return None

    async def write_chunk(self, stream: str, index: int, data: bytes) -> None:
        return None

    async def close_stream(self, stream: str, chunks: int) -> None:
        return None

    async def append_logs(self, entries: Sequence[LogEntry]) -> None:
        return None

    async def release(self) -> None:
        return None


class _ReadOnlyStore(Store):
    """The real store seen through an allow-list: reads go through, writes are dropped.

    Every method is spelled out. A method added to ``Store`` later is abstract here until it is
    listed as a read (forwarded) or a write (dropped), so this class cannot be instantiated
    with it: a check can never reach a write of the real store by accident.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    # -- reads: forwarded -------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord:
        return await self._store.get_run(run_id)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        limit: int = 50,
        before: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> list[RunRecord]:
        return await self._store.list_runs(
            statuses=statuses,
            workflow=workflow,
            limit=limit,
            before=before,
            parent_id=parent_id,
            queue=queue,
            group=group,
            deployment=deployment,
        )

    async def read_journal(self, run_id: str, start: int = 0) -> list[Event]:
        return await self._store.read_journal(run_id, start)

    async def read_inbox(self, run_id: str) -> list[InboxMessage]:
        return await self._store.read_inbox(run_id)

    async def due_runs(
        self,
        now: float,
        limit: int = 100,
        queues: Sequence[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[str]:
        if deployments is None:
            return await self._store.due_runs(now, limit, queues)
        return await self._store.due_runs(now, limit, queues, deployments)

    async def lane_ahead(self, lane: str, run_id: str, limit: int) -> list[str]:
        return await self._store.lane_ahead(lane, run_id, limit)

    async def slots_taken(self, name: str, capacity: int) -> int:
        return await self._store.slots_taken(name, capacity)

    async def rate_retry_at(self, name: str, n: int, window: float, now: float) -> float | None:
        return await self._store.rate_retry_at(name, n, window, now)

    async def next_due_at(
        self, after: float | None = None, queues: Sequence[str] | None = None
    ) -> float | None:
        return await self._store.next_due_at(after, queues)

    async def wait_for_activity(self, timeout: float) -> None:
        await self._store.wait_for_activity(timeout)

    async def wait_for_run(self, run_id: str, timeout: float) -> None:
        await self._store.wait_for_run(run_id, timeout)

    async def get_hook(self, token: str) -> HookRecord | None:
        return await self._store.get_hook(token)

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        return await self._store.list_hooks(run_id)

    async def read_chunks(
        self, run_id: str, stream: str, start: int = 0, *, max_bytes: int | None = None
    ) -> tuple[list[bytes], bool]:
        return await self._store.read_chunks(run_id, stream, start, max_bytes=max_bytes)

    async def list_streams(self, run_id: str) -> dict[str, tuple[int, bool]]:
        return await self._store.list_streams(run_id)

    async def stream_info(self, run_id: str, stream: str) -> tuple[int, bool]:
        return await self._store.stream_info(run_id, stream)

    async def read_logs(self, run_id: str, start: int = 0) -> list[LogEntry]:
        return await self._store.read_logs(run_id, start)

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        return await self._store.get_schedule(schedule_id)

    async def list_schedules(self) -> list[Schedule]:
        return await self._store.list_schedules()

    async def get_tombstone(self, run_id: str) -> Tombstone | None:
        return await self._store.get_tombstone(run_id)

    async def store_info(self) -> StoreStats:
        return await self._store.store_info()

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        return await self._store.verify(on_progress=on_progress)

    # -- writes: dropped --------------------------------------------------------------------

    async def create_run(
        self, record: RunRecord, events: Sequence[Event] = (), *, explicit: bool = False
    ) -> bool:
        return False

    async def try_acquire(self, run_id: str) -> Lease | None:
        return None

    async def post(self, run_id: str, kind: str, data: dict[str, Any]) -> str:
        return ""

    async def post_once(
        self, run_id: str, kind: str, data: dict[str, Any], delivery: WebhookDelivery
    ) -> WebhookDelivery | None:
        return None

    async def register_hook(self, hook: HookRecord) -> str | None:
        return None

    async def try_slot(self, name: str, capacity: int) -> Slot | None:
        return None

    async def try_rate(self, name: str, n: int, window: float, now: float) -> float | None:
        return now  # never counted: a check starts nothing

    async def release_hook(self, token: str, run_id: str) -> None:
        return None

    async def lock_schedule(self, schedule_id: str, *, wait: bool = True) -> ScheduleLock | None:
        return None  # as if another process held it: a check never fires a schedule

    async def save_schedule(self, schedule: Schedule) -> None:
        return None

    async def delete_schedule(self, schedule_id: str) -> bool:
        return False

    async def delete_runs(self, run_ids: Sequence[str], *, now: float, reason: str) -> Deleted:
        return Deleted()

    async def open(self) -> None:
        return None  # the real store belongs to the caller

    async def close(self) -> None:
        return None  # the real store belongs to the caller


async def check_run(
    store: Store, run_id: str, *, timeout: float = 10.0, _pool: _Replayers | None = None
) -> ReplayReport:
    """Replay one stored run against the code loaded in this process.

    A run whose stored record or journal is damaged (``StoreCorrupted``) is reported ``error``
    with the store's message, not raised: one bad run must not stop the check of the others.
    The workflow's module is imported first (bounded by ``IMPORT_BOUND``, not by ``timeout``);
    then the replay runs on a replay thread of its own (``_Replayers``) and has ``timeout``
    seconds to settle. A replay that does not is that run's ``error``, its thread is given up
    (``_LoopThread.abandon``), and so is the thread of a replay whose caller is cancelled.
    """
    record: RunRecord | None = None
    try:
        record = await store.get_run(run_id)
        journal = await store.read_journal(run_id)
    except StoreCorrupted as exc:
        workflow = record.workflow if record is not None else await _named_by_journal(store, run_id)
        return ReplayReport(run_id, workflow, "error", 0, 0, message=str(exc))
    recorded_ops = len(
        {e["op"] for e in journal if "op" in e and e.get("type") != "cancel_delivered"}
    )
    report = ReplayReport(
        run_id,
        record.workflow,
        "ok",
        recorded_ops,
        0,
        events=len(journal),
        in_flight=not record.status.is_terminal,
    )
    stuck = _stuck.get(run_id)
    if stuck is not None and stuck.is_alive():
        # wf dev re-checks on each reload: one thread stuck for this run is enough.
        report.status, report.message = "error", _STILL_STUCK
        return report
    _stuck.pop(run_id, None)
    try:
        async with asyncio.timeout(IMPORT_BOUND):
            loaded = await resolve_workflow_off_loop(record.workflow, record.target)
    except WFError as exc:
        report.status, report.message = "error", str(exc)
        return report
    except TimeoutError:
        report.status = "error"
        report.message = f"importing the workflow did not finish within {IMPORT_BOUND} s"
        return report
    pool = _pool if _pool is not None else _Replayers(asyncio.get_running_loop())
    try:
        return await pool.replay(
            run_id,
            _replay(
                cast(Store, _ReadsOn(store, pool.home)),
                record,
                loaded,
                journal,
                dataclasses.replace(report),
                timeout,
            ),
            report,
            timeout,
        )
    finally:
        if _pool is None:
            pool.close()


async def _named_by_journal(store: Store, run_id: str) -> str:
    """The workflow a run too damaged to read names in its journal's first event; "" (shown
    as unknown) when that cannot be read either."""
    first = await store.first_event(run_id)
    workflow = first.get("workflow") if first is not None else None
    return workflow if isinstance(workflow, str) else ""


IMPORT_BOUND = 120.0
"""How long a run's workflow module may take to import, before (and apart from) its replay's
own bound: a cold import of heavy dependencies is not a replay that hangs."""

_GRACE = 0.5
"""How long past a replay's bound its caller waits for the replay to say so itself."""

_STILL_STUCK = "an earlier replay of this run is still stuck in its thread"

_stuck: dict[str, _LoopThread] = {}
"""Runs whose replay thread was given up while stuck in a blocking call, by run id: checked
again (``wf dev`` on each reload) they are reported at once, not given one more thread."""


def _not_settled(timeout: float) -> str:
    return f"replay did not settle within {timeout} s"


async def _replay(
    store: Store,
    record: RunRecord,
    workflow: Any,
    journal: list[Event],
    report: ReplayReport,
    timeout: float,
) -> ReplayReport:
    """The replay itself, on a replay thread's own loop; its ``timeout`` starts as it does."""
    started = time.monotonic()
    last_ts = max((float(e.get("ts", 0)) for e in journal), default=0.0)
    engine = Engine(_ReadOnlyStore(store), _FarClock(last_ts + _FAR_FUTURE), suspend_after=0.0)
    ctx = RunContext(engine, record, _NullLease(record.id), journal)
    ctx.checking = True
    try:
        async with asyncio.timeout(timeout):
            status, fields = await _run_workflow(ctx, workflow)
    except (ReplayFrontier, Suspending, asyncio.CancelledError):
        status, fields = None, {}
    except TimeoutError:
        report.status, report.message = "error", _not_settled(timeout)
        return report
    if time.monotonic() - started >= timeout:
        # Blocked past its bound, then done: its loop could not time it out meanwhile.
        report.status, report.message = "error", _not_settled(timeout)
        return report
    report.ops_replayed = min(ctx.next_op, report.ops_recorded)
    if ctx.divergence is not None:
        report.status = "diverged"
        report.divergence = ctx.divergence
        report.message = str(ctx.divergence)
        return report
    outcome = recorded_outcome(journal)
    error = fields.get("error") if status is not None else None
    if status is RunStatus.SUSPENDED and report.ops_replayed < report.ops_recorded:
        # Every branch waits (on a hook, say) short of the journal's end: what it recorded
        # after that point was never compared, and a resume would wait there too. (Stopping
        # at the frontier short of it is no such sign: one branch's step in flight stops the
        # replay before a sibling's recorded operations are reached.)
        report.status, report.message = "error", _stopped_early(report, fields)
        return report
    if error and error.get("qualname") == "ReplayFrontier":
        return report
    if error and (outcome is None or outcome["type"] != "run_failed"):
        report.status = "error"
        report.message = f"replay raises {error['type']}: {error['message']}"
    return report


def _stopped_early(report: ReplayReport, fields: dict[str, Any]) -> str:
    """Why a replay that stopped before the journal's end is no pass, and where it stopped."""
    waits = [
        f"{w.get('kind')} {w['target']!r}" if w.get("target") else str(w.get("kind"))
        for w in fields.get("waiting_for") or ()
        if isinstance(w, dict)
    ]
    where = f"waiting on {', '.join(waits)}" if waits else "waiting"
    left = report.ops_recorded - report.ops_replayed
    return (
        f"replay stopped early, {where}, after {report.ops_replayed} of "
        f"{report.ops_recorded} recorded operation(s): the {left} recorded operation(s) after "
        "it were never compared, and a resume on this code would stop there too (did the code "
        "change what the run waits for, or the payload type of a hook?)"
    )


class _Abandoned(BaseException):
    """Raised into a replay thread given up, to end a CPU loop of workflow code (a
    ``BaseException``: workflow code catching ``Exception`` does not keep it)."""


class _LoopThread(threading.Thread):
    """A daemon thread running an event loop of its own, for replay after replay.

    Why threads: replays sharing the caller's loop share its time, so workflow code that
    blocks (``time.sleep``) or spins (``while n: pass``, which asyncio cannot cancel) would
    stall every other replay past its bound, or the whole check for ever. Why reused: a thread
    and a loop per run cost about a millisecond each, more than a small replay itself.
    """

    def __init__(self) -> None:
        super().__init__(name="wf-replay-check", daemon=True)
        self.loop = asyncio.new_event_loop()
        self._guard = threading.Lock()
        self._ended = False

    def run(self) -> None:
        try:
            try:
                asyncio.set_event_loop(self.loop)
                self.loop.run_forever()
            finally:
                with self._guard:
                    self._ended = True
                with contextlib.suppress(BaseException):
                    self.loop.close()
        except _Abandoned:
            pass  # given up: its caller reported its run already

    def stop(self) -> None:
        """End the thread once its loop is idle."""
        with contextlib.suppress(RuntimeError):  # its loop is closed: it has ended
            self.loop.call_soon_threadsafe(self.loop.stop)

    def abandon(self) -> None:
        """Give this thread up: stop its loop and raise ``_Abandoned`` in it (a CPU loop in
        workflow code ends at its next bytecode; a blocking call, when it returns)."""
        self.stop()
        with self._guard:  # never into a thread that ended, whose id another may reuse
            if self._ended or self.ident is None:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.ident), ctypes.py_object(_Abandoned)
            )


class _Replayers:
    """The replay threads of one check: one per replay under way at once (``check_runs``'s
    ``concurrency``), each reused for run after run; a thread whose replay did not settle, or
    whose caller was cancelled, is given up and the next replay gets a fresh one."""

    def __init__(self, home: asyncio.AbstractEventLoop) -> None:
        self.home = home
        self._idle: list[_LoopThread] = []
        self._context = contextvars.copy_context()  # as a task of the caller's would see it

    async def replay(
        self,
        run_id: str,
        work: Coroutine[Any, Any, ReplayReport],
        report: ReplayReport,
        timeout: float,
    ) -> ReplayReport:
        """``work`` on an idle replay thread; ``report`` as ``error`` if it does not settle
        within ``timeout`` (and a little grace, for the replay to say so itself)."""
        thread = self._idle.pop() if self._idle else self._start()
        future = self._context.run(asyncio.run_coroutine_threadsafe, work, thread.loop)
        try:
            finished, _ = await asyncio.wait(
                {asyncio.wrap_future(future)}, timeout=timeout + _GRACE
            )
        except BaseException:
            future.cancel()
            thread.abandon()  # its caller is gone: so is the replay
            raise
        if not finished:
            future.cancel()
            thread.abandon()
            _stuck[run_id] = thread
            report.status, report.message = "error", _not_settled(timeout)
            return report
        self._idle.append(thread)
        return finished.pop().result()

    def _start(self) -> _LoopThread:
        thread = _LoopThread()
        thread.start()
        return thread

    def close(self) -> None:
        """End the idle threads."""
        for thread in self._idle:
            thread.stop()
        self._idle.clear()


class _ReadsOn:
    """The caller's store, read from a replay thread: each call runs on the loop the store
    belongs to (a connection pool, a lock or an event of the store are bound to it)."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self._store, self._loop = store, loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self._loop.is_closed():  # a replay left behind, reading after the check ended
                raise StoreError("the replay check has ended")
            future = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop)
            return await asyncio.wrap_future(future)

        return call


async def check_runs(
    store: Store,
    run_ids: Sequence[str] | None = None,
    *,
    concurrency: int = 16,
    timeout: float = 10.0,
) -> list[ReplayReport]:
    """Replay-check the given runs, or every run in the store (newest first)."""
    if run_ids is None:
        run_ids = []
        pages = Pages()
        while pages.take(page := await store.list_runs(limit=1000, before=pages.before)):
            run_ids.extend(r.id for r in page)
    gate = asyncio.Semaphore(concurrency)
    pool = _Replayers(asyncio.get_running_loop())

    async def one(run_id: str) -> ReplayReport:
        async with gate:
            return await check_run(store, run_id, timeout=timeout, _pool=pool)

    try:
        return list(await asyncio.gather(*(one(r) for r in run_ids)))
    finally:
        pool.close()
