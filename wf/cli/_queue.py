"""``wf retry`` and ``wf watch``: another attempt of a failed run; a run's events as they come."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from wf.cli._errors import EXIT_OK, exit_with, guarded


def register(app: typer.Typer) -> None:
    """Add ``wf retry`` and ``wf watch`` to the app."""
    app.command("retry")(retry_command)
    app.command("watch")(watch_command)


_RUN_ID = typer.Argument(metavar="RUN_ID", help="The run's id.", show_default=False)


@guarded
def retry_command(
    run_id: Annotated[str, _RUN_ID],
    detach: Annotated[
        bool,
        typer.Option("--detach", "-d", help="Only queue the attempt; a worker drives it."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"run_id", "status", "output"} (and "error").')
    ] = False,
) -> None:
    """Queue another attempt of a failed run (completed steps replay) and, unless --detach,
    drive it here and print its result like `wf run`. Exit 2 if the run has not failed."""
    exit_with(asyncio.run(_retry(run_id, detach, as_json)))


async def _retry(run_id: str, detach: bool, as_json: bool) -> int:
    from wf._config import deployment_setting
    from wf.admin import connect
    from wf.cli._control import say_who_drives
    from wf.cli._run import _print_outcome
    from wf.cli._stdout import stdout_to_stderr
    from wf.cli._store import say_crossing

    # As with `wf run`, stdout carries the result only: the run is driven here, and what its
    # code prints goes to stderr.
    with stdout_to_stderr():
        async with connect(on_crossing=say_crossing(deployment_setting())) as client:
            run_id = await client.retry(run_id)
            if detach:
                record = None
            else:
                await say_who_drives(client, run_id)
                record = await client.ended(run_id)
    if record is None:
        sys.stdout.write(f"{run_id}\n")
        return EXIT_OK
    return _print_outcome(record, as_json=as_json)


@guarded
def watch_command(
    run_id: Annotated[str, _RUN_ID],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print a run's events (started, progress, retrying, then completed/failed/cancelled)
    until it ends; a finished run prints its outcome only."""
    asyncio.run(_watch(run_id, as_json))


async def _watch(run_id: str, as_json: bool) -> None:
    import orjson

    from wf.admin import connect
    from wf.admin._words import clock_time, error_text, visible

    async with connect() as client:
        async for event in client.watch(run_id):
            if as_json:
                line = orjson.dumps(event.to_json()).decode()
            else:
                detail = ""
                if event.kind == "started":
                    detail = f" (attempt {event.attempt})"
                elif event.kind == "retrying":
                    detail = f": attempt {event.attempt} follows {error_text(event.error)}"
                elif event.kind == "progress":
                    detail = f" {_show(event.data)}"
                elif event.kind == "completed":
                    detail = f" {_show(event.output)}"
                elif event.kind == "failed":
                    detail = f": {error_text(event.error)}"
                line = f"{clock_time(event.ts)} {event.kind}{visible(detail)}"
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def _show(value: object) -> str:
    import orjson

    from wf import encode

    try:
        return orjson.dumps(encode(value, where="an event")).decode()
    except Exception:
        return repr(value)
