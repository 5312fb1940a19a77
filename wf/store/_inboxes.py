"""The callbacks of ``Store.watch_inbox``, by run id: what a store calls when it hears of a post.

A store hears of posts on whatever thread its notifications arrive (the local store's watcher
thread, a listener task): each callback is handed to the event loop it was registered on, so
its owner never runs on a foreign thread, nor inside the store's own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable

_Entry = tuple[asyncio.AbstractEventLoop, Callable[[], None]]


def unwatched() -> None:
    """What ``Store.watch_inbox`` returns when nothing was watched."""


class InboxWatchers:
    """Callbacks watching runs' inboxes. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._by_run: dict[str, dict[int, _Entry]] = {}
        self.news = 0
        """Moves (by one or more) whenever a post may have come, watched or not: a reader that
        took it before a look finds by comparing whether the look may be stale."""

    def add(
        self,
        run_id: str,
        callback: Callable[[], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> Callable[[], None]:
        """Watch ``run_id`` from the running loop (``loop``, if the caller has it: looking it
        up asks the process id, a system call); returns the function that stops it."""
        entry = (loop or asyncio.get_running_loop(), callback)
        key = next(self._ids)
        with self._lock:
            self._by_run.setdefault(run_id, {})[key] = entry

        def remove() -> None:
            with self._lock:
                found = self._by_run.get(run_id)
                if found is not None:
                    found.pop(key, None)
                    if not found:
                        del self._by_run[run_id]

        return remove

    def __bool__(self) -> bool:
        return bool(self._by_run)

    def heard(self, run_ids: str | list[str] | set[str]) -> None:
        """A message may have been posted to these runs' inboxes: call their watchers."""
        self.news += 1
        if not self._by_run:
            return
        ids = (run_ids,) if isinstance(run_ids, str) else run_ids
        with self._lock:
            entries = [e for run_id in ids for e in self._by_run.get(run_id, {}).values()]
        _call(entries)

    def heard_all(self) -> None:
        """Posts may have gone unheard (a notifier replaced, a connection lost): call all."""
        self.news += 1
        if not self._by_run:
            return
        with self._lock:
            entries = [e for found in self._by_run.values() for e in found.values()]
        _call(entries)


def _call(entries: list[_Entry]) -> None:
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for loop, callback in entries:
        if loop is running:
            loop.call_soon(callback)
        elif not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(callback)
