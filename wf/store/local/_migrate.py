"""Format 4: number every run of an older store in the creation sequence, in place.

A store of format 3 or older ordered equal runs, and listed runs, by their ids. Format 4 orders
both by a store-wide creation sequence (``_sequence``) and names a group lane by its queue and
group (``lane_of``). The upgrade keeps the order the store had: its runs are numbered 1, 2, …
in id order (what the queue and every listing used), and the lanes keep their entries' order.

Every step is idempotent (a crash part-way repeats the whole upgrade, which gives every run the
same number again); it runs once, under ``migrate.lock``, before the format file says 4:

1. each run's record gets its number (``run.json`` written: the journal's first event, which
   has no number, no longer gives the record back);
2. its queue entries are written again with the tags of format 4 (a post's due-now mark,
   with the run's tags now, while the run has messages);
3. lane entries move to the directory of their run's lane (an entry of an ended or missing run
   goes), keeping their names, hence their order; ``lanes/*.seq`` (a lane's own counter) goes;
4. ``index/`` and ``children/`` are built again from the records (the old ones are set aside
   in ``tmp/`` first, and removed once the upgrade is done: ``_format.migrate``);
5. the sequence's last number is set past every number given (runs and lane entries).

Fsyncs are deferred into one flush of the file system at the end, where syncfs is available.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil

from wf._exceptions import RunNotFound, StoreCorrupted
from wf.store._base import RunRecord, lane_of
from wf.store.local import _atomic, _fsops, _records, _upgrade
from wf.store.local._index import Index, record_tags, valid_id
from wf.store.local._layout import (
    INBOX_DIR,
    NOW,
    RUN_FILE,
    SEP,
    index_name,
    lane_hash,
    parse_queue_name,
    queue_name,
    record_due,
    record_tag,
    run_exists,
)
from wf.store.local._sequence import CreationSequence

ASIDE = ("index", "children")
"""Directories built again from the records; the old ones wait in ``tmp/<name>-v3``."""


def number_runs(root: str) -> None:
    """Upgrade a store of format 3 to format 4 (see the module)."""
    since = _fsops.mark(root, os.stat(root).st_dev)
    with _fsops.deferred_fsyncs() as owed:
        records = _number(root)
        _requeue(root, records)
        last_lane = _move_lanes(root, records)
        _reindex(root, records)
        sequence = CreationSequence(root)
        try:
            sequence.start_at(max(len(records), last_lane))
        finally:
            sequence.close()
    if owed:
        _fsops.barrier(root, since)


def _number(root: str) -> dict[str, RunRecord]:
    """Give each run its number, in id order; returns the records by id."""
    runs = os.path.join(root, "runs")
    out: dict[str, RunRecord] = {}
    seq = 0
    for run_id in sorted(_fsops.listdir(runs)):
        run_dir = os.path.join(runs, run_id)
        if run_id.startswith(".") or not valid_id(run_id) or not run_exists(run_dir):
            continue
        seq += 1  # a damaged run keeps its place too: numbers do not depend on what reads
        _upgrade.tick()
        try:
            raw = _records.read_raw(run_dir, run_id)
            record = _records.with_blobs(run_dir, raw)
        except (RunNotFound, StoreCorrupted):
            continue  # ``wf store verify`` names it; the upgrade leaves it as it is
        if raw.get("seq") != seq:
            record.seq = seq
            data, _blobs = _records.encode(record, run_dir, sync_dir=True)
            _atomic.replace(run_dir, RUN_FILE, data)
        record.seq = seq
        out[run_id] = record
    return out


def _requeue(root: str, records: dict[str, RunRecord]) -> None:
    """Each run's queue entry with format 4's tags; older entries of the run go."""
    queue = os.path.join(root, "queue")
    names = _atomic.EmptyNames(root)
    entries: dict[str, list[str]] = {}
    for name in _fsops.listdir(queue):
        parsed = parse_queue_name(name)
        if parsed is not None:
            entries.setdefault(parsed[1], []).append(name)
    for run_id, record in records.items():
        _upgrade.tick()
        tag = record_tag(record)
        due = record_due(record.status, record.wake_at, tag)
        wanted = None if due is None else queue_name(due, run_id)
        # A post's due-now mark stays while the run has messages (its record does not know of
        # them), now with the run's tags (format 3 also wrote an untagged due-now entry for
        # any pending run in no group, as its own entry).
        mark = queue_name(NOW + tag, run_id) if _has_messages(root, run_id) else None
        kept = {name for name in (wanted, mark) if name is not None}
        for name in kept:
            names.touch(queue, name)
        for old in entries.get(run_id, ()):
            if old not in kept:
                _fsops.unlink(os.path.join(queue, old), allow=(errno.ENOENT,))
    _fsops.fsync_dir(queue)


def _has_messages(root: str, run_id: str) -> bool:
    inbox = os.path.join(root, "runs", run_id, INBOX_DIR)
    return any(n.endswith(".json") and n[0] != "." for n in _fsops.listdir(inbox))


def _move_lanes(root: str, records: dict[str, RunRecord]) -> int:
    """Lane entries into their run's lane; returns the largest number an entry carries."""
    lanes = os.path.join(root, "lanes")
    largest = 0
    for name in _fsops.listdir(lanes):
        path = os.path.join(lanes, name)
        if name.endswith(".seq"):
            with contextlib.suppress(OSError):
                largest = max(largest, int(_fsops.read_bytes(path).strip() or b"0"))
            _fsops.unlink(path, allow=(errno.ENOENT,))
            continue
        if not os.path.isdir(path):
            continue
        for entry in _fsops.listdir(path):
            place, sep, run_id = entry.partition(SEP)
            if not sep or entry.startswith("."):
                continue
            head = place.partition(".")[0]
            if head.isascii() and head.isdigit():
                largest = max(largest, int(head))
            record = records.get(run_id)
            lane = None if record is None or record.status.is_terminal else lane_of(record)
            if lane is None:
                _fsops.unlink(os.path.join(path, entry), allow=(errno.ENOENT,))
                continue
            target = os.path.join(lanes, lane_hash(lane))
            if target != path:
                if _fsops.mkdir(target, allow=(errno.EEXIST,)):
                    _fsops.fsync_dir(lanes)
                _fsops.rename(os.path.join(path, entry), os.path.join(target, entry))
                _fsops.fsync_dir(target)
        with contextlib.suppress(OSError):
            os.rmdir(path)  # an old lane left empty
    return largest


def _reindex(root: str, records: dict[str, RunRecord]) -> None:
    """``index/`` and ``children/`` built again, in the records' creation order."""
    for name in ASIDE:
        current, aside = os.path.join(root, name), os.path.join(root, "tmp", f"{name}-v3")
        if os.path.lexists(aside):
            shutil.rmtree(current, ignore_errors=True)  # a repeat: rebuilt from scratch
        else:
            with contextlib.suppress(FileNotFoundError):
                os.rename(current, aside)
        _fsops.mkdir(current, allow=(errno.EEXIST,))
    _fsops.fsync_dir(root)
    index = Index(root)
    for run_id, record in records.items():
        _upgrade.tick()
        _add(index, run_id, record)


def _add(index: Index, run_id: str, record: RunRecord) -> None:
    name = index_name(record.seq, run_id, record.status, record.workflow, record.parent_id)
    tags = record_tags(record.queue, record.group, record.deployment)
    index.add(record.seq, name, tags, record.workflow)
    if record.parent_id is not None and valid_id(record.parent_id):
        index.add_child(record.parent_id, record.seq, run_id)
