"""The engine (a store, a clock, options), ``wf.start``, and the ``wf.Run`` handle.

Which engine is current: the one installed by ``wf.configure`` (or ``use_engine`` in tests),
else one built on first use by ``wf._config.default_engine`` (the local store, or PostgreSQL
when ``WF_POSTGRES_DSN`` is set), so the kernel never imports a concrete store.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

from wf._exceptions import (
    ResultExpired,
    RunAlreadyExists,
    RunCancelled,
    RunFailed,
    RunNotFound,
    StreamNotFound,
    UsageError,
)
from wf.engine._clock import Clock, SystemClock
from wf.engine._codec import decode, encode
from wf.engine._context import RunContext, current_run
from wf.engine._deployment import deployment_of
from wf.engine._durations import parse_duration
from wf.engine._errors import public_fields, rebuild_error
from wf.engine._futures import in_run
from wf.engine._instruments import Instrument
from wf.engine._instruments import outcome as _instrument_outcome
from wf.engine._instruments import send as _instrument_send
from wf.engine._instruments import start as _instrument_start
from wf.engine._queueing import group_key
from wf.engine._signature import validate_arguments
from wf.engine._steplogs import DEFAULT_LIMIT as DEFAULT_STEP_LOG_LIMIT
from wf.engine._workflow import Workflow
from wf.store import Hold, InboxMessage, RunRecord, RunStatus, Store
from wf.store._ids import new_run_id, validate_run_id

if TYPE_CHECKING:
    from wf.engine._watch import RunEvent

R = TypeVar("R")
T = TypeVar("T")

MessageHandler = Callable[[RunContext, InboxMessage, bool], Awaitable[None]]


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class Engine:
    """Where runs live (``store``), how time passes (``clock``), and the drivers of this process.

    ``suspend_after``: a wait longer than this (seconds) lets a run suspend instead of holding a
    coroutine. ``inbox_poll``: how often a live run looks for messages from other processes.
    ``step_log_limit``: characters a step attempt's captured output may take in the store
    (``WF_STEP_LOG_LIMIT``, default 64 Ki; 0 turns step log capture off).
    ``instruments``: observers of runs, drives and steps (``wf.engine._instruments``). Unless
    ``WF_OTEL=0``, OpenTelemetry tracing is added on the first run when the program has set a
    tracer provider (``wf.otel``; metrics with ``WF_OTEL_METRICS=1`` or ``wf.otel.instrument``).
    """

    def __init__(
        self,
        store: Store,
        clock: Clock | None = None,
        *,
        suspend_after: float | None = None,
        inbox_poll: float | None = None,
        concurrency: int | None = None,
        instruments: Sequence[Instrument] = (),
        step_log_limit: int | None = None,
        retention: float | None = None,
    ) -> None:
        self.store = store
        self.concurrency = concurrency
        """The store-wide cap: runs driven at once by every process on the store (each
        process applies the value it was configured with)."""
        self.retention = retention
        """Store-wide retention (seconds): finished runs without a retention of their own are
        deleted this long after they end. None keeps them."""
        self.clock: Clock = clock or SystemClock()
        self.suspend_after = (
            suspend_after if suspend_after is not None else _env_float("WF_SUSPEND_AFTER", 30.0)
        )
        self.inbox_poll = inbox_poll if inbox_poll is not None else _env_float("WF_INBOX_POLL", 1.0)
        self.step_log_limit = int(
            step_log_limit
            if step_log_limit is not None
            else _env_float("WF_STEP_LOG_LIMIT", DEFAULT_STEP_LOG_LIMIT)
        )
        """Characters of output kept per step attempt (``wf.engine._steplogs``); 0: none."""
        self.live: dict[str, RunContext] = {}
        self.draining = False
        """Set while a worker drains: drivers that have not started their workflow yet leave
        the run due instead of starting it on code that is about to be replaced."""
        self.drivers: dict[str, asyncio.Task[RunRecord | None]] = {}
        self.holds: dict[str, Hold] = {}
        """Runs a cap, lane or rate limit held back when this process last tried them."""
        from wf.engine._child import on_child_message
        from wf.engine._hooks import on_hook_message

        self.message_handlers: dict[str, MessageHandler] = {
            "hook": on_hook_message,
            "child_done": on_child_message,
        }
        self._finished_callbacks: list[Callable[[RunRecord], None]] = []
        self.instruments: list[Instrument] = list(instruments)
        """Registered instruments; the kernel tests ``if engine.instruments`` before calling."""
        self._auto_instruments = True

    # -- instruments -----------------------------------------------------------------------

    def add_instrument(self, instrument: Instrument) -> None:
        """Register an instrument (it observes runs started and drives begun from now on)."""
        self.instruments.append(instrument)

    def instrumented(self) -> list[Instrument]:
        """The instruments, once the first-use look for OpenTelemetry is done."""
        if self._auto_instruments:
            self._resolve_instruments()
        return self.instruments

    def _resolve_instruments(self) -> None:
        """Once per engine, on its first start or drive: add OpenTelemetry when it is in use.

        Looks only at ``sys.modules``: a program that never imported OpenTelemetry imports
        nothing of it through wf.
        """
        self._auto_instruments = False
        mode = os.environ.get("WF_OTEL", "auto").strip().lower()
        metrics = os.environ.get("WF_OTEL_METRICS", "").strip().lower() in ("1", "true", "yes")
        if mode in ("0", "false", "no", "off") or any(
            getattr(i, "is_wf_otel", False) for i in self.instruments
        ):
            return
        if mode == "auto" and not metrics:
            api = sys.modules.get("opentelemetry.trace")
            if api is None or isinstance(api.get_tracer_provider(), api.ProxyTracerProvider):
                return  # no provider set: tracing would record nothing
        try:
            from wf.otel import instrument
        except ImportError as exc:
            if mode == "auto":
                return
            raise UsageError(
                f"WF_OTEL={mode} needs OpenTelemetry: pip install 'wf[otel]' ({exc})"
            ) from None
        instrument(self, metrics=metrics)

    # -- driving ---------------------------------------------------------------------------

    def drive_soon(self, run_id: str) -> asyncio.Task[RunRecord | None]:
        """Drive the run in a background task of this process (one task per run at a time)."""
        task = self.drivers.get(run_id)
        if task is None or task.done():
            # A driver is no workflow code, even when a workflow starts it (a child run): made
            # in the caller's context it would refuse asyncio.wait() from whoever awaits it.
            context = contextvars.copy_context()
            context.run(in_run.set, False)
            loop = asyncio.get_running_loop()
            task = loop.create_task(self._drive(run_id), context=context)
            self.drivers[run_id] = task
        return task

    async def _drive(self, run_id: str) -> RunRecord | None:
        from wf.engine._driver import drive  # the driver builds on this module

        self.instrumented()
        try:
            return await drive(self, run_id)
        finally:
            if self.drivers.get(run_id) is asyncio.current_task():
                del self.drivers[run_id]

    async def aclose(self, *, grace: float = 0.0, timeout: float | None = None) -> None:
        """Stop driving runs in this process; the runs stay in the store for the next driver.

        With ``grace`` > 0 the live runs are first asked to stop at their next durable
        operation (a running step finishes) for up to ``grace`` seconds, as a draining worker
        does. Drivers still running then are abandoned, the way a crash would leave them: the
        journal holds everything they recorded. ``timeout`` bounds the wait for the abandoned
        ones (a step in a thread cannot be interrupted); None waits for them all.
        """
        tasks = [t for t in self.drivers.values() if not t.done()]
        if not tasks:
            return
        if grace > 0:
            was_draining, self.draining = self.draining, True
            try:
                for ctx in list(self.live.values()):
                    ctx.evict()
                _, pending = await asyncio.wait(tasks, timeout=grace)
            finally:
                self.draining = was_draining
            tasks = list(pending)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def on_finished(self, callback: Callable[[RunRecord], None]) -> None:
        """Call ``callback(record)`` whenever a run driven here ends."""
        self._finished_callbacks.append(callback)

    def notify_finished(self, record: RunRecord) -> None:
        for callback in self._finished_callbacks:
            callback(record)
        if self.instruments:
            _instrument_outcome(self.instruments, record)

    # -- starting --------------------------------------------------------------------------

    async def start(
        self,
        workflow: Workflow[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str | None = None,
        detach: bool = False,
        parent: RunContext | None = None,
        target: str | None = None,
        schedule_id: str | None = None,
    ) -> Run[Any]:
        """Create a run (validated, encoded, queued) and, unless ``detach``, drive it here."""
        if not isinstance(workflow, Workflow):
            raise UsageError(f"wf.start() needs a @wf.workflow, got {type(workflow).__name__}")
        where = f"workflow {workflow.name!r}"
        args, kwargs = validate_arguments(workflow.fn, args, kwargs, where=where)
        options, run_options = workflow.options, workflow.run_options
        group = group_key(options, run_options, args, kwargs)
        encoded = encode({"args": list(args), "kwargs": kwargs}, where=f"input of {where}")
        run_id = validate_run_id(run_id) if run_id is not None else new_run_id(self.clock.now())
        now = self.clock.now()
        due = run_options.due_at(now) if run_options is not None else None
        priority = options.priority
        max_attempts = options.max_attempts
        if run_options is not None:
            if run_options.priority is not None:
                priority = run_options.priority
            if run_options.max_attempts is not None:
                max_attempts = run_options.max_attempts
        queued = detach or due is not None
        record = RunRecord(
            id=run_id,
            workflow=workflow.name,
            # A run this process drives at once starts as running: the driver then has nothing
            # to save before its first step. Either way it is due now until it is driven.
            status=RunStatus.PENDING if queued else RunStatus.RUNNING,
            target=target or workflow.target,
            input=encoded,
            created_at=now,
            updated_at=now,
            parent_id=parent.run_id if parent else None,
            root_id=(parent.record.root_id or parent.run_id) if parent else None,
            deployment=deployment_of(workflow.fn),
            wake_at=due,
            priority=priority,
            group=group,
            queue=options.queue,
            max_attempts=max_attempts,
            limits=options.limits(),
            schedule_id=schedule_id,
            retention=workflow.retention,
        )
        if self.instrumented():
            _instrument_start(self.instruments, record)
        # The created record rides in the first event, so a store can rebuild a lost record
        # (a cache of the journal) from the journal alone.
        snapshot = {k: v for k, v in record.to_json().items() if k != "input"}
        started = {
            "type": "run_started",
            "ts": now,
            "workflow": workflow.name,
            "input": encoded,
            "record": snapshot,
        }
        if not await self.store.create_run(record, [started]):
            existing = await self.store.get_run(run_id)
            if run_options is not None and run_options.unique:
                raise RunAlreadyExists(f"run {run_id!r} exists already (unique start)", run_id)
            if existing.workflow != workflow.name:
                raise RunAlreadyExists(
                    f"run {run_id!r} exists already for workflow {existing.workflow!r}", run_id
                )
            if existing.input != encoded:
                # Same id, other input: handing back the old run would silently drop this one.
                raise RunAlreadyExists(
                    f"run {run_id!r} exists already with another input; start it with another "
                    "id, or with the same input to get the existing run back",
                    run_id,
                )
        if not queued:
            self.drive_soon(run_id)
        return Run(run_id, self)


_engine_var: contextvars.ContextVar[Engine | None] = contextvars.ContextVar(
    "wf_engine", default=None
)
_default_engine: Engine | None = None


@overload
def configure(
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    suspend_after: float | None = None,
    dir: str | os.PathLike[str] | None = None,
    postgres_dsn: str | None = None,
    concurrency: int | None = None,
    retention: float | dt.timedelta | str | None = None,
    url: None = None,
    token: str | None = None,
    instruments: Sequence[Instrument] = (),
) -> Engine: ...


@overload
def configure(*, url: str, token: str | None = None) -> None: ...


def configure(
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    suspend_after: float | None = None,
    dir: str | os.PathLike[str] | None = None,
    postgres_dsn: str | None = None,
    concurrency: int | None = None,
    retention: float | dt.timedelta | str | None = None,
    url: str | None = None,
    token: str | None = None,
    instruments: Sequence[Instrument] = (),
) -> Engine | None:
    """Set the process-wide engine: its store, clock and options.

    Without ``store`` the store is the one the configuration names: ``[tool.wf]`` in the
    project's pyproject.toml, overridden by ``WF_*`` variables, overridden by the settings given
    here (``dir``: the local store's directory; ``postgres_dsn``: use PostgreSQL instead).
    ``concurrency``: the store-wide cap, runs driven at once by all processes on the store
    (default: the configuration's ``concurrency``, else none).

    ``retention`` (seconds, a ``timedelta`` or text like ``"30d"``) is the store-wide retention
    of finished runs (else ``WF_RETENTION`` / ``[tool.wf] retention``).

    ``url`` (and ``token``) instead points ``wf.start``, ``wf.get_run`` and ``wf.resume_hook``
    at a ``wf serve`` over HTTP (``pip install 'wf[serve]'``); then no store is opened here and
    this returns None.
    """
    global _default_engine, _remote_configured
    if url is not None:
        from wf._remote import configure_remote

        configure_remote(url, token)
        _remote_configured = True
        return None
    from wf._config import retention_setting, set_overrides, store_wide_concurrency

    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise UsageError(f"concurrency must be an integer >= 1, not {concurrency!r}")
    if dir is not None or postgres_dsn is not None:
        set_overrides(dir=None if dir is None else os.fspath(dir), postgres_dsn=postgres_dsn)
    if concurrency is not None:
        set_overrides(concurrency=concurrency)
    else:
        concurrency = store_wide_concurrency()
    if retention is not None:
        set_overrides(retention=parse_duration(retention, what="retention"))
    if store is None:
        store = _build_default_engine().store
    _default_engine = Engine(
        store,
        clock,
        suspend_after=suspend_after,
        concurrency=concurrency,
        instruments=instruments,
        retention=retention_setting(),
    )
    return _default_engine


def current_engine() -> Engine:
    """The engine in use here: the context's, else the process-wide one (built on first use)."""
    global _default_engine
    engine = _engine_var.get()
    if engine is not None:
        return engine
    if _default_engine is None:
        _default_engine = _build_default_engine()
    return _default_engine


def _build_default_engine() -> Engine:
    from wf._config import default_engine

    return default_engine()


@contextlib.contextmanager
def use_engine(engine: Engine) -> Iterator[Engine]:
    """Make ``engine`` current within the block (and the tasks it starts)."""
    token = _engine_var.set(engine)
    try:
        yield engine
    finally:
        _engine_var.reset(token)


async def start(
    workflow: Workflow[..., R],
    *args: Any,
    run_id: str | None = None,
    detach: bool = False,
    **kwargs: Any,
) -> Run[R]:
    """Start a run of ``workflow`` and return its handle.

    Outside a workflow the run is driven in this process (in a background task) until it ends or
    suspends, unless ``detach=True`` (then it only waits in the queue for a worker). Starting with
    a ``run_id`` that exists with the same workflow and input returns that run and never runs
    the workflow twice (another workflow or input raises ``wf.RunAlreadyExists``). Inside a
    workflow this starts a child run (see ``wf.engine._child``).
    """
    ctx = current_run()
    if ctx is not None:
        from wf.engine._child import start_child

        return await start_child(ctx, workflow, args, kwargs, run_id=run_id, detach=detach)
    remote = remote_client()
    if remote is not None:
        return await remote.start(workflow, args, kwargs, run_id=run_id, detach=detach)  # type: ignore[no-any-return]
    engine = current_engine()
    return await engine.start(workflow, args, kwargs, run_id=run_id, detach=detach)


def get_run(run_id: str) -> Run[Any]:
    """A handle on an existing run (``RunNotFound`` is raised by its methods if it is missing).

    With a remote server configured (``wf.configure(url=...)`` / ``WF_URL``), a handle that
    talks to it.
    """
    remote = remote_client()
    if remote is not None:
        from wf._remote import RemoteRun

        return RemoteRun(validate_run_id(run_id), remote)
    return Run(validate_run_id(run_id))


def remote_client() -> Any:
    """The ``wf serve`` this program talks to instead of a store, or None: set by
    ``wf.configure(url=...)``, else ``WF_URL``. (``wf._remote`` is imported only then.)"""
    if not _remote_configured and not os.environ.get("WF_URL"):
        return None
    from wf._remote import remote_client as configured

    return configured()


_remote_configured = False


class Run(Generic[T]):
    """A handle on a run: ask for its status and result, cancel it, wake it, read its streams."""

    def __init__(self, run_id: str, engine: Engine | None = None) -> None:
        self.id = run_id
        self._engine = engine

    @property
    def engine(self) -> Engine:
        return self._engine or current_engine()

    def __repr__(self) -> str:
        return f"<wf.Run {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def record(self) -> RunRecord:
        """The run's current record (status, output, error, wake-up time...).

        ``wf.ResultExpired`` (a ``wf.RunNotFound``) when retention deleted the run.
        """
        return await get_record(self.engine, self.id)

    async def status(self) -> RunStatus:
        """The run's status."""
        return (await self.record()).status

    async def result(self, timeout: float | None = None) -> T:
        """Wait for the run to end and return its output.

        Raises ``RunFailed`` (with the original error's type, message, fields), ``RunCancelled``,
        ``RunNotFound`` (``ResultExpired`` once retention deleted the run), or ``TimeoutError``
        after ``timeout`` seconds. A run that is due and
        driven by nobody is driven here while waiting, so a suspended run whose timer fires, or
        an orphaned one, completes.
        """
        return outcome(await self._follow(timeout, settled=False))  # type: ignore[no-any-return]

    async def _drive_due_descendants(self) -> float | None:
        """While waiting on a run, drive its due child runs here (as a worker would); return
        the earliest time one of them is due."""
        engine = self.engine
        earliest: float | None = None
        parents = [self.id]
        while parents:
            children = await engine.store.list_runs(parent_id=parents.pop(), limit=1000)
            for child in children:
                if child.status.is_terminal:
                    continue
                parents.append(child.id)
                if child.id in engine.drivers:
                    continue
                if await is_due(engine, child):
                    engine.drive_soon(child.id)
                elif child.wake_at is not None:
                    earliest = child.wake_at if earliest is None else min(earliest, child.wake_at)
        return earliest

    async def settle(self, timeout: float | None = None) -> RunRecord:
        """Wait until the run has nothing left to do for now; return its record.

        Settled means ended, or suspended on something outside it (a hook, a child run, a
        timer not yet due) with nothing in its inbox. Meanwhile a due run that nobody drives is
        driven here, as ``result()`` does. After ``wf.resume_hook`` this returns once the run
        has taken the payload in and then ended or waits again (where ``result()`` would also
        wait for whatever comes next). ``TimeoutError`` after ``timeout`` seconds.
        """
        return await self._follow(timeout, settled=True)

    async def _follow(self, timeout: float | None, *, settled: bool) -> RunRecord:
        """Wait until the run ends (or, with ``settled``, until nothing is due for it), driving
        it, and with ``result()`` its due child runs, whenever nobody else does."""
        engine = self.engine
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        busy_elsewhere = False
        while True:
            task = engine.drivers.get(self.id)
            if task is not None:
                # Driven here: its driver hands back the final record, no need to read it.
                remaining = None if deadline is None else deadline - loop.time()
                await asyncio.wait({task}, timeout=remaining)
                driven = task.result() if task.done() else None
                if driven is not None and driven.status.is_terminal:
                    return driven
            record = await get_record(engine, self.id)
            if record.status.is_terminal:
                return record
            idle = self.id not in engine.drivers
            due = idle and await is_due(engine, record)
            if settled and idle and not due and record.status is RunStatus.SUSPENDED:
                return record
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                what = "settle" if settled else "finish"
                raise TimeoutError(f"run {self.id} did not {what} within {timeout} s")
            if not idle:
                continue
            if due and not busy_elsewhere:
                if await engine.drive_soon(self.id) is None:
                    busy_elsewhere = True  # another process drives it: watch for its changes
                continue
            busy_elsewhere = False
            waiting = record.status in (RunStatus.SUSPENDED, RunStatus.PENDING)
            wakes = [record.wake_at] if waiting else []
            if not settled:
                wakes.append(await self._drive_due_descendants())
            await self._wait_for_change(
                min((w for w in wakes if w is not None), default=None), remaining
            )

    async def _wait_for_change(self, wake_at: float | None, remaining: float | None) -> None:
        engine = self.engine
        poll = 2.0 if remaining is None else min(2.0, remaining)
        waiters = [asyncio.ensure_future(engine.store.wait_for_run(self.id, poll))]
        if wake_at is not None:
            waiters.append(asyncio.ensure_future(engine.clock.sleep_until(wake_at)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def cancel(self, *, wait: bool = False) -> bool:
        """Ask the run to stop at its next durable operation; False if it had already ended.

        Inside the workflow ``wf.Cancelled`` is raised (``except Exception`` cannot swallow it);
        ``finally`` blocks and rollbacks still run. With ``wait=True``, return once it ended.
        """
        return await self._send("cancel", wait)

    async def wake_up(self, *, wait: bool = False) -> bool:
        """End the run's current sleeps now; False if it had already ended."""
        return await self._send("wake", wait)

    async def _send(self, kind: str, wait: bool) -> bool:
        engine = self.engine
        record = await get_record(engine, self.id)
        if record.status.is_terminal:
            return False
        data: dict[str, Any] = {}
        if engine.instrumented():
            _instrument_send(engine.instruments, self.id, kind, data)
        await engine.store.post(self.id, kind, data)
        ctx = engine.live.get(self.id)
        if ctx is not None:
            from wf.engine._driver import apply_messages

            await apply_messages(ctx, await engine.store.read_inbox(self.id), live=True)
        elif self.id not in engine.drivers:
            engine.drive_soon(self.id)
        if wait:
            with contextlib.suppress(RunFailed, RunCancelled):
                await self.result()
        return True

    def watch(self) -> AsyncIterator[RunEvent]:
        """The run's events as they happen (``wf.RunEvent``): ``started`` (with the attempt),
        ``progress``, ``retrying``, then the terminal one. A finished run yields only that."""
        from wf.engine._watch import watch

        return watch(self.engine.store, self.id)

    async def retry(self) -> None:
        """Queue one more attempt of a failed run: completed steps replay, failed ones re-run.

        ``UsageError`` if the run has not failed (or is being driven right now).
        """
        engine = self.engine
        record = await engine.store.get_run(self.id)
        if record.status is not RunStatus.FAILED:
            raise UsageError(f"run {self.id} is {record.status}: only a failed run can be retried")
        lease = await engine.store.try_acquire(self.id)
        if lease is None:
            raise UsageError(f"run {self.id} is being driven by another process: try again")
        try:
            record, _ = await lease.read_run(engine.store)
            if record.status is not RunStatus.FAILED:
                raise UsageError(
                    f"run {self.id} is {record.status}: only a failed run can be retried"
                )
            now = engine.clock.now()
            record.attempt += 1
            record.max_attempts = max(record.max_attempts, record.attempt)
            retrying = {
                "type": "run_retrying",
                "ts": now,
                "attempt": record.attempt,
                "max_attempts": record.max_attempts,
                "error": record.error,
                "retry_at": None,
                "manual": True,
            }
            await lease.append([retrying])
            record.status = RunStatus.PENDING
            record.wake_at = None
            record.waiting_for = None
            record.updated_at = now
            await lease.save(record)
        finally:
            await lease.release()

    async def read_stream(self, name: str | None = None, start: int = 0) -> AsyncIterator[bytes]:
        """Chunks of the run's byte stream ``name`` from ``start`` (negative: from the end),
        following it live until it closes.

        A stream that does not exist yet is waited for while the run goes on; if the run ends
        or suspends without having created it, ``wf.StreamNotFound`` is raised (naming the
        streams the run has) instead of waiting for a stream that may never come.
        """
        name = name or "default"
        store = self.engine.store
        await wait_for_stream(store, self.id, name)
        async for chunk in store.stream_chunks(self.id, name, start):
            yield chunk


async def wait_for_stream(store: Store, run_id: str, name: str, *, follow: bool = True) -> None:
    """Return once run ``run_id`` has a stream ``name``; ``StreamNotFound`` if it has none and
    is finished or suspended (or, without ``follow``, at once). ``RunNotFound`` for no run."""
    while True:
        if name in await store.list_streams(run_id):
            return
        record = await store.get_run(run_id)
        # Chunks are durable before a run ends or suspends: one more look after that is final.
        settled = record.status.is_terminal or record.status is RunStatus.SUSPENDED
        streams = await store.list_streams(run_id)
        if name in streams:
            return
        if settled or not follow:
            raise StreamNotFound(run_id, name, list(streams))
        await store.wait_for_run(run_id, 2.0)


async def get_record(engine: Engine, run_id: str) -> RunRecord:
    """The run's record; ``ResultExpired`` instead of ``RunNotFound`` for a deleted run."""
    try:
        return await engine.store.get_run(run_id)
    except RunNotFound as missing:
        stone = await engine.store.get_tombstone(run_id)
        if stone is None:
            raise
        raise ResultExpired(run_id, stone.deleted_at, stone.reason) from missing


async def is_due(engine: Engine, record: RunRecord) -> bool:
    """Whether a non-terminal run should be driven now: not suspended, its wake-up time has
    come, or a message waits in its inbox."""
    if record.status is RunStatus.PENDING and record.wake_at is not None:
        return record.wake_at <= engine.clock.now()  # a delayed start or a retry's backoff
    if record.status is not RunStatus.SUSPENDED:
        return True
    if record.wake_at is not None and record.wake_at <= engine.clock.now():
        return True
    return bool(await engine.store.read_inbox(record.id))


def outcome(record: RunRecord) -> Any:
    """The result a finished run's record stands for (or the error it raises)."""
    if record.status is RunStatus.COMPLETED:
        return decode(record.output)
    if record.status is RunStatus.CANCELLED:
        raise RunCancelled(record.id)
    error = record.error or {}
    original = rebuild_error(error) if error.get("module") else None
    raise RunFailed(
        record.id,
        error.get("type", "Exception"),
        error.get("message", ""),
        public_fields(error),
        error.get("traceback"),
        original,
    )
