"""Fan-out, racing, timeouts, rollback and refusal of timing-based asyncio racing."""

from __future__ import annotations

import asyncio
import gc

import pytest

import wf
from tests.engine.late_drives import result_of_a_late_drive
from wf import Engine
from wf.testing import MockClock

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@wf.step
async def work(name: str, delay: float = 0.0) -> str:
    await asyncio.sleep(delay)
    ran.append(name)
    return name


@wf.workflow
async def fan_out() -> list[str]:
    results = await asyncio.gather(work("slow", 0.03), work("fast", 0.0), work("mid", 0.01))
    await wf.sleep(86400)  # suspend, so the result comes from a replay
    async with asyncio.TaskGroup() as group:
        a = group.create_task(work("tg-a", 0.02))
        b = group.create_task(work("tg-b", 0.0))
    return [*results, a.result(), b.result()]


async def test_gather_and_taskgroup_replay_deterministically(wf_engine: Engine) -> None:
    run = await wf.start(fan_out)
    assert await run.result() == ["slow", "fast", "mid", "tg-a", "tg-b"]
    assert sorted(ran) == ["fast", "mid", "slow", "tg-a", "tg-b"]  # each exactly once
    journal = await wf_engine.store.read_journal(run.id)
    ops = {e["op"]: e["result"] for e in journal if e["type"] == "step_completed"}
    assert [ops[i] for i in sorted(ops)] == ["slow", "fast", "mid", "tg-a", "tg-b"]


@wf.step
def square(x: int) -> int:
    ran.append(f"sq{x}")
    return x * x


@wf.workflow
async def squares(n: int) -> list[int]:
    return await wf.map(square, range(n))


async def test_map_returns_results_in_input_order(wf_engine: Engine) -> None:
    run = await wf.start(squares, 5)
    assert await run.result() == [0, 1, 4, 9, 16]


@wf.workflow(name="tests:two_squares")
async def two_squares(x: int) -> list[int]:
    return [await square(x), await square(x + 1)]


@wf.workflow(name="tests:map_over_workflow")
async def map_over_workflow() -> str:
    try:
        await wf.map(two_squares, [1, 2])  # type: ignore[arg-type]
    except wf.UsageError as exc:
        return str(exc)
    return "ran inline"


async def test_map_over_a_workflow_is_refused_with_child_runs_as_the_way(
    wf_engine: Engine,
) -> None:
    """A workflow called per item would run inline, several steps each, whose op ids depend on
    which item's step ends first: a replay could hand one item another's results."""
    message = await (await wf.start(map_over_workflow)).result()
    assert message.startswith("wf.map() runs a step per item, and workflow ")
    assert "wf.start(flow, item)" in message
    assert ran == []  # refused before any item ran


@wf.step(max_retries=0)
async def boom(x: int) -> int:
    raise ValueError(f"bad {x}")


@wf.step
async def slow_item(x: int) -> int:
    await asyncio.sleep(10)
    ran.append(f"slow{x}")
    return x


@wf.workflow
async def failing_map() -> list[int]:
    return await wf.map(slow_item, [1, 2]) + await wf.map(boom, [3])


@wf.workflow
async def map_with_failure() -> list[int]:
    async def either(x: int) -> int:
        return await (boom(x) if x == 2 else slow_item(x))

    return list(await asyncio.gather(*[either(x) for x in (1, 2, 3)]))


@wf.workflow
async def map_failing() -> list[int]:
    return await wf.map(boom, [1, 2])


async def test_a_failure_in_map_fails_the_map(wf_engine: Engine) -> None:
    run = await wf.start(map_failing)
    with pytest.raises(wf.RunFailed, match="bad 1"):
        await run.result()


@wf.step
async def approve_slowly() -> str:
    # A few turns, not real time: the fake clock would jump to the timer meanwhile (a timer
    # that expires while a step runs wins, see test_wakeups).
    for _ in range(3):
        await asyncio.sleep(0)
    return "approved"


@wf.workflow
async def race() -> tuple[int, str]:
    index, value = await wf.select(approve_slowly(), wf.sleep(3600))
    await wf.sleep(86400)
    return index, value


async def test_select_records_the_winner_and_replay_takes_the_same_branch(
    wf_engine: Engine,
) -> None:
    run = await wf.start(race)
    assert await run.result() == [0, "approved"] or await run.result() == (0, "approved")
    journal = await wf_engine.store.read_journal(run.id)
    decided = [e for e in journal if e["type"] == "select_decided"]
    assert len(decided) == 1 and decided[0]["index"] == 0


