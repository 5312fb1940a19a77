"""The local store's file-system watcher (``_notify``) survives what makes its notifier fail:
a name it cannot decode (not UTF-8) in a watched directory, or a notifier that fails again
and again. It is restarted, after a pause that doubles up to ``RESTART_MAX``; meanwhile the
store polls, and once restarted the views look at everything again (events were missed)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from wf.store._ids import new_run_id
from wf.store.local import LocalStore, _notify
from wf.store.local._layout import NOW, queue_name


async def _watched(tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "wf")
    await store.wait_for_activity(0.01)  # the store made, its watcher up
    if not store.hub.hearing():
        await store.close()
        pytest.skip("no file-system events here")
    return store


async def _heard(store: LocalStore, make: Path) -> None:
    """A change another process makes (``make``) wakes a waiter by an event: its poll
    interval is longer than the test's timeout."""
    waiter = asyncio.ensure_future(store.hub.wait("", 10.0, lambda: 0, 0, 10.0))
    await asyncio.sleep(0)
    make.touch()
    async with asyncio.timeout(5.0):
        await waiter


@pytest.mark.parametrize("folder", ["queue", "schedules"])
async def test_a_name_the_watcher_cannot_decode_does_not_stop_it(
    tmp_path: Path, folder: str
) -> None:
    """watchfiles fails every look of a notifier that saw a name not in UTF-8 (``Unable to
    decode path``): the watcher replaces that notifier and goes on hearing changes, also after
    the name is gone. (It stopped for good: a worker then heard new runs at its poll
    interval, 0.35-0.9 s instead of 0.01 s.)"""
    store = await _watched(tmp_path)
    try:
        bad = os.path.join(os.fsencode(tmp_path / "wf" / folder), b"bad\xff.json")
        with open(bad, "wb"):
            pass
        await asyncio.sleep(0.3)  # the notifier fails meanwhile, and is replaced
        await _heard(store, Path(store.queue.dir) / queue_name(NOW, new_run_id()))
        os.unlink(bad)
        await asyncio.sleep(0.3)
        await _heard(store, Path(store.queue.dir) / queue_name(NOW, new_run_id()))
        assert store.hub.hearing()
    finally:
        await store.close()


class _Failing:
    """A notifier whose every look fails, as watchfiles' does after an undecodable name."""

    def __init__(self, *args: Any) -> None:
        pass

    def watch(self, *args: Any) -> Any:
        raise RuntimeError("Unable to decode path")

    def close(self) -> None:
        pass


async def test_a_watcher_that_keeps_failing_is_restarted_with_a_bounded_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failure in a row doubles the pause before the next notifier, up to
    ``RESTART_MAX``; the store polls meanwhile (``hearing`` is False), and hears again once
    a notifier works. The pauses are not slept here (``_pause``)."""
    store = await _watched(tmp_path)
    pauses: list[float] = []
    held = threading.Event()

    def pause(watcher: Any, seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 14:
            held.wait(5.0)  # while the test looks

    monkeypatch.setattr(_notify._Watcher, "_pause", pause)
    watcher = store.hub._watcher
    assert watcher is not None
    real = watcher._factory
    try:
        watcher._factory = _Failing
        with watcher._lock:
            watcher._notify = _Failing()
            watcher._switch.set()
        async with asyncio.timeout(5.0):
            while len(pauses) < 14:
                await asyncio.sleep(0.01)
        assert not store.hub.hearing()  # polling meanwhile
        first = _notify.RESTART_FIRST
        expected = [min(first * 2**n, _notify.RESTART_MAX) for n in range(14)]
        assert pauses[:14] == expected
        assert max(pauses) == _notify.RESTART_MAX
        watcher._factory = real
        held.set()
        async with asyncio.timeout(5.0):
            while not store.hub.hearing():
                await asyncio.sleep(0.01)
        await _heard(store, Path(store.queue.dir) / queue_name(NOW, new_run_id()))
    finally:
        held.set()
        await store.close()


async def test_a_watcher_that_could_not_start_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watcher that failed to start (inotify limits reached, for one) is tried again at the
    first wait after the pause, instead of leaving the process polling for good."""
    real = _notify._Watcher
    starts: list[int] = []

    def flaky(hub: Any, paths: list[str]) -> Any:
        starts.append(1)
        if len(starts) == 1:
            raise OSError(28, "inotify watch limit reached")
        return real(hub, paths)

    monkeypatch.setattr(_notify, "_Watcher", flaky)
    monkeypatch.setattr(_notify, "RESTART_FIRST", 0.0)  # tried again at the next wait
    store = LocalStore(tmp_path / "wf")
    try:
        await store.wait_for_activity(0.01)
        assert starts == [1]
        assert not store.hub.hearing()
        await store.wait_for_activity(0.01)
        assert len(starts) == 2
        assert store.hub.hearing()
    finally:
        await store.close()


async def test_a_path_that_cannot_be_watched_leaves_the_watcher_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run directory the notifier cannot add (the inotify watch limit reached) is not
    watched, and that is all: the watcher goes on hearing ``queue/`` with the notifier it
    had (it was marked failed for the rest of the process's life)."""
    store = await _watched(tmp_path)
    watcher = store.hub._watcher
    assert watcher is not None

    def refuse(*args: Any) -> Any:
        raise OSError(28, "inotify watch limit reached")

    try:
        monkeypatch.setattr(watcher, "_factory", refuse)
        run_dir = tmp_path / "wf" / "runs" / "r1"
        run_dir.mkdir(parents=True)
        assert not store.hub.watch(str(run_dir))
        assert store.hub.hearing()
        await _heard(store, Path(store.queue.dir) / queue_name(NOW, new_run_id()))
        monkeypatch.undo()
        assert store.hub.watch(str(run_dir))
    finally:
        await store.close()


async def test_a_restarted_watcher_has_every_inbox_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post made while the notifier was down was not heard: once restarted, every run
    waiting on its inbox is told to look (as the Redis and PostgreSQL stores do after a
    reconnect). It was not: a run suspended on a message waited for its poll, or for
    ever with no poll."""
    store = await _watched(tmp_path)
    told = threading.Event()
    monkeypatch.setattr(_notify._Watcher, "_pause", lambda watcher, seconds: None)
    monkeypatch.setattr(store.hub.inboxes, "heard_all", told.set)
    watcher = store.hub._watcher
    assert watcher is not None
    try:
        with watcher._lock:
            watcher._notify = _Failing()
            watcher._switch.set()
        async with asyncio.timeout(5.0):
            while not told.is_set():
                await asyncio.sleep(0.01)
        assert store.hub.hearing()
    finally:
        await store.close()
