"""``PostgresStore`` when the server refuses writes for a while: it turned read-only (a
failover to a standby, ``default_transaction_read_only``), SQLSTATE 25006. That is the
server's passing state, as a dropped connection is: ``wf.StoreUnavailable``, which a worker
waits out (it exited 3 within seconds: ``PostgreSQL failed to take run leases: cannot
execute UPDATE in a read-only transaction``, leaving its runs running).

The test works in a database of its own (the setting is a database's), dropped afterwards.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

psycopg = pytest.importorskip("psycopg")

import wf  # noqa: E402
from wf.engine._current import use_engine  # noqa: E402
from wf.engine._engine import Engine  # noqa: E402
from wf.store.postgres import PostgresStore  # noqa: E402

pytestmark = pytest.mark.postgres

DSN = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def admin(sql: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture
def database() -> Iterator[str]:
    """The DSN of a fresh database of the test's own."""
    try:
        with psycopg.connect(DSN, connect_timeout=3):
            pass
    except psycopg.Error as error:
        if os.environ.get("WF_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL not reachable: {error}")
        pytest.skip(f"PostgreSQL not reachable (set WF_TEST_POSTGRES_DSN): {error}")
    name = f"wft_ro_{uuid.uuid4().hex[:12]}"
    for attempt in range(20):
        try:
            admin(f"CREATE DATABASE {name}")
            break
        except psycopg.errors.ObjectInUse:
            # Another session on template1 (a concurrent CREATE DATABASE elsewhere): a moment.
            if attempt == 19:
                raise
            time.sleep(0.25)
    info = psycopg.conninfo.conninfo_to_dict(DSN)
    info["dbname"] = name
    try:
        yield psycopg.conninfo.make_conninfo(**info)
    finally:
        admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def read_only(dsn: str, on: bool) -> None:
    """Make the database read-only (or writable again) for every session, as a failover to
    a standby does: the setting, then its sessions ended so that new ones take it."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    setting = "SET" if on else "RESET"
    setting += " default_transaction_read_only" + (" = on" if on else "")
    admin(f"ALTER DATABASE {name} {setting}")
    admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )


STEPS_RUN: list[int] = []
STEP_GATE: asyncio.Event | None = None
"""When a test sets it, a step waits for it before it ends: the test has done to the database
what the run must meet (a short run could otherwise end before)."""


@wf.step
async def noted(i: int) -> int:
    STEPS_RUN.append(i)
    if STEP_GATE is not None:
        await STEP_GATE.wait()
    await asyncio.sleep(0.01)
    return i


@wf.workflow(name="postgres_refusals:steps")
async def steps(x: int) -> int:
    for i in range(4):
        x += await noted(i)
    return x


@pytest.mark.timeout(90)
async def test_a_worker_waits_out_a_server_that_turned_read_only(
    database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.02, 0.2))
    monkeypatch.setattr(_worker, "LEASE_LOST_RETRY", 0.05)
    store = PostgresStore(database)
    engine = Engine(store)
    STEPS_RUN.clear()
    try:
        with use_engine(engine):
            runs = [await wf.start(steps, i * 100, detach=True) for i in range(6)]
            worker = wf.Worker(engine, poll=0.05, retention=False, concurrency=2)
            serving = asyncio.create_task(worker.run(until_idle=True))
            async with asyncio.timeout(20):
                while not STEPS_RUN:
                    await asyncio.sleep(0.005)
            await asyncio.to_thread(read_only, database, True)
            await asyncio.sleep(1.5)  # looks at the queue refused in a row
            assert not serving.done(), serving.exception()
            await asyncio.to_thread(read_only, database, False)
            await asyncio.wait_for(serving, 60)
            assert [await run.result() for run in runs] == [i * 100 + 6 for i in range(6)]
    finally:
        await store.close()
    said = [r.getMessage() for r in caplog.records]
    assert any("read-only transaction" in m for m in said), said  # the refusal was met


@pytest.mark.timeout(60)
async def test_a_worker_started_on_a_read_only_database_says_it_was_refused(
    database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker pointed at a standby (25006) as it starts was said to meet a store that
    "does not answer … (no answer in the 10s …)": it answered, and refused, which is said,
    in the server's words."""
    import logging

    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.01, 0.05))
    await asyncio.to_thread(read_only, database, True)
    store = PostgresStore(database)
    try:
        worker = wf.Worker(Engine(store), retention=False, start_wait=0.5)
        with (
            caplog.at_level(logging.WARNING, logger="wf.worker"),
            pytest.raises(wf.StoreUnavailable) as raised,
        ):
            await asyncio.wait_for(worker.run(), 30)
    finally:
        await store.close()
    said = str(raised.value)
    assert said.endswith("(refused for the 0.5s since the worker started)"), said
    assert "read-only transaction" in said, said
    lines = [r.getMessage() for r in caplog.records if r.name == "wf.worker"]
    assert len(lines) == 1 and "refuses the worker's commands as it starts" in lines[0], lines


@pytest.mark.timeout(60)
async def test_a_foreground_ride_out_waits_for_writes_on_a_read_only_database(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wf run``'s ride-out tried a write by taking a slot, an advisory lock, which a
    read-only database grants: it said "answers again" at once and drove the run back into
    the refusal (10 failed/back pairs in 3 s, then exit 3; the running step run again). It
    waits until a write is taken: said once each way, the step run no more than once more,
    the run completed."""
    from wf import admin
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.02, 0.1))
    store = PostgresStore(database)
    engine = Engine(store)
    said: list[str] = []
    STEPS_RUN.clear()
    read_only_now = asyncio.Event()
    monkeypatch.setattr(sys.modules[__name__], "STEP_GATE", read_only_now)
    try:
        with use_engine(engine):
            run = await wf.start(steps, 1, detach=True)
            driving = asyncio.create_task(
                admin.drive_through_outages(
                    run,
                    on_failed=lambda error, limit: said.append("failed"),
                    on_back=lambda after: said.append("back"),
                )
            )
            async with asyncio.timeout(20):
                while not STEPS_RUN:
                    await asyncio.sleep(0.005)
            await asyncio.to_thread(read_only, database, True)
            read_only_now.set()  # the step ends, and its write is refused
            async with asyncio.timeout(20):
                while not said and not driving.done():
                    await asyncio.sleep(0.01)
            ran = len(STEPS_RUN)
            await asyncio.sleep(1.5)  # many tries at 0.1 s
            assert not driving.done(), driving.exception()
            assert said == ["failed"], said
            assert len(STEPS_RUN) == ran, STEPS_RUN
            await asyncio.to_thread(read_only, database, False)
            await asyncio.wait_for(driving, 30)
            assert said == ["failed", "back"], said
            assert await run.result() == 1 + 0 + 1 + 2 + 3
    finally:
        await store.close()
