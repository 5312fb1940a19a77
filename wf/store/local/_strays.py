"""Names in the store that wf never makes there, found by ``wf store verify`` (``_upkeep``).

Readers pass over a name they do not parse (a user's file, a fuzzer's, a copy gone wrong):
the store works on, but ``verify`` must not say ``store ok`` over it. Each such name is said
once, with what to do, and removed by no one (it may be someone's file). Checked here:

* the store's own top level: every name must be one the format defines (``KNOWN_DIRS``,
  ``KNOWN_FILES``), of its kind: a file where one of the store's directories belongs is
  named once, and nothing under it is looked at (``root``; verify checks the rest);
* ``runs/``, ``children/``, ``hooks/runs/``, ``index/`` and the ``by-*`` directories: names
  that are no run id, status, tag key or workflow hash;
* ``slots/``, ``rates/``, ``tombstones/``, ``counts/``, ``schedules/``, ``hooks/`` and
  ``segments/``: names that are no place of a concurrency cap, rate window, tombstone file,
  count, schedule, hook or segment file (files verify reads, it names when they do not read);
* ``hooks/runs/<run_id>/`` and ``hooks/delivered/``: names that are no hook marker or kept
  delivery (``<token hash>.json``, a file);
* ``tmp/``: names wf never makes there, or of another kind, once older than ``TEMP_AGE``
  (a younger one may be a write in flight; ``names`` and what wf stages are its own);
* every level of the index trees (``index/``, ``by-status/<status>/``,
  ``by-workflow/<hash>/``, ``by-tag/<key>/``) and ``children/<parent>/``: a bucket directory
  wf does not name so, a file where a bucket belongs, a name that is no entry, an entry that
  is not a file. What the listings skip is said by their own walk (``_layout.damage``) in the
  same words, so verify says it once.

Hidden names are temporary files (an atomic replace's) and are not named.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from wf._exceptions import RunNotFound, StoreError
from wf.store.local import _fsops, _index
from wf.store.local._counts import COUNTS_DIR
from wf.store.local._creations import LOG_FILE
from wf.store.local._layout import (
    BUCKET_LEVELS,
    FORMAT_FILE,
    HEX_DIGITS,
    MIGRATE_LOCK,
    SEP,
    SEQUENCE_FILE,
    STAGING_DIR,
    TEMP_AGE,
    TOMBSTONES_DIR,
    TOP_DIRS,
    USERS_LOCK,
    damage,
    staging_kind,
)
from wf.store.local._migrate import ASIDE
from wf.store.local._sequence import DAMAGED_SUFFIX

if TYPE_CHECKING:
    from wf.store.local._store import LocalStore

KNOWN_DIRS = frozenset(
    {
        *TOP_DIRS,
        TOMBSTONES_DIR,
        COUNTS_DIR,
        "by-status",
        "by-workflow",
        _index.TAG_DIR,
        "schedules",
    }
)
"""The directories the format puts at the store's top level (each made when first needed)."""


KNOWN_FILES = frozenset(
    {FORMAT_FILE, SEQUENCE_FILE, SEQUENCE_FILE + DAMAGED_SUFFIX, MIGRATE_LOCK, USERS_LOCK, LOG_FILE}
)
"""The files the format puts at the store's top level: the format file, the creation sequence
(and the last damaged one, kept aside when it was rebuilt: ``_sequence``), the locks of
upgrades and of the processes using the store, and the creation log
(``LocalStore(creation_log=True)``)."""


def root(store: LocalStore) -> tuple[list[str], set[str]]:
    """The store's top level: a line for each name the format does not define and for each
    of its names that is not of its kind; and the paths of its directories that are not
    directories (a file stands there): verify checks nothing under them, and says nothing
    more of them."""
    problems: list[str] = []
    broken: set[str] = set()
    for name in sorted(_fsops.listdir(store.root)):
        if name.startswith("."):
            continue
        path = os.path.join(store.root, name)
        if name in KNOWN_DIRS:
            if not os.path.isdir(path):
                broken.add(path)
                problems.append(
                    f"{path}: not a directory, where the store keeps its {name}/ (nothing "
                    "there can be read or checked: move it out of the store and put the "
                    "directory back)"
                )
        elif name in KNOWN_FILES:
            if not os.path.isfile(path):
                broken.add(path)
                problems.append(
                    f"{path}: not a file, where the store keeps its {name} (move it out of "
                    "the store)"
                )
        elif not (name == "lost+found" and os.path.isdir(path)):  # a volume's own
            problems.append(
                f"{path}: not a name the store's format defines (wf never reads it; move it "
                "out of the store)"
            )
    return problems, broken


