"""Held runs wait: a worker does not re-drive runs that a group lane, a cap or a rate limit holds
back; it looks again when the hold may have ended (a run ends, a timer comes due, a limit's
window passes), on every store.

The bug these guard against: a held drive takes and gives back the run's lease, which the store
reports as activity; a worker that re-drove its held runs on every wake-up woke itself (and every
other worker) for ever, and a delayed run at the head of a lane left the rest of the lane due, so
the worker never slept until the head's due time (on a fake clock: never reached it at all).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import pytest

import wf
from wf import Engine
from wf.engine._instruments import Instrument
from wf.store import Lease, Slot, Store
from wf.testing import MockClock, TestEngine

log: list[str] = []
gate: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    log.clear()
    gate.clear()


class Looks(Instrument):
    """Counts the worker's looks at the queue (one per turn of its loop)."""

    def __init__(self) -> None:
        self.polls = 0

    async def on_poll(self, engine: Engine) -> None:
        self.polls += 1


def looks(engine: Engine) -> Looks:
    counter = Looks()
    engine.add_instrument(counter)
    return counter


@wf.step
def note(text: str) -> str:
    log.append(text)
    return text


@wf.workflow(group="lane")
async def laned(n: int) -> int:
    await note(f"start {n}")
    await note(f"end {n}")
    return n


@wf.workflow(group=lambda n: f"g{n % 2}", concurrency=1)
async def capped_lanes(n: int) -> int:
    await note(f"start {n}")
    await wf.sleep(5)  # shorter than suspend_after: the run stays live and keeps its place
    await note(f"end {n}")
    return n


@wf.workflow(concurrency=1)
async def capped(n: int) -> int:
    await note(f"run {n}")
    return n


@wf.step
async def wait_for_gate(name: str) -> str:
    await gate.setdefault(name, asyncio.Event()).wait()
    return name


@wf.workflow(group="slow")
async def gated(n: int) -> int:
    await note(f"start {n}")
    if n == 0:
        await wait_for_gate("head")
    await note(f"end {n}")
    return n


@wf.workflow(rate_limit=(1, 60))
async def limited(n: int) -> float:
    return wf.now().timestamp()


async def test_a_delayed_head_holds_its_lane_and_the_worker_sleeps_until_it_is_due(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    counter = looks(wf_engine)
    begin = mock_clock.now()
    runs = [await wf.start(laned.with_options(delay=60), 0, detach=True)]
    runs += [await wf.start(laned, n, detach=True) for n in (1, 2)]
    worker = wf.Worker(wf_engine, concurrency=10, poll=0.05)
    await asyncio.wait_for(worker.run(until_idle=True), 20)
    # --until-idle waited for the head's due time (a pending timer), then drained the lane.
    assert [await r.status() for r in runs] == [wf.RunStatus.COMPLETED] * 3
    assert log == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]
    assert mock_clock.now() - begin >= 60
    # Runs 1 and 2 were tried once while the head waited, then slept through: no re-drives.
    assert worker.held_drives <= 2
    assert counter.polls < 20


