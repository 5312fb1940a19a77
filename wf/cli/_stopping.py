"""How the commands that drive runs (``wf worker``, ``wf serve``) stop: the ``--grace`` they give
running steps on SIGTERM, and leaving at once when a stopped worker left something running."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from wf import Worker

T = TypeVar("T")


def finite_seconds(value: float | None) -> float | None:
    """A seconds option's value, refused when it is NaN or infinite (Click's range lets them
    through: a drain would wait on a NaN timeout)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value!r} is not a finite number of seconds")
    return value


GraceOption = Annotated[
    float,
    typer.Option(
        "--grace",
        min=0.0,
        callback=finite_seconds,
        metavar="SECONDS",
        help="On SIGTERM, let running steps finish for this long; then they are abandoned "
        "(they run again when their run resumes) and the worker says which.",
    ),
]


def leave_if_stuck(worker: Worker, code: int) -> None:
    """Exit now with ``code`` if the stopped worker left something running that would keep the
    process from ending: a sync step's thread, which cannot be stopped and which the
    interpreter would wait for at exit, or a task that ignores its cancellation, which closing
    the event loop would wait for. The abandoned steps run again when their runs resume."""
    if worker.threads_abandoned or worker.left_running:
        sys.stderr.flush()
        os._exit(code)


def lingering_threads() -> list[threading.Thread]:
    """The threads started by code in runs that would keep the process from exiting: alive,
    not daemons, not the main thread (the interpreter joins them at exit), and not wf's own
    (``wf-``: the step threads, idle once the worker stopped, end at exit; a step still
    running in one is ``leave_if_stuck``'s)."""
    main = threading.main_thread()
    return [
        t
        for t in threading.enumerate()
        if t is not main and not t.daemon and t.is_alive() and not t.name.startswith("wf-")
    ]


def leave_despite_threads(code: int, grace: float, say: Callable[[str], None]) -> None:
    """After a stopped worker's event loop closed: if threads started by code in its runs (a
    library's non-daemon pool) are still alive, say so in one line naming them, give them up
    to ``grace`` seconds to end, and exit with ``code`` without them (the interpreter would
    wait for them forever). A SIGTERM or Ctrl-C meanwhile exits at once with 130. Returns at
    once when no such thread is alive."""
    left = lingering_threads()
    if not left:
        return
    names = ", ".join(repr(t.name) for t in left[:5]) + (", …" if len(left) > 5 else "")
    say(
        f"{len(left)} thread(s) started by code in runs still run: {names}; the process exits "
        f"once they end, or in {grace:g} s without them (SIGTERM or Ctrl-C exits now)"
    )

    def interrupted(_signum: int, _frame: object) -> None:
        _flush()
        os._exit(130)

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, interrupted)
    deadline = time.monotonic() + grace
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in left):
        _flush()
        os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def run_contained(main: Coroutine[Any, Any, T], say: Callable[[str], None]) -> T:
    """``asyncio.run(main)`` for a command that drives runs, which code in a run cannot end.

    asyncio lets a ``SystemExit`` or a ``KeyboardInterrupt`` out of its event loop, whatever
    raised it: code in a run that raises one outside its steps (``loop.call_soon(sys.exit,
    4)``, a task a step started and left running) stopped the loop and the command with it,
    silently with the code's exit status, or as if interrupted by Ctrl-C. Such an exception,
    raised by a callback of the loop that runs in a run's context, is said (``say``: what,
    which run and step, not a signal) and the loop runs on where it stopped: the callbacks
    after it are still queued. It costs nothing per task: only the loop's exit is watched.

    Any other ends the command as before, but a ``SystemExit`` or ``KeyboardInterrupt`` while
    a handler of wf's takes SIGINT is no signal either (a Ctrl-C raises nothing then): it is
    said, runs in flight resume from their journals, and the command exits 1."""
    with asyncio.Runner() as runner:
        task = runner.get_loop().create_task(main)
        while True:
            try:
                return runner.run(_awaited(task))
            except (SystemExit, KeyboardInterrupt) as exc:
                from wf.engine._errors import sigint_may_raise

                if task.done() or (isinstance(exc, KeyboardInterrupt) and sigint_may_raise()):
                    raise  # the command's own end, or a real Ctrl-C (wf's handlers raise none)
                whose = _raised_in_a_run(exc)
                if whose is not None:
                    _retrieved(exc)
                    say(
                        f"{_named(exc)} raised by code {whose}, left to the event loop outside "
                        "its steps (not a signal): ignored, the worker goes on"
                    )
                    continue
                say(
                    f"{_named(exc)} raised by code on the event loop (not a signal) ended the "
                    "process; runs in flight resume from their journals"
                )
                raise SystemExit(1) from None


async def _awaited(task: asyncio.Task[T]) -> T:
    return await task


def _named(exc: BaseException) -> str:
    """``SystemExit(4)``, ``KeyboardInterrupt``."""
    return (
        f"{type(exc).__name__}({', '.join(map(repr, exc.args))})"
        if exc.args
        else (type(exc).__name__)
    )


def _raised_in_a_run(exc: BaseException) -> str | None:
    """``in run ID (step 'NAME')``, when the loop's callback that raised ``exc`` ran in a
    run's context (its traceback holds the callback's handle, which holds the context)."""
    from wf.engine._context import _current_run, _current_step

    for handle in _handles(exc):
        context = getattr(handle, "_context", None)
        if context is None:
            continue
        run = context.get(_current_run)
        if run is None:
            continue
        step = context.get(_current_step)
        return f"in run {run.run_id}" + (f" (step {step.name!r})" if step is not None else "")
    return None


def _retrieved(exc: BaseException) -> None:
    """Mark the exception of the task that raised ``exc`` (if a task did) as retrieved: it
    is said already, asyncio would also print it with a traceback when the task goes."""
    for handle in _handles(exc):
        task = getattr(getattr(handle, "_callback", None), "__self__", None)
        if isinstance(task, asyncio.Future) and task.done() and not task.cancelled():
            task.exception()


def _handles(exc: BaseException) -> list[asyncio.Handle]:
    """The loop's callbacks in the traceback of ``exc``, innermost last."""
    found = []
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        tb = tb.tb_next
        if frame.f_code is _HANDLE_RUN:
            handle = frame.f_locals.get("self")
            if isinstance(handle, asyncio.Handle):
                found.append(handle)
    return found


_HANDLE_RUN = asyncio.Handle._run.__code__
"""The frame of a loop's callback (a task's step among them): it holds the handle."""
