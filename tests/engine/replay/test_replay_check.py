"""Checked-in journals of older code, replayed against the current code (``flows.py``)."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

import wf
from tests.engine.replay import flows
from wf import Engine
from wf.engine._replay_check import check_run, check_runs
from wf.store import RunRecord
from wf.store.memory import MemoryStore
from wf.testing import MockClock, TestEngine

JOURNALS = pathlib.Path(__file__).parent / "journals"


async def load(store: MemoryStore, name: str) -> str:
    data = json.loads((JOURNALS / f"{name}.json").read_text())
    record = RunRecord.from_json(data["record"])
    assert await store.create_run(record, data["journal"])
    return record.id


@pytest.mark.parametrize(
    "name",
    [
        "unchanged-suspended",
        "unchanged-completed",
        "patched-old-suspended",
        "patched-old-completed",
    ],
)
async def test_journals_of_compatible_code_replay(name: str) -> None:
    store = MemoryStore()
    run_id = await load(store, name)
    report = await check_run(store, run_id)
    assert report.status == "ok", report.message
    assert report.ops_replayed >= 2


@pytest.mark.parametrize(
    ("name", "seen"),
    [("timeout-in-time-suspended", "in time"), ("timeout-late-suspended", "timed out")],
)
async def test_journals_without_a_journaled_block_end_resume_as_they_were_driven(
    name: str, seen: str
) -> None:
    """A wf before ``timeout_ended`` journaled a block's end only when it timed out: its runs
    still check ok and end as their first drive decided, resumed a day after the deadline
    with the block's end as the first thing the journal lacks."""
    store = MemoryStore()
    run_id = await load(store, name)
    report = await check_run(store, run_id)
    assert report.status == "ok", report.message
    async with TestEngine(store, MockClock(start=1800000000.0 + 86400 * 2)):
        assert await wf.get_run(run_id).result() == seen
    journal = await store.read_journal(run_id)
    assert [e["result"] for e in journal if e["type"] == "step_completed"][-1] == seen


async def test_a_reordered_workflow_is_reported_as_divergent_with_the_source_line() -> None:
    store = MemoryStore()
    run_id = await load(store, "reordered-suspended")
    report = await check_run(store, run_id)
    assert report.status == "diverged"
    divergence = report.divergence
    assert divergence is not None
    assert (divergence.index, divergence.recorded, divergence.current) == (
        0,
        "step 'reserve'",
        "step 'charge'",
    )
    assert divergence.location and divergence.location.startswith(flows.__file__)
    assert "operation #0" in report.message


async def test_a_replay_check_executes_nothing_and_writes_nothing() -> None:
    store = MemoryStore()
    run_id = await load(store, "unchanged-suspended")
    before = await store.read_journal(run_id)
    calls: list[str] = []
    original = flows.charge.fn
    flows.charge.fn = lambda amount: calls.append("charge") or "x"  # type: ignore[assignment]
    try:
        report = await check_run(store, run_id)
    finally:
        flows.charge.fn = original
    assert report.status == "ok"
    assert calls == []
    assert await store.read_journal(run_id) == before
    assert (await store.get_run(run_id)).status == wf.RunStatus.SUSPENDED


async def test_check_runs_reports_every_run_in_the_store() -> None:
    store = MemoryStore()
    for name in ("unchanged-suspended", "reordered-suspended", "patched-old-suspended"):
        await load(store, name)
    reports = {r.run_id: r.status for r in await check_runs(store)}
    assert sorted(reports.values()) == ["diverged", "ok", "ok"]


async def test_old_and_new_runs_of_a_patched_workflow_both_complete() -> None:
    store = MemoryStore()
    old_id = await load(store, "patched-old-suspended")
    from wf.testing import engine

    async with engine(store):
        old = wf.get_run(old_id)
        new = await wf.start(flows.patched_flow, "book")
        assert await old.result() == ["reserved book", "sent via email"]
        assert await new.result() == ["reserved book", "sent via sms"]
        journal = await store.read_journal(new.id)
        assert [e["name"] for e in journal if e["type"] == "patch_recorded"] == [
            "sms-instead-of-email"
        ]


async def test_the_code_a_run_started_on_is_recorded(wf_engine: Engine) -> None:
    run = await wf.start(flows.unchanged, "x")
    record = await run.record()
    assert record.code_hash and len(record.code_hash) == 12
    assert record.deployment is None  # no deployment id set: the run is unpinned


@wf.workflow(name="replay:deprecated")
async def deprecated_flow() -> str:
    wf.deprecate_patch("sms-instead-of-email")
    return await flows.notify("sms")


