"""Group commit: journal appends of many runs in one process share one flush.

An append writes its bytes at once (``os.pwrite`` into the journal's slack, through the lease's
descriptor) and then waits for the next *flush*, which makes every descriptor written since the
previous flush durable. A flush of one dirty file is one ``fdatasync``; of several, one
``syncfs`` of the file system, which on ext4 costs about as much as two ``fdatasync`` calls
however many files it covers.

Run creation joins the same flush: it stages a run's files without fsyncs and asks for them to
be flushed (``sync_file_system``, with the paths it owes), which turns the batch's flush into
one ``syncfs``. Concurrent creations and appends then share one flush instead of paying one
each.

A ``syncfs`` also waits for every other program's data on the file system. While one writes
there (``_pressure`` estimates what the flush would cost each way), the batch is flushed file by
file instead: an ``fdatasync`` of each file written and an ``fsync`` of each path owed.

Scheduling (chosen by measurement, see ``docs/store.md``): the first waiter schedules the flush
with ``loop.call_soon``, so every append made in the same event-loop tick joins it, at no extra
latency for a lone appender (no thread hop, no timer). The flush runs right there on the loop
thread. Flushing in a worker thread was measured too: it costs a lone appender about 1.9x (the
thread hop doubles the latency) and gains nothing at 10-1000 concurrent runs, because every
waiting appender is in the batch being flushed, so there is no other work to overlap.

A failed flush fails every waiter of its batch and poisons the descriptors in it: the page cache
may have dropped the dirty pages, and a later fsync could succeed without the data ever reaching
the disk, so the lease must be re-acquired (which re-reads the journal) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

from wf._exceptions import StoreError
from wf.store.local import _fsops, _pressure

_Target = tuple[str, int]
"""A dirty descriptor's path (for error messages) and device (one syncfs per file system)."""


class Committer:
    """Group commit for one event loop and one file system."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._dirty: dict[int, _Target] = {}
        self._whole: dict[int, tuple[str, set[str] | None]] = {}
        """Devices whose file system the next flush must make durable: a path on each, and the
        paths owed (``_fsops.deferred_fsyncs``), or None if nothing less than all of it will
        do."""
        self._waiters: list[asyncio.Future[None]] = []
        self._scheduled = False
        self._poisoned: dict[int, StoreError] = {}
        self.flushes = 0
        """Number of flushes so far (for benchmarks and tests)."""

    def mark(self, fd: int, path: str, device: int) -> None:
        """Note that ``fd`` (a file on ``device``) has bytes the next flush must cover."""
        self._dirty[fd] = (path, device)

    def is_dirty(self, fd: int) -> bool:
        """True if ``fd`` has bytes not yet covered by a completed flush."""
        return fd in self._dirty

    def check(self, fd: int) -> None:
        """Raise the error of the failed flush that poisoned ``fd``, if any."""
        error = self._poisoned.get(fd)
        if error is not None:
            raise StoreError(f"{error} (earlier flush failed; re-acquire the run)") from error

    async def commit(self, fd: int, path: str, device: int) -> None:
        """Return once every byte written to ``fd`` so far is durable."""
        self.check(fd)
        self._dirty[fd] = (path, device)
        await self._flushed()

    async def sync_file_system(
        self, path: str, device: int, owed: Collection[str] | None = None
    ) -> None:
        """Return once ``owed`` (files and directories whose fsyncs ``deferred_fsyncs``
        collected) is durable, or without ``owed``, everything written so far on ``device``
        (``path`` is on it), as if each file and directory had been fsynced.

        The flush is one ``syncfs`` for the whole batch, or, with every caller's ``owed`` known
        and a busy file system (``_pressure``), an ``fsync`` of each owed path and an
        ``fdatasync`` of each file written. Needs syncfs (``_fsops.HAVE_SYNCFS``); without it,
        callers fsync file by file.
        """
        known_path, known = self._whole.get(device, (path, set()))
        merged = None if owed is None or known is None else known | set(owed)
        self._whole[device] = (known_path, merged)
        await self._flushed()

    async def _flushed(self) -> None:
        if not self._scheduled and not others_ready(self.loop):
            # Nothing else can run before a scheduled flush would: flush now and save the
            # two loop iterations (a lone appender's whole overhead).
            dirty, whole, _ = self._take()
            error = _sync(dirty, whole)
            self._finish(dirty, [], error)
            if error is not None:
                raise error
            return
        future: asyncio.Future[None] = self.loop.create_future()
        self._waiters.append(future)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)
        await future

    def forget(self, fd: int) -> None:
        """Drop a descriptor that is about to be closed (after its last commit)."""
        self._dirty.pop(fd, None)
        self._poisoned.pop(fd, None)

    # -- flushing ------------------------------------------------------------------------

    def _take(
        self,
    ) -> tuple[
        dict[int, _Target], dict[int, tuple[str, set[str] | None]], list[asyncio.Future[None]]
    ]:
        taken = self._dirty, self._whole, self._waiters
        self._dirty, self._whole, self._waiters = {}, {}, []
        return taken

    def _flush(self) -> None:
        self._scheduled = False
        if not self._waiters:
            return
        dirty, whole, waiters = self._take()
        self._finish(dirty, waiters, _sync(dirty, whole))

    def _finish(
        self,
        dirty: dict[int, _Target],
        waiters: list[asyncio.Future[None]],
        error: BaseException | None,
    ) -> None:
        self.flushes += 1
        if isinstance(error, StoreError):
            for fd in dirty:
                self._poisoned[fd] = error
        for waiter in waiters:
            if waiter.done():  # the appender was cancelled; its bytes are flushed anyway
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)


def others_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether other callbacks wait to run in this loop tick (True if unknown: batch then)."""
    ready = getattr(loop, "_ready", None)  # asyncio's run queue; other loops: assume busy
    return ready is None or len(ready) > 0


