"""The store directory itself: where it is, its format version, and what it sits on."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import orjson

from wf._exceptions import StoreCorrupted, StoreError, StoreVersionError
from wf.store.local import _atomic, _fsops, _upgrade
from wf.store.local._counts import Counters
from wf.store.local._index import Index
from wf.store.local._layout import (
    FORMAT,
    FORMAT_FILE,
    LOCKS_JOURNAL,
    MIGRATE_LOCK,
    TOMBSTONES_DIR,
    TOP_DIRS,
    USERS_LOCK,
    keep_room,
)
from wf.store.local._migrate import ASIDE, number_runs
from wf.store.local._migrate6 import index_and_count
from wf.store.local._migrate7 import tag_index

MOUNTS = "/proc/mounts"
NETWORK_FS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "fuse.sshfs", "sshfs", "9p",
        "afs", "ceph", "glusterfs", "fuse.glusterfs", "lustre", "fuse.s3fs", "fuse.rclone",
        "davfs", "fuse.davfs2", "fuse.gcsfuse",
    }
)  # fmt: skip


def default_store_path() -> Path:
    """The store directory: ``$WF_DIR`` if set, else ``./.workflows``."""
    return Path(os.environ.get("WF_DIR") or ".workflows")


def check_format(root: str) -> int | None:
    """The store's format; refuse one written by a newer wf. None if the store does not exist
    yet.

    A path that is not a directory, and a store whose format file is gone while it holds runs,
    are errors: treating either as "no store yet" would list no runs, or start a new store over
    the old one's runs.
    """
    path = os.path.join(root, FORMAT_FILE)
    try:
        raw = _fsops.read_bytes(path, allow=(errno.ENOENT, errno.ENOTDIR))
    except NotADirectoryError:
        raise StoreError(
            f"{root} is not a directory, so it cannot be a wf store: point WF_DIR (or the "
            "project's store setting) at a directory"
        ) from None
    except FileNotFoundError:
        if os.path.lexists(root) and not os.path.isdir(root):
            raise StoreError(f"{root} is not a directory, so it cannot be a wf store") from None
        if _fsops.listdir(os.path.join(root, "runs"), allow=(errno.ENOENT, errno.ENOTDIR)):
            raise StoreCorrupted(
                f"{path} is missing, but {root} holds runs: the store is damaged. Restore the "
                f'file (its content is {{"format": {FORMAT}}}) rather than start a new store '
                "over these runs"
            ) from None
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise StoreCorrupted(f"{path}: not a wf store format file ({error})") from None
    version = data.get("format") if isinstance(data, dict) else None
    # Exactly what wf writes, a positive int: `true` read as 1 would "migrate" a store of any
    # format from the start, and a -1 or 9.5 is no format at all.
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise StoreCorrupted(
            f"{path}: not a wf store format file (its format must be a positive integer, "
            f"not {version!r})"
        )
    if version > FORMAT:
        raise StoreVersionError(
            f"{root} was written by a newer version of wf (store format {version}; this wf "
            f"reads format {FORMAT}): upgrade wf, or point WF_DIR at another directory"
        )
    return version


def _add_queue_dirs(root: str) -> None:
    """Format 3: the directories of group lanes, concurrency slots and rate limits."""
    for name in ("lanes", "slots", "rates"):
        _fsops.mkdir(os.path.join(root, name), allow=(errno.EEXIST,))


def _add_segment_dirs(root: str) -> None:
    """Format 7: the directories of packed runs (``_segments``)."""
    for name in ("segments", "packed"):
        _fsops.mkdir(os.path.join(root, name), allow=(errno.EEXIST,))


MIGRATIONS: dict[int, Callable[[str], None]] = {
    3: _add_queue_dirs,
    4: number_runs,
    6: index_and_count,
    7: tag_index,
    8: _add_segment_dirs,
}
"""Format number -> the step that upgrades a store of the format before it, in place. Each
step is idempotent (a crash mid-way repeats it); the format file is rewritten after the last."""


def migrate(root: str, version: int) -> None:
    """Upgrade a store written in ``version`` to ``FORMAT`` (every step in order).

    Under an exclusive ``flock`` on ``migrate.lock``: processes opening the store together
    upgrade it once (the others say that they wait, and find it upgraded when the lock is
    theirs). A format-1 store keeps its per-run ``lock`` files (``"lock_files": true``): a
    process that opened it before the upgrade still locks them. ``_upgrade`` says what an
    upgrade does while it runs, and how SIGTERM and Ctrl-C stop it."""
    runs = len(_fsops.listdir(os.path.join(root, "runs")))
    upgrade = _upgrade.Upgrade(root, version, FORMAT, runs)
    fd = _fsops.open_fd(os.path.join(root, MIGRATE_LOCK), os.O_RDWR | os.O_CREAT)
    try:
        with _upgrade.running(upgrade):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _upgrade.log.warning(
                    "waiting for another process to finish upgrading %s (from format %d to "
                    "%d; it says how far it got)", root, version, FORMAT,
                )  # fmt: skip
                upgrade.waiting = True
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                finally:
                    upgrade.waiting = False
            found = check_format(root)
            if found is not None and found < FORMAT:
                users = _exclusive_use(root, upgrade)
                upgrade.found = found
                _upgrade.log.warning(
                    "upgrading %s from format %d to %d (%s runs); other wf processes opening "
                    "it wait until it is done", root, found, FORMAT, f"{runs:,}",
                )  # fmt: skip
                try:
                    _migrate(root, found, upgrade)
                finally:
                    _fsops.close(users)
                keep_room(root)  # as a new store has it
                upgrade.finished()
    finally:
        _fsops.close(fd)  # drops the lock


_held: dict[str, list[int]] = {}
"""This process's shared hold on each store's ``users.lock`` (its descriptor, and how many
open ``LocalStore`` objects use it), by the store's real path."""
_held_lock = threading.Lock()


