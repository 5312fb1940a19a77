"""The engines front ends drive runs with, built from the configuration in one place.

A command (``wf run``, ``wf cancel``: through ``wf.admin.local``; the terminal UI), a worker
and a server (``driving``) each drive runs on the configured store with the same settings:
the store-wide concurrency cap, the recoveries allowed in a row, this process's deployment. A
worker and a server also apply the store-wide retention and say when each drive of a run
ends. Front ends get their engine here and never build one themselves::

    async with driving(on_drive_end=log_line) as engine:   # wf worker, wf serve
        await wf.Worker(engine).run()

``wf worker`` runs its event loop with ``run_contained``, which code in a run cannot end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.engine._instruments import Instrument
    from wf.store import RunRecord, Store


def require_otel() -> None:
    """Raise ``wf.UsageError`` (a command exits 2) when ``WF_OTEL`` / ``WF_OTEL_METRICS`` ask for
    OpenTelemetry and it is not installed: a server or ``wf dev`` checks before it drives or
    starts anything (``wf.engine._engine.require_otel``)."""
    from wf.engine._engine import require_otel as check

    check()


def configured_engine(
    store: Store,
    *,
    on_crossing: Callable[[RunRecord], None] | None = None,
    on_drive_end: Callable[[RunRecord, float], None] | None = None,
    retention: bool = False,
) -> Engine:
    """An engine on ``store`` with the configured settings (``wf._config``).

    ``on_crossing``: told of each run it drives that is pinned to another deployment.
    ``on_drive_end``: told each time one of its drives of a run ends, with the run's record
    and the seconds that drive took (an error ending a drive is the worker's to report).
    ``retention``: apply the store-wide retention (``[tool.wf] retention``, ``WF_RETENTION``).
    """
    from wf._config import retention_setting
    from wf.engine._engine import Engine

    engine = Engine(
        store,
        retention=retention_setting() if retention else None,
        instruments=[] if on_drive_end is None else [_drive_reporter(on_drive_end)],
        **engine_settings(),
    )
    if on_crossing is not None:
        engine.on_crossing(on_crossing)
    return engine


class EngineSettings(TypedDict):
    """``Engine``'s arguments that the configuration sets (``engine_settings``)."""

    concurrency: int | None
    max_recoveries: int
    deployment: str | None
    step_threads: int | None


def engine_settings() -> EngineSettings:
    """The configured settings every engine here is built with (``configured_engine``); a
    malformed one raises ``UsageError``. Read without importing the engine: a command that
    only reads the store (``wf.admin._client.reading``) checks them as one that drives does."""
    from wf._config import (
        deployment_setting,
        find_project,
        max_recoveries_setting,
        step_threads_setting,
        store_wide_concurrency,
    )

    project = find_project()  # once, not once a setting
    return EngineSettings(
        concurrency=store_wide_concurrency(project),
        max_recoveries=max_recoveries_setting(project),
        deployment=deployment_setting(project),
        step_threads=step_threads_setting(project),
    )


@contextlib.asynccontextmanager
async def driving(on_drive_end: Callable[[RunRecord, float], None]) -> AsyncIterator[Engine]:
    """The engine of a process that drives runs (``wf worker``, ``wf serve``): on the
    configured store, applying the store-wide retention, telling ``on_drive_end`` of each drive
    that ends, current within the block. The store is closed on leaving."""
    from wf._config import default_store

    store = default_store()
    try:
        with current(configured_engine(store, on_drive_end=on_drive_end, retention=True)) as eng:
            yield eng
    finally:
        await store.close()


@contextlib.contextmanager
def current(engine: Engine) -> Iterator[Engine]:
    """Make ``engine`` the one ``wf.start`` and the other module-level calls use within the
    block (and in the tasks it starts)."""
    from wf.engine._current import use_engine

    with use_engine(engine):
        yield engine


def _drive_reporter(report: Callable[[RunRecord, float], None]) -> Instrument:
    """An instrument calling ``report(record, seconds)`` when a drive of a run ends."""
    from wf.engine._instruments import DriveObserver, Instrument

    class Drive(DriveObserver):
        def __init__(self) -> None:
            self.began = time.monotonic()

        def on_end(self, record: RunRecord | None, error: BaseException | None) -> None:
            if record is not None:  # an error is reported by the worker's on_error
                report(record, time.monotonic() - self.began)

    class Reporter(Instrument):
        def on_drive(self, record: RunRecord, resuming: bool) -> DriveObserver:
            return Drive()

    return Reporter()


T = TypeVar("T")


def run_contained(
    main: Coroutine[Any, Any, T], say: Callable[[str], None], *, who: str = "the worker"
) -> T:
    """``asyncio.run(main)`` for a command that drives runs, which code in a run cannot end.

    asyncio lets a ``SystemExit`` or a ``KeyboardInterrupt`` out of its event loop, whatever
    raised it: code in a run that raises one outside its steps (``loop.call_soon(sys.exit,
    4)``, a task a step started and left running) stopped the loop and the command with it,
    silently with the code's exit status, or as if interrupted by Ctrl-C. Such an exception,
    raised by a callback of the loop that runs in a run's context, is said (``say``: what,
    which run and step, not a signal, and that ``who`` goes on) and the loop runs on where it
    stopped: the callbacks after it are still queued. It costs nothing per task: only the
    loop's exit is watched.

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
                        f"its steps (not a signal): ignored, {who} goes on"
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
