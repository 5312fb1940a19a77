"""A run that can move, moves: the stuck-run regressions of issue #12, on every store.

Each test reproduces one pattern that used to leave a run ``suspended`` while the thing it waited
for was already in the store (a finished child, a received payload, an expired timer), or that
recorded the wrong winner of a race. Repeated several times where the bug was a race.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Sequence
from typing import Any, cast

import pytest

import wf
from tests.slow_store import slow_store
from wf import Engine, Worker
from wf.store import Event, Lease
from wf.store.memory import MemoryStore
from wf.testing import MockClock, TestEngine


@pytest.fixture
def eng(wf_engine: Engine) -> Engine:
    """The engine under test: a fake clock over each store (see conftest)."""
    return wf_engine


async def settled_all(eng: Engine, ids: list[str], timeout: float = 30) -> dict[str, Any]:
    """Drive every run as a worker would until nothing is due; their records by id."""
    worker = Worker(eng, poll=0.05, check_every=0.2)
    await asyncio.wait_for(worker.run(until_idle=True), timeout)
    assert worker.repairs == []  # the invariant held throughout: nothing to repair
    return {run_id: await eng.store.get_run(run_id) for run_id in ids}


# -- 1. a parent awaiting a child that ends at once -----------------------------------------


@wf.workflow
async def instant(x: int) -> int:
    return x + 1


@wf.workflow
async def failing_at_once(x: int) -> int:
    raise ValueError(f"no {x}")


@wf.workflow
async def parent_of_instant(x: int) -> int:
    return await (await wf.start(instant, x)).result()


@wf.workflow
async def parent_of_failing(x: int) -> str:
    try:
        await (await wf.start(failing_at_once, x)).result()
    except wf.RunFailed as exc:
        return f"child failed: {exc.original}"
    return "no"


async def test_a_parent_awaiting_an_instant_child_completes(eng: Engine) -> None:
    for n in range(10):
        run = await wf.start(parent_of_instant, n)
        assert await run.result(timeout=8) == n + 1
    for n in range(5):
        run = await wf.start(parent_of_failing, n)
        assert await run.result(timeout=8) == f"child failed: no {n}"


async def test_detached_parents_of_instant_children_complete_under_a_worker(eng: Engine) -> None:
    ids = [(await wf.start(parent_of_instant, n, detach=True)).id for n in range(10)]
    records = await settled_all(eng, ids)
    assert [r.status for r in records.values()] == [wf.RunStatus.COMPLETED] * 10


# -- 2. children with steps ------------------------------------------------------------------


@wf.step
async def bump(x: int) -> int:
    await asyncio.sleep(0)
    return x + 1


@wf.workflow
async def one_step_child(x: int) -> int:
    return await bump(x)


@wf.workflow
async def four_children(x: int) -> list[int]:
    children = [await wf.start(one_step_child, x * 10 + i) for i in range(4)]
    return list(await asyncio.gather(*(c.result() for c in children)))


async def test_parents_gathering_children_with_steps_all_complete(eng: Engine) -> None:
    ids = [(await wf.start(four_children, n, detach=True)).id for n in range(20)]
    records = await settled_all(eng, ids)
    stuck = [r.id for r in records.values() if r.status is not wf.RunStatus.COMPLETED]
    assert stuck == []
    for n, run_id in enumerate(ids):
        assert await wf.get_run(run_id).result() == [n * 10 + i + 1 for i in range(4)]


# -- 3. a hook resumed from a step of another run in the same worker -------------------------


@wf.workflow
async def hooked(n: int) -> str:
    hook = wf.create_hook(str, token=f"k{n}")
    return await hook.next()


@wf.step
async def send(token: str, payload: str) -> None:
    await wf.resume_hook(token, payload)


@wf.workflow
async def sender(n: int) -> None:
    await send(f"k{n}", f"p{n}")


async def test_a_hook_resumed_from_another_runs_step_wakes_the_run(eng: Engine) -> None:
    hooked_ids = [(await wf.start(hooked, n, detach=True)).id for n in range(10)]
    await settled_all(eng, hooked_ids)  # each waits on its hook now
    sender_ids = [(await wf.start(sender, n, detach=True)).id for n in range(10)]
    records = await settled_all(eng, hooked_ids + sender_ids)
    assert {r.status for r in records.values()} == {wf.RunStatus.COMPLETED}
    for n, run_id in enumerate(hooked_ids):
        assert await wf.get_run(run_id).result() == f"p{n}"


async def test_hooks_resumed_while_their_runs_start_are_not_lost(eng: Engine) -> None:
    hooked_ids = [(await wf.start(hooked, n, detach=True)).id for n in range(10)]
    sender_ids = [(await wf.start(sender, n, detach=True)).id for n in range(10)]
    records = await settled_all(eng, hooked_ids + sender_ids)
    # A sender that ran before its hook existed fails (no such hook); every hooked run whose
    # payload was sent completes.
    for n, run_id in enumerate(hooked_ids):
        if records[sender_ids[n]].status is wf.RunStatus.COMPLETED:
            assert records[run_id].status is wf.RunStatus.COMPLETED


# -- 4. select(hook.next(), sleep) and select(child.result(), sleep): the timer fires ----------


@wf.workflow
async def approval_with_timeout(n: int, seconds: float, hook_first: bool) -> list[Any]:
    hook = wf.create_hook(str, token=f"a{n}")
    if hook_first:
        index, value = await wf.select(hook.next(), wf.sleep(seconds))
        return [index, value]
    index, value = await wf.select(wf.sleep(seconds), hook.next())
    return [index, value]


@wf.workflow
async def sleepy_child(seconds: float) -> str:
    await wf.sleep(seconds)
    return "late"


@wf.workflow
async def child_with_timeout(seconds: float, child_first: bool) -> list[Any]:
    child = await wf.start(sleepy_child, 3600.0)
    if child_first:
        return list(await wf.select(child.result(), wf.sleep(seconds)))
    return list(await wf.select(wf.sleep(seconds), child.result()))


@pytest.mark.parametrize("suspend_after", [0.0, 1.0, 30.0])
@pytest.mark.parametrize("first", [True, False])
async def test_select_of_a_hook_and_a_timer_times_out(
    eng: Engine, suspend_after: float, first: bool
) -> None:
    eng.suspend_after = suspend_after
    run = await wf.start(approval_with_timeout, 1, 2.0, first)
    assert await run.result(timeout=8) == ([1, None] if first else [0, None])


@pytest.mark.parametrize("suspend_after", [0.0, 1.0, 30.0])
@pytest.mark.parametrize("first", [True, False])
async def test_select_of_a_child_and_a_timer_times_out(
    eng: Engine, suspend_after: float, first: bool
) -> None:
    eng.suspend_after = suspend_after
    run = await wf.start(child_with_timeout, 2.0, first)
    assert await run.result(timeout=8) == ([1, None] if first else [0, None])


async def test_a_payload_sent_before_the_timeout_wins(eng: Engine) -> None:
    eng.suspend_after = 1.0
    run = await wf.start(approval_with_timeout, 2, 3600.0, False)
    await run.settle(timeout=10)
    await wf.resume_hook("a2", "yes")
    assert await run.result(timeout=8) == [1, "yes"]


# -- 5. select(slow_step(), sleep): the earliest event by the durable clock wins --------------

step_may_end = asyncio.Event()


@wf.step
async def slow_step() -> str:
    await step_may_end.wait()  # ends only when the test says so: after the timer's deadline
    return "step"


@wf.workflow
async def step_or_timer(seconds: float) -> list[Any]:
    return list(await wf.select(slow_step(), wf.sleep(seconds)))


@pytest.mark.parametrize("seconds", [3.0, 40.0])
async def test_a_timer_beats_a_step_still_running_at_its_deadline(
    eng: Engine, seconds: float
) -> None:
    global step_may_end
    step_may_end = asyncio.Event()
    assert isinstance(eng.clock, MockClock)
    eng.clock.autojump = False
    eng.suspend_after = 2.0
    run = await wf.start(step_or_timer, seconds)
    for _ in range(500):  # until the step runs and the timer is set
        kinds = [e["type"] for e in await eng.store.read_journal(run.id)]
        if "sleep_started" in kinds and run.id in eng.live and eng.live[run.id].waits:
            break
        await asyncio.sleep(0.01)
    eng.clock.jump(seconds + 20)  # the step is still running at the deadline
    for _ in range(50):
        await asyncio.sleep(0)
    step_may_end.set()
    assert await run.result(timeout=8) == [1, None]


# -- 7. a disposed hook replays ------------------------------------------------------------


@wf.workflow
async def dispose_then_sleep() -> str:
    hook = wf.create_hook(str, token="disposable")
    first = await hook.next()
    hook.dispose()
    await wf.sleep(3600)  # suspends: the resume replays the dispose
    return first


async def test_a_disposed_hook_replays(eng: Engine) -> None:
    run = await wf.start(dispose_then_sleep)
    await run.settle(timeout=10)
    await wf.resume_hook("disposable", "x")
    assert await run.result(timeout=8) == "x"
    kinds = [e["type"] for e in await eng.store.read_journal(run.id)]
    assert kinds.count("run_resumed") >= 2 and kinds[-1] == "run_completed"


# -- a child whose driver died between recording its outcome and telling its parent ----------

child_step_may_end = asyncio.Event()


@wf.step
async def held() -> str:
    await child_step_may_end.wait()  # never set: the driver dies in this step
    return "never"


@wf.workflow
async def held_child() -> str:
    return await held()


@wf.workflow
async def parent_of_held_child() -> str:
    return "child said " + await (await wf.start(held_child)).result()


async def test_a_child_that_died_before_telling_its_parent_tells_it_when_driven_again(
    eng: Engine,
) -> None:
    """On the local store a run reads as ended once its outcome is in the journal; a driver
    that finds it so used to stop there, so a child whose driver died before the post left its
    parent suspended for good (found by the model test, tests/reliability/test_model.py)."""
    global child_step_may_end
    child_step_may_end = asyncio.Event()
    parent = await wf.start(parent_of_held_child, detach=True)
    worker = Worker(eng, poll=0.05, check_every=0.2)
    task = asyncio.get_running_loop().create_task(worker.run())
    child_id = f"{parent.id}.0"
    for _ in range(1000):
        ctx = eng.live.get(child_id)
        if ctx is not None and ctx.running_steps and parent.id not in eng.live:
            break
        await asyncio.sleep(0.01)
    assert isinstance(eng, TestEngine)
    lease = None
    for _ in range(20):
        await eng.crash(child_id)  # the child's driver dies in its step...
        lease = await eng.store.try_acquire(child_id)
        if lease is not None:
            break
        # The worker heard the lease come back and took the child first (a store that
        # announces releases at once): let it reach its step, and crash that driver too.
        for _ in range(1000):
            ctx = eng.live.get(child_id)
            if ctx is not None and ctx.running_steps:
                break
            await asyncio.sleep(0.01)
    assert lease is not None  # ...and the next one records the outcome, then dies too
    await lease.append([{"type": "run_completed", "ts": eng.clock.now(), "output": "hi"}])
    await lease.release()
    try:
        assert await parent.result(timeout=10) == "child said hi"
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    assert worker.repairs == []


# -- a wake request taken in while a sleep's start is being recorded ---------------------------


class _FlushingLease:
    """A lease whose appends are written at once and then wait for a flush, as the local
    store's do; the flush of a ``sleep_started`` waits until the test lets it."""

    def __init__(self, lease: Lease, flushed: asyncio.Event) -> None:
        self._lease = lease
        self._flushed = flushed

    async def append(self, events: Sequence[Event]) -> None:
        await self._lease.append(events)
        if any(e["type"] == "sleep_started" for e in events):
            await self._flushed.wait()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lease, name)


