"""``wf hook resume`` and ``wf hooks``: deliver payloads to hooks, and list the live ones.

A hook is how a suspended run waits for the outside world (an approval, a webhook). Delivering
a payload only posts it to the run's inbox (``wf.resume_hook``); whoever drives the run next —
a ``wf worker``, a ``wf run`` waiting for it — resumes it. Like ``wf cancel`` and ``wf wake``,
``wf hook resume`` then waits for the effect (the run took the payload in and ended or waits
again), driving the run here if nobody else does; ``--no-wait`` returns as soon as the payload
is durable.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.cli._errors import guarded

if TYPE_CHECKING:
    from wf import RunRecord
    from wf.admin import HookPage
    from wf.store import HookRecord


def _summary(name: str) -> str:
    from wf.cli._registry import COMMANDS

    return next(c.summary for c in COMMANDS if c.name == name)


def register(app: typer.Typer) -> None:
    """Add the ``wf hook`` group (``resume``) and ``wf hooks`` to the app."""
    hook_app = typer.Typer(
        name="hook",
        help="Deliver payloads to the hooks runs wait on.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["--help", "-h"]},
    )
    hook_app.command("resume")(resume_command)
    # One spelling each, as for schedules: `wf hook resume` acts, `wf hooks` lists. The other
    # spellings (`wf hook list`, `wf hooks resume`, `wf hooks list`) stay as hidden aliases so
    # that scripts written against them keep working.
    hook_app.command("list", hidden=True)(hooks_command)
    # A group is not in app.registered_commands, where the app copies summaries from the
    # command table; give it its summary here so `wf --help` and Typer agree.
    app.add_typer(hook_app, name="hook", short_help=_summary("hook"))
    hooks_app = typer.Typer(
        name="hooks",
        help="List live hooks (the tokens runs wait on), oldest first. "
        "`wf hook resume TOKEN` delivers a payload.",
        subcommand_metavar="",  # its subcommands are hidden aliases: `Usage: wf hooks [OPTIONS]`
        invoke_without_command=True,
        add_completion=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["--help", "-h"]},
    )
    hooks_app.callback()(hooks_group)
    hooks_app.command("resume", hidden=True)(resume_command)
    hooks_app.command("list", hidden=True)(hooks_command)
    app.add_typer(hooks_app, name="hooks", short_help=_summary("hooks"))


def read_data(spec: str | None) -> Any:
    """The decoded JSON of ``--data`` (``None`` when absent); see ``read_json_option``."""
    from wf.cli._input import read_json_option

    return read_json_option(spec, "--data")


@guarded
def resume_command(
    token: Annotated[
        str, typer.Argument(metavar="TOKEN", help="The hook's token.", show_default=False)
    ],
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            metavar="JSON|@FILE|-",
            help="The payload as JSON; @path reads a file, - reads stdin (default: null).",
            show_default=False,
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Wait until the run has taken the payload in and ended or waits again "
            "(driving it here if nobody else does; exit 1 if it failed or was cancelled), as "
            "`wf cancel` and `wf wake` do; --no-wait returns once the payload is stored.",
        ),
    ] = True,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            metavar="KEY",
            help="An idempotency key: a repeat with the same token and key (for at least a "
            "day) delivers nothing new and prints the same run, so a command that failed "
            "(store or server unreachable) may be run again.",
            show_default=False,
        ),
    ] = None,
    old_data: Annotated[str | None, typer.Option("-d", hidden=True)] = None,
) -> None:
    """Deliver a payload to a hook; print the id of the run that owns it.

    TOKEN names the hook (`wf hooks` lists them). The payload is validated against the hook's
    type first: an unknown or disposed token, or a payload that does not fit, is exit 2 and
    nothing is delivered. Then, like `wf cancel` and `wf wake`, it waits until the run has taken
    the payload in (--no-wait: returns at once); a payload the run refuses then (a validator
    the hook's JSON schema does not carry) is exit 2 too.
    """
    from wf.cli._grammar import merged

    # -d meant --data here but --detach in `wf run`.
    payload = read_data(merged(data, old_data, "wf hook resume -d", "wf hook resume --data"))
    from wf.cli._stdout import stdout_to_stderr

    # The run may be driven here, importing its workflow: what that code prints goes to
    # stderr, stdout carries the run id only.
    with stdout_to_stderr():
        run_id, record, problem, refusal = asyncio.run(_resume(token, payload, wait, key))
    sys.stdout.write(run_id + "\n")
    sys.stdout.flush()
    if problem is not None:
        from wf.cli._control import not_driven_here

        raise typer.Exit(not_driven_here("the payload for", run_id, problem))
    if refusal is not None:
        # Stored, then refused by the run as it took it in (a validator the hook's JSON schema
        # does not carry): it never reached the workflow, which waits on.
        from wf.cli._errors import EXIT_USAGE, error

        error(f"run {run_id} refused the payload: {refusal}")
        raise typer.Exit(EXIT_USAGE)
    if record is not None:
        raise typer.Exit(_report_settled(record))


async def _resume(
    token: str, payload: Any, wait: bool, key: str | None = None
) -> tuple[str, RunRecord | None, Exception | None, str | None]:
    """The run's id, its record once settled, why it cannot be driven here, and why it
    refused the payload (if it did)."""
    from wf._config import deployment_setting
    from wf._exceptions import UsageError
    from wf.admin import connect
    from wf.cli._control import say_who_drives
    from wf.cli._store import say_crossing

    async with connect(on_crossing=say_crossing(deployment_setting())) as client:
        run_id, message = await client.resume_hook_sent(token, payload, key=key)
        if not wait:
            return run_id, None, None, None
        await say_who_drives(client, run_id)
        try:
            record = await client.settle(run_id)
        except UsageError as exc:
            # Delivered already: the run only cannot be driven here (its workflow does not
            # import in this directory). Say so, never "nothing done" (exit 2).
            return run_id, None, exc, None
        refusal = None if message is None else await _refusal(client, run_id, message)
        return run_id, record, None, refusal


async def _refusal(client: Any, run_id: str, message: str) -> str | None:
    """Why the settled run refused the payload ``message`` carried, from its journal."""
    from wf.admin._journal import refused_payload

    events: list[dict[str, Any]] = []
    start = 0
    while True:
        page = await client.journal_page(run_id, start=start)
        events += page.events
        start = page.next_start
        if not page.more:
            return refused_payload(events, message)


def _report_settled(record: RunRecord) -> int:
    """One line on stderr about where the run is now; the exit code that goes with it."""
    from rich.console import Console

    from wf.admin._words import error_text, styled_status, waiting_text
    from wf.cli._errors import EXIT_FAILED, EXIT_OK
    from wf.cli._format import escaped as escape

    line = f"run {record.id}: {styled_status(record.status.value)}"
    if record.waiting_for:
        line += f" (waiting for {escape(waiting_text(record.waiting_for))})"
    elif record.status.value == "failed":
        line += f": {escape(error_text(record.error))}"
    Console(stderr=True, highlight=False).print(line, markup=True)
    sys.stderr.flush()
    return EXIT_FAILED if record.status.value in ("failed", "cancelled") else EXIT_OK


def hooks_group(
    ctx: typer.Context,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run", "-r", metavar="RUN_ID", help="Only this run's hooks.", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of hooks.")] = False,
) -> None:
    """List live hooks (the tokens runs wait on), oldest first."""
    if ctx.invoked_subcommand is None:
        hooks_command(run_id=run_id, as_json=as_json)


@guarded
def hooks_command(
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run", "-r", metavar="RUN_ID", help="Only this run's hooks.", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of hooks.")] = False,
) -> None:
    """List live hooks (the tokens runs wait on), oldest first."""
    from wf.cli._format import say_damaged

    page = asyncio.run(_list(run_id))
    if as_json:
        import dataclasses

        from wf.cli._format import print_json

        print_json([dataclasses.asdict(hook) for hook in page.hooks])
    else:
        _print_table(page.hooks)
    say_damaged(page.damaged)


async def _list(run_id: str | None) -> HookPage:
    from wf.admin import connect

    async with connect() as client:
        return await client.hook_page(run_id)


def _payload_type(hook: HookRecord) -> str:
    ref = (hook.schema or {}).get("type")
    return str(ref) if ref else "any"


def _print_table(hooks: list[HookRecord]) -> None:
    from rich.table import Table

    from wf.admin._words import timestamp
    from wf.cli._format import escaped as escape
    from wf.cli._format import stdout_console

    console = stdout_console()
    if not hooks:
        console.print("no live hooks", style="dim")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("token", overflow="fold")
    table.add_column("run", no_wrap=True)
    table.add_column("op", justify="right", no_wrap=True)
    table.add_column("payload", overflow="fold")
    table.add_column("created", no_wrap=True)
    for hook in hooks:
        table.add_row(
            escape(hook.token),
            hook.run_id,
            str(hook.op),
            escape(_payload_type(hook)),
            timestamp(hook.created_at),
        )
    console.print(table)
