"""Serving runs during ``wf dev``: an engine that reports its drives, and a worker that can be
drained and started again around each reload."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Collection, Sequence

from wf.dev._events import (
    DevEvent,
    Diverged,
    Drained,
    DrainWaiting,
    RunCrossed,
    RunEnded,
    RunError,
    RunStarted,
    RunSuspended,
    Sink,
)
from wf.engine._current import use_engine
from wf.engine._engine import Engine
from wf.engine._worker import Worker, abandon_drives
from wf.store import Lease, RunRecord, RunStatus, Store

_TELL_AFTER = 1.0
"""A drain still waiting after this many seconds says which steps it waits for."""
_TELL_EVERY = 10.0
"""... and says it again this often while it waits."""
_EVICT_EVERY = 0.02
"""While draining, how often runs that became live after the drain began are evicted too."""


@dataclasses.dataclass(frozen=True)
class RunningStep:
    """A step attempt in flight in a run driven here."""

    run_id: str
    op: int
    name: str
    since: float
    """``time.monotonic()`` when the attempt began."""

    @property
    def text(self) -> str:
        """``step 'name' of RUN_ID``."""
        return f"step {self.name!r} of {self.run_id}"


class DevEngine(Engine):
    """An engine that tells the dev loop when it starts and ends driving a run."""

    def __init__(self, store: Store, sink: Sink) -> None:
        from wf._config import deployment_setting, max_recoveries_setting, step_threads_setting

        super().__init__(
            store,
            max_recoveries=max_recoveries_setting(),
            deployment=deployment_setting(),
            step_threads=step_threads_setting(),
        )
        self._sink = sink
        self.any_deployment = True  # the current code by definition: every run
        self._began: dict[str, float] = {}
        self._seen: set[str] = set()
        self.draining = False
        self.interrupted: set[str] = set()
        """Runs whose driver was cancelled during the last drain (a step outlived the grace)."""
        self.drives = 0
        """Drives of a run that ended here (completed, failed, suspended...)."""
        self.held: set[str] = set()
        """Runs that no longer replay on the current code: not driven here (see ``hold``)."""
        self.on_finished(self._finished)
        self.on_crossing(lambda record: sink(RunCrossed(record.id, record.deployment or "")))

    def emit(self, event: DevEvent) -> None:
        """Tell the console (the loop's sink)."""
        self._sink(event)

    def new_generation(self) -> None:
        """A reload happened: a run driven from now on counts as started again."""
        self._seen.clear()

    def hold(self, checked: Collection[str], problems: Sequence[DevEvent]) -> None:
        """After a reload's replay check: hold the runs that diverge from the new code, and
        release the checked ones that replay again (an edit reverted, a ``wf.patched``).

        A held run is left where it is instead of being resumed here, where it would fail at
        once with ``NondeterminismError`` (a drain leaves runs due at once): it waits for the
        code to replay it again, or for ``wf cancel``. Runs not checked this time keep their
        state (their modules did not change).
        """
        self.held -= set(checked)
        self.held |= {p.run_id for p in problems if isinstance(p, Diverged)}

    def drive_soon(
        self, run_id: str, *, lease: Lease | None = None
    ) -> asyncio.Task[RunRecord | None]:
        """Drive the run (see ``Engine.drive_soon``), reporting it; a held run is not driven
        (the task returns None, as for a run another process drives)."""
        if run_id in self.held:
            return asyncio.get_running_loop().create_task(_not_driven(lease))
        known = self.drivers.get(run_id)
        task = super().drive_soon(run_id, lease=lease)
        if task is not known:
            self._began[run_id] = time.monotonic()
            if run_id not in self._seen:
                self._seen.add(run_id)
                self._sink(RunStarted(run_id))
            task.add_done_callback(lambda t: self._drive_ended(run_id, t))
        return task

    def _finished(self, record: RunRecord) -> None:
        began = self._began.get(record.id)
        took = None if began is None else time.monotonic() - began
        status = record.status.value
        self._sink(RunEnded(record.id, record.workflow, status, record.output, record.error, took))

    def _drive_ended(self, run_id: str, task: asyncio.Task[RunRecord | None]) -> None:
        self._began.pop(run_id, None)
        if task.cancelled():
            if self.draining:
                self.interrupted.add(run_id)
            return
        error = task.exception()
        if error is not None:
            self._sink(RunError(run_id, f"{type(error).__name__}: {error}"))
            return
        record = task.result()
        if record is not None:
            self.drives += 1
        # None: another process drives it. Terminal: reported by on_finished. Suspended by a
        # drain: reported with the drain.
        if record is not None and record.status is RunStatus.SUSPENDED and not self.draining:
            from wf.admin._words import waiting_text  # the words every front end uses

            waits = waiting_text(record.waiting_for) or None
            self._sink(RunSuspended(record.id, record.workflow, waits, record.wake_at))


async def _not_driven(lease: Lease | None = None) -> RunRecord | None:
    if lease is not None:
        await lease.release()  # claimed by the worker, but held back here
    return None


class WorkerHost:
    """One worker at a time over the dev engine: started on the current code, drained before
    a reload."""

    def __init__(
        self,
        engine: DevEngine,
        *,
        concurrency: int,
        grace: float,
        restart_hint: str | None = None,
    ) -> None:
        self.engine = engine
        self.concurrency = concurrency
        self.grace = grace
        self.restart_hint = restart_hint
        """How the user restarts the steps a drain waits for (shown while it waits)."""
        self._worker: Worker | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Whether a worker is serving."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start a worker (a fresh one: a stopped worker cannot be restarted)."""
        if self.running:
            return

        def on_error(run_id: str, error: BaseException) -> None:
            return None  # reported by the engine's drive callback, once

        # The current code by definition: every run, whatever deployment it is pinned to.
        worker = Worker(
            self.engine, concurrency=self.concurrency, on_error=on_error, any_deployment=True
        )
        with use_engine(self.engine):
            self._task = asyncio.get_running_loop().create_task(worker.serve(grace=self.grace))
        self._worker = worker

    async def drain(self, *, stopping: bool = False) -> Drained:
        """Stop the worker: running steps finish (up to the grace period), then every run in
        flight suspends at its next durable operation, due at once for the next worker.
        ``stopping``: for ``wf dev`` to end, not for a reload (said so while it waits)."""
        began = time.monotonic()
        engine = self.engine
        live = set(engine.live)
        engine.draining = True
        engine.interrupted.clear()
        evictor = asyncio.get_running_loop().create_task(self._evict_latecomers(live))
        teller = asyncio.get_running_loop().create_task(self._tell_waiting(began, stopping))
        try:
            left: list[str] = []
            if self._worker is not None and self._task is not None:
                self._worker.stop()
                await self._task
                left = list(self._worker.left_running)
            # Runs driven outside the worker (``--run``) are drained by it too (it waits for
            # every driver of the engine), but with no worker running, wait here.
            left += await self._wait_drivers(but=left)
            engine.interrupted.update(left)
        finally:
            for helper in (evictor, teller):
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper
            engine.draining = False
            self._worker, self._task = None, None
        interrupted = sorted(engine.interrupted)
        suspended = sorted(live - engine.interrupted)
        return Drained(suspended, interrupted, time.monotonic() - began, stopping)

    async def _tell_waiting(self, began: float, stopping: bool) -> None:
        # A save with a long step in flight must not look like a hang: after a moment, say
        # which steps the reload waits for, how long they have run, how long it may take, and
        # how to restart them now; then again every little while, with the times updated.
        await asyncio.sleep(_TELL_AFTER)
        while True:
            steps = self.running_steps()
            if steps:
                now = time.monotonic()
                self.engine.emit(
                    DrainWaiting(
                        [s.text for s in steps],
                        self.grace,
                        running=[now - s.since for s in steps],
                        waited=now - began,
                        restart=self.restart_hint,
                        stopping=stopping,
                    )
                )
            await asyncio.sleep(_TELL_EVERY)

    def running_steps(self) -> list[RunningStep]:
        """Every step running in a run this engine drives, oldest first."""
        found: list[RunningStep] = []
        now = time.monotonic()
        for run_id, ctx in list(self.engine.live.items()):
            for op, name in sorted(ctx.running_steps.items()):
                since = ctx.running_since.get(op, now)
                found.append(RunningStep(run_id, op, name, since))
        return sorted(found, key=lambda s: s.since)

    def restart_steps(self) -> list[str]:
        """Abandon the steps a drain waits for, now instead of after the grace period: their
        runs' drivers are cancelled (an async step with them; a sync step's thread runs on,
        its result unrecorded) and the runs stay due, so the steps run again on the new code.
        Returns the steps abandoned (none when no drain is waiting)."""
        if not self.engine.draining:
            return []
        steps = self.running_steps()
        for run_id in {s.run_id for s in steps}:
            task = self.engine.drivers.get(run_id)
            if task is not None and not task.done():
                self.engine.interrupted.add(run_id)
                task.cancel()
        return [s.text for s in steps]

    async def _evict_latecomers(self, live: set[str]) -> None:
        # Worker.stop() evicts the runs live at that moment; a driver that was still reading
        # the journal becomes live a moment later and would otherwise run on (up to the grace
        # period) on the code being replaced.
        while True:
            for run_id, ctx in list(self.engine.live.items()):
                if not ctx.evicting:
                    live.add(run_id)
                    ctx.evict()
            await asyncio.sleep(_EVICT_EVERY)

    async def _wait_drivers(self, *, but: Collection[str]) -> list[str]:
        """Wait for the drivers of runs other than ``but`` (up to the grace, then cancelled);
        the runs whose driver is still running then (a step that ignores its cancellation),
        left running rather than hold every reload up, as a worker's drain does."""
        pending = [
            task
            for run_id, task in self.engine.drivers.items()
            if not task.done() and run_id not in but
        ]
        if not pending:
            return []
        _, late = await asyncio.wait(pending, timeout=self.grace)
        return await abandon_drives(self.engine, late)
