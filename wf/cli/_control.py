"""``wf cancel`` and ``wf wake``: control a run from the terminal."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from wf.cli._errors import guarded

if TYPE_CHECKING:
    from wf.admin import ControlResult


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
    children: Annotated[
        bool,
        typer.Option(
            "--children",
            help="Cancel the run's child runs too, and theirs (the whole tree below it).",
        ),
    ] = False,
) -> None:
    """Cancel a run: it stops at its next durable operation (finally blocks and rollbacks run)."""
    if children:
        asyncio.run(_cancel_tree(run_id, wait))
        return
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
    from wf import admin
    from wf.cli._store import engine

    async with engine() as eng:
        if action == "cancel":
            result = await admin.cancel(eng, run_id, wait=wait)
        else:
            result = await admin.wake(eng, run_id, wait=wait)
        if not wait:
            # The request is durable; whoever drives the run applies it. A drive this process
            # may have begun is abandoned like a crash would, never half-awaited at exit.
            await eng.aclose()
        verb = "cancellation" if action == "cancel" else "wake-up"
        _report([result], wait, verb)


async def _cancel_tree(run_id: str, wait: bool) -> None:
    """``wf cancel --children``: cancel a run and all its descendants, reporting each."""
    from wf import admin
    from wf.cli._store import engine

    async with engine() as eng:
        results = await admin.cancel_tree(eng, run_id, wait=wait)
        if not wait:
            # The request is durable; whoever drives the run applies it. A drive this process
            # may have begun is abandoned like a crash would, never half-awaited at exit.
            await eng.aclose()
        _report(results, wait, "cancellation")


def _report(results: list[ControlResult], wait: bool, verb: str) -> None:
    """One line per run on stderr: already ended, its status now, or the request stored."""
    import sys

    from rich.console import Console

    from wf.cli._format import styled_status

    console = Console(stderr=True, highlight=False)
    for result in results:
        status = styled_status(result.status)
        if not result.sent:
            console.print(f"run {result.run_id} has already ended: {status}")
        elif wait:
            console.print(f"run {result.run_id}: {status}")
        else:
            console.print(f"{verb} of run {result.run_id} requested (now {status})")
    sys.stderr.flush()
