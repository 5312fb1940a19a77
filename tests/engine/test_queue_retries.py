"""Retries and the queue: a retried run of a group re-enters its lane at the back (a retry is a
new start, and lanes are FIFO in order of start); a parent gets the outcome of a child that
failed and was then retried, on every store."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

import wf
from wf import Engine
from wf.store.local import LocalStore, _fsops
from wf.testing import MockClock, TestEngine

log: list[str] = []
gates: dict[str, asyncio.Event] = {}
failing: set[str] = set()


@pytest.fixture(autouse=True)
def _reset() -> None:
    log.clear()
    gates.clear()
    failing.clear()


def gate(name: str) -> asyncio.Event:
    return gates.setdefault(name, asyncio.Event())


@wf.step(max_retries=0)
async def work(name: str, gated: bool) -> str:
    log.append(f"start {name}")
    if gated:
        await gate(name).wait()
    if name in failing:
        failing.discard(name)  # fails once: the retry succeeds
        log.append(f"fail {name}")
        raise RuntimeError(f"{name} failed")
    log.append(f"end {name}")
    return name


@wf.workflow(group="lane")
async def laned(name: str, gated: bool = False, pad: str = "") -> str:
    return await work(name, gated)


@wf.workflow
async def child_flow(name: str) -> str:
    return await work(name, False)


@wf.workflow(max_attempts=3, backoff=lambda attempt: 600.0)
async def parent_flow(name: str) -> str:
    child = await wf.start(child_flow, name)
    return "parent got " + await child.result()


@wf.workflow(max_attempts=2, backoff=lambda attempt: 1.0)
async def patient_parent(name: str) -> str:
    child = await wf.start(child_flow, name)
    await gate_step(f"parent of {name}")  # the child fails meanwhile, and is retried
    return "parent got " + await child.result()


@wf.step
async def gate_step(name: str) -> str:
    await gate(name).wait()
    return name


@pytest_asyncio.fixture
async def worker(wf_engine: Engine) -> AsyncIterator[wf.Worker]:
    """A worker serving the store for the whole test."""
    serving = wf.Worker(wf_engine, concurrency=10, poll=0.05)
    task = asyncio.ensure_future(serving.run())
    try:
        yield serving
    finally:
        serving.stop()
        await asyncio.wait_for(task, 10)


async def until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Until ``condition()`` (or the value it gives, awaited) is true; at most ``timeout`` s."""
    async with asyncio.timeout(timeout):
        while True:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return
            await asyncio.sleep(0.01)


async def test_a_retried_run_re_enters_its_lane_behind_the_runs_started_before(
    wf_engine: Engine, worker: wf.Worker
) -> None:
    failing.add("a")
    a = await wf.start(laned, "a", detach=True)
    with pytest.raises(wf.RunFailed):
        await a.result(timeout=10)
    b = await wf.start(laned, "b", True, detach=True)  # runs until its gate opens
    await until(lambda: "start b" in log)
    await retry(a)  # a new start of a: behind b in the lane
    c = await wf.start(laned, "c", detach=True)  # started after the retry: behind a
    # The worker leaves a and c waiting in the lane (b is running), or tries and holds them.
    await until(lambda: worker.held_drives >= 2 or {a.id, c.id} <= worker.waiting)
    await asyncio.sleep(0.1)
    assert log == ["start a", "fail a", "start b"]
    assert await a.status() == wf.RunStatus.PENDING
    gate("b").set()
    assert [await r.result(timeout=10) for r in (b, a, c)] == ["b", "a", "c"]
    assert log == ["start a", "fail a", "start b", "end b", "start a", "end a", "start c", "end c"]


async def test_a_retried_run_waits_for_runs_started_while_it_was_failed(
    wf_engine: Engine, worker: wf.Worker
) -> None:
    failing.add("a")
    a = await wf.start(laned, "a", detach=True)
    with pytest.raises(wf.RunFailed):
        await a.result(timeout=10)
    b = await wf.start(laned, "b", True, detach=True)
    c = await wf.start(laned, "c", detach=True)  # waits behind b
    await until(lambda: "start b" in log)
    await retry(a)
    await until(lambda: worker.held_drives >= 2 or {a.id, c.id} <= worker.waiting)
    gate("b").set()
    assert [await r.result(timeout=10) for r in (b, c, a)] == ["b", "c", "a"]
    assert log == ["start a", "fail a", "start b", "end b", "start c", "end c", "start a", "end a"]


