"""``wf runs``: list runs, newest first."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Annotated

import typer

from wf.cli._errors import guarded

if TYPE_CHECKING:
    from wf import RunRecord
    from wf.admin import RunPage

_STATUSES = ("pending", "running", "suspended", "completed", "failed", "cancelled")


def register(app: typer.Typer) -> None:
    """Add ``wf runs`` to the app."""
    app.command("runs")(runs_command)


def _check_status(values: list[str] | None) -> list[str] | None:
    for value in values or ():
        if value not in _STATUSES:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(_STATUSES)}")
    return values


@guarded
def runs_command(
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            metavar="STATUS",
            help=f"Only runs with this status (repeatable): {', '.join(_STATUSES)}.",
            callback=_check_status,
            show_default=False,
        ),
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            "-w",
            metavar="NAME",
            help="Only runs of this workflow name.",
            show_default=False,
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            metavar="NAME",
            help="Only runs of this named queue (finished ones too).",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            metavar="KEY",
            help="Only runs of this group key, in any queue.",
            show_default=False,
        ),
    ] = None,
    deployment: Annotated[
        str | None,
        typer.Option(
            "--deployment",
            metavar="ID",
            help="Only runs pinned to this deployment.",
            show_default=False,
        ),
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            "--search",
            metavar="TEXT",
            help="Only the run with this id, else runs whose workflow name or id contains TEXT "
            "(any case; a search by a part of an id reads a bounded number of runs).",
            show_default=False,
        ),
    ] = None,
    before: Annotated[
        str | None,
        typer.Option(
            "--before",
            metavar="RUN_ID",
            help="Only runs created before this one (the next page, or where a search goes on).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, metavar="N", help="At most this many.")
    ] = 20,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON array of run records.")
    ] = False,
) -> None:
    """List runs, newest first."""
    from wf.cli._format import say_damaged

    named = {"queue": queue, "group": group, "deployment": deployment}
    page = asyncio.run(_list(status, workflow, limit, before, search, named))
    if as_json:
        from wf.cli._format import print_json

        print_json([record.to_json() for record in page.runs])
    else:
        _print_table(page.runs)
    say_damaged(page.damaged)
    if search is not None and page.exhausted and page.next_before:
        _say_further(page)


async def _list(
    statuses: list[str] | None,
    workflow: str | None,
    limit: int,
    before: str | None,
    search: str | None,
    named: dict[str, str | None],
) -> RunPage:
    from wf.admin._client import reading

    async with reading() as client:
        return await client.list_runs(
            status=statuses, workflow=workflow, limit=limit, before=before, search=search, **named
        )


def _say_further(page: RunPage) -> None:
    """A search by a part of an id reads a bounded number of runs a page (as the API's and
    the web UI's): say how many it read and where it goes on, as the web UI's "Search further"
    does, on stderr (stdout stays the listing)."""
    from wf.cli._errors import hint

    hint(
        f"searched {page.searched:,} runs and stopped at the bound of one search; more may "
        f"match: add --before {page.next_before} to search further"
    )


def _print_table(records: list[RunRecord]) -> None:
    from rich.table import Table

    from wf.admin._words import duration, run_info, styled_status, timestamp
    from wf.cli._format import plain, stdout_console

    console = stdout_console()
    if not records:
        console.print("no runs", style="dim")
        return
    now = time.time()
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("workflow", overflow="fold", min_width=12)
    table.add_column("status", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("info", overflow="fold", min_width=10)
    for record in records:
        ended = record.updated_at if record.status.is_terminal else now
        # The workflow name and the error are anyone's text: never markup, controls shown.
        table.add_row(
            record.id,
            plain(record.workflow),
            styled_status(record.status.value),
            timestamp(record.created_at),
            duration(ended - record.created_at),
            plain(run_info(record)),
        )
    console.print(table)