def _sync(
    dirty: dict[int, _Target], whole: dict[int, tuple[str, set[str] | None]]
) -> StoreError | None:
    """Flush: per file system, one fdatasync for one file, else one syncfs, unless the file
    system is busy (``_pressure``): then one fdatasync per file, and an fsync of each path a
    creation owed. A request for the whole file system without its paths is always a syncfs.
    Returns the error instead of raising it.
    """
    if not whole and len(dirty) == 1:  # one journal (a sequential step): its fdatasync
        for fd, (path, _device) in dirty.items():
            try:
                _fsops.fdatasync(fd, path)
            except StoreError as error:
                return error
        return None
    by_device: dict[int, list[tuple[int, str]]] = {device: [] for device in whole}
    for fd, (path, device) in dirty.items():
        by_device.setdefault(device, []).append((fd, path))
    try:
        for device, files in by_device.items():
            path, owed = whole.get(device, ("", set()))
            items = len(files) + len(owed or ())
            if owed is None or (
                items > 1 and _fsops.HAVE_SYNCFS and _pressure.whole_flush_ok(items)
            ):
                if files:
                    _fsops.syncfs(*files[0])
                else:
                    _fsops.barrier(path)
                continue
            for fd, name in files:
                _fsops.fdatasync(fd, name)
            for name in sorted(owed):
                _fsops.fsync_path(name)
    except StoreError as error:
        return error
    return None


def sync_owed(whole: dict[int, tuple[str, set[str] | None]]) -> StoreError | None:
    """One flush of what ``sync_file_system`` callers asked for (``whole``: per device, a path
    on it and the paths owed, or None for all of it); the error instead of raising it. Made
    on any thread (``_offloop``)."""
    return _sync({}, whole)


_committers: dict[asyncio.AbstractEventLoop, Committer] = {}


def committer_for(loop: asyncio.AbstractEventLoop) -> Committer:
    """The process-wide committer of ``loop`` (shared by every store and lease on it)."""
    found = _committers.get(loop)
    if found is None:
        # Forget committers of closed loops (tests make a loop per test).
        for old in [old for old in _committers if old.is_closed()]:
            with contextlib.suppress(KeyError):
                del _committers[old]
        found = _committers[loop] = Committer(loop)
    return found
