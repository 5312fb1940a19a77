"""A dropped server connection ends a worker's leases, not its runs: the worker drives them
again at once (``wf.LeaseLost``), and ``--until-idle`` finishes them rather than exit with
them undriven.

A lone worker is the case that matters: with others beside it they take the runs over, but a
worker alone had waited 30 s before trying them again (as after a full disk), and with
``--until-idle`` left them due and exited 1. Real connections are cut here: Redis's ``CLIENT
KILL`` of the store's connections, PostgreSQL's ``pg_terminate_backend`` of its lock connection.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import wf
from wf import Engine
from wf.engine._current import use_engine
from wf.engine._worker import LEASE_LOST_RETRIES
from wf.store import RunStatus, Store

RUNS = 8

began: list[int] = []
"""The step attempts begun (the test cuts the connection once some are under way)."""


@wf.step
async def pause(i: int) -> int:
    began.append(i)
    await asyncio.sleep(0.4)
    return i


@wf.workflow(name="lost_leases:steps")
async def steps(x: int) -> int:
    # Two seconds a run: longer than PostgreSQL's lock connection checks take to notice a cut
    # (every second), so the drives in flight do lose their leases.
    for i in range(5):
        x += await pause(i)
    return x


@wf.workflow(name="lost_leases:quick")
async def quick(x: int) -> int:
    return x + 1


Cut = Callable[[Engine, list[str]], Awaitable[None]]


async def _cut_redis(engine: Engine, ids: list[str]) -> None:
    from tests.store.test_redis import kill_clients

    name = engine.store.client_name  # type: ignore[attr-defined]
    assert kill_clients(name=name + "-lease") == 1  # the holder: every lease ends with it
    kill_clients(name=name)  # and the pool's, as a failover or a network blip cuts them


async def _cut_postgres(engine: Engine, ids: list[str]) -> None:
    from tests.store.test_postgres import _cut_lock_connection

    await _cut_lock_connection(engine.store.schema, ids[0])  # type: ignore[attr-defined]


CUTS: dict[str, Cut] = {"redis": _cut_redis, "postgres": _cut_postgres}

CUTTERS = {"redis": "tests.store.test_redis", "postgres": "tests.store.test_postgres"}
"""The test modules the cuts come from: imported before a test times its cut (importing one
takes seconds on a loaded machine, which the timed recovery must not count)."""


@pytest.mark.stores("redis", "postgres")
@pytest.mark.timeout(60)
async def test_a_lone_worker_drives_again_at_once_the_runs_a_dropped_connection_cut_off(
    store_kind: str, engine_store: Store
) -> None:
    engine, cut = Engine(engine_store), CUTS[store_kind]
    importlib.import_module(CUTTERS[store_kind])
    began.clear()
    lost: list[BaseException] = []
    with use_engine(engine):
        ids = [(await wf.start(steps, n, detach=True)).id for n in range(RUNS)]
        worker = wf.Worker(
            engine,
            concurrency=RUNS,
            on_error=lambda run_id, error: lost.append(error),
        )
        draining = asyncio.create_task(worker.run(until_idle=True))
        async with asyncio.timeout(10):
            while len(began) < RUNS:  # every run is in its first step
                await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        cut_at = loop.time()
        await cut(engine, ids)
        await asyncio.wait_for(draining, 30)
        took = loop.time() - cut_at
        records = [await engine.store.get_run(run_id) for run_id in ids]
    assert [r.status for r in records] == [RunStatus.COMPLETED] * RUNS
    assert [r.output for r in records] == [n + 10 for n in range(RUNS)]
    assert await worker.undriven() == []
    assert lost and all(isinstance(error, wf.LeaseLost) for error in lost), lost
    # Driven again within about a second of the cut, not after the 30 s of a store failure.
    assert took < 10, took


@pytest.fixture
def losing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[n]``: the next ``n`` leases the memory store hands out are lost as soon as their
    driver reads the run (what a connection dropping at that moment does on a server store)."""
    from wf.store.memory import _MemoryLease

    left = [0]
    real = _MemoryLease.read_run

    async def read_run(self: _MemoryLease, store: Store) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise wf.LeaseLost(f"lease on run {self.run_id} was lost: the test dropped it")
        return await real(self, store)

    monkeypatch.setattr(_MemoryLease, "read_run", read_run)
    return left


@pytest.mark.timeout(60)
async def test_a_run_whose_lease_is_lost_a_few_times_is_driven_to_its_end(
    losing: list[int],
) -> None:
    from wf.store.memory import MemoryStore

    engine = Engine(MemoryStore())  # the real clock: the retries are a second apart
    losing[0] = LEASE_LOST_RETRIES
    lost: list[BaseException] = []
    with use_engine(engine):
        run = await wf.start(quick, 1, detach=True)
        worker = wf.Worker(engine, poll=0.05, on_error=lambda run_id, error: lost.append(error))
        await asyncio.wait_for(worker.run(until_idle=True), 30)
        assert await run.result() == 2
    assert len(lost) == LEASE_LOST_RETRIES and await worker.undriven() == []


@pytest.mark.timeout(60)
async def test_a_lease_lost_again_and_again_is_a_store_failure_and_until_idle_ends(
    losing: list[int],
) -> None:
    from wf.store.memory import MemoryStore

    engine = Engine(MemoryStore())  # the real clock: the retries are a second apart
    losing[0] = 100  # a connection that keeps dropping
    lost: list[BaseException] = []
    with use_engine(engine):
        run = await wf.start(quick, 1, detach=True)
        worker = wf.Worker(engine, poll=0.05, on_error=lambda run_id, error: lost.append(error))
        await asyncio.wait_for(worker.run(until_idle=True), 30)
    assert len(lost) == LEASE_LOST_RETRIES + 1  # then left for 30 s, like a full disk
    assert await worker.undriven() == [run.id]


