"""What the kernel's modules need of an engine: the ``EngineLike`` protocol.

``wf.engine._engine.Engine`` sits at the top of the kernel; the modules below it (the run
context, the driver, the inbox, the features, run handles) reach the engine of a run through
this protocol, so none of them names ``Engine``, not even in an annotation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from wf.engine._alone import DriveGate
    from wf.engine._clock import Clock
    from wf.engine._context import RunContext
    from wf.engine._features import Features
    from wf.engine._instruments import Instrument
    from wf.engine._queueing import AdmissionOrder
    from wf.engine._ref import WorkflowRef
    from wf.engine._run import Run
    from wf.engine._threads import StepThreads
    from wf.engine._workflow import Workflow
    from wf.store import Hold, Lease, RunRecord, Store


class EngineLike(Protocol):
    """An engine as the kernel below ``Engine`` sees it (``Engine`` is the one implementation)."""

    store: Store
    clock: Clock
    features: Features
    """The features runs are driven with (``wf.engine._features``)."""
    concurrency: int | None
    retention: float | None
    max_recoveries: int
    suspend_after: float
    inbox_poll: float
    step_log_limit: int
    live: dict[str, RunContext]
    """Runs whose workflow coroutine is alive in this process, by id."""
    drive_gate: DriveGate
    """Drives share it; a suspect run's drive takes it alone (``wf.engine._alone``)."""
    draining: bool
    closing: bool
    """Set while ``Engine.aclose`` ends this process's drives: each is ended on purpose."""
    drivers: dict[str, asyncio.Task[RunRecord | None]]
    max_drivers: int | None
    """Runs driven here at once, at most (a worker's concurrency; None: no bound)."""
    claiming: int
    holds: dict[str, Hold]
    fresh: dict[str, Workflow[Any, Any] | None]
    failed_until: dict[str, float]
    """Runs whose last drive here failed in the store (``wf.engine._aside.note_failed``), by
    id: the time before which a ``result()`` waiting on an ancestor does not drive them."""
    followed: dict[str, int]
    """Runs whose ``result()`` waits in this process (how many waits), by id."""
    held_ahead: Callable[[str, tuple[int, float, int, str]], bool] | None
    drive_apart: Callable[[str, Callable[[str], str]], Awaitable[None]] | None
    """Drives a run whose last driver died in another process (``wf.engine._alone``)."""
    said_elsewhere: set[str]
    """Runs whose recovery another process said as it handed them here (``wf.engine._alone``)."""
    admission_order: AdmissionOrder
    """The order in which a worker's claimed runs ask for cap places (``AdmissionOrder``)."""
    instruments: list[Instrument]

    def step_pool(self) -> StepThreads: ...

    def add_instrument(self, instrument: Instrument) -> None: ...

    def instrumented(self) -> list[Instrument]: ...

    def room_to_drive(self) -> bool: ...

    def drive_soon(
        self, run_id: str, *, lease: Lease | None = None
    ) -> asyncio.Task[RunRecord | None]: ...

    def notify_finished(self, record: RunRecord) -> None: ...

    def notify_crossing(self, record: RunRecord) -> None: ...

    def notice_code(self, record: RunRecord, code_hash: str | None) -> None: ...

    def drives_pin(self, deployment: str | None) -> bool: ...

    async def quiet(self) -> bool: ...

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
    ) -> Run[Any]: ...
