"""A live run's inbox: read again after a failed read, and read in its driver's context."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import threading
import warnings
from types import SimpleNamespace
from typing import Any

import pytest

import wf
from wf import Engine
from wf.engine._current import use_engine
from wf.engine._futures import in_run, install_task_factory
from wf.engine._inbox import InboxPoller
from wf.store import RunRecord, RunStatus
from wf.store.local._lease import LocalLease
from wf.store.memory import _MemoryLease
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


held_began = threading.Event()
held_may_end = threading.Event()


@wf.step
def held_sync() -> str:
    held_began.set()
    held_may_end.wait(30)
    return "done"


@wf.step
async def after_held() -> str:
    return "after"


@wf.workflow
async def held_then_after() -> str:
    return await held_sync() + await after_held()


@pytest.mark.stores("memory", "local")
@pytest.mark.timeout(60)
async def test_a_cancel_whose_record_save_fails_once_is_applied_on_the_next_look(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save of the cancel flag (taken in while a sync step runs) failing once does not
    lose the cancel: the message is not yet applied, the next look takes it in again, and
    the run ends cancelled (it had completed, the message acknowledged and dropped)."""
    held_began.clear()
    held_may_end.clear()
    wf_engine.inbox_poll = 0.01
    failed: list[int] = []
    for cls in (LocalLease, _MemoryLease):
        real = cls.save

        async def save(self: Any, record: RunRecord, real: Any = real) -> None:
            if record.cancel_requested and record.status is RunStatus.RUNNING and not failed:
                failed.append(1)
                raise wf.StoreError("disk full (simulated, once)")
            await real(self, record)

        monkeypatch.setattr(cls, "save", save)
    run = await wf.start(held_then_after)
    try:
        await asyncio.to_thread(held_began.wait, 10)
        await wf_engine.store.post(run.id, "cancel", {})  # as `wf cancel` from another process
        async with asyncio.timeout(10):
            while not any(
                e["type"] == "cancel_requested" for e in await wf_engine.store.read_journal(run.id)
            ):
                await asyncio.sleep(0.01)
        assert failed
        assert (await wf_engine.store.get_run(run.id)).cancel_requested
    finally:
        held_may_end.set()
    with pytest.raises(wf.RunCancelled):
        await asyncio.wait_for(run.result(), 20)
    assert (await wf_engine.store.get_run(run.id)).status is RunStatus.CANCELLED
