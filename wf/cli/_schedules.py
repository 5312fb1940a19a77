"""``wf schedule set|rm|pause|resume`` and ``wf schedules``: cron schedules from the
terminal."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.cli._errors import EXIT_USAGE, error, exit_with, guarded

if TYPE_CHECKING:
    from wf import Schedule
    from wf.admin import SchedulePage

_INPUT_HELP = (
    "Each run's input as JSON, like `wf run --input` (checked against the workflow now). "
    "'@path' reads a file, '-' stdin."
)


def _summary(name: str) -> str:
    from wf.cli._registry import COMMANDS

    return next(c.summary for c in COMMANDS if c.name == name)


def register(app: typer.Typer) -> None:
    """Add the ``wf schedule`` group (``set``, ``rm``, ``pause``, ``resume``) and ``wf
    schedules`` to the app."""
    group = typer.Typer(
        name="schedule",
        help="Create, replace, pause, resume or remove cron schedules (fired by `wf worker`).",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["--help", "-h"]},
    )
    group.command("set")(set_command)
    group.command("rm")(rm_command)
    group.command("pause")(pause_command)
    group.command("resume")(resume_command)
    app.add_typer(group, name="schedule", short_help=_summary("schedule"))
    app.command("schedules")(schedules_command)


@guarded
def set_command(
    schedule_id: Annotated[str, typer.Argument(metavar="ID", help="The schedule's id.")],
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET", help="The workflow: 'package.module:attr' or 'path/file.py:attr'."
        ),
    ],
    cron: Annotated[
        str,
        typer.Option("--cron", metavar="EXPR", help="When: a cron expression, e.g. '0 3 * * *'."),
    ],
    tz: Annotated[
        str | None,
        typer.Option(
            "--tz",
            metavar="ZONE",
            help="IANA time zone of the expression (default UTC).",
            show_default=False,
        ),
    ] = None,
    input_: Annotated[
        str | None,
        typer.Option("--input", "-i", metavar="JSON", help=_INPUT_HELP, show_default=False),
    ] = None,
    allow_overlap: Annotated[
        bool,
        typer.Option(
            "--allow-overlap",
            help="Start every fire, even while the previous run goes on (default: skip it).",
        ),
    ] = False,
    catch_up: Annotated[
        str,
        typer.Option(
            "--catch-up",
            metavar="one|none|all",
            help="Fires missed while no worker ran: run the latest, none, or all.",
        ),
    ] = "one",
    priority: Annotated[
        int | None,
        typer.Option("--priority", metavar="N", help="Priority of each run.", show_default=False),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            metavar="KEY",
            help="Queue group of each run (default: the schedule id).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule as JSON.")] = False,
) -> None:
    """Create or replace schedule ID: start TARGET at every time the cron expression names.

    Everything is checked before anything is stored (exit 2 on a bad expression, zone or input).
    """
    from wf.cli._input import read_input

    data = read_input(input_)
    made = asyncio.run(
        _set(
            schedule_id,
            target,
            cron=cron,
            tz=tz,
            input=data,
            allow_overlap=allow_overlap,
            catch_up=catch_up,
            priority=priority,
            group=group,
        )
    )
    if as_json:
        from wf.cli._format import print_json

        print_json(made.to_json())
        return
    from wf.admin._words import next_run_text, visible

    line = f"schedule {made.id}: {made.workflow} at '{made.cron}' ({made.tz or 'UTC'})"
    typer.echo(visible(line))
    typer.echo(f"next run: {next_run_text(made.to_json())}")


async def _set(schedule_id: str, target: str, **options: Any) -> Schedule:
    from wf.admin import connect
    from wf.cli._stdout import stdout_to_stderr

    # The target is imported to check it: what its module prints is not the result.
    with stdout_to_stderr():
        async with connect() as client:
            return await client.set_schedule(schedule_id, target, **options)


@guarded
def rm_command(
    schedule_id: Annotated[str, typer.Argument(metavar="ID", help="The schedule's id.")],
) -> None:
    """Remove schedule ID (runs it started are kept). Exit 2 if there is none."""

    async def remove() -> bool:
        from wf.admin import connect

        async with connect() as client:
            return await client.remove_schedule(schedule_id)

    if not asyncio.run(remove()):
        error(f"no schedule with id {schedule_id!r}")
        exit_with(EXIT_USAGE)
    typer.echo(f"removed schedule {schedule_id}")


@guarded
def pause_command(
    schedule_id: Annotated[str, typer.Argument(metavar="ID", help="The schedule's id.")],
) -> None:
    """Pause schedule ID: it fires nothing until resumed. Exit 2 if there is none."""
    _switch(schedule_id, pause=True)


@guarded
def resume_command(
    schedule_id: Annotated[str, typer.Argument(metavar="ID", help="The schedule's id.")],
) -> None:
    """Resume schedule ID from now: fires missed while it was paused are not caught up.
    Exit 2 if there is none."""
    _switch(schedule_id, pause=False)


def _switch(schedule_id: str, *, pause: bool) -> None:
    async def switch() -> Schedule | None:
        from wf.admin import connect

        async with connect() as client:
            if pause:
                return await client.pause_schedule(schedule_id)
            return await client.resume_schedule(schedule_id)

    found = asyncio.run(switch())
    if found is None:
        error(f"no schedule with id {schedule_id!r}")
        exit_with(EXIT_USAGE)
    from wf.admin._words import next_run_text, visible

    typer.echo(visible(f"schedule {found.id}: {'paused' if pause else 'resumed'}"))
    typer.echo(f"next run: {next_run_text(found.to_json())}")


@guarded
def schedules_command(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON array of schedules.")
    ] = False,
) -> None:
    """List schedules: id, workflow, cron, zone, next run, last fire and its run's status."""
    from wf.cli._format import say_damaged

    page = asyncio.run(_gather())
    if as_json:
        from wf.cli._format import print_json

        print_json(page.schedules)
    else:
        _print_table(page.schedules)
    say_damaged(page.damaged)


async def _gather() -> SchedulePage:
    from wf.admin import connect

    async with connect() as client:
        return await client.schedule_page()


def _print_table(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table
    from rich.text import Text

    from wf.admin._words import STATUS_STYLE, last_run_waiting, next_run_text, schedule_time
    from wf.cli._format import plain, stdout_console

    console = stdout_console()
    if not rows:
        console.print("no schedules", style="dim")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("id", "workflow", "cron", "tz", "next run", "last fire", "last run", "skipped"):
        table.add_column(column, overflow="fold")
    for row in rows:
        # Names, skip reasons and errors are anyone's text: never markup, controls shown.
        last = Text("-")
        if row["last_run_id"]:
            status = row["last_run_status"] or ""
            last = plain(f"{row['last_run_id']} ").append(status, STATUS_STYLE.get(status, ""))
            if waiting := last_run_waiting(row):
                last.append_text(plain(f" ({waiting})", "yellow"))
        skipped = Text(str(row["skipped"]))
        if row["skipped"] and row.get("last_skip_reason"):
            skipped.append_text(plain(f" (last: {row['last_skip_reason']})"))
        if row.get("last_error"):
            skipped.append_text(plain(f" error: {row['last_error']}", "red"))
        table.add_row(
            plain(row["id"]),
            plain(row["workflow"]),
            plain(row["cron"]),
            plain(row["tz"] or "UTC"),
            next_run_text(row),
            schedule_time(row["last_fire_at"], row["tz"]),
            last,
            skipped,
        )
    console.print(table)
