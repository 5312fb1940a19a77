"""Workflows of the torture suite, imported by ``wf worker`` subprocesses as
``tests.reliability.flows``.

Every step execution leaves its trace in ``$WF_TORTURE_LOG/<key>.log`` *outside* the store:
``start <index> <pid> <exec> <t0>`` when it begins and ``end <index> <pid> <exec> <t0> <t1>``
when it returns (``time.monotonic``, one clock for every process of the machine). Each line is one
``write`` to an ``O_APPEND`` file, so a SIGKILL never tears it. The step returns its ``exec`` id,
so the journal says *which* execution's completion was recorded.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from pathlib import Path

import wf


def log_path(key: str) -> Path:
    return Path(os.environ["WF_TORTURE_LOG"]) / f"{key}.log"


def _log(key: str, line: str) -> None:
    fd = os.open(log_path(key), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@wf.step(max_retries=0)
async def work(key: str, index: int, pause: float) -> dict[str, object]:
    exec_id = uuid.uuid4().hex[:12]
    start = time.monotonic()
    _log(key, f"start {index} {os.getpid()} {exec_id} {start:.9f}")
    if pause:
        await asyncio.sleep(random.uniform(0, pause))  # so that kills land inside steps too
    end = time.monotonic()
    _log(key, f"end {index} {os.getpid()} {exec_id} {start:.9f} {end:.9f}")
    return {"index": index, "pid": os.getpid(), "exec": exec_id}


@wf.workflow(name="torture:counted")
async def counted(key: str, steps: int, pause: float = 0.0, nap: float = 0.0) -> int:
    """``steps`` steps; with ``nap`` a durable sleep after every third one, which suspends the run
    (``WF_SUSPEND_AFTER=0``) so that it may be resumed by another process."""
    total = 0
    for i in range(steps):
        result = await work(key, i, pause)
        total += int(result["index"])  # type: ignore[call-overload]
        if nap and i % 3 == 2 and i != steps - 1:
            await wf.sleep(nap)
    return total


def expected_total(steps: int) -> int:
    return steps * (steps - 1) // 2
