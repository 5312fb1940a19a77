"""OpenTelemetry for wf: one trace per run across processes, and opt-in metrics.

Needs ``pip install 'wf-durable[otel]'`` (the OpenTelemetry API and SDK) and a tracer provider
set up by the program. wf adds tracing by itself on the first run of an engine when the program
has set a tracer provider (``WF_OTEL=0`` turns that off, ``WF_OTEL=1`` insists);
``instrument()`` does it explicitly, with metrics if asked. Nothing in wf imports this module
unless OpenTelemetry is in use.

Spans (see ``docs/observability.md``):

* ``start <workflow>`` (PRODUCER) where a run is created: ``wf.start``, ``wf run``, a child
  run, a schedule's fire. Its context is stored in the run record (``RunRecord.trace``);
* ``run <workflow>`` (CONSUMER) for each drive of the run, whichever process drives it and
  however much later: a *child* of the producer span, so the whole life of a run, its child
  runs included, is one trace. Retries, sleeps, hook waits, child runs, suspensions and
  resumptions are events on it; a failure sets its status and records the exception;
* ``send hook`` / ``send cancel`` / ``send wake`` (PRODUCER) where a message is posted to a run
  (``wf.resume_hook``, ``run.cancel()``...), in the sender's trace; the drive that applies the
  message *links* to it (a link, not a parent: the run has its own trace);
* ``step <name>`` for each step attempt, a child of the drive span. The step's code runs with
  it current (``opentelemetry.trace.get_current_span()`` works there, in sync steps' threads
  too); a failed attempt records its exception.

Metrics (``metrics=True``) on the program's ``MeterProvider``: ``wf.runs.started``,
``wf.runs.completed``, ``wf.runs.failed``, ``wf.runs.cancelled`` (counters by ``wf.workflow``),
``wf.run.duration`` and ``wf.step.duration`` (histograms, seconds), ``wf.step.retries``,
and the gauges ``wf.queue.depth`` and ``wf.queue.oldest_age`` (seconds) per workflow and group,
sampled by workers every ``queue_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wf._extras import extra_needed, missing_extra

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ModuleNotFoundError as missing:  # the line a user sees names the install
    if missing_extra(missing) != "otel":
        raise
    raise extra_needed(missing, "otel", "wf.otel") from missing

import wf
from wf.engine._errors import describe_error
from wf.engine._instruments import DriveObserver, Instrument, StepObserver
from wf.store import Event, InboxMessage, QueueStats, RunRecord, RunStatus, Store

if TYPE_CHECKING:
    from wf.engine._context import StepContext
    from wf.engine._engine import Engine
    from wf.engine._enginelike import EngineLike

__all__ = ["OtelInstrument", "instrument"]

RUN_ID = "wf.run.id"
WORKFLOW = "wf.workflow"
STEP = "wf.step"
ATTEMPT = "wf.step.attempt"
OP = "wf.step.op"
GROUP = "wf.group"


def instrument(
    engine: Engine | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: otel_metrics.MeterProvider | None = None,
    traces: bool = True,
    metrics: bool = False,
    queue_interval: float = 15.0,
) -> OtelInstrument:
    """Trace (and with ``metrics=True``, measure) the runs of ``engine`` (default: the current
    engine). Providers default to the global ones set by the program's SDK. Replaces an
    instrument added by an earlier call, so calling it twice does not trace twice."""
    from wf.engine._current import current_engine

    target: EngineLike = engine or current_engine()
    made = OtelInstrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        traces=traces,
        metrics=metrics,
        queue_interval=queue_interval,
    )
    target.instruments[:] = [i for i in target.instruments if not isinstance(i, OtelInstrument)]
    target.add_instrument(made)
    return made


log = logging.getLogger("wf.otel")

_warned: weakref.WeakSet[object] = weakref.WeakSet()
"""Providers already warned about (once each: every engine of a process shares the provider)."""

_QUICK_EXPORTERS = ("ConsoleSpanExporter", "InMemorySpanExporter")
"""Exporters that only write to memory or the console: exporting inline costs nothing much."""


def _warn_inline_export(provider: object) -> None:
    """Warn once when ``provider`` exports spans inline (an SDK ``SimpleSpanProcessor`` with a
    network exporter): every ``span.end()`` then waits for the export on the event loop that
    drives every run of the process. Best effort: it reads the SDK's processor list, and
    says nothing when that is not there."""
    export = sys.modules.get("opentelemetry.sdk.trace.export")
    if export is None:
        return
    try:
        if provider in _warned:
            return
        processors = getattr(
            getattr(provider, "_active_span_processor", None), "_span_processors", ()
        )
        for processor in processors:
            if not isinstance(processor, export.SimpleSpanProcessor):
                continue
            exporter = type(getattr(processor, "span_exporter", None))
            if exporter.__name__ in _QUICK_EXPORTERS:
                continue
            _warned.add(provider)
            log.warning(
                "spans are exported inline by a SimpleSpanProcessor(%s): a slow exporter slows "
                "every run of this process and a blocked one stalls them all; use a "
                "BatchSpanProcessor (docs/observability.md)",
                exporter.__name__,
            )
            return
    except TypeError:  # a provider that cannot be weakly referenced: no warning
        return


def _attributes(record: RunRecord) -> dict[str, Any]:
    found: dict[str, Any] = {RUN_ID: record.id, WORKFLOW: record.workflow}
    if record.group is not None:
        found[GROUP] = record.group
    if record.parent_id is not None:
        found["wf.parent.run_id"] = record.parent_id
    if record.schedule_id is not None:
        found["wf.schedule.id"] = record.schedule_id  # started by a schedule's fire
    return found


def _fail(span: Span, error: Mapping[str, Any] | None) -> None:
    """Set the span's status from a recorded error (a dict: the error may come from another
    process, or from a journal, where only its description survives). An exception at hand
    goes through ``describe_error`` too, never ``span.record_exception``: its message and
    traceback are then bounded (``KEPT``) and UTF-8 (lone surrogates escaped), where a raw one
    could be megabytes, or break the exporter's encoding."""
    error = error or {}
    kind = str(error.get("type") or "Exception")
    message = str(error.get("message") or "")
    attributes = {"exception.type": kind, "exception.message": message}
    if error.get("traceback"):
        attributes["exception.stacktrace"] = str(error["traceback"])
    span.add_event("exception", attributes)
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}" if message else kind))


