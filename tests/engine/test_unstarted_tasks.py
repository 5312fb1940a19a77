"""A task of a run that is cancelled before its first step (a crash or a stop just after the
drive made it, a run cancelled at once) leaves no coroutine "never awaited": the cancellation
ends the coroutine as it would in a plain task, and none is made that its task may never run.
The warning would name the user's workflow or coroutine, for code that did nothing wrong."""

from __future__ import annotations

import asyncio
import gc
import warnings

import wf
from wf.testing import TestEngine


async def idles() -> None:
    await asyncio.sleep(0)


@wf.workflow(name="tests.unstarted:cancels_a_task_at_once")
async def cancels_a_task_at_once() -> bool:
    task = asyncio.create_task(idles())
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


def _never_awaited(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


async def test_a_task_of_the_workflow_cancelled_before_it_ran_is_not_left_unawaited(
    wf_engine: TestEngine,
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = await wf.start(cancels_a_task_at_once)
        assert await run.result() is True
        gc.collect()
    assert _never_awaited(caught) == []
