"""How a process that drives runs on its event loop takes SIGTERM and SIGINT (Ctrl-C).

The first signal asks for the graceful stop (drain): that is the loop's work, so it waits for
the loop to come round. A second one exits at once, whatever the loop is doing: code that
blocks it (``while True: pass``, ``time.sleep`` in an async step, a module that never finishes
importing) must not leave ``kill -9`` as the only way out. Exiting at once is safe: everything
recorded is durable, and a run in flight resumes from its journal as after a crash.

asyncio's own handlers (``loop.add_signal_handler``) run only when the loop turns, so they are
not used for these signals. A Python handler (``signal.signal``) runs on the main thread between
two bytecodes, also inside blocking code, and interrupts ``time.sleep``; it raises nothing, so
no code in a run ever sees an operator's Ctrl-C as a ``KeyboardInterrupt``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType

_handler_of: Callable[[int], object] = getattr(
    importlib.import_module("_signal"), "getsignal", signal.getsignal
)
"""A signal's handler as set: ``signal.getsignal`` without its look for a ``Handlers`` member,
which for a Python handler is an enum lookup that fails (a ``ValueError`` made and caught,
about 5 µs: twice per step attempt in a worker)."""

EXIT_INTERRUPTED = 130
"""The exit code of a second signal (``wf.cli``'s for an interrupted command)."""
BLOCKED_AFTER = 1.0
"""Seconds the loop may leave a first signal unanswered before it is said to be blocked."""


def signal_name(sig: signal.Signals) -> str:
    """``Ctrl-C`` for SIGINT, the signal's name otherwise."""
    return "Ctrl-C" if sig == signal.SIGINT else sig.name


class StopSignals:
    """SIGTERM / SIGINT for the running event loop's command (a context manager, entered on
    the loop, in the main thread; elsewhere it does nothing, as signals reach the main thread
    only).

    The first signal calls ``stop(sig)`` on the loop. If the loop has not run it after
    ``BLOCKED_AFTER`` seconds, ``say`` is given a line naming the code that blocks the loop
    and the way out. A second signal (of any of ``signals``) calls ``before_exit``, gives
    ``say`` its line and ends the process with ``code``: ``say`` then runs in a signal
    handler, and an error of its own is ignored.
    """

    raises_nothing = True
    """Marks the handler for ``wf.engine._errors.sigint_may_raise``: a ``KeyboardInterrupt``
    raised while it is in force is the code's, never a signal's."""

    def __init__(
        self,
        stop: Callable[[signal.Signals], None],
        *,
        say: Callable[[str], None],
        signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
        before_exit: Callable[[], None] | None = None,
        code: int = EXIT_INTERRUPTED,
    ) -> None:
        self._stop = stop
        self._say = say
        self._signals = tuple(signals)
        self._before_exit = before_exit
        self._code = code
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._previous: dict[signal.Signals, object] = {}
        self._received = 0
        self._first: signal.Signals | None = None
        self._asked = threading.Event()  # set by the first signal (or at the end)
        self._answered = threading.Event()  # set once the loop ran ``stop``
        self._ended = False
        self._thread: threading.Thread | None = None
        self._unwatch: Callable[[], None] | None = None
        self._taken_by: set[str] = set()

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        for sig in self._signals:
            try:
                self._previous[sig] = signal.signal(sig, self)
            except (ValueError, OSError):  # not a signal this platform lets Python handle
                continue
        if self._previous:
            self._thread = threading.Thread(target=self._watch, name="wf-stop-signals", daemon=True)
            self._thread.start()
            from wf.engine import _signals

            self._unwatch = _signals.watch(self._reclaim)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        # The handlers go first: once they are gone no signal handler of ours can be waiting
        # for the locks the events below take.
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous.clear()
        self._ended = True
        self._asked.set()
        self._answered.set()

    def asked(self) -> bool:
        """Whether a first signal came (said to code that blocks the loop for a bounded
        while, which the loop's own ``stop`` cannot reach until it returns)."""
        return self._first is not None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        """The Python signal handler (the main thread, between two bytecodes)."""
        sig = signal.Signals(signum)
        self._received += 1
        if self._received == 1:
            self._first = sig
            # Nothing may be raised here: it would surface in whatever code was interrupted
            # (a RuntimeError: the loop closed, the command is ending anyway).
            with contextlib.suppress(Exception):
                if self._loop is not None:
                    self._loop.call_soon_threadsafe(self._on_loop, sig)
            self._asked.set()
            return
        self._exit(sig)

    def _reclaim(self, step: str) -> None:
        """After an attempt of ``step``: put these handlers back if the step replaced them (a
        library installing its own on first use), so the process still stops; said once per
        step. Two looks at a handler when nothing changed. Only the loop's thread (the
        main one) can have changed them, or set them back."""
        if self._ended or threading.get_ident() != self._loop_thread:
            return
        taken = []
        for sig in self._previous:
            if _handler_of(sig) is self:
                continue
            try:
                signal.signal(sig, self)
            except (ValueError, OSError):
                continue
            taken.append(sig.name)
        if taken and step not in self._taken_by:
            self._taken_by.add(step)
            with contextlib.suppress(Exception):
                self._say(
                    f"step {step!r} replaced wf's {' and '.join(taken)} handler"
                    f"{'s' if len(taken) > 1 else ''} (a library installing its own?): "
                    "wf's are back, so the process still stops on them"
                )

    def _on_loop(self, sig: signal.Signals) -> None:
        self._answered.set()
        self._stop(sig)

    def _exit(self, sig: signal.Signals) -> None:
        with contextlib.suppress(Exception):
            if self._before_exit is not None:
                self._before_exit()
        with contextlib.suppress(Exception):
            self._say(f"{sig.name} again: exiting now (runs in flight resume from their journals)")
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(self._code)

    def _watch(self) -> None:
        """Say when the loop does not come round to the first signal: the way out is a second."""
        self._asked.wait()
        if self._answered.wait(BLOCKED_AFTER) or self._ended or self._first is None:
            return
        from wf.engine._watchdog import blocking_code

        with contextlib.suppress(Exception):
            self._say(
                f"{self._first.name}: the event loop is blocked "
                f"{blocking_code(self._loop_thread)}, so nothing can stop gracefully; "
                f"{signal_name(self._first)} again exits at once (runs in flight resume from "
                "their journals)"
            )
