"""``run.json``: a run's record, with large values moved out to blob files.

An encoded ``input`` or ``output`` over ``BLOB_THRESHOLD`` is written to a content-addressed
blob file next to the record, and the record keeps only the blob's name (under ``_blobs``).
Listings read just ``run.json``, so they never load a large value: in ``list_runs`` such fields
are ``None``. ``get_run`` loads them back, so it is exact.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence
from typing import Any

import orjson

from wf._exceptions import RunNotFound, StoreCorrupted
from wf.store._base import (
    Event,
    RunRecord,
    RunStatus,
    brought_up_to,
    check_kinds,
    created_record,
    record_from_journal,
)
from wf.store.local import _atomic, _fsops, _journal
from wf.store.local._layout import BLOB_THRESHOLD, JOURNAL_FILE, RUN_FILE, blob_name, run_exists

BLOB_FIELDS = ("input", "output")


def encode(record: RunRecord, run_dir: str, *, sync_dir: bool) -> tuple[bytes, list[str]]:
    """The ``run.json`` bytes, writing any new blob files first; returns (bytes, blob names).

    Blobs are written (durably, their names too) before the record that names them, so a record
    never points at a missing blob. A blob whose content already exists is not rewritten. With
    ``sync_dir`` false the caller makes the names durable before publishing the record (run
    creation syncs its staging directory before renaming it into place).
    """
    data = record.to_json()
    blobs: dict[str, str] = {}
    for field in BLOB_FIELDS:
        value = data[field]
        if value is None or isinstance(value, bool | int | float):
            continue
        encoded = orjson.dumps(value)
        if len(encoded) <= BLOB_THRESHOLD:
            continue
        name = blob_name(field, encoded)
        if not os.path.exists(os.path.join(run_dir, name)):
            _atomic.replace(run_dir, name, encoded, sync_dir=sync_dir)
        blobs[field] = name
        data[field] = None
    if blobs:
        data["_blobs"] = blobs
    return orjson.dumps(data), list(blobs.values())


def needs_file(record: RunRecord, ends: Sequence[Event], created: RunRecord | None = None) -> bool:
    """Whether ``run.json`` must be written, given the journal's first and last events.

    Not when they rebuild exactly this record (``record_from_journal``) and no value is large
    enough for a blob (listings must not load it): creation, and most saves of a run that is
    never resumed, then create no file. Readers rebuild the record from the journal's ends.
    ``created``: the first event's ``created_record``, if the caller keeps it (a lease).
    """
    if created is not None:
        differs = brought_up_to(created.copy(), ends) != record
    else:
        differs = not _rebuilt_by_start(record, ends) and record_from_journal(ends) != record
    if differs:
        return True
    return any(
        value is not None and len(orjson.dumps(value)) > BLOB_THRESHOLD
        for value in (record.input, record.output)
    )


def _rebuilt_by_start(record: RunRecord, ends: Sequence[Event]) -> bool:
    """Whether a journal of one ``run_started`` event carrying exactly this record (and its
    time) gives it back: what ``record_from_journal`` would say, without parsing the record
    (a creation's check; False: ask ``record_from_journal``)."""
    if len(ends) != 1 or record.waiting_for is not None:
        return False
    first = ends[0]
    if first.get("type") != "run_started" or first.get("ts") != record.updated_at:
        return False
    data = dict(record.__dict__)  # ``to_json`` without its call per field
    data["status"] = record.status.value
    if first.get("input") != data.pop("input", None) or first.get("record") != data:
        return False
    check_kinds(data, record.id)  # what parsing the record would have refused
    return True


def decode(raw: bytes, path: str) -> dict[str, Any]:
    """The JSON object of a ``run.json`` file."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise StoreCorrupted(f"{path}: not valid JSON ({error})") from None
    # What ``RunRecord.from_json`` refuses (``check_kinds``: its times, a field of the wrong
    # kind), and a status it cannot build: the cache is damaged, the record rebuilt from the
    # journal. Refused later, by ``from_json``, the run would be damaged for good.
    if not isinstance(data, dict):
        raise StoreCorrupted(f"{path}: not a run record")
    try:
        check_kinds(data, data.get("id"))
    except StoreCorrupted as error:
        why = str(error).removeprefix(f"run {data.get('id')!r}: ")  # the path says whose
        raise StoreCorrupted(f"{path}: {why}") from None
    if str(data.get("status", "pending")) not in _STATUSES:
        raise StoreCorrupted(f"{path}: not a run record")
    return data


_STATUSES = frozenset(status.value for status in RunStatus)


def read_raw(run_dir: str, run_id: str, journal: list[Event] | None = None) -> dict[str, Any]:
    """The stored JSON of a run's record (large values not loaded). Raises ``RunNotFound``.

    ``run.json`` is a cache of the journal, replaced without fsyncs: after a power cut it may be
    missing or unreadable, and is then rebuilt from the journal (``record_from_journal``).
    Creation does not write it when the journal alone gives the record back (see
    ``needs_file``): until the lease holder's first save, every read rebuilds it. ``journal``:
    the whole journal, when the caller has read it (under the run's lease): the run exists, and
    a record to rebuild is rebuilt from those events.
    """
    return read_stored(run_dir, run_id, journal)[0]


def read_stored(
    run_dir: str, run_id: str, journal: list[Event] | None = None, *, found: bool = False
) -> tuple[dict[str, Any], RunRecord | None, bool]:
    """``read_raw``, with what the read found out on the way: the record when it was rebuilt
    from the journal (exact: a rebuilt record keeps its values inline, so a lease need not
    parse the stored JSON again), and whether ``run.json`` is there (a lease's saves remove a
    stale one; the failed open says so without another look). ``found``: the caller has just
    found the run there (``run_exists``), and looks again if this read fails (a run deleted
    or packed between the look and the read is damage here, and ``RunNotFound`` there)."""
    data, record, there, _created = read_for_lease(run_dir, run_id, journal, found=found)
    if data is None:
        assert record is not None  # one or the other
        data = record.to_json()
    return data, record, there


def read_for_lease(
    run_dir: str,
    run_id: str,
    journal: list[Event] | None = None,
    *,
    found: bool = False,
) -> tuple[dict[str, Any] | None, RunRecord | None, bool, RunRecord | None]:
    """``read_stored`` for a lease, which takes a rebuilt record as it is: no JSON is made of
    it (None in its place). Either the stored JSON or the rebuilt record is given; with the
    rebuilt one (from ``journal``'s events), the record their first event carries
    (``created_record``, which the lease keeps for its saves: not parsed twice), else None."""
    path = os.path.join(run_dir, RUN_FILE)
    if journal is None and not found and not run_exists(run_dir):
        raise RunNotFound(run_id)
    try:
        data = decode(_fsops.read_bytes(path, allow=(errno.ENOENT, errno.ENOTDIR)), path)
        if data["id"] != run_id:  # another run's record: no cache of this one
            raise StoreCorrupted(f"{path}: the record names another id {data['id']!r}")
        return data, None, True, None
    except (FileNotFoundError, NotADirectoryError):
        there = False  # missing (most runs: see ``needs_file``): the journal says
        why = None
    except StoreCorrupted as error:
        there = True  # not a file (``_fsops`` refuses a FIFO), or not this run's record
        why = str(error).removeprefix(f"{path}: ")
    created = created_record(journal[0]) if journal else None
    if created is not None:
        assert journal is not None
        record = brought_up_to(created.copy(), journal[:1] + journal[1:][-1:])
    else:
        record = _rebuild(run_dir, path, journal, why)
    if record.id != run_id:  # the journal's first line carries another run's record
        raise StoreCorrupted(
            f"{os.path.join(run_dir, JOURNAL_FILE)}: the record names another id {record.id!r}"
        )
    return None, record, there, created


def _rebuild(run_dir: str, path: str, journal: list[Event] | None, why: str | None) -> RunRecord:
    """The record the journal gives back; ``why``: why ``run.json`` (there) was not read."""
    journal_path = os.path.join(run_dir, JOURNAL_FILE)
    cache = f"{path}: unreadable ({why}), and " if why is not None else ""
    if journal is not None:
        ends = journal[:1] + journal[1:][-1:]
    else:
        try:
            ends = _journal.read_ends(journal_path, allow=(errno.ENOENT, errno.ENOTDIR))
        except (FileNotFoundError, NotADirectoryError):
            raise StoreCorrupted(f"{cache}{journal_path} is missing") from None
    record = record_from_journal(ends)
    if record is None:
        if not ends and cut_short(run_dir):
            # Not one complete line, and no record: a creation a power cut cut short, never
            # reported created. No run, not damage.
            raise RunNotFound(os.path.basename(run_dir))
        why = "cannot rebuild it" if cache else "does not start with the run's record"
        raise StoreCorrupted(f"{cache}{journal_path} {why}")
    return record


def cut_short(run_dir: str) -> bool:
    """Whether the run's directory is what a power cut left of a creation: published (the
    rename reached the disk) but its data did not, so its journal holds no complete line (zeros
    where its block was, or a torn first line) and it has no readable record. Such a run was
    never reported created (creation returns after the flush): it does not exist, and
    creating its id again replaces the leftover (``_layout.run_exists`` counts only a journal
    or record with bytes in it; this reads them)."""
    path = os.path.join(run_dir, RUN_FILE)
    try:
        raw = _fsops.read_bytes(path, allow=(errno.ENOENT, errno.ENOTDIR))
    except (FileNotFoundError, NotADirectoryError, StoreCorrupted):
        pass
    else:
        # A record at all, not ``decode``'s full check: one whose field is of the wrong kind
        # is a run's damaged record (maybe its only copy), never a leftover to discard.
        with contextlib.suppress(orjson.JSONDecodeError):
            data = orjson.loads(raw)
            if isinstance(data, dict) and isinstance(data.get("id"), str):
                return False
    try:
        return not _journal.read_ends(os.path.join(run_dir, JOURNAL_FILE))
    except FileNotFoundError:
        return True
    except StoreCorrupted:
        return False  # damage after complete lines: a run, and verify names it


def load(run_dir: str, run_id: str, *, blobs: bool = True, found: bool = False) -> RunRecord:
    """The run's record; with ``blobs`` (the default) large values are loaded back.
    ``found``: as ``read_stored``'s."""
    data, rebuilt, _there = read_stored(run_dir, run_id, found=found)
    if rebuilt is not None:
        return rebuilt  # its values inline: no blob to load, no JSON to parse again
    return with_blobs(run_dir, data) if blobs else RunRecord.from_json(data)


def with_blobs(run_dir: str, data: dict[str, Any]) -> RunRecord:
    """The record of stored JSON ``data``, its large values loaded back from their blobs."""
    data = dict(data)
    for field, name in (data.get("_blobs") or {}).items():
        path = os.path.join(run_dir, name)
        try:
            data[field] = orjson.loads(_fsops.read_bytes(path))
        except orjson.JSONDecodeError as error:
            raise StoreCorrupted(f"{path}: not valid JSON ({error})") from None
    return RunRecord.from_json(data)


def blob_names(data: dict[str, Any]) -> set[str]:
    """Names of the blob files a stored record refers to."""
    return set((data.get("_blobs") or {}).values())
