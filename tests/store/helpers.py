"""Shared helpers of the store tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import wf
from wf import Engine
from wf._exceptions import StoreError
from wf.engine._current import use_engine
from wf.store import Lease, RunRecord, RunStatus, Store
from wf.store._ids import new_run_id
from wf.store.conformance import event

REPO = str(Path(wf.__file__).resolve().parent.parent)


def write_journal_end(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` into a local journal where its lease's next append would go: over the
    slack, after its last line (what another process's append, a crash mid-append or damage
    leaves in the real layout; appending at the file's end would leave NUL bytes before it)."""
    with open(path, "r+b") as file:
        content = len(file.read().rstrip(b"\0"))
        file.seek(content)
        file.write(data)


def record(**fields: Any) -> RunRecord:
    """A fresh pending record."""
    fields.setdefault("id", new_run_id())
    fields.setdefault("workflow", "tests:flow")
    return RunRecord(**fields)


async def created(store: Store, **fields: Any) -> RunRecord:
    """Create a run and return its record."""
    run = record(**fields)
    assert await store.create_run(run, [started(run)])
    return run


def started(run: RunRecord) -> dict[str, Any]:
    """The first journal event, as the engine writes it: the created record rides in it."""
    snapshot = {k: v for k, v in run.to_json().items() if k != "input"}
    return event("run_started", workflow=run.workflow, input=run.input, record=snapshot)


def damage_local_run(store: Store, run_id: str) -> None:
    """Make a local store's run unreadable: its record lives in run.json, or in the journal's
    first line when it has none."""
    for name in ("run.json", "journal.jsonl"):
        path = os.path.join(store.run_location(run_id), name)
        if os.path.exists(path):
            with open(path, "wb") as file:
                file.write(b"{not json\n")


def damage_local_schedule(store: Store, schedule_id: str) -> None:
    """Make a local store's schedule file unreadable."""
    with open(store.schedule_location(schedule_id), "wb") as file:
        file.write(b"{not json")


async def acquire(store: Store, run_id: str) -> Lease:
    """The run's lease, which must be free."""
    lease = await store.try_acquire(run_id)
    assert lease is not None
    return lease


async def save(store: Store, run: RunRecord, status: RunStatus, **fields: Any) -> None:
    """Change the run's status (and fields) under its lease."""
    run.status = status
    for name, value in fields.items():
        setattr(run, name, value)
    lease = await acquire(store, run.id)
    await lease.save(run)
    await lease.release()


