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

Two more indexes make filtered listings read only what matches: ``by-status/<status>/<b1>/<b2>/``
holds the same name as ``index/`` under the run's status (moved by a rename when the status
changes), and ``by-workflow/<wf hash>/<b1>/<b2>/<seq>+<run_id>`` is made at creation (a run's
workflow never changes). ``by-status/ready`` says they cover every run (a new store; an older
one once ``wf store verify`` has built them); until then filters read ``index/``.

``by-tag/<kind><key hash>/<b1>/<b2>/<seq>+<run_id>`` lists the runs of a named queue (kind
``q``), of a group key (``g``, in any queue; one bucket level, split when it grows:
``tree_bucket``, ``SPLIT_BYTES``) and pinned to a deployment (``d``), of every status
(format 7): made at creation (a run's queue and group never change; a re-pin moves the
deployment entry under the lease). Keys are ``tag_key`` hashes: a collision only adds a
candidate that the record then rejects. ``by-tag/ready`` says they cover every run.

A filtered listing walks one index and checks the other filters by a look at the run's name
in theirs (a ``stat``, no read), so a page reads about as many names as it shows whenever
the walked index is the most selective one: a tag (group before queue before deployment),
else the statuses when the counts say they are rare, else the workflow.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import heapq
import os
from collections.abc import Callable, Collection, Iterator

from wf._exceptions import StoreError
from wf.store._base import RunStatus
from wf.store.local import _atomic, _fsops, _upgrade
from wf.store.local._layout import (
    BUCKET_LEVELS,
    SEP,
    bucket,
    child_name,
    damage,
    digest,
    seq_field,
)
from wf.store.local._layout import (
    valid_id as valid_id,  # re-exported: the index's readers ask it
)

STATUSES = tuple(status.value for status in RunStatus)

Entry = tuple[str, str, str, str]
"""``(run_id, status, workflow hash, parent hash)`` parsed from an index name."""


def parse(name: str) -> Entry | None:
    """The fields of an index name, or None for anything else (temporary files)."""
    fields = name.split(SEP)
    if len(fields) != 5 or not (fields[0].isascii() and fields[0].isdigit()):
        return None
    return fields[1], fields[2], fields[3], fields[4]


def _older_entry(name: str) -> bool:
    """Whether ``name`` is an index entry as format 3 named it (``sweep_older_entries``)."""
    fields = name.split(SEP)
    return len(fields) == 4 and fields[1] in STATUSES and valid_id(fields[0])


def is_bucket(top: str, sub: str | None) -> bool:
    """Whether ``top`` (and ``sub`` in it) are bucket names this wf makes (``bucket``)."""
    if len(top) != 10 or not (top.isascii() and top.isdigit()):
        return False
    return sub is None or is_sub_bucket(sub)


def is_sub_bucket(name: str) -> bool:
    """Whether ``name`` is a sub-bucket's (``b`` and three digits) of a split bucket."""
    return len(name) == 4 and name[0] == "b" and name.isascii() and name[1:].isdigit()


def _drop(path: str) -> None:
    """Remove an entry if it is there. A file where one of its directories belongs (a stray
    ``by-status/failed``) means it is not: the file is verify's to name, not a failure of
    the run whose entries are being moved or forgotten. A directory where the entry belongs
    is left and said (``damage``: ``wf gc`` names and counts it), as a deletion's
    ``_remove_entry`` does: it stopped a deletion half done."""
    try:
        _fsops.unlink(path, allow=(errno.ENOENT, errno.ENOTDIR, errno.EISDIR))
    except NotADirectoryError:
        pass
    except IsADirectoryError:
        damage(f"{path}: a directory where an entry (an empty file) belongs; skipped", path)


def short_entry(name: str) -> bool:
    """Whether ``name`` is an entry of ``by-workflow/``, ``by-tag/`` or ``children/``:
    ``<seq>+<run_id>`` (``child_name``)."""
    field, sep, run_id = name.partition(SEP)
    return bool(sep) and field.isascii() and field.isdigit() and valid_id(run_id)


def _short_entries(folder: str, names: list[str]) -> Iterator[str]:
    """The entries among ``names`` (sorted, each with a ``+``) in ``folder``, in their order,
    checked as a page takes them: a name that is no entry (``short_entry``) is skipped and
    said (``damage``). A stray ``x+<run_id>`` made a listing by tag fail on its creation
    number."""
    for name in names:
        if short_entry(name):
            yield name
        elif name[:1] != ".":
            stray = os.path.join(folder, name)
            damage(f"{stray}: not a wf index entry; skipped", stray)


READERS = 8
"""Threads that read records at once while ``build_tags`` fills ``by-tag/``."""

TAG_DIR = "by-tag"
NAME_SUFFIX = ".name"
"""``by-workflow/<hash>.name``: the workflow names of that hash, for searches by name."""

