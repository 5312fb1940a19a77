"""The engine (a store, a clock, options, the drivers of this process) and ``wf.start``.

The top of the kernel: it drives runs (``wf.engine._driver``) and hands out ``wf.Run``
handles (``wf.engine._run``). Which engine is current is ``wf.engine._current``'s business;
``wf.configure`` lives above the kernel (``wf._setup``), so the kernel never reads the
project's configuration nor imports a concrete store.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import math
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Self

from wf._exceptions import (
    LeaseLost,
    RunAlreadyExists,
    RunNotFound,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from wf._extras import install_hint, missing_extra
from wf.engine._alone import DriveGate
from wf.engine._aside import drive_aside
from wf.engine._child import CHILD_FEATURE, start_child
from wf.engine._clock import Clock, SystemClock
from wf.engine._codec import decode, encode
from wf.engine._context import RunContext, current_run
from wf.engine._current import current_engine
from wf.engine._deployment import deployment_of
from wf.engine._deployments import check_deployment
from wf.engine._driver import drive, drive_owner
from wf.engine._features import Features
from wf.engine._futures import in_run
from wf.engine._hooks import HOOK_FEATURE
from wf.engine._instruments import Instrument
from wf.engine._instruments import created as _instrument_created
from wf.engine._instruments import outcome as _instrument_outcome
from wf.engine._instruments import start as _instrument_start
from wf.engine._queueing import AdmissionOrder, RunOptions, group_key, positive_int
from wf.engine._recovery import DEFAULT_MAX_RECOVERIES
from wf.engine._ref import WorkflowRef
from wf.engine._retention import recorded_retention
from wf.engine._run import Run
from wf.engine._signature import validate_arguments
from wf.engine._steplogs import DEFAULT_LIMIT as DEFAULT_STEP_LOG_LIMIT
from wf.engine._streams import STREAM_FEATURE
from wf.engine._threads import StepThreads, default_size
from wf.engine._workflow import Workflow, same_workflow
from wf.store import Hold, Lease, RunRecord, RunStatus, Store
from wf.store._base import CREATOR_LEASES, MINTED_ID
from wf.store._ids import new_run_id, validate_run_id

FEATURES = Features(HOOK_FEATURE, STREAM_FEATURE, CHILD_FEATURE)
"""The kernel's features, in the order their outcome handlers run: a run's hook tokens are
released and its streams closed before its parent is told it ended."""


def env_number(
    name: str, default: float, *, unit: str = "seconds", positive: bool = False
) -> float:
    """A number of ``unit`` from the environment variable ``name``; ``default`` if it is unset,
    or, with a warning, if it is not a finite number of them at least 0 (more than 0 with
    ``positive``: a poll of 0 would spin)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        logging.getLogger("wf").warning("ignoring %s=%r: not a number of %s", name, raw, unit)
        return default
    return value


_OFF = ("0", "false", "no", "off")


def otel_env() -> tuple[str, bool]:
    """``WF_OTEL`` (``auto`` unless set; ``0``/``1``...) and whether ``WF_OTEL_METRICS`` asks
    for metrics."""
    mode = os.environ.get("WF_OTEL", "auto").strip().lower() or "auto"
    metrics = os.environ.get("WF_OTEL_METRICS", "").strip().lower() in ("1", "true", "yes")
    return mode, metrics


def _otel_missing(mode: str, exc: ImportError) -> UsageError:
    """What to say when the environment asks for OpenTelemetry and ``wf.otel`` cannot load."""
    asked = f"WF_OTEL={mode}" if mode != "auto" else "WF_OTEL_METRICS=1"
    # Not there: the install says it all; there but failing: say how it fails.
    why = "" if missing_extra(exc) == "otel" else f" ({exc})"
    return UsageError(f"{asked} needs OpenTelemetry: {install_hint('otel')}{why}")


def require_otel() -> None:
    """Raise ``wf.UsageError`` now if ``WF_OTEL`` / ``WF_OTEL_METRICS`` ask for OpenTelemetry
    and it cannot be imported: a worker (``wf worker``, ``wf serve``, ``wf dev``) checks at
    start, as each of its drives would fail on it, and the run be retried later, forever."""
    mode, metrics = otel_env()
    if mode in _OFF or (mode == "auto" and not metrics):
        return
    try:
        import wf.otel  # noqa: F401
    except ImportError as exc:
        raise _otel_missing(mode, exc) from None


