"""The creation-log prototype (``LocalStore(creation_log=True)``): each new write point, faulted
or cut off as a power cut would, and what recovery (the checkpoint) makes of it.

A power cut after ``create_run`` returned keeps the log's flushed line and may lose any name
the creation published (the run's directory, its journal's data, its queue and index entries):
the tests remove exactly those, then open the store again as a restarted process would.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.store.helpers import acquire, created, save, started
from wf import StoreError
from wf.store import RunStatus
from wf.store.local import LocalStore, _fsops, _store
from wf.store.local._creations import LOG_FILE

pytestmark = pytest.mark.skipif(not _fsops.HAVE_SYNCFS, reason="the prototype needs syncfs")


@pytest_asyncio.fixture
async def logged(root: Path) -> AsyncIterator[LocalStore]:
    """A store keeping a creation log."""
    store = LocalStore(root, creation_log=True)
    try:
        yield store
    finally:
        await store.close()


async def reopened(root: Path) -> LocalStore:
    """The store as a process started after a crash sees it (its first use recovers)."""
    store = LocalStore(root, creation_log=True)
    assert store._open(create=False)
    return store


def lose_names(root: Path, run_id: str, *, keep_dir: bool = False) -> None:
    """What a power cut may take of an unsettled run: every name holding its id."""
    for directory, dirs, files in os.walk(root, topdown=False):
        if os.path.basename(directory) == "tmp":
            continue
        for name in files + dirs:
            path = os.path.join(directory, name)
            if run_id in name and not (keep_dir and path == str(root / "runs" / run_id)):
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)


def log_lines(root: Path) -> int:
    return (root / LOG_FILE).read_bytes().count(b"\n")


async def test_creation_is_one_flushed_line_in_the_log(logged: LocalStore, root: Path) -> None:
    # Not a syncfs: a creation's only flush is the log's.
    with _fsops.inject("syncfs", errno.EIO) as fault:
        run = await created(logged)
    assert fault.hits == 0
    assert log_lines(root) == 1
    assert (await logged.get_run(run.id)).id == run.id


async def test_a_failed_log_flush_fails_the_creation_for_good(
    logged: LocalStore, root: Path
) -> None:
    with _fsops.inject("fdatasync", errno.EIO, match=LOG_FILE), pytest.raises(StoreError):
        await created(logged)
    assert await logged.list_runs() == []
    # The line may have reached the disk: recovery must not bring the run back.
    store = await reopened(root)
    assert await store.list_runs() == []
    # The log's descriptor is usable again for the next creation.
    assert (await logged.get_run((await created(logged)).id)).status is RunStatus.PENDING
    await store.close()


@pytest.mark.parametrize("keep_dir", [False, True])
async def test_a_run_whose_names_were_lost_is_recovered_from_the_log(
    logged: LocalStore, root: Path, keep_dir: bool
) -> None:
    run = await created(logged, input={"n": 3})
    lose_names(root, run.id, keep_dir=keep_dir)  # keep_dir: the directory, without its data
    store = await reopened(root)
    assert (await store.get_run(run.id)).input == {"n": 3}
    assert [r.id for r in await store.list_runs()] == [run.id]
    assert await store.due_runs(time.time()) == [run.id]
    assert await store.read_journal(run.id) == [started(run)]
    assert not await store.create_run(run, [started(run)])  # create by id stays idempotent
    assert log_lines(root) == 0  # checkpointed: all of it is durable now
    await store.close()


async def test_a_run_whose_files_lost_their_data_is_recovered_from_the_log(
    logged: LocalStore, root: Path
) -> None:
    run = await created(logged, input={"n": 3})
    for path in (root / "runs" / run.id).iterdir():  # names on the disk, blocks never written
        path.write_bytes(b"\0" * path.stat().st_size)
    store = await reopened(root)
    assert (await store.get_run(run.id)).input == {"n": 3}
    assert await store.read_journal(run.id) == [started(run)]
    await store.close()


async def test_lost_entries_of_an_existing_run_are_restored(logged: LocalStore, root: Path) -> None:
    parent = await created(logged)
    run = await created(logged, parent_id=parent.id)
    for path in root.rglob(f"*{run.id}*"):
        if "runs" not in path.parts and path.is_file():
            path.unlink()  # its queue, index and children entries, not the run
    store = await reopened(root)
    assert run.id in await store.due_runs(time.time())
    assert [r.id for r in await store.list_runs(parent_id=parent.id)] == [run.id]
    assert {r.id for r in await store.list_runs()} == {run.id, parent.id}
    await store.close()


async def test_a_leases_first_flush_makes_the_runs_names_durable(
    logged: LocalStore, root: Path
) -> None:
    run = await created(logged)
    lease = await acquire(logged, run.id)
    with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError):
        await lease.append([{"type": "step_completed", "ts": 2.0, "op": 0}])
    await lease.release()
    # The failed writeback may have taken the run's names, written before it: no later flush
    # of this process vouches for them (a new lease's first flush fails too), and the log is
    # kept for the recovery of the store's first use in the next process.
    lease = await acquire(logged, run.id)
    with pytest.raises(StoreError, match="failed since it was written"):
        await lease.append([{"type": "step_completed", "ts": 2.0, "op": 0}])
    await lease.release()
    assert not logged.checkpoint() and log_lines(root) == 1
    store = await reopened(root)
    lease = await acquire(store, run.id)
    with _fsops.inject("fdatasync", errno.EIO, match="journal") as fault:
        await lease.append([{"type": "step_completed", "ts": 2.0, "op": 0}])
    assert fault.hits == 0
    # Settled: later flushes are the journal's own fdatasync.
    with _fsops.inject("fdatasync", errno.EIO, match="journal"), pytest.raises(StoreError):
        await lease.append([{"type": "step_completed", "ts": 3.0, "op": 1}])
    await lease.release()
    await store.close()


def fail_a_flush_elsewhere(root: Path) -> None:
    """Another thread's whole flush of the file system meets a writeback error (reported to
    it alone: ``syncfs`` reports one once per open file)."""
    device = os.stat(root).st_dev
    since = _fsops.mark(str(root), device)
    with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError):
        _fsops.sync_whole(str(root), device, since)


async def test_a_lease_or_a_post_after_a_failed_flush_does_not_vouch_for_the_runs_names(
    logged: LocalStore,
) -> None:
    """A run created (its names written, its line logged) before a whole flush failed
    elsewhere: a new lease's first flush, and a post, are taken after that failure, but they
    exist to make the run's names durable, written before it: both fail."""
    runs = [await created(logged) for _ in range(2)]
    await logged.post(runs[1].id, "wake", {})  # makes inbox/ (fsynced alone)
    fail_a_flush_elsewhere(Path(logged.root))
    lease = await acquire(logged, runs[0].id)
    with pytest.raises(StoreError, match="failed since it was written"):
        await lease.append([{"type": "step_completed", "ts": 2.0, "op": 0}])
    await lease.release()
    with pytest.raises(StoreError, match="failed since it was written"):
        await logged.post(runs[1].id, "wake", {})
    assert len(await logged.read_inbox(runs[1].id)) == 1  # the failed one withdrew its message


