"""Three worker processes share one store across eight fake minutes: one run per fire.

The processes share a scaled clock (``schedule_worker.ScaledClock``: fake time runs 60 times
faster than real time, the same function of the real clock everywhere), so every fire is
raced by three workers deciding it independently. Eight fires are eight races, each decided
under the schedule's lock by whichever worker gets there first; more fires repeat the same race.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.schedule_worker import ping
from wf import Engine
from wf.engine._current import use_engine
from wf.engine._schedules import fire_run_id, register
from wf.store import RunStatus, Store
from wf.store.local import LocalStore
from wf.testing import MockClock

REPO = Path(__file__).resolve().parents[2]
BASE = 1_800_000_000.0  # a whole minute
SPEED = 60.0
MINUTES = 8
DSN = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(params=["local", "postgres"])
def kind(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "local":
        yield {}
        return
    psycopg = pytest.importorskip("psycopg")
    try:
        with psycopg.connect(DSN, connect_timeout=3):
            pass
    except psycopg.Error:
        if os.environ.get("WF_REQUIRE_POSTGRES") == "1":
            raise
        pytest.skip("PostgreSQL not reachable")
    schema = f"wf_test_{uuid.uuid4().hex[:16]}"
    yield {"SCHED_DSN": DSN, "SCHED_SCHEMA": schema}
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def open_store(env: dict[str, str]) -> Store:
    if env.get("SCHED_DSN"):
        from wf.store.postgres import PostgresStore

        return PostgresStore(env["SCHED_DSN"], schema=env["SCHED_SCHEMA"])
    return LocalStore(env["SCHED_DIR"])


def test_three_workers_fire_each_fire_exactly_once(tmp_path: Path, kind: dict[str, str]) -> None:
    origin = time.time() + 3.0  # fake time starts when the workers are up
    env = {
        **os.environ,
        **kind,
        "SCHED_DIR": str(tmp_path / ".workflows"),
        "SCHED_BASE": str(BASE),
        "SCHED_ORIGIN": str(origin),
        "SCHED_SPEED": str(SPEED),
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }

    async def setup() -> None:
        store = open_store(env)
        engine = Engine(store, MockClock(BASE))  # registered at fake time BASE: first fire BASE+60
        with use_engine(engine):
            # catch_up="all" without skipping: every fire must start its run even when a
            # loaded machine makes the workers late, so the count checks exactly-once alone.
            await register(
                engine,
                "ping",
                ping,
                cron="* * * * *",
                input=[1],
                catch_up="all",
                skip_if_running=False,
            )
        await store.close()

    asyncio.run(setup())
    until = BASE + MINUTES * 60 + 30
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.schedule_worker", str(until)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [w.communicate(timeout=100) for w in workers]
    for worker, (_out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err

    async def check() -> None:
        store = open_store(env)
        try:
            runs = await store.list_runs(limit=1000)
            schedule = await store.get_schedule("ping")
        finally:
            await store.close()
        expected = [fire_run_id("ping", BASE + 60 * k) for k in range(1, MINUTES + 1)]
        assert sorted(r.id for r in runs) == expected  # each fire once, none missed
        assert all(r.schedule_id == "ping" for r in runs)
        assert all(r.status is RunStatus.COMPLETED for r in runs)
        assert schedule is not None
        assert schedule.last_fire_at == BASE + MINUTES * 60
        assert schedule.skipped == 0

    asyncio.run(check())
