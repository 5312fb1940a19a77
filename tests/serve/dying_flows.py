"""Workflows whose steps end their process, for ``test_apart``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import wf


@wf.step
def end_process() -> None:
    os._exit(7)


@wf.workflow
async def kills_its_process() -> None:
    await end_process()


@wf.step
def end_process_once(marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).write_text("died here once")
        os._exit(7)
    return "survived"


@wf.workflow
async def kills_its_process_once(marker: str) -> str:
    return await end_process_once(marker)


@wf.step
async def end_process_once_then_wait(marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).write_text("died here once")
        os._exit(7)
    Path(marker + ".waiting").write_text("")
    await asyncio.sleep(3600)  # past any grace
    return "woke"


@wf.workflow
async def kills_its_process_once_then_waits(marker: str) -> str:
    return await end_process_once_then_wait(marker)