@wf.workflow
async def step_or_timer() -> list[object]:
    return list(await wf.select(work("step"), wf.sleep(10)))


async def test_a_recorded_step_beats_a_timer_that_expired_before_the_select_decided(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    # A driver recorded the step's completion, then died before recording the decision; the
    # run resumes after the timer's deadline too. The step ended first by the durable clock
    # (its recorded time), so it wins, as it did for the driver that died.
    mock_clock.autojump = False
    recorded = await wf.start(step_or_timer)
    assert await recorded.result() == [0, "step"]
    journal = await wf_engine.store.read_journal(recorded.id)
    cut = next(i for i, e in enumerate(journal) if e["type"] == "select_decided")
    assert {"step_completed", "sleep_started"} <= {e["type"] for e in journal[1:cut]}
    run = await wf.start(step_or_timer, detach=True)
    lease = await wf_engine.store.try_acquire(run.id)
    assert lease is not None
    await lease.append(journal[1:cut])
    await lease.release()
    mock_clock.jump(100)  # past the timer's deadline: both candidates are over at the resume
    assert await run.result() == [0, "step"]


@wf.workflow
async def timer_wins() -> str:
    return str(await wf.first(slow_item(1), wf.sleep(1)))


async def test_first_returns_the_first_result(wf_engine: Engine) -> None:
    run = await wf.start(timer_wins)
    assert await run.result() == "None"
    assert ran == []  # the losing step was cancelled


@wf.workflow
async def uses_asyncio_wait() -> None:
    tasks = [asyncio.create_task(work("a")), asyncio.create_task(work("b"))]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)


@wf.workflow
async def uses_wait_for() -> None:
    await asyncio.wait_for(work("a"), timeout=5)


async def two_works() -> str:
    return await work("a") + await work("b")


@wf.workflow
async def uses_wait_for_around_a_coroutine() -> None:
    await asyncio.wait_for(two_works(), timeout=5)


@wf.workflow
async def uses_as_completed() -> None:
    for next_done in asyncio.as_completed([work("a"), work("b")]):
        await next_done


# asyncio's racing helpers were rewritten in Python 3.12 (wait_for) and 3.13 (as_completed):
# .ci/other-pythons runs this module on 3.12 and 3.13 as well.
@pytest.mark.parametrize(
    "flow",
    [uses_asyncio_wait, uses_wait_for, uses_wait_for_around_a_coroutine, uses_as_completed],
)
async def test_timing_based_asyncio_racing_is_refused_naming_the_replacement(
    wf_engine: Engine, flow: wf.Workflow[[], None], recwarn: pytest.WarningsRecorder
) -> None:
    run = await wf.start(flow)
    with pytest.raises(wf.RunFailed, match=r"wf\.select\(\)"):
        await run.result()
    # The refusal is the report: the refused step call does not warn again, later, as "never
    # awaited" (it did on 3.12+, where wait_for awaits its argument inline).
    gc.collect()
    assert not [str(w.message) for w in recwarn if "never awaited" in str(w.message)]


@wf.step
async def step_using_wait_for() -> str:
    return await asyncio.wait_for(asyncio.sleep(0, "inside"), timeout=5)


@wf.workflow
async def calls_step_using_wait_for() -> str:
    return await step_using_wait_for()


async def test_steps_may_use_asyncio_racing_freely(wf_engine: Engine) -> None:
    run = await wf.start(calls_step_using_wait_for)
    assert await run.result() == "inside"


@wf.workflow
async def guarded(hours: float) -> str:
    try:
        async with wf.timeout(3600):
            await wf.sleep(hours * 3600)
            return "in time"
    except TimeoutError:
        await work("after-timeout")
        return "timed out"


