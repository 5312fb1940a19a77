"""A store that does not answer for a while (``wf.StoreUnavailable``: a dropped or refused
connection, a lock timeout) does not end a worker: its looks at the queue are tried again
with backoff, the drives it broke are driven again within a second, and ``--until-idle`` waits
for them. A store that stays unavailable past ``outage_limit`` stops it, as a store failure of
another kind (a full disk) does at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import wf
from tests.engine.conftest import POSTGRES_DSN, require_server
from wf import Engine
from wf.engine._current import use_engine
from wf.store import RunStatus, Store
from wf.store.memory import MemoryStore


@wf.step
async def nap(i: int) -> int:
    await asyncio.sleep(0.05)
    return i


@wf.workflow(name="store_outage:steps")
async def steps(x: int) -> int:
    for i in range(5):
        x += await nap(i)
    return x


@wf.workflow(name="store_outage:slow")
async def slow(x: int) -> int:
    for i in range(20):
        x += await nap(i)
    return x


@wf.workflow(name="store_outage:quick")
async def quick(x: int) -> int:
    return x + 1


@wf.workflow(name="store_outage:parent")
async def parent(x: int) -> int:
    child = await wf.start(quick, x)
    return int(await child.result()) * 10


def _failing(store: Store, name: str, times: int) -> list[int]:
    """Make the store's ``name`` fail ``times`` times with ``wf.StoreUnavailable``; the
    number of failures so far."""
    real = getattr(store, name)
    failed = [0]

    async def call(*args: Any, **kwargs: Any) -> Any:
        if failed[0] < times:
            failed[0] += 1
            raise wf.StoreUnavailable(f"PostgreSQL failed to {name}: the test cut it")
        return await real(*args, **kwargs)

    setattr(store, name, call)
    return failed


@pytest.mark.timeout(60)
async def test_a_worker_waits_out_a_store_that_does_not_answer_for_a_while(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.engine import _worker

    # Four failures in a row, with pauses of 50 ms doubling (0.75 s, not 7.5 s at 0.5 s).
    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.05, 5.0))
    store = MemoryStore()
    engine = Engine(store)
    with use_engine(engine):
        run = await wf.start(quick, 1, detach=True)
        failed = _failing(store, "claim", 4)
        worker = wf.Worker(engine, poll=0.05, retention=False)
        with caplog.at_level(logging.WARNING, logger="wf.worker"):
            await asyncio.wait_for(worker.run(until_idle=True), 30)
        assert await run.result() == 2
    assert failed[0] == 4
    said = [r.getMessage() for r in caplog.records]
    assert sum("the store failed" in m for m in said) == 1, said  # once, not per try
    assert any("the store answers again" in m for m in said), said


@pytest.mark.timeout(60)
async def test_schedules_the_store_cannot_read_for_a_while_are_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reading the schedules failing at every look during an outage: one line says so, one
    that it works again (it was one line per look: 60 in one outage)."""
    store = MemoryStore()
    engine = Engine(store)
    with use_engine(engine):
        failed = _failing(store, "due_schedules", 6)
        worker = wf.Worker(engine, poll=0.01, retention=False)
        with caplog.at_level(logging.DEBUG, logger="wf.worker"):
            serving = asyncio.create_task(worker.run())
            try:
                async with asyncio.timeout(20):
                    while worker.schedules_read_at is None:
                        await asyncio.sleep(0.01)
            finally:
                worker.stop()
                await serving
    assert failed[0] == 6
    said = [r for r in caplog.records if "firing schedules" in r.getMessage()]
    loud = [r.getMessage() for r in said if r.levelno >= logging.WARNING]
    assert len(said) == 7 and len(loud) == 2, loud  # the quiet ones are debug lines
    assert "the test cut it" in loud[0] and "works again" in loud[1], loud


@pytest.mark.timeout(60)
async def test_a_worker_waits_out_a_store_that_fails_as_it_takes_its_place() -> None:
    """The worker's first call to the store as it starts (its place among the deployment's
    workers) failing with a dropped connection is an outage like any other: waited out, not
    the worker's end (it exited 3)."""
    store = MemoryStore()
    engine = Engine(store)
    with use_engine(engine):
        run = await wf.start(quick, 1, detach=True)
        failed = _failing(store, "try_slot", 2)
        worker = wf.Worker(engine, poll=0.05, retention=False)
        await asyncio.wait_for(worker.run(until_idle=True), 30)
        assert await run.result() == 2
    assert failed[0] == 2