class _Drive(DriveObserver):
    """The span of one drive; current in the workflow's context while it lives."""

    def __init__(self, owner: OtelInstrument, record: RunRecord, resuming: bool) -> None:
        self._owner = owner
        self._workflow = record.workflow
        self._span: Span | None = None
        self._token: object | None = None
        if owner.tracer is not None:
            parent = propagate.extract(record.trace) if record.trace else otel_context.get_current()
            attributes = _attributes(record)
            attributes["wf.run.resumes"] = record.resumes + (1 if resuming else 0)
            span = owner.tracer.start_span(
                f"run {record.workflow}", parent, SpanKind.CONSUMER, attributes
            )
            self._span = span
            self._token = otel_context.attach(trace.set_span_in_context(span, parent))

    def on_events(self, events: Sequence[Event]) -> None:
        span = self._span
        for event in events:
            kind = event.get("type")
            if kind == "step_retrying":
                owner = self._owner
                if owner.retries is not None:
                    owner.retries.add(1, {WORKFLOW: self._workflow, STEP: str(event.get("name"))})
                if span is not None:
                    error = event.get("error") or {}
                    span.add_event(
                        "step retrying",
                        {
                            STEP: str(event.get("name")),
                            ATTEMPT: int(event.get("attempt", 0)),
                            "wf.retry_at": float(event.get("retry_at", 0.0)),
                            "exception.type": str(error.get("type", "")),
                            "exception.message": str(error.get("message", "")),
                        },
                    )
            elif span is not None:
                described = _EVENTS.get(kind)  # type: ignore[arg-type]
                if described is not None:
                    name, fields = described
                    span.add_event(
                        name,
                        {f"wf.{k}": _plain(event[k]) for k in fields if event.get(k) is not None},
                    )

    def on_message(self, message: InboxMessage) -> None:
        span = self._span
        carrier = message.data.get("trace") if span is not None else None
        if span is None or not isinstance(carrier, dict):
            return
        # The sender's span (``send hook``...) is in another trace: link it to this drive.
        sent = trace.get_current_span(propagate.extract(carrier)).get_span_context()
        if sent.is_valid:
            span.add_link(sent, {"wf.message.kind": message.kind})

    def on_end(self, record: RunRecord | None, error: BaseException | None) -> None:
        span = self._span
        if span is None:
            return
        try:
            if error is not None:
                if isinstance(error, asyncio.CancelledError):
                    span.add_event("driver stopped")
                else:
                    _fail(span, describe_error(error))
            elif record is not None:
                span.set_attribute("wf.run.status", record.status.value)
                if record.status is RunStatus.SUSPENDED:
                    attributes: dict[str, Any] = {"wf.waiting_for": record.waiting_for or ""}
                    if record.wake_at is not None:
                        attributes["wf.wake_at"] = record.wake_at
                    span.add_event("suspended", attributes)
                elif record.status is RunStatus.FAILED:
                    _fail(span, record.error)
                elif record.status is RunStatus.CANCELLED:
                    span.add_event("cancelled")
                # A completed run leaves the status unset (``_Step.on_end`` says why).
        finally:
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            span.end()


_EVENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "run_resumed": ("resumed", ("resumes",)),
    "sleep_started": ("sleep", ("until",)),
    "hook_created": ("hook created", ("token",)),
    "hook_waiting": ("hook wait", ("name",)),
    "hook_payload": ("hook received", ("token",)),
    "child_started": ("child started", ("child", "name")),
    "child_finished": ("child finished", ("child", "status")),
    "step_failed": ("step failed", ("name", "attempt")),
    "cancel_requested": ("cancel requested", ()),
    "wake_requested": ("wake requested", ()),
    "timeout_started": ("timeout", ("until",)),
}
"""Journal events shown on the drive span: event name, and the fields kept as attributes."""


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | bool | int | float) else str(value)


class _Step(StepObserver):
    """The span of one step attempt, current in the step's context (and its thread).

    Made for every step attempt while tracing is on: the SDK's span itself is most of the
    cost, so this adds as little as it can around it (no clock read without the duration
    histogram, the parent context read once)."""

    __slots__ = ("_began", "_owner", "_span", "_step", "_token")

    def __init__(
        self, owner: OtelInstrument, tracer: trace.Tracer | None, step: StepContext
    ) -> None:
        self._owner = owner
        self._step = step
        self._began = time.perf_counter() if owner.step_duration is not None else 0.0
        self._span: Span | None = None
        self._token: object | None = None
        if tracer is not None:
            attributes = _attributes(step.run.record)
            attributes[STEP] = step.name
            attributes[ATTEMPT] = step.attempt
            attributes[OP] = step.op
            parent = otel_context.get_current()  # the drive's span, or the caller's
            span = tracer.start_span(f"step {step.name}", parent, attributes=attributes)
            self._span = span
            self._token = otel_context.attach(trace.set_span_in_context(span, parent))

    def on_end(self, error: BaseException | None) -> None:
        duration = self._owner.step_duration
        if duration is not None:
            step = self._step
            duration.record(
                time.perf_counter() - self._began,
                {
                    WORKFLOW: step.run.record.workflow,
                    STEP: step.name,
                    "wf.outcome": _outcome(error),
                },
            )
        span = self._span
        if span is None:
            return
        try:
            # Success leaves the status unset, as OpenTelemetry asks of instrumentation (Ok is
            # the application's to set, and final): setting it here would also overwrite an
            # ERROR the step's own code set on its span.
            if isinstance(error, Exception):
                _fail(span, describe_error(error))
            elif error is not None:
                span.add_event("interrupted", {"exception.type": type(error).__name__})
        finally:
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            span.end()


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    return "error" if isinstance(error, Exception) else "interrupted"


