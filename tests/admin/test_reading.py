"""``wf.admin._client.reading``: the client of the commands that only read (``wf runs``,
``wf inspect``) reads the store here without an engine, and drives or controls nothing."""

from __future__ import annotations

from collections.abc import Collection

import pytest

import wf
import wf._config
from wf.admin import LocalAdmin
from wf.admin._client import reading
from wf.admin._read import list_runs
from wf.store import InboxMessage
from wf.store.conformance import record
from wf.store.memory import MemoryStore
from wf.testing import TestEngine


@wf.workflow
async def waits() -> None:
    await wf.create_hook(dict).next()


async def test_a_reading_client_reads_without_an_engine_and_refuses_to_drive(
    wf_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await wf.start(waits)
    await wf_engine.settle()
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    monkeypatch.delenv("WF_URL", raising=False)
    monkeypatch.setattr(wf._config, "default_store", lambda: wf_engine.store)
    monkeypatch.setattr(wf_engine.store, "close", close)
    async with reading() as client:
        assert isinstance(client, LocalAdmin)
        assert await client.newest_run() == run.id
        assert (await client.run_detail(run.id)).run.status == "suspended"
        assert [row.id for row in (await client.list_runs()).runs] == [run.id]
        # Driving or controlling a run needs an engine current while it runs, seeing each
        # crossing of deployments: connect()'s. This client says so rather than half-build one.
        with pytest.raises(RuntimeError, match=r"only reads .* wf\.admin\.connect\(\)"):
            await client.cancel(run.id)
        with pytest.raises(RuntimeError, match="only reads"):
            await client.wake(run.id)
        assert client.driving(run.id) is None  # it drives nothing
        assert not closed
    assert closed == [True]
    assert (await wf_engine.store.get_run(run.id)).status == "suspended"  # not cancelled


async def test_a_listing_reads_the_inboxes_of_its_runs_in_one_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``list_runs`` marks the runs asked to stop whose request waits in their inbox with one
    call of the store for the page (``Store.cancels_waiting``), not one inbox read per
    unfinished run: on PostgreSQL those took the connections ``wf serve`` shares."""
    store = MemoryStore()
    runs = [record() for _ in range(5)]
    for run in runs:
        await store.create_run(run)
    await store.post(runs[1].id, "cancel", {})
    reads: list[str] = []
    batches: list[list[str]] = []
    real_read, real_batch = store.read_inbox, store.cancels_waiting

    async def read_inbox(run_id: str) -> list[InboxMessage]:
        reads.append(run_id)
        return await real_read(run_id)

    async def cancels_waiting(run_ids: Collection[str]) -> set[str]:
        batches.append(list(run_ids))
        return await real_batch(run_ids)

    monkeypatch.setattr(store, "read_inbox", read_inbox)
    monkeypatch.setattr(store, "cancels_waiting", cancels_waiting, raising=False)
    page = await list_runs(store, limit=10)
    assert {r.id for r in page.runs if r.cancel_requested} == {runs[1].id}
    assert reads == []
    assert [sorted(b) for b in batches] == [sorted(r.id for r in runs)]
