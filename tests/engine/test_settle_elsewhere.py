"""``run.settle()`` while another process drives the run: a payload taken in elsewhere is never
mistaken for a settled suspension (``wf hook resume`` said "suspended (waiting for hook ...)"
of a run a worker completed with that very payload)."""

from __future__ import annotations

import pytest

from tests.elsewhere import Interleaving, engines_apart, suspended_with_payload
from wf.store import RunStatus, Store
from wf.testing import MockClock, TestEngine


@pytest.mark.timeout(60)
async def test_settle_waits_for_a_payload_another_driver_takes_in(
    engine_store: Store, mock_clock: MockClock
) -> None:
    # The waiter reads the record (suspended on the hook), then the inbox: another driver takes
    # the payload in between, and holds right after acknowledging it.
    async with engines_apart(engine_store, mock_clock) as (interleaving, here, elsewhere):
        run = await suspended_with_payload(here, "approve:settle")
        interleaving.arm(lambda: elsewhere.drive_soon(run.id))
        try:
            record = await run.settle(timeout=20)
        finally:
            await interleaving.finish()
        # Never the suspension the payload ended: the run as the drive left it.
        assert (record.status, record.output) == (RunStatus.COMPLETED, "approved by ann")
        # The record read after the empty inbox, while the drive held: running already.
        assert [r.status for r in interleaving.records_after[:1]] == [RunStatus.RUNNING]


@pytest.mark.timeout(60)
async def test_a_drive_acknowledges_its_messages_once_its_record_says_running(
    engine_store: Store, mock_clock: MockClock
) -> None:
    # What every waiter relies on: a message is out of the inbox only once the run's record no
    # longer says the suspension it ends (read by anyone, from the store).
    interleaving = Interleaving(engine_store, task_bound=False)
    async with (
        TestEngine(engine_store, mock_clock) as here,
        TestEngine(interleaving.driver_store, mock_clock) as elsewhere,
    ):
        with here.installed():
            run = await suspended_with_payload(here, "approve:ack")
            try:
                await interleaving.until_acked(elsewhere.drive_soon(run.id))
                assert interleaving.has_acked.is_set()
                assert not await engine_store.read_inbox(run.id)
                seen = await engine_store.get_run(run.id)
            finally:
                await interleaving.finish()
            assert seen.status is RunStatus.RUNNING
            assert await run.result(timeout=20) == "approved by ann"