def _hex(text: str, size: int) -> bool:
    return len(text) == size and set(text) <= HEX_DIGITS


def _a_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _a_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return True  # gone meanwhile


def _slot(name: str, path: str) -> bool:
    """``<cap hash>.<i>``, a file: a place of a concurrency cap (``_lanes.Slots``)."""
    cap, dot, place = name.partition(".")
    return bool(dot) and _hex(cap, 32) and place.isascii() and place.isdigit() and _a_file(path)


def rate_name(name: str) -> bool:
    """Whether ``name`` is one ``rates/`` holds: ``<limit hash>.json`` (a window, which
    verify reads) or ``.lock`` (``_lanes.Rates``)."""
    limit, dot, kind = name.partition(".")
    return bool(dot) and _hex(limit, 32) and kind in ("json", "lock")


def _rate(name: str, path: str) -> bool:
    return rate_name(name) and _a_file(path)


def _workflow_name(name: str, path: str) -> bool:
    """``<wf hash>`` (a tree: ``_trees`` looks at its kind) or ``<wf hash>.name``, a file."""
    if name.endswith(_index.NAME_SUFFIX):
        return _hex(name.removesuffix(_index.NAME_SUFFIX), 8) and _a_file(path)
    return _hex(name, 8)


def _tombstones(name: str, _path: str) -> bool:
    """``<the first 10 characters of run ids>.jsonl`` (read by verify, which names what does
    not read: ``_upkeep.Tombstones``)."""
    stem = name.removesuffix(".jsonl")
    return stem != name and 0 < len(stem) <= 10


def _count(name: str, path: str) -> bool:
    """``<status or tombstones>.in`` or ``.out``, or ``ready``: a file (``_counts``)."""
    stem, _dot, kind = name.partition(".")
    counted = stem in _index.STATUSES or stem == TOMBSTONES_DIR
    return (name == "ready" or (counted and kind in ("in", "out"))) and _a_file(path)


def _schedule(name: str, path: str) -> bool:
    """``<id hash>.json`` (read by verify, which names what does not read) or ``.lock``."""
    stem, _dot, kind = name.partition(".")
    return kind == "json" or (kind == "lock" and _hex(stem, 40) and _a_file(path))


def _hook(name: str, path: str) -> bool:
    """``<token hash>.json`` (read by verify), or the ``runs/`` and ``delivered/`` trees."""
    return name.endswith(".json") or (name in ("runs", "delivered") and _a_dir(path))


def _segment(name: str, path: str) -> bool:
    """``<n>.jsonl`` (read by verify), ``<n>.dead``, ``.end``, ``.damaged``, ``lock`` and
    ``scan.json``: files (``_segments``)."""
    stem, _dot, kind = name.partition(".")
    if stem.isascii() and stem.isdigit() and len(stem) >= 8:
        return kind == "jsonl" or (kind in ("dead", "end", "damaged") and _a_file(path))
    return name in ("lock", "scan.json") and _a_file(path)