def python(code: str, **kwargs: Any) -> subprocess.Popen[str]:
    """Start ``python -c code`` with this checkout importable; its stdout is piped."""
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def drop_redis_keys(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` on the Redis server at ``url`` (a test's leftovers)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=prefix + "*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.delete(*batch)
                batch = []
        if batch:
            client.delete(*batch)
    finally:
        client.close()


lost_lease_log: list[str] = []
"""What ``outlives_its_lease`` did: ``started`` per attempt, ``cancelled`` when stopped."""


@wf.step
async def outlives_its_lease(n: int) -> int:
    """A step whose first attempt hangs until its driver is stopped (a lost lease)."""
    lost_lease_log.append("started")
    if lost_lease_log.count("started") == 1:  # the first driver's attempt hangs until stopped
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            lost_lease_log.append("cancelled")
            raise
    return n * 2


@wf.workflow
async def lease_loser(n: int) -> int:
    """Runs ``outlives_its_lease`` (the lease-loss tests of the server stores)."""
    return await outlives_its_lease(n)


async def lose_the_lease_then_take_over(
    first: Store,
    second: Store,
    cut: Callable[[str], Awaitable[None]],
    error: str,
    *,
    stop_within: float,
    finish_within: float = 30,
) -> None:
    """The lease-loss case every server store passes: ``lease_loser`` starts on ``first``;
    while its step hangs, ``cut(run_id)`` takes the lease away. The driver must cancel the step
    and stop with a ``StoreError`` matching ``error`` within ``stop_within`` seconds, and a
    driver on ``second`` completes the run, the step's completion recorded once. Closes both
    stores."""
    lost_lease_log.clear()
    try:
        engine = Engine(first)
        with use_engine(engine):
            run = await wf.start(lease_loser, 21)
            for _ in range(200):
                if lost_lease_log:
                    break
                await asyncio.sleep(0.05)
            await cut(run.id)
            driver = engine.drivers[run.id]
            with pytest.raises(StoreError, match=error):
                await asyncio.wait_for(driver, stop_within)
            assert lost_lease_log == ["started", "cancelled"]
        with use_engine(Engine(second)):
            assert await wf.get_run(run.id).result(timeout=finish_within) == 42
        assert lost_lease_log == ["started", "cancelled", "started"]
        kinds = [e["type"] for e in await second.read_journal(run.id)]
        assert kinds.count("step_completed") == 1 and kinds[-1] == "run_completed"
    finally:
        await first.close()
        await second.close()


def forking_holder(open_store: str, run_id: str) -> str:
    """Code for a process that takes the run's lease and a cap's place, then forks a helper
    that sleeps (``multiprocessing``'s ``fork`` start method, as a step may), and prints
    ``held <helper's pid>``: killed, it leaves the helper behind, holding whatever it
    inherited. ``open_store``: an expression for the store."""
    return f"""
import asyncio, multiprocessing, time

async def main():
    store = {open_store}
    lease = await store.try_acquire({run_id!r})
    place = await store.try_slot("forked-cap", 1)
    helper = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    helper.start()
    print("held" if lease and place else "busy", helper.pid, flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


async def taken_over_beside_a_forked_helper(
    store: Store, code: str, run_id: str, *, place_too: bool = True
) -> None:
    """Run ``forking_holder``'s code, kill it, and take the run's lease and (``place_too``)
    the cap's place while its helper still sleeps: within seconds, not the helper's minute."""
    proc = python(code)
    helper = 0
    try:
        assert proc.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
        word, pid = line.split()
        assert word == "held", proc.stderr.read() if proc.stderr else line
        helper = int(pid)
        assert await store.try_acquire(run_id) is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        lease: Lease | None = None
        place: Any = None if place_too else False
        async with asyncio.timeout(5):
            while lease is None or place is None:
                if lease is None:
                    lease = await store.try_acquire(run_id)
                if place is None:
                    place = await store.try_slot("forked-cap", 1)
                await asyncio.sleep(0.05)
        os.kill(helper, 0)  # the helper lives on: it no longer holds them
        await lease.release()
        if place_too:
            await place.release()
    finally:
        proc.kill()
        proc.wait()
        if helper:
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper, signal.SIGKILL)


async def assert_refused_at_once(store: Store, match: str) -> None:
    """``store`` is misconfigured (its server refuses who or what it names): opening it, and a
    worker getting ready on it, raise a plain ``wf.StoreError`` at once, never
    ``wf.StoreUnavailable``, which a starting worker waits out for its whole outage limit.
    Closes ``store``."""
    try:
        with pytest.raises(StoreError, match=match) as refused:
            await store.open()
        assert not isinstance(refused.value, wf.StoreUnavailable)
        worker = wf.Worker(Engine(store))
        with pytest.raises(StoreError) as stopped:
            await asyncio.wait_for(worker.prepare(), 10)
        assert not isinstance(stopped.value, wf.StoreUnavailable)
    finally:
        await store.close()


@wf.workflow(rate_limit=(1, 60))
async def once_a_minute(n: int) -> int:
    """One start a minute (the rate limits' take-back tests of the server stores)."""
    return n


async def a_take_back_wakes_the_runs_the_limit_held(
    store: Store, peer: Store, counted: asyncio.Event, gate: asyncio.Event
) -> None:
    """A start of ``once_a_minute``'s limit counted by ``peer`` for a caller cancelled before
    it heard (``peer``'s count sets ``counted``, then its answer waits for ``gate``) holds back
    a run that a worker on ``store`` tries meanwhile, until the window's end. Once the start is
    taken back, the held run starts: the clock never moves here, so it starts only if the
    take-back wakes the worker and the worker looks at the limit again."""
    from wf.testing import MockClock, TestEngine

    clock = MockClock(autojump=False)
    async with TestEngine(store, clock) as engine:
        run = await wf.start(once_a_minute, 1, detach=True)
        limit = "workflow:" + (await store.get_run(run.id)).workflow
        caller = asyncio.ensure_future(peer.try_rate(limit, 1, 60.0, clock.now()))
        await asyncio.wait_for(counted.wait(), 10)
        worker = wf.Worker(engine, retention=False)
        task = asyncio.ensure_future(worker.run())
        loop = asyncio.get_running_loop()
        try:
            began = loop.time()
            while not worker.held_drives:  # held back by the limit the start filled
                assert loop.time() - began < 10, "the run was never tried"
                await asyncio.sleep(0.01)
            assert (await store.get_run(run.id)).status is RunStatus.PENDING
            caller.cancel()
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await caller
            began = loop.time()
            while (await store.get_run(run.id)).status is not RunStatus.COMPLETED:
                assert loop.time() - began < 10, "the held run waits for the window's end"
                await asyncio.sleep(0.02)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)


async def edit_record(store: Store, run_id: str, changes: dict[str, Any]) -> None:
    """Set fields of the run's stored record as its JSON (what a stray edit or a buggy writer
    leaves: a field of the wrong kind), on the store as another program would, from outside:
    a local store's run.json and the record its journal's first line carries, a PostgreSQL
    row's ``record``, a Redis hash's ``rec``; a memory store's record object."""
    import orjson

    from wf.store.local import LocalStore
    from wf.store.memory import MemoryStore

    if isinstance(store, LocalStore):
        run_dir = store.run_location(run_id)
        done = False
        path = os.path.join(run_dir, "run.json")
        if os.path.exists(path):
            data = orjson.loads(Path(path).read_bytes())
            data.update(changes)
            Path(path).write_bytes(orjson.dumps(data))
            done = True
        path = os.path.join(run_dir, "journal.jsonl")
        if os.path.exists(path):
            raw = Path(path).read_bytes()
            first, nl, rest = raw.partition(b"\n")
            head = orjson.loads(first)
            if isinstance(head.get("record"), dict):
                head["record"].update(changes)
                Path(path).write_bytes(orjson.dumps(head) + nl + rest)
                done = True
        assert done, f"no record of run {run_id} to edit"
    elif isinstance(store, MemoryStore):
        held = store._runs[run_id].record
        for name, value in changes.items():
            setattr(held, name, value)
    elif type(store).__name__ == "PostgresStore":
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            store.dsn,  # type: ignore[attr-defined]
            autocommit=True,
        ) as admin:
            schema = store.schema  # type: ignore[attr-defined]
            cursor = await admin.execute(
                f'UPDATE "{schema}".wf_runs SET record = (record::jsonb || %s::jsonb)::json'
                " WHERE id = %s",
                [orjson.dumps(changes).decode(), run_id],
            )
            assert cursor.rowcount == 1
    else:
        import redis

        client = redis.Redis.from_url(store.url)  # type: ignore[attr-defined]
        try:
            key = store.run_location(run_id)
            raw = client.hget(key, "rec")
            assert raw is not None
            data = orjson.loads(raw)  # type: ignore[arg-type]
            data.update(changes)
            client.hset(key, "rec", orjson.dumps(data))
        finally:
            client.close()


def require_redis(url: str) -> None:
    """Skip the test (fail it under ``WF_REQUIRE_REDIS=1``) unless the Redis at ``url``
    answers, saying why."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        client.ping()
        client.close()
    except Exception as exc:  # any failure to connect means: skip with the reason
        why = f"Redis not reachable at WF_TEST_REDIS_URL={url}: {exc}"
        if os.environ.get("WF_REQUIRE_REDIS") == "1":
            pytest.fail(why)
        pytest.skip(why)


def redis_prefix(url: str) -> Iterator[str]:
    """A fresh key prefix on the Redis at ``url`` for one test (``require_redis`` first),
    its keys deleted afterwards: a fixture's body (``yield from``)."""
    require_redis(url)
    name = f"wft:{uuid.uuid4().hex[:12]}:"
    yield name
    drop_redis_keys(url, name)


@contextlib.asynccontextmanager
async def other_task_ready() -> AsyncIterator[None]:
    """A task kept ready to run for the block, as a worker's runs in flight are: the local
    store's flushes then go to their threads (with nothing else ready, one is made on the
    loop, where no other work could overlap it)."""
    stop = False

    async def in_flight() -> None:
        while not stop:
            await asyncio.sleep(0)

    other = asyncio.ensure_future(in_flight())
    try:
        yield
    finally:
        stop = True
        await other
