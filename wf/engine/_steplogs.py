"""Step logs: what a step writes to stdout/stderr and through ``logging``, per step attempt.

Capture is per *context*, not per process: while a step attempt runs, a context variable names
its ``Capture``, and ``sys.stdout``/``sys.stderr`` are wrapped (once, process-wide) by a ``_Tee``
that hands what is written to the capture of the context writing it, and always passes it on to
the stream it wraps. So concurrent steps never mix their output, a sync step's thread (which
runs in a copy of the step's context) is captured like an async step, and code outside any step
writes to the terminal exactly as before. The log record factory captures the records made in a
step (those its logger's level lets through), and gives them the step's ids as attributes.
wf's own records (loggers ``wf`` and ``wf.*``: a store that failed, a notification that did
not go out) are never a step's output, wherever they are logged: capturing them would tell the
user's step what wf thinks, and a failing store would log that its logs were not stored, into
the logs it cannot store, without end. The writer that stores the entries runs outside the
step's context for the same reason.

Entries are JSON objects (``LogEntry``): ``ts``, ``op``, ``step``, ``attempt``, ``resumes``
(the run's resume count when the attempt ran: an attempt re-run after a crash), ``stream``
(``stdout``, ``stderr``, ``log``), ``text`` (one line, or one log record), and for log records
``level`` and ``logger``; ``trace_id``/``span_id`` when the step runs in a trace. They are
written through the run's lease (``Lease.append_logs``) soon after they are written, not only
when the attempt ends, so a crash mid-step keeps what the step printed before it, and
``wf logs --follow`` shows it live. Logs are not the truth of a run: they are best effort, not
fsynced, and a store error while writing them is logged and never fails the step.

Each attempt keeps at most ``limit`` characters; past that, the rest is counted and replaced by
one note saying how much was dropped.

A thread a step starts itself (``threading.Thread``, started while the attempt runs, from its
task or from its own thread) runs in a copy of the step's context, as a sync step's own thread
does: what it writes is captured with the step's output (and ``wf.step_id()``, the step's
span... work there too). Python's threads do not inherit a context by themselves (before 3.14),
so capture wraps ``Thread.start`` once, process-wide, and the wrapper does nothing for a thread
started outside a step. Thread *pools* are the exception: a pool's worker thread
(``concurrent.futures.ThreadPoolExecutor``, asyncio's default executor, ``multiprocessing.dummy``)
outlives the step that happened to start it and serves others, so it keeps a context of its own;
work submitted to a pool is captured when submitted as ``contextvars.copy_context().run(fn,
...)`` (``asyncio.to_thread`` does that already). A thread a step started that outlives the
attempt (a library's background thread started lazily there) is captured only until the attempt
ends; what it writes then reaches the terminal only. (A sync step's own thread, abandoned by a
cancelled attempt, is still captured, best effort: it is the step's code.)
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from wf.engine._context import _current_run
from wf.engine._futures import in_run

if TYPE_CHECKING:
    from wf.engine._context import RunContext, StepContext

LogEntry = dict[str, Any]
"""One captured line or log record (see the module docstring)."""

DEFAULT_LIMIT = 64 * 1024
"""Characters kept per step attempt (``WF_STEP_LOG_LIMIT``; 0 turns capture off)."""

log = logging.getLogger("wf.steplogs")

_capture: contextvars.ContextVar[Capture | None] = contextvars.ContextVar(
    "wf_step_capture", default=None
)

_inherited: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "wf_step_capture_inherited", default=False
)
"""True in the context of a thread a step started (``_start_thread``)."""

_STREAM_EMIT = logging.StreamHandler.emit.__code__


class Capture:
    """What one step attempt wrote, on its way to the store."""

    __slots__ = (
        "_base",
        "_ctx",
        "_dropped",
        "_limit",
        "_lock",
        "_loop_thread",
        "_partial",
        "_pending",
        "_resumes",
        "_scheduled",
        "_size",
        "_step",
        "_trace",
        "_writer",
        "ended",
        "used",
    )

    def __init__(self, ctx: RunContext, step: StepContext, limit: int) -> None:
        self._ctx = ctx
        self._step = step
        self._resumes = ctx.record.resumes  # tells an attempt re-run after a crash apart
        self._trace = _trace_ids()  # the span current as the attempt begins
        self._limit = limit
        self._lock = threading.Lock()
        self._loop_thread = threading.get_ident()
        self.used = False
        """Whether the attempt wrote anything (most write nothing: their end costs nothing, and
        what a write needs is made at the first, ``_first_write``)."""
        self.ended = False
        """The attempt ended: threads it started are no longer captured."""

    def _first_write(self) -> None:
        """Make what writing needs (under ``_lock``, at the attempt's first write)."""
        step = self._step
        self._base: LogEntry = {
            "op": step.op,
            "step": step.name,
            "attempt": step.attempt,
            "resumes": self._resumes,
        }
        if self._trace is not None:
            self._base["trace_id"], self._base["span_id"] = self._trace
        self._size = 0
        self._dropped = 0
        self._partial: dict[str, str] = {}
        self._pending: list[LogEntry] = []
        self._scheduled = False
        self._writer: asyncio.Task[None] | None = None
        self.used = True

    # -- from any thread ---------------------------------------------------------------------

    def write(self, stream: str, text: str) -> None:
        """Text written to ``stream``; complete lines become entries."""
        with self._lock:
            if not self.used:
                self._first_write()
            buffered = self._partial.get(stream, "") + text
            lines = buffered.split("\n")
            self._partial[stream] = lines.pop()
            for line in lines:
                self._add({"stream": stream, "text": line})

    def record(self, record: logging.LogRecord, text: str) -> None:
        """A log record emitted in the step."""
        with self._lock:
            if not self.used:
                self._first_write()
            self._add(
                {"stream": "log", "text": text, "level": record.levelname, "logger": record.name}
            )

    def _add(self, fields: LogEntry) -> None:
        text = _storable(fields["text"])
        room = self._limit - self._size
        if room <= 0:
            self._dropped += len(text) + 1
            return
        if len(text) > room:
            self._dropped += len(text) - room
            text = text[:room]
        self._size += len(text) + 1
        self._pending.append({"ts": time.time(), **self._base, **fields, "text": text})
        if not self._scheduled:
            self._scheduled = True
            try:
                if threading.get_ident() == self._loop_thread:
                    self._ctx.loop.call_soon(self._kick)
                else:
                    self._ctx.loop.call_soon_threadsafe(self._kick)
            except RuntimeError:
                pass  # the loop is closed (a thread outlived its run): a print must not fail

    # -- on the loop -------------------------------------------------------------------------

    def _kick(self) -> None:
        if self._writer is None or self._writer.done():
            # Not in the step's context (where ``_kick`` is called): what the writer logs
            # (its store failing) is wf's, not the step's output.
            context = contextvars.copy_context()
            context.run(_capture.set, None)
            context.run(_current_run.set, None)
            context.run(in_run.set, False)
            self._writer = self._ctx.loop.create_task(self._flush(), context=context)

    async def _flush(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                self._scheduled = False
            if not batch:
                return
            try:
                await self._ctx.lease.append_logs(batch)
            except Exception as exc:  # best effort: never the step's failure
                log.warning("run %s: step output not stored: %r", self._ctx.run_id, exc)

    async def close(self) -> None:
        """The attempt ended: store what is left, with a note if anything was dropped."""
        if not self.used:
            return
        self.close_soon()
        if self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    def close_soon(self) -> None:
        """The attempt ended: store what is left soon (without waiting for it)."""
        if not self.used:
            return
        with self._lock:
            for stream, rest in self._partial.items():
                if rest:
                    self._add({"stream": stream, "text": rest})
            self._partial.clear()
            if self._dropped:
                note = (
                    f"[wf: output truncated: this attempt wrote more than {self._limit} "
                    f"characters; {self._dropped} more were dropped]"
                )
                self._size = 0  # the note always fits
                self._add({"stream": "wf", "text": note})
                self._dropped = 0
            scheduled = self._scheduled
        if scheduled:
            self._kick()


def _storable(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (a valid wf value a step may print) becomes its
    ``\\ud800`` escape, where no store takes it as it is (the whole batch would be lost)."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _trace_ids() -> tuple[str, str] | None:
    """Hex trace and span ids of the current span, when OpenTelemetry is in use."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    context = api.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def begin(ctx: RunContext, step: StepContext, limit: int) -> tuple[Capture, contextvars.Token[Any]]:
    """Start capturing in the current context (the step attempt's)."""
    _install()
    capture = Capture(ctx, step, limit)
    return capture, _capture.set(capture)


def end(capture: Capture, token: contextvars.Token[Any]) -> None:
    """Stop capturing in the current context: the attempt ended."""
    capture.ended = True
    _capture.reset(token)


# -- process-wide plumbing -------------------------------------------------------------------


class _Tee:
    """Stands in for ``sys.stdout``/``sys.stderr``: captures per context, passes everything on.

    Passing a run's output on is best effort: the capture is the step's log, the terminal only
    a copy. So when the writer is a run's code (a step, a thread it started, workflow code),
    text the stream cannot encode (a lone surrogate on a strict UTF-8 stdout, anything but
    ASCII on an ASCII one) is passed on with backslash escapes, and a stream that fails (its
    reader went away: ``wf worker | head``; closed; any ``OSError``) is given up on: from then
    on a run's output is no longer passed on to it (said once on stderr, if that still works),
    and the run goes on exactly as if it had been. A run's outcome never depends on where the
    process's output goes. Output of code outside any run is passed on as before, its errors
    its own (the ``wf`` command answers a closed stdout itself).
    """

    def __init__(self, name: str, inner: TextIO) -> None:
        self._name = name
        self._inner = inner
        self._lost = False
        """Passing a run's output on failed once: it is no longer tried."""

    def write(self, text: str) -> int:
        capture = _capture.get()
        if capture is not None and capture.ended and _inherited.get():
            capture = None  # a thread the step started, outliving it: not its output any more
        if capture is not None and text and sys._getframe(1).f_code is not _STREAM_EMIT:
            # (A StreamHandler writing a log record: the record is captured by the handler.)
            capture.write(self._name, text)
        if capture is None and not _in_run():
            return self._inner.write(text)
        if not self._lost:
            try:
                try:
                    self._inner.write(text)
                except UnicodeEncodeError:
                    encoding = getattr(self._inner, "encoding", None) or "utf-8"
                    self._inner.write(
                        text.encode(encoding, "backslashreplace").decode(encoding, "replace")
                    )
            except (OSError, ValueError) as exc:  # ValueError: the stream is closed
                self._lose(exc)
        return len(text)

    def writelines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._lost and _in_run():
            return
        try:
            self._inner.flush()
        except (OSError, ValueError) as exc:
            if not _in_run():
                raise
            self._lose(exc)

    def _lose(self, exc: BaseException) -> None:
        """Passing a run's output on to this stream failed: stop, and say so once on stderr."""
        self._lost = True
        stderr = sys.stderr
        if type(stderr) is _Tee:
            if stderr is self:
                return  # stderr itself is gone: nowhere to say it
            stderr = stderr._inner
        if stderr is None or stderr is self._inner:
            return
        try:
            stderr.write(
                f"wf: {self._name} failed ({type(exc).__name__}: {exc}): the runs' output is no "
                f"longer passed on to it (it is still captured: wf logs RUN_ID)\n"
            )
            stderr.flush()
        except Exception:  # best effort, as the output it is about
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _in_run() -> bool:
    """Whether the code writing is a run's (workflow code, a step, a thread a step started)."""
    return _capture.get() is not None or _current_run.get() is not None


_base_factory: Any = None


def _make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    """The log record factory while capture is installed: a record made inside a step is
    captured, and carries the step's ids (``wf_run_id``, ``wf_step``, ``wf_attempt``) for the
    program's formatters."""
    record: logging.LogRecord = _base_factory(*args, **kwargs)
    capture = _capture.get()
    if capture is not None and not (capture.ended and _inherited.get()) and not _is_wf(record.name):
        step = capture._step
        record.wf_run_id = capture._ctx.run_id
        record.wf_step = step.name
        record.wf_attempt = step.attempt
        text = record.getMessage()
        if record.exc_info:
            text = f"{text}\n{_formatter.formatException(record.exc_info)}"
        capture.record(record, text)
    return record


_formatter = logging.Formatter()


def _is_wf(logger: str) -> bool:
    """Whether ``logger`` is wf's own (``wf``, ``wf.worker``, ...): never a step's output."""
    return logger == "wf" or logger.startswith("wf.")


_thread_start: Any = None

_pool_workers: tuple[Any, ...] = ()
"""Targets of thread-pool workers: long-lived, serving many steps, never given a step's context
(read when capture is installed: importing wf imports no thread pool)."""


def _start_thread(thread: threading.Thread) -> None:
    """``Thread.start`` while capture is installed: a thread started inside a step attempt runs
    in a copy of the step's context (see the module docstring)."""
    if _capture.get() is not None and not _is_pool_worker(thread):
        context = contextvars.copy_context()
        context.run(_inherited.set, True)
        run = thread.run
        # An instance attribute: ``_bootstrap_inner`` calls ``self.run()``, a subclass's too.
        thread.run = functools.partial(context.run, run)  # type: ignore[method-assign]
    _thread_start(thread)


def _is_pool_worker(thread: threading.Thread) -> bool:
    if getattr(thread, "_target", None) in _pool_workers:
        return True
    # multiprocessing.pool.ThreadPool: its workers are multiprocessing.dummy.DummyProcess.
    return type(thread).__module__ == "multiprocessing.dummy"


def wrap_streams() -> None:
    """Wrap the standard streams in ``_Tee``s (again, if something replaced them): called when a
    run is driven too, so that workflow code's output, and steps' with capture off, cannot fail
    the run either when the stream does."""
    if type(sys.stdout) is not _Tee and sys.stdout is not None:
        sys.stdout = _Tee("stdout", sys.stdout)
    if type(sys.stderr) is not _Tee and sys.stderr is not None:
        sys.stderr = _Tee("stderr", sys.stderr)


def _install() -> None:
    """Wrap the standard streams (again, if something replaced them) and hook ``logging``.

    Log records are captured by the record factory, not by a handler: a handler on the root
    logger would change the program's logging (``basicConfig`` does nothing once the root has
    a handler, and the last-resort handler stops printing warnings).
    """
    global _base_factory
    wrap_streams()
    global _thread_start, _pool_workers
    if _thread_start is None:
        import concurrent.futures.thread

        _pool_workers = (concurrent.futures.thread._worker,)
        _thread_start = threading.Thread.start
        threading.Thread.start = _start_thread  # type: ignore[method-assign,assignment]
    if _base_factory is None:
        # Once: a factory set later by someone else calls ours in turn, as factories do.
        _base_factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(_make_record)