Tag = tuple[str, str]
"""``(kind, value)``: ``("q", queue)``, ``("g", group)`` or ``("d", deployment)``."""


def tag_key(kind: str, value: str) -> str:
    """The directory of a tag's runs under ``by-tag/``: its kind, then 12 hex digits."""
    return kind + digest(value, 12)


def tree_bucket(top: str, seq: int) -> tuple[str, ...]:
    """The bucket directories of ``seq`` under an index tree ``top``: both levels of
    ``bucket``, but only the first (a million runs) in a group's tree, ``by-tag/g<hash>``.
    Group keys are many and each holds few runs (a customer's), so a thousand-run bucket per
    group would be a directory, 4 KiB, for about one run; a group's million-run bucket holds
    every run of the group the store made in that million."""
    parts = bucket(seq)
    if is_group_tree(top):
        return parts[:1]
    return parts


SPLIT_BYTES = 64 * 1024
"""A group's bucket (``by-tag/g<hash>/<b1>/``) whose directory has grown to this size (about
1,000 names on ext4, 3,000 on tmpfs: a directory's size follows its entries) takes its next
runs in thousand-run sub-buckets named like the second level of ``bucket`` (format 9). A
group's first page then lists that bounded bucket and its newest sub-bucket, not the hundred
thousand runs a big group (a busy tenant) made in a million; a small group keeps one directory
per million runs. A run's entry is in one of the two places; readers merge both by name, and
writers that raced the split only put an entry on either side of it."""


def is_group_tree(top: str) -> bool:
    """Whether ``top`` is a group's tree under ``by-tag/`` (one bucket level, split when big)."""
    head, _, last = top.rpartition(os.sep)
    return last[:1] == "g" and head.rstrip(os.sep).rpartition(os.sep)[2] == TAG_DIR


def record_tags(queue: str | None, group: str | None, deployment: str | None) -> list[Tag]:
    """The tags a run with these fields is listed under (group before queue before
    deployment: the order filters prefer to walk them)."""
    found = (("g", group), ("q", queue), ("d", deployment))
    return [(kind, value) for kind, value in found if value is not None]


