"""Entries of runs that do not exist (*ghosts*), found and removed by ``wf store verify``.

Every entry outside a run's directory names its run: in ``queue/``, ``lanes/``, ``index/``,
``by-status/``, ``by-workflow/``, ``by-tag/`` and ``children/``. A creation writes them before
it renames the run's directory into ``runs/`` (so a crash may leave them naming a run that
never came to be), and a deletion removes them once the directory (or the locator) is gone
(a crash leaves them naming a run that is no more). Readers skip an entry whose run is gone,
but cannot tell it from one of a run being created, so it would stay for good: ``verify``
removes those whose run does not exist ``ORPHAN_AGE`` after they were made (by ``ctime``, as
the queue's own sweep does), and says so once per run. Younger ones are left to the creation
in flight, but for those of a run that has a tombstone (no creation makes a run with its id)
once no deletion of it is in progress: a deletion cut short, or entries a verify put back
while the run was being deleted, are removed at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from wf._exceptions import RunNotFound, StoreError
from wf.store.local import _fsops, _index
from wf.store.local._layout import SEP, parse_queue_name
from wf.store.local._queue import ORPHAN_AGE

if TYPE_CHECKING:
    from wf.store.local._store import LocalStore


def _index_run(name: str) -> str | None:
    entry = _index.parse(name)
    return None if entry is None else entry[0]


def _short_run(name: str) -> str | None:
    """``<seq>[.<attempt>]+<run_id>``: by-workflow, by-tag, children and lane entries."""
    _place, sep, run_id = name.partition(SEP)
    return run_id if sep else None


def _queue_run(name: str) -> str | None:
    parsed = parse_queue_name(name)
    return None if parsed is None else parsed[1]


def _trees(store: LocalStore) -> list[tuple[str, Callable[[str], str | None]]]:
    """Each directory tree of entries, with how an entry's name gives its run id."""
    index = store.index
    return [
        (store.queue.dir, _queue_run),
        (store.lanes.dir, _short_run),
        (index.dir, _index_run),
        (index.by_status, _index_run),
        (index.by_workflow, _short_run),
        (index.by_tag, _short_run),
        (index.children, _short_run),
    ]


def _entries(top: str, run_of: Callable[[str], str | None]) -> Iterator[tuple[str, str]]:
    """``(path, run_id)`` of every entry under ``top`` (links are not followed; names that
    are no entry, such as hidden temporary files, are skipped: ``verify`` names those)."""
    for folder, _dirs, files in os.walk(top):
        for name in files:
            if name.startswith("."):
                continue
            run_id = run_of(name)
            if run_id is not None and _index.valid_id(run_id):
                yield os.path.join(folder, name), run_id


def exists(store: LocalStore, run_id: str) -> bool:
    """Whether the run exists (a directory or a packed line); when that cannot be told (a
    damaged locator, an unreadable directory: named elsewhere) it is taken to exist."""
    try:
        store._find(run_id)
    except RunNotFound:
        return False
    except (StoreError, OSError):
        return True
    return True


def _deleting(store: LocalStore, run_id: str) -> bool:
    """Whether a deletion of the run may still be removing its entries: its directory is
    in ``tmp/`` (renamed there first, removed once its entries are gone), or a deletion of
    packed runs holds the segments lock (from their tombstones until their entries are
    gone). Asked after the run was found not to exist, so a deletion that began later is
    of a run that existed then."""
    prefix = f"deleted.{run_id}."
    if any(n.startswith(prefix) for n in _fsops.listdir(os.path.join(store.root, "tmp"))):
        return True
    with store.segments.lock(wait=False) as held:
        return not held


def _old(path: str, now: float) -> bool:
    """Whether the entry was made over ``ORPHAN_AGE`` ago (ctime: an entry may be a link to
    a shared file, whose ctime each new link refreshes, so it never looks older than it is)."""
    try:
        return now - os.lstat(path).st_ctime > ORPHAN_AGE
    except OSError:
        return False


def sweep(store: LocalStore) -> list[str]:
    """Remove the entries of runs that do not exist, made over ``ORPHAN_AGE`` ago; one line
    per such run, naming where its entries were."""
    if not store._open(create=False):
        return []  # no store (opening one also recovers the runs a creation log holds)
    known: dict[str, bool] = {}
    gone: dict[str, bool] = {}
    found: dict[str, list[str]] = {}

    def deleted(run_id: str) -> bool:
        """Whether the run was deleted, its deletion over: its entries need not wait."""
        if run_id not in gone:
            gone[run_id] = store.tombstones.get(run_id) is not None and not _deleting(store, run_id)
        return gone[run_id]

    now = time.time()
    for top, run_of in _trees(store):
        for path, run_id in _entries(top, run_of):
            there = known.get(run_id)
            if there is None:
                there = known[run_id] = exists(store, run_id)
            if not there and (_old(path, now) or deleted(run_id)):
                found.setdefault(run_id, []).append(path)
    problems = []
    root = store.root + os.sep
    for run_id, paths in sorted(found.items()):
        for path in paths:
            _fsops.unlink(path)
        where = sorted({path.removeprefix(root).split(os.sep)[0] + "/" for path in paths})
        problems.append(
            f"run {run_id}: {len(paths)} entr{'y' if len(paths) == 1 else 'ies'} in "
            f"{', '.join(where)} but no such run (a creation or a deletion cut short): removed"
        )
    if found:
        store.queue.resync()
    return problems
