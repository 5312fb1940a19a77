"""Searches and filters of ``wf.admin.list_runs`` answer from indexes: a whole id by one look,
a part of a workflow name from the workflow index (however old the runs), queue, group and
deployment filters from theirs; only a part of an id reads runs, within its bound."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.store.helpers import created, save
from wf import admin
from wf.admin import _read
from wf.store import RunStatus, Store
from wf.store.local import LocalStore
from wf.store.memory import MemoryStore


@pytest_asyncio.fixture(params=["memory", "local"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made: Store = MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "s")
    try:
        yield made
    finally:
        await made.close()


async def test_a_whole_id_is_found_without_reading_runs(store: Store) -> None:
    runs = [await created(store, workflow="billing:charge") for _ in range(3)]
    page = await admin.list_runs(store, search=runs[1].id.upper())
    assert [r.id for r in page.runs] == [runs[1].id] and page.next_before is None
    assert not (await admin.list_runs(store, search=runs[1].id, status=["failed"])).runs


async def test_a_workflow_name_is_searched_past_the_bound_of_a_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_read, "SEARCH_BUDGET", 2)
    old = await created(store, workflow="billing:Charge")
    other = await created(store, workflow="mail:send")
    for _ in range(4):
        await created(store, workflow="reports:daily")
    newer = await created(store, workflow="billing:refund")
    page = await admin.list_runs(store, search="BILLING")
    assert [r.id for r in page.runs] == [newer.id, old.id]
    assert not page.exhausted and page.next_before is None
    first = await admin.list_runs(store, search="billing", limit=1)
    assert [r.id for r in first.runs] == [newer.id] and first.next_before == newer.id
    rest = await admin.list_runs(store, search="billing", limit=1, before=first.next_before)
    assert [r.id for r in rest.runs] == [old.id]
    only = await admin.list_runs(store, search="billing", workflow="billing:refund")
    assert [r.id for r in only.runs] == [newer.id]
    # A part of an id is no index: read within the bound, and said so.
    scanned = await admin.list_runs(store, search=other.id[-8:])
    assert scanned.runs == [] and scanned.exhausted and scanned.searched == 2


async def test_queue_group_and_deployment_filters_page_through(store: Store) -> None:
    runs = [
        await created(store, queue="mail" if n % 2 else None, group=f"g{n % 2}", deployment="v1")
        for n in range(5)
    ]
    await save(store, runs[1], RunStatus.COMPLETED)
    mail = [r.id for r in reversed(runs) if r.queue == "mail"]
    first = await admin.list_runs(store, queue="mail", group="g1", deployment="v1", limit=1)
    assert [r.id for r in first.runs] == mail[:1]
    rest = await admin.list_runs(store, queue="mail", limit=5, before=first.next_before)
    assert [r.id for r in rest.runs] == mail[1:]
    done = await admin.list_runs(store, group="g1", status=["completed"])
    assert [r.id for r in done.runs] == [runs[1].id]
    assert not (await admin.list_runs(store, group="g0", queue="mail")).runs


async def test_a_damaged_run_searched_by_its_whole_id_is_named_in_damaged(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a search by a part of its id lists it: the page is not failed by its damage.
    from wf import StoreCorrupted

    good, bad = [await created(store, workflow="billing:charge") for _ in range(2)]
    real = store.get_run

    async def get_run(run_id: str) -> Any:
        if run_id == bad.id:
            raise StoreCorrupted(f"run {run_id}: its record is not valid JSON")
        return await real(run_id)

    monkeypatch.setattr(store, "get_run", get_run)
    page = await admin.list_runs(store, search=bad.id)
    assert page.runs == [] and page.next_before is None
    assert [(f.kind, f.item) for f in page.damaged] == [("run", bad.id)]
    assert "not valid JSON" in page.damaged[0].reason
    assert [r.id for r in (await admin.list_runs(store, search=good.id)).runs] == [good.id]
