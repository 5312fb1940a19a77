"""Deployments on every store (fake clock): runs pinned to the id of the process that started
them, children inheriting their parent's pin unless started with ``deployment="latest"``, runs
started by name pinned to their producer's id, and workers driving only their own deployment's
runs and unpinned ones (issue #36)."""

from __future__ import annotations

import asyncio

import pytest

import wf
from wf.store import RunRecord, RunStatus
from wf.testing import TestEngine

FLOWS = "tests.engine.byname_flows"


@wf.step
def tagged(text: str) -> str:
    return text


@wf.workflow
async def leaf(text: str) -> str:
    return await tagged(text)


@wf.workflow
async def parent(text: str) -> list[str | None]:
    kept = await wf.start(leaf, text + "-kept")
    latest = await wf.start(leaf.with_options(deployment="latest"), text + "-latest")
    await kept.result()
    await latest.result()
    return [(await kept.record()).deployment, (await latest.record()).deployment]


async def test_runs_are_pinned_to_the_starting_process_and_unpinned_without_an_id(
    wf_engine: TestEngine,
) -> None:
    unpinned = await wf.start(leaf, "a", detach=True)
    wf_engine.deployment = "v1"
    pinned = await wf.start(leaf, "b", detach=True)
    assert (await unpinned.record()).deployment is None
    record = await pinned.record()
    assert record.deployment == "v1"
    assert record.code_hash is not None and len(record.code_hash) == 12


async def test_a_worker_drives_its_own_deployment_and_unpinned_runs_only(
    wf_engine: TestEngine,
) -> None:
    loose = await wf.start(leaf, "loose", detach=True)
    wf_engine.deployment = "v1"
    old = await wf.start(leaf, "old", detach=True)
    wf_engine.deployment = "v2"
    new = await wf.start(leaf, "new", detach=True)
    worker = wf.Worker(wf_engine)
    await worker.run(until_idle=True)  # returns although v1's run is due: not its to wait for
    assert (await new.record()).status is RunStatus.COMPLETED
    assert (await loose.record()).status is RunStatus.COMPLETED
    assert (await old.record()).status is RunStatus.PENDING
    await wf.Worker(wf_engine, any_deployment=True).run(until_idle=True)
    assert await old.result() == "old"


async def test_a_child_inherits_its_parents_pin_unless_started_on_latest(
    wf_engine: TestEngine,
) -> None:
    wf_engine.deployment = "v1"
    run = await wf.start(parent, "p", detach=True)
    wf_engine.deployment = "v2"  # a process of v2 drives the v1 parent (as `wf run` may)
    await wf.Worker(wf_engine, any_deployment=True).run(until_idle=True)
    assert await run.result() == ["v1", "v2"]


async def test_a_run_started_by_name_is_pinned_to_its_producer(wf_engine: TestEngine) -> None:
    wf_engine.deployment = "v3"
    run = await wf.start(f"{FLOWS}:charge", {"id": "o-1", "cents": 5}, detach=True)
    await wf.Worker(wf_engine).run(until_idle=True)
    record = await run.record()
    assert (record.status, record.deployment) == (RunStatus.COMPLETED, "v3")
    assert record.code_hash is not None  # the driver adopted the code's hash, not the pin


def test_deployment_option_takes_only_latest() -> None:
    with pytest.raises(wf.UsageError, match="deployment must be 'latest'"):
        leaf.with_options(deployment="v9")


def test_a_record_written_before_pinning_is_unpinned_with_its_code_hash() -> None:
    old = RunRecord.from_json({"id": "r1", "workflow": "w", "deployment": "0123456789ab"})
    assert (old.deployment, old.code_hash) == (None, "0123456789ab")
    new = RunRecord.from_json(RunRecord("r2", "w", deployment="v1").to_json())
    assert (new.deployment, new.code_hash) == ("v1", None)


async def test_a_process_of_another_deployment_waits_for_a_pinned_run_and_never_drives_it(
    wf_engine: TestEngine,
) -> None:
    wf_engine.deployment = "v1"
    run = await wf.start(leaf, "old", detach=True)
    wf_engine.deployment = "v2"  # `wf run --id`, `wf wake`, `wf hook resume` of v2
    with pytest.raises(TimeoutError):
        await run.result(timeout=0.3)
    with pytest.raises(TimeoutError):
        await run.settle(timeout=0.3)
    await run.wake_up()  # a message posted: still its own workers' to drive
    assert [await task for task in list(wf_engine.drivers.values())] in ([], [None])
    assert (await run.record()).status is RunStatus.PENDING
    wf_engine.deployment = "v1"  # a worker of v1 comes by
    assert await run.result(timeout=5) == "old"


