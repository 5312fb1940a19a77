"""``wf.Run``: the handle on a run, and the reads of a run's record every layer shares.

A handle holds only an id and (optionally) an engine; everything it knows it reads from the
store, so it works the same in the process driving the run and in any other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wf._exceptions import (
    ResultExpired,
    RunCancelled,
    RunFailed,
    RunNotFound,
    StoreCorrupted,
    StreamIncomplete,
    StreamNotFound,
    UsageError,
    WFError,
)
from wf.engine._aside import drive_aside
from wf.engine._codec import decode
from wf.engine._context import current_run
from wf.engine._current import current_engine
from wf.engine._errors import public_fields, rebuild_error
from wf.engine._inbox import apply_messages
from wf.engine._instruments import send as _instrument_send
from wf.store import Event, RunRecord, RunStatus, Store, collect_faults
from wf.store._faults import Fault, named_place
from wf.store._limits import check_name

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike
    from wf.engine._watch import RunEvent

T = TypeVar("T")


class Run(Generic[T]):
    """A handle on a run: ask for its status and result, cancel it, wake it, read its streams."""

    def __init__(self, run_id: str, engine: EngineLike | None = None) -> None:
        self.id = run_id
        self._engine = engine

    @property
    def engine(self) -> EngineLike:
        return self._engine or current_engine()

    def __repr__(self) -> str:
        return f"<wf.Run {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def record(self) -> RunRecord:
        """The run's current record (status, output, error, wake-up time...).

        ``wf.ResultExpired`` (a ``wf.RunNotFound``) when retention deleted the run.
        """
        return await get_record(self.engine, self.id)

    async def status(self) -> RunStatus:
        """The run's status."""
        return (await self.record()).status

    async def result(self, timeout: float | None = None) -> T:
        """Wait for the run to end and return its output.

        Raises ``RunFailed`` (with the original error's type, message, fields), ``RunCancelled``,
        ``RunNotFound`` (``ResultExpired`` once retention deleted the run), or ``TimeoutError``
        after ``timeout`` seconds. A run that is due and
        driven by nobody is driven here while waiting, so a suspended run whose timer fires, or
        an orphaned one, completes.
        """
        return outcome(await self._follow(timeout, settled=False))  # type: ignore[no-any-return]

    async def _drive_due_descendants(self) -> float | None:
        """While waiting on a run, drive its due child runs here (as a worker would); return
        the earliest time one of them is due. A run whose children cannot be listed (its
        children's index damaged) is named once (the store's faults) and passed over: the wait
        goes on without driving what only that index names. A child whose drive here failed
        in the store is driven again only once its ``failed_until`` time has come, as a
        worker's is: each drive replays its journal and says its failure."""
        engine = self.engine
        now = engine.clock.now()
        earliest: float | None = None
        parents = [self.id]
        while parents:
            parent = parents.pop()
            try:
                children = await engine.store.list_runs(parent_id=parent, limit=1000)
            except StoreCorrupted as error:
                where = named_place(error)
                engine.store.faults.note("children", parent, where, error)
                continue
            for child in children:
                if child.status.is_terminal:
                    continue
                parents.append(child.id)
                if child.id in engine.drivers:
                    continue
                if not engine.drives_pin(child.deployment):
                    continue  # its own deployment's workers drive it
                failed_until = engine.failed_until.get(child.id)
                if failed_until is not None and failed_until > now:
                    earliest = failed_until if earliest is None else min(earliest, failed_until)
                elif await is_due(engine, child):
                    drive_aside(engine, child.id)
                elif child.wake_at is not None:
                    earliest = child.wake_at if earliest is None else min(earliest, child.wake_at)
        return earliest

    async def settle(self, timeout: float | None = None) -> RunRecord:
        """Wait until the run has nothing left to do for now; return its record.

        Settled means ended, or suspended on something outside it (a hook, a child run, a
        timer not yet due) with nothing in its inbox. Meanwhile a due run that nobody drives is
        driven here, as ``result()`` does. After ``wf.resume_hook`` this returns once the run
        has taken the payload in and then ended or waits again (where ``result()`` would also
        wait for whatever comes next). ``TimeoutError`` after ``timeout`` seconds.
        """
        return await self._follow(timeout, settled=True)

    async def _follow(self, timeout: float | None, *, settled: bool) -> RunRecord:
        """Wait until the run ends (or, with ``settled``, until nothing is due for it), driving
        it, and with ``result()`` its due child runs, whenever nobody else does."""
        if settled:
            return await self._follow_run(timeout, settled=True)
        followed = self.engine.followed
        followed[self.id] = followed.get(self.id, 0) + 1
        try:
            return await self._follow_run(timeout, settled=False)
        finally:
            followed[self.id] -= 1
            if not followed[self.id]:
                del followed[self.id]

    async def _follow_run(self, timeout: float | None, *, settled: bool) -> RunRecord:
        engine = self.engine
        # The loop's clock for a deadline only: looking the loop up asks the process id.
        loop: asyncio.AbstractEventLoop | None = None
        deadline: float | None = None
        if timeout is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
        busy_elsewhere = False
        while True:
            task = engine.drivers.get(self.id)
            if task is not None:
                # Driven here: its driver hands back the final record, no need to read it.
                remaining = None if loop is None or deadline is None else deadline - loop.time()
                await asyncio.wait({task}, timeout=remaining)
                driven = task.result() if task.done() else None
                if driven is not None and driven.status.is_terminal:
                    return driven
            record = await get_record(engine, self.id)
            if record.status.is_terminal:
                return record
            idle = self.id not in engine.drivers
            # A run pinned to another deployment is its workers' to drive: wait as a waiter
            # that does not drive would, whatever is due.
            ours = engine.drives_pin(record.deployment)
            due = idle and await is_due(engine, record)
            if settled and idle and not due and record.status is RunStatus.SUSPENDED:
                # The inbox was read after the record: a driver elsewhere may have taken a
                # message in between. It acknowledges only once the record says running, so
                # the record read after the empty inbox is the word (``settled_again``).
                again = await settled_again(engine, record)
                if again is not None:
                    return again
                continue
            remaining = None if loop is None or deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                what = "settle" if settled else "finish"
                raise TimeoutError(f"run {self.id} did not {what} within {timeout} s")
            if not idle:
                continue
            if due and ours and not busy_elsewhere:
                if await engine.drive_soon(self.id) is None:
                    busy_elsewhere = True  # another process drives it: watch for its changes
                continue
            busy_elsewhere = False
            waiting = record.status in (RunStatus.SUSPENDED, RunStatus.PENDING)
            wakes = [record.wake_at] if waiting and ours else []
            if not settled:
                wakes.append(await self._drive_due_descendants())
            await self._wait_for_change(
                min((w for w in wakes if w is not None), default=None), remaining
            )

    async def _wait_for_change(self, wake_at: float | None, remaining: float | None) -> None:
        engine = self.engine
        poll = 2.0 if remaining is None else min(2.0, remaining)
        waiters = [asyncio.ensure_future(engine.store.wait_for_run(self.id, poll))]
        if wake_at is not None:
            waiters.append(asyncio.ensure_future(engine.clock.sleep_until(wake_at)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def cancel(self, *, wait: bool = False) -> bool:
        """Ask the run to stop at its next durable operation; False if it had already ended.

        Inside the workflow ``wf.Cancelled`` is raised (``except Exception`` cannot swallow it);
        ``finally`` blocks and rollbacks still run. With ``wait=True``, return once it ended.
        """
        return await self._send("cancel", wait)

    async def wake_up(self, *, wait: bool = False) -> bool:
        """End the run's current sleeps now; False if it had already ended."""
        return await self._send("wake", wait)

    async def _send(self, kind: str, wait: bool) -> bool:
        sender = current_run()
        if sender is None:
            sent = await self._post(kind)
        else:
            # Sent by workflow code: what it decided from is durable first, and the run is in
            # flight (never suspended) while the message goes out.
            await sender.settle()
            with sender.storing():
                sent = await self._post(kind)
        if sent and wait:
            with contextlib.suppress(RunFailed, RunCancelled):
                await self.result()
        return sent

    async def _post(self, kind: str) -> bool:
        engine = self.engine
        record = await get_record(engine, self.id)
        if record.status.is_terminal:
            return False
        data: dict[str, Any] = {}
        if engine.instrumented():
            _instrument_send(engine.instruments, self.id, kind, data)
        await engine.store.post(self.id, kind, data)
        ctx = engine.live.get(self.id)
        if ctx is not None:
            await apply_messages(ctx, await engine.store.read_inbox(self.id), live=True)
        elif self.id not in engine.drivers:
            drive_aside(engine, self.id)
        return True

    def watch(self) -> AsyncIterator[RunEvent]:
        """The run's events as they happen (``wf.RunEvent``): ``started`` (with the attempt),
        ``progress``, ``retrying``, then the terminal one. A finished run yields only that."""
        from wf.engine._watch import watch

        return watch(self.engine.store, self.id)

    async def retry(self) -> None:
        """Queue one more attempt of a failed run: completed steps replay, failed ones re-run.

        ``UsageError`` if the run has not failed (or is being driven right now).
        """
        engine = self.engine
        record = await engine.store.get_run(self.id)
        if record.status is not RunStatus.FAILED:
            raise UsageError(f"run {self.id} is {record.status}: only a failed run can be retried")
        lease = await engine.store.try_acquire(self.id)
        if lease is None:
            raise UsageError(f"run {self.id} is being driven by another process: try again")
        try:
            record, journal = await lease.read_run(engine.store)
            if record.status is not RunStatus.FAILED:
                raise UsageError(
                    f"run {self.id} is {record.status}: only a failed run can be retried"
                )
            if journal and journal[-1].get("type") == "run_retrying":
                # A retry whose event is recorded but whose record a crash kept from being
                # saved: that retry stands (the journal is the truth); finish it.
                reopen(record, journal[-1])
                await lease.save(record)
                return
            now = engine.clock.now()
            record.attempt += 1
            record.max_attempts = max(record.max_attempts, record.attempt)
            retrying = {
                "type": "run_retrying",
                "ts": now,
                "attempt": record.attempt,
                "max_attempts": record.max_attempts,
                "error": record.error,
                "retry_at": None,
                "manual": True,
            }
            # One write where the store can (PostgreSQL: one transaction), so that a crash never
            # leaves the event without the pending record that makes the run due again. Else
            # the event first: a store that keeps a run's queue place apart from its record
            # (the local store) gives the run its place before the event counts, and a driver
            # repairs a record the crash kept from being saved (``_driver``).
            reopen(record, retrying)
            await lease.append_and_save([retrying], record)
        finally:
            await lease.release()

    async def read_stream(self, name: str | None = None, start: int = 0) -> AsyncIterator[bytes]:
        """Chunks of the run's byte stream ``name`` from ``start`` (negative: from the end),
        following it live until it closes.

        A stream that does not exist yet is waited for while the run is not finished (a run
        suspended on a hook, say, may open it once it resumes); if the run ends without having
        created it, ``wf.StreamNotFound`` is raised (naming the streams the run has). A stream
        that ended with the step writing it cut off (it failed, or the run ended while it
        wrote) raises ``wf.StreamIncomplete`` after its last chunk.
        """
        name = "default" if name is None else name
        store = self.engine.store
        start = await start_now(store, self.id, name, start)
        await wait_for_stream(store, self.id, name)
        async for chunk in store.stream_chunks(self.id, name, start):
            yield chunk
        await check_complete(store, self.id, name)


async def start_now(store: Store, run_id: str, name: str, start: int) -> int:
    """``start`` as a reader that is about to wait for stream ``name`` takes it: one from the
    end (< 0) of a stream not open yet is 0, the last chunks there are now being none (counted
    once the stream is open, it gave the last of the chunks written meanwhile); so is one of an
    open stream with no chunk yet. Any other is unchanged: the store counts an open stream's end
    as it begins to read. One stream's count, not the run's list (a webhook run has a reply
    stream a delivery)."""
    if start < 0 and (await store.stream_info(run_id, name))[0] == 0:
        return 0
    return start


async def check_complete(store: Store, run_id: str, name: str) -> None:
    """Raise ``StreamIncomplete`` if stream ``name`` has ended (closed, or its run ended) with
    the step writing it cut off (``wf.engine._streams.cut_writer``); a stream still written,
    or whose failed writer may still be retried, is not judged."""
    from wf.engine._streams import cut_writer

    closed = (await store.stream_info(run_id, name))[1]
    if not closed and not (await store.get_run(run_id)).status.is_terminal:
        return
    step = cut_writer(await store.read_journal(run_id), name)
    if step is not None:
        raise StreamIncomplete(run_id, name, step)


async def wait_for_stream(store: Store, run_id: str, name: str, *, follow: bool = True) -> None:
    """Return once run ``run_id`` has a stream ``name``; ``StreamNotFound`` if it has none and
    is finished (or, without ``follow``, at once). ``RunNotFound`` for no run; ``UsageError``
    for a name no stream can have. A pending, running or suspended run may still open it: it
    is waited for."""
    check_name("a stream name", name)
    while True:
        if (await find_stream(store, run_id, name))[0]:
            return
        record = await store.get_run(run_id)
        # Chunks are durable before a run ends: one more look after that is final.
        ended = record.status.is_terminal
        found, streams, damaged = await find_stream(store, run_id, name)
        if found:
            return
        if ended or not follow:
            raise stream_not_found(run_id, name, streams, damaged)
        await store.wait_for_run(run_id, 2.0)


async def find_stream(
    store: Store, run_id: str, name: str
) -> tuple[bool, dict[str, tuple[int, bool]], list[str]]:
    """Whether the run has stream ``name``; its readable streams, and what makes the streams
    the listing left out as damaged unreadable (the caller's to say, not a log's).

    A stream the listing left out may be this one and still readable by its name: the local
    store finds a stream's chunk files by its name's key, so one whose only damage is its name
    file is read as ``name`` all the same. Asked then, the store's ``stream_info`` says:
    chunks or a close are the stream; ``(0, False)``, read from the stream's own files, means
    the run has no stream ``name`` when the damage is another's, and that this one is damaged
    past reading when the listing named it (``Store.stream_fault``: its name file and its
    chunk files both damaged); ``StoreCorrupted`` (its own files are damaged, or a store that
    cannot read one stream apart) leaves it unreadable, for that reason. A healthy stream
    costs the listing alone, as before."""
    with collect_faults() as faults:
        streams = await store.list_streams(run_id)
    damaged = [_said(fault) for fault in faults]
    if name in streams or not damaged:
        return name in streams, streams, damaged
    try:
        count, closed = await store.stream_info(run_id, name)
    except StoreCorrupted as error:
        return False, streams, [" ".join(str(error).split())]
    if count or closed:
        return True, streams, damaged
    item = store.stream_fault(run_id, name)[0]
    return False, streams, [_said(f) for f in faults if f.kind == "stream" and f.item == item]


def _said(fault: Fault) -> str:
    """A damaged stream's fault as a reader is told it: its place, then what is wrong."""
    return fault.reason if fault.where in fault.reason else f"{fault.where}: {fault.reason}"


def stream_not_found(
    run_id: str, name: str, streams: dict[str, tuple[int, bool]], damaged: list[str]
) -> WFError:
    """The error for a stream the run has not: the store's damage when one of its streams
    cannot be read (it may be the one asked for), else ``StreamNotFound``."""
    if damaged:
        said = "; ".join(damaged)
        return StoreCorrupted(f"run {run_id} has no readable stream {name!r}: {said}")
    return StreamNotFound(run_id, name, list(streams))


async def get_record(engine: EngineLike, run_id: str) -> RunRecord:
    """The run's record; ``ResultExpired`` instead of ``RunNotFound`` for a deleted run."""
    try:
        return await engine.store.get_run(run_id)
    except RunNotFound as missing:
        stone = await engine.store.get_tombstone(run_id)
        if stone is None:
            raise
        raise ResultExpired(run_id, stone.deleted_at, stone.reason) from missing


async def is_due(engine: EngineLike, record: RunRecord) -> bool:
    """Whether a non-terminal run should be driven now: not suspended, its wake-up time has
    come, or a message waits in its inbox."""
    if record.status is RunStatus.PENDING and record.wake_at is not None:
        return record.wake_at <= engine.clock.now()  # a delayed start or a retry's backoff
    if record.status is not RunStatus.SUSPENDED:
        return True
    if record.wake_at is not None and record.wake_at <= engine.clock.now():
        return True
    return bool(await engine.store.read_inbox(record.id))


async def settled_again(engine: EngineLike, record: RunRecord) -> RunRecord | None:
    """The run's record read again after its inbox was found empty, if it is still settled
    (ended, or suspended with no wake-up due); None if a drive took it on meanwhile.

    ``record`` (suspended) was read before the inbox: another process's driver may have taken
    a message in between, and the record would then be the suspension that message ended. A
    driver acknowledges the messages it takes in only once the run's record says running
    (``wf.engine._driver``), so a record read after the inbox is at least that new."""
    again = await get_record(engine, record.id)
    if again.status.is_terminal:
        return again
    if again.status is RunStatus.SUSPENDED and not (
        again.wake_at is not None and again.wake_at <= engine.clock.now()
    ):
        return again
    return None


def outcome(record: RunRecord) -> Any:
    """The result a finished run's record stands for (or the error it raises)."""
    if record.status is RunStatus.COMPLETED:
        return decode(record.output)
    if record.status is RunStatus.CANCELLED:
        raise RunCancelled(record.id)
    raise run_failed(record.id, record.error or {})


def run_failed(run_id: str, error: dict[str, Any]) -> RunFailed:
    """The ``RunFailed`` a recorded error stands for, wherever it is read (a store, or a
    server's ``/result``): type name, message, fields and traceback as data, and the original
    exception rebuilt when its module is imported here (else a ``StepFailed`` with the same
    data), so ``except`` and ``.original`` behave alike locally and over HTTP."""
    original = rebuild_error(error) if error.get("module") else None
    return RunFailed(
        run_id,
        error.get("type", "Exception"),
        error.get("message", ""),
        public_fields(error),
        error.get("traceback"),
        original,
    )


def reopen(record: RunRecord, retrying: Event) -> None:
    """Make the record of an ended run what its ``run_retrying`` event says: pending again
    (``updated_at``: the event's time)."""
    record.status = RunStatus.PENDING
    record.attempt = int(retrying.get("attempt", record.attempt + 1))
    record.max_attempts = max(record.max_attempts, int(retrying.get("max_attempts", 0)))
    record.wake_at = retrying.get("retry_at")
    record.waiting_for = None
    record.updated_at = float(retrying.get("ts", record.updated_at))
