"""Which way a flush goes: one ``syncfs`` while the disk is quiet, file by file while another
program's writes would make a ``syncfs`` wait for them (``wf.store.local._pressure``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wf.store.local import _pressure
from wf.store.local._pressure import whole_flush_ok  # the real one: tests/conftest.py pins it

ITEMS = 9
"""What a lone creation owes: its journal, directories and index entries' directories."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    _pressure.reset()
    monkeypatch.setattr(_pressure, "_clock", fake)
    yield fake
    _pressure.reset()


def dirty(monkeypatch: pytest.MonkeyPatch, value: int | None) -> None:
    monkeypatch.setattr(_pressure, "dirty_bytes", lambda: value)


def test_a_quiet_disk_is_flushed_whole(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    dirty(monkeypatch, 64 << 10)
    assert whole_flush_ok(ITEMS)
    assert whole_flush_ok(2)


def test_another_programs_dirty_data_sends_small_flushes_file_by_file(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    dirty(monkeypatch, 512 << 20)  # a copy in progress
    assert not whole_flush_ok(ITEMS)
    assert not whole_flush_ok(_pressure.MOST_FILE_BY_FILE)
    # A big batch is one syncfs whatever: a flush per item would cost more even now.
    assert whole_flush_ok(_pressure.MOST_FILE_BY_FILE + 1)


def test_the_look_at_dirty_data_is_kept_briefly(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    dirty(monkeypatch, 0)
    assert whole_flush_ok(ITEMS)
    dirty(monkeypatch, 512 << 20)
    assert whole_flush_ok(ITEMS)  # within LOOK: not read again
    clock.now += _pressure.LOOK * 2
    assert not whole_flush_ok(ITEMS)


def test_a_backlog_is_paid_off_once_file_by_file_has_cost_as_much(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    # A few MiB another program wrote a while ago (about 5.6 ms of syncfs on the estimate):
    # file by file is cheaper for one flush, but leaves the backlog for every later one.
    dirty(monkeypatch, 4 << 20)
    ways = []
    for _ in range(20):
        ways.append(whole_flush_ok(ITEMS))
        clock.now += 0.002
    first_whole = ways.index(True)
    assert 2 <= first_whole <= 6  # 9 flushes of 0.15 ms: 1.2 ms more than one syncfs each
    _pressure.note_whole_flush(0.006)  # the backlog is written
    dirty(monkeypatch, 4 << 20)  # /proc/meminfo still counts it (or another file system's)
    assert whole_flush_ok(ITEMS)  # the flush is fresher: nothing is left to pay for a LOOK
    clock.now += _pressure.LOOK * 2
    dirty(monkeypatch, 16 << 10)  # and what arrives between flushes is little
    assert whole_flush_ok(ITEMS)


def test_a_quick_syncfs_stands_for_a_look_and_a_slow_one_does_not(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    read = []
    monkeypatch.setattr(_pressure, "dirty_bytes", lambda: read.append(1) or 512 << 20)
    _pressure.note_whole_flush(_pressure.SLOW / 10)
    assert whole_flush_ok(ITEMS) and not read  # nothing is dirty on the file system just flushed
    clock.now += _pressure.LOOK * 2
    assert not whole_flush_ok(ITEMS) and len(read) == 1  # another program writes again
    _pressure.note_whole_flush(_pressure.SLOW * 2)  # a slow one: someone was writing meanwhile
    assert not whole_flush_ok(ITEMS) and len(read) == 2  # looked at again at once


def test_a_file_system_busy_beyond_the_backlog_bound_stays_file_by_file(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    dirty(monkeypatch, 64 << 20)  # another program writing steadily: ~87 ms on the estimate
    for _ in range(1000):
        assert not whole_flush_ok(ITEMS)
        clock.now += 0.002


def test_slower_file_flushes_make_file_by_file_dearer(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    dirty(monkeypatch, 1 << 20)  # about 1.4 ms of syncfs on the estimate
    for _ in range(100):
        _pressure.note_file_flush(0.0001)
    assert not whole_flush_ok(ITEMS)  # 9 flushes of 0.1 ms cost less
    for _ in range(100):
        _pressure.note_file_flush(0.002)
    clock.now += _pressure.LOOK * 2
    assert whole_flush_ok(ITEMS)  # 9 flushes of 2 ms do not


def test_two_slow_syncfs_in_a_row_back_off_doubling(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    dirty(monkeypatch, None)  # no /proc/meminfo: only the time syncfs takes can tell
    slow = _pressure.SLOW * 10
    _pressure.note_whole_flush(slow)
    assert whole_flush_ok(ITEMS)  # one alone can be the kernel's periodic writeback
    _pressure.note_whole_flush(slow)
    assert not whole_flush_ok(ITEMS)
    clock.now += _pressure.BACKOFF
    assert whole_flush_ok(ITEMS)
    _pressure.note_whole_flush(slow)
    _pressure.note_whole_flush(slow)
    clock.now += _pressure.BACKOFF
    assert not whole_flush_ok(ITEMS)  # the second time, twice as long
    clock.now += _pressure.BACKOFF
    assert whole_flush_ok(ITEMS)
    _pressure.note_whole_flush(_pressure.SLOW / 10)  # quiet again: back to the first backoff
    _pressure.note_whole_flush(slow)
    _pressure.note_whole_flush(slow)
    clock.now += _pressure.BACKOFF
    assert whole_flush_ok(ITEMS)


def test_the_backoff_stops_growing(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    dirty(monkeypatch, None)
    for _ in range(20):
        _pressure.note_whole_flush(1.0)
        _pressure.note_whole_flush(1.0)
        clock.now += _pressure.MAX_BACKOFF
        assert whole_flush_ok(ITEMS)


def test_dirty_bytes_reads_this_machine() -> None:
    found = _pressure.dirty_bytes()
    assert found is None or found >= 0


def test_a_backoff_still_flushes_a_batch_whole_when_file_by_file_costs_more(
    monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    # Four workers of one store on two cores: their syncfs wait for one another's journals
    # (10-30 ms), and a file's fdatasync takes 0.8 ms. A batch of 50 journals file by file
    # (40 ms) costs more than the syncfs whose slowness started the backoff.
    dirty(monkeypatch, None)
    for _ in range(20):
        _pressure.note_whole_flush(0.003)
    for _ in range(100):
        _pressure.note_file_flush(0.0008)
    _pressure.note_whole_flush(_pressure.SLOW * 1.5)
    _pressure.note_whole_flush(_pressure.SLOW * 1.5)
    assert not whole_flush_ok(ITEMS)  # 7 ms file by file against a syncfs of about 20 ms
    assert whole_flush_ok(50)
    # A copy beside the store: syncfs takes hundreds of ms, and the batch goes file by file.
    _pressure.note_whole_flush(0.5)
    _pressure.note_whole_flush(0.5)
    assert not whole_flush_ok(50)
    assert whole_flush_ok(_pressure.MOST_FILE_BY_FILE + 1)
