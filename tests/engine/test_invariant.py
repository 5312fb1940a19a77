"""The wake-up invariant's check (``wf.engine._invariant``): a worker finds a run suspended
although what it waits for is in the store, makes it due and says so."""

from __future__ import annotations

import asyncio
import logging

import pytest

import wf
from wf import Engine, Worker
from wf.engine._invariant import stuck_runs


@wf.workflow
async def gated_child() -> str:
    return await wf.create_hook(str, token="gate").next()


@wf.workflow
async def waiting_parent() -> str:
    child = await wf.start(gated_child)
    return "child said " + await child.result()


async def test_a_worker_repairs_a_parent_whose_childs_outcome_was_lost(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    parent = await wf.start(waiting_parent)
    await parent.settle(timeout=10)
    child = wf.get_run(f"{parent.id}.0")
    await child.settle(timeout=10)
    await wf.resume_hook("gate", "hi")
    assert await child.result(timeout=10) == "hi"
    # Damage: the child's message to its parent is lost (acknowledged unread).
    store = wf_engine.store
    lease = await store.try_acquire(parent.id)
    assert lease is not None
    await lease.ack_inbox([m.id for m in await store.read_inbox(parent.id)])
    await lease.release()
    assert (await parent.status()) is wf.RunStatus.SUSPENDED

    found = await stuck_runs(wf_engine)
    assert [(s.run_id, s.reason) for s in found] == [
        (parent.id, f"child run {child.id} ended unannounced")
    ]
    worker = Worker(wf_engine, poll=0.05)
    with caplog.at_level(logging.WARNING, logger="wf.worker"):
        await asyncio.wait_for(worker.run(until_idle=True), 10)
    assert [s.run_id for s in worker.repairs] == [parent.id]
    assert "was suspended although child run" in caplog.text and "bug in wf" in caplog.text
    assert await parent.result(timeout=10) == "child said hi"
    assert await stuck_runs(wf_engine) == []


@wf.workflow
async def two_payloads() -> list[str]:
    hook = wf.create_hook(str, token="twice")
    return [await hook.next(), await hook.next()]


async def test_a_run_waiting_on_a_hook_with_a_payload_taken_in_is_found(wf_engine: Engine) -> None:
    run = await wf.start(two_payloads)
    await run.settle(timeout=10)
    assert await stuck_runs(wf_engine) == []  # waiting, genuinely
    await wf.resume_hook("twice", "a")
    await run.settle(timeout=10)
    assert await stuck_runs(wf_engine) == []  # took "a", waits for the second
    # Damage: a payload recorded in the journal while the run sleeps on the same hook.
    store = wf_engine.store
    lease = await store.try_acquire(run.id)
    assert lease is not None
    journal = await store.read_journal(run.id)
    payload = next(e for e in journal if e["type"] == "hook_payload")
    suspended = journal[-1]
    await lease.append([{**payload, "ts": suspended["ts"], "message": "lost"}, suspended])
    await lease.release()
    found = await stuck_runs(wf_engine)
    assert [(s.run_id, s.reason) for s in found] == [
        (run.id, "hook 'twice' has a payload not taken")
    ]
    worker = Worker(wf_engine, poll=0.05)
    await asyncio.wait_for(worker.run(until_idle=True), 10)
    assert await run.result(timeout=10) == ["a", "a"]


step_may_end = asyncio.Event()


@wf.step
async def held_step() -> str:
    await step_may_end.wait()  # never set: the test crashes the run inside it
    return "never"


@wf.workflow
async def running_child() -> str:
    return await held_step()


@wf.workflow
async def parent_of_running_child() -> str:
    child = await wf.start(running_child)
    return "child said " + await child.result()


async def test_a_child_still_announcing_its_outcome_is_no_stuck_parent(wf_engine: Engine) -> None:
    """Between a child's outcome in its journal and its post to the parent, a store that
    derives records from the journal (local) already shows the child ended: the check must not
    take that for a lost outcome (it did, and repaired healthy parents, in the model test)."""
    global step_may_end
    step_may_end = asyncio.Event()
    parent = await wf.start(parent_of_running_child)
    child = wf.get_run(f"{parent.id}.0")
    for _ in range(500):
        if wf_engine.live.get(child.id) and wf_engine.live[child.id].running_steps:
            break
        await asyncio.sleep(0.01)
    await parent.settle(timeout=10)
    await wf_engine.crash(child)  # the child's driver dies in its step...
    store = wf_engine.store
    lease = await store.try_acquire(child.id)  # ...and a new one is ending the child
    assert lease is not None
    done = {"type": "run_completed", "ts": wf_engine.clock.now(), "output": wf.encode("hi")}
    await lease.append([done])
    assert await stuck_runs(wf_engine) == []  # the child's driver is about to tell its parent
    await lease.release()  # that driver dies before the post: the child stays due
    assert await stuck_runs(wf_engine) == []
    worker = Worker(wf_engine, poll=0.05)
    await asyncio.wait_for(worker.run(until_idle=True), 10)  # the next driver tells
    assert worker.repairs == []
    assert await parent.result(timeout=10) == "child said hi"


@pytest.mark.parametrize("then", ["made due", "taken in"])
async def test_a_message_caught_between_its_post_and_the_run_made_due_is_no_stuck_run(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """A post makes its message visible, then the run due (the local store flushes between
    the two, in a thread): a check that reads the message and finds the run not due waits for
    the post to finish ("made due"), or for the message to go ("taken in": a driver took it,
    or a post whose flush failed withdrew it), instead of repairing a healthy run."""
    run = await wf.start(two_payloads)
    await run.settle(timeout=10)
    store = wf_engine.store
    message = await store.post(run.id, "wake", {})
    real = store.due_runs
    calls = 0

    async def halfway(now: float, limit: int = 100) -> list[str]:
        # Not due for the check's first two looks (the post has not made it due yet), nor
        # ever once its message is gone (withdrawn: it never was).
        nonlocal calls
        calls += 1
        due = await real(now, limit=limit)
        if calls == 2 and then == "taken in":
            lease = await store.try_acquire(run.id)
            assert lease is not None
            await lease.ack_inbox([message])
            await lease.release()
        made_due = calls > 2 and then == "made due"
        return due if made_due else [r for r in due if r != run.id]

    monkeypatch.setattr(store, "due_runs", halfway)
    assert await asyncio.wait_for(stuck_runs(wf_engine), 1.0) == []
    assert calls >= 2
