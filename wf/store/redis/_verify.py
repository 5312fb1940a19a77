"""``wf store verify`` on Redis: read every run, journal, inbox, stream, hook, schedule and
tombstone under the prefix and name each value that cannot be read, and a creation sequence
that is not a number or is behind the runs it numbered. It changes nothing of those; what it
puts right (and says so) are the indexes: a member of ``ix:all`` or a status index that is no
run's, or in a status index not the run's (``wf store info`` counts them), a run missing from
its status's, workflow's or parent's index (put back), a run whose ``qk`` names a queue it is
not in (cleared for a finished run; a live one is put back in that queue), a queue of live
runs missing from the queues' index ``qk``, a run's queue member field ``qm`` that is not its
own (rebuilt from its creation number and id), an unfinished run of a group missing from its
lane key (put back at its place: the key deleted or evicted), and the schedules' index of next fires
(``snext``) where it disagrees with the schedules. An index of another
type is named, not changed: it may be someone else's key."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from wf._exceptions import StoreCorrupted
from wf.store._base import RunRecord, RunStatus
from wf.store._decode import journal_problems
from wf.store.redis import _decode, _scripts
from wf.store.redis._lease import due_score

if TYPE_CHECKING:
    from wf.store.redis._store import RedisStore

_BATCH = 500
"""Runs read in one round trip."""


async def verify(store: RedisStore) -> list[str]:
    """One line per problem, each naming its key."""
    problems: list[str] = []
    highest = 0
    low = "-inf"
    laned: dict[str, list[str]] = {}  # each lane's unfinished runs, put back at the end
    while True:
        # By creation number (each run's score), not by name: a lexicographic walk is only
        # defined over equal scores, and a member that is not UTF-8 would never be passed.
        try:
            found = await store._call(
                "zrangebyscore", store._key("ix:all"), low, "+inf", 0, _BATCH, True
            )
        except StoreCorrupted as error:  # the index of another type: named, verify goes on
            problems.append(str(error))
            break
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
                    (
                        "hmget",
                        keys[run_id][0],
                        ["st", "rec", "seq", "lane", "gw", "ep", "qk", "grp", "qm"],
                    ),
                    ("lrange", keys[run_id][1], 0, -1),
                    ("hgetall", keys[run_id][2]),
                )
            ),
            each=True,
        )
        gone = [
            member
            for (member, _score), read in zip(found, reads[::3], strict=True)
            if not isinstance(read, Exception) and read[0] is None and read[1] is None
        ]
        removed = set()
        if gone:
            repaired = await store._eval(_scripts.REPAIR_INDEX, "ix:all", "", *gone)
            removed = {_decode.field_name(member) for member in repaired[::2]}
        queued: list[tuple[str, str, RunRecord | None, bool]] = []
        lanes: set[str] = set()
        for index, run_id in enumerate(batch):
            found = reads[3 * index : 3 * index + 3]
            if run_id in removed:
                problems.append(
                    f"run {run_id}: listed in {store._key('ix:all')} but no run has that id:"
                    " removed from the index"
                )
                continue
            failed = [
                f"run {run_id}: {key}: {_decode.field_name(str(value))}"
                for key, value in zip(keys[run_id], found, strict=True)
                if isinstance(value, Exception)
            ]
            if failed:
                problems += failed
                continue
            (status, raw, seq, place, width, epoch, qk, group, qm), journal, inbox = found
            if group and place:
                lanes.add(_decode.field_name(group))
                laned.setdefault(_decode.field_name(group), []).append(run_id)
            problems += _check_run(store, run_id, raw, journal, inbox)
            problems += await _check_status(store, run_id, status, raw)
            if qk:
                record: RunRecord | None = None
                with contextlib.suppress(StoreCorrupted):  # named above
                    record = _decode.record(raw, store.run_location(run_id), run_id)
                queued.append((run_id, _decode.field_name(qk), record, bool(inbox)))
            if seq is not None and _digits(seq):
                problems += await _check_member(store, run_id, int(seq), qm)
            for name, value in (("lane", place), ("gw", width), ("seq", seq), ("ep", epoch)):
                if value and not _digits(_decode.field_name(value)):
                    where = _decode.field_of(store.run_location(run_id), name)
                    problems.append(f"{where}: {_decode.field_name(value)!r} is not a number")
            if seq is not None and _digits(seq):
                highest = max(highest, int(seq))
        problems += await _check_queues(store, queued)
        problems += await _check_lanes(store, sorted(lanes))
        problems += await _check_listed(store, [r for r in batch if r not in removed])
        problems += await _check_streams(store, [r for r in batch if r not in removed])
    problems += await _repair_lanes(store, laned)
    problems += await _named(_check_status_indexes(store))
    problems += await _named(_check_queue_index(store))
    for name, kind in (("hooks", _decode.hook), ("sched", _decode.schedule)):
        key = store._key(name)
        try:
            fields = await store._call("hgetall", key)
        except StoreCorrupted as error:  # a key of another type: named, verify goes on
            problems.append(str(error))
            continue
        for field, value in sorted(fields.items()):
            try:
                kind(value, key, _decode.field_name(field))
            except StoreCorrupted as error:
                problems.append(str(error))
    problems += await _check_schedule_index(store)
    highest = max(highest, await _check_tombstones(store, problems))
    problems += await _named(_check_sequence(store, highest))
    return list(dict.fromkeys(problems))  # a key two checks met is named once


async def _repair_lanes(store: RedisStore, laned: dict[str, list[str]]) -> list[str]:
    """Each unfinished run of a lane put back in its lane key when missing from it (the key
    deleted or evicted: the claim names such a run and its lane waits). After every batch was
    read, and a lane's runs in one script: put back one batch at a time, a run re-queued
    behind the head (``wf retry``: a place later than its creation number) could be back
    alone before the head, and a claim meanwhile would start it beside the head."""
    problems: list[str] = []
    calls: list[list[str]] = [[]]
    for runs in laned.values():
        if calls[-1] and len(calls[-1]) + len(runs) > _BATCH:
            calls.append([])
        calls[-1] += runs  # a lane whole in one call, however many runs it has
    for runs in calls:
        if not runs:
            continue
        found = await store._eval(_scripts.REPAIR_LANES, *runs)
        problems += [
            f"run {_decode.field_name(run_id)}: missing from its lane {_decode.field_name(key)}:"
            " put back in it"
            for run_id, key in zip(found[::2], found[1::2], strict=True)
        ]
    return problems


async def _check_listed(store: RedisStore, batch: list[str]) -> list[str]:
    """Each run put back in the listings' indexes it is missing from (its status's, its
    workflow's, its parent's: left out while one was of another type), and each of those
    indexes of another type named (``wf runs -w``/``--parent`` fails naming it)."""
    if not batch:
        return []
    found = await store._eval(_scripts.REPAIR_LISTED, *batch)
    problems = []
    for what, key, detail in zip(found[::3], found[1::3], found[2::3], strict=True):
        key, detail = _decode.field_name(key), _decode.field_name(detail)
        if _decode.field_name(what) == "type":
            problems.append(f"{key}: {detail}")
        else:
            problems.append(f"run {detail}: missing from {key}: put back in it")
    return problems


async def _check_streams(store: RedisStore, batch: list[str]) -> list[str]:
    """Each run's streams that its page leaves out: a chunks key or the hash of names of
    another type, a name that is not UTF-8 (one pipeline of the listing's script)."""
    if not batch:
        return []
    found = await store._send_scripts([(_scripts.STREAMS, [run_id]) for run_id in batch])
    problems = []
    for run_id, streams in zip(batch, found, strict=True):
        if isinstance(streams, Exception):
            raise store._failure(streams) from streams  # the server's, not the run's
        if streams is None:
            continue  # deleted meanwhile
        for item, where, why in store._streams_read(run_id, streams)[1]:
            name = item.partition("/")[2]
            said = "its streams" if name == "*" else f"stream {name!r}"
            problems.append(f"run {run_id}: {said}: {where}: {why}")
    return problems


async def _check_lanes(store: RedisStore, lanes: list[str]) -> list[str]:
    """Each group lane key (``g:<lane>``) of runs in a lane that is of another type (a stray
    write): named, not changed (it may be someone else's key); claims name it as each of its
    runs' damage, and the lane's runs wait."""
    if not lanes:
        return []
    found = await store._pipe(*(("zcard", store._key("g:", lane)) for lane in lanes), each=True)
    return [
        f"{store._key('g:', lane)}: {_decode.field_name(str(result))}: the lane's runs wait"
        for lane, result in zip(lanes, found, strict=True)
        if isinstance(result, Exception)
    ]


async def _check_queue_index(store: RedisStore) -> list[str]:
    """The queues' index (``qk``), which every claim reads: a key of another type is
    ``StoreCorrupted`` naming it (``_named`` makes it a problem)."""
    await store._call("zcard", store._key("qk"))
    return []


async def _named(check: Awaitable[list[str]]) -> list[str]:
    """A check's problems; a key of another type it met (``StoreCorrupted``, naming the key)
    is one more, rather than the end of ``verify``."""
    try:
        return await check
    except StoreCorrupted as error:
        return [str(error)]


async def _check_schedule_index(store: RedisStore) -> list[str]:
    """The index of next fires (``snext``) made to agree with the schedules, each change said
    (a worker's pass reads the due schedules from it alone). In slices, as a worker's look:
    verify runs beside live workers, and one script over every schedule would hold the
    server from all of them for as long as it takes."""
    index = store._key("snext")
    repaired: list[tuple[bytes, bytes]] = []
    failed: list[str] = []
    try:
        await store._index_schedules(repaired, keep_damaged=False)
    except StoreCorrupted as error:
        failed.append(str(error))  # what the slices before it repaired is said too
    return [
        f"schedule {_decode.field_name(schedule_id)!r}: {index}: {_decode.field_name(what)}"
        for schedule_id, what in repaired
    ] + failed


async def _check_status(
    store: RedisStore, run_id: str, status: bytes | None, raw: bytes | None
) -> list[str]:
    """A run's status field ``st`` that disagrees with its record (a stray write): set from the
    record, the truth, and the run filed under that status (it was filed under the damaged
    field's, and listed there)."""
    if raw is None:
        return []
    try:
        record = _decode.record(raw, store.run_location(run_id), run_id)
    except StoreCorrupted:
        return []  # named by ``_check_run``
    if _decode.field_name(status or b"") == record.status.value:
        return []
    found = await store._eval(_scripts.REPAIR_STATUS, run_id)
    if not found:
        return []
    old, new = (_decode.field_name(x) for x in found)
    where = _decode.field_of(store.run_location(run_id), "st")
    return [f"{where}: {old!r}, but the run's record says {new!r}: set to {new!r}, filed under it"]


async def _check_member(store: RedisStore, run_id: str, seq: int, found: bytes | None) -> list[str]:
    """A run's queue member field ``qm`` (``found``: as the batch read it) that is not its own
    (its creation number and id: a stray write): rebuilt (a claim meeting it names it and
    takes nothing of the run), and its queue's entry under the damaged member moved to the
    right one."""
    member = f"{seq:016d}{run_id}"
    if found is None or _decode.field_name(found) == member:
        return []  # a run that has none: written before queue members, or gone meanwhile
    old = await store._eval(_scripts.REPAIR_MEMBER, run_id, member)
    if old is None or old is False:
        return []
    where = _decode.field_of(store.run_location(run_id), "qm")
    return [
        f"{where}: {_decode.field_name(old)!r} is not the run's queue member: set to {member!r}"
    ]


async def _check_queues(
    store: RedisStore, queued: list[tuple[str, str, RunRecord | None, bool]]
) -> list[str]:
    """Each run whose ``qk`` names a queue it is not in, put right: a finished run's ``qk``
    cleared, a live run put back in that queue (when its record can be read: its due time);
    and each queue of a live run missing from the queues' index ``qk`` (deleted or evicted:
    no claim finds the queue) put back in it."""
    if not queued:
        return []
    found = await store._pipe(
        *(("hget", store._key("r:", run_id), "qm") for run_id, _, _, _ in queued), each=True
    )
    scores = await store._pipe(
        *(
            ("zscore", store._key("q:", qk), member if isinstance(member, bytes) else b"")
            for (_, qk, _, _), member in zip(queued, found, strict=True)
        ),
        each=True,
    )
    problems = []
    live: set[str] = set()
    for (run_id, qk, record, messages), score in zip(queued, scores, strict=True):
        if isinstance(score, Exception):
            # A queue key of another type (a stray write): claims pass over it, so its runs
            # wait; named once (``verify`` says each line once).
            key = store._key("q:", qk)
            problems.append(f"{key}: {_decode.field_name(str(score))}: its runs wait")
            continue
        finished = record is not None and record.status.is_terminal
        if not finished:
            live.add(qk)
        if score is not None:
            continue  # in its queue
        if record is None or (not finished and record.status not in _QUEUED):
            continue
        due = "0" if messages and not finished else due_score(record)
        if await store._eval(_scripts.REPAIR_QUEUE, run_id, qk, due):
            where = _decode.field_of(store.run_location(run_id), "qk")
            problems.append(
                f"run {run_id}: {where} names queue {qk!r}, which it is not in: "
                + ("cleared" if finished else "put back in it")
            )
    return problems + await _check_indexed_queues(store, sorted(live))


async def _check_indexed_queues(store: RedisStore, queues: list[str]) -> list[str]:
    """Each of ``queues`` (of live runs) missing from the queues' index put back in it, with
    the priority its name starts with (``ZADD``: what a run's write does), by a script that
    checks the queue still has runs (a run that ended since the reads may have emptied it)."""
    index = store._key("qk")
    try:
        scores = await store._pipe(*(("zscore", index, qk) for qk in queues))
    except StoreCorrupted:
        return []  # the index of another type: named by ``_check_queue_index``
    problems = []
    for qk, score in zip(queues, scores, strict=True):
        priority, bar, _ = qk.partition("|")
        if score is not None or not bar or not _digits(priority.lstrip("-")):
            continue
        if await store._eval(_scripts.REPAIR_QUEUE_INDEX, qk, str(int(priority))):
            problems.append(
                f"{index}: queue {qk!r} is missing from it (its runs wait): put back in it"
            )
    return problems


_QUEUED = frozenset(s for s in RunStatus if not s.is_terminal)


async def _check_status_indexes(store: RedisStore) -> list[str]:
    """Each member of a status index that is no run's, or a run of another status: taken out
    (and put in its own status's index), so ``wf store info`` counts the runs there are."""
    problems = []
    for status in RunStatus:
        key = "ix:s:" + status.value
        cursor: Any = 0
        while True:
            try:
                cursor, found = await store._call("zscan", store._key(key), cursor, None, _BATCH)
            except StoreCorrupted as error:  # of another type: named, the others checked
                problems.append(str(error))
                break
            members = [member for member, _score in found]
            if members:
                repaired = await store._eval(_scripts.REPAIR_INDEX, key, status.value, *members)
                for member, why in zip(repaired[::2], repaired[1::2], strict=True):
                    problems.append(
                        f"{store._key(key)}: {_decode.field_name(member)!r}:"
                        f" {_decode.field_name(why)}: removed from the index"
                    )
            if not int(cursor):
                break
    return problems


def _digits(value: str | bytes) -> bool:
    """Whether ``value`` is a plain number: ASCII digits only (``str.isdigit`` also takes
    superscripts, which ``int`` refuses)."""
    return value.isascii() and value.isdigit()


def _check_run(
    store: RedisStore,
    run_id: str,
    raw: bytes | None,
    journal: list[bytes],
    inbox: dict[bytes, bytes],
) -> list[str]:
    if raw is None:
        return [f"run {run_id}: listed in the index but has no record"]
    problems = []
    try:
        _decode.record(raw, _decode.field_of(store.run_location(run_id), "rec"), run_id)
    except StoreCorrupted as error:
        problems.append(f"run {run_id}: the record cannot be read: {error}")
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
        try:
            cursor, found = await store._call("hscan", key, cursor, None, _BATCH)
        except StoreCorrupted as error:  # a key of another type: named, verify goes on
            problems.append(str(error))
            return highest
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
    if not _digits(text):
        return [f"{key}: the creation sequence is {text!r}, not a number (set it to {highest})"]
    if int(text) < highest:
        return [
            f"{key}: the creation sequence is {text}, behind the runs it numbered (up to"
            f" {highest}): set it to {highest}"
        ]
    return []