def names(store: LocalStore, broken: set[str]) -> list[str]:
    """One line per name wf never makes in the directories of runs, indexes, slots and rate
    windows, and in the index trees (see the module), but under ``broken`` (``root``)."""
    index = store.index
    checks: list[tuple[str, Callable[[str, str], bool]]] = [
        # A regular file passes every reader by (``_verify_run`` checks what is not one).
        (store.runs, lambda name, path: _index.valid_id(name) and not os.path.isfile(path)),
        (index.children, lambda name, path: _index.valid_id(name) and _a_dir(path)),
        (
            os.path.join(store.hooks.dir, "runs"),
            lambda name, path: _index.valid_id(name) and _a_dir(path),
        ),
        # Anything but a directory is named by the index walk itself (``damage``).
        (index.dir, lambda name, path: _index.is_bucket(name, None) or not _a_dir(path)),
        (index.by_status, lambda name, _path: name in _index.STATUSES or name == "ready"),
        (
            index.by_tag,
            lambda name, _path: name == "ready" or (name[:1] in "qgd" and _hex(name[1:], 12)),
        ),
        (index.by_workflow, _workflow_name),
        (store.slots.dir, _slot),
        (store.rates.dir, _rate),
        (store.tombstones.dir, _tombstones),
        (store.counters.dir, _count),
        (store.schedules.dir, _schedule),
        (store.hooks.dir, _hook),
        (store.segments.dir, _segment),
    ]
    problems = []
    for folder, made in checks:
        if _inside(folder, broken):
            continue
        for name in sorted(_fsops.listdir(folder)):
            path = os.path.join(folder, name)
            if not name.startswith(".") and not made(name, path):
                problems.append(
                    f"{path}: not an entry wf makes in {os.path.basename(folder)}/ (readers skip "
                    "it; move it out of the store)"
                )
    for top, levels, entry, named_here in _trees(store, broken):
        _level(top, 0, levels, entry, _index.is_group_tree(top), problems, named_here=named_here)
    if not _inside(store.hooks.dir, broken):
        _hook_names(store.hooks.dir, problems)
    staging = os.path.join(store.root, STAGING_DIR)
    if not _inside(staging, broken):
        _staging_names(staging, time.time(), problems)
    return problems


def _marker(found: os.DirEntry[str]) -> bool:
    """``<token hash>.json``, a file: a hook marker (``hooks/runs/<run_id>/``) or a kept
    delivery (``hooks/delivered/``, whose content ``prune_deliveries`` reads)."""
    stem = found.name.removesuffix(".json")
    return stem != found.name and _hex(stem, 64) and found.is_file(follow_symlinks=False)


def _hook_names(hooks: str, problems: list[str]) -> None:
    """The names in ``hooks/runs/<run_id>/`` and ``hooks/delivered/`` that are no marker or
    delivery wf makes (one listing of each directory: their kinds come with it)."""
    marks = os.path.join(hooks, "runs")
    folders = [os.path.join(hooks, "delivered")]
    if _a_dir(marks):
        folders += [e.path for e in _listed(marks) if e.is_dir(follow_symlinks=False)]
    for folder in folders:
        if not _a_dir(folder):
            continue  # none, or a file: named with ``hooks/`` or ``hooks/runs/``
        where = os.path.relpath(folder, os.path.dirname(hooks))
        for found in _listed(folder):
            if not _marker(found):
                problems.append(
                    f"{found.path}: not an entry wf makes in {where}/ (readers skip it; move "
                    "it out of the store)"
                )


def _staging_names(staging: str, now: float, problems: list[str]) -> None:
    """The names in ``tmp/`` wf never makes there (or of another kind than it makes them),
    once older than ``TEMP_AGE``: a younger one may be a write in flight. What wf made is
    removed by the store's opening once as old (``LocalStore._sweep_staging``); these it
    leaves, as someone's."""
    for found in _listed(staging):
        name = found.name
        if name.endswith("-v3") and name[:-3] in ASIDE:
            continue  # an upgrade's (``_format.ASIDE_NAMES``), removed by every opening
        made = staging_kind(name)
        if made is not None and (
            found.is_dir(follow_symlinks=False) if made else found.is_file(follow_symlinks=False)
        ):
            continue
        try:
            changed = found.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue  # gone meanwhile
        if now - changed > TEMP_AGE:
            problems.append(
                f"{found.path}: not an entry wf makes in {STAGING_DIR}/ (wf never reads it; "
                "move it out of the store)"
            )


def _inside(path: str, broken: set[str]) -> bool:
    return any(path == top or path.startswith(top + os.sep) for top in broken)


def _index_entry(name: str) -> bool:
    entry = _index.parse(name)
    return entry is not None and _index.valid_id(entry[0])


def _child_entry(store: LocalStore) -> Callable[[str], bool]:
    """``<seq>+<run_id>``, or ``<run_id>`` of a run that exists, as format 3 named a child:
    an older wf still running after the upgrade writes it (listings pass it over). Any other
    name is a stray (a custom run id may be any word: ``a-file``)."""

    def made(name: str) -> bool:
        if _index.short_entry(name):
            return True
        if SEP in name or not _index.valid_id(name):
            return False
        try:
            store._find(name)
        except RunNotFound:
            return False
        except StoreError:
            return True  # the run's own damage: named with the runs
        return True

    return made


