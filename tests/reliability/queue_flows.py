"""Workflows of the multi-process queue tests, imported by ``wf worker`` subprocesses as
``tests.reliability.queue_flows``.

Every step execution appends one line to ``$WF_TORTURE_LOG/steps.log`` (one ``write`` to an
``O_APPEND`` file, so lines of concurrent processes never interleave and a SIGKILL never tears
one): ``<kind> <key> <index> <pid> <exec> <t0> <t1>`` with ``time.monotonic`` times (one clock
for every process of the machine). A step whose line is missing was cut short by a kill.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import wf


def _log(line: str) -> None:
    path = Path(os.environ["WF_TORTURE_LOG"]) / "steps.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@wf.step(max_retries=0)
async def effect(kind: str, key: str, index: int, pause: float) -> str:
    """One step's effect: a line in the log, after ``pause`` seconds of work."""
    exec_id = uuid.uuid4().hex[:12]
    start = time.monotonic()
    if pause:
        await asyncio.sleep(pause)
    _log(f"{kind} {key} {index} {os.getpid()} {exec_id} {start:.6f} {time.monotonic():.6f}")
    return exec_id


@wf.workflow(name="queues:drain")
async def drain(key: str, steps: int, pause: float = 0.0) -> list[str]:
    return [await effect("drain", key, i, pause) for i in range(steps)]


@wf.workflow(name="queues:capped", concurrency=2)
async def capped(key: str, pause: float) -> str:
    return await effect("capped", key, 0, pause)


def _lane_of(key: str, group: str, pause: float) -> str:
    return group


@wf.workflow(name="queues:laned", group=_lane_of)
async def laned(key: str, group: str, pause: float) -> str:
    return await effect("laned", key, 0, pause)
