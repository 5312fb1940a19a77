"""``wf deployments upgrade`` through ``wf.admin._deployments.upgrade``: a run is re-pinned only
as it was checked; one a worker of the old deployment drove on since is checked again, under
its lease, and stays when it no longer replays (a rolling deploy)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import wf
import wf.admin._deployments as deployments
import wf.engine._replay_check as replay_check
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
    checked = replay_check.check_runs

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

    monkeypatch.setattr(replay_check, "check_runs", check_then_v1_drives)
    done = await deployments.upgrade(wf_engine.real_store, "v1", "v2")
    assert done.moved == [] and done.busy == []
    assert [(r.run_id, r.status) for r in done.kept] == [(run.id, "diverged")]
    record = await run.record()
    assert (record.deployment, record.status) == ("v1", RunStatus.SUSPENDED)


async def test_a_run_that_still_replays_after_being_driven_on_moves(
    wf_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await _v1_run(wf_engine)
    checked = replay_check.check_runs

    async def check_then_driven(store: Store, ids: Sequence[str]) -> list[ReplayReport]:
        reports = await checked(store, ids)
        wf_engine.deployment = "v1"
        wf_engine.mock_clock.jump(11)  # driven on by v1's workers, on code v2 replays
        await run.settle(timeout=10)
        wf_engine.deployment = "v2"
        return reports

    monkeypatch.setattr(replay_check, "check_runs", check_then_driven)
    done = await deployments.upgrade(wf_engine.real_store, "v1", "v2")
    assert done.moved == [run.id] and done.kept == []
    assert (await run.record()).deployment == "v2"