async def test_deprecate_patch_accepts_runs_with_and_without_the_marker(
    wf_engine: Engine,
) -> None:
    run = await wf.start(deprecated_flow)
    assert await run.result() == "sent via sms"


async def test_dropping_deprecate_patch_diverges_for_a_run_that_holds_the_marker() -> None:
    """docs/check.md: ``wf.deprecate_patch`` may go once no unfinished run holds the marker."""
    store = MemoryStore()
    ts, started = 1800000000.0, {"args": ["book"], "kwargs": {}}
    journal = [
        {"type": "run_started", "workflow": "replay:patch-gone", "input": started, "ts": ts},
        {"type": "step_started", "op": 0, "name": "reserve", "attempt": 1, "ts": ts},
        {"type": "step_completed", "op": 0, "name": "reserve", "attempt": 1, "ts": ts},
        {"type": "patch_recorded", "op": 1, "name": "sms-instead-of-email", "ts": ts},
        {"type": "sleep_started", "op": 2, "name": "sleep", "until": ts + 86400, "ts": ts},
    ]
    journal[2]["result"] = "reserved book"
    record = RunRecord(
        id="wrun_marker_held",
        workflow="replay:patch-gone",
        input=started,
        status=wf.RunStatus.SUSPENDED,
        wake_at=ts + 86400,
    )
    assert await store.create_run(record, journal)
    report = await check_run(store, record.id)
    assert report.status == "diverged" and report.divergence is not None
    assert (report.divergence.recorded, report.divergence.current) == (
        "patch 'sms-instead-of-email'",
        "step 'notify'",
    )


def _gathered_journal(order: list[int]) -> tuple[RunRecord, list[dict[str, object]]]:
    """The journal a live run of ``flows.gathered`` writes when the branches' first steps end
    in ``order``: each branch's second call takes the next id as its first step ends."""
    ts, started = 1800000000.0, {"args": [], "kwargs": {}}
    journal: list[dict[str, object]] = [
        {"type": "run_started", "workflow": "replay:gathered", "input": started, "ts": ts}
    ]

    def step(op: int, item: int, phase: str) -> None:
        args = {"args": [item, phase], "kwargs": {}}
        journal.append({"type": "step_started", "op": op, "name": "tagged", "args": args, "ts": ts})
        result = f"item{item}-{phase}"
        journal.append(
            {"type": "step_completed", "op": op, "name": "tagged", "result": result, "ts": ts}
        )

    for item in range(3):  # the three first steps start together
        args = {"args": [item, "first"], "kwargs": {}}
        journal.append(
            {"type": "step_started", "op": item, "name": "tagged", "args": args, "ts": ts}
        )
    for op, item in enumerate(order, start=3):
        result = f"item{item}-first"
        journal.append(
            {"type": "step_completed", "op": item, "name": "tagged", "result": result, "ts": ts}
        )
        step(op, item, "second")
    journal.append({"type": "sleep_started", "op": 6, "name": "sleep", "until": ts + 9e4, "ts": ts})
    record = RunRecord(
        id=f"wrun_gathered_{''.join(map(str, order))}",
        workflow="replay:gathered",
        input=started,
        status=wf.RunStatus.SUSPENDED,
        wake_at=ts + 9e4,
    )
    return record, journal


@pytest.mark.parametrize("order", [[2, 1, 0], [0, 1, 2], [1, 0, 2]])
async def test_gathered_branches_of_several_steps_are_reported_diverged(order: list[int]) -> None:
    """Live, each branch's second call takes its id when its first step ends; replay resolves
    recorded steps at once, so branch 0 reaches its second call first, at id 1 (branch 1's
    first step): whatever order the first steps ended in, the check reports it, never ok."""
    store = MemoryStore()
    record, journal = _gathered_journal(order)
    assert await store.create_run(record, journal)
    report = await check_run(store, record.id)
    assert report.status == "diverged" and report.divergence is not None
    assert report.divergence.index == 1
    assert report.divergence.recorded == (
        'step \'tagged\' with arguments {"args":[1,"first"],"kwargs":{}}'
    )
    assert report.divergence.current == (
        'step \'tagged\' with arguments {"args":[0,"second"],"kwargs":{}}'
    )
    assert "another call's operation id" in report.message


_WRITES = {"create_run", "try_acquire", "post", "register_hook", "release_hook", "close"}


