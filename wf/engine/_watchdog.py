"""Saying when one run's code blocks the event loop, and where.

Every run a worker drives shares its event loop. An async step that calls ``time.sleep``, a
blocking client or a long computation stops all of them (and, on Redis, stops the lease
keeper: past ``lease_ttl`` another worker may take the runs over). Nothing in the process can
take the loop back, but it can say which run holds it: a thread looks at the loop every
``INTERVAL`` seconds, and once the loop has not turned for ``THRESHOLD`` seconds it logs the
code it is in (the innermost frame of the loop's thread) and the step and run that code
belongs to, once per stall, and again when the loop turns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from types import FrameType

log = logging.getLogger("wf.worker")

THRESHOLD = 5.0
"""Seconds the loop may not turn before it is said to be blocked."""
INTERVAL = 0.5
"""Seconds between two looks (and between the loop's marks that it turns)."""

_STEP_WRAPPER = os.path.join("wf", "engine", "_step.py")
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LoopWatchdog:
    """A thread that says when ``loop`` stops turning (``start`` on the loop, ``stop`` after).

    The loop marks a time every ``INTERVAL``; the thread compares. Cost while the loop runs:
    one callback per ``INTERVAL`` on the loop, one wake-up of the thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._turned = time.monotonic()
        self._stalled_since: float | None = None
        self._done = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self._thread = threading.Thread(target=self._watch, name="wf-loop-watchdog", daemon=True)

    def start(self) -> None:
        """Begin watching (call on the loop's thread)."""
        self._mark()
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (on the loop's thread, which therefore turns again): the thread says
        so if it said the loop was blocked, and ends."""
        self._turned = time.monotonic()
        self._done.set()  # wakes the thread at once: the join is short
        self._thread.join(timeout=1.0)
        if self._handle is not None:
            self._handle.cancel()

    def _mark(self) -> None:
        self._turned = time.monotonic()
        self._handle = self._loop.call_later(INTERVAL, self._mark)

    def _watch(self) -> None:
        while not self._done.wait(INTERVAL):
            self._look()
        self._look()

    def _look(self) -> None:
        still = time.monotonic() - self._turned
        if still >= THRESHOLD and self._stalled_since is None:
            self._stalled_since = self._turned
            log.warning(
                "the event loop has not run for %.1fs: %s; every other run in this "
                "process waits (blocking code belongs in a sync step, `def`, which runs "
                "in a thread)%s",
                still,
                self._where(),
                _way_out(),
            )
        elif still < THRESHOLD and self._stalled_since is not None:
            log.warning(
                "the event loop runs again after %.1fs",
                self._turned - self._stalled_since,
            )
            self._stalled_since = None

    def _where(self) -> str:
        return blocking_code(self._loop_thread)


def blocking_code(thread: int) -> str:
    """Where the thread ``thread`` (an ident) is: the code it is in, and the step and run
    that code belongs to (``in path:line (name), step 'NAME' of run ID``)."""
    frame = sys._current_frames().get(thread)
    if frame is None:
        return "somewhere"
    code = _innermost_user_frame(frame)
    where = (
        f"in {code.f_code.co_filename}:{code.f_lineno} ({code.f_code.co_name})"
        if code is not None
        else "in wf or a library"
    )
    owner = _step_of(frame)
    return f"{where}, {owner}" if owner else where


def _way_out() -> str:
    # Only where wf's handler takes the signals (wf worker, serve, dev, run: its
    # ``StopSignals``, marked ``raises_nothing``): elsewhere a Ctrl-C does what the program it
    # runs in makes of it.
    import signal

    if getattr(signal.getsignal(signal.SIGINT), "raises_nothing", False) is not True:
        return ""
    return "; Ctrl-C (or SIGTERM) twice exits at once, and runs in flight resume"


def _innermost_user_frame(frame: FrameType) -> FrameType | None:
    """The innermost frame outside wf, asyncio and the standard library: the code to look
    at. None when the loop is inside those only."""
    found: FrameType | None = frame
    stdlib = os.path.dirname(os.__file__)
    while found is not None:
        name = os.path.abspath(found.f_code.co_filename)
        if not name.startswith((_HERE, stdlib)) and not name.startswith("<"):
            return found
        found = found.f_back
    return None


def _step_of(frame: FrameType) -> str:
    """``step 'NAME' of run ID`` from the step wrapper's frame on the stack, else the run of
    the workflow frame on it, else ''."""
    found: FrameType | None = frame
    while found is not None:
        if found.f_code.co_filename.endswith(_STEP_WRAPPER) and found.f_code.co_name == "_execute":
            local = found.f_locals
            ctx, step = local.get("ctx"), local.get("step_")
            run_id = getattr(ctx, "run_id", "?")
            return f"step {getattr(step, 'name', '?')!r} of run {run_id}"
        found = found.f_back
    return ""
