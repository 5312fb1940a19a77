"""Crash-safe file publication: a reader (or a restart) sees the old file or the new one.

The order is the classic one, and every step is needed:

1. write the bytes to a temporary file in the same directory (rename is atomic only within a
   file system, and a hidden ``.tmp`` name is never read as data);
2. ``fsync`` the temporary file, so its data is on disk *before* its name can be (otherwise a
   crash can leave the new name pointing at an empty file);
3. ``rename`` it over the target (or ``link`` it, to publish only if the name is free);
4. ``fsync`` the directory, so the new name itself survives a crash.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from time import monotonic

from wf._exceptions import StoreError
from wf.store.local import _fsops
from wf.store.local._layout import temp_name

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def write_temp(directory: str, base: str, data: bytes) -> str:
    """Steps 1-2: a durable temporary file holding ``data``; returns its path."""
    path = os.path.join(directory, temp_name(base))
    fd = _fsops.open_fd(path, _CREATE, 0o644)
    try:
        _fsops.write_all(fd, data, path)
        _fsops.fsync(fd, path)
    except BaseException:
        _fsops.close(fd)
        _fsops.unlink(path)
        raise
    _fsops.close(fd)
    return path


def replace(directory: str, name: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Atomically replace ``directory/name`` with ``data``.

    ``sync_dir=False`` leaves step 4 to the caller, who syncs the directory once for several
    files. On failure the previous file is untouched and the temporary file is removed.
    """
    temp = write_temp(directory, name, data)
    try:
        _fsops.rename(temp, os.path.join(directory, name))
    except BaseException:
        _fsops.unlink(temp)
        raise
    if sync_dir:
        _fsops.fsync_dir(directory)


def replace_cache(directory: str, name: str, data: bytes) -> None:
    """Atomically replace a file that is a *cache* of durable data (steps 1 and 3 only).

    Readers see the old bytes or the new ones, never a mix; after a power cut the file may be
    old, empty or missing, and its owner must rebuild it from the durable source. Used for a
    run's record, which the journal determines: the two fsyncs of ``replace`` cost several
    times a journal append, three times per run.
    """
    path = os.path.join(directory, temp_name(name))
    fd = _fsops.open_fd(path, _CREATE, 0o644)
    try:
        _preallocate(fd, len(data))
        _fsops.write_all(fd, data, path)
    except BaseException:
        _fsops.close(fd)
        _fsops.unlink(path)
        raise
    _fsops.close(fd)
    try:
        _fsops.rename(path, os.path.join(directory, name))
    except BaseException:
        _fsops.unlink(path)
        raise


def _preallocate(fd: int, size: int) -> None:
    """Give the file its blocks before the write, as a speed-up only (errors are ignored).

    Renaming over an existing file makes ext4 (``auto_da_alloc``) start writing the new
    file's delayed-allocation data at once, which doubles the cost of the rename (about 100
    instead of 45 µs measured here, once per record save). Blocks allocated up front leave
    nothing delayed to write.
    """
    if size and _HAVE_FALLOCATE:
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, size)


_HAVE_FALLOCATE = hasattr(os, "posix_fallocate")


def publish(directory: str, name: str, data: bytes) -> bool:
    """Create ``directory/name`` holding ``data`` only if the name is free; False if taken.

    ``link`` publishes a complete, durable file under the name atomically and fails with
    ``EEXIST`` if the name exists, so of two processes racing for a name exactly one wins and
    nobody ever sees a half-written file (unlike ``O_EXCL`` followed by a write).
    """
    temp = write_temp(directory, name, data)
    try:
        _fsops.link(temp, os.path.join(directory, name), allow=(errno.EEXIST,))
    except FileExistsError:
        return False
    finally:
        _fsops.unlink(temp)
    _fsops.fsync_dir(directory)
    return True


def touch(directory: str, name: str) -> bool:
    """Create an empty file if absent (no data, so no file fsync); True if it was created.

    The caller syncs the directory.
    """
    path = os.path.join(directory, name)
    try:
        fd = _fsops.open_fd(path, _CREATE, 0o644, allow=(errno.EEXIST,))
    except FileExistsError:
        return False
    _fsops.close(fd)
    return True


