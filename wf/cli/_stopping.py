"""How the commands that drive runs (``wf worker``, ``wf serve``) stop: the ``--grace`` they give
running steps on SIGTERM, and leaving at once when a stopped worker left something running."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from wf import Worker


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


def ended_despite_threads(
    run: Callable[[], int | None], grace: float, say: Callable[[str], None]
) -> int:
    """``run()`` (a command's event loop), then ``leave_despite_threads`` with the exit code it
    ended with, however it ended: returned, or an exception (code in a run that ended the
    loop, the store given up after an outage, an internal error), which is reported first in
    its one line, as ``guarded`` would (an exit in ``leave_despite_threads`` would lose it).
    Threads a step left must not keep the process from exiting on an error either."""
    from wf.cli._errors import EXIT_INTERRUPTED, report

    try:
        code = run() or 0
    except typer.Exit as exc:
        code = exc.exit_code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    except Exception as exc:
        code = report(exc)
    leave_despite_threads(code, grace, say)
    return code


def leave_despite_threads(code: int, grace: float, say: Callable[[str], None]) -> None:
    """After a stopped worker's event loop closed: if threads started by code in its runs (a
    library's non-daemon pool) are still alive, say so in one line naming them, give them up
    to ``grace`` seconds to end, and exit with ``code`` without them (the interpreter would
    wait for them forever). A SIGTERM or Ctrl-C meanwhile exits at once with 130. Returns at
    once when no such thread is alive, or when the process is not the ``wf`` command's own
    (a program that runs the command in itself owns its threads and its exit)."""
    from wf.cli import owns_interpreter

    if not owns_interpreter() or threading.current_thread() is not threading.main_thread():
        return
    _end_idle_pools()
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


_IDLE_POOL_WAIT = 0.2
"""Seconds the workers of thread pools are given to end once woken (an idle one ends at once)."""


def _end_idle_pools() -> None:
    """End the idle workers of every ``ThreadPoolExecutor`` (a library's module-level pool: its
    non-daemon workers wait for more work), as the interpreter's exit would, but without
    waiting for a busy one: ``concurrent.futures``' own exit hook, which the interpreter runs
    only after the threads it joins, so too late for ``leave_despite_threads``. A busy worker
    runs on (what was queued, then it ends) and is counted, named and left after the grace.
    No pool takes new work after this: the process is exiting. AnyIO's workers, told to stop
    as the loop ended, are given the same moment (``_stopped_anyio_workers``)."""
    ending = _stopped_anyio_workers()
    pools = sys.modules.get("concurrent.futures.thread")
    workers = getattr(pools, "_threads_queues", None)
    lock = getattr(pools, "_global_shutdown_lock", None)
    if workers is not None and lock is not None:
        with lock:
            pools._shutdown = True  # type: ignore[union-attr]
        items = list(workers.items())
        for thread, queue in items:
            queue.put(None)  # a worker that takes it ends (and passes it on to the next)
            ending.append(thread)
    deadline = time.monotonic() + _IDLE_POOL_WAIT
    for thread in ending:
        thread.join(max(0.0, deadline - time.monotonic()))


def _stopped_anyio_workers() -> list[threading.Thread]:
    """AnyIO's worker threads told to stop when the event loop's main task ended (``wf dev``'s
    file watcher, watchfiles, waits for the file system in one; a library may run blocking
    calls in them): an idle one ends at once, the watcher's within its step, once the stop it
    was given is seen. One still busy after the wait runs code it was handed (an abandoned
    blocking call of a run) and is counted."""
    if "anyio" not in sys.modules:
        return []
    return [
        t
        for t in threading.enumerate()
        if type(t).__module__.startswith("anyio.") and getattr(t, "stopping", False) is True
    ]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
