"""Code in a run that calls ``sys.exit`` fails its run; it never ends the process driving it
(a ``SystemExit`` out of a task ends the event loop: the worker, and every run in it, and then
the run's next driver, again and again). So does any other ``BaseException`` the code raises
itself: a ``KeyboardInterrupt``, a ``GeneratorExit``, a class of its own, or asyncio's
``CancelledError`` when nothing cancelled it."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import sys
import threading
from collections.abc import AsyncIterator

import pytest

import wf
from wf import Engine
from wf._interrupts import StopSignals
from wf.engine._errors import rebuild_error, sigint_may_raise

attempts: list[str] = []


@wf.step(max_retries=3)
async def exits(code: int) -> int:
    attempts.append("async")
    sys.exit(code)


@wf.step(max_retries=3)
def exits_in_a_thread(code: int) -> int:
    attempts.append("sync")
    sys.exit(code)


@wf.step
async def add_one(x: int) -> int:
    return x + 1


@wf.workflow
async def step_exits(code: int) -> int:
    return await exits(code)


@wf.workflow
async def sync_step_exits(code: int) -> int:
    return await exits_in_a_thread(code)


@wf.workflow
async def workflow_exits(code: int) -> int:
    await add_one(code)
    sys.exit(code)


@wf.workflow
async def catches_it(code: int) -> str:
    try:
        await exits(code)
    except wf.FatalError as error:
        return str(error)
    return "not reached"


async def _helper_exits(code: int) -> int:
    sys.exit(code)


@wf.workflow
async def task_exits(code: int) -> int:
    # Not a step: a plain coroutine that asyncio.gather makes a task of.
    (first, _second) = await asyncio.gather(_helper_exits(code), add_one(code))
    return first


@wf.workflow
async def healthy(x: int) -> int:
    return await add_one(x)


@pytest.fixture(autouse=True)
def _reset() -> None:
    attempts.clear()


@pytest.mark.parametrize(
    ("flow", "where"),
    [
        (step_exits, "step 'exits'"),
        (sync_step_exits, "step 'exits_in_a_thread'"),
        (workflow_exits, f"workflow {workflow_exits.name!r}"),
        (task_exits, "a task of the workflow"),
    ],
)
async def test_sys_exit_fails_the_run_and_the_worker_goes_on(
    wf_engine: Engine, flow: wf.Workflow[..., int], where: str
) -> None:
    bad = await wf.start(flow, 3, detach=True)
    good = await wf.start(healthy, 1, detach=True)
    await wf.Worker(wf_engine, retention=False).run(until_idle=True)
    assert await good.result() == 2
    with pytest.raises(wf.RunFailed) as failed:
        await bad.result()
    assert isinstance(failed.value.original, wf.FatalError)
    assert f"{where} called sys.exit(3)" in str(failed.value)
    assert len(attempts) <= 1  # not retried: exiting is not a passing fault


async def test_the_workflow_sees_a_fatal_error_it_may_catch(wf_engine: Engine) -> None:
    run = await wf.start(catches_it, 0)
    assert "step 'exits' called sys.exit(0)" in await run.result()


def test_a_recorded_error_naming_system_exit_is_never_raised_as_one() -> None:
    # A journal edited, or written elsewhere, must not end the process that replays it.
    info = {"type": "SystemExit", "module": "builtins", "qualname": "SystemExit", "message": "3"}
    rebuilt = rebuild_error(info)
    assert isinstance(rebuilt, wf.StepFailed) and not isinstance(rebuilt, SystemExit)
    info = {"type": "ValueError", "module": "builtins", "qualname": "ValueError", "message": "x"}
    assert isinstance(rebuild_error(info), ValueError)


class OwnBase(BaseException):
    """A ``BaseException`` of the code's own."""


RAISED: dict[str, BaseException] = {
    "KeyboardInterrupt": KeyboardInterrupt(),
    "GeneratorExit": GeneratorExit(),
    "OwnBase": OwnBase("boom"),
    "CancelledError": asyncio.CancelledError(),
}


@wf.step(max_retries=3)
async def raises(kind: str) -> int:
    attempts.append("async")
    raise RAISED[kind]


@wf.step(max_retries=3)
def raises_in_a_thread(kind: str) -> int:
    attempts.append("sync")
    raise RAISED[kind]


@wf.workflow
async def step_raises(kind: str) -> int:
    return await raises(kind)


@wf.workflow
async def sync_step_raises(kind: str) -> int:
    return await raises_in_a_thread(kind)


@wf.workflow
async def workflow_raises(kind: str) -> int:
    await add_one(1)
    attempts.append("workflow")
    raise RAISED[kind]


