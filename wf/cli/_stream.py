"""``wf stream``: write a run's byte stream to stdout, optionally following it live.

Chunks are written raw to ``sys.stdout.buffer`` — a stream may carry any bytes (a CSV, a
gzip, progress lines) — and flushed one by one so that ``wf stream ID --follow | tail`` shows
each chunk as soon as the step wrote it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

from wf.cli._errors import guarded

if TYPE_CHECKING:
    from wf.store import Store

DEFAULT_STREAM = "default"
_POLL = 2.0
"""Longest wait between two looks at a followed stream; new chunks normally wake us at once
(``Store.wait_for_run`` wakes on file-system events / notifications)."""


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
        typer.Option("--name", "-n", metavar="NAME", help="The stream's name."),
    ] = DEFAULT_STREAM,
    start: Annotated[
        int,
        typer.Option(
            "--start",
            "-s",
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
) -> None:
    """Write a run's byte stream to stdout, raw; with --follow, until the stream closes."""
    try:
        asyncio.run(_stream(run_id, name, start, follow, sys.stdout.buffer))
    except BrokenPipeError:
        # The reader went away (`wf stream ID | head`): that is how such pipes end, not an
        # error. Point stdout at /dev/null so the interpreter's final flush stays quiet.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


async def _stream(run_id: str, name: str, start: int, follow: bool, out: BinaryIO) -> None:
    from wf.cli._store import open_store
    from wf.store._ids import validate_run_id

    store = open_store()
    try:
        run_id = validate_run_id(run_id)
        await store.get_run(run_id)  # an unknown run is exit 2, not an empty stream
        async for chunk in follow_chunks(store, run_id, name, start, follow=follow):
            out.write(chunk)
            out.flush()
    finally:
        await store.close()


async def follow_chunks(
    store: Store, run_id: str, name: str, start: int = 0, *, follow: bool = True
) -> AsyncIterator[bytes]:
    """Yield the chunks of stream ``name`` of run ``run_id`` from ``start`` (negative: from
    the end). With ``follow``, wait for new chunks until the stream is closed.

    Unlike ``Run.read_stream`` this also stops when the run has ended with the stream still
    open or never created (a typo in ``--name``, a stream a crash left unclosed), which would
    otherwise wait forever. Chunks are durable before the run's outcome is recorded, so one
    more read after seeing the run finished gets them all.
    """
    if start < 0:
        count = (await store.list_streams(run_id)).get(name, (0, False))[0]
        start = max(0, count + start)
    index = start
    run_over = False
    while True:
        chunks, closed = await store.read_chunks(run_id, name, index)
        for chunk in chunks:
            yield chunk
        index += len(chunks)
        if chunks:
            continue  # more may have arrived while we wrote these
        if closed or not follow or run_over:
            return
        # Read the status *before* the next read of chunks: if the run is over then, that
        # read is the last one needed.
        run_over = (await store.get_run(run_id)).status.is_terminal
        if not run_over:
            await store.wait_for_run(run_id, _POLL)
