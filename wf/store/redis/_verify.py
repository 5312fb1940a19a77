"""``wf store verify`` on Redis: read every run, journal, inbox, hook, schedule and tombstone
under the prefix and name each value that cannot be read, and a creation sequence that is not
a number or is behind the runs it numbered. It reports and changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wf._exceptions import StoreCorrupted
from wf.store._base import RunRecord
from wf.store._decode import journal_problems
from wf.store.redis import _decode

if TYPE_CHECKING:
    from wf.store.redis._store import RedisStore

_BATCH = 500
"""Runs read in one round trip."""


async def verify(store: RedisStore) -> list[str]:
    """One line per problem, each naming its key."""
    problems: list[str] = []
    highest = 0
    low = "-inf"
    while True:
        # By creation number (each run's score), not by name: a lexicographic walk is only
        # defined over equal scores, and a member that is not UTF-8 would never be passed.
        found = await store._call(
            "zrangebyscore", store._key("ix:all"), low, "+inf", 0, _BATCH, True
        )
        if not found:
            break
        batch = [_decode.field_name(member) for member, _score in found]
        low = f"({found[-1][1]!r}"
        keys = {
            run_id: [store._key(kind, run_id) for kind in ("r:", "j:", "in:")] for run_id in batch
        }
        # Each command's error is its result: a key of another type is that run's problem.
        reads = await store._pipe(
            *(
                command
                for run_id in batch
                for command in (
                    ("hmget", keys[run_id][0], ["st", "rec", "seq", "lane", "gw", "ep"]),
                    ("lrange", keys[run_id][1], 0, -1),
                    ("hgetall", keys[run_id][2]),
                )
            ),
            each=True,
        )
        for index, run_id in enumerate(batch):
            found = reads[3 * index : 3 * index + 3]
            failed = [
                f"run {run_id}: {key}: {_decode.field_name(str(value))}"
                for key, value in zip(keys[run_id], found, strict=True)
                if isinstance(value, Exception)
            ]
            if failed:
                problems += failed
                continue
            (status, raw, seq, place, width, epoch), journal, inbox = found
            problems += _check_run(store, run_id, status, raw, journal, inbox)
            for name, value in (("lane", place), ("gw", width), ("seq", seq), ("ep", epoch)):
                if value and not _decode.field_name(value).isdigit():
                    where = _decode.field_of(store.run_location(run_id), name)
                    problems.append(f"{where}: {value!r} is not a number")
            if seq is not None and seq.isdigit():
                highest = max(highest, int(seq))
    for name, kind in (("hooks", _decode.hook), ("sched", _decode.schedule)):
        key = store._key(name)
        for field, value in sorted((await store._call("hgetall", key)).items()):
            try:
                kind(value, key, _decode.field_name(field))
            except StoreCorrupted as error:
                problems.append(str(error))
    highest = max(highest, await _check_tombstones(store, problems))
    return problems + await _check_sequence(store, highest)


def _check_run(
    store: RedisStore,
    run_id: str,
    status: bytes | None,
    raw: bytes | None,
    journal: list[bytes],
    inbox: dict[bytes, bytes],
) -> list[str]:
    if raw is None:
        return [f"run {run_id}: listed in the index but has no record"]
    problems = []
    record: RunRecord | None = None
    try:
        record = _decode.record(raw, _decode.field_of(store.run_location(run_id), "rec"))
    except StoreCorrupted as error:
        problems.append(f"run {run_id}: the record cannot be read: {error}")
    if record is not None and record.id != run_id:
        problems.append(f"run {run_id}: the record names another id {record.id!r}")
    if record is not None and _decode.field_name(status or b"") != record.status.value:
        problems.append(
            f"run {run_id}: indexed as {_decode.field_name(status or b'')!r} but its record"
            f" says {record.status.value!r}"
        )
    if not journal:
        # Every run's journal starts with run_started: one that is gone (evicted, deleted by
        # hand) leaves a run that cannot be replayed (a worker fails it as damaged).
        problems.append(
            f"run {run_id}: its journal {store._key('j:', run_id)} is missing or empty: the run"
            " cannot be replayed"
        )
    try:
        events = _decode.events(journal, store._key("j:", run_id))
        if events and events[0].get("type") != "run_started":
            problems.append(f"run {run_id}: the journal does not start with run_started")
        problems += journal_problems(store._key("j:", run_id), events)
    except StoreCorrupted as error:
        problems.append(str(error))
    try:
        _decode.inbox([x for item in inbox.items() for x in item], store._key("in:", run_id))
    except StoreCorrupted as error:
        problems.append(str(error))
    return problems


async def _check_tombstones(store: RedisStore, problems: list[str]) -> int:
    """Name each tombstone that cannot be read; the highest creation number of the others."""
    key = store._key("tomb")
    highest = 0
    cursor: Any = 0
    while True:
        cursor, found = await store._call("hscan", key, cursor, None, _BATCH)
        for field, value in found.items():
            try:
                highest = max(highest, _decode.tombstone(value, key, _decode.field_name(field)).seq)
            except StoreCorrupted as error:
                problems.append(str(error))
        if not int(cursor):
            return highest


async def _check_sequence(store: RedisStore, highest: int) -> list[str]:
    key = store._key("seq")
    value = await store._call("get", key)
    if value is None:
        return [] if highest == 0 else [f"{key}: missing, but runs are numbered up to {highest}"]
    text = _decode.field_name(value)
    if not text.isdigit():
        return [f"{key}: the creation sequence is {text!r}, not a number (set it to {highest})"]
    if int(text) < highest:
        return [
            f"{key}: the creation sequence is {text}, behind the runs it numbered (up to"
            f" {highest}): set it to {highest}"
        ]
    return []
