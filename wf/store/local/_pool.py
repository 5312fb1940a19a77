"""Run directories made ahead of need, by a background thread: creation takes one ready-made.

Allocating an inode is the costly part of creating a run on the disks this was measured on:
the run's directory and its journal are the two a creation still needs, at 20-60 µs each in a
good minute and 150-370 µs in a bad one (a link or a rename stays at 10-25 µs). A thread makes
empty staging directories, each with an empty ``journal.jsonl``, while the event loop does
other work (mostly waiting for flushes, which release the GIL), so a creation on the loop only
writes its journal and renames the directory into ``runs/``.

Nothing here is a promise: when the pool is empty (a burst of creations), or the thread has
stopped, creation makes its directory itself, as before. The pool grows when a creation finds it
empty (up to ``MAX``) so that repeated bursts find more ready. Ready directories are plain
staging leftovers if the process dies: ``pool.<pid>.*`` in ``tmp/``, which the staging sweep
removes once their process is gone. A directory that vanished meanwhile is simply skipped.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import threading

from wf.store.local._layout import JOURNAL_FILE

START = 4
"""Ready directories kept at first."""

MAX = 512
"""The most ever kept ready."""


class StagingPool:
    """Ready-made staging directories under one store's ``tmp/``."""

    def __init__(self, tmp_dir: str) -> None:
        self._dir = tmp_dir
        self._pid = os.getpid()
        self._ready: collections.deque[str] = collections.deque()
        self._want = START
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def take(self) -> str | None:
        """A ready staging directory holding an empty journal, or None (make one yourself)."""
        if self._stopped or os.getpid() != self._pid:
            return None  # closed, or a forked child: its parent's pool is not its own
        if self._thread is None:
            self._thread = threading.Thread(target=self._fill, name="wf-store-pool", daemon=True)
            self._thread.start()
        path: str | None = None
        while path is None:
            try:
                path = self._ready.popleft()
            except IndexError:
                self._want = min(MAX, self._want * 2)
                break
            if not os.path.isdir(path):
                path = None  # removed meanwhile (a sweep by a confused process): skip it
        if len(self._ready) < self._want:
            self._wake.set()
        return path

    def close(self) -> None:
        """Stop the thread and remove the directories nobody took."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        while self._ready:
            shutil.rmtree(self._ready.popleft(), ignore_errors=True)

    def _fill(self) -> None:
        # Plain system calls, not ``_fsops``: nothing waits on this thread's errors, and the
        # faults tests inject are meant for the operations a caller makes.
        prefix = os.path.join(self._dir, f"pool.{self._pid}.")
        while not self._stopped:
            while len(self._ready) < self._want and not self._stopped:
                path = prefix + os.urandom(6).hex()
                try:
                    os.mkdir(path)
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                    os.close(os.open(os.path.join(path, JOURNAL_FILE), flags, 0o644))
                except OSError:
                    # A full or read-only disk, a removed store: creations make their own.
                    with contextlib.suppress(OSError):
                        shutil.rmtree(path, ignore_errors=True)
                    self._stopped = True
                    return
                self._ready.append(path)
            self._wake.wait()
            self._wake.clear()


def is_live_pool(name: str) -> bool:
    """Whether ``tmp/<name>`` is a ready directory of a process that is still running."""
    if not name.startswith("pool."):
        return False
    pid = name.split(".")[1]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is someone else's
    return True