async def test_timeout_is_durable_and_raises_timeout_error(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    start = mock_clock.now()
    run = await wf.start(guarded, 5.0)
    assert await run.result() == "timed out"
    assert 3600 <= mock_clock.now() - start < 5 * 3600
    assert ran == ["after-timeout"]
    quick = await wf.start(guarded, 0.5)
    assert await quick.result() == "in time"


@wf.workflow
async def step_outlives_timeout() -> str:
    try:
        async with wf.timeout(0.01):
            await work("long-step", 0.05)
            await work("never")
    except TimeoutError:
        return "timed out"
    return "no timeout"


async def test_a_running_step_finishes_and_the_next_operation_is_stopped(
    wf_engine: Engine,
) -> None:
    wf_engine.clock = wf_engine.clock  # real asyncio sleeps inside the step, fake timer
    run = await wf.start(step_outlives_timeout)
    assert await run.result() == "timed out"
    assert ran == ["long-step"]


@wf.workflow
async def last_step_outlives_timeout() -> list[str]:
    seen = []
    try:
        async with wf.timeout(0.01) as limit:
            await work("long-step", 0.05)
        seen.append(f"no TimeoutError, expired={limit.expired}")
    except TimeoutError:
        seen.append(f"TimeoutError, expired={limit.expired}")
    await wf.sleep(86400)  # suspends: the result comes from a replay, which must agree
    return seen


async def test_a_deadline_passed_during_the_last_step_raises_at_the_end_of_the_block(
    wf_engine: Engine,
) -> None:
    run = await wf.start(last_step_outlives_timeout)
    assert await run.result() == ["TimeoutError, expired=True"]
    assert ran == ["long-step"]  # the step ran once and finished


@wf.workflow
async def in_time_then_sleeps() -> str:
    async with wf.timeout(60):
        await work("quick")
    await wf.sleep(86400)  # the replay comes long after the deadline: no TimeoutError then
    return "in time"


async def test_a_block_that_ended_in_time_is_not_timed_out_by_its_replay(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    start = mock_clock.now()
    run = await wf.start(in_time_then_sleeps)
    assert await run.result() == "in time"
    assert mock_clock.now() - start >= 86400


@wf.workflow
async def past_deadlines() -> list[str]:
    import datetime

    seen: list[str] = []
    try:
        async with wf.deadline(datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)):
            for i in range(3):
                seen.append(await work(f"past {i}"))
        seen.append("no TimeoutError")
    except TimeoutError:
        seen.append("TimeoutError")
    try:
        async with wf.timeout(0):
            seen.append(await work("zero"))
        seen.append("no TimeoutError")
    except TimeoutError:
        seen.append("TimeoutError")
    await wf.sleep(86400)  # suspends: the replay must stop the same operations
    return seen


async def test_a_deadline_already_passed_stops_the_first_operation_of_the_block(
    wf_engine: Engine,
) -> None:
    run = await wf.start(past_deadlines)
    assert await run.result() == ["TimeoutError", "TimeoutError"]
    assert ran == []


@wf.step
def book(what: str) -> str:
    ran.append(f"book {what}")
    return what


@wf.step
def unbook(what: str) -> None:
    ran.append(f"unbook {what}")


@wf.step(max_retries=0)
def pay() -> None:
    raise wf.FatalError("card declined")


@wf.workflow
async def trip() -> None:
    for item in ("flight", "hotel", "car"):
        await book(item)
        wf.rollback(unbook, item)
    await pay()


async def test_rollbacks_run_last_in_first_out_when_the_run_fails(wf_engine: Engine) -> None:
    run = await wf.start(trip)
    with pytest.raises(wf.RunFailed, match="card declined"):
        await run.result()
    assert ran == [
        "book flight",
        "book hotel",
        "book car",
        "unbook car",
        "unbook hotel",
        "unbook flight",
    ]
    journal = await wf_engine.store.read_journal(run.id)
    assert len([e for e in journal if e["type"] == "rollback_registered"]) == 3


@wf.workflow
async def trip_then_wait() -> None:
    await book("flight")
    wf.rollback(unbook, "flight")
    await wf.sleep(7 * 86400)


async def test_rollbacks_run_when_the_run_is_cancelled(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    run = await wf.start(trip_then_wait)
    await wf_engine.wait_driven(run)
    await run.cancel(wait=True)
    assert ran == ["book flight", "unbook flight"]
    assert await run.status() == wf.RunStatus.CANCELLED


@wf.step
def busy_for(seconds: float) -> float:
    import time

    time.sleep(seconds)  # real work in a thread: the fake clock must not jump meanwhile
    return seconds


@wf.workflow
async def timed_sync_steps() -> list[float]:
    async with wf.timeout(10):
        return [await busy_for(0.05), await busy_for(0.05)]


# On PostgreSQL too: the store's round trips between the steps hold the clock still as well.
async def test_the_mock_clock_stands_still_while_sync_steps_run_in_threads(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    start = mock_clock.now()
    run = await wf.start(timed_sync_steps)
    assert await run.result() == [0.05, 0.05]
    assert mock_clock.now() - start < 10


@wf.workflow
async def approval_with_timeout(token: str) -> object:
    hook = wf.create_hook(str, token=token)
    return await wf.select(hook.next(), wf.sleep(120))


async def test_a_select_dropped_by_a_suspension_leaves_no_callback_behind() -> None:
    """The run suspends while both branches wait; the select's branches are cancelled then, and
    their callbacks must not fire into the finished select (asyncio logs that as an error)."""
    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    async with wf.testing.TestEngine(suspend_after=1.0) as eng:
        run = await wf.start(approval_with_timeout, "sel-1")
        record = await run.settle(timeout=30)
        assert record.status == wf.RunStatus.SUSPENDED
        await eng.settle()  # the timer fires on the fake clock
        assert await run.result() == (1, None)
    await asyncio.sleep(0)
    assert errors == []


@wf.workflow
async def block_in_time_beside_a_long_sleep() -> str:
    sleeper = asyncio.ensure_future(wf.sleep(86400))  # begun before the block, awaited after
    try:
        async with wf.timeout(60):
            await work("in the block")  # ends at once, long before the deadline
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await sleeper  # suspends: a replay a day later ends the block as its last recorded op
    return seen


async def test_a_block_whose_last_op_ends_the_journal_is_not_timed_out_by_a_later_replay(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    """The replay reaches the block's end with nothing recorded after it (not "replaying"),
    a day after the deadline: the journal (its op done at t=0) decides, not that clock."""
    run = await wf.start(block_in_time_beside_a_long_sleep)
    assert await run.result() == "in time"
    journal = await wf_engine.store.read_journal(run.id)
    assert not [e for e in journal if e["type"] == "cancel_delivered"]
    assert ran == ["in the block"]


_clocks: list[MockClock] = []


@wf.step
async def takes_two_minutes() -> str:
    _clocks[0].jump(120)  # the step's work takes two minutes of the (fake) clock
    return "slow"


@wf.workflow
async def block_late_beside_a_long_sleep() -> str:
    sleeper = asyncio.ensure_future(wf.sleep(86400))
    try:
        async with wf.timeout(60):
            await takes_two_minutes()  # ends after the deadline, nothing left to stop
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await sleeper
    return seen


async def test_a_block_that_ended_late_is_timed_out_by_its_replay_too(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    _clocks[:] = [mock_clock]
    run = await wf.start(block_late_beside_a_long_sleep)
    assert await run.result() == "timed out"
    journal = await wf_engine.store.read_journal(run.id)
    marks = [e for e in journal if e["type"] == "cancel_delivered"]
    assert [m["at"] for m in marks] == ["exit"]


@wf.workflow
async def block_won_by_a_step_over_a_longer_sleep() -> str:
    keeper = asyncio.ensure_future(wf.sleep(86400))  # begun before the block, awaited after
    try:
        async with wf.timeout(60):
            await wf.first(work("quick"), wf.sleep(100))  # the step wins at once
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await keeper  # suspends: the replay a day later reaches the block's end with nothing after
    return seen


async def test_a_block_ended_in_time_by_a_select_stays_in_time_on_replay(
    wf_engine: Engine,
) -> None:
    """The first drive ends the block at once, in time, and journals so (``timeout_ended``):
    every replay (the one a day later at the keeper) takes that, whatever its clock."""
    run = await wf.start(block_won_by_a_step_over_a_longer_sleep)
    assert await run.result() == "in time"
    journal = await wf_engine.store.read_journal(run.id)
    assert not [e for e in journal if e["type"] == "cancel_delivered"]


@wf.workflow
async def block_awaits_an_earlier_sleep(seconds: float) -> str:
    sleeper = asyncio.ensure_future(wf.sleep(seconds))  # begun before the block
    try:
        async with wf.timeout(60):
            await sleeper  # the block's only wait, an operation begun outside it
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await wf.sleep(86400)
    return seen


@pytest.mark.parametrize(("seconds", "seen"), [(120.0, "timed out"), (45.0, "in time")])
async def test_a_block_held_by_an_earlier_sleep_ends_when_that_sleep_does(
    wf_engine: Engine, seconds: float, seen: str
) -> None:
    """The run suspends inside the block (the sleep is longer than ``suspend_after``): the
    drive that ends the block replays it, and decides as a drive that never suspended does."""
    run = await wf.start(block_awaits_an_earlier_sleep, seconds)
    assert await run.result() == seen
    async with wf.testing.TestEngine(suspend_after=86400 * 2) as never_suspends:
        with never_suspends.installed():
            alone = await wf.start(block_awaits_an_earlier_sleep, seconds)
            assert await alone.result() == seen


@wf.workflow
async def block_awaits_an_earlier_long_sleep() -> str:
    sleeper = asyncio.ensure_future(wf.sleep(3600))  # begun before the block
    try:
        async with wf.timeout(60):
            await sleeper  # ended by a wake request
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await wf.sleep(86400)
    return seen


@pytest.mark.parametrize(("woken_after", "seen"), [(100.0, "timed out"), (30.0, "in time")])
async def test_a_block_held_by_a_woken_earlier_sleep_ends_at_the_wake(
    wf_engine: Engine, mock_clock: MockClock, woken_after: float, seen: str
) -> None:
    mock_clock.autojump = False
    run = await wf.start(block_awaits_an_earlier_long_sleep)
    record = await run.settle(timeout=30)
    assert record.status == wf.RunStatus.SUSPENDED
    mock_clock.jump(woken_after)
    await wf_engine.quiet()
    await run.settle(timeout=30)
    assert await run.wake_up()
    mock_clock.autojump = True
    assert await run.result() == seen


@wf.workflow
async def hook_in_a_block_beside_an_earlier_sleep(token: str, first: float) -> str:
    early = asyncio.ensure_future(wf.sleep(first))  # outside the block
    hook = wf.create_hook(str, token=token)
    try:
        async with wf.timeout(60):
            if first < 60:
                await early  # the block waits for it first, then for the hook
            await hook.next()
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await early
    return seen


@pytest.mark.parametrize("first", [3600.0, 45.0, 20.0])
async def test_a_run_suspended_in_a_block_beside_an_earlier_sleep_wakes_at_the_deadline(
    wf_engine: Engine, mock_clock: MockClock, first: float
) -> None:
    start = mock_clock.now()
    run = await wf.start(hook_in_a_block_beside_an_earlier_sleep, f"beside-{first}", first)
    assert await run.result() == "timed out"
    journal = await wf_engine.store.read_journal(run.id)
    [delivered] = [e for e in journal if e["type"] == "cancel_delivered"]
    assert (delivered["at"], delivered["ts"] - start) == ("wait", 60.0)


@pytest.mark.parametrize(("seconds", "seen"), [(120.0, "timed out"), (45.0, "in time")])
async def test_a_block_held_by_an_earlier_sleep_is_decided_by_it_on_a_late_resume(
    wf_engine: Engine, mock_clock: MockClock, seconds: float, seen: str
) -> None:
    """The run is resumed long after both the sleep and the deadline: the block ended when the
    sleep did, by the durable clock, not when the late drive reached it."""
    mock_clock.autojump = False
    run = await wf.start(block_awaits_an_earlier_sleep, seconds)
    record = await run.settle(timeout=30)
    assert record.status == wf.RunStatus.SUSPENDED
    mock_clock.jump(1000)  # one resume, long after both
    mock_clock.autojump = True
    assert await run.result() == seen


@wf.workflow
async def block_beside_a_sibling_sleep(inner: float, sibling: float) -> list[str]:
    async def timed() -> str:
        try:
            async with wf.timeout(60):
                await wf.sleep(inner)  # the block's only wait: 45 s, in time
            return "in time"
        except TimeoutError:
            return "timed out"

    async def other() -> str:
        await wf.sleep(sibling)  # not in the block, not awaited by it
        return "other"

    return list(await asyncio.gather(timed(), other()))


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize("sibling", [50.0, 100.0, 3600.0])
async def test_a_sibling_sleep_does_not_decide_the_block(
    wf_engine: Engine, mock_clock: MockClock, late: bool, sibling: float
) -> None:
    mock_clock.autojump = not late
    run = await wf.start(block_beside_a_sibling_sleep, 45.0, sibling)
    if late:
        record = await run.settle(timeout=30)
        assert record.status == wf.RunStatus.SUSPENDED
        mock_clock.jump(1000)  # one resume, long after the block's sleep and the sibling's
        mock_clock.autojump = True
    assert (await run.result())[0] == "in time"


@wf.workflow
async def block_beside_an_earlier_keeper(inner: float) -> str:
    keeper = asyncio.ensure_future(wf.sleep(100))  # begun before the block, never awaited in it
    try:
        async with wf.timeout(60):
            await wf.sleep(inner)  # what the block waits for: ends in time
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await keeper
    return seen


async def test_a_late_resume_of_a_block_beside_an_earlier_sleep_it_never_awaited(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    """The pattern of test_a_block_held_by_an_earlier_sleep_is_decided_by_it_on_a_late_resume,
    the earlier sleep outside the block this time: the block waited 45 s only."""
    mock_clock.autojump = False
    run = await wf.start(block_beside_an_earlier_keeper, 45.0)
    record = await run.settle(timeout=30)
    assert record.status == wf.RunStatus.SUSPENDED
    mock_clock.jump(1000)
    mock_clock.autojump = True
    assert await run.result() == "in time"


async def test_a_lost_timeout_ended_is_decided_again_as_the_first_drive_did(
    mock_clock: MockClock,
) -> None:
    """A crash after the block ended in time, before the next durable write: the resume must
    decide the block as the first drive did (timeout_ended dropped by hand, as a SIGKILL within
    SOON loses PostgreSQL's / Redis's write_soon buffer)."""
    store = wf.testing.MemoryStore()
    mock_clock.autojump = False
    async with wf.testing.TestEngine(store, mock_clock, suspend_after=86400) as eng:
        with eng.installed():
            run = await wf.start(block_beside_an_earlier_keeper, 10.0)
            await eng.quiet()
            mock_clock.jump(50)  # the block ended at +10, in time; the keeper sleeps on
            await eng.quiet()
            await eng.crash(run)
    journal = store._runs[run.id].journal
    assert [e["type"] for e in journal][-1] == "timeout_ended"
    journal.pop()  # the write_soon the crash lost
    mock_clock.jump(150)  # resumed at +200
    mock_clock.autojump = True
    async with wf.testing.TestEngine(store, mock_clock) as eng2:
        with eng2.installed():
            assert await wf.get_run(run.id).result() == "in time"


@wf.workflow
async def nested_blocks(inner: float) -> str:
    try:
        async with wf.timeout(100):
            async with wf.timeout(60):
                await wf.sleep(inner)  # 45 s: both blocks end in time
            seen = "inner in time"
    except TimeoutError:
        return "outer timed out"
    await wf.sleep(86400)
    return seen


@pytest.mark.parametrize("late", [False, True])
async def test_nested_blocks_resumed_late(
    wf_engine: Engine, mock_clock: MockClock, late: bool
) -> None:
    mock_clock.autojump = not late
    run = await wf.start(nested_blocks, 45.0)
    if late:
        record = await run.settle(timeout=30)
        assert record.status == wf.RunStatus.SUSPENDED
        mock_clock.jump(1000)
        mock_clock.autojump = True
    assert await run.result() == "inner in time"


@wf.step
async def quick_one(x: str) -> str:
    return x


@wf.workflow
async def select_then_hook(token: str) -> str:
    hook = wf.create_hook(str, token=token)
    try:
        async with wf.timeout(60):
            await wf.first(quick_one("q"), wf.sleep(100))  # the step wins at once
            await hook.next()  # the run suspends inside the block
        return "in time"
    except TimeoutError:
        return "timed out"


async def test_select_loser_in_a_block_ended_by_a_later_drive(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    """The select's dropped sleep (100 s, past the block's 60 s) is no end of the block: a
    later drive ends the block at the payload (+10 s), in time."""
    mock_clock.autojump = False
    run = await wf.start(select_then_hook, "mut-probe")
    assert (await run.settle(timeout=30)).status == wf.RunStatus.SUSPENDED
    mock_clock.jump(10)
    await wf.resume_hook("mut-probe", "p")
    mock_clock.autojump = True
    assert await run.result() == "in time"


@wf.workflow
async def block_races_a_hook(token: str, seconds: float) -> str:
    hook = wf.create_hook(str, token=token)
    try:
        async with wf.timeout(60):
            got = await wf.first(hook.next(), wf.sleep(seconds))
        return f"in time ({got})"
    except TimeoutError:
        return "timed out"


async def test_a_select_decided_by_a_late_drive_ends_the_block_when_its_payload_came(
    mock_clock: MockClock,
) -> None:
    """The payload reached the store at +10 while no worker ran; the drive that decides the
    select (and the block) runs at +1000, the losing sleep (100 s) over by then too: the
    block ended at +10, in time."""
    store = wf.testing.MemoryStore()
    mock_clock.autojump = False
    async with wf.testing.TestEngine(store, mock_clock) as eng:
        with eng.installed():
            run = await wf.start(block_races_a_hook, "late-select", 100.0)
            assert (await run.settle(timeout=30)).status == wf.RunStatus.SUSPENDED
            mock_clock.jump(10)
            await wf.resume_hook("late-select", "p")
            await eng.crash(run)
    assert await result_of_a_late_drive(store, mock_clock, run.id, after=990) == "in time (p)"