class Engine:
    """Where runs live (``store``), how time passes (``clock``), and the drivers of this process.

    ``suspend_after``: a wait longer than this (seconds) lets a run suspend instead of holding a
    coroutine. ``inbox_poll``: how often a live run looks for messages from other processes.
    ``step_log_limit``: characters a step attempt's captured output may take in the store
    (``WF_STEP_LOG_LIMIT``, default 64 Ki; 0 turns step log capture off).
    ``max_recoveries``: deaths of a run's driving process in a row, without progress, before the
    run fails with ``wf.RunStalled`` (default 10; ``[tool.wf] max_recoveries``).
    ``deployment``: the id runs started here are pinned to (``[tool.wf] deployment``; see
    ``docs/deploying.md``); None leaves them unpinned.
    ``instruments``: observers of runs, drives and steps (``wf.engine._instruments``). Unless
    ``WF_OTEL=0``, OpenTelemetry tracing is added on the first start or drive that finds a tracer
    provider set, by the program or by a workflow module as it is imported (``wf.otel``; metrics
    with ``WF_OTEL_METRICS=1`` or ``wf.otel.instrument``).
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
        max_recoveries: int | None = None,
        deployment: str | None = None,
        step_threads: int | None = None,
    ) -> None:
        self.store = store
        self.step_threads = step_threads
        """Threads sync steps run in at once, as configured (``[tool.wf] step_threads``).
        None: a worker's concurrency while a worker runs here, asyncio's default size
        (``min(32, cpus + 4)``) otherwise (``step_pool``)."""
        self._step_pool: StepThreads | None = None
        self._step_threads_wanted = 0
        self.deployment = None if deployment is None else check_deployment(deployment)
        """This process's deployment id (``[tool.wf] deployment``): runs it starts are pinned
        to it (child runs to their parent's pin). None: they are unpinned."""
        self.concurrency = concurrency
        """The store-wide cap: runs driven at once by every process on the store (each
        process applies the value it was configured with)."""
        self.retention = retention
        """Store-wide retention (seconds): finished runs without a retention of their own are
        deleted this long after they end. None keeps them."""
        self.max_recoveries = (
            DEFAULT_MAX_RECOVERIES
            if max_recoveries is None
            else positive_int("max_recoveries", max_recoveries)
        )
        """Deaths of a run's driving process in a row, without progress, before it fails
        with ``wf.RunStalled`` (a run's own ``max_recoveries`` wins)."""
        self.clock: Clock = clock or SystemClock()
        self.features = FEATURES
        """The features runs are driven with (``wf.engine._features``)."""
        self.suspend_after = (
            suspend_after if suspend_after is not None else env_number("WF_SUSPEND_AFTER", 30.0)
        )
        self.inbox_poll = (
            inbox_poll
            if inbox_poll is not None
            else env_number("WF_INBOX_POLL", 1.0, positive=True)
        )
        self.step_log_limit = int(
            step_log_limit
            if step_log_limit is not None
            else env_number("WF_STEP_LOG_LIMIT", DEFAULT_STEP_LOG_LIMIT, unit="characters")
        )
        """Characters of output kept per step attempt (``wf.engine._steplogs``); 0: none."""
        self.live: dict[str, RunContext] = {}
        self.drive_gate = DriveGate()
        """Drives share it; a run whose drivers died in it before takes it alone
        (``wf.engine._alone``)."""
        self.may_drive = True
        """Whether this process drives runs. False in a ``wf serve --no-worker``
        (``create_app(drive=False)``): ``drive_soon`` then leaves every run to the workers, as
        it does a run another process drives, so a request it serves never runs workflow
        code here."""
        self.any_deployment = False
        """Whether this process drives runs pinned to any deployment (a ``wf worker
        --any-deployment``, ``wf dev``). False: with a deployment id it drives only runs pinned
        to that id and unpinned ones; a run pinned elsewhere is left to that deployment's
        workers, as a run another process drives is (``drives_pin``)."""
        self.draining = False
        self.closing = False
        """Set while a worker drains: drivers that have not started their workflow yet leave
        the run due instead of starting it on code that is about to be replaced."""
        self.drivers: dict[str, asyncio.Task[RunRecord | None]] = {}
        self.max_drivers: int | None = None
        """Runs this process drives at once, at most: a worker's concurrency while a worker
        runs here (``wf worker --concurrency``). A run nothing here awaits (a child beside its
        parent, a parent told of its child's end, a run started here) is driven here only while
        there is room (``room_to_drive``); otherwise it is left due, for the worker's next
        claim. None: no bound (``wf run``, a program without a worker)."""
        self.claiming = 0
        """Places a worker's look at the queue is filling: taken, for ``room_to_drive``, from
        the look's count of free places until the runs it claimed are driven."""
        self.holds: dict[str, Hold] = {}
        """Runs a cap, lane or rate limit held back when this process last tried them."""
        self.followed: dict[str, int] = {}
        """Runs whose ``result()`` waits in this process (how many waits), by id: their
        families' runs are driven here when due (``Run.result``), a parent at once when a child
        of it ends here (``wf.engine._child.notify_parent``)."""
        self.failed_until: dict[str, float] = {}
        """Runs whose last drive here failed in the store (a ``StoreError``), by id: the clock
        time before which ``result()``'s pass over descendants does not drive them again
        (``wf.engine._aside``)."""
        self.fresh: dict[str, Workflow[Any, Any] | None] = {}
        """Runs this engine created and drives at once, before their first drive began: that
        drive leaves no durable mark before its first step (``wf.engine._recovery``), which
        keeps a start-and-run to the flushes it always took. With the workflow object each was
        started with (None: started by name): its first drive runs that object's code, not
        whatever its name finds in the registry."""
        self.held_ahead: Callable[[str, tuple[int, float, int, str]], bool] | None = None
        """Set by a running worker: whether runs it holds for a cap (slot name) rank ahead of
        a run at the given place in the queue's order, which must then wait behind them."""
        self.drive_apart: Callable[[str, Callable[[str], str]], Awaitable[None]] | None = None
        """Set by a process that must outlive the runs it drives (``wf serve``): drives a run
        whose last driver died in another process, and returns once that process ended; it
        logs the line its second argument makes of how the run is driven (``recovered_line``).
        None: such runs are driven here, as every other (``wf.engine._alone``)."""
        self.said_elsewhere: set[str] = set()
        """Runs whose recovery (``recovered_line``) another process said as it handed them to
        this one (a ``wf serve`` child drives the run its server named): their next drive
        here does not say it again."""
        self.admission_order = AdmissionOrder()
        """A worker's claimed runs ask for cap places in the claim's order, not in the order
        their drives happen to read them (``wf.engine._queueing.AdmissionOrder``)."""
        self._finished_callbacks: list[Callable[[RunRecord], None]] = []
        self._crossing_callbacks: list[Callable[[RunRecord], None]] = []
        self._crossed: set[str] = set()
        self._other_code: set[str] = set()
        self._script_only: set[str] = set()
        """Workflows of the script being run that no other process imports, said once."""
        """Workflows whose runs of this deployment were started by other code: warned once."""
        self.instruments: list[Instrument] = list(instruments)
        """Registered instruments; the kernel tests ``if engine.instruments`` before calling."""
        self._auto_instruments = True
        self._otel_env: tuple[str, bool] | None = None

    # -- sync steps' threads --------------------------------------------------------------

    def want_step_threads(self, count: int) -> None:
        """Have room for ``count`` sync steps at once (a worker's concurrency), unless
        ``step_threads`` is set. A pool already made smaller is replaced by a larger one (what
        runs in the old one finishes there)."""
        if self.step_threads is not None or count <= self._step_threads_wanted:
            return
        self._step_threads_wanted = count
        pool = self._step_pool
        if pool is not None and pool.size < count:
            pool.shutdown()
            self._step_pool = None

    def step_pool(self) -> StepThreads:
        """The threads sync steps run in (``wf.engine._threads``), made on first use."""
        pool = self._step_pool
        if pool is None:
            size = self.step_threads or self._step_threads_wanted or default_size()
            pool = self._step_pool = StepThreads(size)
        return pool

    # -- instruments -----------------------------------------------------------------------

    def add_instrument(self, instrument: Instrument) -> None:
        """Register an instrument (it observes runs started and drives begun from now on)."""
        self.instruments.append(instrument)

    def instrumented(self) -> list[Instrument]:
        """The instruments, after a look for OpenTelemetry (``_resolve_instruments``)."""
        if self._auto_instruments:
            self._resolve_instruments()
        return self.instruments

    def _resolve_instruments(self) -> None:
        """On each start or drive until it decides: add OpenTelemetry when it is in use.

        Looks only at ``sys.modules``: a program that never imported OpenTelemetry imports
        nothing of it through wf. With no tracer provider set yet it looks again next time (a
        sys.modules read): a worker imports the workflow module, which may set the provider,
        only when it drives the run.
        """
        env = self._otel_env
        if env is None:
            env = self._otel_env = otel_env()
        mode, metrics = env
        if mode in _OFF or (
            self.instruments and any(getattr(i, "is_wf_otel", False) for i in self.instruments)
        ):
            self._auto_instruments = False
            return
        if mode == "auto" and not metrics:
            api = sys.modules.get("opentelemetry.trace")
            if api is None or isinstance(api.get_tracer_provider(), api.ProxyTracerProvider):
                return  # no provider set (yet): tracing would record nothing
        self._auto_instruments = False
        try:
            from wf.otel import instrument
        except ImportError as exc:
            if mode == "auto" and not metrics:
                return
            raise _otel_missing(mode, exc) from None
        instrument(self, metrics=metrics)

    # -- driving ---------------------------------------------------------------------------

    def room_to_drive(self) -> bool:
        """Whether one more run may be driven here within ``max_drivers``."""
        bound = self.max_drivers
        if bound is None:
            return True
        live = sum(1 for task in self.drivers.values() if not task.done())
        return live + self.claiming < bound

    def drive_soon(
        self, run_id: str, *, lease: Lease | None = None
    ) -> asyncio.Task[RunRecord | None]:
        """Drive the run in a background task of this process (one task per run at a time).

        ``lease``: the run's lease, taken already (a worker's claim); the driver owns it then.
        """
        if not self.may_drive:
            return asyncio.get_running_loop().create_task(_not_driven(lease))
        task = self.drivers.get(run_id)
        if task is not None and not task.done() and lease is not None:
            # Cannot happen through the worker (it excludes its own runs from claims); never
            # keep a second lease on a run this process drives already.
            asyncio.get_running_loop().create_task(lease.release())
        if task is None or task.done():
            # A driver is no workflow code, even when a workflow starts it (a child run): made
            # in the caller's context it would refuse asyncio.wait() from whoever awaits it.
            context = contextvars.copy_context()
            context.run(in_run.set, False)
            loop = asyncio.get_running_loop()
            # Who asked: a drive cancelled as ``asyncio.run`` tears down a loop that stopped
            # under that task is no interruption (``ended_on_purpose``).
            context.run(drive_owner.set, asyncio.current_task(loop))
            task = loop.create_task(self._drive(run_id, lease, loop), context=context)
            # Also when the task is cancelled before it ever ran (its ``finally`` never runs):
            # an entry left behind would keep every worker of this process off the run.
            task.add_done_callback(functools.partial(self._forget_driver, run_id))
            self.drivers[run_id] = task
            if lease is not None:
                # A task cancelled before it first runs never enters the driver, which would
                # have released the lease: give it back then (release is idempotent).
                task.add_done_callback(lambda done: _release_if_cancelled(done, lease))
        return task

    def _forget_driver(self, run_id: str, task: asyncio.Task[RunRecord | None]) -> None:
        if self.drivers.get(run_id) is task:
            del self.drivers[run_id]

    async def _drive(
        self,
        run_id: str,
        lease: Lease | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> RunRecord | None:
        try:
            self.instrumented()
        except BaseException:
            if lease is not None:
                await lease.release()
            raise
        try:
            record = await drive(self, run_id, lease=lease, loop=loop)
        except (LeaseLost, StoreUnavailable):
            self.drive_gate.cut(run_id)  # no death of the run's next drive (``_alone``)
            raise
        except StoreError:
            # The store stopped the drive: ``drive`` noted it, or told the gate (``failed``)
            # when it could not; the gate keeps what it knew of the drives before.
            raise
        except Exception:
            self.drive_gate.ended(run_id)
            raise
        finally:
            # Given the loop: no lookup of the running loop (a ``getpid``) per run.
            if self.drivers.get(run_id) is asyncio.current_task(loop):
                del self.drivers[run_id]
        if record is not None:  # None: not driven here (held, driven elsewhere)
            self.drive_gate.ended(run_id)
        return record

    async def aclose(self, *, grace: float = 0.0, timeout: float | None = None) -> None:
        """Stop driving runs in this process; the runs stay in the store for the next driver.

        With ``grace`` > 0 the live runs are first asked to stop at their next durable
        operation (a running step finishes) for up to ``grace`` seconds, as a draining worker
        does. Drivers still running then are cancelled: each notes in the journal that it was
        interrupted on purpose (no death of its run, ``max_recoveries``), within a second, and
        the journal holds everything they recorded. ``timeout`` bounds the wait for the abandoned
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
        self.closing = True  # the drives cancelled now are ended on purpose (no deaths)
        try:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout)
        finally:
            self.closing = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def on_finished(self, callback: Callable[[RunRecord], None]) -> None:
        """Call ``callback(record)`` whenever a run driven here ends."""
        self._finished_callbacks.append(callback)

    def on_crossing(self, callback: Callable[[RunRecord], None]) -> None:
        """Call ``callback(record)`` when this process begins driving a run pinned to another
        deployment than its own (``wf run``, ``wf wake`` and ``wf dev`` drive whatever they
        start or name, and say so): once per run."""
        self._crossing_callbacks.append(callback)

    async def quiet(self) -> bool:
        """Let the runs driven here go as far as they can without time passing, if this engine
        can tell when they have (``TestEngine``); whether it waited. A real engine cannot:
        False at once."""
        return False

    def drives_pin(self, deployment: str | None) -> bool:
        """Whether this process may drive a run pinned to ``deployment`` (None: unpinned):
        never on another deployment's code unless it serves every deployment."""
        return (
            deployment is None
            or self.deployment is None
            or self.any_deployment
            or deployment == self.deployment
        )

    def notify_crossing(self, record: RunRecord) -> None:
        """A drive of ``record`` begins here: tell the callbacks if it crosses deployments."""
        if (
            record.deployment is None
            or record.deployment == self.deployment
            or record.id in self._crossed
            or not self._crossing_callbacks
        ):
            return
        if len(self._crossed) > 10_000:
            self._crossed.clear()
        self._crossed.add(record.id)
        for callback in self._crossing_callbacks:
            callback(record)

    def notice_code(self, record: RunRecord, code_hash: str | None) -> None:
        """A drive of ``record`` begins here on code hashing to ``code_hash``: warn (once per
        workflow) when the run is pinned to this process's own deployment but was started by
        other code. Not refused: any edit of the module changes the hash, harmless ones too;
        but one id for two releases' code is what deployments exist to prevent."""
        recorded = record.code_hash
        if (
            record.deployment is None
            or record.deployment != self.deployment
            or recorded is None
            or code_hash is None
            or recorded == code_hash
            or record.workflow in self._other_code
        ):
            return
        self._other_code.add(record.workflow)
        logging.getLogger("wf").warning(
            "runs of deployment %s were started by other code (code_hash %s of workflow %r, "
            "this code's %s): deploy new code under a new deployment id (docs/deploying.md)",
            record.deployment,
            recorded,
            record.workflow,
            code_hash,
        )

    def notify_finished(self, record: RunRecord) -> None:
        for callback in self._finished_callbacks:
            callback(record)
        if self.instruments:
            _instrument_outcome(self.instruments, record)

    # -- starting --------------------------------------------------------------------------

    async def start(
        self,
        workflow: Workflow[Any, Any] | WorkflowRef[Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str | None = None,
        detach: bool = False,
        parent: RunContext | None = None,
        target: str | None = None,
        schedule_id: str | None = None,
    ) -> Run[Any]:
        """Create a run (validated, encoded, queued) and, unless ``detach``, drive it here.

        ``workflow`` may be a ``wf.ref`` or a ``"module:attr"`` name: the run is created
        without importing it, and its first driver validates the input (``wf.engine._ref``)."""
        if isinstance(workflow, str):
            workflow = WorkflowRef(workflow)
        explicit = run_id is not None
        run_id = validate_run_id(run_id) if run_id is not None else new_run_id(self.clock.now())
        now = self.clock.now()
        if isinstance(workflow, WorkflowRef):
            record = _by_name_record(workflow, args, kwargs, run_id, now)
        elif isinstance(workflow, Workflow):
            record = _declared_record(workflow, args, kwargs, run_id, now)
            if workflow.module == "__main__" and workflow.name not in self._script_only:
                self._script_only.add(workflow.name)
                _say_script_only(workflow)
        else:
            raise UsageError(
                f"wf.start() needs a @wf.workflow, a wf.ref or a 'module:attr' name, got "
                f"{type(workflow).__name__}"
            )
        run_options = workflow.run_options
        encoded = record.input
        # A worker here with every place taken: the run waits in the queue for a place (its
        # next claim, or another worker's) rather than be driven beyond its concurrency.
        queued = detach or record.wake_at is not None or not self.room_to_drive()
        # A run this process drives at once starts as running: the driver then has nothing
        # to save before its first step. Either way it is due now until it is driven.
        record.status = RunStatus.PENDING if queued else RunStatus.RUNNING
        if target is not None:
            record.target = target
        record.deployment = self.deployment
        if parent is not None:
            record.parent_id = parent.run_id
            record.root_id = parent.record.root_id or parent.run_id
            if run_options is None or run_options.deployment is None:
                record.deployment = parent.record.deployment  # a child keeps its parent's pin
        record.schedule_id = schedule_id
        if self.instrumented():
            _instrument_start(self.instruments, record)
        # The created record rides in the first event, so a store can rebuild a lost record
        # (a cache of the journal) from the journal alone.
        snapshot = record.to_json()  # a new dict
        del snapshot["input"]
        started = {
            "type": "run_started",
            "ts": now,
            "workflow": workflow.name,
            "input": encoded,
            "record": snapshot,
        }
        # A start of the same id under way here marked it first: the mark is that start's.
        marked = not queued and run_id not in self.fresh
        if marked:
            # Marked before the creation: the run is due from its publication on, and a claim
            # of this process's own worker may take it before ``create_run`` returns (the
            # local store's flush follows the publication). That drive is the run's first, by
            # its creator (``_driver``: not one of a run whose creator died, driven apart).
            self.fresh[run_id] = workflow if isinstance(workflow, Workflow) else None
        # Its lease is taken next (``_first_lease``): a store may take it while the creation is
        # made durable (a loop of starts then takes it while the disk works).
        leasing = CREATOR_LEASES.set(run_id if marked and self._leases_here() else None)
        minting = MINTED_ID.set(None if explicit else run_id)
        try:
            created = await self.store.create_run(record, [started], explicit=explicit)
        except StoreCorrupted as error:
            if marked:
                self.fresh.pop(run_id, None)
            if parent is None:
                raise
            # A child's creation stopped by damage (a file where its index directory belongs)
            # is the store's failure, not the parent's: it stays due until the repair (as
            # ``StoreCorrupted`` it would be set aside as damaged). An existing run's damage,
            # met below, stays the workflow's to meet.
            raise StoreError(
                f"starting child run {run_id} of run {parent.run_id}: {error}"
            ) from error
        except BaseException:
            if marked:
                self.fresh.pop(run_id, None)
            raise
        finally:
            MINTED_ID.reset(minting)
            CREATOR_LEASES.reset(leasing)
        if not created:
            if marked:
                self.fresh.pop(run_id, None)  # another start's run: marked again below if driven
            if run_options is not None and run_options.unique:
                raise RunAlreadyExists(f"run {run_id!r} exists already (unique start)", run_id)
            try:
                existing = await self.store.get_run(run_id)
            except RunNotFound:
                # Deleted (gc, retention): the id is still that run's while its tombstone is
                # kept. Its handle, as for a run that exists: it is never run again, and its
                # result raises ResultExpired.
                stone = await self.store.get_tombstone(run_id)
                if stone is None:
                    raise
                if not same_workflow(stone.workflow, workflow):
                    raise RunAlreadyExists(
                        f"run {run_id!r} existed for workflow {stone.workflow!r} (deleted by "
                        f"{stone.reason})",
                        run_id,
                    ) from None
                return Run(run_id, self)
            if not same_workflow(existing.workflow, workflow):
                raise RunAlreadyExists(
                    f"run {run_id!r} exists already for workflow {existing.workflow!r}", run_id
                )
            if existing.input != encoded and not _same_call(workflow, existing.input, encoded):
                # Same id, other input: handing back the old run would silently drop this one.
                raise RunAlreadyExists(
                    f"run {run_id!r} exists already with another input; start it with another "
                    "id, or with the same input to get the existing run back",
                    run_id,
                )
        elif self.instruments:
            _instrument_created(self.instruments, record)
        if not queued:
            if not created:
                self.fresh[run_id] = workflow if isinstance(workflow, Workflow) else None
            # Not bounded again: the run was made ``running`` for this drive (a place freed
            # for it may have been taken while it was created, by one run at most).
            try:
                lease = await self._first_lease(run_id)
            except BaseException:
                # A start cancelled here still drives the run it created, as one cancelled
                # after this line does (the drive task takes the lease itself).
                drive_aside(self, run_id, bounded=False)
                raise
            drive_aside(self, run_id, bounded=False, lease=lease)
        return Run(run_id, self)

    def _leases_here(self) -> bool:
        """Whether ``start`` takes the lease of a run it drives (``_first_lease``)."""
        return not in_run.get() and self.may_drive

    async def _first_lease(self, run_id: str) -> Lease | None:
        """The lease of a run just created to be driven here, taken before ``start`` returns.

        The run is due from its creation on: a worker's claim in another process takes it if
        its lease is free, and a drive task here takes it only once the loop runs that task
        (after every other start a ``gather`` has under way). Taken now, the window is what
        is left of the creation (the local store's flush, which follows its publication).
        None (the drive task tries again): not taken in a process that drives nothing
        (``may_drive``), nor from workflow code, whose context must not make the lease's
        tasks (the driver makes them in its own); taken by another process meanwhile (it
        drives the run: ``last_driver_died``); or failed (the drive task meets the error again
        and says it)."""
        if not self._leases_here():
            return None
        try:
            return await self.store.try_acquire(run_id)
        except Exception:
            return None


def _say_script_only(workflow: Workflow[Any, Any]) -> None:
    """Warn that runs of ``workflow``, declared in the script being run under no module name
    another process imports, are resumed by nothing but this script."""
    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    script = os.path.basename(file) if isinstance(file, str) else "the program being run"
    from wf._loader import unguarded_start

    unguarded = unguarded_start(file) if isinstance(file, str) else None
    if unguarded is not None:
        logging.getLogger("wf").warning(
            "workflow %r is declared in %s, run as __main__, which its workers do not import: "
            'its top level runs %s outside if __name__ == "__main__": (a worker importing it '
            "would start its runs again); a run of it this process does not finish is resumed "
            "only by this script started again (put that call under the guard; wf check: "
            "WF506)",
            workflow.name,
            script,
            unguarded,
        )
        return
    logging.getLogger("wf").warning(
        "workflow %r is declared in %s, run as __main__, which no other process can import: "
        "a run of it this process does not finish is resumed only by this script started "
        "again (give the file a module path, such as jobs/nightly.py, or move the workflow "
        "to a module it imports; docs/guide.md#3-starting-runs-from-an-application)",
        workflow.name,
        script,
    )


def _same_call(workflow: Workflow[Any, Any] | WorkflowRef[Any], stored: Any, given: Any) -> bool:
    """Whether two encoded inputs make one call of a workflow declared here: bound to its
    signature, defaults filled in, so ``a(1)``, ``a(x=1)`` and ``a(1, 0)`` of ``def a(x, y=0)``
    are the same input. A run started by name has no signature here: its input as given."""
    if not isinstance(workflow, Workflow):
        return False
    signature = inspect.signature(workflow.fn)
    calls = []
    for value in (stored, given):
        data = decode(value)
        if not isinstance(data, dict):
            return False
        try:
            bound = signature.bind(*data.get("args", ()), **data.get("kwargs", {}))
        except TypeError:
            return False  # not a call of this signature (an older declaration's input)
        bound.apply_defaults()
        calls.append(bound.arguments)
    return calls[0] == calls[1]


def _declared_record(
    workflow: Workflow[Any, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run_id: str,
    now: float,
) -> RunRecord:
    """The record of a run of a workflow declared here: input validated, options applied."""
    where = f"workflow {workflow.name!r}"
    args, kwargs = validate_arguments(workflow.fn, args, kwargs, where=where)
    options, run_options = workflow.options, workflow.run_options
    priority, max_attempts = options.priority, options.max_attempts
    max_recoveries = options.max_recoveries
    if run_options is not None:
        if run_options.priority is not None:
            priority = run_options.priority
        if run_options.max_attempts is not None:
            max_attempts = run_options.max_attempts
        if run_options.max_recoveries is not None:
            max_recoveries = run_options.max_recoveries
    return RunRecord(
        id=run_id,
        workflow=workflow.name,
        target=workflow.target,
        input=encode({"args": list(args), "kwargs": kwargs}, where=f"input of {where}"),
        created_at=now,
        updated_at=now,
        code_hash=deployment_of(workflow.fn),
        wake_at=run_options.due_at(now) if run_options is not None else None,
        priority=priority,
        group=group_key(options, run_options, args, kwargs),
        queue=options.queue,
        max_attempts=max_attempts,
        max_recoveries=max_recoveries,
        limits=options.limits(),
        retention=recorded_retention(workflow.retention),
    )


def _by_name_record(
    workflow: WorkflowRef[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run_id: str,
    now: float,
) -> RunRecord:
    """The record of a run started by name: what the producer knows, and which options it
    gave (``by_name``); its first driver completes it (``wf.engine._ref.adopt``)."""
    where = f"input of workflow {workflow.name!r}"
    run_options = workflow.run_options or RunOptions()
    return RunRecord(
        id=run_id,
        workflow=workflow.name,
        target=workflow.target,
        input=encode({"args": list(args), "kwargs": kwargs}, where=where),
        created_at=now,
        updated_at=now,
        wake_at=run_options.due_at(now),
        priority=run_options.priority or 0,
        group=run_options.group,
        queue=workflow.queue,
        max_attempts=run_options.max_attempts or 1,
        max_recoveries=run_options.max_recoveries,
        limits=workflow.limits(),
        by_name=workflow.given(),
    )


async def _not_driven(lease: Lease | None) -> RunRecord | None:
    """The drive of an engine that does not drive: a lease handed over is given back, and
    None says, as for a run another process drives, that the run was left alone."""
    if lease is not None:
        await lease.release()
    return None


def _release_if_cancelled(task: asyncio.Task[Any], lease: Lease) -> None:
    if task.cancelled():
        with contextlib.suppress(RuntimeError):  # the loop is closing: the process ends
            asyncio.get_running_loop().create_task(lease.release())


async def start(
    workflow: Workflow[..., Any] | WorkflowRef[Any] | str,
    *args: Any,
    run_id: str | None = None,
    detach: bool = False,
    **kwargs: Any,
) -> Run[Any]:
    """Start a run of ``workflow`` and return its handle.

    ``workflow`` is a ``@wf.workflow``, or a ``wf.ref("module:attr")`` / ``"module:attr"``
    name: a run started by name is created without importing the workflow's module, and the
    worker that drives it imports it and validates the input.

    Outside a workflow the run is driven in this process (in a background task) until it ends or
    suspends, unless ``detach=True`` (then it only waits in the queue for a worker). Starting with
    a ``run_id`` that exists with the same workflow and input returns that run and never runs
    the workflow twice (another workflow or input raises ``wf.RunAlreadyExists``). Inside a
    workflow this starts a child run (see ``wf.engine._child``).
    """
    ctx = current_run()
    if ctx is not None:
        return await start_child(ctx, workflow, args, kwargs, run_id=run_id, detach=detach)
    engine = current_engine()
    return await engine.start(workflow, args, kwargs, run_id=run_id, detach=detach)


def get_run(run_id: str) -> Run[Any]:
    """A handle on an existing run of the current engine (``RunNotFound`` is raised by its
    methods if it is missing). ``wf.get_run`` (``wf._entry``) asks a server instead when one is
    configured."""
    return Run(validate_run_id(run_id), current_engine())
