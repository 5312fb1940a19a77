"""Whether one flush of the whole file system (``syncfs``) is cheaper right now than an
``fsync`` per file and directory.

A ``syncfs`` makes every dirty page of the file system durable, other programs' as well as ours.
On a quiet file system that is one journal commit, cheaper than a flush per file as soon as
there are two; while another program writes to the same file system (a database, a copy, a
build), it waits for that program's data too. Measured on ext4 with ``dd`` writing beside the
store, a run's creation took 15 ms at the median and 0.6 s at worst with ``syncfs``, against
1.0-1.5 ms fsyncing its files and directories one by one. So a flush of ``items`` files and
directories estimates both:

* one ``syncfs``: ``WHOLE_BASE`` plus ``PER_DIRTY_BYTE`` for every byte the kernel holds dirty
  or under writeback (``/proc/meminfo``: the whole machine's, every file system's, so it can
  only over-count ours; read at most every ``LOOK`` seconds);
* one flush per item: ``items`` times what a lone ``fsync``/``fdatasync`` took lately.

Past ``MOST_FILE_BY_FILE`` items it is one ``syncfs`` whatever the estimates say: a busy
file system makes every flush slow, and one for the whole batch is then still the cheapest.

Dirty data is a backlog as often as a stream: a program that wrote a few MiB a while ago (a
build, a test suite, a database's lazy writes) leaves them dirty for up to 30 s. One ``syncfs``
writes that backlog once, and the next ones cost only what arrived since; going file by file
instead leaves it there, and every flush after pays the dearer way again (measured after a test
suite left 3.4 MiB dirty: eight ``fsync`` calls per creation, 2.1-2.3 ms a run with no step
against 1.2-1.3 ms with ``syncfs``). So while the estimates say file by file, what that costs
beyond one ``syncfs`` adds up, and once it reaches what the backlog would cost
(``MOST_BACKLOG`` at most: more is a file system that is busy, not behind) the next flush is a
``syncfs``: never more than twice the cheaper way, whichever it turns out to be.

And where ``/proc/meminfo`` says nothing useful (or the data was written in between), two
``syncfs`` in a row that took longer than ``SLOW`` make the next flushes weigh what each way
took lately for ``BACKOFF`` seconds, doubling while it happens again, up to ``MAX_BACKOFF``
(one alone can be the kernel's own periodic writeback, seen to cost 130 ms on a quiet disk):
file by file while ``items`` times a file's flush is less than a ``syncfs`` took (a moving
average that counts the slow ones), else one ``syncfs``. A lone creation (9 items, about
1.4 ms) then goes file by file beside a copy whose writes make a ``syncfs`` take 15 ms and
more; a batch of 50 journals does not, when what makes ``syncfs`` slow is other processes
flushing the same store (four workers on two cores: ``syncfs`` 10-15 ms, a file's
``fdatasync`` 0.8 ms, so 40 ms for the batch file by file).

Both ways are equally durable (``Committer``); only the cost differs.
"""

from __future__ import annotations

import os
import time

WHOLE_BASE = 0.00015
"""Seconds a ``syncfs`` of a quiet file system takes (0.07-0.16 ms measured)."""

PER_DIRTY_BYTE = 1.3e-9
"""Seconds a ``syncfs`` takes per byte dirty or under writeback (1.3 ms a MiB measured on a
virtual disk: a guess on the slow side, so a busy file system goes file by file early)."""

FILE_FLUSH = 0.00015
"""What a lone ``fsync``/``fdatasync`` is taken to cost until some were timed (seconds)."""

WHOLE_WEIGHT = 0.25
"""Weight of the latest ``syncfs`` in the moving average of what one took (the slow ones that
start a backoff show at once)."""

MOST_FILE_BY_FILE = 64
"""A flush of more items than this is one ``syncfs`` even while the file system is busy. With a
program writing beside it, 100 creations at once (206 paths) took 0.65 s file by file, 0.33 s
in one ``syncfs``; a lone creation (9 paths) 2.5 ms file by file, 15 ms to 3 s with it."""

MOST_BACKLOG = 0.05
"""Seconds of estimated ``syncfs`` beyond which dirty data is not paid off at once (about
38 MiB on ``PER_DIRTY_BYTE``): another program writes steadily then, and would dirty as much
again before the next flush."""

