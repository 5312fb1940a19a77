"""The threads sync steps run in: as many as the worker drives runs, never asyncio's default
executor (whose few threads the store's own work shares)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable

import pytest

import wf
from wf import Engine

pytestmark = pytest.mark.stores("memory", "local")

RELEASE = threading.Event()
ENTERED: list[str] = []
_entered_lock = threading.Lock()


@pytest.fixture(autouse=True)
def _reset() -> None:
    RELEASE.clear()
    ENTERED.clear()


@wf.step
def held(name: str) -> str:
    with _entered_lock:
        ENTERED.append(name)
    RELEASE.wait(10)  # bounded: a test that fails never leaves a thread behind for long
    return name


@wf.workflow
async def hold(name: str) -> str:
    return await held(name)


async def _until(count: int, seconds: float = 5.0) -> None:
    """Wait (bounded) until ``count`` held steps have begun their code."""
    async with asyncio.timeout(seconds):
        while len(ENTERED) < count:
            await asyncio.sleep(0.01)


async def test_a_worker_runs_as_many_sync_steps_at_once_as_its_concurrency(
    wf_engine: Engine,
) -> None:
    # More than asyncio's default executor has threads (min(32, cpus + 4)) on small machines.
    count = 12
    runs = [await wf.start(hold, f"r{i}", detach=True) for i in range(count)]
    worker = wf.Worker(wf_engine, concurrency=count, schedules=False, retention=False)
    task = asyncio.ensure_future(worker.run(until_idle=True))
    try:
        await _until(count)
        # The held steps leave the threads the process's other work uses (the local
        # store's files among it) alone.
        async with asyncio.timeout(5):
            assert await asyncio.to_thread(lambda: "free") == "free"
    finally:
        RELEASE.set()
    async with asyncio.timeout(10):
        await task
    assert [await r.status() for r in runs] == [wf.RunStatus.COMPLETED] * count


async def test_a_sync_step_waiting_for_a_thread_is_said_and_does_not_begin(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(wf_engine.store, wf_engine.clock, step_threads=1)
    engine.step_pool().warn_after = 0.0  # said at once (1 s by default)
    first = await wf.start(hold, "first", detach=True)
    second = await wf.start(hold, "second", detach=True)
    with caplog.at_level(logging.WARNING, logger="wf.worker"):
        drives = [engine.drive_soon(first.id), engine.drive_soon(second.id)]
        try:
            await _until(1)
            async with asyncio.timeout(5):
                while not any("for a free thread" in r.message for r in caplog.records):
                    await asyncio.sleep(0.01)
            assert len(ENTERED) == 1  # one thread: the other step's code has not begun
        finally:
            RELEASE.set()
        async with asyncio.timeout(10):
            await asyncio.gather(*drives)
    said = [r.message for r in caplog.records if "for a free thread" in r.message]
    assert len(said) == 1
    assert "step 'held' of run" in said[0] and "all 1 step threads are busy" in said[0]
    assert "has waited 0s for a free thread" in said[0]
    assert sorted(ENTERED) == ["first", "second"]


@wf.step
def square(x: int) -> int:
    return x * x


@wf.workflow
async def many_squares(count: int) -> int:
    return sum(await wf.map(square, range(count)))


async def test_instant_sync_steps_queued_for_a_moment_are_not_said(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # 300 instant steps on 2 threads queue, each for far less than a second: the pool
    # working as it should, no misconfiguration to warn of.
    engine = Engine(wf_engine.store, wf_engine.clock, step_threads=2)
    run = await wf.start(many_squares, 300, detach=True)
    with caplog.at_level(logging.WARNING, logger="wf.worker"):
        async with asyncio.timeout(30):
            await engine.drive_soon(run.id)
    assert await run.result() == sum(x * x for x in range(300))
    assert not [r.message for r in caplog.records if "free thread" in r.message]


async def test_a_pool_too_small_says_so_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from wf.engine._threads import StepThreads

    now = [1000.0]
    pool = StepThreads(1, warn_after=0.0, clock=lambda: now[0])
    gate = threading.Event()
    try:
        with caplog.at_level(logging.WARNING, logger="wf.worker"):
            calls = [pool.run(lambda: gate.wait(10), "step 'held' of run r0")]
            for i in range(1, 4):
                calls.append(pool.run(lambda: None, f"step 's{i}' of run r{i}"))
                await asyncio.sleep(0.01)  # the warning's timer (at 0 s) goes off
                if i == 2:
                    now[0] += 60.0  # a minute on: the next call waiting is said again
            said = [r.message for r in caplog.records if "free thread" in r.message]
            assert len(said) == 2, said
            assert said[0].startswith("step 's1' of run r1 has waited")
            assert said[1].startswith("step 's3' of run r3 has waited")
    finally:
        gate.set()
    async with asyncio.timeout(10):
        await asyncio.gather(*calls)
    pool.shutdown()


async def test_step_threads_bounds_a_worker_too(wf_engine: Engine) -> None:
    engine = Engine(wf_engine.store, wf_engine.clock, step_threads=2)
    wf.Worker(engine, concurrency=50)
    assert engine.step_pool().size == 2


def test_a_process_that_is_no_worker_keeps_asyncios_default_size(wf_engine: Engine) -> None:
    import os

    engine = Engine(wf_engine.store, wf_engine.clock)
    assert engine.step_pool().size == min(32, (os.cpu_count() or 1) + 4)
    engine.want_step_threads(100)  # a worker starts here: its pool grows to its concurrency
    assert engine.step_pool().size == 100


@wf.step(max_retries=0)
async def fails_once_held_began() -> None:
    async with asyncio.timeout(10):
        while not ENTERED:
            await asyncio.sleep(0.01)
    raise wf.FatalError("bad")


async def _awaited(call: Awaitable[object]) -> object:
    return await call


@wf.workflow
async def fails_beside_a_held_step() -> None:
    async with asyncio.TaskGroup() as group:
        group.create_task(_awaited(held("detached")))
        group.create_task(_awaited(fails_once_held_began()))


@pytest.mark.stores("memory")
async def test_waiting_for_a_cancelled_sync_step_takes_no_thread_of_the_default_executor(
    wf_engine: Engine,
) -> None:
    # The sync step's call is cancelled with its TaskGroup, its thread runs on: the run's
    # outcome waits for it without holding one of the few threads the process's other work
    # (the local store's files) shares.
    import concurrent.futures

    one = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    asyncio.get_running_loop().set_default_executor(one)
    try:
        run = await wf.start(fails_beside_a_held_step, detach=True)
        drive = wf_engine.drive_soon(run.id)
        try:
            async with asyncio.timeout(5):
                while not any(
                    e["type"] == "step_failed" for e in await wf_engine.store.read_journal(run.id)
                ):
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # the run is waiting for the detached thread now
            assert await run.status() == wf.RunStatus.RUNNING
            async with asyncio.timeout(3):
                assert await asyncio.to_thread(lambda: "free") == "free"
        finally:
            RELEASE.set()
        async with asyncio.timeout(10):
            await drive
        with pytest.raises(wf.RunFailed):
            await run.result()
        journal = await wf_engine.store.read_journal(run.id)
        assert journal[-1]["type"] == "run_failed"
    finally:
        one.shutdown(wait=False)


async def test_queued_calls_touch_the_loops_timers_from_its_thread_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warning's timing is the event loop's own business: no timer of it is cancelled
    from a pool thread as a call ends (asyncio's handles are not thread-safe)."""
    from wf.engine._threads import StepThreads

    loop_thread = threading.get_ident()
    off_loop: list[str] = []
    real_cancel = asyncio.TimerHandle.cancel

    def cancel(handle: asyncio.TimerHandle) -> None:
        if threading.get_ident() != loop_thread:
            off_loop.append(threading.current_thread().name)
        real_cancel(handle)

    monkeypatch.setattr(asyncio.TimerHandle, "cancel", cancel)
    pool = StepThreads(1)
    try:
        async with asyncio.timeout(10):
            await asyncio.gather(*(pool.run(lambda: None, f"step {i}") for i in range(50)))
    finally:
        pool.shutdown()
    assert off_loop == []
