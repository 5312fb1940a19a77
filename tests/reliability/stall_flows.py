"""Workflows of the stalled-run tests, imported by ``wf worker`` subprocesses as
``tests.reliability.stall_flows``: steps that end their process, as an out-of-memory kill or a
crash in a C extension would.

Each execution of ``crash`` and ``crash_once`` appends ``<name> <index> <pid>`` to
``$WF_TORTURE_LOG/stall.log`` before it ends the process, so the tests count them.
"""

from __future__ import annotations

import os
from pathlib import Path

import wf


def _log(line: str) -> None:
    path = Path(os.environ["WF_TORTURE_LOG"]) / "stall.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@wf.step
def prepare(n: int) -> int:
    return n * 10


@wf.step
def crash(index: int) -> int:
    """Ends its process every time."""
    _log(f"crash {index} {os.getpid()}")
    os._exit(1)


@wf.step
def crash_once(index: int) -> int:
    """Ends its process the first time it runs for ``index``; returns ``index`` after."""
    marker = Path(os.environ["WF_TORTURE_LOG"]) / f"crashed-{index}"
    if not marker.exists():
        marker.touch()
        _log(f"crash_once {index} {os.getpid()}")
        os._exit(1)
    return index


@wf.workflow(max_recoveries=2)
async def stalls() -> int:
    """Prepares (op 0), then dies in ``crash`` (op 1) every time it gets there."""
    await prepare(1)
    return await crash(1)


@wf.workflow(max_recoveries=2)
async def crashes_forward(n: int) -> list[int]:
    """Each step dies once, then succeeds: every death comes after progress."""
    return [await crash_once(i) for i in range(n)]


@wf.workflow
async def healthy(n: int) -> int:
    return await prepare(n)


@wf.workflow(max_recoveries=3)
async def dies_in_its_code() -> int:
    """Ends its process in the workflow's own code, before any step: every time."""
    _log(f"body 0 {os.getpid()}")
    os._exit(1)


@wf.step
def slow_work(n: int) -> int:
    """A step long enough that a neighbour's death comes while it runs."""
    import time

    time.sleep(0.4)
    return n


@wf.step
def crash_soon(index: int) -> int:
    """Ends its process a moment after it starts, every time: its neighbours are mid-step."""
    import time

    time.sleep(0.1)
    _log(f"crash_soon {index} {os.getpid()}")
    os._exit(1)


@wf.workflow(max_recoveries=4)
async def poison() -> int:
    """Dies in ``crash_soon`` every time. ``max_recoveries=4``, as its bystanders: above the
    deaths after which a run is driven alone (2), and few, as each death is a worker's start."""
    return await crash_soon(0)


@wf.workflow(max_recoveries=4)
async def bystander(n: int) -> int:
    """Dies with ``poison`` while claimed beside it: if those deaths were never stopped, it
    would reach its ``max_recoveries`` with the poison, and fail stalled too."""
    return await slow_work(n)
