"""What a process says and does while it upgrades a store's format (``_format.migrate``).

An upgrade reads every run, so a big store takes a while, and every other process opening
the store waits on ``migrate.lock`` meanwhile. So the upgrade says one line when it starts
(from and to which format, how many runs) and, when it runs long, how far it got every few
seconds; a process that finds another one upgrading says that it waits for it.

SIGTERM and Ctrl-C during an upgrade stop it between two items (``tick``) rather than waiting
for the event loop, which the upgrade blocks: every step is idempotent and the format file is
written last, so the next process to open the store simply does the upgrade again (as after a
``kill -9``). A process waiting for another's upgrade stops at once. A signal that comes after
the last item is the process's again: sent to it once more, unless its event loop (which takes
it whatever the handler in force) already has it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

from wf._exceptions import UpgradeInterrupted

log = logging.getLogger("wf.store")

PROGRESS_EVERY = 5.0
"""Seconds between two progress lines of a long upgrade."""

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Upgrade:
    """One upgrade in progress: counts the items done, says how far it got, and takes the
    stop signals (on the main thread only: elsewhere Python delivers none)."""

    def __init__(self, root: str, found: int, target: int, runs: int) -> None:
        self.root = root
        self.found = found
        self.target = target
        self.runs = runs
        self.step = found
        self.done = 0
        self.started = time.monotonic()
        self._said = self.started
        self._spoke = False
        self.stopped_by: signal.Signals | None = None
        self.waiting = False
        """While True a stop signal raises at once (nothing is half done while waiting)."""

    def handler(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: remember the signal; raise only while waiting for a lock."""
        self.stopped_by = signal.Signals(signum)
        if self.waiting:
            raise self.interrupted()

    def interrupted(self) -> UpgradeInterrupted:
        sig = self.stopped_by
        name = "Ctrl-C" if sig == signal.SIGINT else sig.name if sig is not None else "stopped"
        if self.waiting:
            return UpgradeInterrupted(
                f"{name}: stopped waiting to open {self.root} (see the line above); nothing "
                "was changed"
            )
        return UpgradeInterrupted(
            f"{name}: the upgrade of {self.root} from format {self.found} to {self.target} "
            f"stopped at format {self.step} ({self.done:,} items done); nothing is lost, and "
            "the next wf command that opens the store does the upgrade again"
        )

    def tick(self, items: int = 1) -> None:
        """``items`` more done: stop here if a signal asked to, say how far it got if due."""
        if self.stopped_by is not None:
            raise self.interrupted()
        self.done += items
        now = time.monotonic()
        if now - self._said >= PROGRESS_EVERY:
            self._said = now
            self._spoke = True
            log.warning(
                "upgrading %s to format %d: at format %d, %s items done (of a store of %s "
                "runs; %.0f s so far)",
                self.root, self.target, self.step, f"{self.done:,}", f"{self.runs:,}",
                now - self.started,
            )  # fmt: skip

    def begin_step(self, step: int) -> None:
        """The upgrade to format ``step`` starts (its items are counted from zero)."""
        self.step = step
        self.done = 0
        self.tick(0)

    def finished(self) -> None:
        if self._spoke:
            log.warning(
                "upgraded %s to format %d in %.0f s",
                self.root, self.target, time.monotonic() - self.started,
            )  # fmt: skip


_current = threading.local()


def tick(items: int = 1) -> None:
    """Count ``items`` done by the upgrade this thread runs (nothing outside one)."""
    upgrade: Upgrade | None = getattr(_current, "upgrade", None)
    if upgrade is not None:
        upgrade.tick(items)


@contextlib.contextmanager
def running(upgrade: Upgrade) -> Iterator[Upgrade]:
    """Make ``upgrade`` this thread's (``tick``) and, on the main thread, take SIGTERM and
    SIGINT for its duration (the handlers in force before are put back after)."""
    previous: dict[signal.Signals, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                previous[sig] = signal.signal(sig, upgrade.handler)
    _current.upgrade = upgrade
    try:
        yield upgrade
    finally:
        _current.upgrade = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
    stop = upgrade.stopped_by
    if stop is not None and stop in previous and not _loop_heard(previous[stop]):
        # It came after the last item: the upgrade is done, and the signal is the process's
        # own business again (a worker drains).
        signal.raise_signal(stop)


def _loop_heard(handler: object) -> bool:
    """Whether ``handler`` is asyncio's stand-in for a signal an event loop handles
    (``loop.add_signal_handler``). Such a signal already reached the loop: the C-level handler
    writes every signal to the loop's wakeup fd, whichever Python handler is in force, so the
    loop calls its handler once it runs again; sent again, the loop would hear it twice (a
    worker's second SIGTERM stops it at once instead of draining)."""
    unix = sys.modules.get("asyncio.unix_events")
    noop = getattr(unix, "_sighandler_noop", None)
    return noop is not None and handler is noop
