"""Where everything lives under ``.workflows``, and how names encode what listings need.

::

    wf-store.json                       {"format": 8}
    runs/<run_id>/run.json              the record (replaced atomically; absent until the first
                                        save when the journal's first event gives it back)
    runs/<run_id>/journal.jsonl         the journal, one event per line; flock'ed by the driver
                                        (the lease)
    runs/<run_id>/lock                  format 1 only: flock'ed by the driver as well
    runs/<run_id>/input-<sha>.json      a large input/output value (blob), content-addressed
    runs/<run_id>/inbox/<msg_id>.json   unacknowledged messages (the first post makes inbox/)
    runs/<run_id>/s-<key>.{name,data,idx,closed}   byte streams (flat, so one watch sees them)
    runs/<run_id>/logs.jsonl            step logs: what steps printed or logged (not fsynced)
    queue/<due>[+d<pin hash>][+p<prio>][+q<queue hash>][+g<group hash>[+w<width>]][+s<seq>]+<run_id>
                                        one empty file per due time of a non-terminal run; the
                                        tags (format 3) carry a priority other than 0, a named
                                        queue and a group lane (its width if not 1), (format 4)
                                        the run's creation number and (format 5) the
                                        deployment a run is pinned to, so ordering, routing
                                        and lane heads read names only
    lanes/<group hash>/<seq>+<run_id>   format 3: unfinished runs of a group, in lane order
    lanes/<group hash>.seq              the lane's last sequence number (flock'ed to append)
    slots/<cap hash>.<i>                format 3: place i of a concurrency cap (flock'ed by
                                        whoever holds it; the kernel frees it when it dies)
    rates/<limit hash>.json             format 3: recent starts under a rate limit (flock'ed)
    index/<b1>/<b2>/<run_id>+<status>+<wf>+<parent>   listing index (empty files)
    children/<parent_id>/<run_id>       child runs of a parent (empty files)
    by-status/<status>/<b1>/<b2>/<index name>      format 6: the index by status
    by-workflow/<wf hash>/<b1>/<b2>/<seq>+<run_id> format 6: the index by workflow
    by-tag/<q|d><hash>/<b1>/<b2>/<seq>+<run_id>   format 7: by named queue, deployment
    by-tag/g<hash>/<b1>/<seq>+<run_id>             format 7: by group key (one level;
    by-tag/g<hash>/<b1>/<b2>/<seq>+<run_id>        format 9: its later runs once it is big)
    counts/                             format 6: run counts by status, kept as runs change
    hooks/<sha256(token)>.json          live hooks, created exclusively
    hooks/runs/<run_id>/<sha>.json      marker: that run claimed the hook of that name
    tmp/                                staging for run creation (renamed into runs/); and
                                        tmp/names, the empty file queue and index entries link to
    segments/<n>.jsonl                  format 8: packed runs, one line each, appended only
    segments/<n>.dead, lock, scan.json  their dead bytes, the packers' lock, a pass's memo
    segments/<n>.damaged                a damaged segment, never rewritten (why)
    packed/<run_id>                     format 8: a packed run's locator, a symbolic link whose
                                        target ``<n>.<offset>.<length>`` is read, never followed

A finished run whose directory holds only its record, journal and logs is *packed* once it has
ended a while: its files become one line of a segment file and its directory goes
(``_segments``, ``_compact``; about 1.1 KiB a small run instead of 8.8). A directory wins over a
locator; whatever writes to a packed run unpacks it first.

Every name built from caller data is either a validated run id, a hex digest, or a fixed word.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import os
import threading
from collections.abc import Iterator
from typing import Any

from wf._exceptions import StoreError, UsageError
from wf.store._base import RunRecord, RunStatus, lane_of
from wf.store._faults import Faults, collecting
from wf.store._ids import validate_run_id
from wf.store.local import _fsops

FORMAT = 9
"""The on-disk format this code writes (and the newest it reads).

Format 2 takes the lease as a ``flock`` on the journal itself; format 1 (the first development
versions) had a ``lock`` file per run for it, one more file to create per run. A format-1 store
is still read and written: its runs keep the lock file and a lease takes both locks, so a
process of either version excludes the other. A format-1 wf refuses a format-2 store.

Format 3 adds queue semantics: tags in queue entry names (priority, named queue), and the
``lanes``, ``slots`` and ``rates`` directories. Older stores are upgraded in place when first
opened (``_format.MIGRATIONS``); an older wf then refuses the store, since it would misread
tagged entries.