@wf.step
async def blocking() -> int:
    time.sleep(1.5)  # blocking code in an async step: the whole loop stops
    return 1


@wf.workflow(name="lost_leases:blocks")
async def blocks() -> int:
    return await blocking()


@pytest.mark.timeout(60)
async def test_a_step_blocking_the_loop_past_the_lease_ttl_loses_no_lease_on_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop blocked longer than ``lease_ttl`` (and than the holder connection's reply is
    due): nobody took the runs meanwhile, so every lease is still its driver's when the loop
    turns again (as PostgreSQL's session locks are): the blocking run and the runs beside it
    complete, none is driven again, nothing is blamed on the store."""
    from tests.engine.conftest import REDIS_URL, require_server

    require_server("redis")  # before importing redis-py: a kernel-only install has none

    from tests.store.helpers import drop_redis_keys
    from wf.store.redis import RedisStore, _holder

    monkeypatch.setattr(_holder, "BLOCK", 0.2)
    monkeypatch.setattr(_holder, "SLACK", 0.3)
    monkeypatch.setattr(_holder, "TICK", 0.1)
    prefix = f"wf_blocked:{uuid.uuid4().hex[:12]}:"
    store = RedisStore(REDIS_URL, prefix=prefix, lease_ttl=0.5)
    engine = Engine(store)
    lost: list[BaseException] = []
    try:
        with use_engine(engine):
            ids = [(await wf.start(steps, n, detach=True)).id for n in range(3)]
            ids.append((await wf.start(blocks, detach=True)).id)
            worker = wf.Worker(engine, on_error=lambda run_id, error: lost.append(error))
            await asyncio.wait_for(worker.run(until_idle=True), 30)
            records = [await store.get_run(run_id) for run_id in ids]
        assert [r.status for r in records] == [RunStatus.COMPLETED] * 4, records
        assert lost == [] and await worker.undriven() == []
    finally:
        await store.close()
        drop_redis_keys(REDIS_URL, prefix)


executions: list[tuple[int, float, float]] = []
"""(run input, start, end) of each execution of ``slow_sync``."""


@wf.step
def slow_sync(x: int) -> int:
    began.append(x)
    start = time.monotonic()
    time.sleep(4)
    executions.append((x, start, time.monotonic()))
    return x


@wf.workflow(name="lost_leases:sync")
async def sync_steps(x: int) -> int:
    return await slow_sync(x)


@pytest.mark.stores("redis", "postgres")
@pytest.mark.timeout(60)
async def test_a_lone_worker_never_runs_a_sync_step_again_while_its_thread_still_runs(
    store_kind: str, engine_store: Store
) -> None:
    """The lease is lost mid-step; the step's thread runs on (threads cannot be stopped):
    the worker drives the run again only once that thread returned."""
    engine, cut = Engine(engine_store), CUTS[store_kind]
    began.clear()
    executions.clear()
    with use_engine(engine):
        ids = [(await wf.start(sync_steps, n, detach=True)).id for n in range(2)]
        worker = wf.Worker(engine, concurrency=2, on_error=lambda run_id, error: None)
        draining = asyncio.create_task(worker.run(until_idle=True))
        async with asyncio.timeout(10):
            while len(began) < 2:
                await asyncio.sleep(0.01)
        await cut(engine, ids)
        await asyncio.wait_for(draining, 30)
        records = [await engine.store.get_run(run_id) for run_id in ids]
    assert [r.status for r in records] == [RunStatus.COMPLETED] * 2
    for n in range(2):
        mine = sorted((start, end) for x, start, end in executions if x == n)
        for (_, end), (start, _) in itertools.pairwise(mine):
            assert start >= end, f"run {n}: two executions of its step overlapped: {mine}"


told: list[tuple[int, bool]] = []
"""(run input, whether ``wf.cancel_requested()`` turned true) of each ``polling_sync``."""


@wf.step
def polling_sync(x: int) -> int:
    began.append(x)
    deadline = time.monotonic() + 15
    while not wf.cancel_requested() and time.monotonic() < deadline:
        time.sleep(0.01)  # a long sync step that looks whether to stop, as it should
    told.append((x, wf.cancel_requested()))
    return x


@wf.workflow(name="lost_leases:polling")
async def polling_steps(x: int) -> int:
    return await polling_sync(x)


@pytest.mark.stores("redis", "postgres")
@pytest.mark.timeout(60)
async def test_a_sync_step_whose_driver_lost_its_lease_is_told_to_stop(
    store_kind: str, engine_store: Store
) -> None:
    """Another process may take the run (and run the step again) as soon as the lease is
    lost; the old attempt's thread cannot be stopped, but ``wf.cancel_requested()`` tells it
    to stop early (it stayed false: the step ran on to its end beside the new attempt)."""
    engine, cut = Engine(engine_store), CUTS[store_kind]
    began.clear()
    told.clear()
    with use_engine(engine):
        ids = [(await wf.start(polling_steps, 7, detach=True)).id]
        worker = wf.Worker(engine, concurrency=1, on_error=lambda run_id, error: None)
        serving = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(10):
                while not began:
                    await asyncio.sleep(0.01)
            await cut(engine, ids)
            async with asyncio.timeout(10):
                while not told:
                    await asyncio.sleep(0.01)
        finally:
            worker.stop()
            await serving
    assert told[0] == (7, True)
