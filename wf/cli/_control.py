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


async def _descendants(eng: Engine, run_id: str) -> list[str]:
    """Ids of every run below ``run_id`` (children via ``parent_id``, recursively), top-down."""
    found: list[str] = []
    parents = [run_id]
    while parents:
        children = await eng.store.list_runs(parent_id=parents.pop(0), limit=100_000)
        # list_runs is newest first; oldest first reads like the order the tree was built.
        for child in reversed(children):
            if child.id not in found:
                found.append(child.id)
                parents.append(child.id)
    return found


async def _cancel_tree(run_id: str, wait: bool) -> None:
    """``wf cancel --children``: cancel a run and all its descendants, reporting each.

    Every request is posted first, top-down, so that a parent stops at once rather than
    seeing its children fail one by one (a child cancelled alone surfaces in its parent as
    ``RunCancelled`` from ``child.result()``, which the parent might handle and carry on).
    Then, with ``--wait``, each run is awaited (driven here if nobody else drives it). A run
    may start children while it winds down (in a ``finally`` or a compensation), so the tree
    is listed again until no live run is left in it.
    """
    import sys

    from rich.console import Console

    from wf._exceptions import RunCancelled, RunFailed
    from wf.cli._format import styled_status
    from wf.cli._store import engine
    from wf.engine._engine import Run
    from wf.store._ids import validate_run_id

    console = Console(stderr=True, highlight=False)
    async with engine() as eng:
        root: Run[object] = Run(validate_run_id(run_id), eng)
        await root.record()  # an unknown root is exit 2 before anything is sent
        handled: dict[str, bool] = {}  # run id -> whether a cancel was sent
        for _ in range(100):  # bounded: a tree that keeps growing is reported, not chased
            tree = [root.id, *await _descendants(eng, root.id)]
            new = [rid for rid in tree if rid not in handled]
            if not new:
                break
            for rid in new:
                handled[rid] = await Run(rid, eng).cancel(wait=False)
            if not wait:
                break
            for rid in new:
                if handled[rid]:
                    # Wait without sending again: a second request could reach the run while
                    # its compensations run and cut them short.
                    with contextlib.suppress(RunFailed, RunCancelled):
                        await Run(rid, eng).result()
        if not wait:
            await _abandon_drivers(eng)
        for rid, sent in handled.items():
            status = (await Run(rid, eng).record()).status.value
            if not sent:
                console.print(f"run {rid} has already ended: {styled_status(status)}")
            elif wait:
                console.print(f"run {rid}: {styled_status(status)}")
            else:
                console.print(f"cancellation of run {rid} requested (now {styled_status(status)})")
        sys.stderr.flush()
