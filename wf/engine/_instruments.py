"""Instruments: how tracing, metrics and tools observe the engine without subclassing it.

An ``Instrument`` is registered with an ``Engine`` (``Engine(instruments=[...])`` or
``engine.add_instrument(...)``). The engine calls it at a few points of a run's life:

* ``on_start(record)``: this process is about to create a run (the record is not stored yet, so
  an instrument may put propagation data in ``record.trace``: the producer side of a trace);
* ``on_created(record)``: that run is now stored (a start that found the run existing already,
  an idempotent retry, does not call it): counting runs started here, at enqueue;
* ``on_drive(record, resuming)``: a drive of the run begins here; the returned ``DriveObserver``
  sees every journal event the drive writes and how the drive ended;
* ``on_step(step)``: a step attempt begins, in the step's own context (so a span made current
  here is current in the step's code, threads included); the returned ``StepObserver`` is told
  how the attempt ended;
* ``on_outcome(record)``: a run driven here ended (once per run);
* ``on_send(run_id, kind, data)``: this process is about to post a message to a run (a hook
  payload, a cancel, a wake-up); an instrument may add propagation data to ``data["trace"]``,
  and the drive that applies it sees it in ``DriveObserver.on_message``;
* ``on_poll(engine)``: a worker is about to look at the queue (sampling queue depth).

Every method has a do-nothing default: override only what you need. An engine without
instruments pays one truth test per operation (``if engine.instruments``), nothing more; the
OpenTelemetry implementation lives in ``wf.otel`` and is imported only when used.

Instruments must not raise: an error in one is logged and otherwise ignored, never allowed to
fail a run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.engine._context import StepContext
    from wf.engine._enginelike import EngineLike
    from wf.store import Event, InboxMessage, RunRecord

log = logging.getLogger("wf.instruments")


class DriveObserver:
    """Observes one drive of a run (from ``Instrument.on_drive``)."""

    __slots__ = ()

    def on_events(self, events: Sequence[Event]) -> None:
        """Journal events this drive is writing (``step_retrying``, ``sleep_started``...)."""

    def on_message(self, message: InboxMessage) -> None:
        """This drive applies a message posted to the run (a hook payload, a cancel...)."""

    def on_end(self, record: RunRecord | None, error: BaseException | None) -> None:
        """The drive ended: ``record`` as it left it (suspended, ended, evicted), or ``error``
        when the drive itself failed (a store error; the run stays due)."""


class StepObserver:
    """Observes one step attempt (from ``Instrument.on_step``)."""

    __slots__ = ()

    def on_end(self, error: BaseException | None) -> None:
        """The attempt ended: ``error`` is what it raised, None when it returned."""


class Instrument:
    """Observes an engine. Subclass and override what you need; see the module docstring."""

    def on_start(self, record: RunRecord) -> None:
        """A run is about to be created by this process (``wf.start``, ``wf run``, a child)."""

    def on_created(self, record: RunRecord) -> None:
        """The run ``on_start`` announced is stored now (not called when it existed already)."""

    def on_drive(self, record: RunRecord, resuming: bool) -> DriveObserver | None:
        """A drive of the run begins (``resuming``: its journal holds more than its start)."""
        return None

    def on_step(self, step: StepContext) -> StepObserver | None:
        """A step attempt begins; called in the step's context, just before its code runs."""
        return None

    def on_outcome(self, record: RunRecord) -> None:
        """A run driven here ended (its outcome is recorded)."""

    def on_send(self, run_id: str, kind: str, data: dict[str, Any]) -> None:
        """This process is about to post message ``kind`` with ``data`` to run ``run_id``."""

    async def on_poll(self, engine: EngineLike) -> None:
        """A worker is about to look at the queue of ``engine.store``."""


# -- fan-out helpers used by the kernel (only called when an instrument is registered) -------


def report(error: BaseException, what: str) -> None:
    log.warning("instrument failed in %s: %r", what, error, exc_info=error)


def start(instruments: Sequence[Instrument], record: RunRecord) -> None:
    for instrument in instruments:
        try:
            instrument.on_start(record)
        except Exception as exc:
            report(exc, "on_start")


def created(instruments: Sequence[Instrument], record: RunRecord) -> None:
    for instrument in instruments:
        try:
            instrument.on_created(record)
        except Exception as exc:
            report(exc, "on_created")


def drive(
    instruments: Sequence[Instrument], record: RunRecord, resuming: bool
) -> list[DriveObserver]:
    observers: list[DriveObserver] = []
    for instrument in instruments:
        try:
            observer = instrument.on_drive(record, resuming)
        except Exception as exc:
            report(exc, "on_drive")
            continue
        if observer is not None:
            observers.append(observer)
    return observers


def events(observers: Sequence[DriveObserver], written: Sequence[Event]) -> None:
    for observer in observers:
        try:
            observer.on_events(written)
        except Exception as exc:
            report(exc, "on_events")


def message(observers: Sequence[DriveObserver], applied: InboxMessage) -> None:
    for observer in observers:
        try:
            observer.on_message(applied)
        except Exception as exc:
            report(exc, "on_message")


def send(instruments: Sequence[Instrument], run_id: str, kind: str, data: dict[str, Any]) -> None:
    for instrument in instruments:
        try:
            instrument.on_send(run_id, kind, data)
        except Exception as exc:
            report(exc, "on_send")


def drive_ended(
    observers: Sequence[DriveObserver], record: RunRecord | None, error: BaseException | None
) -> None:
    # In reverse: an observer that made something current (a span) undoes it last-in-first-out.
    for observer in reversed(observers):
        try:
            observer.on_end(record, error)
        except Exception as exc:
            report(exc, "on_end")


def step(instruments: Sequence[Instrument], context: StepContext) -> list[StepObserver]:
    observers: list[StepObserver] = []
    for instrument in instruments:
        try:
            observer = instrument.on_step(context)
        except Exception as exc:
            report(exc, "on_step")
            continue
        if observer is not None:
            observers.append(observer)
    return observers


def step_ended(observers: Sequence[StepObserver], error: BaseException | None) -> None:
    for observer in reversed(observers):
        try:
            observer.on_end(error)
        except Exception as exc:
            report(exc, "on_end")


def outcome(instruments: Sequence[Instrument], record: RunRecord) -> None:
    for instrument in instruments:
        try:
            instrument.on_outcome(record)
        except Exception as exc:
            report(exc, "on_outcome")


async def poll(instruments: Sequence[Instrument], engine: EngineLike) -> None:
    for instrument in instruments:
        try:
            await instrument.on_poll(engine)
        except Exception as exc:
            report(exc, "on_poll")