Format 4 orders by a store-wide creation sequence (``sequence``, the last number given):
queue entries carry the run's number (``+s<seq>``), index and children names start with it
and index buckets are slices of it, and a group lane is named by its queue and its group
(``lane_key``).

Format 5 adds the ``+d`` tag: the deployment a run is pinned to. Nothing on disk changes when a
format-4 store is opened (its runs are unpinned); the bump makes a format-4 wf refuse the store,
since it would drive pinned runs on any deployment's code.

Format 6 keeps run counts (``counts/``) and the status and workflow indexes (``by-status/``,
``by-workflow/``) as runs change; a format-5 wf would leave them behind, so it refuses the
store.

Format 7 keeps the tag index (``by-tag/``: runs by named queue, group and deployment, of every
status) as runs are created and re-pinned; a format-6 wf would leave it behind, so it refuses
the store.

Format 8 packs finished runs into segment files (``segments/``, ``packed/``: ``_segments``):
a format-7 wf would find no directory for a packed run and call it missing (and create its
id again), so it refuses the store. Opening a format-7 store makes the two directories;
nothing else changes (its runs are packed as they are found finished).

Format 9 splits a group's bucket (``by-tag/g<hash>/<b1>/``) once it is big: its later runs go
to thousand-run sub-buckets (``_index.SPLIT_BYTES``), so a big group's first page reads a
bounded directory. A format-8 wf would not read the sub-buckets (it would miss those runs in
the group's listings), so it refuses the store. Nothing on disk changes when a format-8 store
is opened."""

SEQUENCE_FILE = "sequence"
"""The store-wide creation sequence's last number, bumped under a ``flock`` on the file."""

MIGRATE_LOCK = "migrate.lock"
"""flock'ed while a process upgrades the store's format (``_format.migrate``)."""

USERS_LOCK = "users.lock"
"""Every process that has the store open holds a shared ``flock`` on it (``_format.hold_use``)
until it exits; an upgrade takes it exclusively, so it waits until no process of an older wf
(since this file exists) drives runs on the store it changes."""

LOCKS_JOURNAL = 2
"""The first format whose lease is a lock on the journal (no ``lock`` file)."""

FORMAT_FILE = "wf-store.json"
RUN_FILE = "run.json"
JOURNAL_FILE = "journal.jsonl"
LOCK_FILE = "lock"
INBOX_DIR = "inbox"
TOP_DIRS = (
    "runs",
    "queue",
    "index",
    "children",
    "hooks",
    "tmp",
    "lanes",
    "slots",
    "rates",
    "segments",
    "packed",
)

SEP = "+"
"""Separates the fields of queue and index names. Run ids never contain it, and it sorts below
every character an id may hold, so ``<id>+…`` names sort exactly like their ids (even when one
id is a prefix of another) and ``name < before`` is the same test as ``id < before``."""

NOW = "0" * 14
"""Due-time field of a run that is due at once (pending, running, or poked by a post)."""

BLOB_THRESHOLD = 64 * 1024
"""Encoded ``input``/``output`` values larger than this live in blob files."""


def digest(text: str, size: int = 64) -> str:
    """Hex sha256 of ``text``, truncated to ``size`` characters."""
    return hashlib.sha256(text.encode()).hexdigest()[:size]


# -- queue -----------------------------------------------------------------------------------


def due_field(at: float) -> str:
    """Fixed-width milliseconds, rounded up so that a run is never reported due early.

    14 digits reach into year 5138; a later time (up to 9999-12-31, the latest wf accepts)
    gets the largest field: an entry may be early, never late (see ``_queue``)."""
    ms = at * 1000
    if not ms < _LAST_DUE_MS:  # also an infinite or NaN time some older wf let through
        return f"{_LAST_DUE_MS:014d}"
    return f"{max(0, math.ceil(ms)):014d}"


_LAST_DUE_MS = 10**14 - 1


def queue_name(due: str, run_id: str) -> str:
    """``<due>+<run_id>``: names sort by due time, then by run id."""
    return f"{due}{SEP}{run_id}"


def parse_queue_name(name: str) -> tuple[str, str] | None:
    """``(due, run_id)``, or None for a name that is not a queue entry (temp files).

    ``due`` is the due field with the entry's tags, if any (``<due>+p5+q1a2b3c4d``): what
    ``queue_name`` takes back to rebuild the name."""
    due, sep, run_id = name.rpartition(SEP)
    if not sep or len(due) < 14 or not (due.isascii() and due[:14].isdigit()):
        return None
    return due, run_id


def entry_seq(due: str) -> int:
    """The creation number a due field's ``+s`` tag carries; 0 without one (a post's due-now
    mark: it sorts ahead of the runs of its priority due at the same time)."""
    at = due.rfind(SEP + "s", 14)
    if at < 0:
        return 0
    digits = due[at + 2 :].partition(SEP)[0]
    return int(digits) if digits.isascii() and digits.isdigit() else 0


def entry_tags(due: str) -> tuple[int, str | None, tuple[str, int] | None]:
    """The priority, named-queue hash and group lane (hash, width) a due field carries.

    Unknown tags are skipped, so a wf that knows fewer tags still reads the entry (the group
    tag came after format 3's first tags: its readers order and route such entries rightly,
    and leave lane heads to the driver's admission, as they did)."""
    priority, queue, group, width = 0, None, None, 1
    for tag in due[15:].split(SEP) if len(due) > 14 else ():
        first = tag[:1]
        if first == "p" and tag.isascii() and tag[1:].isdigit():
            priority = int(tag[1:])
        elif first == "q":
            queue = tag[1:]
        elif first == "g":
            group = tag[1:]
        elif first == "w" and tag.isascii() and tag[1:].isdigit():
            width = max(1, int(tag[1:]))
    return priority, queue, None if group is None else (group, width)


def queue_tag(
    priority: int,
    queue: str | None,
    lane: str | None = None,
    width: int = 1,
    seq: int = 0,
    deployment: str | None = None,
) -> str:
    """The tags a run's entries carry: ``+p<priority>`` unless 0, ``+q<hash>`` if named,
    ``+g<lane hash>`` in a group lane (``lane_of``; its directory in ``lanes/``), ``+w<width>``
    when more than one of the group may run at once, ``+s<seq>``, the run's creation
    number (format 4: every entry but a post's due-now mark has it, so an entry with tags
    names the run's lane and queue completely), and ``+d<hash>`` when the run is pinned to a
    deployment (format 5)."""
    tags = ""
    if deployment is not None:
        tags += f"{SEP}d{pin_hash(deployment)}"
    if priority:
        tags += f"{SEP}p{priority}"
    if queue is not None:
        tags += f"{SEP}q{digest(queue, 8)}"
    if lane is not None:
        tags += f"{SEP}g{lane_hash(lane)}"
        if width != 1:
            tags += f"{SEP}w{width}"
    if seq:
        tags += f"{SEP}s{seq}"
    return tags


def record_tag(record: RunRecord) -> str:
    """``queue_tag`` of a record."""
    lane = lane_of(record)
    width = lane_width(record.limits) if lane is not None else 1
    return queue_tag(record.priority, record.queue, lane, width, record.seq, record.deployment)


def pin_hash(deployment: str) -> str:
    """The hash a ``+d`` tag carries for a deployment id."""
    return digest(deployment, 12)


def entry_pin(due: str) -> str | None:
    """The deployment hash a due field's ``+d`` tag carries (None: unpinned, or untagged)."""
    if len(due) > 14:
        for tag in due[15:].split(SEP):
            if tag[:1] == "d":
                return tag[1:]
    return None


def lane_width(limits: dict[str, Any] | None) -> int:
    """How many runs of a group may run at once, by a run's ``limits``."""
    return int((limits or {}).get("group_concurrency", 1))


@functools.lru_cache(maxsize=4096)
def lane_hash(lane: str) -> str:
    """The name of a group lane's directory in ``lanes/`` (``lane``: ``lane_of``). Remembered
    for the last lanes asked: a grouped run's entries and its lane's directory ask twice a
    run, and a drain's runs share a few lanes."""
    return digest(lane, 32)


def record_due(status: RunStatus, wake_at: float | None, tag: str = "") -> str | None:
    """The due field a record implies: now, its wake time, or None (not queued); followed by
    the run's tags (``queue_tag``)."""
    if status.is_terminal:
        return None
    if status is RunStatus.SUSPENDED:
        return None if wake_at is None else due_field(wake_at) + tag
    if status is RunStatus.PENDING and wake_at is not None:
        return due_field(wake_at) + tag  # a delayed start, or a retry's backoff
    return NOW + tag


# -- index -----------------------------------------------------------------------------------


BUCKET_LEVELS = 2

SEQ_WIDTH = 16
"""Digits of a creation number in index and children names (fixed, so names sort by it)."""


def seq_field(seq: int) -> str:
    """A creation number as index and children names carry it."""
    return f"{seq:0{SEQ_WIDTH}d}"


@functools.lru_cache(maxsize=4096)  # a run's entries ask for it on every status change
def bucket(seq: int) -> tuple[str, str]:
    """Two directory levels from fixed slices of the creation number, so that runs sort like
    their buckets: the first level holds a million runs, the second a thousand. A
    fixed-position slice of a string compares like the string, so walking buckets in reverse
    name order visits runs newest-created first: the newest page reads one or two small
    directories. The ``b`` prefix keeps the second level apart from the first."""
    field = seq_field(seq)
    return field[:10], "b" + field[10:13]


def index_name(
    seq: int, run_id: str, status: RunStatus, workflow: str, parent_id: str | None
) -> str:
    """``<seq>+<run_id>+<status>+<wf hash>+<parent hash or ->``: filters read names, not
    files, and names sort by creation.

    Hashes are 8 hex digits: a collision only adds a candidate, which the record then rejects.
    """
    parent = "-" if parent_id is None else digest(parent_id, 8)
    return SEP.join((seq_field(seq), run_id, status.value, _name_hash(workflow), parent))


def index_status(name: str) -> str:
    """The status field of an index name made by ``index_name``."""
    return name.split(SEP)[2]


def child_name(seq: int, run_id: str) -> str:
    """``<seq>+<run_id>``: a child run's entry under its parent, in creation order."""
    return f"{seq_field(seq)}{SEP}{run_id}"


@functools.lru_cache(maxsize=1024)
def _name_hash(workflow: str) -> str:
    """``digest(workflow, 8)``, remembered: a process names a few workflows many times (every
    index entry and lease computes it)."""
    return digest(workflow, 8)


# -- messages, blobs, streams -----------------------------------------------------------------


def blob_name(field: str, data: bytes) -> str:
    """Content-addressed, so a record never points at a blob that a later save rewrote."""
    return f"{field}-{hashlib.sha256(data).hexdigest()[:32]}.json"


def stream_key(stream: str) -> str:
    """File-name-safe key of an arbitrary stream name."""
    return "s-" + digest(stream, 32)


def hook_file(token: str) -> str:
    """The hook's file name: the token's sha256, so any string is a safe token."""
    return digest(token) + ".json"


def run_exists(run_dir: str) -> bool:
    """Whether the directory holds a run: a journal, and content in it or in the record.

    Creation publishes a run before the flush that makes it durable (the flush is shared with
    other runs' appends), so a power cut can leave a directory whose files never got their
    data (names reach the disk before data). That run was never reported created: it does not
    exist, and creating its id again replaces the leftover.

    A directory that cannot be looked into (``EACCES``, ``EIO``) raises the ``StoreError``
    naming it (``StoreCorrupted`` when only that run's directory shuts us out): see
    ``run_present`` for scans.
    """
    try:
        try:
            if os.stat(os.path.join(run_dir, JOURNAL_FILE)).st_size > 0:
                return True
        except FileNotFoundError:
            pass  # a record without its journal (deleted since) is a run, damaged
        return os.stat(os.path.join(run_dir, RUN_FILE)).st_size > 0
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        _fsops.fail("read", run_dir, error)


def run_present(run_dir: str) -> bool:
    """``run_exists`` for a scan of many runs: a directory that cannot be looked into holds
    a run (a damaged one, which reading it names), not nothing."""
    try:
        return run_exists(run_dir)
    except StoreError:
        return True


def temp_name(base: str) -> str:
    """A unique hidden name for a temporary file next to ``base``."""
    return f".{base}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


STAGING_DIR = "tmp"
"""Where creations, deletions, packing and unpacking stage a run's directory (``tmp/``)."""


def staging_kind(name: str) -> bool | None:
    """What wf makes under ``name`` in ``tmp/``: True, a directory (a run being created,
    ``<run_id>.<pid>.<hex>``; deleted, packed or unpacked, ``deleted.``, ``packed.``,
    ``unpack.<run_id>.<hex>``; a leftover moved out of ``runs/``, ``leftover.<pid>.<hex>``);
    False, a file (``names`` and a full one set aside, ``names.full.<hex>``); None, a name wf
    never makes there (an upgrade's ``<name>-v3`` aside: see ``_format.ASIDE_NAMES``)."""
    if name == "names":
        return False
    head, dot, rand = name.rpartition(".")
    if not dot or len(rand) != 8 or not set(rand) <= HEX_DIGITS:
        return None
    if head == "names.full":
        return False
    kind, _dot, rest = head.partition(".")
    if kind in ("deleted", "packed", "unpack") and valid_id(rest):
        return True
    if kind == "leftover" and rest.isascii() and rest.isdigit():
        return True
    # Else a creation's: an explicit id may itself begin ``deleted.`` (``deleted.-x``).
    run_id, dot, pid = head.rpartition(".")
    return True if dot and pid.isascii() and pid.isdigit() and valid_id(run_id) else None


HEX_DIGITS = frozenset("0123456789abcdef")
"""The digits of the store's hexadecimal names (digests, random suffixes)."""


def valid_id(run_id: str) -> bool:
    """Whether a name read from the store (an index entry, a staging name) is a run id (it
    becomes a path)."""
    try:
        validate_run_id(run_id)
    except UsageError:
        return False
    return True


def no_staging(root: str) -> StoreError | None:
    """The error naming ``tmp/`` if something other than a directory stands there (a file,
    a link to nowhere), else None. Asked before a deletion or a packing writes anything (its
    tombstone, its segment line), and when a creation's first step there fails: what cannot
    be staged is not begun, and the one line names ``tmp``, not a run. A ``StoreError``, not
    ``StoreCorrupted``: no run is damaged, and a run whose drive creates a child is left due
    (its driver stops, as on any failure of the store) rather than failed by it."""
    path = os.path.join(root, STAGING_DIR)
    if os.path.isdir(path) or not os.path.lexists(path):
        return None  # a missing tmp/ fails the first write there, naming it
    return StoreError(
        f"{path}: not a directory, where the store keeps its {STAGING_DIR}/ (runs can be "
        "neither created, deleted nor packed: move it out of the store and put the directory "
        "back)"
    )


TEMP_AGE = 3600.0
"""Seconds after which a temporary file is a leftover of a crash (a write takes a flush or two):
the staging of creations in ``tmp/``, a post's message cut short in ``inbox/``."""


def stale_temps(directory: str, now: float) -> list[str]:
    """Paths of the temporary files (``temp_name``) in ``directory`` last written more than
    ``TEMP_AGE`` seconds before ``now``: a crash's leftovers, which nothing else removes."""
    out = []
    for name in _fsops.listdir(directory):
        if name.startswith(".") and name.endswith(".tmp"):
            path = os.path.join(directory, name)
            try:
                if now - os.lstat(path).st_mtime > TEMP_AGE:
                    out.append(path)
            except FileNotFoundError:
                continue  # renamed or removed meanwhile: in use
            except OSError as error:
                _fsops.fail("read", path, error)
    return out


log = logging.getLogger("wf.store")


_gathering = threading.local()


def damage(message: str, where: str | None = None, kind: str = "index entry") -> None:
    """Report one damaged entry that a listing skips: the rest of the store still works, and
    the damage is said (on the ``wf.store`` logger: stderr unless logging is configured), not
    hidden. Inside ``gather_damage`` it is kept for its caller instead; an entry whose path
    is ``where``, met inside ``collect_faults`` (``wf runs``, ``wf gc``: their answer names
    and counts what they left out, from a store and over ``WF_URL`` alike), is noted there as
    a fault of that ``kind``, named by its file name."""
    gathered: tuple[list[str], set[str]] | None = getattr(_gathering, "found", None)
    if gathered is not None:
        found, seen = gathered
        if message not in seen:  # the same walk runs more than once in a verify
            seen.add(message)
            found.append(message)
    elif where is not None and collecting():
        Faults().note(kind, os.path.basename(where), where, message)
    else:
        log.warning("warning: %s", message)


@contextlib.contextmanager
def gather_damage() -> Iterator[list[str]]:
    """What ``damage`` reports in this thread meanwhile: verify names it among its problems
    (a warning on stderr would leave its exit status 0)."""
    outer = getattr(_gathering, "found", None)
    found: list[str] = []
    _gathering.found = (found, set())  # the set: a walk may say thousands (stray names)
    try:
        yield found
    finally:
        _gathering.found = outer


TOMBSTONES_DIR = "tombstones"
RESERVE_FILE = ".reserve"
RESERVE = 64 * 1024
"""Bytes ``tombstones/.reserve`` keeps allocated: given up when a deletion's tombstones meet a
full disk, so that a first batch of runs can be deleted (a run is never deleted before its
tombstone is durable), and made again once a deletion finds room."""


def keep_room(root: str) -> None:
    """Make ``tombstones/.reserve`` (``RESERVE``) if it is missing and there is room (else
    nothing): when the store is made, and after a deletion or packing pass."""
    tombstones = os.path.join(root, TOMBSTONES_DIR)
    path = os.path.join(tombstones, RESERVE_FILE)
    if os.path.exists(path) or not hasattr(os, "posix_fallocate"):
        return
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(tombstones)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RESERVE)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)  # no room for it now: the next deletion tries again
    finally:
        os.close(fd)
