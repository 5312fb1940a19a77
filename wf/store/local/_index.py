"""The listing index: one empty file per run whose *name* carries what filters need.

``index/<b1>/<b2>/<seq>+<run_id>+<status>+<wf hash>+<parent hash>``. ``seq`` is the run's
creation number (16 digits), and the two bucket levels are fixed slices of it
(``_layout.bucket``), so visiting buckets and names in reverse name order visits runs
newest-created first, whatever their ids, and the newest page touches a few small
directories however many runs the store holds. A status filter reads names only; the run's
``run.json`` is opened just for runs that pass the name filters, and its record has the last
word (an index entry is a hint that the lease holder keeps in line with the record).

Child runs are also listed under ``children/<parent_id>/<seq>+<run_id>``, so ``parent_id=``
queries read one small directory, in creation order.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Collection, Iterator

from wf._exceptions import UsageError
from wf.store._ids import validate_run_id
from wf.store.local import _atomic, _fsops
from wf.store.local._layout import BUCKET_LEVELS, SEP, bucket, child_name, damage, seq_field

Entry = tuple[str, str, str, str]
"""``(run_id, status, workflow hash, parent hash)`` parsed from an index name."""


def parse(name: str) -> Entry | None:
    """The fields of an index name, or None for anything else (temporary files)."""
    fields = name.split(SEP)
    if len(fields) != 5 or not fields[0].isdigit():
        return None
    return fields[1], fields[2], fields[3], fields[4]


def valid_id(run_id: str) -> bool:
    """Whether a name read from the index is a run id (it becomes a path)."""
    try:
        validate_run_id(run_id)
    except UsageError:
        return False
    return True


class Index:
    """Operations on ``index/`` and ``children/`` of one store."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "index")
        self.children = os.path.join(root, "children")
        self._names = _atomic.EmptyNames(root)
        self._made: set[str] = set()
        """Bucket directories known to exist (durably): nothing ever removes one."""

    def leaf(self, seq: int) -> str:
        """The bucket directory of the entry of the run created ``seq``-th."""
        return os.path.join(self.dir, *bucket(seq))

    def make_leaf(self, seq: int) -> str:
        """Create the run's bucket directories as needed (each new one made durable)."""
        leaf = self.leaf(seq)
        if leaf in self._made:
            return leaf
        path = self.dir
        for part in bucket(seq):
            parent, path = path, os.path.join(path, part)
            if _fsops.mkdir(path, allow=(errno.EEXIST,)):
                _fsops.fsync_dir(parent)
        if len(self._made) > 4096:
            self._made.clear()
        self._made.add(leaf)
        return leaf

    def add(self, seq: int, name: str) -> None:
        """Create the entry ``name`` of the run created ``seq``-th (durably)."""
        leaf = self.make_leaf(seq)
        self._names.touch(leaf, name)
        _fsops.fsync_dir(leaf)

    def add_child(self, parent_id: str, seq: int, run_id: str) -> None:
        """List ``run_id`` (created ``seq``-th) under its parent (durably)."""
        directory = os.path.join(self.children, parent_id)
        if _fsops.mkdir(directory, allow=(errno.EEXIST,)):
            _fsops.fsync_dir(self.children)
        self._names.touch(directory, child_name(seq, run_id))
        _fsops.fsync_dir(directory)

    def current(self, seq: int, run_id: str) -> list[str]:
        """The run's entry names (normally exactly one)."""
        prefix = f"{seq_field(seq)}{SEP}{run_id}{SEP}"
        return [n for n in _fsops.listdir(self.leaf(seq)) if n.startswith(prefix)]

    def set(
        self, seq: int, run_id: str, name: str, old: str | None = None, *, sync: bool = True
    ) -> None:
        """Make ``name`` the run's only entry; ``old`` is the expected current one.

        ``sync=False`` leaves the change to be made durable by the file system in its own time:
        the lease holder reconciles the entry with the record, so a lost rename only shows a
        stale status in listings until the run is next driven.
        """
        leaf = self.leaf(seq)
        if old == name and os.path.exists(os.path.join(leaf, name)):
            return
        if old is not None and old != name:
            # The usual case: the expected entry is there and becomes the new one.
            try:
                _fsops.rename(
                    os.path.join(leaf, old), os.path.join(leaf, name), allow=(errno.ENOENT,)
                )
            except FileNotFoundError:
                pass  # not there after all: find what is
            else:
                if sync:
                    _fsops.fsync_dir(leaf)
                return
        found = [old] if old is not None and os.path.exists(os.path.join(leaf, old)) else []
        if not found:
            found = self.current(seq, run_id)
        if name in found:
            found.remove(name)
        elif found:
            _fsops.rename(os.path.join(leaf, found.pop()), os.path.join(leaf, name))
        else:
            self.make_leaf(seq)
            self._names.touch(leaf, name)
        for extra in found:
            _fsops.unlink(os.path.join(leaf, extra))
        if sync:
            _fsops.fsync_dir(leaf)

    # -- reading -------------------------------------------------------------------------

    def walk(
        self,
        before: int | None = None,
        statuses: Collection[str] | None = None,
        wf_hash: str | None = None,
    ) -> Iterator[Entry]:
        """Entries of runs created before the ``before``-th, newest-created first, passing
        the name filters.

        Filters are substring tests on names (``+<status>+``, ``+<wf hash>+``): a scan of a
        large bucket costs a few C-level string operations per entry, and only entries that
        pass are parsed.
        """
        needles = [f"{SEP}{s}{SEP}" for s in statuses] if statuses is not None else None
        wf_needle = f"{SEP}{wf_hash}{SEP}" if wf_hash is not None else None
        limits = bucket(before) if before is not None else None
        below = seq_field(before) if before is not None else None
        for leaf in self._leaves(self.dir, 0, limits):
            names = _fsops.listdir(leaf)
            if below is not None:
                names = [n for n in names if n < below]
            if wf_needle is not None:
                names = [n for n in names if wf_needle in n]
            if needles is not None:
                names = [n for n in names if any(needle in n for needle in needles)]
            names.sort(reverse=True)
            for name in names:
                entry = parse(name)
                if entry is not None and valid_id(entry[0]):
                    yield entry
                elif not name.startswith("."):
                    damage(f"{os.path.join(leaf, name)}: not a wf index entry; skipped")

    def _leaves(self, path: str, level: int, limits: tuple[str, ...] | None) -> Iterator[str]:
        """Bucket directories at the last level, newest first, skipping those above ``limits``."""
        if level == BUCKET_LEVELS:
            yield path
            return
        for name in sorted(_fsops.listdir(path), reverse=True):
            if name.startswith("."):
                continue
            if not os.path.isdir(os.path.join(path, name)) or os.path.islink(
                os.path.join(path, name)
            ):
                # Not a bucket wf made (a stray file, a link): skip it, say so, and list the
                # rest rather than fail the whole listing.
                damage(f"{os.path.join(path, name)}: not a wf index directory; skipped")
                continue
            inner = limits
            if limits is not None:
                if name > limits[level]:
                    continue  # every run in here was created after ``before``
                if name < limits[level]:
                    inner = None  # every run in here was created before ``before``
            yield from self._leaves(os.path.join(path, name), level + 1, inner)

    def children_of(self, parent_id: str, before: int | None) -> list[str]:
        """Ids of the parent's child runs created before the ``before``-th, newest first."""
        below = seq_field(before) if before is not None else None
        names = _fsops.listdir(os.path.join(self.children, parent_id))
        names = [n for n in names if SEP in n and n[0] != "." and (below is None or n < below)]
        ids = (n.partition(SEP)[2] for n in sorted(names, reverse=True))
        return [run_id for run_id in ids if valid_id(run_id)]
