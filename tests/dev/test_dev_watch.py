"""``wf dev``'s watcher of the project's files survives a notifier that fails."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from wf.dev import _watch
from wf.dev._watch import ChangeKind, Watcher
from wf.store.local import _notify


async def _next_change(watcher: Watcher, stop: asyncio.Event, path: Path) -> None:
    async with asyncio.timeout(5.0):
        async for _seen, changes in watcher.batches(stop):
            if any(c.path == path and c.kind != ChangeKind.DELETED for c in changes):
                return


async def test_a_name_the_watcher_cannot_decode_does_not_stop_it(tmp_path: Path) -> None:
    """watchfiles fails for good once it saw a name that is not UTF-8 (``Unable to decode
    path``): the watcher starts a new one (after ``RESTART_FIRST``), and the saves after it are
    still reloaded. (Its task ended: ``wf dev`` silently reloaded nothing any more.)"""
    (tmp_path / "pkg").mkdir()
    watcher = Watcher([tmp_path], polling=False, debounce_ms=100, step_ms=20)
    stop = asyncio.Event()
    await watcher.start(stop)
    try:
        for folder in (tmp_path, tmp_path / "pkg"):
            with open(os.path.join(os.fsencode(folder), b"bad\xff.py"), "wb"):
                pass
        await asyncio.sleep(0.3)  # each notifier fails meanwhile, and is replaced
        for saved in (tmp_path / "app.py", tmp_path / "pkg" / "mod.py"):
            saved.write_text("x = 1\n")
            await _next_change(watcher, stop, saved)
    finally:
        stop.set()
        await watcher.close()


def test_the_pause_before_a_restart_doubles_up_to_a_bound() -> None:
    """The pause ``wf dev``'s watcher and the store's take before a restart."""
    pauses = [_notify.restart_pause(n) for n in range(40)]
    assert pauses[0] == _notify.RESTART_FIRST
    assert pauses[1] == 2 * _notify.RESTART_FIRST
    assert max(pauses) == pauses[-1] == _notify.RESTART_MAX


async def test_a_group_whose_notifier_cannot_start_is_polled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory whose name is not UTF-8 inside a watched sub-directory fails a recursive
    notifier at its first look, every time it is started: after a few such failures that
    group is polled (said once), and the warning names the real cause, not "unhandled errors
    in a TaskGroup". (It was restarted for ever and ``wf dev`` reloaded nothing under it.)"""
    monkeypatch.setattr(_watch, "restart_pause", lambda failures: 0.0)
    (tmp_path / "pkg").mkdir()
    os.mkdir(os.path.join(os.fsencode(tmp_path / "pkg"), b"bad\xff"))
    watcher = Watcher([tmp_path], polling=False, debounce_ms=100, step_ms=20, poll_delay_ms=20)
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="wf.dev"):
        await watcher.start(stop)
        try:
            saved = tmp_path / "pkg" / "mod.py"
            for text in ("x = 1\n", "x = 2\n"):
                await asyncio.sleep(0.1)
                saved.write_text(text)
                await _next_change(watcher, stop, saved)
        finally:
            stop.set()
            await watcher.close()
    said = [r.getMessage() for r in caplog.records]
    assert not any("TaskGroup" in m for m in said), said
    assert any("decode" in m.lower() for m in said), said
    assert len([m for m in said if "polling" in m]) == 1, said


async def test_failures_a_long_calm_run_apart_never_turn_to_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A notifier that hears nothing (a quiet project) and fails now and then, each time
    after a long calm run, is restarted each time: the failures are no row. (The count of
    failures that heard nothing was reset only by an event heard: the third such failure,
    days apart, turned the group to polling for good.)"""
    import types

    import watchfiles

    clock = [0.0]
    started: list[float] = []

    async def failing_after_a_calm_run(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        started.append(clock[0])
        clock[0] += _watch.RESTART_CALM + 1  # a long run hearing nothing, then a failure
        raise RuntimeError("notifier failed")
        yield  # an async generator, as watchfiles.awatch

    monkeypatch.setattr(watchfiles, "awatch", failing_after_a_calm_run)
    monkeypatch.setattr(_watch, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(_watch, "restart_pause", lambda failures: 0.0)
    watcher = Watcher([tmp_path], polling=False, debounce_ms=100, step_ms=20, poll_delay_ms=20)
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="wf.dev"):
        await watcher.start(stop)
        try:
            async with asyncio.timeout(5.0):
                while len(started) < 2 * _watch.POLL_AFTER and "polling" not in caplog.text:
                    await asyncio.sleep(0.001)
        finally:
            stop.set()
            await watcher.close()
    said = [r.getMessage() for r in caplog.records]
    assert not any("polling" in m for m in said), said
    # Each failure the first of a row again: each said as a warning.
    assert len([m for m in said if "file watcher failed" in m]) >= 2 * _watch.POLL_AFTER - 1, said