async def test_a_parent_retried_after_its_child_was_retried_gets_the_new_outcome(
    wf_engine: Engine, worker: wf.Worker
) -> None:
    failing.add("kid")
    parent = await wf.start(parent_flow.with_options(max_attempts=1), "kid", detach=True)
    with pytest.raises(wf.RunFailed, match="kid failed"):
        await parent.result(timeout=10)
    [child_record] = await wf_engine.store.list_runs(parent_id=parent.id)
    child = wf.get_run(child_record.id)
    assert await child.status() == wf.RunStatus.FAILED
    await retry(child)
    assert await child.result(timeout=10) == "kid"
    await retry(parent)  # the new attempt awaits the child again: its outcome now
    assert await parent.result(timeout=10) == "parent got kid"
    assert log == ["start kid", "fail kid", "start kid", "end kid"]


async def test_a_parent_between_attempts_is_woken_by_its_retried_child(
    wf_engine: Engine, mock_clock: MockClock, worker: wf.Worker
) -> None:
    mock_clock.autojump = False  # the parent's backoff (600 s) never ends by itself here
    failing.add("kid")
    parent = await wf.start(parent_flow, "kid", detach=True)  # 3 attempts, 600 s apart
    await until(lambda: "fail kid" in log)
    await until(lambda: _attempt(wf_engine, parent.id, 2))
    [child_record] = await wf_engine.store.list_runs(parent_id=parent.id)
    await retry(wf.get_run(child_record.id))
    assert await parent.result(timeout=10) == "parent got kid"
    assert (await parent.record()).attempt == 2


async def _attempt(engine: Engine, run_id: str, attempt: int) -> bool:
    record = await engine.store.get_run(run_id)
    return record.attempt == attempt and record.status is wf.RunStatus.PENDING


async def retry(run: Any) -> None:
    """``run.retry()``, once the driver that recorded its failure has let go of it."""
    async with asyncio.timeout(10):
        while True:
            try:
                await run.retry()
                return
            except wf.UsageError as error:
                if "being driven" not in str(error):
                    raise
            await asyncio.sleep(0.01)


async def _failed(run: Any) -> bool:
    return bool(await run.status() == wf.RunStatus.FAILED)


async def test_a_childs_failure_taken_in_stands_for_the_attempt_and_the_next_gets_the_new_one(
    wf_engine: Engine, worker: wf.Worker
) -> None:
    failing.add("kid")
    parent = await wf.start(patient_parent, "kid", detach=True)
    await until(lambda: "fail kid" in log)
    [child_record] = await wf_engine.store.list_runs(parent_id=parent.id)
    child = wf.get_run(child_record.id)
    await until(lambda: _failed(child))
    await retry(child)
    assert await child.result(timeout=10) == "kid"
    gate("parent of kid").set()
    # The parent took in the failure while it waited at its gate: once taken in, an outcome
    # stands for the attempt (its replay must see the same). Its next attempt awaits the child
    # again and gets the outcome of the child's retry.
    assert await parent.result(timeout=10) == "parent got kid"
    record = await parent.record()
    assert record.attempt == 2


@pytest.mark.stores("local")
@pytest.mark.parametrize("pad", [0, 100_000], ids=["small", "with-record-file"])
async def test_a_retry_that_dies_anywhere_leaves_the_run_failed_or_in_its_place(
    store_kind: str, pad: int, tmp_path: Path, mock_clock: MockClock
) -> None:
    """``wf retry`` killed at each of its writes in turn (every later write fails, as after a
    SIGKILL; the next process opens the store afresh): the run is either still failed, or
    pending with its place at the back of its lane, so that it waits only for the runs of
    the group started before the retry and the runs started after wait for it."""
    crash_at = 0
    while True:
        log.clear()
        failing.add("a")
        root = tmp_path / f"store{crash_at}"
        async with process(root, mock_clock) as eng:
            # A large input makes the record a file of its own (the journal's ends do not give
            # it back): a retry's journal event then does not change what readers see.
            first = await wf.start(laned, "a", pad="x" * pad, detach=True)
            await eng.settle()
            await wf.start(laned, "b", detach=True)  # started before the retry
            with _fsops.inject("*", errno.EIO, after=crash_at) as crash:
                try:
                    await first.retry()
                except wf.StoreError:
                    assert crash.hits
        async with process(root, mock_clock) as eng:  # the next process
            a = wf.get_run(first.id)
            status = await a.status()
            # The journal is the truth: the retry happened if its event was recorded.
            retried = (await eng.store.read_journal(a.id))[-1]["type"] == "run_retrying"
            await wf.start(laned, "c", detach=True)  # started after the retry
            if not retried:
                assert status is wf.RunStatus.FAILED, crash_at
                await a.retry()  # the retry did not happen: now it is a new start, after c
                expected = ["b", "c", "a"]
            else:
                expected = ["b", "a", "c"]
                if status is wf.RunStatus.FAILED:
                    # A record the crash kept from being saved after the event (a record file
                    # of its own): the next driver repairs it, or a retry now finishes that
                    # retry (in its place, with no second event). Both are tried.
                    assert pad, crash_at
                    if crash_at % 2:
                        await a.retry()
                        assert await a.status() is wf.RunStatus.PENDING
            await eng.settle()
            starts = [line[6:] for line in log if line.startswith("start")][1:]
            assert starts == expected, (crash_at, status)
            assert await a.result(timeout=10) == "a"
            kinds = [e["type"] for e in await eng.store.read_journal(a.id)]
            assert kinds.count("run_retrying") == 1, crash_at
        if not crash.hits:
            break  # the retry made all its writes: every point was tried
        crash_at += 1
    assert crash_at > 5