@pytest.mark.timeout(60)
async def test_a_worker_waits_out_a_store_that_does_not_answer_as_it_starts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening the store as the worker starts fails again and again (a PostgreSQL server
    restarting, a backend terminated while it checks its tables): waited out under the
    worker's ``outage_limit``, said once, and once when it answers (it exited 3 after three
    tries, 4 s); a store that keeps failing past the limit still ends it."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.01, 0.05))
    store = MemoryStore()
    engine = Engine(store)
    with use_engine(engine):
        run = await wf.start(quick, 1, detach=True)
        failed = _failing(store, "open", 12)
        worker = wf.Worker(engine, poll=0.05, retention=False)
        with caplog.at_level(logging.WARNING, logger="wf.worker"):
            await asyncio.wait_for(worker.run(until_idle=True), 30)
        assert await run.result() == 2
        assert failed[0] == 12
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2, said
        assert "does not answer as the worker starts" in said[0], said
        assert "answers again" in said[1], said
        broken = MemoryStore()
        _failing(broken, "open", 10**6)
        with pytest.raises(wf.StoreUnavailable, match="the test cut it"):
            limited = wf.Worker(Engine(broken), retention=False, start_wait=0.3)
            await asyncio.wait_for(limited.run(), 30)


@pytest.mark.timeout(60)
async def test_a_store_that_never_answered_is_given_the_start_wait_not_the_outage_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that has not answered once since the worker started (a mistyped address, one
    nothing answers at) ends it after ``start_wait`` seconds counted from its first try, with
    one line that says so: it was waited for the whole ``outage_limit`` (300 s) first."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.01, 0.05))
    loop = asyncio.get_running_loop()
    broken = MemoryStore()
    failed = _failing(broken, "open", 10**6)
    worker = wf.Worker(Engine(broken), retention=False, outage_limit=60, start_wait=0.3)
    began = loop.time()
    with (
        caplog.at_level(logging.WARNING, logger="wf.worker"),
        pytest.raises(wf.StoreUnavailable) as raised,
    ):
        await asyncio.wait_for(worker.run(), 30)
    took = loop.time() - began
    assert 0.3 <= took < 5, took
    assert failed[0] > 2  # tried again meanwhile: a server restarting may answer in time
    assert str(raised.value) == (
        "PostgreSQL failed to open: the test cut it"
        " (no answer in the 0.3s since the worker started)"
    )
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "trying again until it answers (for up to 0.3s)" in said[0], said

    # A try that itself takes longer than the wait (an address where packets are dropped:
    # the connection times out) is the only one: the wait is counted from its start.
    slow = MemoryStore()
    tries = [0]

    async def unanswered() -> None:
        tries[0] += 1
        await asyncio.sleep(0.5)
        raise wf.StoreUnavailable("cannot connect to PostgreSQL at x: connection timeout expired")

    slow.open = unanswered  # type: ignore[method-assign]
    caplog.clear()
    began = loop.time()
    with (
        caplog.at_level(logging.WARNING, logger="wf.worker"),
        pytest.raises(wf.StoreUnavailable, match=r"no answer in the 0\.3s"),
    ):
        await asyncio.wait_for(wf.Worker(Engine(slow), start_wait=0.3).run(), 30)
    assert tries[0] == 1 and loop.time() - began < 5
    assert caplog.records == []  # the error is the one line


