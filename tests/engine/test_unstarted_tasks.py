"""A task of a run that is cancelled before its first step (a crash or a stop just after the
drive made it, a run cancelled at once) leaves no coroutine "never awaited": the cancellation
ends the coroutine as it would in a plain task, and none is made that its task may never run.
The warning would name the user's workflow or coroutine, for code that did nothing wrong.
Nor does the guard around a task of the code keep what it threw in alive."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
import weakref

import pytest

import wf
from wf.testing import TestEngine


@wf.workflow(name="tests.unstarted:waits_for_a_hook")
async def waits_for_a_hook(token: str) -> str:
    return await wf.create_hook(str, token=token).next()


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


class Held:
    """Something a task's code holds while it waits."""


held: list[weakref.ref[Held]] = []


async def holds_then_waits() -> None:
    thing = Held()
    held.append(weakref.ref(thing))
    await asyncio.Event().wait()


@wf.workflow(name="tests.unstarted:cancels_a_waiting_task")
async def cancels_a_waiting_task() -> bool:
    task = asyncio.create_task(holds_then_waits())
    await asyncio.sleep(0)  # it starts, and waits
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return True


def _never_awaited(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


async def test_a_crash_before_the_workflow_ever_ran_leaves_no_coroutine_unawaited(
    wf_engine: TestEngine,
) -> None:
    """Crashed at every loop turn from the drive's start: the first few turns land after the
    drive made the workflow's task and before that task's first step."""
    met = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for turns in range(8):
            run = await wf.start(waits_for_a_hook, f"unstarted-{turns}", detach=True)
            wf_engine.drive_soon(run.id)
            for _ in range(turns):
                await asyncio.sleep(0)
            met += run.id in wf_engine.drivers
            await wf_engine.crash(run)
            await wf_engine.settle(timeout=10)
            await wf.resume_hook(f"unstarted-{turns}", "paid")
            await wf_engine.settle(timeout=10)
            assert await run.result() == "paid"
        gc.collect()
    assert met >= 4  # the crash met the drive all along its start
    assert _never_awaited(caught) == []


async def test_a_task_of_the_workflow_cancelled_before_it_ran_is_not_left_unawaited(
    wf_engine: TestEngine,
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = await wf.start(cancels_a_task_at_once)
        assert await run.result() is True
        gc.collect()
    assert _never_awaited(caught) == []


@pytest.mark.stores("memory", "local")
async def test_a_cancelled_task_of_the_workflow_lets_go_of_its_code_without_a_collection(
    wf_engine: TestEngine,
) -> None:
    """The cancellation thrown into the task's code must not be held by the guard's frame,
    which is in its traceback: that cycle kept the code's frames (an un-awaited operation in
    them, whose warning then came during some later test) alive until a garbage collection."""
    gc.collect()
    gc.disable()
    try:
        run = await wf.start(cancels_a_waiting_task)
        assert await run.result() is True
        assert held[-1]() is None
    finally:
        gc.enable()