def hold_use(root: str) -> list[int]:
    """Hold a shared ``flock`` on the store's ``users.lock`` while a ``LocalStore`` of this
    process has it open (``release_use``): an upgrade by a newer wf then waits for this process
    (``migrate``). Taken while another process upgrades the store, it waits for that upgrade
    (and says so). Returns the hold, for ``release_use``."""
    key = os.path.realpath(root)
    with _held_lock:
        if key in _held:
            _held[key][1] += 1
            return _held[key]
        fd = _open_users(root)
        if fd is None:
            _held[key] = held = [-1, 1]  # a store this process cannot write: it changes nothing
            return held
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            _upgrade.log.warning(
                "waiting for another process to finish upgrading %s (it says how far it got)",
                root,
            )
            upgrade = _upgrade.Upgrade(root, 0, FORMAT, 0)
            try:
                with _upgrade.running(upgrade):
                    upgrade.waiting = True
                    fcntl.flock(fd, fcntl.LOCK_SH)
            except BaseException:
                _fsops.close(fd)
                raise
        _held[key] = held = [fd, 1]
        return held


def _open_users(root: str) -> int | None:
    """A descriptor on ``users.lock`` (a ``flock`` needs none writable), created if missing;
    None on a read-only store that has none."""
    path = os.path.join(root, USERS_LOCK)
    try:
        return _fsops.open_fd(path, os.O_RDWR | os.O_CREAT, allow=_READ_ONLY)
    except OSError:
        pass
    try:
        return _fsops.open_fd(path, os.O_RDONLY, allow=(*_READ_ONLY, errno.ENOENT))
    except OSError:
        return None


_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def release_use(root: str, held: list[int]) -> None:
    """One ``LocalStore`` of this process closed the store (``held``: what ``hold_use`` gave
    it): the last one lets the hold go (unless an upgrade by this process took it first)."""
    key = os.path.realpath(root)
    with _held_lock:
        held[1] -= 1
        if held[1] <= 0 and _held.get(key) is held:
            del _held[key]
            if held[0] >= 0:
                _fsops.close(held[0])


