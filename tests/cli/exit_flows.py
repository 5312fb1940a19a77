"""Workflows whose code outlives its run or reaches for the worker's exit
(``tests/cli/test_worker_exit.py``)."""

from __future__ import annotations

import threading
import time

import wf


@wf.step
def spawn() -> str:
    # A library's non-daemon thread (a client's pool): the interpreter joins it at exit.
    threading.Thread(target=lambda: time.sleep(3600), name="lib-pool").start()
    return "spawned"


@wf.workflow
async def spawner() -> str:
    return await spawn()