async def test_the_start_wait_comes_from_wf_start_wait(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``WF_START_WAIT`` sets the start wait of a worker not given one (a database still
    initialising beside it); a value that is no number of seconds is said once and ignored."""
    from wf.engine import _worker

    monkeypatch.setenv("WF_START_WAIT", "120")
    assert wf.Worker(Engine(MemoryStore())).start_wait == 120
    assert wf.Worker(Engine(MemoryStore()), start_wait=0.5).start_wait == 0.5
    monkeypatch.setenv("WF_START_WAIT", "soon")
    with caplog.at_level(logging.WARNING, logger="wf"):
        assert wf.Worker(Engine(MemoryStore())).start_wait == _worker.START_WAIT
    assert [r.getMessage() for r in caplog.records] == [
        "ignoring WF_START_WAIT='soon': not a number of seconds"
    ]


@pytest.mark.timeout(60)
async def test_a_worker_inside_a_program_waits_for_its_store_under_the_outage_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``Worker.serve`` (``wf serve``, ``wf dev``) starts again after a failure rather than
    end the program: a store that has not answered yet is waited for under ``outage_limit``,
    said once, not given up after ``start_wait`` only to be started again."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.02, 0.05))
    store = MemoryStore()
    failed = _failing(store, "open", 20)  # about 0.8 s: longer than the start wait
    worker = wf.Worker(Engine(store), retention=False, start_wait=0.1, outage_limit=30)
    with caplog.at_level(logging.WARNING, logger="wf.worker"):
        task = asyncio.ensure_future(worker.serve(grace=0))
        began = asyncio.get_running_loop().time()
        while failed[0] < 20 or not worker._prepared:
            assert asyncio.get_running_loop().time() - began < 20, failed
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 10)
    said = [r.getMessage() for r in caplog.records]
    assert not any("the worker stopped" in m for m in said), said
    assert sum("does not answer as the worker starts" in m for m in said) == 1, said


@pytest.mark.timeout(60)
async def test_a_store_that_answered_is_waited_for_past_the_start_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the store answered, an outage is ridden out under ``outage_limit``, however short
    ``start_wait`` is."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.05, 0.1))
    store = MemoryStore()
    engine = Engine(store)
    with use_engine(engine):
        run = await wf.start(quick, 1, detach=True)
        failed = _failing(store, "claim", 8)  # 0.05 + 0.1 * 7: longer than the start wait
        worker = wf.Worker(engine, poll=0.05, retention=False, start_wait=0.01)
        await asyncio.wait_for(worker.run(until_idle=True), 30)
        assert await run.result() == 2
    assert failed[0] == 8


@pytest.mark.timeout(60)
async def test_a_store_unavailable_past_the_limit_stops_the_worker() -> None:
    store = MemoryStore()
    engine = Engine(store)
    with use_engine(engine):
        await wf.start(quick, 1, detach=True)
        _failing(store, "claim", 10**6)
        worker = wf.Worker(engine, poll=0.05, retention=False, outage_limit=1.0)
        with pytest.raises(wf.StoreUnavailable, match="the test cut it"):
            await asyncio.wait_for(worker.run(until_idle=True), 30)


@pytest.mark.timeout(60)
async def test_a_drive_cut_by_a_dropped_connection_is_driven_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A journal append failed with the connection under it: the journal is the truth, so the
    run is driven again a second later (not after 30 s), and ``--until-idle`` waits for it
    rather than exit with the run undriven."""
    store = MemoryStore()
    engine = Engine(store)
    errors: list[BaseException] = []
    with use_engine(engine):
        run = await wf.start(steps, 0, detach=True)
        from wf.store.memory import _MemoryLease

        real = _MemoryLease.append
        failed = [0]

        async def append(self: _MemoryLease, events: Any) -> None:
            if failed[0] < 1:  # the connection drops under the drive's first append
                failed[0] += 1
                raise wf.StoreUnavailable("PostgreSQL failed to append to the journal: cut")
            await real(self, events)

        # As on PostgreSQL, whose appends are all awaited (group commit).
        monkeypatch.setattr(_MemoryLease, "append_pending", lambda self, events: False)
        monkeypatch.setattr(_MemoryLease, "append", append)
        worker = wf.Worker(
            engine, poll=0.05, retention=False, on_error=lambda r, e: errors.append(e)
        )
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(worker.run(until_idle=True), 30)
        took = loop.time() - began
        assert await run.result() == 10
    assert failed[0] == 1 and [type(e) for e in errors] == [wf.StoreUnavailable]
    assert await worker.undriven() == []
    assert took < 10, took


def _cut_steps(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """Make the memory store's journal appends that record a step's end fail ``times`` times
    with ``wf.StoreUnavailable`` (every append awaited, as on PostgreSQL and Redis): each cut
    drive leaves its marker and its step started, as a driver that died would."""
    from wf.store.memory import _MemoryLease

    real = _MemoryLease.append
    failed = [0]

    async def append(self: _MemoryLease, events: Any) -> None:
        if failed[0] < times and any(e.get("type") == "step_completed" for e in events):
            failed[0] += 1
            raise wf.StoreUnavailable("PostgreSQL failed to append to the journal: cut")
        await real(self, events)

    monkeypatch.setattr(_MemoryLease, "append_pending", lambda self, events: False)
    monkeypatch.setattr(_MemoryLease, "append", append)
    return failed


@pytest.mark.timeout(60)
async def test_drives_cut_again_and_again_are_no_deaths_of_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run whose drives a store outage cut more than ``max_recoveries`` times in a row: each
    cut drive reads as a death in the journal, but the process saw it end, so the run is
    neither driven alone nor failed with ``wf.RunStalled``: it completes once the store
    answers. The pause before each try stays short (it was 30 s after the third cut)."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "LEASE_LOST_RETRY", 0.02)
    store = MemoryStore()
    engine = Engine(store, max_recoveries=4)
    with use_engine(engine):
        run = await wf.start(steps, 0, detach=True)
        failed = _cut_steps(monkeypatch, 8)
        worker = wf.Worker(engine, poll=0.05, retention=False, on_error=lambda r, e: None)
        serving = asyncio.create_task(worker.run())
        try:
            record = await asyncio.wait_for(_ended(store, run.id), 20)
        finally:
            worker.stop()
            await serving
    assert failed[0] == 8
    assert (record.status, record.output) == (RunStatus.COMPLETED, 10), record.error


async def _ended(store: Store, run_id: str) -> Any:
    """The run's record once it ended (driven by a worker alone: ``result()`` would drive it
    here too, and raise what cut that drive)."""
    while not (record := await store.get_run(run_id)).status.is_terminal:
        await asyncio.sleep(0.02)
    return record


@pytest.mark.timeout(60)
async def test_a_child_drive_cut_by_a_dropped_connection_is_said_once_and_driven_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A child run driven beside its parent (a drive nobody awaits) whose drive a dropped
    connection cut: one warning line, the child driven again by the worker, and no "Task
    exception was never retrieved" traceback."""
    import gc

    store = MemoryStore()
    engine = Engine(store)
    loop = asyncio.get_running_loop()
    unretrieved: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    real = store.try_acquire
    failed = [0]

    async def try_acquire(run_id: str) -> Any:
        if run_id.startswith("p1.") and failed[0] < 1:
            failed[0] += 1
            raise wf.StoreUnavailable("PostgreSQL failed to take a lease: cut")
        return await real(run_id)

    store.try_acquire = try_acquire  # type: ignore[method-assign]
    try:
        with use_engine(engine), caplog.at_level(logging.WARNING, logger="wf.worker"):
            run = await wf.start(parent, 1, run_id="p1", detach=True)
            worker = wf.Worker(engine, poll=0.05, retention=False)
            await asyncio.wait_for(worker.run(until_idle=True), 30)
            assert await run.result() == 20
            gc.collect()
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert failed[0] == 1
    assert unretrieved == []
    said = [r.getMessage() for r in caplog.records if "p1." in r.getMessage()]
    assert len(said) == 1 and "driven again" in said[0], said


@pytest.mark.timeout(60)
async def test_a_childs_creation_cut_by_a_dropped_connection_does_not_fail_its_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store failing as the workflow's code starts a child (here the child's creation)
    is the driver's failure, not an exception of the workflow's: the parent is driven again
    and completes (it had failed with ``wf.StoreUnavailable``)."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "LEASE_LOST_RETRY", 0.02)
    store = MemoryStore()
    engine = Engine(store)
    real = store.create_run
    failed = [0]

    async def create_run(record: Any, *args: Any, **kwargs: Any) -> bool:
        if record.id.startswith("p2.") and failed[0] < 1:
            failed[0] += 1
            raise wf.StoreUnavailable("PostgreSQL failed to create a run: cut")
        return await real(record, *args, **kwargs)

    store.create_run = create_run  # type: ignore[method-assign]
    with use_engine(engine):
        await wf.start(parent, 2, run_id="p2", detach=True)
        worker = wf.Worker(engine, poll=0.05, retention=False, on_error=lambda r, e: None)
        await asyncio.wait_for(worker.run(until_idle=True), 30)
        record = await store.get_run("p2")
    assert failed[0] == 1
    assert (record.status, record.output) == (RunStatus.COMPLETED, 30), record.error


@pytest.fixture
async def postgres_store() -> AsyncIterator[tuple[Store, str]]:
    """A PostgreSQL store whose connections (and only they) carry a name of their own, so
    that the test can terminate every one of them; and that name."""
    require_server("postgres")
    import psycopg
    from psycopg.conninfo import make_conninfo

    from wf.store.postgres import PostgresStore

    schema = f"wf_outage_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(make_conninfo(POSTGRES_DSN, application_name=schema), schema=schema)
    try:
        yield store, schema
    finally:
        await store.close()
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _terminate_all(name: str) -> int:
    import psycopg

    async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            [name],
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


@pytest.mark.timeout(120)
async def test_a_worker_goes_on_while_every_connection_of_its_store_is_cut(
    postgres_store: tuple[Store, str],
) -> None:
    """Every backend of the store (queries, leases, ``LISTEN``) terminated again and again
    while a lone worker drives runs: the worker neither stops nor gives up a run, and every run
    completes (it had ended at the first cut that met a look at the queue)."""
    store, name = postgres_store
    engine = Engine(store)
    with use_engine(engine):
        ids = [(await wf.start(steps, n, detach=True)).id for n in range(24)]
        worker = wf.Worker(engine, concurrency=4, retention=False, on_error=lambda r, e: None)
        draining = asyncio.create_task(worker.run(until_idle=True))
        cuts = 0
        for _ in range(12):
            await asyncio.sleep(0.25)
            if draining.done():
                break
            cuts += await _terminate_all(name)
        await asyncio.wait_for(draining, 90)
        records = [await store.get_run(run_id) for run_id in ids]
    assert cuts > 0
    assert [r.status for r in records] == [RunStatus.COMPLETED] * len(ids)
    assert [r.output for r in records] == [n + 10 for n in range(len(ids))]
    assert await worker.undriven() == []


@pytest.mark.timeout(120)
async def test_a_lone_worker_drives_again_at_once_the_runs_whose_writes_a_cut_failed(
    postgres_store: tuple[Store, str],
) -> None:
    """The query connections (not the lease's) terminated while every run is in a step: the
    appends on them fail, and those runs are driven again within a second, not after the 30 s
    of a store failure, and ``--until-idle`` waits for them (it had exited 1 leaving them
    due)."""
    import psycopg

    store, _ = postgres_store
    engine = Engine(store)
    errors: list[BaseException] = []
    with use_engine(engine):
        ids = [(await wf.start(slow, n, detach=True)).id for n in range(8)]
        worker = wf.Worker(
            engine, concurrency=8, retention=False, on_error=lambda r, e: errors.append(e)
        )
        draining = asyncio.create_task(worker.run(until_idle=True))
        pool = store._session.pool  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        began = loop.time()
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as admin:
            await asyncio.sleep(0.3)  # every run is being driven
            for _ in range(1000):  # until a write was cut (a write is sent twice), or 5 s
                await asyncio.sleep(0.005)
                for pid in list(pool.pids):
                    await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
                if errors or draining.done():
                    break
        await asyncio.wait_for(draining, 90)
        took = loop.time() - began
        records = [await store.get_run(run_id) for run_id in ids]
    assert [r.status for r in records] == [RunStatus.COMPLETED] * len(ids)
    assert await worker.undriven() == []
    assert errors and all(isinstance(e, wf.StoreUnavailable | wf.LeaseLost) for e in errors)
    assert took < 20, took


@pytest.mark.stores("redis")
@pytest.mark.timeout(120)
async def test_a_redis_worker_goes_on_while_its_connections_are_cut(
    store_kind: str, engine_store: Store
) -> None:
    """The same on Redis: every connection of the store (``CLIENT KILL``: the pool's and the
    lease holder's) cut again and again while a lone worker drives runs."""
    from tests.store.test_redis import kill_clients

    engine = Engine(engine_store)
    name = engine_store.client_name  # type: ignore[attr-defined]
    with use_engine(engine):
        ids = [(await wf.start(steps, n, detach=True)).id for n in range(24)]
        worker = wf.Worker(engine, concurrency=4, retention=False, on_error=lambda r, e: None)
        draining = asyncio.create_task(worker.run(until_idle=True))
        for _ in range(12):
            await asyncio.sleep(0.25)
            if draining.done():
                break
            kill_clients(name=name)
            kill_clients(name=name + "-lease")
        await asyncio.wait_for(draining, 90)
        records = [await engine_store.get_run(run_id) for run_id in ids]
    assert [r.status for r in records] == [RunStatus.COMPLETED] * len(ids)
    assert await worker.undriven() == []