def _exclusive_use(root: str, upgrade: _upgrade.Upgrade) -> int:
    """An exclusive ``flock`` on ``users.lock`` (its descriptor): this process's own shared
    hold is let go first; while other processes hold theirs (they have the store open with an
    older wf), say so and wait for them to exit."""
    with _held_lock:
        own = _held.pop(os.path.realpath(root), None)
    if own is not None and own[0] >= 0:
        _fsops.close(own[0])  # the stores of this process that use it are of this wf
    fd = _fsops.open_fd(os.path.join(root, USERS_LOCK), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _upgrade.log.warning(
            "%s is in use by other processes of an older wf: its upgrade waits until they "
            "exit, as an older wf must not go on driving runs on the store it changes (stop "
            "them: wf workers, wf serve, programs that use wf)", root,
        )  # fmt: skip
        upgrade.waiting = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            _fsops.close(fd)
            raise
        finally:
            upgrade.waiting = False
    return fd


def _migrate(root: str, version: int, upgrade: _upgrade.Upgrade) -> None:
    for step in range(version + 1, FORMAT + 1):
        step_up = MIGRATIONS.get(step)
        if step_up is not None:
            upgrade.begin_step(step)
            step_up(root)
    data: dict[str, object] = {"format": FORMAT}
    if version < LOCKS_JOURNAL or keeps_lock_files(root):
        data["lock_files"] = True
    _atomic.replace(root, FORMAT_FILE, orjson.dumps(data) + b"\n")


ASIDE_NAMES = tuple(f"{name}-v3" for name in ASIDE)
"""What the upgrade to format 4 sets aside in ``tmp/`` (``_migrate``)."""


def drop_aside(root: str) -> None:
    """Remove what an upgrade set aside in ``tmp/`` (``_migrate.ASIDE``) on a daemon thread:
    the store is usable meanwhile, and removing tens of thousands of old index directories
    took as long as the upgrade itself. Called by every opening of the store
    (``LocalStore._sweep_staging``), so what a process's exit cut short goes with the next."""
    paths = [os.path.join(root, "tmp", name) for name in ASIDE_NAMES]
    paths = [path for path in paths if os.path.lexists(path)]
    if paths:
        cleanup = threading.Thread(target=_remove, args=(paths,), name="wf-upgrade-cleanup")
        cleanup.daemon = True
        cleanup.start()


def _remove(paths: list[str]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def keeps_lock_files(root: str) -> bool:
    """Whether the store was made in format 1 (its runs have ``lock`` files, see ``migrate``)."""
    try:
        data = orjson.loads(_fsops.read_bytes(os.path.join(root, FORMAT_FILE)))
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("lock_files") is True


OWN_NAMES = frozenset(
    {
        *TOP_DIRS,
        TOMBSTONES_DIR,  # the reserve is made before the format file
        FORMAT_FILE,
        MIGRATE_LOCK,
        USERS_LOCK,
        "counts",
        "by-status",
        "by-workflow",
        "by-tag",
    }
)
"""What a store being made holds before its format file (another process making it too, or
one that crashed doing so): all a new store may find in its directory."""


def initialize(root: str) -> None:
    """Create the store's directories and its format file (idempotent, race-safe).

    Refuses a directory that holds other things (``WF_DIR=/``, ``WF_DIR=~``): the store would
    be written among them. Hidden names and ``lost+found`` (a fresh volume's root) are no
    obstacle."""
    _refuse_foreign(root)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as error:  # /proc/1/nope, /sys/x, a parent that is a file: one line, exit 3
        _fsops.fail("make the store directory", root, error)
    for name in TOP_DIRS:
        _fsops.mkdir(os.path.join(root, name), allow=(errno.EEXIST,))
    # Room a first deletion on a full disk can give up (a run is deleted only once its
    # tombstone is written): made once, here, not looked for by every command.
    keep_room(root)
    # A new store's run counts start at zero and cover it from its start (``_counts``).
    Counters(root).mark_ready()
    Index(root).mark_ready()  # by-status/ and by-workflow/ cover a new store from its start
    Index(root).mark_tags_ready()  # and by-tag/
    # The format file is written last: its presence means the layout is complete. Two
    # processes initializing at once write the same bytes, so either rename may win.
    _atomic.replace(root, FORMAT_FILE, orjson.dumps({"format": FORMAT}) + b"\n")
    warn_if_network(root)


def _refuse_foreign(root: str) -> None:
    names = _fsops.listdir(root, allow=(errno.ENOENT,))
    foreign = sorted(
        name
        for name in names
        if name not in OWN_NAMES and not name.startswith(".") and name != "lost+found"
    )
    # Another process may have made the store meanwhile (the format file first, then runs'
    # names): its format file is there by the time those are.
    if foreign and not os.path.lexists(os.path.join(root, FORMAT_FILE)):
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise StoreError(
            f"{root} holds other files ({shown}) and no wf store ({FORMAT_FILE}): wf does not "
            "make its store among them; point WF_DIR (or the project's dir) at a new or "
            "empty directory"
        )


def filesystem_type(path: str, mounts: str = MOUNTS) -> str | None:
    """The type of the file system holding ``path`` (longest mount point prefix), if known."""
    real = os.path.realpath(path)
    best, kind = "", None
    try:
        with open(mounts, encoding="utf-8", errors="replace") as file:
            lines = file.readlines()
    except OSError:
        return None  # not Linux: nothing to check against
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def warn_if_network(root: str, mounts: str = MOUNTS) -> bool:
    """Warn when the store is on a network file system, where file locks are not reliable."""
    kind = filesystem_type(root, mounts)
    if kind is None or kind not in NETWORK_FS:
        return False
    warnings.warn(
        f"wf store {root} is on a network file system ({kind}): its file locks and fsync "
        "cannot be trusted, so two processes may drive one run at once. Put .workflows on a "
        "local disk (set WF_DIR), or use the PostgreSQL store.",
        RuntimeWarning,
        stacklevel=3,
    )
    return True
