"""A run whose code blocks the event loop is named: where it is stuck, its step and its run
(``wf.engine._watchdog``). The loop cannot be taken back from it; every other run in the
process waits, so the log says which run to fix."""

from __future__ import annotations

import logging
import time

import pytest

import wf
from wf import Engine
from wf._interrupts import StopSignals
from wf.engine import _watchdog
from wf.engine._current import use_engine
from wf.store.memory import MemoryStore


@wf.step
async def blocks(seconds: float) -> str:
    time.sleep(seconds)  # a blocking call in an async step: the bug this names
    return "done"


@wf.workflow
async def blocking(seconds: float) -> str:
    return await blocks(seconds)


@pytest.fixture
def quick_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_watchdog, "THRESHOLD", 0.3)
    monkeypatch.setattr(_watchdog, "INTERVAL", 0.05)


async def drive_blocking(seconds: float, caplog: pytest.LogCaptureFixture) -> str:
    """A run whose step blocks the loop ``seconds``, driven by a worker until idle; its id."""
    engine = Engine(MemoryStore())
    with use_engine(engine):
        run = await wf.start(blocking, seconds, detach=True)
        with caplog.at_level(logging.WARNING, logger="wf.worker"):
            await wf.Worker(engine, retention=False).run(until_idle=True)
        assert await run.result() == "done"
    return run.id


@pytest.mark.usefixtures("quick_watchdog")
async def test_a_blocked_loop_is_named_with_its_step_and_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run_id = await drive_blocking(1.0, caplog)
    [stalled] = [r.getMessage() for r in caplog.records if "has not run for" in r.getMessage()]
    assert f"step 'blocks' of run {run_id}" in stalled
    assert f"{__file__}:" in stalled and "(blocks)" in stalled
    assert "sync step" in stalled
    assert "twice exits at once" not in stalled  # no wf handler takes the signals here
    [again] = [r.getMessage() for r in caplog.records if "runs again after" in r.getMessage()]
    assert float(again.split("after ")[1].rstrip("s")) >= 0.6  # the step slept 1.0 s


@pytest.mark.usefixtures("quick_watchdog")
async def test_a_loop_that_turns_is_never_named(caplog: pytest.LogCaptureFixture) -> None:
    await drive_blocking(0.0, caplog)
    assert "event loop" not in caplog.text


@pytest.mark.usefixtures("quick_watchdog")
async def test_where_wf_takes_the_signals_the_warning_names_the_way_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # wf worker / serve / dev / run: a second Ctrl-C exits even while the loop is blocked.
    with StopSignals(lambda _sig: None, say=lambda _line: None):
        await drive_blocking(1.0, caplog)
    [stalled] = [r.getMessage() for r in caplog.records if "has not run for" in r.getMessage()]
    assert stalled.endswith("; Ctrl-C (or SIGTERM) twice exits at once, and runs in flight resume")