class EmptyNames:
    """Empty files whose *name* is all they hold (queue and index entries), made as hard links
    to one shared empty file of the store: a directory entry without a new inode.

    Allocating an inode is the costly part of creating a file here (60 µs against 10 µs for a
    link, measured in a directory taking 1,000 new names; several times more on a busy disk).
    Every process links to the same file, ``tmp/names``, made when missing. When it is full
    (``EMLINK``: 65,000 links on ext4) it is renamed aside (``tmp/names.full.<random>``, swept
    with other leftovers) and a new one made; where the file system has no hard links, plain
    empty files are made instead. So they are while a stray directory or FIFO stands at
    ``tmp/names``, or a file at ``tmp`` (or there is no ``tmp/``): damage, which is repaired
    while the process runs, so the shared file is tried again ``PLAIN_FOR`` seconds later.
    Entries share the inode's times: a link refreshes its ``ctime``, so ``ctime`` is never
    older than an entry's own creation.
    """

    def __init__(self, root: str) -> None:
        self._dir = os.path.join(root, "tmp")
        self._marker = os.path.join(self._dir, "names")
        self._ready = False
        """The shared file is known to exist (this process made or opened it)."""
        self._links = True
        """The file system has hard links (false for good once it refused one)."""
        self._plain_until = 0.0
        """``monotonic()`` time until which entries are plain files: the shared file could
        not be made or linked through damage of ``tmp/`` (0: none met)."""

    def touch(self, directory: str, name: str) -> bool:
        """Create the entry if absent; True if it was created (the caller syncs the directory)."""
        path = f"{directory}{os.sep}{name}"  # an entry's name: never absolute, never empty
        for _ in range(3):
            if not (self._ready or self._make_marker()):
                break
            try:
                _fsops.link(self._marker, path, allow=_LINK_ERRORS)
            except FileExistsError:
                return False
            except OSError as error:
                self._ready = False
                if error.errno == errno.EMLINK:
                    with contextlib.suppress(OSError):  # another process may have done it
                        os.rename(self._marker, f"{self._marker}.full.{os.urandom(4).hex()}")
                elif error.errno == errno.ENOTDIR:
                    # A file where tmp/ belongs (put there since the shared file was made),
                    # or where the entry's directory does: the plain file below then names
                    # that one, not tmp/names.
                    if not os.path.isdir(self._dir):
                        self._plain_for_now()
                    break
                elif error.errno != errno.ENOENT:  # EPERM, EXDEV, ENOTSUP
                    if _stray(self._marker) or not os.path.isdir(self._dir):
                        self._plain_for_now()  # a directory put at tmp/names: damage
                    else:
                        self._links = False  # no hard links here
                continue
            return True
        return touch(directory, name)

    def _plain_for_now(self) -> None:
        """Make plain files for ``PLAIN_FOR`` seconds: ``tmp/`` is damaged (verify names
        it), and an entry needs no ``tmp/``, so runs are driven and their names written as
        ever. Then the shared file is tried again: the damage may be repaired by then."""
        self._plain_until = monotonic() + PLAIN_FOR

    def _make_marker(self) -> bool:
        if not self._links:
            return False
        if self._plain_until:
            # Only while tmp/ was damaged: a clock read an entry, no look at tmp/.
            if monotonic() < self._plain_until:
                return False
            self._plain_until = 0.0
        try:
            fd = _fsops.open_fd(
                self._marker, os.O_WRONLY | os.O_CREAT, 0o644, allow=(errno.ENOENT, errno.ENOTDIR)
            )
        except (FileNotFoundError, NotADirectoryError):
            self._plain_for_now()  # no tmp/, or a file where it belongs
            return False
        except StoreError:
            if not _stray(self._marker):
                raise
            self._plain_for_now()  # a stray directory or FIFO by its name
            return False
        _fsops.close(fd)
        _fsops.fsync_dir(self._dir)
        self._ready = True
        return True


def _stray(path: str) -> bool:
    """Whether something other than a regular file stands at ``path``."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


_LINK_ERRORS = (
    errno.EEXIST,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EMLINK,
    errno.EPERM,
    errno.EXDEV,
    errno.ENOTSUP,
)

PLAIN_FOR = 5.0
"""Seconds ``EmptyNames`` makes plain files once it found ``tmp/`` damaged, before it tries the
shared file again (an ``open`` of ``tmp/names``, and a clock read an entry meanwhile)."""


def replace_empty(directory: str, name: str) -> None:
    """Put a *new* empty file under ``name`` (replacing any): always a visible change.

    Posts use it on the queue entry, so a watcher sees an event even when the entry existed.
    The caller syncs the directory.
    """
    temp = os.path.join(directory, temp_name(name))
    fd = _fsops.open_fd(temp, _CREATE, 0o644)
    _fsops.close(fd)
    try:
        _fsops.rename(temp, os.path.join(directory, name))
    except BaseException:
        _fsops.unlink(temp)
        raise
