"""A module that, as it is imported, starts a run of its own workflow by name and waits for
its result (a script's ``asyncio.run`` at module level, imported by another module)."""

from __future__ import annotations

import asyncio

import wf
from wf.engine._current import use_engine
from wf.engine._engine import Engine
from wf.store.memory import MemoryStore


@wf.workflow
async def plus_one(x: int) -> int:
    return x + 1


async def _go() -> int:
    with use_engine(Engine(MemoryStore())):
        run = await wf.start(f"{__name__}:plus_one", 1)
        async with asyncio.timeout(10):
            result: int = await run.result()
        return result


RESULT = asyncio.run(_go())
