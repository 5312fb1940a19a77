"""Where features (hooks, streams, child runs) plug into the driver, so it need not import them.

A feature registers what it must do once a run's outcome is recorded (release the hook tokens
it holds, close its streams, tell its parent); inbox messages of its own kinds are registered
with ``wf.engine._inbox``. ``wf.engine._engine`` imports every feature, so all are registered
before the first run is driven.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.engine._context import RunContext
    from wf.store import RunRecord

OutcomeHandler = Callable[["RunContext", "RunRecord"], Awaitable[None]]
"""``handler(ctx, record)``, after the outcome is durable; repeated safely after a crash."""

OutcomeNeeded = Callable[["RunContext", "RunRecord"], bool]
"""``needed(ctx, record)``: whether the handler has anything to do for this run."""

_outcome_needed: dict[str, OutcomeNeeded | None] = {}

DriveHandler = Callable[["RunContext"], Awaitable[None]]
"""``handler(ctx)``, before a drive takes in the run's inbox and runs the workflow."""

_outcome_handlers: list[tuple[int, str, OutcomeHandler]] = []
_drive_handlers: dict[str, DriveHandler] = {}


def register_drive_handler(name: str, handler: DriveHandler) -> None:
    """Run ``handler`` before every drive of a run (``name``: for replacing it when its module
    is imported again)."""
    _drive_handlers[name] = handler


async def before_drive(ctx: RunContext) -> None:
    """Let the features prepare a drive (a parent asks its retried children for news)."""
    for handler in list(_drive_handlers.values()):
        await handler(ctx)


def register_outcome_handler(
    order: int, name: str, handler: OutcomeHandler, *, needed: OutcomeNeeded | None = None
) -> None:
    """Run ``handler`` after every outcome, lowest ``order`` first (``name``: for replacing it
    when its module is imported again). ``needed`` tells, without I/O, whether it has work for
    a run (None: always assumed)."""
    _outcome_handlers[:] = [h for h in _outcome_handlers if h[1] != name]
    _outcome_handlers.append((order, name, handler))
    _outcome_handlers.sort(key=lambda h: (h[0], h[1]))
    _outcome_needed[name] = needed


def outcome_work(ctx: RunContext, record: RunRecord) -> bool:
    """Whether ``after_outcome`` has anything to do for this run: if not, a driver may write
    the outcome and the final record together (``Lease.append_and_save``)."""
    for _, name, _ in _outcome_handlers:
        needed = _outcome_needed.get(name)
        if needed is None or needed(ctx, record):
            return True
    return False


async def after_outcome(ctx: RunContext, record: RunRecord) -> None:
    """Release what the run held and tell whoever waits, in the registered order."""
    for _, _, handler in list(_outcome_handlers):
        await handler(ctx, record)
