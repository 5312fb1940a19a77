"""What a worker keeps between its passes over the schedules (``_schedules.fire_due``), so that
one schedule's trouble stays with it.

A schedule left due (another process holds its lock, its workflow's module is still importing,
its fire raised) is looked at again after ``BUSY_RETRY`` seconds, then twice as long each time
up to ``RETRY_MAX``: not on every pass. A workflow's module the worker has not imported is
imported in a thread of its own, waited for ``IMPORT_WAIT`` seconds at most, and left to finish
meanwhile. A fire's error is logged once per distinct error, then once every ``ERROR_REPEAT``
seconds (the schedule's ``last_error`` has it each time).
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from wf.engine._clock import thread_work
from wf.engine._workflow import (
    Workflow,
    _registry,
    imported,
    resolve_workflow,
    resolve_workflow_off_loop,
)
from wf.store import Schedule

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

BUSY_RETRY = 0.05
"""Seconds before looking again at a due schedule another process is firing (or one left due:
its workflow's module still importing, a fault); doubled at each look that finds it so, up to
``RETRY_MAX``."""
RETRY_MAX = 5.0
FIRE_CONCURRENCY = 8
"""Schedules one worker fires at once (each in a task of its own) when many are due together."""
IMPORT_WAIT = 0.2
"""Seconds (real time: the import runs in a thread) a fire waits for its workflow's module to
import before leaving the schedule due, to be looked at again later, the import going on."""
ERROR_REPEAT = 3600.0
"""Seconds before a schedule's same fire error is logged again (its ``last_error`` has it)."""


class Firing:
    """What one worker keeps between its passes over the schedules, so that one schedule's
    fault stays with it: when each schedule left due is looked at again (backing off), the
    imports of workflows' modules under way, and which fire errors were logged when."""

    def __init__(self) -> None:
        self._retry: dict[str, tuple[float, float]] = {}  # id -> (next look, delay)
        self._said: dict[str, tuple[str, float]] = {}  # id -> (error, logged at)
        self._loading: dict[tuple[str, str], tuple[float, asyncio.Future[Any], int]] = {}
        self._pass = 0

    def waiting(self, schedule_id: str, now: float) -> float | None:
        """The time of the next look at a schedule left due, if that is still to come."""
        retry = self._retry.get(schedule_id)
        return retry[0] if retry is not None and retry[0] > now else None

    def back_off(self, schedule_id: str, now: float) -> float:
        """A schedule is still due after a look: the time of the next one."""
        last = self._retry.get(schedule_id)
        delay = BUSY_RETRY if last is None else min(last[1] * 2, RETRY_MAX)
        self._retry[schedule_id] = (now + delay, delay)
        return now + delay

    def fired(self, schedule_id: str) -> None:
        """A schedule is no longer due: its next look is at its next fire."""
        self._retry.pop(schedule_id, None)

    def say(self, schedule_id: str, error: str, now: float) -> bool:
        """Whether to log a schedule's error: once per distinct error, then once an hour."""
        said = self._said.get(schedule_id)
        if said is not None and said[0] == error and now - said[1] < ERROR_REPEAT:
            return False
        self._said[schedule_id] = (error, now)
        return True

    def ok(self, schedule_id: str) -> None:
        """A fire worked: the schedule's next error is said at once."""
        self._said.pop(schedule_id, None)

    async def loading(self, engine: EngineLike, found: Schedule) -> float | None:
        """Seconds the import of the schedule's workflow's module has been going on, if it is
        still going after ``IMPORT_WAIT``; None when the workflow can be resolved at once
        (declared, imported, or its import failed: ``resolve`` says how).

        The import runs in a thread of its own and is left to finish when it takes longer: a
        module that never finishes importing holds no lock and blocks no other schedule."""
        target = found.target
        if not target:
            return None
        from wf._loader import load_off_loop

        key = (found.workflow, target)
        now = engine.clock.now()
        entry = self._loading.get(key)
        if entry is not None and entry[1].done() and entry[2] != self._pass:
            del self._loading[key]  # one of an earlier pass: look again, as each fire did
            entry = None
        if entry is None:
            if imported(_registry.get(found.workflow)):
                return None
            # Not declared yet, or declared by a module another thread is still importing (the
            # rest of the module is not there yet, and resolving would wait for all of it):
            # import it here, waited for only so long.
            future = load_off_loop(resolve_workflow, found.workflow, target)
            entry = self._loading[key] = (now, future, self._pass)
        started, future, _ = entry
        with thread_work(engine.clock):
            await asyncio.wait([future], timeout=IMPORT_WAIT)
        if not future.done():
            return max(IMPORT_WAIT, engine.clock.now() - started)
        if not future.cancelled():
            future.exception()  # retrieved: ``resolve`` raises it
        return None

    async def resolve(self, found: Schedule) -> Workflow[Any, Any]:
        """The schedule's workflow, after ``loading`` said it is no longer loading."""
        entry = self._loading.get((found.workflow, found.target or ""))
        if entry is not None and entry[1].done():
            workflow: Workflow[Any, Any] = entry[1].result()  # or the import's error
            return workflow
        return await resolve_workflow_off_loop(found.workflow, found.target)

    def next_pass(self, listed: list[Schedule]) -> int:
        """Start a pass over the ``listed`` (due) schedules: where in the list to begin (workers
        begin at different places, so those racing for many due fires mostly take different
        ones). A schedule no longer listed is no longer due: its backing off is forgotten."""
        self._pass += 1
        ids = {found.id for found in listed}
        for gone in [key for key in self._retry if key not in ids]:
            del self._retry[gone]
        return random.randrange(len(listed)) if listed else 0