class _FlushingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.flushed = asyncio.Event()

    async def try_acquire(self, run_id: str) -> Lease | None:
        lease = await super().try_acquire(run_id)
        return None if lease is None else cast(Lease, _FlushingLease(lease, self.flushed))


@wf.workflow
async def sleeps_an_hour() -> str:
    await wf.sleep(3600)
    return "awake"


async def test_a_wake_taken_in_while_a_sleep_starts_ends_that_sleep() -> None:
    """The wake request is in the journal after the sleep's start, so the sleep is over (a
    replay ends it at once); the live run used to miss it (no wait to resolve yet, and the
    wake was kept for the *next* sleep) and suspended for the hour (found while modelling wake
    requests for tests/reliability/test_model.py)."""
    store = _FlushingStore()
    async with TestEngine(store, MockClock(autojump=False)):
        run = await wf.start(sleeps_an_hour)
        for _ in range(1000):
            kinds = [e["type"] for e in await store.read_journal(run.id)]
            if "sleep_started" in kinds:
                break
            await asyncio.sleep(0)
        assert await run.wake_up()  # while the sleep's start is being flushed
        store.flushed.set()
        record = await run.settle(timeout=10)
        kinds = [e["type"] for e in await store.read_journal(run.id)]
        assert record.status is wf.RunStatus.COMPLETED, kinds
        assert kinds.index("sleep_started") < kinds.index("wake_requested")


