"""Waiting over HTTP on a ``wf serve --no-worker`` while a worker elsewhere takes the payload in:
``wf hook resume`` (``settle``) and ``wf run`` (``ended(hooks_only=True)``) end with the run
as the worker left it. The server's run detail read the record, then the inbox: a payload
taken in between made the detail "suspended, nothing in the inbox" (CI: ``wf hook resume``
said "suspended (waiting for hook 'approve:nw')" of a run a worker completed). ``tests.elsewhere``
makes that interleaving happen, on every read of the detail's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import wf
from tests.elsewhere import Interleaving
from tests.serve.conftest import served
from wf import admin
from wf.store import RunStatus, Store


@pytest.mark.timeout(90)
@pytest.mark.parametrize("wait", ["settle", "ended"])
async def test_waits_over_http_end_as_the_drive_elsewhere_left_the_run(
    store: Store, wait: str
) -> None:
    from wf._remote import RemoteClient
    from wf.serve import create_app

    interleaving = Interleaving(store, task_bound=False)  # the server reads in its own tasks
    elsewhere = wf.Engine(interleaving.driver_store)
    app = create_app(wf.Engine(interleaving.waiter_store), drive=False)
    try:
        async with served(app) as url:
            http = admin.HttpAdmin(RemoteClient(url))
            run_id = await http.start("tests.serve.flows:approval", [wait])
            suspended = await elsewhere.drive_soon(run_id)
            assert suspended is not None and suspended.status is RunStatus.SUSPENDED
            await http.resume_hook(f"approve:{wait}", {"approved": True, "by": "ann"})
            interleaving.arm(lambda: elsewhere.drive_soon(run_id))
            waiting: Any = (
                http.settle(run_id) if wait == "settle" else http.ended(run_id, hooks_only=True)
            )
            try:
                async with asyncio.timeout(30):
                    record = await waiting
            finally:
                await interleaving.finish()
            assert interleaving.driving is not None, "the server never read the inbox"
            assert (record.status, record.output) == (RunStatus.COMPLETED, "approved by ann")
    finally:
        await elsewhere.aclose()
