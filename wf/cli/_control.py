"""``wf cancel`` and ``wf wake``: control a run from the terminal."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from wf.cli._errors import guarded

if TYPE_CHECKING:
    from wf.admin import Admin, ControlResult


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


async def say_who_drives(client: Admin, run_id: str) -> None:
    """Before waiting on a run's outcome: when nobody behind ``client`` drives runs (a ``wf
    serve --no-worker``), say that only a ``wf worker`` on its store moves it on, rather than
    wait in silence. Likewise for a run pinned to a deployment it does not drive: only a
    worker of that deployment moves it on."""
    from wf._exceptions import RunNotFound
    from wf.cli._errors import hint

    info = await client.store_info()
    if not info.drives:
        # Only about a run there is to wait on: an unknown or ended one gets its own answer.
        try:
            if (await client.run_detail(run_id)).run.status.is_terminal:
                return
        except RunNotFound:
            return  # the request itself says so
        hint(
            f"the server does not drive runs (wf serve --no-worker): waiting for a `wf worker` "
            f"on its store to drive run {run_id} (Ctrl-C stops waiting; the run stays queued)"
        )
        return
    if info.deployment is None:
        return
    try:
        pinned = (await client.run_detail(run_id)).deployment.get("pinned")
    except RunNotFound:
        return  # the request itself says so
    if pinned is not None and pinned != info.deployment:
        say_pinned_elsewhere(run_id, pinned, info.deployment)


def say_pinned_elsewhere(run_id: str, pinned: str, here: str) -> None:
    """Before waiting on a run pinned to another deployment than this process's: only that
    deployment's workers drive it."""
    from wf.cli._errors import hint

    hint(
        f"run {run_id} is pinned to deployment {pinned}: waiting for a worker of deployment "
        f"{pinned} to drive it, not deployment {here}'s code here (Ctrl-C stops waiting; the "
        "run stays queued)"
    )


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
    it ended otherwise (it finished first, or caught the cancellation), or if --children could
    not reach part of the tree (a damaged children's index, named in a warning).
    """
    code = asyncio.run(_control(run_id, "cancel", wait, children))
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
    code = asyncio.run(_control(run_id, "wake", wait, False))
    if code:
        raise typer.Exit(code)


async def _control(run_id: str, action: str, wait: bool, children: bool) -> int:
    """Send the request; with ``wait``, follow the run. Returns the exit code.

    The request is durable; whoever drives the run applies it. A drive this process may have
    begun (without --wait, or one that cannot load the workflow) is abandoned like a crash
    would, never half-awaited at exit (``wf.admin.local``).
    """
    from wf._config import deployment_setting
    from wf.admin import connect
    from wf.cli._stdout import stdout_to_stderr
    from wf.cli._store import say_crossing

    # The run may be driven here, importing its workflow: what that code prints goes to stderr.
    with stdout_to_stderr():
        async with connect(on_crossing=say_crossing(deployment_setting())) as client:
            if wait:
                await say_who_drives(client, run_id)
            if action == "cancel":
                results = await client.cancel(run_id, wait=wait, children=children)
                return _report(results, wait, "cancellation", cancel=True)
            result = await client.wake(run_id, wait=wait)
            return _report([result], wait, "wake-up", cancel=False)


def _report(results: list[ControlResult], wait: bool, verb: str, *, cancel: bool) -> int:
    """One line per run on stderr: already ended, its status now, or the request stored; the
    exit code: for a cancel, 0 only if the run (the root, and every run asked) ended cancelled
    and no part of the tree was left unreached (a children's index damaged).
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
        if result.refused is not None:
            from wf.admin._words import visible

            console.print(visible(result.refused), markup=False, soft_wrap=True)
            code = 1  # the request does not apply: nothing was done
        elif not result.sent:
            console.print(f"run {result.run_id} has already ended: {status}")
        elif wait:
            console.print(f"run {result.run_id}: {status}")
        else:
            console.print(f"{verb} of run {result.run_id} requested (now {status})")
        asked = i == 0 or result.sent
        if cancel and asked and (wait or not result.sent) and result.status != "cancelled":
            code = 1  # it ended otherwise: finished first, or caught the cancellation
    sys.stderr.flush()
    # A run whose children's index cannot be read: the runs below it were not reached.
    from wf.cli._format import say_damaged

    damaged = [fault for result in results for fault in result.damaged]
    if damaged:
        say_damaged(damaged, "its runs below were not reached")
        code = 1  # part of the tree was not reached: not all cancelled, as asked
    return code
