"""A run record's JSON keeps field order, however the record was made."""

from __future__ import annotations

import dataclasses

from wf.store._base import RunRecord, RunStatus, created_record
from wf.store.conformance import record
from wf.store.memory import MemoryStore

FIELDS = [field.name for field in dataclasses.fields(RunRecord)]


def test_to_json_is_in_field_order_whatever_order_the_record_was_read_in() -> None:
    record = RunRecord(id="r1", workflow="w", status=RunStatus.RUNNING, input="[1]", seq=3)
    data = record.to_json()
    assert list(data) == FIELDS
    # A journal's first event carries the record without its input (put back last).
    journal = dict(data)
    given = journal.pop("input")
    rebuilt = created_record({"type": "run_started", "record": journal, "input": given})
    # A store that keeps JSON its own way (PostgreSQL's jsonb) gives the keys in another order.
    reordered = RunRecord.from_json(dict(reversed(list(data.items()))))
    for other in (rebuilt, reordered):
        assert other is not None
        assert list(other.to_json()) == FIELDS
        assert other.to_json() == data
        assert other == record


class _OldSignatureStore(MemoryStore):
    """A store written outside wf to the contract before ``max_bytes``."""

    async def read_chunks(  # type: ignore[override]
        self, run_id: str, stream: str, start: int = 0
    ) -> tuple[list[bytes], bool]:
        return await super().read_chunks(run_id, stream, start)


async def test_stream_chunks_reads_a_store_whose_read_chunks_takes_no_max_bytes() -> None:
    """``stream_chunks`` passes ``max_bytes`` only to a store whose ``read_chunks`` takes it:
    a store of the older contract reads its streams whole instead of failing every read."""
    store = _OldSignatureStore()
    run = record()
    await store.create_run(run)
    lease = await store.try_acquire(run.id)
    assert lease is not None
    for index, chunk in enumerate([b"a", b"bb"]):
        await lease.write_chunk("out", index, chunk)
    await lease.close_stream("out", 2)
    await lease.release()
    assert [c async for c in store.stream_chunks(run.id, "out")] == [b"a", b"bb"]
    assert [c async for c in MemoryStore.stream_chunks(store, run.id, "out", -1)] == [b"bb"]
