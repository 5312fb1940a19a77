"""Code in a run that calls ``sys.exit`` fails its run; it never ends the process driving it
(a ``SystemExit`` out of a task ends the event loop: the worker, and every run in it, and then
the run's next driver, again and again)."""

from __future__ import annotations

import sys

import pytest

import wf
from wf import Engine
from wf.engine._errors import rebuild_error

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
