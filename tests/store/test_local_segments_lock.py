"""``segments/lock`` held by another process (a pack, a ``wf gc`` stopped with Ctrl-Z): the
local store's coroutines wait for it off the event loop (``_waitlock``), and a long wait is
said once."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store.helpers import created, python
from tests.store.test_local_packed import finished, pack_all
from wf.store import RunStatus
from wf.store.local import LocalStore, _waitlock

SAFETY = 3.0
"""Seconds after which the held lock is let go whatever happens: a loop that waits on it
itself (what these tests catch) is stuck until then, not for ever."""


@contextlib.contextmanager
def segments_held(root: Path, *, shared: bool = False) -> Iterator[Callable[[], None]]:
    """``segments/lock`` held on a descriptor of its own (an ``flock`` of another open file
    description conflicts as another process's would); yields the function that lets it go,
    which a timer calls after ``SAFETY`` seconds too."""
    (root / "segments").mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "segments" / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)

    def release() -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

    timer = threading.Timer(SAFETY, release)
    timer.start()
    try:
        yield release
    finally:
        timer.cancel()
        os.close(fd)


async def ticks_while(waiting: asyncio.Future[Any], seconds: float) -> int:
    """How many times another coroutine ran (every 10 ms) in ``seconds`` while ``waiting``
    was not done (it must not be)."""
    ticks = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        ticks += 1
    assert not waiting.done(), "it did not wait for the lock"
    return ticks


async def _waits_off_the_loop(root: Path, call: Awaitable[Any]) -> Any:
    with segments_held(root) as release:
        task = asyncio.ensure_future(call)
        ticks = await ticks_while(task, 0.5)
        # 0.5 s of 10 ms sleeps: about 50 turns on a loop that runs (none on a stuck one).
        assert ticks >= 10, f"the loop stopped while the lock was held ({ticks} turns)"
        release()
        return await asyncio.wait_for(task, 10)


async def test_a_post_waits_for_a_held_segments_lock_off_the_loop(
    local: LocalStore, root: Path
) -> None:
    run = await created(local)
    pack_all(local)  # makes segments/ (the run is not finished: it stays a directory)
    message_id = await _waits_off_the_loop(root, local.post(run.id, "wake", {"n": 1}))
    assert [(m.id, m.data) for m in await local.read_inbox(run.id)] == [(message_id, {"n": 1})]
    assert run.id in await local.due_runs(time.time() + 1)


async def test_a_post_to_a_packed_run_unpacks_it_off_the_loop(
    local: LocalStore, root: Path
) -> None:
    run = await finished(local, failed=True)
    assert pack_all(local) == 1
    await _waits_off_the_loop(root, local.post(run.id, "hook", {"x": 1}))
    assert (root / "runs" / run.id).is_dir() and not (root / "packed" / run.id).exists()
    assert [m.data for m in await local.read_inbox(run.id)] == [{"x": 1}]


async def test_taking_a_packed_runs_lease_unpacks_it_off_the_loop(
    local: LocalStore, root: Path
) -> None:
    run = await finished(local, failed=True)
    assert pack_all(local) == 1
    lease = await _waits_off_the_loop(root, local.try_acquire(run.id))  # a retry's way in
    assert lease is not None
    await lease.release()
    assert (await local.get_run(run.id)).status is RunStatus.FAILED


async def test_a_post_cancelled_while_it_waits_lets_the_lock_go_once_it_has_it(
    local: LocalStore, root: Path
) -> None:
    run = await created(local)
    pack_all(local)
    with segments_held(root) as release:
        waiting = asyncio.ensure_future(local.post(run.id, "wake", {"n": 1}))
        await ticks_while(waiting, 0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release()
        # The next post goes through: the waiting thread's lock was let go, and the gate
        # in front of it opened.
        await asyncio.wait_for(local.post(run.id, "wake", {"n": 2}), 10)
    assert [m.data for m in await local.read_inbox(run.id)] == [{"n": 2}]
    inbox = root / "runs" / run.id / "inbox"
    assert len(os.listdir(inbox)) == 1  # no temporary file of the cancelled post


async def test_many_posts_wait_in_one_thread_and_all_complete(
    local: LocalStore, root: Path
) -> None:
    runs = [await created(local) for _ in range(20)]
    pack_all(local)
    posts = asyncio.gather(*(local.post(r.id, "wake", {}) for r in runs))
    await _waits_off_the_loop(root, posts)
    for run in runs:
        assert len(await local.read_inbox(run.id)) == 1


async def test_a_shared_holder_does_not_hold_a_post_up(local: LocalStore, root: Path) -> None:
    run = await created(local)
    pack_all(local)
    with segments_held(root, shared=True):  # another process's post
        await asyncio.wait_for(local.post(run.id, "wake", {}), 1)


async def test_a_long_wait_says_which_lock_and_whose_pid_once(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setattr(_waitlock, "NOTICE_AFTER", 0.1)
    run = await created(local)
    pack_all(local)
    lock = root / "segments" / "lock"
    holder = python(
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n",
        stdin=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with caplog.at_level(logging.WARNING, logger="wf.store"):
            waiting = asyncio.ensure_future(local.post(run.id, "wake", {}))
            deadline = time.monotonic() + 10
            while not any("waiting for" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the wait was never said"
                assert not waiting.done()
                await asyncio.sleep(0.02)
            assert holder.stdin is not None
            holder.stdin.close()  # the holder ends: its lock goes
            await asyncio.wait_for(waiting, 10)
    finally:
        holder.kill()
        holder.wait(10)
    said = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert said == [
        f"waiting for {lock} (taken to pack, unpack or delete packed runs; held by pid "
        f"{holder.pid})"
    ]


async def test_deleting_packed_runs_waits_for_the_lock_in_its_thread_and_says_so(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """``wf gc`` (``delete_runs``, in a worker thread) waits for a packer's lock: said once."""
    monkeypatch.setattr(_waitlock, "NOTICE_AFTER", 0.1)
    run = await finished(local)
    assert pack_all(local) == 1
    with caplog.at_level(logging.WARNING, logger="wf.store"):
        deleted = await _waits_off_the_loop(
            root, local.delete_runs([run.id], now=time.time(), reason="gc")
        )
    assert deleted.ids == [run.id]
    said = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert said == [
        f"waiting for {root / 'segments' / 'lock'} (taken to pack, unpack or delete packed "
        "runs; held by another process)"
    ]
