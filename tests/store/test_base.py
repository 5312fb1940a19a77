"""A run record's JSON keeps field order, however the record was made."""

from __future__ import annotations

import dataclasses

from wf.store._base import RunRecord, RunStatus, created_record

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