class OtelInstrument(Instrument):
    """Traces and measures an engine's runs with OpenTelemetry (see the module docstring)."""

    is_wf_otel = True

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: otel_metrics.MeterProvider | None = None,
        traces: bool = True,
        metrics: bool = False,
        queue_interval: float = 15.0,
    ) -> None:
        version = wf.__version__
        self.tracer: trace.Tracer | None = (
            trace.get_tracer("wf", version, tracer_provider) if traces else None
        )
        if traces:
            _warn_inline_export(tracer_provider or trace.get_tracer_provider())
        self.queue_interval = queue_interval
        self._queue: list[QueueStats] = []
        self._sampled_at: float | None = None
        self._queue_at = 0.0
        self._now = time.time
        self.started: otel_metrics.Counter | None = None
        self.retries: otel_metrics.Counter | None = None
        self.step_duration: otel_metrics.Histogram | None = None
        self._ended: dict[RunStatus, otel_metrics.Counter] = {}
        self._run_duration: otel_metrics.Histogram | None = None
        if not metrics:
            return
        meter = otel_metrics.get_meter("wf", version, meter_provider)
        self.started = meter.create_counter(
            "wf.runs.started", "{run}", "Runs started (enqueued) by this process"
        )
        for status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
            self._ended[status] = meter.create_counter(
                f"wf.runs.{status.value}", "{run}", f"Runs that ended {status.value}"
            )
        self._run_duration = meter.create_histogram(
            "wf.run.duration", "s", "From a run's creation to its outcome"
        )
        self.step_duration = meter.create_histogram(
            "wf.step.duration", "s", "Duration of each step attempt"
        )
        self.retries = meter.create_counter("wf.step.retries", "{retry}", "Step retries scheduled")
        meter.create_observable_gauge(
            "wf.queue.depth", [self._depth], "{run}", "Runs due and waiting for a driver"
        )
        meter.create_observable_gauge(
            "wf.queue.oldest_age", [self._oldest_age], "s", "How long the oldest due run has waited"
        )

    # -- the instrument ---------------------------------------------------------------------

    def on_start(self, record: RunRecord) -> None:
        tracer = self.tracer
        if tracer is None:
            return
        span = tracer.start_span(
            f"start {record.workflow}", kind=SpanKind.PRODUCER, attributes=_attributes(record)
        )
        try:
            carrier: dict[str, str] = {}
            propagate.inject(carrier, trace.set_span_in_context(span))
            record.trace = carrier or None
        finally:
            span.end()

    def on_created(self, record: RunRecord) -> None:
        # Counted where the run is enqueued (wf.start, wf run, a child, a schedule's fire):
        # runs queued and not driven yet count too, and a run is counted once however many
        # processes drive it.
        if self.started is not None:
            self.started.add(1, {WORKFLOW: record.workflow})

    def on_drive(self, record: RunRecord, resuming: bool) -> DriveObserver | None:
        return _Drive(self, record, resuming)

    def on_send(self, run_id: str, kind: str, data: dict[str, Any]) -> None:
        tracer = self.tracer
        if tracer is None:
            return
        attributes = {RUN_ID: run_id, "wf.message.kind": kind}
        if kind == "hook":
            attributes["wf.hook.token"] = str(data.get("token"))
        span = tracer.start_span(f"send {kind}", kind=SpanKind.PRODUCER, attributes=attributes)
        try:
            carrier: dict[str, str] = {}
            propagate.inject(carrier, trace.set_span_in_context(span))
            if carrier:
                data["trace"] = carrier
        finally:
            span.end()

    def on_step(self, step: StepContext) -> StepObserver | None:
        tracer = self.tracer
        if tracer is None and self.step_duration is None:
            return None
        return _Step(self, tracer, step)

    def on_outcome(self, record: RunRecord) -> None:
        counter = self._ended.get(record.status)
        if counter is None:
            return
        attributes = {WORKFLOW: record.workflow}
        counter.add(1, attributes)
        if self._run_duration is not None:
            took = max(0.0, record.updated_at - record.created_at)
            self._run_duration.record(took, {**attributes, "wf.run.status": record.status.value})

    async def on_poll(self, engine: EngineLike) -> None:
        if self.started is None:
            return
        now = time.monotonic()
        if self._sampled_at is not None and now - self._sampled_at < self.queue_interval:
            return
        self._sampled_at = now
        await self.sample_queue(engine.store, engine.clock.now())

    # -- queue gauges -----------------------------------------------------------------------

    async def sample_queue(self, store: Store, now: float | None = None) -> list[QueueStats]:
        """Read the queue's depth and oldest due run now (workers do it every
        ``queue_interval`` seconds); the gauges report this sample until the next."""
        at = self._now() if now is None else now
        self._queue = await store.queue_stats(at)
        self._queue_at = at
        return self._queue

    def _queue_attributes(self, stats: QueueStats) -> dict[str, Any]:
        found: dict[str, Any] = {WORKFLOW: stats.workflow}
        if stats.group is not None:
            found[GROUP] = stats.group
        return found

    def _depth(self, _options: otel_metrics.CallbackOptions) -> Iterable[otel_metrics.Observation]:
        return [otel_metrics.Observation(s.depth, self._queue_attributes(s)) for s in self._queue]

    def _oldest_age(
        self, _options: otel_metrics.CallbackOptions
    ) -> Iterable[otel_metrics.Observation]:
        at = self._queue_at
        return [
            otel_metrics.Observation(max(0.0, at - s.oldest_due_at), self._queue_attributes(s))
            for s in self._queue
        ]
