"""Durable time and randomness inside a workflow: ``sleep``, ``sleep_until``, ``now``, ``random``,
``uuid4``. Each takes its operation id when called, so it replays in program order."""

from __future__ import annotations

import datetime as _dt
import math
import os
import random as _random
import uuid as _uuid
from collections.abc import Awaitable
from typing import Any

from wf._exceptions import UsageError
from wf.engine._context import RunContext, require_run
from wf.engine._durations import due_after, wait_seconds
from wf.engine._futures import OpCall, op_task
from wf.store._limits import check_at


def _timestamp(when: _dt.datetime) -> float:
    if not isinstance(when, _dt.datetime):
        raise UsageError(f"wf.sleep_until needs a datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise UsageError("wf.sleep_until needs a timezone-aware datetime (e.g. tzinfo=UTC)")
    return check_at("wf.sleep_until", when)


def sleep(duration: float | _dt.timedelta) -> Awaitable[None]:
    """Durably sleep: after a crash or suspension, only the remainder is waited.

    ``duration`` is seconds or a ``timedelta`` (a negative one is no wait); NaN, infinity or
    a wake time past 9999-12-31 is a ``wf.UsageError``, raised here."""
    seconds = wait_seconds("wf.sleep", duration)
    ctx = require_run("wf.sleep()")
    due_after("wf.sleep", ctx.clock.now(), seconds)  # refused at the call, not when awaited
    return _start_sleep(ctx, lambda: ctx.clock.now() + max(0.0, seconds))


def sleep_until(when: _dt.datetime) -> Awaitable[None]:
    """Durably sleep until a timezone-aware datetime."""
    deadline = _timestamp(when)
    ctx = require_run("wf.sleep_until()")
    return _start_sleep(ctx, lambda: deadline)


def _start_sleep(ctx: RunContext, deadline_of: Any) -> OpCall[None]:
    op, history = ctx.begin_op("sleep", "sleep")
    return OpCall(
        lambda: op_task(_sleep(ctx, op, history, deadline_of)),
        "wf.sleep() call",
        "wf.sleep(...)",
        run=ctx,
    )


async def _sleep(ctx: RunContext, op: int, history: Any, deadline_of: Any) -> None:
    if history is None:
        deadline = float(deadline_of())
        if ctx.wake_pending:
            ctx.wake_pending = False  # woken before it began: it is over as it starts
            deadline = min(deadline, ctx.clock.now())
        started = await ctx.write(ctx.event("sleep_started", op=op, name="sleep", until=deadline))
        if any(mark > started for mark in ctx.wake_marks):
            # A wake request was taken in while the start was being recorded, before this sleep
            # waited: it follows the start in the journal, so the sleep is over (as a replay
            # finds it), and it is not left pending for the next sleep.
            ctx.wake_pending = False
            ctx.mark_done_at(min(deadline, ctx.clock.now()))
            return
    else:
        recorded = history.events[0]["until"]
        # None: no deadline, ``wf.sleep(inf)`` of a wf before it refused infinity (JSON has
        # none, so it was written null). It sleeps until a wake or a cancel ends it.
        deadline = math.inf if recorded is None else float(recorded)
        woken = ctx.sleep_woken_at(op)
        if woken is not None:
            # Ended by the wake request, when it was recorded (or at its deadline, if sooner),
            # however late this drive replays it.
            ctx.mark_done_at(min(deadline, woken))
            return
    if deadline == math.inf:
        await ctx.wait(op, "sleep", None, None)
    elif deadline > ctx.clock.now():
        await ctx.wait(op, "sleep", None, deadline)
    # By the durable clock a timer ends at its deadline, however late it is noticed (a run
    # resumed after it); a wake request ends it earlier.
    ctx.mark_done_at(min(deadline, ctx.clock.now()))


def _recorded_value(name: str, make: Any) -> Any:
    ctx = require_run(f"wf.{name}()")
    op, history = ctx.begin_op("value", name)
    if history is not None:
        return history.events[0]["value"]
    value = make(ctx)
    ctx.write_soon({"type": "value_recorded", "op": op, "name": name, "value": value})
    return value


def now() -> _dt.datetime:
    """The current time (UTC, aware), recorded so replay sees the same value."""
    stamp = _recorded_value("now", lambda ctx: ctx.clock.now())
    return _dt.datetime.fromtimestamp(stamp, _dt.UTC)


def random() -> float:
    """A random float in [0, 1), recorded so replay sees the same value."""
    return float(_recorded_value("random", lambda ctx: _random.random()))


def uuid4() -> _uuid.UUID:
    """A random UUID, recorded so replay sees the same value."""
    return _uuid.UUID(
        _recorded_value("uuid4", lambda ctx: str(_uuid.UUID(bytes=os.urandom(16), version=4)))
    )
