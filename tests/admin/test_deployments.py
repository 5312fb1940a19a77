"""``wf deployments upgrade`` through ``wf.admin._deployments.upgrade``: a run is re-pinned only
as it was checked; one a worker of the old deployment drove on since is checked again, under
its lease, and stays when it no longer replays (a rolling deploy)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import wf
import wf.admin._deployments as deployments
from wf.engine import _replay_check
from wf.engine._replay_check import ReplayReport
from wf.store import RunStatus, Store
from wf.testing import TestEngine

CODE = {"deployment": "v2"}
"""Which release's code this module plays: v1 mails every user, v2 calls them."""


@wf.step
def mail(user: str) -> str:
    return f"mail to {user}"


@wf.step
def call(user: str) -> str:
    return f"call to {user}"


@wf.workflow
async def onboard(user: str) -> str:
    await wf.sleep(10)
    done = await (mail if CODE["deployment"] == "v1" else call)(user)
    await wf.create_hook(dict, token=f"confirmed:{user}").next()
    return done


@pytest.fixture(autouse=True)
def _v2_code() -> None:
    CODE.clear()
    CODE["deployment"] = "v2"


async def _v1_run(wf_engine: TestEngine) -> wf.Run[str]:
    wf_engine.mock_clock.autojump = False  # the run sleeps until the test moves time on
    wf_engine.suspend_after = 0.0
    wf_engine.deployment = "v1"
    CODE["deployment"] = "v1"
    run = await wf.start(onboard, "ann", detach=True)
    await run.settle(timeout=10)  # asleep: nothing recorded past the sleep
    CODE["deployment"] = "v2"
    return run


async def test_a_run_driven_on_by_its_old_deployment_after_the_check_stays_on_it(
    wf_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await _v1_run(wf_engine)
    checked = _replay_check.check_runs

    async def check_then_v1_drives(store: Store, ids: Sequence[str]) -> list[ReplayReport]:
        reports = await checked(store, ids)
        assert [r.status for r in reports] == ["ok"]  # nothing past the sleep yet
        # Meanwhile a worker of v1 (a rolling deploy) wakes the run and mails.
        CODE["deployment"] = "v1"
        wf_engine.deployment = "v1"
        wf_engine.mock_clock.jump(11)
        assert (await run.settle(timeout=10)).waiting_for is not None  # mailed; at the hook
        CODE["deployment"] = "v2"
        wf_engine.deployment = "v2"
        return reports

    monkeypatch.setattr(_replay_check, "check_runs", check_then_v1_drives)
    done = await deployments.upgrade(wf_engine.real_store, "v1", "v2")
    assert done.moved == [] and done.busy == []
    assert [(r.run_id, r.status) for r in done.kept] == [(run.id, "diverged")]
    record = await run.record()
    assert (record.deployment, record.status) == ("v1", RunStatus.SUSPENDED)


async def test_a_run_that_still_replays_after_being_driven_on_moves(
    wf_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await _v1_run(wf_engine)
    checked = _replay_check.check_runs

    async def check_then_driven(store: Store, ids: Sequence[str]) -> list[ReplayReport]:
        reports = await checked(store, ids)
        wf_engine.deployment = "v1"
        wf_engine.mock_clock.jump(11)  # driven on by v1's workers, on code v2 replays
        await run.settle(timeout=10)
        wf_engine.deployment = "v2"
        return reports

    monkeypatch.setattr(_replay_check, "check_runs", check_then_driven)
    done = await deployments.upgrade(wf_engine.real_store, "v1", "v2")
    assert done.moved == [run.id] and done.kept == []
    assert (await run.record()).deployment == "v2"


@wf.step
def prep(n: int) -> int:
    return n


@wf.step
def prepare(n: int) -> int:
    return n


@wf.step
def kid_step(n: int) -> str:
    return f"k{n}"


@wf.step
def kid_step_v2(n: int) -> str:
    return f"k{n}"


@wf.workflow
async def kid(n: int) -> str:
    if CODE["deployment"] == "v1" or CODE.get("kid") == "same":
        await kid_step(n)
    else:
        await kid_step_v2(n)  # v2 renamed it: a v1 kid diverges
    await wf.create_hook(dict, token=f"kid:{n}").next()
    return "done"


@wf.workflow
async def parent(n: int) -> str:
    if CODE["deployment"] == "v1" or CODE.get("parent") == "same":
        await prep(n)
    else:
        await prepare(n)  # v2 renamed it: a v1 parent diverges
    return await (await wf.start(kid, n)).result()


async def _v1_family(wf_engine: TestEngine) -> tuple[wf.Run[str], str]:
    """A v1 parent waiting for its v1 child, which waits at a hook."""
    wf_engine.suspend_after = 0.0
    wf_engine.deployment = "v1"
    CODE["deployment"] = "v1"
    run = await wf.start(parent, 1, detach=True)
    await run.settle(timeout=10)
    (child,) = await wf_engine.real_store.list_runs(parent_id=run.id)
    await wf.get_run(child.id).settle(timeout=10)
    CODE["deployment"] = "v2"
    wf_engine.deployment = "v2"
    return run, child.id


@pytest.mark.parametrize("dry_run", [False, True])
async def test_a_child_stays_with_its_parent_that_diverges(
    wf_engine: TestEngine, dry_run: bool
) -> None:
    run, child = await _v1_family(wf_engine)
    CODE["kid"] = "same"  # the child replays on v2; its parent does not
    try:
        done = await deployments.upgrade(wf_engine.real_store, "v1", "v2", dry_run=dry_run)
    finally:
        CODE.pop("kid")
    assert done.moved == [] and done.busy == []
    kept = {r.run_id: (r.status, r.message) for r in done.kept}
    assert kept[run.id][0] == "diverged"
    assert kept[child] == ("family", f"kept with its family: run {run.id} diverges")
    assert (await wf.get_run(child).record()).deployment == "v1"
    assert (await run.record()).deployment == "v1"


async def test_a_parent_stays_with_its_child_that_diverges(wf_engine: TestEngine) -> None:
    run, child = await _v1_family(wf_engine)
    CODE["parent"] = "same"
    try:
        done = await deployments.upgrade(wf_engine.real_store, "v1", "v2")
    finally:
        CODE.pop("parent")
    assert done.moved == []
    kept = {r.run_id: (r.status, r.message) for r in done.kept}
    assert kept[child][0] == "diverged"
    assert kept[run.id] == ("family", f"kept with its family: run {child} diverges")
    assert (await run.record()).deployment == "v1"


async def test_a_family_whose_member_is_being_driven_stays_whole(
    wf_engine: TestEngine,
) -> None:
    run, child = await _v1_family(wf_engine)
    CODE.update(parent="same", kid="same")
    store = wf_engine.real_store
    held = await store.try_acquire(child)  # a worker drives the child right now
    assert held is not None
    try:
        done = await deployments.upgrade(store, "v1", "v2")
    finally:
        await held.release()
        CODE.pop("parent"), CODE.pop("kid")
    assert done.moved == [] and done.busy == [child]
    assert [(r.run_id, r.message) for r in done.kept] == [
        (run.id, f"kept with its family: run {child} is being driven")
    ]
    assert (await run.record()).deployment == "v1"
    CODE.update(parent="same", kid="same")
    try:
        done = await deployments.upgrade(store, "v1", "v2")  # again, nobody drives it now
    finally:
        CODE.pop("parent"), CODE.pop("kid")
    assert done.moved == sorted([run.id, child]) and done.kept == [] and done.busy == []
    assert (await run.record()).deployment == "v2"
    assert (await wf.get_run(child).record()).deployment == "v2"
