"""Cron schedules on the fake clock: registering, firing, catch-up, overlap, DST, exactly once."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from collections.abc import Sequence
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import wf
import wf.admin
from wf import Engine, Worker
from wf.engine._cron import next_fire
from wf.engine._current import use_engine
from wf.engine._schedules import DROPPED, MISSED, PAUSED, fire, fire_run_id, queue_options
from wf.store import Event, Schedule, Store
from wf.store.local import LocalStore, _upkeep
from wf.store.memory import MemoryStore
from wf.testing import MockClock, TestEngine

T0 = 1_800_000_000.0
"""The fake clock's start: a whole minute (2027-01-15 08:00:00 UTC)."""
MIN = 60.0


@wf.workflow
async def tick(n: int = 0) -> int:
    return n


@wf.workflow
async def slow(n: int = 0) -> int:
    await wf.sleep(90)  # longer than the schedule's period: the next fire finds it going
    return n


async def work_until(engine: Engine, until: float, **options: object) -> Worker:
    """Run a worker on ``engine`` while the fake clock steps to ``until``.

    The clock is stepped by hand from one due time to the next (a fire, a timer), each step
    once the worker has done everything due: on a store doing real I/O, auto-jumping could move
    time while a query is in flight.
    """
    clock = engine.clock
    assert isinstance(clock, MockClock)
    clock.autojump = False
    worker = Worker(engine, retention=False, **options)  # type: ignore[arg-type]
    task = asyncio.ensure_future(worker.run())
    try:
        while True:
            await settled(engine, worker)
            now = clock.now()
            if now >= until:
                break
            upcoming = [worker.fired_at, await engine.store.next_due_at(), until]
            clock.jump(min(t for t in upcoming if t is not None and t > now) - now)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    return worker


async def settled(engine: Engine, worker: Worker) -> None:
    """Until the worker has fired what is due and driven every due run (real time, bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    calm = 0
    while loop.time() < deadline:
        now = engine.clock.now()
        busy = [t for t in engine.drivers.values() if not t.done()]
        looked = worker.schedules_read_at is not None
        fired = looked and (worker.fired_at is None or worker.fired_at > now)
        due = [
            r
            for r in await engine.store.due_runs(now)
            if r not in engine.holds and r not in worker.waiting
        ]
        # A run its group holds back (or whose lane the worker's claim found full) is not due
        # yet; the worker looks at it again once the run ahead ends, so calm must last a few
        # looks before time moves on.
        calm = calm + 1 if not busy and fired and not due else 0
        if calm >= 3:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the worker did not settle: held {engine.holds}, at {engine.clock.now()}")


async def runs_of(engine: Engine, schedule_id: str) -> list[wf.RunRecord]:
    runs = await engine.store.list_runs(limit=1000)
    return sorted((r for r in runs if r.schedule_id == schedule_id), key=lambda r: r.id)


# -- registering ---------------------------------------------------------------------------


async def test_a_schedule_fires_on_time_with_its_input(wf_engine: Engine) -> None:
    made = await wf.schedule("every-minute", tick, cron="* * * * *", input={"n": 7})
    assert made.next_run == T0 + MIN
    await work_until(wf_engine, T0 + 5 * MIN + 30)
    runs = await runs_of(wf_engine, "every-minute")
    assert [r.id for r in runs] == [fire_run_id("every-minute", T0 + k * MIN) for k in range(1, 6)]
    assert all(r.status is wf.RunStatus.COMPLETED for r in runs)
    assert [await wf.get_run(r.id).result() for r in runs] == [7] * 5
    # Each run was created at its fire time: the worker waited on the fire time, not a poll.
    assert [r.created_at for r in runs] == [T0 + k * MIN for k in range(1, 6)]
    (state,) = await wf.schedules()
    assert (state.last_fire_at, state.next_run) == (T0 + 5 * MIN, T0 + 6 * MIN)
    assert state.last_run_id == runs[-1].id
    assert state.skipped == 0


async def test_registering_validates_each_field(wf_engine: Engine) -> None:
    with pytest.raises(wf.UsageError, match=r"^cron: '61 \* \* \* \*'"):
        await wf.schedule("s", tick, cron="61 * * * *")
    with pytest.raises(wf.UsageError, match=r"^cron: an expression is required"):
        await wf.schedule("s", tick, cron=" ")
    with pytest.raises(wf.UsageError, match=r"^tz: unknown time zone 'Mars/Olympus'"):
        await wf.schedule("s", tick, cron="* * * * *", tz="Mars/Olympus")
    with pytest.raises(wf.InputValidationError, match="parameter 'n'"):
        await wf.schedule("s", tick, cron="* * * * *", input={"n": "many"})
    with pytest.raises(wf.InputValidationError, match="'bogus'"):
        await wf.schedule("s", tick, cron="* * * * *", input={"bogus": 1})
    with pytest.raises(wf.UsageError, match=r"^catch_up: 'some'"):
        await wf.schedule("s", tick, cron="* * * * *", catch_up="some")
    with pytest.raises(wf.UsageError, match=r"^schedule id"):
        await wf.schedule("../x", tick, cron="* * * * *")
    # What would be stored and then refused by every reader (or fail every fire):
    with pytest.raises(wf.UsageError, match=r"^tz: unknown time zone 'AAAA"):
        await wf.schedule("s", tick, cron="* * * * *", tz="A" * 300)  # too long for a file
    with pytest.raises(wf.UsageError, match=r"^allow_overlap: expected true or false, got 'no'"):
        await wf.schedule("s", tick, cron="* * * * *", allow_overlap="no")  # type: ignore[arg-type]
    with pytest.raises(wf.UsageError, match=r"^skip_if_running: expected true or false"):
        await wf.schedule("s", tick, cron="* * * * *", skip_if_running=10**30)  # type: ignore[arg-type]
    with pytest.raises(wf.UsageError, match=r"priority must be an integer from 0 to 2097151"):
        await wf.schedule("s", tick, cron="* * * * *", priority=-1)
    with pytest.raises(wf.UsageError, match=r"priority must be an integer from 0 to 2097151"):
        await wf.schedule("s", tick, cron="* * * * *", priority=10**30)
    assert await wf.schedules() == []  # nothing half-registered


@pytest.mark.parametrize("name", ["localtime", "posixrules", "Factory", "posix/Europe/Paris"])
async def test_a_zone_that_depends_on_the_machine_is_refused(wf_engine: Engine, name: str) -> None:
    """``localtime`` is whatever zone this machine is set to: another worker's may differ."""
    with pytest.raises(wf.UsageError, match=rf"^tz: '{name}' is not a place's zone"):
        await wf.schedule("s", tick, cron="* * * * *", tz=name)
    assert await wf.schedules() == []


