"""A live run's inbox: read again after a failed read, and read in its driver's context."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import warnings
from types import SimpleNamespace
from typing import Any

import pytest

import wf
from wf import Engine
from wf.engine._current import use_engine
from wf.engine._futures import in_run, install_task_factory
from wf.engine._inbox import InboxPoller
from wf.testing import MockClock

started: list[asyncio.Event] = []
"""Set by ``forever`` as it starts (the current test's event: events bind to a loop)."""


@wf.step
async def forever() -> str:
    started[0].set()
    await asyncio.sleep(3600)
    return "done"


@wf.workflow
async def waits_on_forever() -> str:
    return await forever()


@pytest.mark.timeout(60)
async def test_a_cancel_reaches_a_run_whose_inbox_read_failed_once(
    wf_engine: Engine, mock_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """One read of the inbox failing (its connection terminated mid-query) is no reason to
    stop reading it: a cancel sent later still reaches the run (it completed, the cancel
    ignored). The outage is said once, and its end once."""
    started[:] = [asyncio.Event()]
    wf_engine.inbox_poll = 0.01
    store = wf_engine.store
    real = store.read_inbox
    failed = asyncio.Event()

    async def read_inbox(run_id: str) -> Any:
        if started[0].is_set() and not failed.is_set():  # a live run's poll, not its drive's read
            failed.set()
            raise wf.StoreUnavailable("PostgreSQL failed to read an inbox: the test cut it")
        return await real(run_id)

    store.read_inbox = read_inbox  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="wf"):
        run = await wf.start(waits_on_forever)
        async with asyncio.timeout(10):
            await started[0].wait()
            await failed.wait()
            await asyncio.sleep(0.05)  # a few polls after the failed one
        other = Engine(store, mock_clock)  # another process would post it so
        with use_engine(other):
            assert await wf.get_run(run.id).cancel()
        async with asyncio.timeout(10):
            with pytest.raises(wf.RunCancelled):
                await run.result()
    said = [r.getMessage() for r in caplog.records if run.id in r.getMessage()]
    assert len(said) == 2, said
    assert "cannot read its inbox for now" in said[0] and "read again" in said[1], said


def _poller(read: Any) -> InboxPoller:
    store = SimpleNamespace(read_inbox=read, watch_inbox=lambda run_id, callback: lambda: None)
    engine = SimpleNamespace(store=store, inbox_poll=60.0)
    ctx = SimpleNamespace(run_id="r1", closed=False, loop=asyncio.get_running_loop())
    return InboxPoller(engine, ctx)  # type: ignore[arg-type]


async def test_a_look_started_by_a_workflows_post_and_stopped_at_once_leaves_no_warning() -> None:
    """A run of this process posting to a live run's inbox starts that run's next look in
    its own (the poster's) context: the look was made a task of the poster's workflow, and
    stopped before it ran it left "coroutine 'InboxPoller._read' was never awaited"."""

    async def read(run_id: str) -> list[Any]:
        return []

    loop = asyncio.get_running_loop()
    poller = _poller(read)
    inside = contextvars.copy_context()
    inside.run(in_run.set, True)  # the poster's context: a workflow's
    install_task_factory(loop)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            inside.run(poller._heard)
            poller.stop()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            gc.collect()
    finally:
        loop.set_task_factory(None)
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


async def test_looks_stop_for_good_only_when_looking_again_is_pointless(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A damaged inbox (``wf.StoreCorrupted``) or a lost lease ends the looks, said once;
    a store unavailable for now does not."""
    for error, stops in [
        (wf.StoreUnavailable("cut"), False),
        (wf.StoreError("refused"), False),
        (wf.StoreCorrupted("inbox line 3 is damaged"), True),
        (wf.LeaseLost("taken over"), True),
    ]:

        async def read(run_id: str, error: Exception = error) -> list[Any]:
            raise error

        poller = _poller(read)
        with caplog.at_level(logging.WARNING, logger="wf"):
            caplog.clear()
            poller._heard()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert poller._stopped is stops, error
        assert len(caplog.records) == 1, caplog.records
        poller.stop()
