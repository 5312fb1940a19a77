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
latency for a lone appender (no thread hop, no timer). A batch of appends is flushed right there
on the loop thread: flushing it in a worker thread costs a lone appender about 1.9x (the thread
hop doubles the latency) and gains nothing at 10-1000 concurrent runs, because every waiting
appender is in the batch being flushed, so there is no other work to overlap.

A batch holding a run creation is the exception: a loop of ``await wf.start`` waits for one
flush per start, and on the loop thread that flush was serial with all the CPU of the runs in
flight. So such a batch, when it is one ``syncfs`` per file system, is flushed in a thread of
its own (``_Flusher``) while the loop runs the runs in flight, if any task is ready to run
meanwhile (else the hop would be all it adds); their appends wait for the next flush. When it
ends, the creations are woken a loop pass before the appenders, so the start loop writes its
next creation before the appenders' tasks run, and the next flush (scheduled after them) begins
with it: one flush per start still, the disk's time overlapped with theirs. A creation made
while a flush runs is never released by it (that flush began before its names were written): it
waits for the next. What a creator does next that needs no flush (a start's lease of its run) is
done while that thread flushes (``sync_file_system``'s ``meanwhile``), not between the flush and
the next creation, when the disk has nothing to do.

A failed flush fails every waiter of its batch and poisons the descriptors in it: the page cache
may have dropped the dirty pages, and a later fsync could succeed without the data ever reaching
the disk, so the lease must be re-acquired (which re-reads the journal) instead. A flush in the
thread that fails also fails what was written while it ran (its writeback may have carried it).
Every ``syncfs`` goes through the file system's one open file (``_fsops.FileSystem``), and each
caller gives the ``mark`` it took before writing: a batch fails if any ``syncfs`` of the process
failed since its oldest mark, even one made for another loop or thread, which alone was told.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable, Collection

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
        self._creations: list[asyncio.Future[None]] = []
        """Waiters that asked with the paths they owe (run creations): their batch is flushed
        in the flushing thread, and they are woken a loop pass before the appenders."""
        self._meanwhile: list[tuple[asyncio.Future[None], Callable[[], None]]] = []
        """What creations of the batch being formed asked to do on the loop while their
        flush runs in the thread (``sync_file_system``'s ``meanwhile``), with their waiters."""
        self._marks: dict[int, int] = {}
        """Per device, the oldest ``_fsops.mark`` the callers of the batch took before they
        wrote (what its ``syncfs`` must cover)."""
        self._scheduled = False
        self._running = False
        """A flush is under way in the flushing thread."""
        self._inflight: dict[int, _Target] = {}
        """The descriptors of the flush under way in the thread (dirty until it ends)."""
        self._poisoned: dict[int, StoreError] = {}
        self.flushes = 0
        """Number of flushes so far (for benchmarks and tests)."""

    def mark(self, fd: int, path: str, device: int, since: int) -> None:
        """Note that ``fd`` (a file on ``device``) has bytes the next flush must cover, written
        after the ``_fsops.mark`` that returned ``since``."""
        self._dirty[fd] = (path, device)
        self._note(device, since)

    def _note(self, device: int, since: int) -> None:
        known = self._marks.get(device)
        if known is None or since < known:
            self._marks[device] = since

    def is_dirty(self, fd: int) -> bool:
        """True if ``fd`` has bytes not yet covered by a completed flush."""
        return fd in self._dirty or fd in self._inflight

    def check(self, fd: int) -> None:
        """Raise the error of the failed flush that poisoned ``fd``, if any."""
        error = self._poisoned.get(fd)
        if error is not None:
            raise StoreError(f"{error} (earlier flush failed; re-acquire the run)") from error

    async def commit(self, fd: int, path: str, device: int, since: int) -> None:
        """Return once every byte written to ``fd`` so far (after the ``_fsops.mark`` that
        returned ``since``) is durable."""
        self.check(fd)
        self._dirty[fd] = (path, device)
        self._note(device, since)
        await self._flushed()

    async def sync_file_system(
        self,
        path: str,
        device: int,
        since: int,
        owed: Collection[str] | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Return once ``owed`` (files and directories whose fsyncs ``deferred_fsyncs``
        collected) is durable, or without ``owed``, everything written so far on ``device``
        (``path`` is on it), as if each file and directory had been fsynced; ``since``: the
        ``_fsops.mark`` taken before the writes.

        The flush is one ``syncfs`` for the whole batch, or, with every caller's ``owed`` known
        and a busy file system (``_pressure``), an ``fsync`` of each owed path and an
        ``fdatasync`` of each file written. Needs syncfs (``_fsops.HAVE_SYNCFS``); without it,
        callers fsync file by file.

        ``meanwhile`` (a creation's, with ``owed``): called on the loop once the flush that
        covers this call is under way in the flushing thread, while the disk works (the
        creator's own next step, taken off the path that waits for the flush); not called when
        the flush is made on the loop, or this caller stopped waiting first. It must not raise.
        """
        known_path, known = self._whole.get(device, (path, set()))
        merged = None if owed is None or known is None else known | set(owed)
        self._whole[device] = (known_path, merged)
        self._note(device, since)
        await self._flushed(creation=owed is not None, meanwhile=meanwhile)

    async def _flushed(
        self, *, creation: bool = False, meanwhile: Callable[[], None] | None = None
    ) -> None:
        if not self._scheduled and not self._running and not others_ready(self.loop):
            # Nothing else can run before a scheduled flush would: flush now and save the
            # two loop iterations (a lone appender's whole overhead).
            dirty, whole, marks, _ = self._take()
            error = _run(_plan(dirty, whole, marks))
            self._finish(dirty, [], error)
            if error is not None:
                raise error
            return
        future: asyncio.Future[None] = self.loop.create_future()
        (self._creations if creation else self._waiters).append(future)
        if meanwhile is not None:
            self._meanwhile.append((future, meanwhile))
        if not self._scheduled and not self._running:
            self._scheduled = True
            self.loop.call_soon(self._flush)
        await future

    def forget(self, fd: int) -> None:
        """Drop a descriptor that is about to be closed (after its last commit)."""
        self._dirty.pop(fd, None)
        self._inflight.pop(fd, None)
        self._poisoned.pop(fd, None)

    # -- flushing ------------------------------------------------------------------------

    def _take(
        self,
    ) -> tuple[
        dict[int, _Target],
        dict[int, tuple[str, set[str] | None]],
        dict[int, int],
        list[asyncio.Future[None]],
    ]:
        taken = self._dirty, self._whole, self._marks, self._waiters
        self._dirty, self._whole, self._marks, self._waiters = {}, {}, {}, []
        return taken

    def _flush(self) -> None:
        self._scheduled = False
        if self._running or not (self._waiters or self._creations):
            return  # a flush under way in the thread schedules the next when it ends
        creations, self._creations = self._creations, []
        meanwhile, self._meanwhile = self._meanwhile, []
        dirty, whole, marks, waiters = self._take()
        plan = _plan(dirty, whole, marks)
        # Off the loop only with something else ready to run meanwhile (the runs in flight,
        # woken a pass after the last flush's creations): a batch of creations alone (a
        # gather of starts) saves the thread hop.
        if not (creations and others_ready(self.loop) and _all_at_once(plan)):
            self._finish(dirty, creations + waiters, _run(plan))
            return
        # A creation's flush: the loop runs the other ready tasks while the disk flushes.
        self._running = True
        self._inflight = dirty
        _flush_off_loop(
            self.loop,
            plan,
            lambda error: self._flushed_off_loop(error, dirty, creations, waiters),
        )
        # The creators' own work that needs no flush (their lease), done while the disk
        # flushes, not between the flush and their next creation (a loop of starts).
        for future, then in meanwhile:
            if not future.done():  # a cancelled creation is being taken back
                then()

    def _flushed_off_loop(
        self,
        error: StoreError | None,
        dirty: dict[int, _Target],
        creations: list[asyncio.Future[None]],
        waiters: list[asyncio.Future[None]],
    ) -> None:
        self._running = False
        # A descriptor forgotten meanwhile is closed, its number maybe another file's now.
        dirty = {fd: target for fd, target in dirty.items() if fd in self._inflight}
        self._inflight = {}
        # The creations first, the appenders a loop pass later: a loop of starts then writes
        # its next creation before the appenders' tasks run, so the next flush begins with
        # it while they run (one flush a start, the disk's time overlapped with theirs).
        self._finish(dirty, creations, error)
        self.loop.call_soon(self._finish, {}, waiters, error, False)
        if error is not None:
            # What was written while the failed flush ran may have been in its writeback,
            # and a later flush need not report that failure again (the error is reported
            # once per open file): it is failed too, its descriptors poisoned.
            later = self._creations + self._waiters
            self._creations, self._meanwhile = [], []
            written, _, _, _ = self._take()
            self._finish(written, later, error, False)
            return
        if (self._waiters or self._creations) and not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)

    def _finish(
        self,
        dirty: dict[int, _Target],
        waiters: list[asyncio.Future[None]],
        error: BaseException | None,
        count: bool = True,
    ) -> None:
        if count:
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


_Step = tuple[int, str, list[tuple[int, str]], set[str] | None, bool, int]
"""One file system's part of a flush: its device, a path on it (the one ``sync_file_system``
gave, else a dirty file's), the dirty descriptors on it (with their paths), the paths owed
(None: all of it), whether it is one ``syncfs`` (else an ``fdatasync`` of each file and an
``fsync`` of each owed path), and the oldest ``_fsops.mark`` its callers took."""


def _plan(
    dirty: dict[int, _Target],
    whole: dict[int, tuple[str, set[str] | None]],
    marks: dict[int, int],
) -> list[_Step]:
    """How to flush: per file system, one fdatasync for one file, else one syncfs, unless the
    file system is busy (``_pressure``): then one fdatasync per file, and an fsync of each path
    a creation owed. A request for the whole file system without its paths is always a
    syncfs."""
    if not whole and len(dirty) == 1:  # one journal (a sequential step): its fdatasync
        for fd, (path, device) in dirty.items():
            return [(device, path, [(fd, path)], set(), False, 0)]
    by_device: dict[int, list[tuple[int, str]]] = {device: [] for device in whole}
    for fd, (path, device) in dirty.items():
        by_device.setdefault(device, []).append((fd, path))
    plan = []
    for device, files in by_device.items():
        path, owed = whole.get(device) or (files[0][1], set())
        items = len(files) + len(owed or ())
        at_once = owed is None or (
            items > 1 and _fsops.HAVE_SYNCFS and _pressure.whole_flush_ok(items)
        )
        plan.append((device, path, files, owed, at_once, marks.get(device, 0)))
    return plan


def _run(plan: list[_Step]) -> StoreError | None:
    """Make the flush ``_plan`` chose; the error instead of raising it."""
    try:
        for device, path, files, owed, at_once, since in plan:
            if at_once:
                _fsops.sync_whole(path, device, since)
                continue
            for fd, name in files:
                _fsops.fdatasync(fd, name)
            for name in sorted(owed or ()):
                _fsops.fsync_path(name)
    except StoreError as error:
        return error
    return None


def sync_owed(
    whole: dict[int, tuple[str, set[str] | None]], marks: dict[int, int]
) -> StoreError | None:
    """One flush of what ``sync_file_system`` callers asked for (``whole``: per device, a path
    on it and the paths owed, or None for all of it; ``marks``: per device, the oldest
    ``_fsops.mark`` the callers took); the error instead of raising it. Made on any thread
    (``_offloop``)."""
    return _run(_plan({}, whole, marks))


def _all_at_once(plan: list[_Step]) -> bool:
    """Whether ``plan`` may be made in the flushing thread: one ``syncfs`` per file system,
    through its own open file (``_fsops.FileSystem``), which no lease closes. A file system
    flushed file by file is flushed on the loop (by descriptors a lease may close meanwhile,
    and paths a cancelled creation may take back)."""
    return all(at_once for *_, at_once, _since in plan)


class _Flusher:
    """This process's thread for creations' flushes (a forked child starts its own: threads
    do not fork). A bare thread and a queue, not an executor: the thread takes the GIL as
    few times as it can (for the request, then for the answer), since each time it does,
    the loop thread waits for it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.requests: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, list[_Step], Callable[[StoreError | None], None]]
        ] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="wf-flush", daemon=True).start()

    def _serve(self) -> None:
        while True:
            loop, plan, done = self.requests.get()
            error = _run(plan)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(done, error)


_flusher: _Flusher | None = None


def _flush_off_loop(
    loop: asyncio.AbstractEventLoop,
    plan: list[_Step],
    done: Callable[[StoreError | None], None],
) -> None:
    """Make ``plan`` (``_all_at_once``) in the flushing thread, then call ``done`` with the
    error (or None) on ``loop``."""
    global _flusher
    # A forked child starts its own thread (the parent's did not fork with it). Told by the
    # process id, not a fork hook: a fork made in C (an extension) runs no Python hook.
    if _flusher is None or _flusher.pid != os.getpid():
        _flusher = _Flusher()
    _flusher.requests.put((loop, plan, done))


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
