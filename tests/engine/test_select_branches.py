"""``wf.select`` / ``wf.first`` over helper coroutines and tasks: a branch takes its operation
ids only once it runs, and a replay runs only the winner, so a loser's ids must not shift the
ids of what comes after the select."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import wf
from tests.engine.late_drives import result_of_a_late_drive
from wf import Engine, admin
from wf.engine._replay_check import check_run
from wf.store import Event
from wf.testing import MockClock


async def nap(seconds: float) -> None:
    await wf.sleep(seconds)


async def nap_in_task(seconds: float) -> None:
    await asyncio.ensure_future(nap(seconds))  # its ops are taken by a task of its own


async def inner_race() -> None:
    await wf.first(nap(45), nap(60))  # its decision's ops are the outer loser's too


@wf.step
async def mark(name: str) -> str:
    return name


async def two_naps(seconds: float) -> str:
    await wf.sleep(seconds)
    await wf.sleep(seconds)
    return await mark("two")


@wf.workflow
async def hook_or_nap(token: str, how: str) -> str:
    hook = wf.create_hook(str, token=token)
    if how == "coro":
        got = await wf.first(hook.next(), nap(45))
    elif how == "task":
        got = await wf.first(hook.next(), nap_in_task(45))
    elif how == "nested":
        got = await wf.first(hook.next(), inner_race())
    else:
        got = await wf.first(hook.next(), two_naps(200))
    await wf.sleep(86400)  # suspend after the select: its resume replays the select
    return f"{got} {await mark('after')}"


async def _race_won_by_the_hook(wf_engine: Engine, mock_clock: MockClock, how: str) -> None:
    mock_clock.autojump = False
    run = await wf.start(hook_or_nap, f"tok-{how}", how)
    # settle's timeout runs on the mock clock: short of the loser's next wake
    assert (await run.settle(timeout=5)).status == wf.RunStatus.SUSPENDED
    mock_clock.jump(250 if how == "two" else 10)  # "two" is in its second sleep by then
    await wf.resume_hook(f"tok-{how}", "p")
    assert (await run.settle(timeout=5)).status == wf.RunStatus.SUSPENDED
    mock_clock.jump(86400)
    assert await run.result(timeout=30) == "p after"
    report = await check_run(wf_engine.store, run.id)
    assert report.status == "ok", report.message


async def test_a_losing_coroutine_branch_does_not_shift_later_op_ids(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await _race_won_by_the_hook(wf_engine, mock_clock, "coro")


async def test_a_losing_branch_whose_ops_run_in_a_task_of_its_own(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await _race_won_by_the_hook(wf_engine, mock_clock, "task")


async def test_a_losing_branch_that_got_past_its_first_operation(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await _race_won_by_the_hook(wf_engine, mock_clock, "two")


async def test_a_losing_branch_with_a_select_of_its_own(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await _race_won_by_the_hook(wf_engine, mock_clock, "nested")


@wf.workflow
async def naps_race() -> str:
    got = await wf.first(two_naps(50), nap(30))  # the loser has taken two ops by then
    await wf.sleep(86400)
    return f"{got} {await mark('after')}"


async def test_a_winning_coroutine_beside_a_losing_one_replays_in_place(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    run = await wf.start(naps_race)
    assert await run.result(timeout=30) == "None after"
    report = await check_run(wf_engine.store, run.id)
    assert report.status == "ok", report.message


_GATE = threading.Event()
"""Holds the sync step below until the decision is in."""


@wf.step
async def waits_forever() -> str:
    await asyncio.Event().wait()  # loses the race below: cancelled
    return "never"


@wf.step
def waits_for_the_gate() -> str:
    _GATE.wait(10)  # a thread runs on once its call is cancelled: its result is dropped
    return "sync"


async def step_then_nap(sync: bool) -> str:
    got = await (waits_for_the_gate() if sync else waits_forever())
    await wf.sleep(5)
    return got


async def step_then_nap_in_task(sync: bool) -> str:
    return await asyncio.ensure_future(step_then_nap(sync))


@wf.workflow
async def hook_or_step(token: str, sync: bool, in_task: bool) -> str:
    hook = wf.create_hook(str, token=token)
    helper = step_then_nap_in_task(sync) if in_task else step_then_nap(sync)
    got = await wf.first(hook.next(), helper)
    await wf.sleep(86400)
    return got


async def _journal_until(store: wf.store.Store, run_id: str, kind: str) -> list[Event]:
    for _ in range(500):
        journal = await store.read_journal(run_id)
        if any(event["type"] == kind for event in journal):
            return journal
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind} in the journal of {run_id}")


def _step_statuses(detail: admin.RunDetail) -> dict[str, str]:
    return {row.name: row.status for row in detail.steps if row.kind == "step"}


@pytest.mark.parametrize("in_task", [False, True], ids=["coro", "task"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_step_in_a_losing_coroutine_branch_is_shown_cancelled(
    wf_engine: Engine, mock_clock: MockClock, sync: bool, in_task: bool
) -> None:
    """The step the losing helper is in runs in a task of its own, which the branch's
    cancellation reaches: the decision names it (``cancelled``), so it is not shown running
    (or interrupted) while the run goes on, nor after the replay of the select."""
    _GATE.clear()
    mock_clock.autojump = False
    token = f"step-{sync}-{in_task}"
    run = await wf.start(hook_or_step, token, sync, in_task)
    await _journal_until(wf_engine.store, run.id, "step_started")
    await wf.resume_hook(token, "p")
    journal = await _journal_until(wf_engine.store, run.id, "select_decided")
    _GATE.set()
    [decided] = [event for event in journal if event["type"] == "select_decided"]
    [step] = [event["op"] for event in journal if event["type"] == "step_started"]
    assert decided.get("cancelled") == [step]
    assert (await run.settle(timeout=5)).status == wf.RunStatus.SUSPENDED
    name = "waits_for_the_gate" if sync else "waits_forever"
    detail = await admin.run_detail(wf_engine.store, run.id)
    assert _step_statuses(detail) == {name: "cancelled"}
    mock_clock.jump(86400)
    assert await run.result(timeout=30) == "p"  # the replay does not run the loser
    detail = await admin.run_detail(wf_engine.store, run.id)
    assert _step_statuses(detail) == {name: "cancelled"}
    report = await check_run(wf_engine.store, run.id)
    assert report.status == "ok", report.message


async def next_payload(hook: wf.Hook[str]) -> str:
    return await hook.next()


@wf.workflow
async def helper_races_a_sleep(token: str) -> str | None:
    hook = wf.create_hook(str, token=token)
    return await wf.first(next_payload(hook), wf.sleep(45))


async def test_a_helper_branch_decided_late_ended_when_its_operation_did(
    mock_clock: MockClock,
) -> None:
    """The payload reached the store at +10 s while no driver ran; the drive at +100 s finds
    the sleep over too: the helper ended at +10 s (its payload's), not when it was driven."""
    store = wf.testing.MemoryStore()
    mock_clock.autojump = False
    async with wf.testing.TestEngine(store, mock_clock) as engine:
        with engine.installed():
            run = await wf.start(helper_races_a_sleep, "tok-select")
            assert (await run.settle(timeout=30)).status == wf.RunStatus.SUSPENDED
            mock_clock.jump(10)
            await wf.resume_hook("tok-select", "p")
            await engine.crash(run)
    assert await result_of_a_late_drive(store, mock_clock, run.id, after=90) == "p"


async def block_awaits_an_earlier_sleep(seconds: float) -> str:
    earlier = asyncio.ensure_future(wf.sleep(seconds))  # begun before the block
    try:
        async with wf.timeout(60):
            await earlier
        return "in time"
    except TimeoutError:
        return "timed out"


@wf.workflow
async def block_in_a_branch(seconds: float) -> str | None:
    return await wf.first(block_awaits_an_earlier_sleep(seconds), wf.sleep(200))


@pytest.mark.parametrize(("seconds", "seen"), [(45.0, "in time"), (90.0, "timed out")])
async def test_a_block_in_a_helper_branch_counts_what_it_awaited(
    wf_engine: Engine, mock_clock: MockClock, seconds: float, seen: str
) -> None:
    """A drive long after the sleep and the block's deadline ends the block when the sleep
    it awaited did: the helper's awaits count for the block inside it."""
    mock_clock.autojump = False
    run = await wf.start(block_in_a_branch, seconds)
    assert (await run.settle(timeout=30)).status == wf.RunStatus.SUSPENDED
    mock_clock.jump(1000)
    mock_clock.autojump = True
    assert await run.result() == seen


@wf.step
async def kilobyte(i: int) -> str:
    return "x" * 1000


async def many_steps() -> str:
    for i in range(50):
        await asyncio.ensure_future(kilobyte(i))
    return "done"


@wf.workflow
async def loops_on_steps() -> str:
    return str(await wf.first(many_steps(), wf.sleep(10**6)))


async def test_a_helper_outside_any_block_keeps_none_of_its_own_operations_outcomes(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no timeout block around the select, a helper's own operations' futures (their
    ends noted as they come) are not kept until it decides: a helper looping on steps kept
    each one's outcome for as long as the select waited."""
    from wf.engine import _compose

    held: list[int] = []
    ended_at = _compose._ended_at

    def noting(ctx: Any, future: Any, branch: Any) -> Any:
        if branch is not None:
            held.append(len(branch.awaited))
        return ended_at(ctx, future, branch)

    monkeypatch.setattr(_compose, "_ended_at", noting)
    run = await wf.start(loops_on_steps)
    assert await run.result(timeout=60) == "done"
    assert held == [0]