def _trees(
    store: LocalStore, broken: set[str]
) -> Iterator[tuple[str, int, Callable[[str], bool], bool]]:
    """Each index tree that verify walks below its top: its path, how many bucket levels
    it has, what an entry's name is, and whether the names right under it are to be
    checked here (``index/``'s are ``names``'s)."""
    index = store.index
    if not _inside(index.dir, broken):
        yield index.dir, BUCKET_LEVELS, _index_entry, False
    parents: list[tuple[str, Callable[[str], bool], int, Callable[[str], bool]]] = [
        (index.by_status, lambda name: name in _index.STATUSES, BUCKET_LEVELS, _index_entry),
        (
            index.by_workflow,
            lambda name: _hex(name, 8),
            BUCKET_LEVELS,
            _index.short_entry,
        ),
        (
            index.by_tag,
            lambda name: name[:1] in "qgd" and _hex(name[1:], 12),
            BUCKET_LEVELS,
            _index.short_entry,
        ),
        (index.children, _index.valid_id, 0, _child_entry(store)),
    ]
    for parent, named, levels, entry in parents:
        if _inside(parent, broken):
            continue
        for name in sorted(_fsops.listdir(parent)):
            top = os.path.join(parent, name)
            if name.startswith(".") or not named(name):
                continue  # named by ``names``
            if not _a_dir(top):
                if levels:  # a file where a tree belongs: in the words of the listings' walks
                    damage(f"{top}: not a wf index directory; skipped", top)
                continue  # ``children/<id>`` a file: named by ``names``
            yield top, 1 if _index.is_group_tree(top) else levels, entry, True


def _listed(path: str) -> list[os.DirEntry[str]]:
    """The entries of a directory of an index tree, by name, hidden names left out (their
    types come with the listing: no ``stat`` per entry, on a tree of a million runs)."""
    try:
        with os.scandir(path) as found:
            return sorted((e for e in found if not e.name.startswith(".")), key=lambda e: e.name)
    except FileNotFoundError:
        return []  # gone meanwhile
    except OSError as error:
        _fsops.fail("list", path, error)


def _level(
    path: str,
    level: int,
    levels: int,
    entry: Callable[[str], bool],
    group: bool,
    problems: list[str],
    *,
    named_here: bool = True,
) -> None:
    """The problems (into ``problems``) below ``path``, at ``level`` of a tree of ``levels``
    bucket levels (``_layout.bucket``) over entries named as ``entry`` says; ``group``: a
    group's tree, whose one bucket level may hold sub-buckets (``_index.SPLIT_BYTES``);
    ``named_here``: whether the names right in ``path`` are named here. A bucket wf does
    not name so is named, not walked: what it holds is part of that one item."""
    if level == levels:
        _leaf(path, entry, group, problems)
        return
    for found in _listed(path):
        name, inner = found.name, found.path
        if not found.is_dir(follow_symlinks=False):
            if named_here:  # the walks skip it, in these words
                damage(f"{inner}: not a wf index directory; skipped", inner)
            continue
        if not (_index.is_bucket(name, None) if level == 0 else _index.is_sub_bucket(name)):
            if named_here:
                problems.append(
                    f"{inner}: not a bucket directory wf makes in {os.path.basename(path)}/ "
                    "(what it holds may be listed; move it out of the store)"
                )
            continue
        _level(inner, level + 1, levels, entry, group, problems)


def _leaf(path: str, entry: Callable[[str], bool], group: bool, problems: list[str]) -> None:
    """The names of a bucket of entries (in a group's tree, its sub-buckets' too)."""
    for found in _listed(path):
        name, inner = found.name, found.path
        if group and SEP not in name:
            # A sub-bucket of a split bucket: the listing skips anything else, and says it.
            if not _index.is_sub_bucket(name) or not found.is_dir(follow_symlinks=False):
                damage(f"{inner}: not a wf index directory; skipped", inner)
            else:
                _leaf(inner, entry, False, problems)
            continue
        if not entry(name):
            damage(f"{inner}: not a wf index entry; skipped", inner)
        elif not found.is_file(follow_symlinks=False):
            problems.append(
                f"{inner}: not a file, so not an entry wf made (a run is listed by the name "
                "of an empty file; move it out of the store)"
            )