class Index:
    """Operations on ``index/`` and ``children/`` of one store."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "index")
        self.children = os.path.join(root, "children")
        self.by_status = os.path.join(root, "by-status")
        self.by_workflow = os.path.join(root, "by-workflow")
        self.by_tag = os.path.join(root, TAG_DIR)
        self._tags_ready = False
        """Whether ``by-tag/ready`` was seen (it is never removed)."""
        self._named: set[str] = set()
        """Workflow hashes whose name file this process has seen hold their name."""
        self._ready = False
        """Whether ``by-status/ready`` was seen (it is never removed)."""
        self._names = _atomic.EmptyNames(root)
        self._made: set[str] = set()
        """Bucket directories known to exist (durably): nothing wf does removes one, but the
        repair of damage may (``_enter`` then forgets them all)."""
        self._made_leaves: dict[tuple[str, int], str] = {}
        """(tree, ``seq // 1000``) -> the bucket directory of those runs in that tree, known to
        exist (not for a group's tree, whose bucket may split): a creation's entries then
        build no path but their own. Cleared with ``_made``."""
        self._bucket_dirs: dict[tuple[str, int], str] = {}
        """(tree, ``seq // 1000``) -> the path of that bucket in that tree, made or not (not for
        a group's tree): a pure function of its key, built once, not at every entry moved."""

    def leaf(self, seq: int) -> str:
        """The bucket directory of the entry of the run created ``seq``-th."""
        return self._bucket_dir(self.dir, seq)

    def _bucket_dir(self, top: str, seq: int) -> str:
        """``top``'s (not a group tree's) bucket directory of ``seq``: a path, made or not."""
        key = (top, seq // 1000)  # ``bucket`` keeps all but the last three digits
        path = self._bucket_dirs.get(key)
        if path is None:
            if len(self._bucket_dirs) > 4096:
                self._bucket_dirs.clear()
            path = self._bucket_dirs[key] = os.path.join(top, *bucket(seq))
        return path

    def make_leaf(self, seq: int) -> str:
        """Create the run's bucket directories as needed (each new one made durable)."""
        key = (self.dir, seq // 1000)  # ``bucket`` keeps all but the last three digits
        leaf = self._made_leaves.get(key)
        if leaf is not None:
            return leaf
        leaf = self.leaf(seq)
        if leaf not in self._made:
            path = self.dir
            for part in bucket(seq):
                parent, path = path, os.path.join(path, part)
                if _fsops.mkdir(path, allow=(errno.EEXIST,)):
                    _fsops.fsync_dir(parent)
            self._note_made(leaf)
        self._made_leaves[key] = leaf
        return leaf

    def _note_made(self, path: str) -> None:
        if len(self._made) > 4096:
            self._made.clear()
            self._made_leaves.clear()
        self._made.add(path)

    def add(
        self, seq: int, name: str, tags: Collection[Tag] = (), workflow: str | None = None
    ) -> None:
        """Create the entry ``name`` of the run created ``seq``-th (durably), and its entries
        in ``by-status/``, ``by-workflow/`` and ``by-tag/`` (``record_tags``); ``workflow``
        (the name the entry's hash is of) is written beside its index once."""
        if workflow is not None:
            self.name_workflow(name.split(SEP)[3], workflow)
        leaf = self._enter(None, seq, name)
        _fsops.fsync_dir(leaf)
        fields = name.split(SEP)
        short = child_name(seq, fields[1])
        for where, entry in (
            (f"{self.by_status}{os.sep}{fields[2]}", name),
            (f"{self.by_workflow}{os.sep}{fields[3]}", short),
            *((os.path.join(self.by_tag, tag_key(*tag)), short) for tag in tags),
        ):
            leaf = self._enter(where, seq, entry)
            _fsops.fsync_dir(leaf)

    def _enter(self, top: str | None, seq: int, entry: str) -> str:
        """Create ``entry`` in ``top``'s bucket of ``seq`` (``index/``'s when None), made as
        needed; returns the bucket directory.

        A bucket this process knows to exist may be gone after all: a file stood where a
        directory of it belongs and was removed, as ``wf store verify`` asks. So when the
        entry cannot be made, what is known is forgotten and the buckets looked at again,
        once: the creation after the repair goes through, not every one until the process
        ends (on the failure path only: the hot path asks nothing more)."""
        leaf = self.make_leaf(seq) if top is None else self._make(top, seq)
        try:
            self._names.touch(leaf, entry)
        except StoreError as error:
            cause = error.__cause__
            if not isinstance(cause, OSError) or cause.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise  # a full disk, an I/O error: nothing a second look would change
            self._made.clear()
            self._made_leaves.clear()
            leaf = self.make_leaf(seq) if top is None else self._make(top, seq)
            self._names.touch(leaf, entry)
        return leaf

    def _make(self, top: str, seq: int) -> str:
        """Create the bucket directories of ``seq`` under ``top`` (``by-status/<status>``,
        ``by-workflow/<hash>`` or ``by-tag/<key>``) as needed, each new one made durable."""
        key = (top, seq // 1000)
        leaf = self._made_leaves.get(key)
        if leaf is not None:
            return leaf
        parts = tree_bucket(top, seq)
        leaf = os.path.join(top, *parts)
        if len(parts) == 1:
            return self._make_group(top, leaf, seq)
        if leaf not in self._made:
            self._make_dirs(top, parts, leaf)
        self._made_leaves[key] = leaf
        return leaf

    def _make_group(self, top: str, leaf: str, seq: int) -> str:
        """``_make`` in a group's tree: its bucket, or once that has grown past
        ``SPLIT_BYTES``, the bucket's sub-bucket of ``seq`` (one ``stat`` a run)."""
        sub = os.path.join(leaf, bucket(seq)[1])
        if sub in self._made:
            return sub
        if leaf not in self._made:
            self._make_dirs(top, (os.path.basename(leaf),), leaf)
        if _fsops.stat_size(leaf) < SPLIT_BYTES:
            return leaf
        if _fsops.mkdir(sub, allow=(errno.EEXIST,)):
            _fsops.fsync_dir(leaf)
        self._note_made(sub)
        return sub

    def _make_dirs(self, top: str, parts: tuple[str, ...], leaf: str) -> None:
        """Create ``top``'s bucket directories ``parts`` (ending at ``leaf``) as needed, each
        new one made durable, and remember ``leaf``."""
        if not os.path.isdir(leaf):
            kind = os.path.dirname(top)
            path = os.path.dirname(kind)
            for part in (os.path.basename(kind), os.path.basename(top), *parts):
                parent, path = path, os.path.join(path, part)
                if _fsops.mkdir(path, allow=(errno.EEXIST,)):
                    _fsops.fsync_dir(parent)
        self._note_made(leaf)

    def _status_path(self, seq: int, name: str) -> str:
        top = self.by_status + os.sep + name.split(SEP)[2]
        return self._bucket_dir(top, seq) + os.sep + name

    def _move_status(self, seq: int, name: str, old: str | None) -> None:
        """Make ``by-status/`` hold the run's entry ``name`` under its status, and no other."""
        status = name.split(SEP)[2]
        top = self.by_status + os.sep + status
        if old is not None and old != name:
            new_path = self._make(top, seq) + os.sep + name
            try:
                _fsops.rename(self._status_path(seq, old), new_path, allow=(errno.ENOENT,))
                return
            except FileNotFoundError:
                pass  # not there after all (a crash, an older wf): make it, drop strays
        else:
            new_path = self._bucket_dir(top, seq) + os.sep + name
        if not os.path.exists(new_path):
            self._enter(top, seq, name)
        self.forget_status(seq, name, keep=status)

    def forget_status(self, seq: int, name: str, keep: str | None = None) -> None:
        """Remove the run's ``by-status/`` entries (but the one under ``keep``)."""
        fields = name.split(SEP)
        for status in STATUSES:
            if status != keep:
                fields[2] = status
                _drop(self._status_path(seq, SEP.join(fields)))

    def forget_workflow(self, seq: int, name: str) -> None:
        """Remove the run's ``by-workflow/`` entry."""
        fields = name.split(SEP)
        leaf = os.path.join(self.by_workflow, fields[3], *bucket(seq))
        _drop(os.path.join(leaf, child_name(seq, fields[1])))

    def name_workflow(self, wf_hash: str, workflow: str) -> None:
        """Keep the workflow's name beside its index (``by-workflow/<hash>.name``, one name a
        line: two names may share a hash), so a search by name finds the index without a
        scan. A cache, written without a flush: ``workflow_names`` puts back a lost one."""
        if wf_hash in self._named:
            return
        names = self._names_of(wf_hash)
        path = os.path.join(self.by_workflow, wf_hash + NAME_SUFFIX)
        # A directory where the file belongs (``_names_of`` said it) is left: a cache, whose
        # loss costs a search a record's read, fails no creation.
        if workflow not in names and not os.path.isdir(path):
            _fsops.mkdir(self.by_workflow, allow=(errno.EEXIST,))
            data = "\n".join([*names, workflow]).encode()
            _atomic.replace_cache(self.by_workflow, wf_hash + NAME_SUFFIX, data)
        if len(self._named) > 4096:
            self._named.clear()
        self._named.add(wf_hash)

    def _names_of(self, wf_hash: str) -> list[str]:
        path = os.path.join(self.by_workflow, wf_hash + NAME_SUFFIX)
        try:
            raw = _fsops.read_bytes(path, allow=(errno.ENOENT, errno.EISDIR))
        except FileNotFoundError:
            return []
        except IsADirectoryError:
            # A directory where the file belongs (verify names it): the names are looked for
            # in the runs' records, as for a lost file.
            damage(f"{path}: not a file of workflow names; skipped", path)
            return []
        return [n for n in raw.decode("utf-8", "replace").split("\n") if n]

    def workflow_names(self, workflow_of: Callable[[str], str | None]) -> list[str]:
        """The names of the workflows ``by-workflow/`` has entries of. A workflow whose name
        file is missing (a store from before them, a lost cache) gets it back from its newest
        run's record (``workflow_of`` a run id; None: no such run)."""
        found: set[str] = set()
        for entry in _fsops.listdir(self.by_workflow):
            if entry.startswith(".") or entry.endswith(NAME_SUFFIX) or SEP in entry:
                continue
            names = self._names_of(entry)
            if not names:
                for _name, run_id in self._walk_short(os.path.join(self.by_workflow, entry), None):
                    workflow = workflow_of(run_id)
                    if workflow is not None and digest(workflow, 8) == entry:
                        self.name_workflow(entry, workflow)
                        names = [workflow]
                        break
            found.update(names)
        return sorted(found)

    def forget_tags(self, seq: int, run_id: str, tags: Collection[Tag]) -> None:
        """Remove the run's ``by-tag/`` entries."""
        for tag in tags:
            for path in self._tag_paths(tag_key(*tag), seq, run_id):
                _drop(path)

    def retag(self, seq: int, run_id: str, old: Tag | None, new: Tag | None) -> None:
        """Move the run's entry from one tag to another (a re-pin): the new one is made first,
        so a crash in between leaves an extra candidate (rejected by the record), never a
        missing one."""
        if new is not None:
            self._enter(os.path.join(self.by_tag, tag_key(*new)), seq, child_name(seq, run_id))
        if old is not None and old != new:
            for path in self._tag_paths(tag_key(*old), seq, run_id):
                _drop(path)

    def _tag_paths(self, key: str, seq: int, run_id: str) -> tuple[str, ...]:
        """Where the run's entry under the tag ``key`` may be: in a group's tree, its bucket
        or the sub-bucket of a split one (``SPLIT_BYTES``)."""
        top = os.path.join(self.by_tag, key)
        parts = tree_bucket(top, seq)
        short = child_name(seq, run_id)
        if len(parts) == 1:
            return (
                os.path.join(top, *parts, short),
                os.path.join(top, *parts, bucket(seq)[1], short),
            )
        return (os.path.join(top, *parts, short),)

    def _tagged_as(self, key: str, seq: int, run_id: str) -> bool:
        """Whether the run has its entry under the tag ``key``."""
        return any(os.path.exists(path) for path in self._tag_paths(key, seq, run_id))

    def tags_ready(self) -> bool:
        """Whether ``by-tag/`` covers every run."""
        if not self._tags_ready:
            self._tags_ready = os.path.exists(os.path.join(self.by_tag, "ready"))
        return self._tags_ready

    def mark_tags_ready(self) -> None:
        """Say ``by-tag/`` covers every run."""
        _fsops.mkdir(self.by_tag, allow=(errno.EEXIST,))
        _fsops.close(_fsops.open_fd(os.path.join(self.by_tag, "ready"), os.O_WRONLY | os.O_CREAT))
        self._tags_ready = True

    def build_tags(self, tags_of: Callable[[str], Collection[Tag] | None]) -> int:
        """Give every run in ``index/`` its ``by-tag/`` entries (a store made before they
        existed), ``tags_of`` reading a run's tags from its record (None: no such run);
        returns how many runs lacked one.

        The records of a bucket are read by ``READERS`` threads at once: reading them is the
        cost (a million files, mostly not cached), and the reads release the interpreter
        while they wait on the disk. The entries are made here, one after another."""
        added = 0
        with concurrent.futures.ThreadPoolExecutor(READERS) as readers:
            for leaf in self._leaves(self.dir, 0, None):
                runs = []
                for name in _fsops.listdir(leaf):
                    entry = parse(name)
                    if entry is not None and valid_id(entry[0]):
                        runs.append((int(name.split(SEP)[0]), entry[0]))
                found = readers.map(tags_of, [run_id for _seq, run_id in runs])
                for (seq, run_id), tags in zip(runs, found, strict=True):
                    missing = [
                        key
                        for key in (tag_key(*tag) for tag in tags or ())
                        if not self._tagged_as(key, seq, run_id)
                    ]
                    added += bool(missing)
                    for key in missing:
                        top = os.path.join(self.by_tag, key)
                        self._enter(top, seq, child_name(seq, run_id))
        self.mark_tags_ready()
        return added

    def ready(self) -> bool:
        """Whether ``by-status/`` and ``by-workflow/`` cover every run."""
        if not self._ready:
            self._ready = os.path.exists(os.path.join(self.by_status, "ready"))
        return self._ready

    def mark_ready(self) -> None:
        """Say ``by-status/`` and ``by-workflow/`` cover every run."""
        _fsops.mkdir(self.by_status, allow=(errno.EEXIST,))
        _fsops.close(
            _fsops.open_fd(os.path.join(self.by_status, "ready"), os.O_WRONLY | os.O_CREAT)
        )
        self._ready = True

    def build_secondary(
        self, hold: Callable[[str], contextlib.AbstractContextManager[bool]] | None = None
    ) -> int:
        """Give every run in ``index/`` its ``by-status/`` and ``by-workflow/`` entries (a
        store made before they existed); returns how many runs lacked one. ``hold``: holds a
        run against drivers and deletions, yielding whether it exists and was taken: a run
        not taken (a creation in flight, one a crash cut short, one being driven or deleted)
        is left as it is, and a taken run's entries are made only if its ``index/`` entry is
        still the one listed (a driver may have moved it on meanwhile)."""
        added = 0
        for leaf in self._leaves(self.dir, 0, None):
            for name in _fsops.listdir(leaf):
                _upgrade.tick()  # built by an upgrade (``_migrate6``): says how far it got
                entry = parse(name)
                if entry is None or not valid_id(entry[0]) or entry[1] not in STATUSES:
                    continue
                seq = int(name.split(SEP)[0])
                status_path = self._status_path(seq, name)
                wf_leaf = os.path.join(self.by_workflow, entry[2], *bucket(seq))
                wf_path = os.path.join(wf_leaf, child_name(seq, entry[0]))
                if os.path.exists(status_path) and os.path.exists(wf_path):
                    continue
                with hold(entry[0]) if hold is not None else contextlib.nullcontext(True) as ok:
                    if not ok or not os.path.exists(os.path.join(leaf, name)):
                        continue
                    if os.path.exists(status_path) and os.path.exists(wf_path):
                        continue
                    added += 1
                    self._enter(os.path.join(self.by_status, entry[1]), seq, name)
                    self._enter(
                        os.path.join(self.by_workflow, entry[2]), seq, child_name(seq, entry[0])
                    )
        self.mark_ready()
        return added

    def withdraw(
        self, seq: int, name: str, tags: Collection[Tag], parent_id: str | None = None
    ) -> None:
        """Remove what ``add`` (and ``add_child``) made for a creation that did not publish
        its run: the entry ``name`` and its entries in ``by-status/``, ``by-workflow/``,
        ``by-tag/`` and under its parent, each by its name (the run's number is its own, so
        no other creation's are touched). Not synced: a removal lost to a crash leaves entries
        of no run, which verify removes."""
        run_id = name.split(SEP)[1]
        # Under every status: a process that drove the run before its flush failed may have
        # renamed the entry (``set``).
        fields = name.split(SEP)
        for status in STATUSES:
            fields[2] = status
            _drop(os.path.join(self.leaf(seq), SEP.join(fields)))
        self.forget_status(seq, name)
        self.forget_workflow(seq, name)
        self.forget_tags(seq, run_id, tags)
        if parent_id is not None:
            _drop(os.path.join(self.children, parent_id, child_name(seq, run_id)))

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

    def running_ids(self, seq: int) -> frozenset[str]:
        """The runs listed ``running`` in the thousand-run bucket of ``seq`` in
        ``by-status/``: one ``listdir``. A hint for a claim (which runs others drive), never
        the truth: empty when the bucket cannot be read."""
        top = self.by_status + os.sep + RunStatus.RUNNING.value
        try:
            names = os.listdir(self._bucket_dir(top, seq))
        except OSError:
            return frozenset()
        return frozenset(name.split(SEP, 2)[1] for name in names if SEP in name)

    def has(self, seq: int, name: str) -> bool:
        """Whether the entry ``name`` of the run created ``seq``-th is there (one ``stat``)."""
        return os.path.exists(self.leaf(seq) + os.sep + name)

    def set(
        self,
        seq: int,
        run_id: str,
        name: str,
        old: str | None = None,
        *,
        sync: bool = True,
        there: bool | None = None,
    ) -> None:
        """Make ``name`` the run's only entry; ``old`` is the expected current one.

        ``sync=False`` leaves the change to be made durable by the file system in its own time:
        the lease holder reconciles the entry with the record, so a lost rename only shows a
        stale status in listings until the run is next driven. ``there``: whether ``old`` is
        there, when the caller has just looked (``has``) and nothing could move it since.
        """
        leaf = self.leaf(seq)
        if there is None or old != name:
            there = old == name and os.path.exists(leaf + os.sep + name)
        if there:
            if not os.path.exists(self._status_path(seq, name)):
                self._move_status(seq, name, None)  # lost to a crash: reconcile
            return
        if old is not None and old != name:
            # The usual case: the expected entry is there and becomes the new one.
            try:
                _fsops.rename(leaf + os.sep + old, leaf + os.sep + name, allow=(errno.ENOENT,))
            except FileNotFoundError:
                pass  # not there after all: find what is
            else:
                self._move_status(seq, name, old)
                if sync:
                    _fsops.fsync_dir(leaf)
                return
        found = [old] if old is not None and os.path.exists(leaf + os.sep + old) else []
        if not found:
            found = self.current(seq, run_id)
        if name in found:
            found.remove(name)
        elif found:
            _fsops.rename(leaf + os.sep + found.pop(), leaf + os.sep + name)
        else:
            self._enter(None, seq, name)
        for extra in found:
            _fsops.unlink(leaf + os.sep + extra)
        self._move_status(seq, name, None)
        if sync:
            _fsops.fsync_dir(leaf)

    # -- verify ----------------------------------------------------------------------------

    def sweep_older_entries(self) -> int:
        """Remove the entries an older wf (format 3: ``<id>+<status>+<wf hash>+<parent>``,
        bucketed by id) wrote into ``index/`` after the store was upgraded (an old process
        still running), and the buckets they leave empty; returns how many. Each run's own
        entry is checked against its record apart (``reconcile``)."""
        removed = 0
        for top in _fsops.listdir(self.dir):
            outer = os.path.join(self.dir, top)
            if top.startswith(".") or not os.path.isdir(outer) or os.path.islink(outer):
                continue
            for sub in _fsops.listdir(outer):
                inner = os.path.join(outer, sub)
                if not os.path.isdir(inner) or os.path.islink(inner):
                    continue
                for name in _fsops.listdir(inner):
                    if parse(name) is None and _older_entry(name):
                        removed += _fsops.unlink(os.path.join(inner, name))
                if not is_bucket(top, sub):
                    with contextlib.suppress(OSError):
                        os.rmdir(inner)  # an older wf's bucket, empty now
            if not is_bucket(top, None):
                with contextlib.suppress(OSError):
                    os.rmdir(outer)
        if removed:
            _fsops.fsync_dir(self.dir)
        return removed

    def names_by_run(self, top: str | None = None) -> dict[str, list[str]]:
        """Every run's entry names under ``index/`` (or ``top``: a status's tree)."""
        found: dict[str, list[str]] = {}
        for name, entry in self._walk(top or self.dir, None, None, None):
            found.setdefault(entry[0], []).append(name)
        return found

    def agrees(self, seq: int, run_id: str, name: str) -> bool:
        """Whether ``name`` is the run's only entry in ``index/`` and in ``by-status/``."""
        if self.current(seq, run_id) != [name]:
            return False
        fields = name.split(SEP)
        for status in STATUSES:
            fields[2] = status
            if os.path.exists(self._status_path(seq, SEP.join(fields))) != (
                status == name.split(SEP)[2]
            ):
                return False
        return True

    def reconcile(self, seq: int, run_id: str, name: str, stale: Collection[str]) -> None:
        """Make ``name`` the run's only entry in ``index/`` and ``by-status/``: ``stale``
        (its other entries found, at any creation number) go."""
        for other in stale:
            if other == name:
                continue
            other_seq = int(other.split(SEP)[0])
            if other_seq != seq:
                _fsops.unlink(os.path.join(self.leaf(other_seq), other))
                self.forget_status(other_seq, other)
        self.set(seq, run_id, name)  # and by-status/ holds it under its status alone

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
        for _name, entry in self._walk_named(before, statuses, wf_hash):
            yield entry

    def walk_numbered(
        self,
        before: int | None = None,
        statuses: Collection[str] | None = None,
        wf_hash: str | None = None,
    ) -> Iterator[tuple[int, Entry]]:
        """``walk``'s entries, each with the creation number its name carries (a search
        continues only from an entry whose run is still at that number)."""
        for name, entry in self._walk_named(before, statuses, wf_hash):
            yield int(name.split(SEP, 1)[0]), entry

    def _walk_named(
        self, before: int | None, statuses: Collection[str] | None, wf_hash: str | None
    ) -> Iterator[tuple[str, Entry]]:
        """``walk``'s entries with their names, from the tree that answers fastest."""
        if statuses is not None and self.ready():
            return self._walk_names(before, statuses, wf_hash)
        if wf_hash is not None and self.ready():
            return self._walk_workflow(wf_hash, before)
        return self._walk(self.dir, before, statuses, wf_hash)

    def _walk_workflow(self, wf_hash: str, before: int | None) -> Iterator[tuple[str, Entry]]:
        """``by-workflow/<wf_hash>/``: its entries carry no status (``?``)."""
        for name, run_id in self._walk_short(os.path.join(self.by_workflow, wf_hash), before):
            yield name, (run_id, "?", wf_hash, "?")

    def _walk_short(self, top: str, before: int | None) -> Iterator[tuple[str, str]]:
        """``<seq>+<run_id>`` names under ``top`` (a workflow's or a tag's tree), newest first,
        with each name's run id."""
        limits = tree_bucket(top, before) if before is not None else None
        below = seq_field(before) if before is not None else None
        group = is_group_tree(top)
        for leaf in self._leaves(top, 0, limits, len(tree_bucket(top, 0))):
            listed = _fsops.listdir(leaf)
            names = [n for n in listed if SEP in n and (below is None or n < below)]
            names.sort(reverse=True)
            if not group:  # in a group's bucket, a name without ``+`` is a sub-bucket
                for name in [n for n in listed if SEP not in n and n[:1] != "."]:
                    stray = os.path.join(leaf, name)
                    damage(f"{stray}: not a wf index entry; skipped", stray)
            found: Iterator[str] = _short_entries(leaf, names)
            if group:
                # A split bucket (``SPLIT_BYTES``): its sub-buckets' names merged in, each
                # sub-bucket listed only when the walk reaches it.
                last = before is not None and os.path.basename(leaf) == bucket(before)[0]
                subs = self._sub_buckets(leaf, listed, bucket(before)[1] if last else None)
                if subs:
                    found = heapq.merge(found, self._sub_names(subs, below), reverse=True)
            for name in found:
                yield name, name.partition(SEP)[2]

    @staticmethod
    def _sub_buckets(leaf: str, listed: list[str], newest: str | None) -> list[str]:
        """The sub-buckets among a group bucket's names ``listed``, newest first, none after
        ``newest``. Told by their names (``b`` and three digits), not by a ``stat`` each: a
        split million-run bucket holds up to a thousand of them; anything else there that is
        not an entry is skipped (and said)."""
        subs = []
        for name in listed:
            if SEP in name or name.startswith("."):
                continue
            if not is_sub_bucket(name):
                stray = os.path.join(leaf, name)
                damage(f"{stray}: not a wf index directory; skipped", stray)
                continue
            if newest is None or name <= newest:
                subs.append(os.path.join(leaf, name))
        subs.sort(reverse=True)
        return subs

    @staticmethod
    def _sub_names(subs: list[str], below: str | None) -> Iterator[str]:
        """The entries of the sub-buckets ``subs`` (newest first), newest first."""
        for sub in subs:
            try:
                listed = _fsops.listdir(sub, allow=(errno.ENOENT, errno.ENOTDIR))
            except NotADirectoryError:
                damage(f"{sub}: not a wf index directory; skipped", sub)
                continue
            names = [n for n in listed if SEP in n and (below is None or n < below)]
            names.sort(reverse=True)
            yield from _short_entries(sub, names)

    def tagged(
        self,
        tags: Collection[Tag],
        before: int | None = None,
        statuses: Collection[str] | None = None,
        wf_hash: str | None = None,
        rare_statuses: bool = False,
    ) -> Iterator[str]:
        """Ids of runs listed under every tag in ``tags`` (and, when the indexes cover every
        run, of ``wf_hash``'s workflow), newest-created first: one index is walked, the others
        are asked by name. ``statuses`` are walked instead of the first tag when
        ``rare_statuses`` (the counts say few runs have them); otherwise the caller's record
        check applies them. Needs ``tags_ready``."""
        keys = [tag_key(*tag) for tag in tags]
        if rare_statuses and statuses is not None and self.ready():
            walked: Iterator[tuple[str, str]] = (
                (name, entry[0]) for name, entry in self._walk_names(before, statuses, wf_hash)
            )
            probes, wf_probe = keys, None
        else:
            walked = self._walk_short(os.path.join(self.by_tag, keys[0]), before)
            probes, wf_probe = keys[1:], wf_hash if self.ready() else None
        for name, run_id in walked:
            field = name.partition(SEP)[0]
            short = f"{field}{SEP}{run_id}"
            seq = int(field)
            seq_bucket = bucket(seq)
            if any(not self._tagged_as(key, seq, run_id) for key in probes):
                continue
            if wf_probe is not None and not os.path.exists(
                os.path.join(self.by_workflow, wf_probe, *seq_bucket, short)
            ):
                continue
            yield run_id

    def _walk_names(
        self, before: int | None, statuses: Collection[str], wf_hash: str | None
    ) -> Iterator[tuple[str, Entry]]:
        """``walk``'s status branch, with each entry's index name."""
        parts = [
            self._walk(os.path.join(self.by_status, s), before, None, wf_hash)
            for s in sorted(set(statuses))
            if s in STATUSES
        ]
        return heapq.merge(*parts, key=lambda found: found[0], reverse=True)

    def _walk(
        self,
        top: str,
        before: int | None,
        statuses: Collection[str] | None,
        wf_hash: str | None,
    ) -> Iterator[tuple[str, Entry]]:
        """Index names under ``top`` (``index/`` or a status's tree), newest first, with each
        name's entry."""
        needles = [f"{SEP}{s}{SEP}" for s in statuses] if statuses is not None else None
        wf_needle = f"{SEP}{wf_hash}{SEP}" if wf_hash is not None else None
        limits = bucket(before) if before is not None else None
        below = seq_field(before) if before is not None else None
        for leaf in self._leaves(top, 0, limits):
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
                    yield name, entry
                elif not name.startswith("."):
                    stray = os.path.join(leaf, name)
                    damage(f"{stray}: not a wf index entry; skipped", stray)

    def _leaves(
        self,
        path: str,
        level: int,
        limits: tuple[str, ...] | None,
        levels: int = BUCKET_LEVELS,
    ) -> Iterator[str]:
        """Bucket directories at the last level (``levels`` deep), newest first, skipping those
        above ``limits``."""
        if level == levels:
            yield path
            return
        try:
            listed = _fsops.listdir(path, allow=(errno.ENOENT, errno.ENOTDIR, errno.ELOOP))
        except OSError:
            # A file (or a link that leads nowhere) where a tree belongs (``by-status/<s>``,
            # ``by-tag/<key>``): its runs are not listed here, the rest are.
            damage(f"{path}: not a wf index directory; skipped", path)
            return
        for name in sorted(listed, reverse=True):
            if name.startswith("."):
                continue
            if not os.path.isdir(os.path.join(path, name)) or os.path.islink(
                os.path.join(path, name)
            ):
                # Not a bucket wf made (a stray file, a link): skip it, say so, and list the
                # rest rather than fail the whole listing.
                stray = os.path.join(path, name)
                damage(f"{stray}: not a wf index directory; skipped", stray)
                continue
            inner = limits
            if limits is not None:
                if name > limits[level]:
                    continue  # every run in here was created after ``before``
                if name < limits[level]:
                    inner = None  # every run in here was created before ``before``
            yield from self._leaves(os.path.join(path, name), level + 1, inner, levels)

    def seq_of(self, run_id: str) -> int | None:
        """The creation number the run's entry carries, or None: for a run whose record
        cannot be read. Reads every name down to the run's (a walk from the newest, as
        deep as the run is old), so it is for damaged runs only."""
        needle = f"{SEP}{run_id}{SEP}"
        for leaf in self._leaves(self.dir, 0, None):
            for name in _fsops.listdir(leaf):
                if needle in name and parse(name) is not None:
                    return int(name.partition(SEP)[0])
        return None

    def children_of(self, parent_id: str, before: int | None) -> list[str]:
        """Ids of the parent's child runs created before the ``before``-th, newest first."""
        below = seq_field(before) if before is not None else None
        names = _fsops.listdir(os.path.join(self.children, parent_id))
        names = [n for n in names if SEP in n and n[0] != "." and (below is None or n < below)]
        ids = (n.partition(SEP)[2] for n in sorted(names, reverse=True))
        return [run_id for run_id in ids if valid_id(run_id)]
