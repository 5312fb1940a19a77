"""``wf cancel`` and ``wf wake``: control a run from the terminal."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Annotated

import typer

from wf.cli._errors import guarded

if TYPE_CHECKING:
    from wf.engine._engine import Engine


def register(app: typer.Typer) -> None:
    """Add ``wf cancel`` and ``wf wake`` to the app."""
    app.command("cancel")(cancel_command)
    app.command("wake")(wake_command)


_RUN_ID = typer.Argument(metavar="RUN_ID", help="The run's id.", show_default=False)


@guarded
def cancel_command(
    run_id: Annotated[str, _RUN_ID],
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Wait until the run has stopped (driving it here if nobody else does), or "
            "return once the request is stored.",
        ),
    ] = True,
) -> None:
    """Cancel a run: it stops at its next durable operation (finally blocks and rollbacks run)."""
    asyncio.run(_control(run_id, "cancel", wait))


@guarded
def wake_command(
    run_id: Annotated[str, _RUN_ID],
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Wait for the run to end (driving it here if nobody else does), or return "
            "once the request is stored.",
        ),
    ] = False,
) -> None:
    """End a run's current sleeps now (the run then continues)."""
    asyncio.run(_control(run_id, "wake", wait))


async def _control(run_id: str, action: str, wait: bool) -> None:
    import sys

    from wf.cli._format import styled_status
    from wf.cli._store import engine
    from wf.engine._engine import Run
    from wf.store._ids import validate_run_id

    async with engine() as eng:
        run: Run[object] = Run(validate_run_id(run_id), eng)
        if action == "cancel":
            sent = await run.cancel(wait=wait)
        else:
            sent = await run.wake_up(wait=wait)
        if not wait:
            # The request is durable; whoever drives the run applies it. A drive this process
            # may have begun is abandoned like a crash would, never half-awaited at exit.
            await _abandon_drivers(eng)
        record = await run.record()
        status = record.status.value
        from rich.console import Console

        console = Console(stderr=True, highlight=False)
        if not sent:
            console.print(f"run {run.id} has already ended: {styled_status(status)}")
        elif wait:
            console.print(f"run {run.id}: {styled_status(status)}")
        else:
            verb = "cancellation" if action == "cancel" else "wake-up"
            console.print(f"{verb} of run {run.id} requested (now {styled_status(status)})")
        sys.stderr.flush()


async def _abandon_drivers(eng: Engine) -> None:
    tasks = [task for task in eng.drivers.values() if not task.done()]
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task
