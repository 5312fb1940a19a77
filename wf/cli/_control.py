"""``wf cancel`` and ``wf wake``: control a run from the terminal."""

from __future__ import annotations

import asyncio
import dataclasses
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


def not_driven_here(what: str, run_id: str, problem: object) -> int:
    """Report a request that is stored but whose run cannot be driven here (its workflow does
    not import in this directory); exit 1, so that nobody sends it again."""
    from wf.cli._errors import EXIT_FAILED, error, hint, one_line

    reason = one_line(str(problem))
    error(f"{what} run {run_id} is stored, but the run cannot be driven here: {reason}")
    hint("a `wf worker` started where the workflow imports will apply it; do not send it again")
    return EXIT_FAILED


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
    """Cancel a run: it stops at its next durable operation (finally blocks and rollbacks run).

    Exit 0 once the run ended cancelled (or, with --no-wait, once the request is stored); 1 if
    it ended otherwise (it finished first, or caught the cancellation).
    """
    from wf.cli._remote import client

    if client() is not None:
        code = _control_remote(run_id, "cancel", wait, children)
    elif children:
        code = asyncio.run(_cancel_tree(run_id, wait))
    else:
        code = asyncio.run(_control(run_id, "cancel", wait))
    if code:
        raise typer.Exit(code)


@guarded
def wake_command(
    run_id: Annotated[str, _RUN_ID],
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Wait until the run has woken and then ended or waits again (driving it here "
            "if nobody else does), or return once the request is stored.",
        ),
    ] = True,
) -> None:
    """End a run's current sleeps now (the run then continues).

    Like `wf cancel`, it waits for the effect by default; --no-wait returns at once.
    """
    from wf.cli._remote import client

    if client() is not None:
        code = _control_remote(run_id, "wake", wait, False)
    else:
        code = asyncio.run(_control(run_id, "wake", wait))
    if code:
        raise typer.Exit(code)


def _control_remote(run_id: str, action: str, wait: bool, children: bool) -> int:
    """The same over HTTP (``WF_URL``); the exit code."""
    from wf.admin import ControlResult
    from wf.cli._remote import client, control

    remote = client()
    assert remote is not None
    results = [
        ControlResult(rid, sent, status)
        for rid, sent, status in control(remote, run_id, action, wait, children)
    ]
    verb = "cancellation" if action == "cancel" else "wake-up"
    return _report(results, wait, verb, cancel=action == "cancel")


async def _control(run_id: str, action: str, wait: bool) -> int:
    """Send the request; with ``wait``, follow the run to its end. Returns the exit code."""
    from wf import admin
    from wf.cli._store import engine

    async with engine() as eng:
        if action == "cancel":
            result = await admin.cancel(eng, run_id, wait=wait)
        else:
            result = await admin.wake(eng, run_id, wait=False)
            if wait and result.sent:
                # Woken, then ended or waiting again: waiting for the end could be days.
                from wf._exceptions import UsageError
                from wf.engine._run import Run

                try:
                    record = await Run(result.run_id, eng).settle()
                except UsageError as exc:  # its workflow does not import here
                    result = dataclasses.replace(result, undriven=str(exc))
                else:
                    result = dataclasses.replace(result, status=record.status.value)
        # The request is durable; whoever drives the run applies it. A drive this process may
        # have begun (without --wait, or one that cannot load the workflow) is abandoned like
        # a crash would, never half-awaited at exit.
        await eng.aclose()
        verb = "cancellation" if action == "cancel" else "wake-up"
        return _report([result], wait, verb, cancel=action == "cancel")


async def _cancel_tree(run_id: str, wait: bool) -> int:
    """``wf cancel --children``: cancel a run and all its descendants, reporting each."""
    from wf import admin
    from wf.cli._store import engine

    async with engine() as eng:
        results = await admin.cancel_tree(eng, run_id, wait=wait)
        await eng.aclose()
        return _report(results, wait, "cancellation", cancel=True)


def _report(results: list[ControlResult], wait: bool, verb: str, *, cancel: bool) -> int:
    """One line per run on stderr: already ended, its status now, or the request stored; the
    exit code: for a cancel, 0 only if the run (the root, and every run asked) ended cancelled.
    """
    import sys

    from rich.console import Console

    from wf.admin._words import styled_status

    console = Console(stderr=True, highlight=False)
    code = 0
    for i, result in enumerate(results):
        if result.undriven is not None:
            return not_driven_here(f"the {verb} of", result.run_id, result.undriven)
        status = styled_status(result.status)
        if not result.sent:
            console.print(f"run {result.run_id} has already ended: {status}")
        elif wait:
            console.print(f"run {result.run_id}: {status}")
        else:
            console.print(f"{verb} of run {result.run_id} requested (now {status})")
        asked = i == 0 or result.sent
        if cancel and asked and (wait or not result.sent) and result.status != "cancelled":
            code = 1  # it ended otherwise: finished first, or caught the cancellation
    sys.stderr.flush()
    return code