LOOK = 0.01
"""Seconds ``/proc/meminfo`` is trusted for before it is read again (a read costs ~15 µs)."""

SLOW = 0.02
"""A ``syncfs`` longer than this (seconds) found the file system busy; a quiet one takes
well under a millisecond."""

BACKOFF = 1.0
MAX_BACKOFF = 60.0

_clock = time.monotonic
_file_flush = FILE_FLUSH
_whole_flush = WHOLE_BASE
"""What a ``syncfs`` took lately (seconds, a moving average): weighed during a backoff."""
_busy_until = 0.0
_backoff = BACKOFF
_slow_in_a_row = 0
_looked_at = float("-inf")
_dirty: int | None = None
_owed = 0.0
"""Seconds that flushes went file by file cost beyond one ``syncfs`` each since the last
``syncfs``: what paying the backlog is weighed against."""
_meminfo: int | None = None
_meminfo_missing = False


def whole_flush_ok(items: int) -> bool:
    """Whether the next flush, of ``items`` files and directories, should be one ``syncfs``."""
    global _looked_at, _dirty, _owed
    if items > MOST_FILE_BY_FILE:
        return True
    now = _clock()
    if now < _busy_until:
        return items * _file_flush > _whole_flush
    if now - _looked_at >= LOOK:
        _looked_at = now
        _dirty = dirty_bytes()
    if _dirty is None:
        return True
    whole = WHOLE_BASE + _dirty * PER_DIRTY_BYTE
    by_file = items * _file_flush
    if whole <= by_file:
        return True
    _owed = min(_owed + by_file - WHOLE_BASE, MOST_BACKLOG)  # a busy spell owes no more
    # Pay the backlog off once file by file has cost as much: the flushes after it are cheap.
    return _owed >= whole and whole <= MOST_BACKLOG


def note_file_flush(seconds: float) -> None:
    """Record how long an ``fsync``/``fdatasync`` of one file took."""
    global _file_flush
    _file_flush += (seconds - _file_flush) * 0.1


def note_whole_flush(seconds: float) -> None:
    """Record how long a ``syncfs`` took: two slow ones in a row keep the next flushes file by
    file for a while."""
    global _busy_until, _backoff, _slow_in_a_row, _looked_at, _dirty, _owed, _whole_flush
    _owed = 0.0
    _whole_flush += (seconds - _whole_flush) * WHOLE_WEIGHT
    if seconds <= SLOW:
        # What was dirty is written now, and a quick flush found nothing else writing: that is
        # fresher than ``/proc/meminfo`` (which counts every file system), so it stands for
        # one ``LOOK``. Reading it again after every flush cost about 20 µs a round.
        _looked_at, _dirty = _clock(), 0
        _slow_in_a_row = 0
        _backoff = BACKOFF
        return
    _looked_at = float("-inf")  # written now, but slowly: look again before the next
    _slow_in_a_row += 1
    if _slow_in_a_row >= 2:
        _slow_in_a_row = 0
        _busy_until = _clock() + _backoff
        _backoff = min(_backoff * 2, MAX_BACKOFF)


def dirty_bytes() -> int | None:
    """Bytes the kernel holds dirty or under writeback, all file systems together (None where
    ``/proc/meminfo`` cannot be read)."""
    global _meminfo, _meminfo_missing
    if _meminfo_missing:
        return None
    try:
        if _meminfo is None:
            _meminfo = os.open("/proc/meminfo", os.O_RDONLY | os.O_CLOEXEC)
        text = os.pread(_meminfo, 8192, 0)
        total = 0
        for field in (b"\nDirty:", b"\nWriteback:"):
            start = text.index(field) + len(field)
            total += int(text[start : text.index(b"kB", start)])
    except (OSError, ValueError):
        _meminfo_missing = True
        return None
    return total * 1024


def reset() -> None:
    """Forget what was seen (for tests)."""
    global _file_flush, _busy_until, _backoff, _slow_in_a_row, _looked_at, _dirty, _owed
    global _whole_flush
    _file_flush, _busy_until, _backoff, _slow_in_a_row = FILE_FLUSH, 0.0, BACKOFF, 0
    _whole_flush = WHOLE_BASE
    _looked_at, _dirty, _owed = float("-inf"), None, 0.0