@contextlib.asynccontextmanager
async def process(root: Path, clock: MockClock) -> AsyncIterator[TestEngine]:
    """A process on the local store at ``root``: its own store object and engine."""
    store = LocalStore(root)
    try:
        async with TestEngine(store, clock) as eng:
            with eng.installed():
                yield eng
    finally:
        await store.close()


class _Dying:
    """A connection of a process that dies at its ``n``-th statement: that statement and every
    later one fail before reaching the server, and a transaction they are in rolls back."""

    def __init__(self, conn: Any, budget: list[int]) -> None:
        self._conn, self._budget = conn, budget

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        if self._budget[0] <= 0:
            import psycopg

            raise psycopg.OperationalError("the process died (injected)")
        self._budget[0] -= 1
        return await self._conn.execute(*args, **kwargs)


@pytest.mark.stores("postgres")
async def test_a_retry_that_dies_at_any_statement_leaves_the_run_failed_or_pending(
    engine_store: Any, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wf retry`` on PostgreSQL killed at each of its statements in turn (that statement and
    every later one never reach the server): the next process finds the run either still
    failed with no retry recorded, or pending with the retry's event and its place at the back
    of its lane — never the event beside a failed row, which no worker would look at."""
    from wf.store.postgres._conn import Pool

    real = Pool.connection
    budget = [10**9]

    @contextlib.asynccontextmanager
    async def connection(self: Pool, what: str) -> AsyncIterator[Any]:
        async with real(self, what) as conn:
            yield _Dying(conn, budget)

    monkeypatch.setattr(Pool, "connection", connection)
    crash_at = 0
    while True:
        log.clear()
        failing.add("a")
        schema = f"{engine_store.schema}_{crash_at}"
        async with pg_process(engine_store.dsn, schema, mock_clock) as eng:
            first = await wf.start(laned, "a", detach=True)
            await eng.settle()
            assert await first.status() is wf.RunStatus.FAILED
            await wf.start(laned, "b", detach=True)  # started before the retry
            budget[0] = crash_at
            try:
                await first.retry()
                died = False
            except wf.StoreError:
                died = True
            finally:
                budget[0] = 10**9
        async with pg_process(engine_store.dsn, schema, mock_clock) as eng:  # the next process
            a = wf.get_run(first.id)
            status = await a.status()
            retried = (await eng.store.read_journal(a.id))[-1]["type"] == "run_retrying"
            assert status is (wf.RunStatus.PENDING if retried else wf.RunStatus.FAILED), crash_at
            await wf.start(laned, "c", detach=True)  # started after the retry
            if not retried:
                await a.retry()  # the retry did not happen: now it is a new start, after c
            await eng.settle()
            starts = [line[6:] for line in log if line.startswith("start")][1:]
            assert starts == (["b", "a", "c"] if retried else ["b", "c", "a"]), crash_at
            assert await a.result(timeout=10) == "a"
            kinds = [e["type"] for e in await eng.store.read_journal(a.id)]
            assert kinds.count("run_retrying") == 1, crash_at
        await _drop_schema(engine_store.dsn, schema)
        if not died:
            break  # the retry made all its statements: every point was tried
        crash_at += 1
    assert crash_at >= 2


@contextlib.asynccontextmanager
async def pg_process(dsn: str, schema: str, clock: MockClock) -> AsyncIterator[TestEngine]:
    """A process on the PostgreSQL store ``schema``: its own store object and engine."""
    from wf.store.postgres import PostgresStore

    store = PostgresStore(dsn, schema=schema)
    try:
        async with TestEngine(store, clock) as eng:
            with eng.installed():
                yield eng
    finally:
        await store.close()


async def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