@pytest.fixture
async def sigint_on_the_loop() -> AsyncIterator[None]:
    """SIGINT taken by the event loop, as ``wf worker`` (and serve, dev, run) take it: a
    ``KeyboardInterrupt`` is then never a real Ctrl-C, always code raising it."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


@pytest.mark.parametrize("kind", list(RAISED))
@pytest.mark.parametrize(
    ("flow", "where"),
    [
        (step_raises, "step 'raises'"),
        (sync_step_raises, "step 'raises_in_a_thread'"),
        (workflow_raises, f"workflow {workflow_raises.name!r}"),
    ],
)
@pytest.mark.usefixtures("sigint_on_the_loop")
async def test_a_base_exception_of_the_code_fails_its_run_once(
    wf_engine: Engine, flow: wf.Workflow[..., int], where: str, kind: str
) -> None:
    bad = await wf.start(flow, kind, detach=True)
    good = await wf.start(healthy, 1, detach=True)
    async with asyncio.timeout(30):  # it did not end: the run was driven again and again
        await wf.Worker(wf_engine, retention=False).run(until_idle=True)
    assert await good.result() == 2
    with pytest.raises(wf.RunFailed) as failed:
        await bad.result()
    assert isinstance(failed.value.original, wf.FatalError)
    message = str(failed.value)
    assert f"{where} raised " in message and "raise an exception instead" in message
    assert kind in message
    if kind == "CancelledError":
        assert "nothing cancelled it" in message
    assert "stalled" not in message
    assert len(attempts) == 1  # not retried, not run again by a recovering driver
    assert (await bad.status()) is wf.RunStatus.FAILED


async def test_a_keyboard_interrupt_is_a_real_ctrl_c_only_where_one_can_raise() -> None:
    # Where a SIGINT raises KeyboardInterrupt (Python's own handler, asyncio.run's), a
    # KeyboardInterrupt in the main thread may be an operator's Ctrl-C: it stops the program
    # as it always does, and the run is left to its next driver.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert sigint_may_raise()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert not sigint_may_raise()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        try:
            assert not sigint_may_raise()  # the loop takes the signal: nothing raises
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        assert sigint_may_raise()
        with StopSignals(lambda _sig: None, say=lambda _line: None):
            assert not sigint_may_raise()  # wf's commands' handler: nothing raises either
        assert sigint_may_raise()
        in_thread: list[bool] = []
        thread = threading.Thread(target=lambda: in_thread.append(sigint_may_raise()))
        thread.start()
        thread.join(5)
        assert in_thread == [False]  # signals reach the main thread only
    finally:
        signal.signal(signal.SIGINT, previous)


@wf.step
async def naps() -> int:
    attempts.append("naps")
    await asyncio.sleep(3600)
    return 1


@wf.workflow
async def gathers_a_failure() -> int:
    results = await asyncio.gather(naps(), exits(1))
    return sum(results)


async def test_a_step_cancelled_by_its_failing_sibling_is_not_made_up(wf_engine: Engine) -> None:
    # A real cancellation (a sibling's failure in a gather) stays a cancellation.
    run = await wf.start(gathers_a_failure, detach=True)
    await wf.Worker(wf_engine, retention=False).run(until_idle=True)
    with pytest.raises(wf.RunFailed) as failed:
        await run.result()
    assert "called sys.exit(1)" in str(failed.value)
    assert "nothing cancelled it" not in str(failed.value)


async def _exits_when_closed() -> None:
    try:
        await asyncio.Event().wait()
    finally:
        sys.exit(5)


@wf.workflow
async def closes_a_task() -> str:
    task = asyncio.create_task(_exits_when_closed())
    await asyncio.sleep(0)  # the task starts
    try:
        task.get_coro().close()  # runs its finally
    except wf.FatalError as error:
        return str(error)
    finally:
        task.cancel()
        with contextlib.suppress(RuntimeError):  # its coroutine is closed: it cannot be cancelled
            await task
    return "not reached"


async def test_a_task_whose_finally_exits_when_closed_raises_a_fatal_error(
    wf_engine: Engine,
) -> None:
    run = await wf.start(closes_a_task)
    assert "a task of the workflow called sys.exit(5)" in await run.result()


async def _waits(event: asyncio.Event) -> None:
    await event.wait()


@wf.workflow
async def looks_at_its_task() -> list[str]:
    event = asyncio.Event()
    task = asyncio.create_task(_waits(event))
    coro = task.get_coro()
    states = [inspect.getcoroutinestate(coro)]
    await asyncio.sleep(0)
    states += [inspect.getcoroutinestate(coro), type(coro.cr_await).__name__]
    assert coro.cr_origin is None  # origin tracking is off
    event.set()
    await task
    return [*states, inspect.getcoroutinestate(coro)]


async def test_a_task_of_the_workflow_reads_as_its_coroutine(wf_engine: Engine) -> None:
    run = await wf.start(looks_at_its_task)
    assert await run.result() == ["CORO_CREATED", "CORO_SUSPENDED", "coroutine", "CORO_CLOSED"]
