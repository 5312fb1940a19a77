"""What a forked child must not keep of its parent's locks.

A step may fork a helper (``multiprocessing`` with the ``fork`` start method, the default on
Linux before Python 3.14, or ``os.fork``). The child inherits every descriptor of the worker,
and a lock that lives with a descriptor lives on in the child: an ``flock`` belongs to the open
file description (shared across ``fork``), a PostgreSQL session's advisory locks to its socket.
Should the worker die, its runs would stay locked until the helper exits, instead of being
taken over at once. So a forked child gives up, at once, the descriptors that hold locks:
``blind`` points each at ``/dev/null`` (``dup2``), which drops the child's reference to the
lock's file or socket and never touches the lock itself (the parent still holds it: no
``LOCK_UN``, no message to the server). The number stays taken, so that nothing the child opens
later lands on it, and a finalizer that writes to it (libpq's goodbye at exit) writes nowhere.

Holders register here (``hold``) while they hold a lock, and leave (``let_go``) when they give
it back; each one's ``forked`` is called in the child, after its descriptors were blinded.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable
from typing import Protocol


class Holder(Protocol):
    def lock_fds(self) -> Iterable[int]:
        """The descriptors that hold this object's locks now."""
        ...

    def forked(self) -> None:
        """In a forked child, once ``lock_fds`` point at ``/dev/null``: never use them (and
        ``let_go``, unless the holder stays to hold the child's own locks)."""
        ...


_holders: weakref.WeakSet[Holder] = weakref.WeakSet()


def hold(holder: Holder) -> None:
    """``holder`` holds locks on descriptors a forked child must not keep."""
    _holders.add(holder)


def let_go(holder: Holder) -> None:
    """``holder`` holds no lock any more."""
    _holders.discard(holder)


def blind(fds: Iterable[int]) -> None:
    """Point each of ``fds`` at ``/dev/null`` (closing it if ``/dev/null`` cannot be opened)."""
    wanted = sorted({fd for fd in fds if fd >= 0})
    if not wanted:
        return
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        null = -1
    try:
        for fd in wanted:
            try:
                if null >= 0:
                    os.dup2(null, fd, inheritable=False)
                else:
                    os.close(fd)
            except OSError:
                pass  # closed already: nothing held through it
    finally:
        if null >= 0 and null not in wanted:
            os.close(null)


def _in_child() -> None:
    holders = list(_holders)
    fds: list[int] = []
    for holder in holders:
        try:
            fds += holder.lock_fds()
        except Exception:  # a holder that cannot say holds nothing we can drop
            continue
    blind(fds)
    for holder in holders:
        try:
            holder.forked()
        except Exception:  # the child goes on with the helper's work regardless
            continue


os.register_at_fork(after_in_child=_in_child)
