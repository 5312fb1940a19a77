"""Upgrading a local store's format: what a long upgrade says, how it waits for another
process's, how SIGTERM stops it, and the deferred fsyncs it owes (``_fsops._Owed``)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import threading
import time
from pathlib import Path

import orjson
import pytest

from tests.store.helpers import created
from tests.store.test_local import _format_3_run
from wf._exceptions import UpgradeInterrupted
from wf.store.local import LocalStore, _format, _fsops, _upgrade
from wf.store.local._layout import FORMAT, RESERVE_FILE

pytestmark = pytest.mark.timeout(30)


def _format_3_store(root: Path, runs: int) -> None:
    for name in ("runs", "queue", "index", "children", "hooks", "tmp", "lanes", "slots", "rates"):
        (root / name).mkdir(parents=True)
    (root / "wf-store.json").write_bytes(b'{"format": 3}')
    for n in range(runs):
        _format_3_run(root, f"p{n:04d}")


def _format_of(root: Path) -> int:
    return int(orjson.loads((root / "wf-store.json").read_bytes())["format"])


# -- deferred fsyncs ----------------------------------------------------------------------------


def test_owed_fsyncs_follow_renames_and_are_owed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each path is owed once however often it is synced, a renamed file is owed under its
    new name, a renamed directory carries what is owed inside it."""
    monkeypatch.setattr(_fsops, "HAVE_SYNCFS", True)
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "a").write_bytes(b"a")
    (tmp_path / "b.tmp").write_bytes(b"b")
    with _fsops.deferred_fsyncs() as owed:
        for _ in range(3):
            _fsops.fsync_dir(str(tmp_path))
        _fsops.fsync_dir(str(staged))
        _fsops.fsync_path(str(staged / "a"))
        _fsops.fsync_path(str(tmp_path / "b.tmp"))
        _fsops.rename(str(tmp_path / "b.tmp"), str(tmp_path / "b"))
        _fsops.rename(str(staged), str(tmp_path / "run"))
    assert sorted(owed) == sorted(
        str(p) for p in (tmp_path, tmp_path / "run", tmp_path / "run" / "a", tmp_path / "b")
    )


def test_a_rename_onto_an_owed_path_keeps_both_owed_under_the_new_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_fsops, "HAVE_SYNCFS", True)
    for name in ("x", "y"):
        (tmp_path / name).write_bytes(b"")
    with _fsops.deferred_fsyncs() as owed:
        _fsops.fsync_path(str(tmp_path / "x"))
        _fsops.fsync_path(str(tmp_path / "y"))
        _fsops.rename(str(tmp_path / "x"), str(tmp_path / "y"))
        _fsops.rename(str(tmp_path / "y"), str(tmp_path / "z"))
    assert set(owed) == {str(tmp_path / "z")}


def test_an_owed_file_linked_then_its_directory_renamed_is_owed_under_its_last_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_fsops, "HAVE_SYNCFS", True)
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "t").write_bytes(b"t")
    with _fsops.deferred_fsyncs() as owed:
        _fsops.fsync_path(str(staged / "t"))
        _fsops.link(str(staged / "t"), str(staged / "a"))
        os.unlink(staged / "t")
        _fsops.fsync_dir(str(staged))
        _fsops.rename(str(staged), str(tmp_path / "run"))
    assert sorted(owed) == sorted(str(p) for p in (tmp_path / "run", tmp_path / "run" / "a"))


# -- a long upgrade ----------------------------------------------------------------------------


async def test_an_upgrade_says_when_it_starts_and_how_far_it_got(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _format_3_store(root, 5)
    monkeypatch.setattr(_upgrade, "PROGRESS_EVERY", 0.0)
    with caplog.at_level(logging.WARNING, logger="wf.store"):
        store = LocalStore(root)
        assert len(await store.list_runs()) == 5
        await store.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "wf.store"]
    assert lines[0] == (
        f"upgrading {root} from format 3 to {FORMAT} (5 runs); other wf processes opening it "
        "wait until it is done"
    )
    assert any(f"to format {FORMAT}: at format 4, " in line for line in lines)
    assert lines[-1].startswith(f"upgraded {root} to format {FORMAT} in ")
    assert _format_of(root) == FORMAT
    assert (root / "tombstones" / RESERVE_FILE).stat().st_size > 0  # as a new store has it


