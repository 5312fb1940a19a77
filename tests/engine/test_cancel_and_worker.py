"""Cancellation, waking, the worker, and recovery of runs whose driver went away."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

import pytest

import wf
from wf import Engine
from wf.engine._current import use_engine
from wf.store import InboxMessage, Lease
from wf.testing import MockClock, TestEngine

log: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    log.clear()


@wf.step
def note(text: str) -> str:
    log.append(text)
    return text


@wf.workflow
async def stubborn() -> str:
    try:
        await note("start")
        try:
            await wf.sleep(7 * 86400)
        except Exception:
            log.append("swallowed")  # must never happen: Cancelled is a BaseException
        return "finished"
    finally:
        await note("cleanup")


async def test_cancel_stops_a_suspended_run_and_finally_runs_durable_steps(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    run = await wf.start(stubborn)
    await wf_engine.wait_driven(run)
    assert await run.status() == wf.RunStatus.SUSPENDED
    assert await run.cancel(wait=True)
    with pytest.raises(wf.RunCancelled):
        await run.result()
    assert log == ["start", "cleanup"]
    assert (await run.record()).cancel_requested
    journal = await wf_engine.store.read_journal(run.id)
    assert journal[-1]["type"] == "run_cancelled"
    assert any(e["type"] == "cancel_delivered" for e in journal)


async def test_cancel_of_a_finished_run_is_refused(wf_engine: Engine) -> None:
    run = await wf.start(stubborn)
    await wf_engine.wait_driven(run)
    await run.cancel(wait=True)
    assert await run.cancel() is False


SLOW_STARTED: list[asyncio.Event] = []


@wf.step
async def slow(seconds: float) -> str:
    if SLOW_STARTED:
        SLOW_STARTED[0].set()
    await asyncio.sleep(seconds)
    log.append("slow done")
    return "slow"


@wf.workflow
async def two_slow() -> list[str]:
    first = await slow(0.05)
    second = await slow(0.05)
    return [first, second]


SYNC_STARTED = threading.Event()
SYNC_RELEASED = threading.Event()


@wf.step
def held_sync() -> str:
    SYNC_STARTED.set()
    SYNC_RELEASED.wait(10)  # held until the test has sent its cancel
    log.append("slow done")
    return "slow"


@wf.workflow
async def two_held_sync() -> list[str]:
    first = await held_sync()
    second = await held_sync()
    return [first, second]


async def test_cancel_of_a_live_run_lets_a_running_sync_step_finish(wf_engine: Engine) -> None:
    SYNC_STARTED.clear()
    SYNC_RELEASED.clear()
    run = await wf.start(two_held_sync)
    assert await asyncio.to_thread(SYNC_STARTED.wait, 10)  # the first step is running
    # Held until the cancel is sent: a step that slept a fixed 50 ms finished first on a
    # loaded machine (the cancel's store round trips took longer), and the second one ran.
    try:
        await run.cancel()
    finally:
        SYNC_RELEASED.set()
    with pytest.raises(wf.RunCancelled):
        await run.result()
    assert log == ["slow done"]  # the first step finished; the second never started


@wf.workflow
async def nap_then_note() -> str:
    await wf.sleep(3600)
    return await note("after nap")


async def test_a_worker_delivers_detached_runs_and_due_timers(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    runs = [await wf.start(nap_then_note, detach=True) for _ in range(5)]
    assert all([await r.status() == wf.RunStatus.PENDING for r in runs])
    worker = wf.Worker(wf_engine, concurrency=3)
    await worker.run(until_idle=True)
    assert [await r.status() for r in runs] == [wf.RunStatus.COMPLETED] * 5
    assert log == ["after nap"] * 5


@wf.workflow
async def three_notes() -> int:
    await note("one")
    await note("two")
    await slow(3600)  # never finishes in the first driver: its process "dies"
    await note("three")
    return 3


async def test_an_orphaned_run_is_recovered_without_rerunning_completed_steps(
    wf_engine: TestEngine,
) -> None:
    SLOW_STARTED[:] = [asyncio.Event()]
    run = await wf.start(three_notes)
    await asyncio.wait_for(SLOW_STARTED[0].wait(), 30)  # "one" and "two" are recorded
    # The driving process dies mid-step, as a SIGKILL leaves it: nothing more is written.
    await wf_engine.crash(run)
    assert await run.status() == wf.RunStatus.RUNNING

    original = slow.fn

    async def quick(seconds: float) -> str:
        return "slow"

    slow.fn = quick
    try:
        await wf.Worker(wf_engine).run(until_idle=True)
    finally:
        slow.fn = original
    assert await run.result() == 3
    assert log == ["one", "two", "three"]


async def test_two_engines_never_drive_one_run_at_once(wf_engine: Engine) -> None:
    other = Engine(wf_engine.store, wf_engine.clock)
    run = await wf.start(two_slow, detach=True)
    first = wf_engine.drive_soon(run.id)
    second = other.drive_soon(run.id)
    results = await asyncio.gather(first, second)
    assert sorted(r is None for r in results) == [False, True]
    assert log == ["slow done", "slow done"]


async def test_a_draining_engine_does_not_start_runs_its_drivers_just_picked_up(
    wf_engine: Engine,
) -> None:
    run = await wf.start(two_slow, detach=True)
    wf_engine.draining = True
    record = await wf_engine.drive_soon(run.id)
    assert record is not None and record.status == wf.RunStatus.PENDING
    assert log == []  # nothing ran; the run is still due for the next driver
    wf_engine.draining = False
    assert await run.result() == ["slow", "slow"]


async def test_a_cancellation_journaled_but_not_delivered_before_a_crash_is_not_lost(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    run = await wf.start(stubborn)
    await wf_engine.wait_driven(run)
    assert await run.status() == wf.RunStatus.SUSPENDED
    # A driver took the cancel message into the journal and acknowledged it, then died before
    # the cancellation reached the workflow: only the journal knows.
    lease = await wf_engine.store.try_acquire(run.id)
    assert lease is not None
    await lease.append([{"type": "cancel_requested", "message": "m-lost", "ts": mock_clock.now()}])
    record = await run.record()
    record.status, record.wake_at = wf.RunStatus.RUNNING, None  # as the resuming driver saved it
    await lease.save(record)
    await lease.release()
    with pytest.raises(wf.RunCancelled):
        await run.result()
    assert log == ["start", "cleanup"]


@wf.step
async def forever() -> str:
    log.append("forever started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        log.append("step cancelled")
        raise
    return "done"


@wf.workflow
async def waits_on_forever() -> str:
    try:
        return await forever()
    finally:
        await note("cleanup")


async def test_cancelling_a_run_cancels_its_running_async_steps(wf_engine: Engine) -> None:
    run = await wf.start(waits_on_forever)
    while "forever started" not in log:
        await asyncio.sleep(0.001)
    await run.cancel()
    with pytest.raises(wf.RunCancelled):
        await run.result()
    assert log == ["forever started", "step cancelled", "cleanup"]
    journal = await wf_engine.store.read_journal(run.id)
    delivered = [e for e in journal if e["type"] == "cancel_delivered"]
    assert [(e["op"], e["at"]) for e in delivered] == [(0, "call")]  # replay raises there too
    assert not [e for e in journal if e["type"] == "step_completed" and e["op"] == 0]


@wf.step
def polls() -> str:
    log.append("polling")
    while not wf.cancel_requested():
        time.sleep(0.002)  # a sync step cannot be interrupted: it looks, and stops early
    return "saw the cancellation"


@wf.workflow
async def polling() -> str:
    seen = await polls()
    return await note(seen)


async def test_a_sync_step_can_poll_whether_its_run_is_cancelled(wf_engine: Engine) -> None:
    assert wf.cancel_requested() is False  # outside any run
    run = await wf.start(polling)
    while "polling" not in log:
        await asyncio.sleep(0.001)
    await run.cancel()
    with pytest.raises(wf.RunCancelled):
        await run.result()
    assert log == ["polling"]  # its result is recorded; the next operation is cancelled
    journal = await wf_engine.store.read_journal(run.id)
    completed = [e["result"] for e in journal if e["type"] == "step_completed"]
    assert completed == ["saw the cancellation"]


GATE: list[asyncio.Event] = []


@wf.step
async def gated() -> None:
    log.append("gated running")
    await GATE[0].wait()


async def _gated_step_running() -> None:
    """Until a ``gated`` step has started (and waits at ``GATE``), for at most 10 s."""
    async with asyncio.timeout(10):
        while "gated running" not in log:
            await asyncio.sleep(0.001)


@wf.workflow
async def step_then_nap() -> str:
    await gated()
    await wf.sleep(3600)
    return "awake"


async def test_a_wake_sent_while_a_step_runs_ends_the_next_sleep(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False  # only the wake-up can end the hour's sleep
    GATE[:] = [asyncio.Event()]
    run = await wf.start(step_then_nap)
    await _gated_step_running()
    assert await run.wake_up()  # no sleep yet: a step runs
    GATE[0].set()
    assert await run.result(timeout=10) == "awake"
    journal = await wf_engine.store.read_journal(run.id)
    [sleep] = [e for e in journal if e["type"] == "sleep_started"]
    assert sleep["until"] <= mock_clock.now()  # recorded as over: replay agrees


class _RunsEndWhileReadingNextDue:
    """The engine's store, except that reading the next due time returns only once every run
    driven at the time has ended: the worker, full when it last looked at the queue, has free
    places by the time it would wait."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._store = engine.store

    async def next_due_at(self, after: float | None = None, queues: Any = None) -> float | None:
        driving = [task for task in self._engine.drivers.values() if not task.done()]
        if driving:
            await asyncio.wait(driving)
        return await self._store.next_due_at(after, queues)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@wf.workflow
