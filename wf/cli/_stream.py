"""``wf stream``: write a run's byte stream to stdout, optionally following it live.

Bytes are written raw to ``sys.stdout.buffer`` — a stream may carry any bytes (a CSV, a
gzip, progress lines) — and flushed as they arrive so that ``wf stream ID --follow | tail``
shows each chunk as soon as the step wrote it (over ``WF_URL``, a big chunk in the pieces the
server sends, never held whole).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, BinaryIO

import typer

from wf.cli._errors import guarded

DEFAULT_STREAM = "default"


def register(app: typer.Typer) -> None:
    """Add ``wf stream`` to the app."""
    app.command("stream")(stream_command)


@guarded
def stream_command(
    run_id: Annotated[
        str, typer.Argument(metavar="RUN_ID", help="The run's id.", show_default=False)
    ],
    name: Annotated[
        str,
        typer.Option("--name", metavar="NAME", help="The stream's name."),
    ] = DEFAULT_STREAM,
    start: Annotated[
        int,
        typer.Option(
            "--start",
            metavar="K",
            help="First chunk to write; negative counts from the end (-3: the last three).",
        ),
    ] = 0,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow/--no-follow",
            "-f",
            help="Keep writing new chunks until the stream closes (or its run ends).",
        ),
    ] = False,
    old_name: Annotated[str | None, typer.Option("-n", hidden=True)] = None,
    old_start: Annotated[int | None, typer.Option("-s", hidden=True)] = None,
) -> None:
    """Write a run's byte stream to stdout, raw; with --follow, until the stream closes."""
    from wf.cli._grammar import merged

    # -n and -s meant --name and --start here but --limit and --status in `wf runs`.
    name = merged(name, old_name, "wf stream -n", "wf stream --name")
    start = merged(start, old_start, "wf stream -s", "wf stream --start")
    # A reader that goes away (`wf stream ID | head -c10`) is answered like every command's
    # closed pipe (wf.cli._errors.closed_pipe).
    asyncio.run(_stream(run_id, name, start, follow, sys.stdout.buffer))


async def _stream(run_id: str, name: str, start: int, follow: bool, out: BinaryIO) -> None:
    from wf.admin import connect

    async with connect() as client:
        # Bytes as they arrive: stdout keeps no chunks apart, so a big chunk is never held
        # whole (over WF_URL it came in pieces anyway).
        async for chunk in client.follow_stream(run_id, name, start, follow=follow, whole=False):
            out.write(chunk)
            out.flush()