async def test_deployments_say_when_older_runs_are_left_out(
    wf_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.engine import _deployments

    for text in ("a", "b", "c"):
        await wf.start(leaf, text, detach=True)
    found, _any, truncated = await _deployments.summarize(wf_engine.real_store)
    assert not truncated and found[0].runs == {"pending": 3}
    monkeypatch.setattr(_deployments, "SCAN_LIMIT", 2)
    found, _any, truncated = await _deployments.summarize(wf_engine.real_store)
    assert truncated and found[0].runs == {"pending": 2}  # the newest two


async def _set_code_hash(wf_engine: TestEngine, run_id: str, code_hash: str) -> None:
    lease = await wf_engine.real_store.try_acquire(run_id)
    assert lease is not None
    try:
        record, _ = await lease.read_run(wf_engine.real_store)
        record.code_hash = code_hash
        await lease.save(record)
    finally:
        await lease.release()


async def test_a_worker_warns_once_per_workflow_of_its_own_runs_started_by_other_code(
    wf_engine: TestEngine, caplog: pytest.LogCaptureFixture
) -> None:
    loose = await wf.start(leaf, "loose", detach=True)  # unpinned: any code drives it
    wf_engine.deployment = "v1"
    same = await wf.start(leaf, "same", detach=True)
    others = [await wf.start(leaf, f"other-{i}", detach=True) for i in range(2)]
    for run in (loose, *others):
        await _set_code_hash(wf_engine, run.id, "0badc0de0bad")  # v2's code under v1's id
    with caplog.at_level("WARNING", logger="wf"):
        await wf.Worker(wf_engine).run(until_idle=True)
    for run in (loose, same, *others):
        assert (await run.record()).status is RunStatus.COMPLETED  # warned, never refused
    warned = [r.getMessage() for r in caplog.records if "started by other code" in r.getMessage()]
    assert warned == [
        "runs of deployment v1 were started by other code (code_hash 0badc0de0bad of workflow "
        f"'{leaf.name}', this code's {(await same.record()).code_hash}): deploy new code under "
        "a new deployment id (docs/deploying.md)"
    ]


@pytest.mark.parametrize("dry_run", [False, True])
async def test_an_upgrade_dry_or_not_lists_a_run_being_driven_as_busy_and_leaves_its_lease(
    wf_engine: TestEngine, dry_run: bool
) -> None:
    """``--dry-run`` says what the upgrade would: a run whose lease a worker of the old
    deployment holds is busy, not moved, and the worker keeps driving it."""
    from wf.admin import _deployments as deployments

    wf_engine.deployment = "v1"
    driven = await wf.start(leaf, "driven", detach=True)
    idle = await wf.start(leaf, "idle", detach=True)
    wf_engine.deployment = "v2"
    store = wf_engine.real_store
    held = await store.try_acquire(driven.id)  # a worker of v1 drives it right now
    assert held is not None
    try:
        done = await deployments.upgrade(store, "v1", "v2", dry_run=dry_run)
        assert (done.busy, done.moved, done.kept) == ([driven.id], [idle.id], [])
        record, _ = await held.read_run(store)
        await held.save(record)  # the lease is still the worker's: its writes go through
    finally:
        await held.release()
    assert (await driven.record()).deployment == "v1"
    assert (await idle.record()).deployment == ("v1" if dry_run else "v2")
    again = await store.try_acquire(idle.id)  # the dry run let go of what it looked at
    assert again is not None
    await again.release()


@wf.workflow
async def napper(text: str) -> str:
    await wf.sleep(3600)
    return text


async def test_a_drain_that_leaves_timers_ends_while_an_old_run_sleeps(
    wf_engine: TestEngine,
) -> None:
    """``WF_DEPLOYMENT=OLD wf worker --until-idle --leave-timers`` (a cron drain job): it
    drives what of the old deployment is due now and exits, leaving a run asleep for an hour
    to a later drive (or to ``wf deployments upgrade``) instead of waiting the hour."""
    wf_engine.mock_clock.autojump = False
    wf_engine.deployment = "v1"
    asleep = await wf.start(napper, "later", detach=True)
    await asleep.settle(timeout=10)
    due = await wf.start(leaf, "now", detach=True)
    wf_engine.mock_clock.autojump = True  # a worker that waited for the timer would jump to it
    before = wf_engine.mock_clock.now()
    worker = wf.Worker(wf_engine)
    worker.leave_timers = True
    await asyncio.wait_for(worker.run(until_idle=True), 10)
    assert await due.result(timeout=5) == "now"
    assert (await asleep.record()).status is RunStatus.SUSPENDED
    assert wf_engine.mock_clock.now() - before < 3600
