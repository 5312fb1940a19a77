"""What ``wf run`` says while the run it drives is suspended (``wf.cli._suspended``)."""

from __future__ import annotations

from typing import Any

import pytest

import wf
from tests.engine.conftest import engine_store, store_kind
from wf._events import waiting
from wf.cli._suspended import waiting_here
from wf.store import RunRecord, RunStatus, Store
from wf.testing import MockClock

__all__ = ["engine_store", "store_kind"]  # the engine tests' fixtures: every store


def _suspended(*waits: dict[str, object], wake_at: float | None = 100.0) -> RunRecord:
    return RunRecord(
        id="r1",
        workflow="flows:f",
        status=RunStatus.SUSPENDED,
        wake_at=wake_at,
        waiting_for=list(waits),  # type: ignore[arg-type]
    )


def test_a_hook_under_a_timeout_is_answered_with_hook_resume_not_wake() -> None:
    said = waiting_here(
        _suspended(waiting("hook", "approve:e-1"), waiting("timeout", None, 100.0)), 0
    )
    assert "`wf hook resume approve:e-1 --data JSON` delivers the hook's payload now" in said
    assert "wf wake" not in said


def test_a_sleep_still_names_wake() -> None:
    said = waiting_here(_suspended(waiting("sleep", None, 100.0)), 0)
    assert said.endswith("when it is due, or `wf wake r1` ends a sleep now")


class _Sink:
    def update(self, record: RunRecord, journal: list[Any], new: list[Any]) -> None:
        pass


@wf.workflow(name="cli_suspended:approval")
async def approval(token: str) -> str:
    hook = wf.create_hook(str, token=token)
    return f"approved by {await hook.next()}"


@pytest.mark.timeout(60)
async def test_wf_runs_wait_ends_as_the_drive_elsewhere_left_the_run(
    engine_store: Store, mock_clock: MockClock
) -> None:
    # ``wf run`` waiting on a run suspended on a hook, while another process (``wf hook
    # resume``, a worker) takes the payload in between its reads of the record and of the
    # inbox: the wait goes on until the run ended, not "waits for hook" of a completed run.
    from tests.elsewhere import engines_apart
    from wf.admin._follow import Follower
    from wf.cli._suspended import follow_run

    async with engines_apart(engine_store, mock_clock) as (interleaving, here, elsewhere):
        run = await wf.start(approval, "approve:run")
        suspended = await here.wait_driven(run)
        assert suspended is not None and suspended.status is RunStatus.SUSPENDED
        assert await wf.resume_hook("approve:run", "ann") == run
        follower = Follower(here.store, run.id, _Sink())
        interleaving.arm(lambda: elsewhere.drive_soon(run.id))
        try:
            waited = await follow_run(follower, keep_waiting=False, quiet=True, poll=0.05)
        finally:
            await interleaving.finish()
        assert interleaving.driving is not None, "the wait never read the inbox"
        assert waited is None  # the run ended
        assert await run.result(timeout=10) == "approved by ann"