# -- a driver that died before it ever ran ------------------------------------------------------


async def test_a_run_whose_driver_died_before_running_is_driven_again(eng: Engine) -> None:
    """A driver task cancelled before its first step (a crash right after ``wf.start``) never
    ran its cleanup, so it stayed in the engine's table of drivers and this process never drove
    the run again: it sat due, with a worker idling beside it (found by the model test)."""
    assert isinstance(eng, TestEngine)
    run = await wf.start(instant, 41)  # its driver is created, not yet started...
    await eng.crash(run)  # ...when the process "dies"
    await settled_all(eng, [run.id])
    assert await run.result(timeout=8) == 42


# -- an operation begun and not recorded before later ones were ------------------------------


@wf.workflow
async def timer_made_before_a_child(token: str) -> list[Any]:
    timer = wf.sleep(1)  # operation #0, begun: its start is recorded when it is awaited
    child = await wf.start(instant, 1)  # operation #1, recorded now
    value = await wf.create_hook(str, token=token).next()  # suspends: #0 is still unrecorded
    await timer
    return [value, await child.result()]


async def test_an_operation_begun_but_not_recorded_replays(
    eng: Engine, recwarn: pytest.WarningsRecorder
) -> None:
    """The journal skips #0 and holds #1: replay used to take the gap for a code change and
    fail the run with NondeterminismError; the operation was begun and never recorded, so it
    runs now (found by the model test: a select's timer made before its child, and a crash).

    The first drive suspends holding the timer un-awaited. wf let go of it, not the code (the
    replay awaits it): no "wf.sleep() call was never awaited" warning, which there used to be
    (on 3.11 at once, on 3.13 in whichever test ran when it was collected)."""
    run = await wf.start(timer_made_before_a_child, "gap")
    await run.settle(timeout=10)
    await wf.resume_hook("gap", "hello")
    assert await run.result(timeout=10) == ["hello", 2]
    gc.collect()
    assert not [str(w.message) for w in recwarn if "never awaited" in str(w.message)]