async def test_a_zoneinfo_is_kept_as_its_name(wf_engine: Engine) -> None:
    made = await wf.schedule("s", tick, cron="0 3 * * *", tz=ZoneInfo("Europe/Paris"))
    assert made.tz == "Europe/Paris"
    assert (await wf.schedule("u", tick, cron="0 3 * * *", tz=dt.UTC)).tz == "UTC"
    with pytest.raises(wf.UsageError, match=r"^tz: expected an IANA zone name"):
        await wf.schedule("t", tick, cron="0 3 * * *", tz=dt.timezone(dt.timedelta(hours=2)))


async def test_registering_again_replaces_in_place(wf_engine: Engine) -> None:
    await wf.schedule("s", tick, cron="* * * * *", input=1)
    await work_until(wf_engine, T0 + 2 * MIN + 1)
    before = (await wf.schedules())[0]
    again = await wf.schedule("s", tick, cron="* * * * *", input=2)
    assert again.next_run == before.next_run  # same times: the next fire stays
    assert (again.last_run_id, again.last_fire_at) == (before.last_run_id, before.last_fire_at)
    moved = await wf.schedule("s", tick, cron="0 * * * *", input=3)
    assert moved.next_run == T0 + 60 * MIN  # new times: computed again
    assert [s.id for s in await wf.schedules()] == ["s"]
    assert await wf.unschedule("s") is True
    assert await wf.unschedule("s") is False
    assert await wf.schedules() == []


@pytest.mark.parametrize(
    ("cron", "tz", "message"),
    [
        ("0 0 30 2 *", None, r"^cron: '0 0 30 2 \*' never fires \(no date matches it\)$"),
        ("0 0 31 4 *", "Europe/Paris", r"^cron: '0 0 31 4 \*' never fires \(no date matches it\)$"),
        # croniter's seconds and year fields: a series wholly before T0 (2027-01-15 08:00 UTC)
        (
            "0 9 1 1 * */30 2027",
            "Europe/Paris",
            r"^cron: '0 9 1 1 \* \*/30 2027' never fires again "
            r"\(its last time was 2027-01-01 09:00:30 CET\)$",
        ),
        ("0 0 * * * 0 2020", None, r"never fires again \(its last time was 2020-12-31 00:00 UTC\)"),
    ],
)
async def test_a_cron_with_no_fire_ahead_is_refused(
    wf_engine: Engine, cron: str, tz: str | None, message: str
) -> None:
    with pytest.raises(wf.UsageError, match=message):
        await wf.schedule("never", tick, cron=cron, tz=tz)
    assert await wf.schedules() == []  # nothing registered


async def test_a_far_year_is_searched_to_the_end_of_the_calendar(wf_engine: Engine) -> None:
    made = await wf.schedule("far", tick, cron="0 0 1 1 * 0 2099")  # 72 years ahead of T0
    assert made.next_run == dt.datetime(2099, 1, 1, tzinfo=dt.UTC).timestamp()
    assert made.ended is False


LAST_SERIES = "1 8 15 1 * */30 2027"
"""croniter's seconds and year fields: fires at 08:01:00 and 08:01:30 on 2027-01-15 (T0's day),
then never again."""


