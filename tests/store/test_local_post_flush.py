"""The thread that flushes posts (``LocalStore.post``: wakes, cancels, hook payloads) outlives
whatever ends the process's idle pool threads: ``wf``'s exit does (``wf.cli._stopping``), and a
program or test process that ran a command in itself goes on posting. Its posts waited forever
(every hook delivery of a pytest worker hung once an earlier test had ended the pools)."""

from __future__ import annotations

import asyncio
import concurrent.futures.thread
import threading

import pytest

from tests.store.helpers import created, other_task_ready
from wf.cli import _stopping
from wf.store.local import LocalStore


async def _post_beside_other_work(local: LocalStore, run_id: str) -> str:
    async with other_task_ready(), asyncio.timeout(10):  # the post's flush goes to its thread
        return await local.post(run_id, "wake", {})


async def test_posts_flush_after_the_idle_pool_threads_were_ended(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await created(local)
    assert await _post_beside_other_work(local, run.id)  # the flushing thread exists, idle
    # What the command's exit does to every idle pool of the process (and undone here: the
    # process goes on, as a program that ran the command in itself does).
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", False)
    ending = threading.Thread(target=_stopping._end_idle_pools)  # not a pool's own thread
    ending.start()
    ending.join(10)
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", False)
    assert await _post_beside_other_work(local, run.id)
