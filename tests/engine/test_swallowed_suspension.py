"""Workflow code that catches the ``CancelledError`` a suspension unwinds it with, and goes on,
does not end the run: the run suspends all the same, what the code did after is discarded (no
step of it runs), and on the resume the wait ends as it would have."""

from __future__ import annotations

import asyncio
import logging

import pytest

import wf
from wf import Engine

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@wf.step
async def note(what: str) -> str:
    ran.append(what)
    return what


@wf.workflow
async def catches_and_returns() -> str:
    try:
        await wf.sleep(3600)
    except asyncio.CancelledError:
        return "cleaned up"  # the idiom of plain asyncio code
    return await note("slept")


@wf.workflow
async def catches_and_runs_a_step() -> str:
    try:
        await wf.sleep(3600)
    except asyncio.CancelledError:
        await note("cleanup")
        return "cleaned up"
    return await note("slept")


@wf.workflow
async def catches_and_raises() -> str:
    try:
        await wf.sleep(3600)
    except asyncio.CancelledError:
        raise ValueError("interrupted") from None
    return await note("slept")


@wf.workflow
async def catches_everything_and_goes_on() -> str:
    try:  # noqa: SIM105 (the try/except users write)
        await wf.sleep(3600)
    except BaseException:
        pass
    return await note("went on")


@pytest.mark.parametrize(
    ("workflow", "result", "discarded"),
    [
        (catches_and_returns, "slept", True),
        (catches_and_raises, "slept", True),
        # A durable call after the catch unwinds the code again (nothing to discard).
        (catches_and_runs_a_step, "slept", False),
        (catches_everything_and_goes_on, "went on", False),
    ],
)
async def test_a_swallowed_suspension_still_suspends_the_run(
    wf_engine: Engine,
    workflow: wf.Workflow[[], str],
    result: str,
    discarded: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = await wf.start(workflow, detach=True)
    with caplog.at_level(logging.WARNING, logger="wf"):
        await wf.Worker(wf_engine, retention=False).run(until_idle=True)
        assert await run.result() == result
    assert ran == [result]  # nothing the code did after the suspension ran
    said = "caught the CancelledError that suspends it" in caplog.text
    assert said is discarded
    assert (run.id in caplog.text) is discarded
