"""Waiting for an ``flock`` another process holds: said once, and never on the event loop.

A lock such as ``segments/lock`` is held by a packer (``wf gc``) for a batch, and for as long
as that process is stopped (Ctrl-Z, SIGSTOP). A wait on it is therefore (1) told, once, after
``NOTICE_AFTER`` seconds: a ``wf.store`` warning naming the lock and its holders' pids, which a
CLI command shows on stderr (as ``migrate.lock``'s wait is); and (2) made in a thread when the
waiter is a coroutine (``held``): the lock is tried without waiting on the loop first, so the
common case costs no thread hop, and only a held lock sends the wait to a thread. At most one
thread of a loop waits per lock (a gate in front of it): the holders need the default thread
pool too, and 64 posts each waiting in a thread would take all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable

from wf.store.local import _fsops

log = logging.getLogger("wf.store")

NOTICE_AFTER = 1.0
"""Seconds a wait on a lock lasts before it is said."""


def holders(fd: int) -> list[int]:
    """The pids holding an ``flock`` on the file open as ``fd`` (from ``/proc/locks``; empty
    where there is none, or the holder is not known)."""
    try:
        info = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return []
    ident = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    found: list[int] = []
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line has "->".
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[5] != ident:
            continue
        with contextlib.suppress(ValueError):
            pid = int(parts[4])
            if pid != os.getpid() and pid not in found:
                found.append(pid)
    return found


def _say(fd: int, path: str, what: str) -> None:
    pids = holders(fd)
    held_by = f"held by pid {', '.join(map(str, pids))}" if pids else "held by another process"
    log.warning("waiting for %s (%s; %s)", path, what, held_by)


def flock(fd: int, mode: int, path: str, what: str) -> None:
    """``flock(fd, mode)``, waiting; a wait longer than ``NOTICE_AFTER`` is said once (``what``:
    what the lock is taken for). The lock is tried without waiting first, so an uncontended
    one costs one call; a wait is handed to the process's one watcher thread (a dictionary
    entry and a wake-up, not a thread of its own: a creation's sequence number is often
    waited for a few milliseconds)."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    key = next(_keys)
    with _changed:
        _waits[key] = (time.monotonic() + NOTICE_AFTER, fd, path, what)
        _watch()
        _changed.notify()
    try:
        fcntl.flock(fd, mode)
    finally:
        with _changed:
            _waits.pop(key, None)


_keys = itertools.count()
_waits: dict[int, tuple[float, int, str, str]] = {}
"""The waits under way: when each is said, its descriptor, its lock's path and purpose."""
_changed = threading.Condition()
_watcher: list[threading.Thread] = []


def _watch() -> None:
    """Start the watcher thread unless it runs (``_changed`` held)."""
    if not _watcher or not _watcher[0].is_alive():
        _watcher[:] = [threading.Thread(target=_watching, name="wf-lock-waits", daemon=True)]
        _watcher[0].start()


def _watching() -> None:
    with _changed:
        while True:
            if not _waits:
                _changed.wait()
                continue
            now = time.monotonic()
            due = [key for key, (at, *_) in _waits.items() if at <= now]
            for key in due:
                _at, fd, path, what = _waits.pop(key)
                # Said with ``_changed`` held: the waiter, done meanwhile, closes its
                # descriptor only once its entry is gone, so ``fd`` is still its lock's.
                with contextlib.suppress(Exception):
                    _say(fd, path, what)
            if _waits:
                _changed.wait(max(0.0, min(at for at, *_ in _waits.values()) - now))


@contextlib.asynccontextmanager
async def held(take: Callable[[bool], int | None], key: str) -> AsyncIterator[int]:
    """Hold the lock ``take`` takes: ``take(False)`` tries it on the loop (None if held
    elsewhere), ``take(True)`` waits for it (in a thread, behind this loop's gate for
    ``key``); yields its descriptor, closed on the way out. Cancelled while the thread waits,
    the lock the thread takes after all is let go as soon as it has it."""
    fd = take(False)
    if fd is None:
        gate = _gate(key)
        await gate.acquire()
        try:
            fd = take(False)  # let go while this one waited at the gate
        except BaseException:
            gate.release()
            raise
        if fd is None:
            locking = waited_for(take)
            try:
                fd = await asyncio.shield(locking)
            except asyncio.CancelledError:
                # The thread still takes the lock: the gate stays closed until it is let go,
                # so a cancelled caller never leaves a second thread waiting behind it.
                locking.add_done_callback(functools.partial(let_go, gate))
                raise
            except BaseException:
                gate.release()
                raise
        gate.release()
    assert fd is not None  # a waiting ``take`` returns one
    try:
        yield fd
    finally:
        _fsops.close(fd)


def waited_for(take: Callable[[bool], int | None]) -> asyncio.Future[int | None]:
    """``take(True)`` in a daemon thread of its own; the future of its descriptor. Not in the
    loop's default pool: a loop closing waits for the threads of that pool, and a Ctrl-C of a
    command waiting for a lock a stopped process holds would wait with them. A lock the thread
    takes once the loop is closed is let go at once."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int | None] = loop.create_future()

    def settle(fd: int | None, error: BaseException | None) -> None:
        if future.cancelled():
            if fd is not None:
                _fsops.close(fd)
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(fd)

    def wait() -> None:
        fd: int | None = None
        error: BaseException | None = None
        try:
            fd = take(True)
        except BaseException as caught:  # handed to the waiter
            error = caught
        try:
            loop.call_soon_threadsafe(settle, fd, error)
        except RuntimeError:  # the loop is closed: nobody waits any more
            if fd is not None:
                _fsops.close(fd)

    threading.Thread(target=wait, name="wf-lock-wait", daemon=True).start()
    return future


_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _gate(key: str) -> asyncio.Lock:
    """The running loop's lock in front of the waits for ``key``'s lock, shared by every
    store of the loop on it."""
    gates = _gates.setdefault(asyncio.get_running_loop(), {})
    gate = gates.get(key)
    if gate is None:
        gate = gates[key] = asyncio.Lock()
    return gate


def let_go(gate: asyncio.Lock, locking: asyncio.Future[int | None]) -> None:
    """Close the lock a cancelled waiter's thread took after all, then open the gate."""
    try:
        if not locking.cancelled() and locking.exception() is None:
            fd = locking.result()
            if fd is not None:
                _fsops.close(fd)
    finally:
        gate.release()
