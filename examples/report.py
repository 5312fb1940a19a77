"""Streaming progress: a step writes lines to a byte stream that anyone can follow live.

Run it from the repository root::

    wf run examples/report.py:report --input '{"rows": 5}' --detach    # prints the run id
    wf stream <run id> --follow      # in another terminal: lines appear as they are written
    wf worker --until-idle           # drives the run

``wf.stream_writer(name=None)`` (inside a step) appends chunks of bytes to one of the run's
streams; ``wf stream ID --follow`` (or ``run.read_stream()`` in Python) reads them from any
process, as they arrive, until the stream is closed. Chunks are durable when ``write`` returns.
A step that already completed is never replayed, so its chunks are never written twice.
"""

from __future__ import annotations

import asyncio

import wf


@wf.step
async def crunch(rows: int) -> int:
    total = 0
    async with wf.stream_writer() as progress:
        for row in range(1, rows + 1):
            await asyncio.sleep(0.1)  # stands for real work
            total += row
            await progress.write(f"row {row}/{rows}: running total {total}\n")
        await progress.close()  # readers following the stream stop here
    return total


@wf.workflow
async def report(rows: int = 10) -> int:
    return await crunch(rows)
