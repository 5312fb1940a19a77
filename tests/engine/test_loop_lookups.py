"""How often a run on the local store looks up the running loop: each lookup asks the process
id (``getpid``, a system call: asyncio checks a loop is not a forked parent's), so the hot path
takes the loop from where it was looked up already."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import wf
from wf import Engine


@wf.step
async def inc(x: int) -> int:
    return x + 1


@wf.workflow
async def two_steps(x: int) -> int:
    for _ in range(2):
        x = await inc(x)
    return x


def _counted(counts: Counter[str], name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    """``real``, counting its calls from wf's own code under ``name`` (the standard library's
    are not the run's path: a log record, say, notes the process id)."""

    def counted(*args: Any) -> Any:
        caller = sys._getframe(1).f_code.co_filename
        if WF_DIR in caller or ASYNCIO_DIR in caller:
            counts[name] += 1
        return real(*args)

    return counted


WF_DIR = os.path.dirname(wf.__file__) + os.sep
ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep


@pytest.mark.parametrize("store_kind", ["local"])
async def test_a_run_started_then_awaited_looks_the_loop_up_four_times(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten runs started one by one, then awaited once they ended (the bench's "started one by
    one"): per run, the creation's committer, the driver task, the lease's committer and
    the inbox's watch look the loop up; the workflow's context (given the driver's), the
    result, the watch's entry and the driver's end do not (nine lookups a run before). A
    creation flushed in the flushing thread asks the process id once (``os.getpid``: a
    thread forked away is the parent's, and a fork made in C runs no Python hook)."""
    for run in [await wf.start(two_steps, i) for i in range(3)]:
        await run.result()  # warm: the committer, the store's timers
    counts: Counter[str] = Counter()
    loop_lookup = asyncio.get_running_loop
    monkeypatch.setattr(asyncio, "get_running_loop", _counted(counts, "loop", loop_lookup))
    monkeypatch.setattr(asyncio.events, "get_running_loop", _counted(counts, "loop", loop_lookup))
    monkeypatch.setattr(os, "getpid", _counted(counts, "getpid", os.getpid))
    runs = [await wf.start(two_steps, i) for i in range(10)]
    await asyncio.gather(*wf_engine.drivers.values())  # ended before anyone awaits them
    assert [await run.result() for run in runs] == [i + 2 for i in range(10)]
    monkeypatch.undo()
    assert counts["getpid"] <= 10
    assert counts["loop"] <= 4 * 10
