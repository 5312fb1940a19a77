"""The worker's background compaction on the fake clock: finished runs are packed into the
local store's segments, and a packed run still reads, retries and is deleted as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import wf
from wf import Engine, Worker
from wf.engine._retention import sweep
from wf.store.local import LocalStore
from wf.testing import MockClock

pytestmark = pytest.mark.stores("local")

attempts: list[int] = []


@wf.step
async def flaky(n: int) -> int:
    attempts.append(n)
    if len(attempts) == 1:
        raise wf.FatalError("first time")
    return n + 1


@wf.workflow
async def twice(n: int) -> int:
    return await flaky(n)


@wf.workflow
async def plain(n: int) -> int:
    return n


def packed(store: LocalStore) -> list[str]:
    return sorted(p.name for p in Path(store.root, "packed").iterdir())


async def compacting(engine: Engine, until: int) -> Worker:
    """A worker that compacts at once, run until it has packed ``until`` runs."""
    worker = Worker(engine, schedules=False, retention=False, compact_interval=0.01)
    task = asyncio.ensure_future(worker.run())
    for _ in range(500):
        if worker.compacted >= until:
            break
        await asyncio.sleep(0.01)
    worker.stop()
    await asyncio.wait_for(task, 10)
    return worker


async def test_a_worker_packs_runs_that_ended_a_minute_ago(
    wf_engine: Engine, engine_store: LocalStore, mock_clock: MockClock
) -> None:
    store = engine_store
    mock_clock.autojump = False
    runs = [await wf.start(plain, n) for n in range(3)]
    for run in runs:
        await run.result()
    assert await store.compact(now=mock_clock.now(), older_than=60.0, limit=10) == 0
    mock_clock.jump(61)
    worker = await compacting(wf_engine, 3)
    assert worker.compacted == 3 and packed(store) == sorted(r.id for r in runs)
    for n, run in enumerate(runs):
        assert await wf.get_run(run.id).result() == n
    assert [r.id for r in await store.list_runs()] == [r.id for r in reversed(runs)]


async def test_a_packed_failed_run_is_retried_and_a_packed_run_deleted(
    wf_engine: Engine, engine_store: LocalStore, mock_clock: MockClock
) -> None:
    store = engine_store
    mock_clock.autojump = False
    attempts.clear()
    run = await wf.start(twice, 1)
    with pytest.raises(wf.RunFailed):
        await run.result()
    done = await wf.start(plain, 7)
    await done.result()
    mock_clock.jump(61)
    assert await store.compact(now=mock_clock.now(), older_than=60.0, limit=10) == 2
    await wf.get_run(run.id).retry()
    assert run.id not in packed(store)  # the retry unpacked it
    assert await wf.get_run(run.id).result() == 2
    mock_clock.jump(2)
    deleted = await sweep(wf_engine, older_than=1.0, statuses=["completed"])
    assert sorted(deleted.deleted) == sorted([run.id, done.id])
    with pytest.raises(wf.RunNotFound):
        await wf.get_run(done.id).status()
    assert packed(store) == [] and await store.verify() == []


async def test_a_newest_segment_that_is_a_directory_does_not_stop_packing(
    wf_engine: Engine, engine_store: LocalStore, mock_clock: MockClock
) -> None:
    """The worker's packing skips it (a new segment starts) instead of failing every pass."""
    store = engine_store
    mock_clock.autojump = False
    first = await wf.start(plain, 1)
    await first.result()
    mock_clock.jump(61)
    assert await store.compact(now=mock_clock.now(), older_than=60.0, limit=10) == 1
    Path(store.root, "segments", "00000002.jsonl").mkdir()
    runs = [await wf.start(plain, n) for n in range(2)]
    for run in runs:
        await run.result()
    mock_clock.jump(61)
    worker = await compacting(wf_engine, 2)
    assert worker.compacted == 2
    assert packed(store) == sorted([first.id, *(r.id for r in runs)])
    for n, run in enumerate(runs):
        assert await wf.get_run(run.id).result() == n
    [problem] = await store.verify()
    assert "00000002.jsonl is a directory where a file belongs" in problem


async def test_a_tombstone_file_that_is_a_directory_holds_back_only_its_runs(
    wf_engine: Engine, engine_store: LocalStore, mock_clock: MockClock
) -> None:
    """Retention deletes every other run, and notes the file (it used to delete nothing and
    fail every sweep)."""
    store = engine_store
    mock_clock.autojump = False
    held = await wf.start(plain, 1, run_id="held-back-1")
    freed = await wf.start(plain, 2, run_id="freely-run-2")
    await held.result()
    await freed.result()
    Path(store.root, "tombstones").mkdir(exist_ok=True)
    Path(store.root, "tombstones", "held-back-.jsonl").mkdir()
    mock_clock.jump(2)
    done = await sweep(wf_engine, older_than=1.0, statuses=["completed"])
    assert done.deleted == [freed.id]
    assert await wf.get_run(held.id).result() == 1
    assert "tombstone file" in {fault.kind for fault in store.faults}
    problems = await store.verify()
    assert [p for p in problems if "tombstones" in p] == [
        f"{Path(store.root, 'tombstones', 'held-back-.jsonl')} is a directory where a file"
        " belongs: remove it (its runs' tombstones are lost; gc skips them)"
    ]


async def test_a_compaction_failing_every_look_is_said_once(
    wf_engine: Engine,
    engine_store: LocalStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A full disk fails every look the same way: said once, not every look."""
    looks: list[int] = []

    async def full(**_kwargs: object) -> int:
        looks.append(1)
        raise wf.StoreError("no space left on the device of the store to pack finished runs")

    monkeypatch.setattr(engine_store, "compact", full)
    worker = Worker(wf_engine, schedules=False, retention=False, compact_interval=0.01)
    task = asyncio.ensure_future(worker.run())
    for _ in range(500):
        if len(looks) >= 4:
            break
        await asyncio.sleep(0.01)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert len(looks) >= 4
    said = [r for r in caplog.records if "compacting finished runs" in r.getMessage()]
    assert len(said) == 1