async def test_a_series_that_ends_fires_its_last_fire_then_is_ended(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    await wf.schedule("last", tick, cron=LAST_SERIES, input=3)
    await wf.schedule("steady", tick, cron="*/2 * * * *")
    # The worker goes on past the end: it neither exits nor stops firing the other schedule.
    with caplog.at_level("INFO", logger="wf.schedules"):
        await work_until(wf_engine, T0 + 10 * MIN + 1)
    # A worker's log line says its moment in ISO 8601, UTC (docs/cli.md, "Times").
    said = [r.getMessage() for r in caplog.records if "series has ended" in r.getMessage()]
    assert said == [
        "schedule last: its series has ended (its last fire was 2027-01-15T08:01:30+00:00)"
    ]
    runs = await runs_of(wf_engine, "last")
    assert [r.id for r in runs] == [fire_run_id("last", T0 + MIN), fire_run_id("last", T0 + 90)]
    assert all(r.status is wf.RunStatus.COMPLETED for r in runs)
    assert len(await runs_of(wf_engine, "steady")) == 5
    ended, steady = await wf.schedules()
    assert (ended.id, ended.ended, ended.next_run) == ("last", True, None)
    assert (ended.last_fire_at, ended.last_run_id) == (T0 + 90, runs[-1].id)
    assert ended.last_error is None and ended.skipped == 0
    assert (steady.ended, steady.next_run) == (False, T0 + 12 * MIN)
    # Ended is final: a later worker pass computes nothing and starts nothing for it.
    await work_until(wf_engine, T0 + 20 * MIN + 1)
    assert len(await runs_of(wf_engine, "last")) == 2
    assert (await wf.schedules())[0] == ended
    # A healthy run started now is driven as usual.
    run = await wf.start(tick, 5)
    assert await run.result(timeout=10) == 5
    # The same series again is refused (nothing left of it); another cron revives it.
    with pytest.raises(wf.UsageError, match="never fires again"):
        await wf.schedule("last", tick, cron=LAST_SERIES, input=3)
    revived = await wf.schedule("last", tick, cron="0 9 * * *", input=3)
    assert (revived.ended, revived.next_run) == (False, T0 + 60 * MIN)
    assert revived.last_run_id == ended.last_run_id  # its history is kept


async def test_the_last_fires_of_an_ended_series_are_caught_up(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await wf.schedule("last", tick, cron=LAST_SERIES)
    mock_clock.jump(30 * MIN)  # no worker ran through both fires
    await work_until(wf_engine, T0 + 30 * MIN + 1)
    (run,) = await runs_of(wf_engine, "last")
    assert run.id == fire_run_id("last", T0 + 90)  # catch_up="one": the latest
    (state,) = await wf.schedules()
    assert (state.ended, state.next_run, state.skipped) == (True, None, 1)


async def test_a_schedule_left_due_on_its_last_fire_is_fired_then_ended(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    # As an older wf left it: due on the last fire of a series that has ended since, no flag.
    old = Schedule("last", "tests.engine.test_schedules:tick", LAST_SERIES, next_run=T0 + 90)
    await wf_engine.store.save_schedule(old)
    mock_clock.jump(MIN * 5)
    after = await fire(wf_engine, "last", mock_clock.now())
    assert after is not None
    assert (after.ended, after.next_run, after.last_run_id) == (
        True,
        None,
        fire_run_id("last", T0 + 90),
    )
    assert await fire(wf_engine, "last", mock_clock.now() + 3600) == after  # not computed again


# -- catch-up ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("catch_up", "skip_if_running", "expected"),
    [("one", True, 1), ("none", True, 0), ("all", False, 10), ("all", True, 1)],
)
async def test_fires_missed_while_no_worker_ran(
    wf_engine: Engine,
    mock_clock: MockClock,
    catch_up: str,
    skip_if_running: bool,
    expected: int,
) -> None:
    await wf.schedule(
        "s", tick, cron="*/5 * * * *", catch_up=catch_up, skip_if_running=skip_if_running
    )
    mock_clock.jump(50 * MIN + 90)  # ten fires missed; the latest is 90 s late
    await work_until(wf_engine, T0 + 50 * MIN + 91)
    runs = await runs_of(wf_engine, "s")
    assert len(runs) == expected
    state = (await wf.schedules())[0]
    assert state.skipped == 10 - expected
    assert state.next_run == T0 + 55 * MIN
    if catch_up == "one":
        assert runs[0].id == fire_run_id("s", T0 + 50 * MIN)  # the latest of the missed
    if expected < 10:
        assert state.last_skip_reason is not None


TEN_YEARS = 10 * 365 * 86400.0
"""A gap of about 5.3 million minutely fires: a catch-up that walked them would take minutes."""


@wf.workflow
async def waits(n: int = 0) -> int:
    hook = wf.create_hook(int, token=f"waits-{n}")
    return await hook.next()


async def until_idle(engine: Engine) -> Worker:
    """A ``--until-idle`` worker on the fake clock, stopped by hand (bounded in real time)."""
    clock = engine.clock
    assert isinstance(clock, MockClock)
    clock.autojump = False  # time stands still: only what is due now is done
    worker = Worker(engine, retention=False)
    await asyncio.wait_for(worker.run(until_idle=True), 20)
    return worker


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("cron", "allow_overlap", "step"),
    [("* * * * *", False, MIN), ("* * * * * *", True, 1.0)],  # a day.sh-like every second
)
async def test_catch_up_one_ten_years_behind_starts_one_run_at_once(
    wf_engine: Engine, mock_clock: MockClock, cron: str, allow_overlap: bool, step: float
) -> None:
    await wf.schedule("s", tick, cron=cron, allow_overlap=allow_overlap, input=1)
    mock_clock.jump(TEN_YEARS + 0.5)  # no worker ran for ten years
    other = await wf.start(tick, 5, detach=True)  # queued meanwhile: not held up by the catch-up
    await until_idle(wf_engine)
    now = mock_clock.now()
    latest = T0 + TEN_YEARS
    (run,) = await runs_of(wf_engine, "s")
    assert run.id == fire_run_id("s", latest)  # the latest missed fire
    assert run.status is wf.RunStatus.COMPLETED
    assert await other.status() is wf.RunStatus.COMPLETED  # in the same until-idle pass
    (state,) = await wf.schedules()
    assert state.next_run == latest + step > now
    assert (state.last_fire_at, state.last_run_id) == (latest, run.id)
    assert state.skipped >= 1000  # counted up to a bound, and said so
    assert state.last_skipped_at is not None and state.last_skipped_at < latest
    assert state.last_skip_reason == "missed: no worker was running (at least 1001 fires)"


@pytest.mark.timeout(60)
async def test_catch_up_none_ten_years_behind_starts_nothing_and_looks_ahead(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await wf.schedule("s", tick, cron="0 * * * *", catch_up="none")  # hourly
    mock_clock.jump(TEN_YEARS + 90)  # the latest fire is 90 s late: missed too
    other = await wf.start(tick, 5, detach=True)
    await until_idle(wf_engine)
    assert await runs_of(wf_engine, "s") == []
    assert await other.status() is wf.RunStatus.COMPLETED
    (state,) = await wf.schedules()
    assert state.next_run == T0 + TEN_YEARS + 3600  # the first fire after now
    assert state.last_skipped_at == T0 + TEN_YEARS
    assert state.skipped >= 1000
    assert (state.last_skip_reason or "").endswith("(at least 1002 fires)")


@pytest.mark.timeout(60)
async def test_catch_up_all_ten_years_behind_starts_the_latest_fires_in_slices(
    wf_engine: Engine, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("wf.engine._catchup.CATCH_UP_MAX", 12)
    monkeypatch.setattr("wf.engine._catchup.FIRES_PER_PASS", 5)  # three passes of at most 5
    await wf.schedule("s", tick, cron="* * * * *", catch_up="all", allow_overlap=True)
    mock_clock.jump(TEN_YEARS)
    other = await wf.start(tick, 5, detach=True)
    await until_idle(wf_engine)
    latest = T0 + TEN_YEARS
    runs = await runs_of(wf_engine, "s")
    assert [r.id for r in runs] == [fire_run_id("s", latest - k * MIN) for k in range(11, -1, -1)]
    assert all(r.status is wf.RunStatus.COMPLETED for r in runs)
    assert await other.status() is wf.RunStatus.COMPLETED
    (state,) = await wf.schedules()
    assert state.next_run == latest + MIN
    assert state.skipped >= 1000
    assert state.last_skipped_at == latest - 12 * MIN  # the latest fire passed over


@pytest.mark.timeout(60)
async def test_until_idle_decides_a_backlog_before_it_stops(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await wf.schedule("s", waits, cron="* * * * *", catch_up="all")
    await work_until(wf_engine, T0 + MIN)  # its first run waits on a hook: still going
    (first,) = await runs_of(wf_engine, "s")
    mock_clock.jump(TEN_YEARS)
    # Every fire of the backlog (the latest 1000, 100 a pass) is skipped, the previous run
    # going on: passes that start no run, not idleness while the schedule is still due.
    await until_idle(wf_engine)
    assert [r.id for r in await runs_of(wf_engine, "s")] == [first.id]
    (state,) = await wf.schedules()
    assert state.skipped >= 2000  # at least 1000 passed over, then 1000 decided
    assert state.next_run == T0 + TEN_YEARS + 2 * MIN
    assert state.last_skipped_at == T0 + TEN_YEARS + MIN
    assert "still going" in (state.last_skip_reason or "")


@pytest.mark.timeout(60)
async def test_registering_again_after_years_keeps_the_missed_fires_for_the_catch_up(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    hourly = "0 * * * *"
    await wf.schedule("s", tick, cron=hourly)
    mock_clock.jump(TEN_YEARS)
    # A program registering its schedules at each start: the fires missed while it was down
    # stay due, and the catch-up decides them (one run), at once.
    again = await wf.schedule("s", tick, cron=hourly)
    assert again.next_run == T0 + 3600
    await until_idle(wf_engine)
    assert [r.id for r in await runs_of(wf_engine, "s")] == [fire_run_id("s", T0 + TEN_YEARS)]
    # Registering again with catch_up="none" drops a backlog (its latest fire 90 s late).
    mock_clock.jump(TEN_YEARS + 90)
    await wf.schedule("s", tick, cron=hourly, catch_up="none")
    await until_idle(wf_engine)
    assert len(await runs_of(wf_engine, "s")) == 1
    (state,) = await wf.schedules()
    assert state.next_run == T0 + 2 * TEN_YEARS + 3600


async def test_changing_the_times_of_a_schedule_with_fires_due_counts_them(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await wf.schedule("s", tick, cron="* * * * *", catch_up="all")
    mock_clock.jump(5 * MIN + 30)  # no worker: five fires due
    made = await wf.schedule("s", tick, cron="*/2 * * * *", catch_up="all")
    assert made.next_run == T0 + 6 * MIN
    assert (made.skipped, made.last_skipped_at) == (5, T0 + 5 * MIN)
    assert made.last_skip_reason == DROPPED
    # The same times again keep the next fire: nothing is dropped, nothing counted twice.
    mock_clock.jump(MIN)
    again = await wf.schedule("s", tick, cron="*/2 * * * *", catch_up="all")
    assert (again.next_run, again.skipped) == (T0 + 6 * MIN, 5)
    mock_clock.jump(MIN)  # the fire at 6 min is due: a new zone drops it, counted
    zoned = await wf.schedule("s", tick, cron="*/2 * * * *", tz="UTC")
    assert (zoned.next_run, zoned.skipped, zoned.last_skipped_at) == (T0 + 8 * MIN, 6, T0 + 6 * MIN)
    # Nothing due: a change counts nothing.
    assert (await wf.schedule("s", tick, cron="*/2 * * * *")).skipped == 6


async def test_an_on_time_fire_runs_with_catch_up_none(wf_engine: Engine) -> None:
    await wf.schedule("s", tick, cron="* * * * *", catch_up="none")
    await work_until(wf_engine, T0 + 3 * MIN + 1)
    assert len(await runs_of(wf_engine, "s")) == 3


# -- overlap -------------------------------------------------------------------------------


async def test_a_fire_is_skipped_while_the_previous_run_goes_on(wf_engine: Engine) -> None:
    await wf.schedule("s", slow, cron="* * * * *")
    await work_until(wf_engine, T0 + 4 * MIN + 30)
    runs = await runs_of(wf_engine, "s")
    # 1:00 starts a run that ends at 2:30; 2:00 is skipped; 3:00 starts one; 4:00 is skipped.
    assert [r.id for r in runs] == [fire_run_id("s", T0 + k * MIN) for k in (1, 3)]
    state = (await wf.schedules())[0]
    assert state.skipped == 2
    assert state.last_skipped_at == T0 + 4 * MIN
    assert "still going" in (state.last_skip_reason or "")


async def test_allow_overlap_starts_every_fire(wf_engine: Engine) -> None:
    await wf.schedule("s", slow, cron="* * * * *", allow_overlap=True)
    await work_until(wf_engine, T0 + 4 * MIN + 30)
    assert len(await runs_of(wf_engine, "s")) == 4
    assert (await wf.schedules())[0].skipped == 0


def test_fires_share_a_group_named_after_the_schedule_unless_overlap_is_allowed() -> None:
    serial = Schedule("nightly", "w", "* * * * *", priority=5)
    assert queue_options(serial) == {"priority": 5, "group": "nightly"}
    assert queue_options(Schedule("n", "w", "* * * * *", group="reports")) == {"group": "reports"}
    assert queue_options(Schedule("n", "w", "* * * * *", allow_overlap=True)) == {}


# -- exactly once --------------------------------------------------------------------------


async def test_workers_racing_on_one_store_create_one_run_per_fire(mock_clock: MockClock) -> None:
    store = MemoryStore()
    engines = [Engine(store, mock_clock, suspend_after=30) for _ in range(3)]
    with use_engine(engines[0]):
        await wf.schedule("s", tick, cron="* * * * *")
    workers = [Worker(e, retention=False) for e in engines]
    tasks = [asyncio.ensure_future(w.run()) for w in workers]
    await mock_clock.sleep_until(T0 + 20 * MIN + 30)
    for worker in workers:
        worker.stop()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    runs = await runs_of(engines[0], "s")
    assert [r.id for r in runs] == [fire_run_id("s", T0 + k * MIN) for k in range(1, 21)]
    assert all(r.status is wf.RunStatus.COMPLETED for r in runs)


async def test_a_fire_decided_twice_after_a_crash_starts_one_run(wf_engine: Engine) -> None:
    await wf.schedule("s", tick, cron="* * * * *")
    # A worker created the fire's run and died before saving the schedule's new state.
    first = await wf.start(tick, run_id=fire_run_id("s", T0 + MIN), detach=True)
    after = await fire(wf_engine, "s", T0 + MIN)
    assert after is not None
    assert after.last_run_id == first.id
    assert len(await wf_engine.store.list_runs(limit=10)) == 1


async def test_a_fire_decided_again_after_a_crash_and_an_edit_adopts_its_run(
    wf_engine: Engine,
) -> None:
    """A worker created the fire's run and died before saving the schedule, whose input was
    edited before the next worker came: the run (of the earlier input) is that fire's run, so
    ``skip_if_running`` sees it, and the fire is no error."""
    await wf.schedule("s", slow, cron="* * * * *", input={"n": 1})
    first = await wf.start(slow, 1, run_id=fire_run_id("s", T0 + MIN), detach=True)
    await wf.schedule("s", slow, cron="* * * * *", input={"n": 2})
    after = await fire(wf_engine, "s", T0 + MIN)
    assert after is not None
    assert (after.last_run_id, after.last_error, after.skipped) == (first.id, None, 0)
    again = await fire(wf_engine, "s", T0 + 2 * MIN)
    assert again is not None and again.skipped == 1
    assert again.last_skip_reason == f"the previous run {first.id} was still going"


async def test_a_fire_skipped_for_a_run_waiting_on_a_gone_deployment_names_it(
    wf_engine: TestEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """A v1 worker fired the schedule; after a deploy the run waits for a v1 worker that never
    comes, and a v2 worker skips every fire: its line (and the skip reason) names v1, once."""
    from wf.engine._firing import Firing

    wf_engine.deployment = "v1"
    await wf.schedule("s", waits, cron="* * * * *")
    first = await fire(wf_engine, "s", T0 + MIN)
    assert first is not None and first.last_run_id is not None
    wf_engine.deployment = "v2"
    firing = Firing()
    with caplog.at_level("WARNING", logger="wf.schedules"):
        again = await fire(wf_engine, "s", T0 + 2 * MIN, firing=firing)
        await fire(wf_engine, "s", T0 + 3 * MIN, firing=firing)
    assert again is not None and again.skipped == 1
    reason = f"the previous run {first.last_run_id} was still going"
    assert again.last_skip_reason == reason + " (waiting for a worker of deployment v1)"
    lines = [r.getMessage() for r in caplog.records if r.name == "wf.schedules"]
    assert len(lines) == 1, lines  # said once, not at every skipped fire
    assert "deployment v1" in lines[0] and "schedule s:" in lines[0]
    # A worker's log line says its moment in ISO 8601, UTC (docs/cli.md, "Times").
    assert "the fire of 2027-01-15T08:02:00+00:00 skipped" in lines[0], lines[0]


async def test_a_fire_decided_again_after_its_run_was_deleted_counts_as_done(
    wf_engine: Engine,
) -> None:
    """The worker that created a fire's run died before saving the schedule; the run ended
    and was deleted (gc, retention) before the next worker decided the fire again: the fire
    is done (its tombstone keeps its id), never run a second time as it used to."""
    await wf.schedule("s", tick, cron="* * * * *")
    first = await wf.start(tick, run_id=fire_run_id("s", T0 + MIN))
    assert await first.result() == 0
    assert (await wf_engine.store.delete_runs([first.id], now=T0, reason="gc")).ids == [first.id]
    after = await fire(wf_engine, "s", T0 + MIN)
    assert after is not None
    assert (after.last_run_id, after.last_error, after.skipped) == (first.id, None, 0)
    assert await wf_engine.store.list_runs(limit=10) == []


async def test_a_fire_that_cannot_start_is_recorded_and_passed(wf_engine: Engine) -> None:
    broken = Schedule("s", "tests:gone", "* * * * *", next_run=T0 + MIN)
    await wf_engine.store.save_schedule(broken)
    after = await fire(wf_engine, "s", T0 + MIN)
    assert after is not None
    assert after.next_run == T0 + 2 * MIN
    assert after.skipped == 1
    assert "tests:gone" in (after.last_error or "")


class _Surprising(MemoryStore):
    """A store whose run creation fails with an error no one planned for, for schedule 'bad'."""

    async def create_run(
        self, record: wf.RunRecord, events: Sequence[Event] = (), *, explicit: bool = False
    ) -> bool:
        if record.schedule_id == "bad":
            raise TypeError("'int' object is not iterable")
        return await super().create_run(record, events, explicit=explicit)


async def test_an_unexpected_error_of_a_fire_is_that_schedules_error_not_a_missed_fire(
    mock_clock: MockClock,
) -> None:
    async with wf.testing.engine(_Surprising(), clock=mock_clock) as eng:
        await wf.schedule("bad", tick, cron="* * * * *")
        await wf.schedule("good", tick, cron="* * * * *")
        await work_until(eng, T0 + 3 * MIN + 30)
        states = {s.id: s for s in await wf.schedules()}
        assert len(await runs_of(eng, "good")) == 3
    bad = states["bad"]
    # Each fire is recorded as it happens: the schedule moves on, nothing is "missed".
    assert (bad.skipped, bad.last_skip_reason, bad.next_run) == (3, "error", T0 + 4 * MIN)
    assert bad.last_error == "TypeError: 'int' object is not iterable"
    assert bad.last_run_id is None


async def test_a_paused_schedule_fires_nothing_and_resumes_from_now(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    admin = wf.admin.LocalAdmin(wf_engine)
    await wf.schedule("s", tick, cron="* * * * *", catch_up="all")
    await work_until(wf_engine, T0 + 2 * MIN + 30)
    paused = await admin.pause_schedule("s")
    assert paused is not None and paused.paused and paused.next_run is None
    assert await admin.pause_schedule("s") == paused  # again: nothing changes
    await work_until(wf_engine, T0 + 10 * MIN + 30)  # a worker runs all along: nothing fires
    (state,) = await wf.schedules()
    assert (state.paused, state.skipped, state.last_fire_at) == (True, 0, T0 + 2 * MIN)
    # Registering again (a program at each start) keeps the pause.
    again = await wf.schedule("s", tick, cron="*/2 * * * *", catch_up="all")
    assert (again.paused, again.next_run) == (True, None)
    resumed = await admin.resume_schedule("s")
    assert resumed is not None and not resumed.paused
    assert (resumed.next_run, resumed.skipped) == (T0 + 12 * MIN, 0)  # from now: no catch-up
    await work_until(wf_engine, T0 + 14 * MIN + 30)
    runs = await runs_of(wf_engine, "s")
    assert [r.id for r in runs] == [fire_run_id("s", T0 + k * MIN) for k in (1, 2, 12, 14)]
    assert await admin.pause_schedule("gone") is None
    assert await admin.resume_schedule("gone") is None


async def test_fires_due_when_a_schedule_is_paused_are_counted(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await wf.schedule("s", tick, cron="* * * * *")
    mock_clock.jump(3 * MIN + 30)  # no worker: three fires due
    paused = await wf.admin.LocalAdmin(wf_engine).pause_schedule("s")
    assert paused is not None
    assert (paused.skipped, paused.last_skipped_at) == (3, T0 + 3 * MIN)
    assert paused.last_skip_reason == PAUSED


# -- daylight saving time ------------------------------------------------------------------

NY = ZoneInfo("America/New_York")


def fires_between(cron: str, tz: str, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    out, at = [], start.timestamp()
    while True:
        upcoming = next_fire(cron, tz, at)
        assert upcoming is not None
        at = upcoming
        if at >= end.timestamp():
            return out
        out.append(dt.datetime.fromtimestamp(at, ZoneInfo(tz)))


def test_spring_forward_a_missing_wall_time_fires_once_after_the_gap() -> None:
    fires = fires_between(
        "30 2 * * *",
        "America/New_York",
        dt.datetime(2026, 3, 7, 12, tzinfo=NY),
        dt.datetime(2026, 3, 9, 12, tzinfo=NY),
    )
    assert [f.isoformat() for f in fires] == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]


def test_fall_back_a_repeated_wall_time_fires_once() -> None:
    fires = fires_between(
        "30 1 * * *",
        "America/New_York",
        dt.datetime(2026, 10, 31, 12, tzinfo=NY),
        dt.datetime(2026, 11, 2, 12, tzinfo=NY),
    )
    assert [f.isoformat() for f in fires] == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]


def test_fall_back_an_interval_schedule_keeps_its_real_time_rhythm() -> None:
    start = dt.datetime(2026, 11, 1, 0, 0, tzinfo=NY)
    fires = fires_between("*/30 * * * *", "America/New_York", start, start + dt.timedelta(hours=4))
    gaps = {b.timestamp() - a.timestamp() for a, b in itertools.pairwise(fires)}
    # 00:00 EDT to 04:00 EST (wall-clock arithmetic) is five real hours: 00:30 EDT, 01:00 EDT,
    # 01:30 EDT, 01:00 EST, 01:30 EST, 02:00 ... 03:30 EST, one every 30 real minutes.
    assert len(fires) == 9 and gaps == {1800.0}
    assert [f.fold for f in fires[:5]] == [0, 0, 0, 1, 1]


@pytest.mark.parametrize(
    ("macro", "spelled"),
    [
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@hourly", "0 * * * *"),
    ],
)
@pytest.mark.parametrize("tz", ["America/Havana", "Atlantic/Azores"])
def test_a_macro_fires_as_its_spelled_out_expression_when_midnight_repeats(
    macro: str, spelled: str, tz: str
) -> None:
    """Havana (2027-11-07) and the Azores (2027-10-31) fall back at 01:00 to 00:00: midnight
    happens twice, and ``@daily`` fires once, like ``0 0 * * *`` (``@hourly`` keeps its
    real-time rhythm, like ``0 * * * *``)."""
    zone = ZoneInfo(tz)
    night = dt.datetime(2027, 11, 7, tzinfo=zone) if tz == "America/Havana" else None
    night = night or dt.datetime(2027, 10, 31, tzinfo=zone)
    start, end = night - dt.timedelta(days=8), night + dt.timedelta(days=1)
    fires = fires_between(macro, tz, start, end)
    assert fires == fires_between(spelled, tz, start, end)
    if macro in ("@daily", "@midnight"):
        assert [f for f in fires if f.date() == night.date()] == [night]


async def test_a_worker_fires_a_spring_forward_job_once() -> None:
    start = dt.datetime(2026, 3, 7, 12, tzinfo=NY).timestamp()
    clock = MockClock(start)
    async with wf.testing.engine(clock=clock) as eng:
        await wf.schedule("night", tick, cron="30 2 * * *", tz="America/New_York")
        await work_until(eng, dt.datetime(2026, 3, 10, 12, tzinfo=NY).timestamp())
        runs = await runs_of(eng, "night")
    local = [dt.datetime.fromtimestamp(r.created_at, NY).isoformat() for r in runs]
    assert local == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]


async def test_a_worker_fires_a_fall_back_job_once() -> None:
    start = dt.datetime(2026, 10, 31, 12, tzinfo=NY).timestamp()
    clock = MockClock(start)
    async with wf.testing.engine(clock=clock) as eng:
        await wf.schedule("night", tick, cron="30 1 * * *", tz="America/New_York")
        await work_until(eng, dt.datetime(2026, 11, 2, 12, tzinfo=NY).timestamp())
        runs = await runs_of(eng, "night")
    local = [dt.datetime.fromtimestamp(r.created_at, NY).isoformat() for r in runs]
    assert local == ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]


# On PostgreSQL a held run's driver was seen to stay busy for over 20 s under this hand-stepped
# clock (a queue question, #15): the serial group is checked on the two other stores here.
@pytest.mark.stores("memory", "local")
async def test_fires_of_one_schedule_run_one_at_a_time_in_its_group(wf_engine: Engine) -> None:
    await wf.schedule("s", slow, cron="* * * * *", skip_if_running=False, priority=7)
    await work_until(wf_engine, T0 + 6 * MIN + 30)
    runs = await runs_of(wf_engine, "s")
    assert len(runs) == 6  # no fire skipped: each waits for the one before it
    assert {(r.group, r.priority) for r in runs} == {("s", 7)}
    spans = []
    for run in runs:
        journal = await wf_engine.store.read_journal(run.id)
        if len(journal) == 1:
            assert run.status is wf.RunStatus.PENDING  # still waiting for its turn
            continue
        ended = journal[-1]["ts"] if run.status.is_terminal else None
        spans.append((journal[1]["ts"], ended))
    assert len(spans) >= 2
    for (_, ended), (began, _) in itertools.pairwise(spans):
        assert ended is not None and began >= ended  # serial: the next began after the end


async def test_overlapping_fires_run_side_by_side(wf_engine: Engine) -> None:
    await wf.schedule("s", slow, cron="* * * * *", allow_overlap=True)
    await work_until(wf_engine, T0 + 3 * MIN + 10)
    runs = await runs_of(wf_engine, "s")
    assert [r.group for r in runs] == [None, None, None]
    first = await wf_engine.store.read_journal(runs[0].id)
    second = await wf_engine.store.read_journal(runs[1].id)
    assert second[1]["ts"] < first[-1]["ts"]  # the second began before the first ended


async def _damage_schedule(store: wf.Store, schedule_id: str) -> None:
    """Make the schedule's stored definition unreadable, each store its own way."""
    from tests.store.helpers import damage_local_schedule
    from wf.store.local import LocalStore

    if isinstance(store, LocalStore):
        damage_local_schedule(store, schedule_id)
    elif type(store).__name__ == "PostgresStore":
        import psycopg

        from tests.engine.conftest import POSTGRES_DSN

        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as conn:
            table = f'"{store.schema}".wf_schedules'  # type: ignore[attr-defined]
            await conn.execute(f"UPDATE {table} SET schedule = '[1]' WHERE id = %s", [schedule_id])
    else:
        import redis

        from tests.engine.conftest import REDIS_URL

        client = redis.Redis.from_url(REDIS_URL)
        try:
            client.hset(f"{store.prefix}sched", schedule_id, b"{not json")  # type: ignore[attr-defined]
        finally:
            client.close()


@pytest.mark.stores("local", "postgres", "redis")
async def test_a_damaged_schedule_is_skipped_and_the_others_fire(
    wf_engine: Engine, engine_store: wf.Store
) -> None:
    await wf.schedule("broken", tick, cron="* * * * *", input={"n": 1})
    await wf.schedule("healthy", tick, cron="* * * * *", input={"n": 2})
    await _damage_schedule(engine_store, "broken")
    worker = await work_until(wf_engine, T0 + 2 * MIN + 30)
    runs = await runs_of(wf_engine, "healthy")
    assert [r.id for r in runs] == [fire_run_id("healthy", T0 + k * MIN) for k in (1, 2)]
    assert await runs_of(wf_engine, "broken") == []
    [fault] = [f for f in worker.faults if f.kind.startswith("schedule")]
    assert fault.where == wf_engine.store.schedule_location("broken")
    assert [s.id for s in await wf.schedules()] == ["healthy"]


# -- schedules set by another process --------------------------------------------------------


def other_instance(store: Store) -> Store:
    """A second instance on the same store, as another process would open it (on the local
    store: the schedule's file written as another process writes it, unheard in this one)."""
    if isinstance(store, MemoryStore):
        return store
    if isinstance(store, LocalStore):
        return store
    # Imported here: the kernel's tests on other Pythons install neither psycopg nor redis.
    if type(store).__name__ == "PostgresStore":
        from wf.store.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        return PostgresStore(store.dsn, schema=store.schema)
    from wf.store.redis import RedisStore

    assert isinstance(store, RedisStore)
    return RedisStore(store.url, prefix=store.prefix)


async def test_a_running_worker_hears_of_a_schedule_set_elsewhere_at_once(
    wf_engine: Engine, engine_store: Store
) -> None:
    clock = wf_engine.clock
    assert isinstance(clock, MockClock)
    clock.autojump = False
    worker = Worker(wf_engine, retention=False, poll=3600)  # its poll never comes round
    task = asyncio.ensure_future(worker.run())
    other = other_instance(engine_store)
    try:
        async with asyncio.timeout(10):
            while worker.schedules_read_at is None:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # the worker waits for the store now
            made = Schedule("elsewhere", tick.name, "* * * * *", next_run=T0 + MIN)
            if isinstance(other, LocalStore):
                _upkeep.Schedules(other.root).save(made)  # no in-process signal: only the file
            else:
                await other.save_schedule(made)
            while worker.fired_at != T0 + MIN:
                await asyncio.sleep(0.01)
            clock.jump(MIN)
            while not await runs_of(wf_engine, "elsewhere"):
                await asyncio.sleep(0.01)
            # The fire's state saved (after its run is made): a removal before it would be undone.
            while (found := await engine_store.get_schedule("elsewhere")) is None or (
                found.last_run_id is None
            ):
                await asyncio.sleep(0.01)
            # Removed elsewhere: the worker forgets its next fire without waiting for its poll.
            if isinstance(other, LocalStore):
                _upkeep.Schedules(other.root).delete("elsewhere")
            else:
                await other.delete_schedule("elsewhere")
            while worker.fired_at is not None:
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        if other is not engine_store:
            await other.close()
    (run,) = await runs_of(wf_engine, "elsewhere")
    assert run.id == fire_run_id("elsewhere", T0 + MIN)


async def test_a_schedule_change_heard_while_the_worker_reads_the_queue_is_not_lost(
    wf_engine: Engine, engine_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The announcement of a change comes after the worker's look at the schedules and before
    # its look at the queue (which takes the store's wake-up for itself): the worker must
    # still read its schedules again rather than sleep for its poll.
    clock = wf_engine.clock
    assert isinstance(clock, MockClock)
    clock.autojump = False
    await engine_store.wait_for_activity(0)  # listening already: no first wait ends at once
    worker = Worker(wf_engine, retention=False, poll=3600)  # its poll never comes round
    other = other_instance(engine_store)
    read_queue = engine_store.next_due_at
    heard = asyncio.Event()

    async def next_due_at(*args: Any, **kwargs: Any) -> float | None:
        if worker.schedules_read_at is not None and not heard.is_set():
            before = engine_store.schedule_changes()
            made = Schedule("elsewhere", tick.name, "* * * * *", next_run=T0 + MIN)
            if isinstance(other, LocalStore):
                _upkeep.Schedules(other.root).save(made)  # no in-process signal: only the file
            else:
                await other.save_schedule(made)
            async with asyncio.timeout(5):
                while engine_store.schedule_changes() == before:
                    await asyncio.sleep(0.01)
            heard.set()
        return await read_queue(*args, **kwargs)

    monkeypatch.setattr(engine_store, "next_due_at", next_due_at)
    task = asyncio.ensure_future(worker.run())
    try:
        async with asyncio.timeout(10):
            await heard.wait()
            while worker.fired_at != T0 + MIN:
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        if other is not engine_store:
            await other.close()


async def test_fires_a_running_worker_looked_at_too_late_are_not_missed_for_want_of_one(
    wf_engine: Engine,
) -> None:
    await wf_engine.store.save_schedule(Schedule("s", tick.name, "* * * * *", next_run=T0 + MIN))
    # Running since T0, the worker looks at the schedule three fires late.
    after = await fire(wf_engine, "s", T0 + 3 * MIN + 1, watching_since=T0)
    assert after is not None
    assert after.skipped == 2
    assert after.last_skip_reason == "missed: the worker looked too late"
    # A worker that started after the first fire: those were missed while none ran.
    await wf_engine.store.save_schedule(Schedule("t", tick.name, "* * * * *", next_run=T0 + MIN))
    after = await fire(wf_engine, "t", T0 + 3 * MIN + 1, watching_since=T0 + 3 * MIN)
    assert after is not None
    assert after.last_skip_reason == MISSED