async def test_a_serving_worker_waits_for_a_delayed_head(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    counter = looks(wf_engine)
    runs = [await wf.start(laned.with_options(delay=3600), 0, detach=True)]
    runs += [await wf.start(laned, n, detach=True) for n in (1, 2, 3)]
    worker = wf.Worker(wf_engine, concurrency=10, poll=0.05)
    task = asyncio.ensure_future(worker.run())
    try:
        assert [await r.result(timeout=20) for r in runs] == [0, 1, 2, 3]
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    assert log == [f"{w} {n}" for n in range(4) for w in ("start", "end")]
    assert worker.held_drives <= 3
    assert counter.polls < 30


async def test_a_cap_and_groups_together_hold_runs_without_re_driving_them(
    wf_engine: Engine,
) -> None:
    counter = looks(wf_engine)
    runs = [await wf.start(capped_lanes, n, detach=True) for n in range(6)]
    worker = wf.Worker(wf_engine, concurrency=10, poll=0.05)
    await asyncio.wait_for(worker.run(until_idle=True), 30)
    assert [await r.result() for r in runs] == list(range(6))
    # The cap (1 at once) held: every start is followed by its own end.
    for n in range(6):
        assert log.index(f"end {n}") == log.index(f"start {n}") + 1
    # Each lane ran in order of its starts.
    starts = [int(line.split()[1]) for line in log if line.startswith("start")]
    assert [n for n in starts if n % 2 == 0] == [0, 2, 4]
    assert [n for n in starts if n % 2 == 1] == [1, 3, 5]
    # A freed place is offered to one held run, not raced for by all of them: each run was held
    # a few times at most (it was driven 6 times over before the fix, on every wake-up).
    assert worker.held_drives <= 12
    assert counter.polls < 60


async def test_runs_held_behind_another_processs_run_are_not_re_driven(
    wf_engine: Engine,
) -> None:
    other = Engine(wf_engine.store, wf_engine.clock)  # another process, on the same store
    head = await wf.start(gated, 0, detach=True)
    held = [await wf.start(gated, n, detach=True) for n in (1, 2)]
    driving = other.drive_soon(head.id)
    async with asyncio.timeout(10):
        while "start 0" not in log:
            await asyncio.sleep(0.01)
    counter = looks(wf_engine)
    worker = wf.Worker(wf_engine, concurrency=10, poll=0.05)
    task = asyncio.ensure_future(worker.run())
    try:
        # Behind the head, the runs wait in the lane (stores whose claim reads lanes), or were
        # tried once each and held.
        waiting = {r.id for r in held}
        async with asyncio.timeout(10):
            while worker.held_drives < 2 and not waiting <= worker.waiting:
                await asyncio.sleep(0.01)
        polls, drives = counter.polls, worker.held_drives
        await asyncio.sleep(0.3)  # real time: a spinning worker would loop thousands of times
        assert worker.held_drives == drives
        assert counter.polls - polls < 20  # woken by its poll interval (0.05 s) at most
        gate["head"].set()
        assert (await driving) is not None
        assert [await r.result(timeout=20) for r in held] == [1, 2]
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        await other.aclose()
    assert log == [f"{w} {n}" for n in range(3) for w in ("start", "end")]


async def test_runs_held_by_a_rate_limit_are_tried_when_the_window_allows(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    counter = looks(wf_engine)
    begin = mock_clock.now()
    runs = [await wf.start(limited, n, detach=True) for n in range(4)]
    worker = wf.Worker(wf_engine, concurrency=10, poll=0.05)
    await asyncio.wait_for(worker.run(until_idle=True), 20)
    starts = sorted([await r.result() for r in runs])
    # No earlier than the limit lets them (on PostgreSQL the fake clock may jump on while a
    # query is in flight, so a start may read a later time than the one it was admitted at).
    assert all(s - begin >= 60 * k for k, s in enumerate(starts))
    # When the window opens, the held runs are tried again once each (at most), not in a loop.
    assert worker.held_drives <= 3 + 2 + 1 + 3
    assert counter.polls < 40


async def test_a_worker_waiting_for_a_delayed_run_after_a_capped_one_sleeps(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    # A cap's place given back must not leave the store's activity signal on for good: the
    # worker would wake at once from every wait, and the fake clock never reach the delay.
    counter = looks(wf_engine)
    begin = mock_clock.now()
    first = await wf.start(capped, 0, detach=True)
    later = await wf.start(capped.with_options(delay=7), 1, detach=True)
    worker = wf.Worker(wf_engine, concurrency=1, poll=0.05)
    await asyncio.wait_for(worker.run(until_idle=True), 10)
    assert [await first.result(), await later.result()] == [0, 1]
    assert mock_clock.now() - begin >= 7
    assert counter.polls < 20


@wf.workflow
async def first_kind(n: int) -> int:
    await note(f"start a{n}")
    await wf.sleep(3)
    await note(f"end a{n}")
    return n


@wf.workflow
async def second_kind(n: int) -> int:
    await note(f"start b{n}")
    await wf.sleep(3)
    await note(f"end b{n}")
    return n


async def test_the_store_wide_cap_holds_runs_of_every_workflow_across_engines(
    wf_engine: Engine,
) -> None:
    # ``wf.configure(concurrency=1)``: one run at a time on the whole store, whatever its
    # workflow, whichever process drives it.
    other = Engine(wf_engine.store, wf_engine.clock, concurrency=1)
    wf_engine.concurrency = 1
    runs = [await wf.start(first_kind, n, detach=True) for n in range(2)]
    runs += [await wf.start(second_kind, n, detach=True) for n in range(2)]
    workers = [wf.Worker(e, concurrency=10, poll=0.05) for e in (wf_engine, other)]
    try:
        await asyncio.wait_for(asyncio.gather(*(w.run(until_idle=True) for w in workers)), 30)
    finally:
        await other.aclose()
    assert sorted([await r.result() for r in runs]) == [0, 0, 1, 1]
    for i in range(0, len(log), 2):  # every start is followed by its own end
        assert log[i].replace("start", "end") == log[i + 1], log


@wf.step
async def hang_once(n: int) -> int:
    log.append(f"in {n}")
    if n == 0 and "hung" not in gate:
        gate["hung"] = asyncio.Event()
        await asyncio.Event().wait()  # its process "dies" here
    return n


@wf.workflow(concurrency=1)
async def capped_hanging(n: int) -> int:
    await hang_once(n)
    await note(f"end {n}")
    return n


class _SlowRead:
    """A lease whose ``read_run`` first waits until another drive asks for a cap's place (at
    most ``within`` seconds): a drive that reads longer than those behind it (an orphan's)."""

    def __init__(self, lease: Lease, asked: asyncio.Event, within: float) -> None:
        self._lease, self._asked, self._within = lease, asked, within

    async def read_run(self, store: Store) -> Any:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._within):
                await self._asked.wait()
        return await self._lease.read_run(store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lease, name)


async def test_an_orphan_of_a_capped_workflow_keeps_its_place_before_later_runs(
    wf_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run 0 holds the workflow's only place and its process dies: the place is free again, the
    # run is still running. The runs queued behind it are claimed with it, and their drives
    # read them sooner than the orphan's: they must not take the place first. A capped
    # workflow's runs start in creation order, the orphan in the place it had.
    orphan = await wf.start(capped_hanging, 0)
    async with asyncio.timeout(10):
        while "hung" not in gate:
            await asyncio.sleep(0.01)
    await wf_engine.crash(orphan)
    later = [await wf.start(capped_hanging, n, detach=True) for n in (1, 2, 3)]

    store = wf_engine.store
    claim, try_slot, asked = store.claim, store.try_slot, asyncio.Event()

    async def claim_slowly(*args: Any, **kwargs: Any) -> list[Lease]:
        leases = await claim(*args, **kwargs)
        asked.clear()  # from now on: the drives of this claim
        return [
            cast(Lease, _SlowRead(lease, asked, 0.5)) if lease.run_id == orphan.id else lease
            for lease in leases
        ]

    async def try_slot_seen(*args: Any, **kwargs: Any) -> Slot | None:
        asked.set()
        return await try_slot(*args, **kwargs)

    monkeypatch.setattr(store, "claim", claim_slowly)
    monkeypatch.setattr(store, "try_slot", try_slot_seen)
    worker = wf.Worker(wf_engine, concurrency=10, poll=0.05)
    await asyncio.wait_for(worker.run(until_idle=True), 20)
    assert [await r.result() for r in (orphan, *later)] == [0, 1, 2, 3]
    assert log == ["in 0", "in 0", "end 0", "in 1", "end 1", "in 2", "end 2", "in 3", "end 3"]


@wf.workflow(rate_limit=(1, 3600))
async def hourly(n: int) -> int:
    return n


async def test_a_rate_limit_start_taken_back_while_the_worker_reads_the_queue_is_not_lost(
    wf_engine: Engine, engine_store: Store, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A start of the limit holding a run here is taken back (its caller was cancelled as it
    # was counted) after the worker's look at its held runs and before its look at the queue,
    # which takes the store's wake-up for itself: the worker slept until its poll (an hour),
    # the held run with it, though the limit let it through.
    mock_clock.autojump = False  # the limit's window never ends by itself here
    await engine_store.wait_for_activity(0)  # listening already: no first wait ends at once
    first = await wf.start(hourly, 0, detach=True)
    held = await wf.start(hourly, 1, detach=True)
    worker = wf.Worker(wf_engine, concurrency=10, poll=3600)  # its poll never comes round
    taken_back = asyncio.Event()
    returns, try_rate, retry_at = (
        engine_store.rate_returns,
        engine_store.try_rate,
        engine_store.rate_retry_at,
    )

    async def admitting(real: Any, *args: Any) -> float | None:
        return None if taken_back.is_set() else cast(float | None, await real(*args))

    monkeypatch.setattr(engine_store, "rate_returns", lambda: returns() + taken_back.is_set())
    monkeypatch.setattr(engine_store, "try_rate", lambda *a: admitting(try_rate, *a))
    monkeypatch.setattr(engine_store, "rate_retry_at", lambda *a: admitting(retry_at, *a))
    read_queue = engine_store.next_due_at

    async def next_due_at(*args: Any, **kwargs: Any) -> float | None:
        ended = worker.held_drives and (await engine_store.get_run(first.id)).status.is_terminal
        if ended and not taken_back.is_set():
            taken_back.set()  # heard by the store, not announced to this worker's wait
        return cast(float | None, await read_queue(*args, **kwargs))

    monkeypatch.setattr(engine_store, "next_due_at", next_due_at)
    task = asyncio.ensure_future(worker.run())
    try:
        async with asyncio.timeout(10):  # looked at, not driven by the test: the worker does
            while not (await engine_store.get_run(held.id)).status.is_terminal:
                await asyncio.sleep(0.01)
        assert taken_back.is_set()
        assert await held.result() == 1
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