async def test_a_process_says_it_waits_for_another_process_upgrading(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _format_3_store(root, 2)
    holder = os.open(root / _format.MIGRATE_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process upgrading

    def release_once_said() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any("waiting for another process" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.01)
        os.close(holder)

    with caplog.at_level(logging.WARNING, logger="wf.store"):
        releaser = threading.Thread(target=release_once_said)
        releaser.start()
        store = LocalStore(root)
        assert len(await store.list_runs()) == 2
        await store.close()
        releaser.join()
    said = [r.getMessage() for r in caplog.records if r.name == "wf.store"]
    assert said[0] == (
        f"waiting for another process to finish upgrading {root} (from format 3 to {FORMAT}; "
        "it says how far it got)"
    )


async def test_sigterm_stops_an_upgrade_which_the_next_opening_finishes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal is taken between two runs (the event loop it blocks could not): the upgrade
    stops with ``UpgradeInterrupted``, the store keeps its old format, the handler in force
    before is back, and the next opening upgrades it whole."""
    _format_3_store(root, 4)
    real = _format.MIGRATIONS[4]

    def signalled(path: str) -> None:
        signal.raise_signal(signal.SIGTERM)  # as ``kill`` would, mid-upgrade
        real(path)

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setitem(_format.MIGRATIONS, 4, signalled)
    stopped = r"SIGTERM: the upgrade of .* stopped at format 4 \(0 items done\)"
    with pytest.raises(UpgradeInterrupted, match=stopped):
        await LocalStore(root).list_runs()
    assert signal.getsignal(signal.SIGTERM) is before
    assert _format_of(root) == 3
    monkeypatch.setitem(_format.MIGRATIONS, 4, real)
    store = LocalStore(root)
    assert sorted(r.id for r in await store.list_runs()) == [f"p{n:04d}" for n in range(4)]
    assert await store.verify() == []
    await store.close()
    assert _format_of(root) == FORMAT


async def test_what_an_upgrade_set_aside_is_removed_in_the_background(root: Path) -> None:
    _format_3_store(root, 3)
    store = LocalStore(root)
    await store.list_runs()
    await store.close()
    deadline = time.monotonic() + 10
    while any((root / "tmp" / name).exists() for name in _format.ASIDE_NAMES):
        assert time.monotonic() < deadline, "tmp/index-v3 was never removed"
        time.sleep(0.01)


# -- processes of an older wf ------------------------------------------------------------------


async def test_an_open_store_holds_its_share_of_the_users_lock_until_closed(root: Path) -> None:
    """What lets a newer wf's upgrade wait for this process: a shared ``flock`` on
    ``users.lock`` while a store is open here (two stores of one directory share one)."""
    first, second = LocalStore(root), LocalStore(root)
    await created(first)
    await second.list_runs()
    upgrade = os.open(root / _format.USERS_LOCK, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(upgrade, fcntl.LOCK_EX | fcntl.LOCK_NB)
        await first.close()
        with pytest.raises(BlockingIOError):
            fcntl.flock(upgrade, fcntl.LOCK_EX | fcntl.LOCK_NB)
        await second.close()
        fcntl.flock(upgrade, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody has it open now
    finally:
        os.close(upgrade)


async def test_an_upgrade_waits_for_the_processes_of_an_older_wf_and_says_so(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _format_3_store(root, 2)
    older = os.open(root / _format.USERS_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(older, fcntl.LOCK_SH)  # a process of an older wf that has the store open
    said = "is in use by other processes of an older wf"

    def exit_once_said() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(said in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.01)
        assert _format_of(root) == 3  # nothing upgraded while it ran
        os.close(older)

    with caplog.at_level(logging.WARNING, logger="wf.store"):
        exits = threading.Thread(target=exit_once_said)
        exits.start()
        store = LocalStore(root)
        assert len(await store.list_runs()) == 2
        await store.close()
        exits.join()
    assert any(said in r.getMessage() for r in caplog.records)
    assert _format_of(root) == FORMAT


async def test_a_signal_after_the_last_item_reaches_the_event_loop_once(root: Path) -> None:
    """A SIGTERM that came after the upgrade's last item is the process's own again: a worker's
    event loop (``add_signal_handler``) hears it once. The signal reached the loop's wakeup fd
    whichever handler was in force, so sending it again would make it two (a worker told to
    stop at once instead of draining)."""
    loop = asyncio.get_running_loop()
    heard: list[int] = []
    loop.add_signal_handler(signal.SIGTERM, heard.append, 1)
    try:
        with _upgrade.running(_upgrade.Upgrade(str(root), 3, FORMAT, 0)):
            signal.raise_signal(signal.SIGTERM)  # after the last tick
        for _ in range(20):
            await asyncio.sleep(0)
        assert heard == [1]
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