class _SpyStore(MemoryStore):
    """A memory store that records which of its methods a caller reached."""

    def __init__(self) -> None:
        super().__init__()
        self.called: list[str] = []

    def __getattribute__(self, name: str) -> object:
        value = super().__getattribute__(name)
        if not name.startswith("_") and callable(value) and name != "called":
            super().__getattribute__("called").append(name)
        return value


async def test_a_replay_check_reaches_only_read_methods_of_the_real_store() -> None:
    store = _SpyStore()
    run_id = await load(store, "unchanged-suspended")
    store.called.clear()
    report = await check_run(store, run_id)
    assert report.status == "ok"
    assert store.called, "the check reads the run through the store"
    assert not _WRITES & set(store.called), store.called


@wf.step
def quick_step() -> str:
    return "quick"


@wf.workflow
async def ends_in_a_timeout_block() -> str:
    async with wf.timeout(60):
        return await quick_step()


async def test_a_timeout_block_that_ended_in_time_checks_ok_by_a_far_clock(
    wf_engine: Engine,
) -> None:
    run = await wf.start(ends_in_a_timeout_block)
    assert await run.result() == "quick"
    report = await check_run(wf_engine.store, run.id)  # its clock is far past the deadline
    assert report.status == "ok", report.message


@wf.step
def in_block_step() -> str:
    return "done"


@wf.workflow
async def block_in_time_then_awaits_an_earlier_sleep() -> str:
    import asyncio

    sleeper = asyncio.ensure_future(wf.sleep(86400))
    try:
        async with wf.timeout(60):
            await in_block_step()
        seen = "in time"
    except TimeoutError:
        seen = await in_block_step()  # another op: a replay taking this branch diverges
    await sleeper
    return seen


async def test_a_check_and_the_resume_agree_on_a_block_ended_in_time_as_the_journal_ends(
    wf_engine: TestEngine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    run = await wf.start(block_in_time_then_awaits_an_earlier_sleep)
    await wf_engine.wait_driven(run)
    report = await check_run(wf_engine.store, run.id)  # its clock is far past the deadline
    assert report.status == "ok", report.message
    mock_clock.jump(86400)  # the resume too comes long after the deadline
    assert await run.result() == "in time"


@dataclasses.dataclass
class Approval:
    ok: bool


@wf.workflow(name="replay:approval-v1")
async def approved_then_two_steps() -> list[str]:
    hook = wf.create_hook(Approval, token="approval")
    await hook.next()
    return [await reserve_step(), await quick_step()]


@wf.step
def reserve_step() -> str:
    return "reserved"


@dataclasses.dataclass
class ApprovalV2:
    """``Approval`` with a field added: the payload its runs recorded no longer validates."""

    ok: bool
    by: str


ApprovalV2.__name__ = ApprovalV2.__qualname__ = "Approval"  # the hook's recorded name


@wf.workflow(name="replay:approval-v2")
async def approved_v2_then_two_steps() -> list[str]:
    hook = wf.create_hook(ApprovalV2, token="approval")
    await hook.next()
    return [await reserve_step(), await quick_step()]


async def test_a_replay_that_stops_waiting_before_the_journal_ends_is_an_error(
    wf_engine: TestEngine,
) -> None:
    """The new code refuses the recorded payload and waits on its hook again: the steps the
    journal recorded after it were never compared (and a resume would wait there for good),
    so the run is no pass. Was: ``ok``, 2 of 4 recorded operations replayed."""
    run = await wf.start(approved_then_two_steps)
    await wf_engine.wait_driven(run)
    await wf.resume_hook("approval", {"ok": True})
    assert await run.result() == ["reserved", "quick"]
    assert (await check_run(wf_engine.store, run.id)).status == "ok"  # the code it ran

    record = await wf_engine.store.get_run(run.id)
    moved = dataclasses.replace(record, id="wrun_approval_v2", workflow="replay:approval-v2")
    assert await wf_engine.store.create_run(moved, await wf_engine.store.read_journal(run.id))
    report = await check_run(wf_engine.store, moved.id)
    assert report.status == "error"
    assert (report.ops_recorded, report.ops_replayed) == (4, 2)
    assert report.message.startswith("replay stopped early, waiting on hook 'approval'")
    assert "2 recorded operation(s) after it were never compared" in report.message


async def test_a_run_waiting_at_the_journal_end_still_checks_ok(wf_engine: TestEngine) -> None:
    run = await wf.start(approved_then_two_steps)
    await wf_engine.wait_driven(run)  # suspended on its hook: the journal ends there
    report = await check_run(wf_engine.store, run.id)
    assert report.status == "ok", report.message
    assert report.ops_replayed == report.ops_recorded == 2
