"""Contention: 4 worker processes over one store and many runs whose naps suspend them, so that
runs hop between processes. Nothing is killed, so every step must run exactly once, and:

* no run is driven by two processes at once: within a run, no two step executions overlap in
  time (``time.monotonic`` is one clock for all processes of the machine);
* no journal entry is lost or duplicated: op ids contiguous, each step completed exactly once;
* no run is stuck: all of them complete before the workers go idle.

The same on PostgreSQL (a schema of its own, read back with SQL): 1,000 runs here (about 10 s),
3,000 in the long form (``WF_TORTURE_LONG=1``); skipped when the test server cannot be reached.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import _check, flows
from tests.reliability.conftest import report
from tests.reliability.test_crash import create_runs
from wf import Engine
from wf.engine._current import use_engine

WORKERS = 4


def test_four_workers_share_one_store(tmp_path: Path, long_form: bool) -> None:
    runs, steps = (1000, 9) if long_form else (200, 9)
    store, log = tmp_path / ".workflows", tmp_path / "log"
    log.mkdir()
    ids = asyncio.run(create_runs(store, runs, steps, pause=0.002, nap=0.05))
    extra = {"WF_SUSPEND_AFTER": "0"}
    elapsed = _drain(store, log, long_form, **extra)
    _verify(ids, _check.journals(store), log, steps, runs, elapsed, "local store")


def test_four_workers_share_one_postgres_schema(tmp_path: Path, long_form: bool) -> None:
    """The same on PostgreSQL: four ``wf worker`` processes claiming runs of one schema (each
    claim takes a batch of advisory locks, skipping runs another worker holds)."""
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dsn = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            pass
    except psycopg.Error as error:
        if os.environ.get("WF_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL not reachable: {error}")
        pytest.skip(f"PostgreSQL not reachable (set WF_TEST_POSTGRES_DSN): {error}")
    runs, steps = (3000, 9) if long_form else (1000, 9)
    schema = f"wf_torture_{uuid.uuid4().hex[:12]}"
    store, log = tmp_path / ".workflows", tmp_path / "log"  # the store dir only anchors cwd
    store.mkdir()
    log.mkdir()
    # Workers find the schema through the connection's search_path (as a deployment would).
    info = conninfo_to_dict(dsn)
    options = f"{info.get('options') or ''} -c search_path={schema}".strip()
    worker_dsn = make_conninfo(dsn, options=options)
    try:
        ids = asyncio.run(_create_postgres_runs(dsn, schema, runs, steps))
        extra = {"WF_SUSPEND_AFTER": "0", "WF_POSTGRES_DSN": worker_dsn}
        # Fewer slots than runs: runs wait for whichever worker frees one first.
        elapsed = _drain(store, log, long_form, concurrency=20, **extra)
        journals = _postgres_journals(psycopg, dsn, schema)
        _verify(ids, journals, log, steps, runs, elapsed, "PostgreSQL")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '10s'")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def _create_postgres_runs(dsn: str, schema: str, runs: int, steps: int) -> list[str]:
    import wf
    from wf.store.postgres import PostgresStore

    store = PostgresStore(dsn, schema=schema)
    ids = []
    try:
        with use_engine(Engine(store)):
            for n in range(runs):
                # Naps long enough to outlast the suspension's own writes over the network:
                # a run due again before its driver let go would be resumed by that driver.
                run = await wf.start(flows.counted, f"r{n}", steps, 0.002, 0.3, detach=True)
                ids.append(run.id)
    finally:
        await store.close()
    return ids


def _postgres_journals(psycopg: Any, dsn: str, schema: str) -> dict[str, _check.Journal]:
    """Every run's journal, read with SQL (not through the store)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT run_id, json_agg(event ORDER BY seq), array_agg(seq ORDER BY seq) "
            f"FROM {schema}.wf_journal GROUP BY run_id"
        ).fetchall()
    out = {}
    for run_id, events, seqs in rows:
        assert seqs == list(range(len(seqs))), f"run {run_id}: journal rows not contiguous"
        out[run_id] = _check.Journal(Path(f"{schema}.wf_journal/{run_id}"), events, False)
    return out


def _drain(store: Path, log: Path, long_form: bool, concurrency: int = 50, **extra: str) -> float:
    """Four ``wf worker --until-idle`` processes over the store; seconds until all exited."""
    started = time.monotonic()
    workers = [
        _check.spawn_worker(store, log, "--until-idle", "--concurrency", str(concurrency), **extra)
        for _ in range(WORKERS)
    ]
    try:
        for worker in workers:
            assert worker.wait(timeout=600 if long_form else 150) == 0, _check.worker_errors(log)
    except subprocess.TimeoutExpired:
        for worker in workers:
            worker.kill()
        raise
    elapsed = time.monotonic() - started
    errors = _check.worker_errors(log)
    assert "Traceback" not in errors, errors
    return elapsed


def _verify(
    ids: list[str],
    journals: dict[str, _check.Journal],
    log: Path,
    steps: int,
    runs: int,
    elapsed: float,
    where: str,
) -> None:
    keys = {run_id: f"r{n}" for n, run_id in enumerate(ids)}
    assert set(journals) == set(ids), "journals of runs that were never created, or lost"
    hops = 0
    pids: set[int] = set()
    for run_id in ids:
        recorded = _check.check_steps(journals[run_id], steps)  # also: the run completed
        done = _check.executions(log, keys[run_id])
        # No failure injected: each step ran exactly once, and that is the recorded execution.
        assert sorted(e.index for e in done) == list(range(steps)), (run_id, done)
        assert {e.index: e.exec for e in done} == recorded, run_id
        ordered = sorted(done, key=lambda e: e.start)
        for before, after in itertools.pairwise(ordered):
            assert before.end is not None and before.end <= after.start, (
                f"{run_id}: steps {before.index} (pid {before.pid}) and {after.index} "
                f"(pid {after.pid}) overlap: two drivers at once"
            )
        drivers = {e.pid for e in done}
        pids |= drivers
        hops += len(drivers) > 1
    report(
        f"contention ({where}): {WORKERS} worker processes, {runs} runs x {steps} steps with "
        "suspensions "
        f"in {elapsed:.1f} s: all completed, every step ran exactly once, no overlapping "
        f"drivers; {hops} runs were driven by more than one process; {len(pids)} processes "
        f"did work; journals contiguous, no lost or duplicated entries"
    )