async def one_note() -> str:
    return await note("noted")


async def test_a_full_worker_whose_runs_end_while_it_reads_looks_again_at_once(
    wf_engine: Engine,
) -> None:
    runs = [await wf.start(one_note, detach=True) for _ in range(3)]
    engine = Engine(wf_engine.store, wf_engine.clock)
    engine.store = _RunsEndWhileReadingNextDue(engine)  # type: ignore[assignment]
    # A poll far longer than the bound: only looking again at once drains the three in time.
    worker = wf.Worker(engine, concurrency=1, poll=60.0)
    async with asyncio.timeout(10):
        await worker.run(until_idle=True)
    assert [await r.status() for r in runs] == [wf.RunStatus.COMPLETED] * 3


class _QueueLooks:
    """The engine's store, counting the worker's looks at the queue."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.looks = 0

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        self.looks += 1
        return await self._store.claim(*args, **kwargs)

    async def next_due_at(self, after: float | None = None, queues: Any = None) -> float | None:
        self.looks += 1
        return await self._store.next_due_at(after, queues)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@wf.workflow
async def gated_note() -> str:
    await gated()
    return await note("after the gate")


async def test_a_full_worker_does_not_look_at_the_queue_for_others_activity(
    wf_engine: Engine,
) -> None:
    # With every place taken, nothing announced can start before one of the worker's own runs
    # ends: W full workers must not each look at the queue for every announcement of the others.
    GATE[:] = [asyncio.Event()]
    first = await wf.start(gated_note, detach=True)
    engine = Engine(wf_engine.store, wf_engine.clock)
    counted = _QueueLooks(wf_engine.store)
    engine.store = counted  # type: ignore[assignment]
    worker = wf.Worker(engine, concurrency=1, poll=60.0, schedules=False, retention=False)
    task = asyncio.ensure_future(worker.run(until_idle=True))
    await _gated_step_running()
    for _ in range(10):
        await asyncio.sleep(0)
    looks = counted.looks
    others = [await wf.start(one_note, detach=True) for _ in range(5)]  # store activity
    for _ in range(20):
        await asyncio.sleep(0.001)
    assert counted.looks == looks  # woken by none of it
    GATE[0].set()  # its place frees: now it takes the others
    async with asyncio.timeout(10):
        await task
    assert [await r.status() for r in [first, *others]] == [wf.RunStatus.COMPLETED] * 6


async def _driven_elsewhere(wf_engine: Engine, workflow: Any) -> tuple[Any, asyncio.Task[Any]]:
    """A run of ``workflow`` (which runs ``gated``) that another engine on the store drives,
    once its gated step waits (``GATE[0].set()`` lets it go on); and that drive."""
    GATE[:] = [asyncio.Event()]
    run = await wf.start(workflow, detach=True)
    driving = Engine(wf_engine.store, wf_engine.clock).drive_soon(run.id)
    await _gated_step_running()
    return run, driving


async def _until_idle_worker(
    wf_engine: Engine, *, poll: float
) -> tuple[wf.Worker, asyncio.Future[None]]:
    """A worker of another engine on the store, running ``until_idle``, after a few turns of
    the loop; and its task."""
    engine = Engine(wf_engine.store, wf_engine.clock)
    worker = wf.Worker(engine, poll=poll, schedules=False, retention=False)
    task = asyncio.ensure_future(worker.run(until_idle=True))
    for _ in range(20):
        await asyncio.sleep(0.001)
    return worker, task


async def test_an_until_idle_worker_stops_when_the_runs_driven_elsewhere_end(
    wf_engine: Engine,
) -> None:
    # What is left is a run another process drives. The worker waits for it and stops at its
    # end, not at its next poll (an ungrouped run's end is announced on PostgreSQL only to
    # those who listen for every change): the lease it saw may have been a mere try.
    run, driving = await _driven_elsewhere(wf_engine, gated_note)
    worker, task = await _until_idle_worker(wf_engine, poll=60.0)
    GATE[0].set()
    async with asyncio.timeout(10):  # a poll is 60 s
        await task
        await driving
    assert await run.status() == wf.RunStatus.COMPLETED
    assert worker.driven == 0


async def test_an_until_idle_worker_does_not_leave_a_run_another_worker_only_tried(
    wf_engine: Engine,
) -> None:
    # Another worker held the run's lease for a moment (its try found the run held back by a
    # cap or a lane, and it gave the lease back) just when this worker's claim looked: had this
    # worker stopped on "driven elsewhere", while the other stopped on "held back", nobody
    # would drive the run.
    run = await wf.start(one_note, detach=True)
    lease = await wf_engine.store.try_acquire(run.id)
    assert lease is not None
    worker, task = await _until_idle_worker(wf_engine, poll=0.05)
    assert not task.done()  # it waits for the lease's end
    await lease.release()
    async with asyncio.timeout(10):
        await task
    assert await run.status() == wf.RunStatus.COMPLETED
    assert worker.driven == 1


@wf.workflow(concurrency=1)
async def capped_gated_note() -> str:
    await gated()
    return await note("after the gate")


async def test_an_until_idle_worker_waits_for_a_cap_that_runs_driven_elsewhere_fill(
    wf_engine: Engine,
) -> None:
    # The run it tried is held by a cap whose one place a drive elsewhere holds: that drive's
    # end makes the run startable here, so the worker waits for it rather than stop (the other
    # driver may be an until-idle worker that stops at its own run's end).
    first, driving = await _driven_elsewhere(wf_engine, capped_gated_note)
    second = await wf.start(capped_gated_note, detach=True)
    worker, task = await _until_idle_worker(wf_engine, poll=0.05)
    async with asyncio.timeout(10):  # its store may connect to listen first (PostgreSQL)
        while not worker.held_drives and not task.done():
            await asyncio.sleep(0.001)
    assert not task.done()  # the second run is held by the cap, not forgotten
    assert worker.held_drives >= 1
    GATE[0].set()
    async with asyncio.timeout(10):
        await driving
        await task
    assert [await r.status() for r in (first, second)] == [wf.RunStatus.COMPLETED] * 2
    assert worker.driven == 1


LAST_STEP_GATE = threading.Event()


@wf.step
def last_sync_step() -> str:
    log.append("last step running")
    assert LAST_STEP_GATE.wait(10)
    return "done"


@wf.workflow
async def reserve_then_last_sync_step() -> str:
    await note("reserved")
    wf.rollback(note, "released")
    return await last_sync_step()


async def test_a_cancel_during_the_last_sync_step_ends_the_run_cancelled_and_compensated(
    wf_engine: Engine,
) -> None:
    LAST_STEP_GATE.clear()
    run = await wf.start(reserve_then_last_sync_step)
    async with asyncio.timeout(10):
        while "last step running" not in log:
            await asyncio.sleep(0.001)
    assert await run.cancel()
    LAST_STEP_GATE.set()
    with pytest.raises(wf.RunCancelled):
        await run.result(timeout=10)
    # The step ran to its end (its result is recorded); the cancel, journaled before the
    # outcome, is the run's end: the rollback ran.
    assert log == ["reserved", "last step running", "released"]
    journal = await wf_engine.store.read_journal(run.id)
    kinds = [e["type"] for e in journal]
    assert kinds.index("cancel_requested") < kinds.index("run_cancelled")
    assert "run_completed" not in kinds
    assert [e["result"] for e in journal if e["type"] == "step_completed"][:2] == [
        "reserved",
        "done",
    ]


async def _same_store(store: wf.Store) -> tuple[wf.Store, bool]:
    """Another instance of ``store`` (as another process would open it), and whether it is
    one to close (the memory store has no other instance: itself)."""
    from tests.engine.conftest import POSTGRES_DSN, REDIS_URL
    from wf.store.local import LocalStore

    if isinstance(store, LocalStore):
        return LocalStore(store.root), True
    kind = type(store).__name__
    if kind == "PostgresStore":
        from wf.store.postgres import PostgresStore

        return PostgresStore(POSTGRES_DSN, schema=store.schema), True  # type: ignore[attr-defined]
    if kind == "RedisStore":
        from wf.store.redis import RedisStore

        return RedisStore(REDIS_URL, prefix=store.prefix), True  # type: ignore[attr-defined]
    return store, False


@wf.workflow
async def short_nap() -> str:
    await note("napping")
    await wf.sleep(20)  # under the engine's ``suspend_after``: the run stays live
    return "woke"


@pytest.mark.parametrize("workflow", [waits_on_forever, short_nap])
async def test_a_cancel_from_another_engine_reaches_a_live_run_at_once(
    wf_engine: Engine, mock_clock: MockClock, workflow: Any
) -> None:
    # The run is live in this engine (a step in flight, or an idle wait); another
    # engine on its own instance of the store (another process) cancels it. The cancel
    # reaches the run as its store hears of the post, not at the run's next inbox poll.
    mock_clock.autojump = False  # the nap never ends by itself
    wf_engine.inbox_poll = 60.0
    run = await wf.start(workflow)
    async with asyncio.timeout(10):
        while not {"forever started", "napping"} & set(log):
            await asyncio.sleep(0.001)
    await asyncio.sleep(0.05)  # into the step, or the nap
    assert await run.status() == wf.RunStatus.RUNNING
    store, owned = await _same_store(wf_engine.store)
    other = Engine(store, mock_clock)
    try:
        with use_engine(other):
            began = time.monotonic()
            assert await wf.get_run(run.id).cancel()
        async with asyncio.timeout(10):  # the poll is 60 s
            with pytest.raises(wf.RunCancelled):
                await run.result()
        assert time.monotonic() - began < 2.0
    finally:
        await other.aclose()
        if owned:
            await store.close()


class _PostAfterRead:
    """A run's lease whose first inbox read is followed at once by a post to the run: a
    message that lands while the drive records its start, after the read and before the
    drive watches the inbox (a cancel sent right after ``wf.start``)."""

    def __init__(self, lease: Lease, store: wf.Store, kind: str) -> None:
        self._lease = lease
        self._store = store
        self._kind: str | None = kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lease, name)

    async def read_inbox(self, store: wf.Store) -> list[InboxMessage]:
        messages = await self._lease.read_inbox(store)
        if self._kind is not None:
            kind, self._kind = self._kind, None
            await self._store.post(self._lease.run_id, kind, {})
        return messages


@pytest.mark.parametrize("kind", ["cancel", "wake"])
async def test_a_message_posted_between_the_drives_inbox_read_and_its_watch_is_seen_at_once(
    wf_engine: Engine, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # The poll is 60 s and the fake clock does not move: only the drive's own look at what
    # came while it recorded its start can let the run hear of the message.
    mock_clock.autojump = False
    wf_engine.inbox_poll = 60.0
    store = wf_engine.store
    acquire = store.try_acquire

    async def try_acquire(run_id: str) -> Lease | None:
        lease = await acquire(run_id)
        if lease is None:
            return None
        return cast(Lease, _PostAfterRead(lease, store, kind))

    monkeypatch.setattr(store, "try_acquire", try_acquire)
    run = await wf.start(short_nap)
    async with asyncio.timeout(10):  # the poll is 60 s
        if kind == "cancel":
            with pytest.raises(wf.RunCancelled):
                await run.result()
        else:
            assert await run.result() == "woke"
    journal = await store.read_journal(run.id)
    assert f"{kind}_requested" in [e["type"] for e in journal]


@wf.workflow
async def two_naps() -> str:
    await wf.sleep(3600)
    await wf.sleep(7200)
    return "rested"


async def test_an_idle_worker_tells_once_per_timer_which_one_it_waits_for() -> None:
    async with TestEngine() as eng:
        start = eng.mock_clock.now()
        run = await wf.start(two_naps, detach=True)
        told: list[tuple[float, str | None]] = []
        worker = wf.Worker(eng, concurrency=10)
        worker.on_timer = lambda due, run_id: told.append((due, run_id))
        await asyncio.wait_for(worker.run(until_idle=True), 30)
        assert await run.status() == wf.RunStatus.COMPLETED
        assert told == [(start + 3600, run.id), (start + 3600 + 7200, run.id)]


IN_FLIGHT = {"now": 0, "peak": 0}
CLOCKS: list[MockClock] = []


@wf.step
async def occupied(n: int) -> int:
    """In flight for a minute of fake time: the clock moves only once every drive that can
    start its step has started it, so the peak counts all the runs driven at once."""
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["peak"] = max(IN_FLIGHT["peak"], IN_FLIGHT["now"])
    try:
        await CLOCKS[0].sleep_until(CLOCKS[0].now() + 60)
    finally:
        IN_FLIGHT["now"] -= 1
    return n


@wf.workflow
async def occupied_child(n: int) -> int:
    return await occupied(n)


@wf.workflow
async def occupied_parent(n: int) -> int:
    child = await wf.start(occupied_child, n)
    mine = await occupied(n)  # while the child runs, beside it or later
    return mine + await child.result()


async def test_children_driven_beside_their_parents_keep_to_the_workers_concurrency(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    """A child run is driven in the process of its parent, but not beyond the worker's
    places: with two, two steps at most are in flight, and every run still completes."""
    IN_FLIGHT.update(now=0, peak=0)
    CLOCKS[:] = [mock_clock]
    runs = [await wf.start(occupied_parent, i, detach=True) for i in range(4)]
    await asyncio.wait_for(wf.Worker(wf_engine, concurrency=2).run(until_idle=True), 60)
    assert [await run.result() for run in runs] == [0, 2, 4, 6]
    assert IN_FLIGHT["peak"] == 2
    children = await wf_engine.store.list_runs(workflow=occupied_child.name)
    assert sorted(c.status for c in children) == [wf.RunStatus.COMPLETED] * 4


async def test_a_run_started_beside_a_full_worker_waits_for_a_place(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    """``wf.start`` in a process whose worker has every place taken queues the run (it is
    not driven beside them), and the worker drives it once a place frees."""
    IN_FLIGHT.update(now=0, peak=0)
    CLOCKS[:] = [mock_clock]
    first = await wf.start(occupied_child, 1, detach=True)
    worker = wf.Worker(wf_engine, concurrency=1)
    serving = asyncio.ensure_future(worker.run(until_idle=True))
    async with asyncio.timeout(30):
        while IN_FLIGHT["now"] == 0:  # the worker's one place is taken
            await asyncio.sleep(0)
    second = await wf.start(occupied_child, 2)
    assert await second.status() is wf.RunStatus.PENDING
    await asyncio.wait_for(serving, 60)
    assert [await first.result(), await second.result()] == [1, 2]
    assert IN_FLIGHT["peak"] == 1


step_began = threading.Event()
step_may_end = threading.Event()


@wf.step
def held_step() -> str:
    step_began.set()
    step_may_end.wait(30)  # released by the test; the bound only keeps a broken test finite
    return "done"


@wf.workflow
async def held() -> str:
    return await held_step()


async def test_a_cancel_taken_in_is_in_the_stored_record_while_a_step_runs(
    wf_engine: Engine,
) -> None:
    """The listings read records: a request the driver took in (its event journaled, its
    inbox message acknowledged) is in the stored record at once, not at the record's next
    save, which a long sync step puts off (`wf runs` and `wf inspect` then agree)."""
    step_began.clear()
    step_may_end.clear()
    run = await wf.start(held)
    try:
        while not step_began.is_set():
            await asyncio.sleep(0.01)
        await run.cancel(wait=False)
        while not any(
            e["type"] == "cancel_requested" for e in await wf_engine.store.read_journal(run.id)
        ):
            await asyncio.sleep(0.01)
        assert not await wf_engine.store.read_inbox(run.id)
        assert (await wf_engine.store.get_run(run.id)).cancel_requested
    finally:
        step_may_end.set()
    with pytest.raises(wf.RunCancelled):
        await run.result()
