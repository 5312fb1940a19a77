"""The workflows the benchmark drives: trivial steps, so that what is measured is wf itself.

Async steps run on the event loop. A sync step (``inc_sync``) runs in a worker thread, so it
also pays a thread hop (``asyncio.to_thread``); the benchmark shows that cost on its own row.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import wf

STAMPS: list[float] | None = None
"""When a list, ``inc`` appends ``perf_counter()`` at each start: the gaps between consecutive
steps of one run are what one more durable step costs, measured inside the run."""


@wf.step
async def inc(i: int) -> int:
    if STAMPS is not None:
        STAMPS.append(time.perf_counter())
    return i + 1


@wf.step
def inc_sync(i: int) -> int:
    return i + 1


@wf.workflow(name="bench:steps")
async def steps(n: int) -> int:
    """``n`` sequential async steps."""
    x = 0
    for _ in range(n):
        x = await inc(x)
    return x


@wf.workflow(name="bench:sync_steps")
async def sync_steps(n: int) -> int:
    """``n`` sequential sync steps (each one hops to a thread and back)."""
    x = 0
    for _ in range(n):
        x = await inc_sync(x)
    return x


@wf.workflow(name="bench:steps_then_sleep")
async def steps_then_sleep(n: int) -> int:
    """``n`` steps, then a long sleep: the run suspends with ``n`` recorded steps to replay."""
    x = 0
    for _ in range(n):
        x = await inc(x)
    await wf.sleep(86400)
    return x


@wf.step
async def inc_print(i: int) -> int:
    print(f"step {i}")
    return i + 1


@wf.workflow(name="bench:print_steps")
async def print_steps(n: int) -> int:
    """``n`` sequential async steps that each print a line (captured as step logs)."""
    x = 0
    for _ in range(n):
        x = await inc_print(x)
    return x


@wf.step
async def drain_step(i: int) -> int:
    return i + 1


@wf.workflow(name="bench:drain3")
async def drain3(i: int) -> int:
    """Three sequential async steps: the unit of work of the worker-drain rows."""
    x = await drain_step(i)
    x = await drain_step(x)
    return await drain_step(x)


@wf.step
async def stamp_step(i: int) -> float:
    """Writes when it ran (wall clock) to ``$WF_BENCH_STAMPS/<i>``: the enqueue-latency rows."""
    now = time.time()
    where = os.environ.get("WF_BENCH_STAMPS")
    if where:
        Path(where, str(i)).write_text(repr(now))
    return now


@wf.workflow(name="bench:stamp")
async def stamp(i: int) -> float:
    """One step that records when a worker reached it."""
    return await stamp_step(i)
