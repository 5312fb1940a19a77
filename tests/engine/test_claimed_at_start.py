"""A run a program starts and drives itself (``await wf.start(...)`` without ``detach``) while
a ``wf worker`` runs on the same store: it is due from its creation on, so the worker's claim
may take it before its creator takes its lease. No driver died then: the worker drives it
without saying so (``wf.engine._alone.last_driver_died``)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

import wf
import wf.testing
from tests.store.helpers import python
from wf import Engine
from wf.store import Lease, RunStatus
from wf.store.local import LocalStore, _fsops


@wf.step
def add(a: int, b: int) -> int:
    return a + b


@wf.workflow
async def sums(i: int) -> int:
    x = await add(i, 1)
    await wf.sleep(0.01)
    return await add(x, i)


_WORKER = """
import asyncio, sys
import wf
import tests.engine.test_claimed_at_start

async def main():
    engine = wf.configure(dir={root!r})
    worker = wf.Worker(engine, concurrency=50, poll=0.02, retention=False)
    task = asyncio.create_task(worker.run())
    print("ready", flush=True)
    told = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await asyncio.wait({{task, told}}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # the worker failed: say why now, not when the test gives up
    stopped = worker.stop()
    if stopped is not None:
        await stopped
    await asyncio.wait_for(task, 20)

asyncio.run(main())
"""


@pytest_asyncio.fixture
async def starter(tmp_path: Path) -> AsyncIterator[Engine]:
    """An engine on a local store a worker process shares: what it starts, it drives."""
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    engine = Engine(store)
    try:
        yield engine
    finally:
        await store.close()


async def _worker_said(root: Path, starts: object) -> str:
    """Run ``starts`` (a coroutine) beside a worker process on ``root``; what it logged."""
    assert asyncio.iscoroutine(starts)
    worker = python(_WORKER.format(root=str(root)), stdin=subprocess.PIPE)
    late: TimeoutError | None = None
    try:
        assert worker.stdout is not None
        ready = await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), 30)
        assert ready.strip() == "ready", worker.stderr.read() if worker.stderr else ""
        runs = asyncio.ensure_future(starts)
        # The worker ending first (it failed) is as late as the runs: no use waiting on.
        ended = asyncio.ensure_future(asyncio.to_thread(worker.wait))
        await asyncio.wait({runs, ended}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if runs.done():
            runs.result()
        else:
            runs.cancel()
            await asyncio.gather(runs, return_exceptions=True)
            late = TimeoutError()  # said below with what the worker logged, which tells why
    finally:
        assert worker.stdin is not None
        worker.stdin.close()
        try:
            await asyncio.to_thread(worker.wait, 30)
        finally:
            worker.kill()  # a no-op once it ended
    assert worker.stderr is not None
    said = worker.stderr.read()
    if late is not None:
        raise AssertionError(
            f"the runs did not end (in 60 s, or before the worker exited {worker.returncode}); "
            f"the worker said:\n{said}"
        ) from late
    return said


async def test_a_run_the_worker_takes_before_its_creator_is_no_death(
    starter: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The creator is slow to take its lease (a busy loop): the worker's claim comes first.
    store = starter.store
    real = store.try_acquire

    async def late(run_id: str) -> Lease | None:
        async with asyncio.timeout(30):
            while not (await store.get_run(run_id)).status.is_terminal:
                await asyncio.sleep(0.02)
        return await real(run_id)

    monkeypatch.setattr(store, "try_acquire", late)
    # Nor taken while the creation flushes (``CREATOR_LEASES``): after the flush, late.
    monkeypatch.setattr(store, "_lease_created", lambda run_id, journal: None)
    result: list[int] = []

    async def starts() -> None:
        run = await starter.start(sums, (3,), {})
        result.append(await run.result())

    said = await _worker_said(tmp_path / ".workflows", starts())
    assert result == [7]
    assert "died" not in said, said


async def test_runs_a_program_starts_beside_a_worker_are_never_deaths(
    starter: Engine, tmp_path: Path
) -> None:
    results: list[int] = []

    async def starts() -> None:
        runs = await asyncio.gather(*(starter.start(sums, (i,), {}) for i in range(30)))
        results.extend(await asyncio.gather(*(run.result() for run in runs)))
        for run in runs:
            assert (await run.record()).status is RunStatus.COMPLETED

    said = await _worker_said(tmp_path / ".workflows", starts())
    assert results == [2 * i + 1 for i in range(30)]
    assert "died" not in said, said


async def test_a_second_start_of_the_same_id_keeps_the_first_starts_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two starts of one id at once in one process: the second finds the run made and hands
    it back. Meanwhile the first's run is still its creator's to drive (``Engine.fresh``: a
    claim of this process's own worker in that window drives it as the creator's first drive,
    not apart as if its creator had died). The second start took that mark away."""
    async with wf.testing.TestEngine() as engine:
        await _started_twice(engine, monkeypatch)


async def _started_twice(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    store = engine.store
    real_create = store.create_run
    real_get = store.get_run
    first_created = asyncio.Event()
    second_done = asyncio.Event()
    marked_meanwhile: list[bool] = []

    async def create_run(*args: object, **kwargs: object) -> bool:
        created = await real_create(*args, **kwargs)  # type: ignore[arg-type]
        if created:
            first_created.set()
            await second_done.wait()  # the first start's flush, held open
        return created

    async def get_run(run_id: str) -> object:
        if not second_done.is_set():  # the second start, looking the run up
            marked_meanwhile.append(run_id in engine.fresh)
        return await real_get(run_id)

    monkeypatch.setattr(store, "create_run", create_run)
    monkeypatch.setattr(store, "get_run", get_run)
    first = asyncio.ensure_future(wf.start(sums, 1, run_id="job-twice"))
    await first_created.wait()
    second = await wf.start(sums, 1, run_id="job-twice")
    second_done.set()
    assert (await first).id == second.id == "job-twice"
    assert await second.result() == 3
    assert marked_meanwhile and all(marked_meanwhile)


def _locked(journal: Path) -> bool:
    """Whether a lease holds the journal's lock (any holder: a lock of another open file of
    this process is refused too)."""
    fd = os.open(journal, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the lock if this look took it
    return False


async def test_a_start_takes_its_runs_lease_while_the_creations_flush_runs(
    starter: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a loop of ``await wf.start`` the creation's flush runs in the flushing thread while
    the runs in flight go on; the creator takes the new run's lease meanwhile, not after the
    flush (where it stood between that flush and the next creation, the disk idle). Shown by
    what the journal's lock is while the creation's ``syncfs`` is under way."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await (await starter.start(sums, (0,), {})).result()  # the store made, its first flushes
    runs = tmp_path / ".workflows" / "runs"
    old = set(runs.iterdir())
    begun, looked = threading.Event(), threading.Event()
    locked: list[bool] = []
    syncfs = _fsops.syncfs

    def looking_syncfs(fd: int, path: str) -> None:
        if threading.current_thread() is not threading.main_thread() and not begun.is_set():
            begun.set()
            looked.wait(10.0)  # bounded: the loop task below looks, then lets it go
        syncfs(fd, path)

    monkeypatch.setattr(_fsops, "syncfs", looking_syncfs)

    async def in_flight() -> None:  # a run in flight: keeps a task ready, as a loop of starts has
        while not looked.is_set():
            await asyncio.sleep(0)
            if begun.is_set():
                [new] = set(runs.iterdir()) - old
                locked.append(_locked(new / "journal.jsonl"))
                looked.set()

    other = asyncio.ensure_future(in_flight())
    await asyncio.sleep(0)
    run = await starter.start(sums, (3,), {})
    looked.set()
    await other
    assert locked == [True]  # taken while the disk flushed the creation
    assert await run.result() == 7
