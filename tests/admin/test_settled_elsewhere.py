"""``wf.admin``'s waits and run detail while another process drives the run, on every store: a
payload taken in elsewhere between a waiter's reads of the record and of the inbox is never
taken for a settled suspension (``tests.elsewhere`` makes that interleaving happen)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.elsewhere import engines_apart, suspended_with_payload
from tests.engine.conftest import engine_store, store_kind
from wf import admin
from wf.store import RunStatus, Store
from wf.testing import MockClock

__all__ = ["engine_store", "store_kind"]  # the engine tests' fixtures: every store


@pytest.mark.timeout(60)
async def test_a_runs_detail_never_shows_the_suspension_a_payload_taken_in_ended(
    engine_store: Store, mock_clock: MockClock
) -> None:
    # What ``wf hook resume`` over HTTP waits on (``GET /runs/{id}``): suspended with an empty
    # inbox is settled. The record read before the payload was taken in elsewhere is not.
    async with engines_apart(engine_store, mock_clock) as (interleaving, here, elsewhere):
        run_id = (await suspended_with_payload(here, "approve:detail")).id
        interleaving.arm(lambda: elsewhere.drive_soon(run_id))
        try:
            detail = await admin.LocalAdmin(here).run_detail(run_id)
        finally:
            await interleaving.finish()
        assert (detail.run.status, detail.inbox) == (RunStatus.RUNNING, [])
        ended = await admin.LocalAdmin(here).run_detail(run_id)
        assert (ended.run.status, ended.run.output) == (RunStatus.COMPLETED, "approved by ann")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wait", ["settle", "ended"])
async def test_local_waits_end_as_the_drive_elsewhere_left_the_run(
    engine_store: Store, mock_clock: MockClock, wait: str
) -> None:
    # ``wf hook resume`` (``settle``) and ``wf run`` (``ended(hooks_only=True)``) waiting here
    # while a worker elsewhere takes the payload in: they end with the run completed.
    async with engines_apart(engine_store, mock_clock) as (interleaving, here, elsewhere):
        run_id = (await suspended_with_payload(here, f"approve:{wait}")).id
        here.may_drive = False  # this process only waits: the worker elsewhere drives
        client = admin.LocalAdmin(here)
        interleaving.arm(lambda: elsewhere.drive_soon(run_id))
        waiting: Any = (
            client.settle(run_id) if wait == "settle" else client.ended(run_id, hooks_only=True)
        )
        try:
            record = await waiting
        finally:
            await interleaving.finish()
        assert interleaving.driving is not None, "the waiter never read the inbox"
        assert (record.status, record.output) == (RunStatus.COMPLETED, "approved by ann")
