"""Workflows whose steps print and log, for ``wf logs`` and ``wf run``'s stdout."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import wf


@wf.step
def chatty(n: int) -> int:
    print(f"hello from chatty {n}")
    print("a warning on stderr", file=sys.stderr)
    logging.getLogger("app.chatty").warning("logged %d", n)
    return n * 2


@wf.step
async def quiet_step(n: int) -> int:
    print(f"quiet {n}")
    return n + 1


@wf.workflow
async def talkative(n: int = 1) -> dict[str, int]:
    print("the workflow body prints too")
    return {"doubled": await chatty(n), "plus": await quiet_step(n)}


@wf.step
def hangs_after_printing() -> str:
    print("before the crash", flush=True)
    marker = Path(os.environ["WF_TEST_LOG"]) / "hold"
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    print("after the crash")
    return "done"


@wf.workflow
async def crashing() -> str:
    return await hangs_after_printing()