# -- no suspension in the middle of the store's work -----------------------------------------


@wf.workflow
async def waits_for_a_payload(token: str) -> int:
    return await wf.create_hook(int, token=token).next()


@wf.workflow
async def reaches_out_within_a_long_timeout(other: str) -> str:
    # Longer than ``suspend_after``: the timer alone would let the run suspend (and it does,
    # between operations). Each operation below is the store's work the run awaits.
    async with wf.timeout(600):
        child = await wf.start(instant, 1, detach=True)  # the child's creation
        await wf.create_hook(int, token=f"reach-{other}").get_conflict()  # the token's claim
        await wf.get_run(other).cancel()  # a message posted to another run
    return child.id


async def test_a_run_does_not_suspend_in_the_middle_of_the_stores_work() -> None:
    """A run with a long wait suspends once nothing it does is in flight. A child's creation, a
    hook's registration and a cancel it sends were awaited without counting as in flight: on a
    store with real round trips (PostgreSQL) the run suspended during one, and a ``wf.timeout``
    around it expired while the run sat suspended."""
    async with TestEngine(slow_store(), suspend_after=60) as eng:
        other = await wf.start(waits_for_a_payload, "never")
        await other.settle(timeout=20)  # suspended, waiting for its payload
        run = await wf.start(reaches_out_within_a_long_timeout, other.id)
        assert await run.result(timeout=20) == f"{run.id}.1"
        with pytest.raises(wf.RunCancelled):
            await other.result(timeout=20)
        journal = [e["type"] for e in await eng.store.read_journal(run.id)]
        assert "run_suspended" not in journal, journal