async def test_a_failed_flush_keeps_the_log_and_later_creations_stay_created(
    logged: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a whole flush failed, a long log is no longer emptied by the checkpoint a
    creation makes (its runs' names may be lost): the log is kept, and the creations, each
    durable by its own line, are created all the same."""
    monkeypatch.setattr(_store, "LIMIT", 0)
    await created(logged)  # the log is open, and emptied by that creation's checkpoint
    fail_a_flush_elsewhere(root)
    runs = [await created(logged) for _ in range(3)]
    assert log_lines(root) == 3
    assert {r.id for r in await logged.list_runs()} >= {r.id for r in runs}
    store = await reopened(root)  # the next process: recovers, then checkpoints
    assert log_lines(root) == 0
    assert {r.id for r in await store.list_runs()} >= {r.id for r in runs}
    await store.close()


async def test_a_post_makes_the_runs_names_durable_first(logged: LocalStore, root: Path) -> None:
    run = await created(logged)
    await logged.post(run.id, "wake", {})  # makes inbox/: a lone message is fsynced alone
    with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError):
        await logged.post(run.id, "wake", {})  # its name, with the run's: one syncfs
    # No later flush of this process vouches for the run's names (written before the
    # failure); the next process's store recovers them first.
    with pytest.raises(StoreError, match="failed since it was written"):
        await logged.post(run.id, "wake", {})
    store = await reopened(root)
    await store.post(run.id, "wake", {})
    assert len(await store.read_inbox(run.id)) == 2  # the failed ones withdrew their messages
    await store.close()


async def test_a_deleted_run_is_not_brought_back(logged: LocalStore, root: Path) -> None:
    run = await created(logged)
    await save(logged, run, RunStatus.COMPLETED)
    assert (await logged.delete_runs([run.id], now=5.0, reason="gc")).ids == [run.id]
    assert log_lines(root) == 1
    store = await reopened(root)
    assert await store.list_runs() == []
    with pytest.raises(Exception, match=run.id):
        await store.get_run(run.id)
    await store.close()


async def test_a_run_in_a_lane_is_created_as_before(logged: LocalStore, root: Path) -> None:
    # A lane's sequence number must be durable before its run counts: that takes the syncfs.
    with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError):
        await created(logged, group="g")
    await created(logged, group="g")
    assert log_lines(root) == 0


async def test_a_torn_last_line_is_ignored(logged: LocalStore, root: Path) -> None:
    run = await created(logged)
    with open(root / LOG_FILE, "ab") as log:
        log.write(b'{"record": {"id": "wrun_')
    store = await reopened(root)
    assert [r.id for r in await store.list_runs()] == [run.id]
    assert log_lines(root) == 0
    await store.close()


async def test_a_failed_checkpoint_keeps_the_log_for_the_next_one(
    logged: LocalStore, root: Path
) -> None:
    run = await created(logged)
    lose_names(root, run.id)
    store = LocalStore(root, creation_log=True)
    with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError):
        store._open(create=False)
    assert log_lines(root) == 1
    store = await reopened(root)
    assert [r.id for r in await store.list_runs()] == [run.id]
    await store.close()


async def test_a_long_log_is_checkpointed_by_a_creation(
    logged: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "LIMIT", 0)
    runs = [await created(logged) for _ in range(3)]
    assert log_lines(root) == 0  # each made durable by the checkpoint's syncfs, then dropped
    assert [r.id for r in await logged.list_runs()] == [r.id for r in reversed(runs)]


async def test_a_checkpoint_waits_for_creations_in_flight(logged: LocalStore, root: Path) -> None:
    await created(logged)
    assert logged.log is not None
    with logged.log.appending():
        assert logged.checkpoint() is False  # never empties a line not yet flushed
    assert logged.checkpoint() is True
    assert log_lines(root) == 0


async def test_recovery_does_not_wait_for_another_processs_creations(
    logged: LocalStore, root: Path
) -> None:
    run = await created(logged)
    lose_names(root, run.id)
    other = os.open(root / LOG_FILE, os.O_WRONLY | os.O_APPEND)  # another process, creating
    try:
        fcntl.flock(other, fcntl.LOCK_SH)
        store = await reopened(root)
        assert [r.id for r in await store.list_runs()] == [run.id]
        assert log_lines(root) == 1  # recovered, but not emptied under a creator's feet
        await store.close()
    finally:
        os.close(other)
