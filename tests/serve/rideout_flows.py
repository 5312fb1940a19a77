"""Workflows the ride-out tests run on a real ``wf serve`` (tests/serve/test_remote_rideout.py)."""

from __future__ import annotations

import asyncio

import wf


@wf.step
async def mark(i: int) -> int:
    return i


@wf.workflow
async def two_sleeps() -> str:
    """Two long sleeps: a wake-up that ends both is a wake-up sent twice."""
    await wf.sleep(3600)
    await mark(1)
    await wf.sleep(3600)
    return "woke twice"


@wf.step
async def tick(i: int) -> int:
    await asyncio.sleep(0.3)
    wf.progress(i)
    return i


@wf.workflow
async def ticks(n: int) -> int:
    """``n`` steps of 0.3 s, each with a progress event."""
    for i in range(n):
        await tick(i)
    return n
