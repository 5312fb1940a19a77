"""Every system call the local store makes that can fail, in one place.

Two reasons for the seam. Errors: an ``OSError`` becomes a ``StoreError`` naming the operation,
the file and the OS error (``ENOSPC``, ``EIO``, ``EROFS``), except the errnos a caller lists in
``allow``, which it handles itself (``ENOENT`` when a file may be gone, ``EEXIST`` when a name is
taken). Faults: the reliability suite arms ``inject`` to make a chosen operation on a chosen file
fail, exactly as the kernel would report it.

Nothing here retries, falls back or degrades: a failed write is an error, never a silent
non-atomic or unlocked second attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import os
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import NoReturn

from wf._exceptions import StoreCorrupted, StoreError
from wf.store.local import _pressure

_NO_ALLOW: frozenset[int] = frozenset()


@dataclasses.dataclass
class _Fault:
    op: str
    match: str
    errno: int
    times: int | None
    after: int = 0
    passed: int = 0
    hits: int = 0


_faults: list[_Fault] = []


@contextlib.contextmanager
def inject(
    op: str, err: int, *, match: str = "", times: int | None = None, after: int = 0
) -> Iterator[_Fault]:
    """Make operation ``op`` fail with ``err`` on paths containing ``match`` (for tests).

    ``op`` is one of ``open write fsync fdatasync syncfs rename link unlink mkdir truncate
    read``, or ``*`` for every one of them but ``read`` (every call that changes the store: with
    ``after``, a crash at that point); ``after`` lets that many matching calls through first;
    ``times`` limits how many calls fail (default: all until the block exits). Yields the fault,
    whose ``hits`` counts the calls it failed and ``passed`` those it let through.
    """
    fault = _Fault(op, match, err, times, after)
    _faults.append(fault)
    try:
        yield fault
    finally:
        _faults.remove(fault)


def _check(op: str, path: str) -> None:
    # The common case is an empty list: one truthiness test on the hot path.
    if not _faults:
        return
    for fault in _faults:
        if (fault.op == op or (fault.op == "*" and op != "read")) and fault.match in path:
            if fault.times is not None and fault.hits >= fault.times:
                continue
            if fault.passed < fault.after:
                fault.passed += 1
                continue
            fault.hits += 1
            raise OSError(fault.errno, os.strerror(fault.errno), path)


def _fail(op: str, path: str, error: OSError, allow: Collection[int]) -> NoReturn:
    if error.errno in allow:
        raise error
    if error.errno == errno.EISDIR:
        raise StoreCorrupted(f"{path} is a directory where a file belongs: remove it") from error
    if error.errno == errno.ENOTDIR:  # a stray file where the path needs a directory
        message = f"cannot {op} {path}: a file stands where a directory belongs"
        raise StoreCorrupted(message) from error
    if error.errno == errno.ELOOP:  # a stray symbolic link that leads back to itself
        raise StoreCorrupted(f"cannot {op} {path}: a symbolic link loop") from error
    name = errno.errorcode.get(error.errno or 0, "error")
    message = f"cannot {op} {path}: [{name}] {error.strerror}"
    if _refused_by_itself(op, path, error):
        raise StoreCorrupted(message) from error
    raise StoreError(message) from error


def fail(op: str, path: str, error: OSError) -> NoReturn:
    """Raise ``error``, met doing ``op`` on ``path``, as the ``StoreError`` saying so."""
    _fail(op, path, error, _NO_ALLOW)


def _refused_by_itself(op: str, path: str, error: OSError) -> bool:
    """Whether an existing file refused to be read (its own permissions) in a directory that
    lets us in: damage of the item that file belongs to, which is skipped like any other,
    not a failure of the store as a whole (a directory that shuts us out is one)."""
    return (
        op == "read"
        and error.errno in (errno.EACCES, errno.EPERM)
        and os.access(os.path.dirname(path), os.X_OK)
    )


# -- files ---------------------------------------------------------------------------------


def open_fd(path: str, flags: int, mode: int = 0o644, *, allow: Collection[int] = _NO_ALLOW) -> int:
    """``os.open`` (always close-on-exec, so children never inherit a lease).

    An open for reading only counts as a ``read`` (for errors and injected faults).
    """
    fd = _open(path, flags, mode, allow)
    if flags & _NEW == _NEW:
        return fd  # made by this call: a regular file (``O_EXCL`` refuses whatever was there)
    return _only_files(fd, path)


def open_stat(
    path: str, flags: int, *, allow: Collection[int] = _NO_ALLOW
) -> tuple[int, os.stat_result]:
    """``open_fd`` of an existing file, and the ``fstat`` that found it a regular file or a
    directory (a reader needing the file's length asks no second time)."""
    fd = _open(path, flags, 0o644, allow)
    info = os.fstat(fd)
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        os.close(fd)
        raise _no_file(path, info.st_mode)
    return fd, info


def _open(path: str, flags: int, mode: int, allow: Collection[int]) -> int:
    op = "open" if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) else "read"
    try:
        _check(op, path)
        # Never through a symbolic link: a link planted in the store must not make wf write
        # (or read a journal) outside it.
        return os.open(path, flags | _NEVER_WAIT, mode)
    except OSError as error:
        if error.errno == errno.ELOOP and os.path.islink(path):
            raise linked(path) from error
        _fail(op, path, error, allow)


_NEW = os.O_CREAT | os.O_EXCL

_NEVER_WAIT = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
"""Every open: close-on-exec, never through a link, and never waiting (a FIFO planted where a
file belongs would block an open for reading until a writer came; on files it changes
nothing)."""


def open_locked(
    path: str, flags: int, *, allow: Collection[int] = _NO_ALLOW
) -> tuple[int, os.stat_result] | None:
    """``open_fd``, then an exclusive ``flock`` without waiting: the descriptor and its
    ``fstat``, taken with the lock held; None, with nothing left open, if another holder has
    the lock. The lock is tried before the file is looked at, so an attempt on a file another
    process holds (a claim's, on a run another worker drives) costs an ``open``, the refused
    ``flock`` and a ``close``; a file that is no regular file is refused (``_only_files``)
    once locked, before anything is read from or written to it."""
    fd = try_lock(path, flags, allow=allow)
    if fd is None:
        return None
    return fd, locked_info(fd, path)


def try_lock(path: str, flags: int, *, allow: Collection[int] = _NO_ALLOW) -> int | None:
    """``open_locked``'s ``open`` and ``flock``: the descriptor, locked and not looked at yet
    (``locked_info`` looks), or None, with nothing left open, if another holder has the
    lock."""
    try:
        _check("open", path)
        fd = os.open(path, flags | _NEVER_WAIT, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP and os.path.islink(path):
            raise linked(path) from error
        _fail("open", path, error, allow)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        close(fd)
        return None
    except OSError as error:
        close(fd)
        fail("lock", path, OSError(error.errno, error.strerror, path))
    return fd


def locked_info(fd: int, path: str) -> os.stat_result:
    """The ``fstat`` of a descriptor ``try_lock`` locked; a file that is no regular file (nor
    a directory) is refused, the descriptor closed, as is one that cannot be looked at."""
    try:
        info = os.fstat(fd)
    except OSError as error:
        close(fd)
        fail("read", path, error)
    mode = info.st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        close(fd)
        raise _no_file(path, mode)
    return info


def _only_files(fd: int, path: str) -> int:
    """``fd``, if it is a regular file or a directory; else it is closed and the path is
    reported as damage: a FIFO, device or socket in the store is no file wf wrote, and reading
    one could wait for ever or never end."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return fd
    os.close(fd)
    raise _no_file(path, mode)


def _no_file(path: str, mode: int) -> StoreCorrupted:
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return StoreCorrupted(f"{path} is {kind}, not a file wf wrote: replace or remove it")


def check_present(path: str) -> None:
    """Raise ``StoreCorrupted`` if the file at ``path``, which must be there, is gone or is no
    regular file (a FIFO, a socket, a device, a directory): one ``lstat``, nothing read."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise StoreCorrupted(f"{path} is missing (deleted?)") from None
    except OSError as error:
        fail("read", path, error)
    if stat.S_ISDIR(mode):
        raise StoreCorrupted(f"{path} is a directory where a file belongs: remove it")
    if not stat.S_ISREG(mode):
        raise _no_file(path, mode)


def linked(path: str) -> StoreCorrupted:
    """The error for a symbolic link found inside the store: damage of the item it stands in
    for (a run, a schedule), which is skipped like any other."""
    return StoreCorrupted(
        f"{path} is a symbolic link: wf refuses links inside its store (one could make it "
        "write outside the store); replace it with the real file or directory"
    )


def refuse_link(path: str) -> None:
    """Raise ``StoreCorrupted`` if ``path`` is a symbolic link (a run directory, an inbox)."""
    if os.path.islink(path):
        raise linked(path)


def unlinked_info(path: str) -> os.stat_result | None:
    """``refuse_link`` that gives the ``lstat`` it took (None if ``path`` cannot be looked at,
    which ``refuse_link`` lets pass too)."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISLNK(info.st_mode):
        raise linked(path)
    return info


def counts_subdirectories(path: str) -> bool:
    """Whether the file system of the directory ``path`` counts a directory's subdirectories
    in its link count (two plus one each: ext4, XFS, tmpfs), so that a count of two says a
    directory has none. Btrfs and an overlay's merged directories say one whatever they hold;
    a count that does not match ``path``'s own subdirectories (or a change meanwhile) says
    no."""
    try:
        with os.scandir(path) as entries:
            subdirectories = sum(1 for entry in entries if entry.is_dir(follow_symlinks=False))
        return subdirectories > 0 and os.lstat(path).st_nlink == 2 + subdirectories
    except OSError:
        return False


def _no_follow(path: str, flags: int) -> int:
    return _only_files(os.open(path, flags | _NEVER_WAIT), path)


def write_all(fd: int, data: bytes, path: str, offset: int | None = None) -> None:
    """Write every byte of ``data`` (``os.write`` may write less on a full disk); at
    ``offset`` (``os.pwrite``) if given, else at the descriptor's position."""
    view = memoryview(data)
    try:
        while view:
            _check("write", path)
            if offset is None:
                written = os.write(fd, view)
            else:
                written = os.pwrite(fd, view, offset)
                offset += written
            if written == 0:  # pragma: no cover - the kernel reports ENOSPC instead
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            view = view[written:]
    except OSError as error:
        _fail("write", path, error, _NO_ALLOW)


def fsync(fd: int, path: str) -> None:
    """``fsync``: data and metadata (used for directories and new files).

    Inside ``deferred_fsyncs()`` the call is deferred to the caller's single ``barrier``.
    """
    owed = getattr(_deferred, "owed", None)
    if owed is not None:
        owed.append(path)
        return
    try:
        _check("fsync", path)
        started = time.perf_counter()
        os.fsync(fd)
        _pressure.note_file_flush(time.perf_counter() - started)
    except OSError as error:
        _fail("fsync", path, error, _NO_ALLOW)


def fdatasync(fd: int, path: str) -> None:
    """``fdatasync``: data plus the metadata needed to read it back (the file size)."""
    try:
        _check("fdatasync", path)
        started = time.perf_counter()
        os.fdatasync(fd)
        _pressure.note_file_flush(time.perf_counter() - started)
    except OSError as error:
        _fail("fdatasync", path, error, _NO_ALLOW)


def fsync_path(path: str, flags: int = os.O_RDONLY) -> None:
    """``fsync`` a file or directory by name (opened with ``flags``): what ``deferred_fsyncs``
    owed, paid file by file (``Committer``), where a ``syncfs`` would cost more."""
    fd = open_fd(path, flags)
    try:
        fsync(fd, path)
    finally:
        close(fd)


def truncate(fd: int, size: int, path: str) -> None:
    """``ftruncate``."""
    try:
        _check("truncate", path)
        os.ftruncate(fd, size)
    except OSError as error:
        _fail("truncate", path, error, _NO_ALLOW)


def close(fd: int) -> None:
    """Close, ignoring errors: every write that matters was already checked by an fsync."""
    # Not ``contextlib.suppress``: three calls fewer, on every lock attempt another refused.
    try:  # noqa: SIM105
        os.close(fd)
    except OSError:
        pass


def read_bytes(path: str, *, allow: Collection[int] = _NO_ALLOW) -> bytes:
    """The whole file."""
    try:
        _check("read", path)
        # Opened before the file object is made: a missing file (most runs' ``run.json``)
        # fails in 4 µs rather than the 10 ``open`` takes to fail through an opener.
        fd = _no_follow(path, os.O_RDONLY)
        try:
            file = open(fd, "rb")  # noqa: SIM115 (closed by the ``with`` below)
        except BaseException:
            os.close(fd)  # a directory: ``open`` refuses a descriptor it never closes then
            raise
        with file:
            return file.read()
    except OSError as error:
        if error.errno == errno.ELOOP and os.path.islink(path):
            raise linked(path) from error
        _fail("read", path, error, allow)


def pread(fd: int, size: int, offset: int, path: str) -> bytes:
    """``os.pread``."""
    try:
        _check("read", path)
        return os.pread(fd, size, offset)
    except OSError as error:
        _fail("read", path, error, _NO_ALLOW)


# -- names ---------------------------------------------------------------------------------


def rename(src: str, dst: str, *, allow: Collection[int] = _NO_ALLOW) -> None:
    """Atomic ``rename`` (replaces ``dst``)."""
    try:
        _check("rename", dst)
        os.rename(src, dst)
    except OSError as error:
        _fail("rename", dst, error, allow)
    _owed_moved(src, dst)


def link(src: str, dst: str, *, allow: Collection[int] = _NO_ALLOW) -> None:
    """Atomic exclusive publish: fails with ``EEXIST`` if ``dst`` exists."""
    try:
        _check("link", dst)
        os.link(src, dst)
    except OSError as error:
        _fail("link", dst, error, allow)
    # The temporary name is unlinked next: the owed inode keeps ``dst``. A link's source is a
    # file (directories cannot be linked), so nothing owed is inside it.
    _owed_moved(src, dst, file=True)


def unlink(path: str, *, allow: Collection[int] = (errno.ENOENT,)) -> bool:
    """Remove a file; False if it was already gone."""
    try:
        _check("unlink", path)
        os.unlink(path)
    except FileNotFoundError as error:
        if errno.ENOENT in allow:
            return False
        _fail("unlink", path, error, _NO_ALLOW)
    except OSError as error:
        _fail("unlink", path, error, allow)
    return True


def mkdir(path: str, *, allow: Collection[int] = _NO_ALLOW) -> bool:
    """Create a directory; False if it existed and ``EEXIST`` is allowed."""
    try:
        _check("mkdir", path)
        os.mkdir(path)
    except FileExistsError as error:
        if errno.EEXIST in allow:
            return False
        _fail("mkdir", path, error, _NO_ALLOW)
    except OSError as error:
        _fail("mkdir", path, error, allow)
    return True


def listdir(path: str, *, allow: Collection[int] = (errno.ENOENT,)) -> list[str]:
    """Names in a directory; empty if it does not exist (by default)."""
    try:
        return os.listdir(path)
    except FileNotFoundError as error:
        if errno.ENOENT in allow:
            return []
        _fail("list", path, error, _NO_ALLOW)
    except OSError as error:
        _fail("list", path, error, allow)


def stat_size(path: str) -> int:
    """The size of a file or directory in bytes (0 if it does not exist)."""
    try:
        _check("stat", path)
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
    except OSError as error:
        _fail("stat", path, error, _NO_ALLOW)


def file_size(path: str) -> int:
    """The size of the regular file at ``path`` in bytes (0 if it does not exist), from one
    ``lstat``; ``StoreCorrupted`` when something else stands there (a directory, a link, a
    FIFO): no file wf wrote, which no open of wf would read."""
    try:
        _check("stat", path)
        found = os.lstat(path)
    except FileNotFoundError:
        return 0
    except OSError as error:
        _fail("stat", path, error, _NO_ALLOW)
    mode = found.st_mode
    if stat.S_ISREG(mode):
        return found.st_size
    if stat.S_ISDIR(mode):
        raise StoreCorrupted(f"{path} is a directory where a file belongs: remove it")
    if stat.S_ISLNK(mode):
        raise linked(path)
    raise _no_file(path, mode)


def fsync_dir(path: str) -> None:
    """Make the directory's entries (created, renamed, removed names) durable."""
    owed = getattr(_deferred, "owed", None)
    if owed is not None:
        owed.append(path)
        return
    fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


# -- syncfs --------------------------------------------------------------------------------


def _load_syncfs() -> Callable[[int], int] | None:
    # ``os`` has no syncfs; glibc and musl do (Linux only). The C library is looked up in the
    # process itself first: ``find_library`` runs ``ldconfig -p`` in a subprocess (about 2 ms
    # of every process that imports the local store), and is only asked when Python is not
    # linked against a C library that has syncfs.
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        from ctypes.util import find_library

        try:
            libc = ctypes.CDLL(find_library("c") or None, use_errno=True)
            function = libc.syncfs
        except (OSError, AttributeError):
            return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_syncfs = _load_syncfs()
HAVE_SYNCFS = _syncfs is not None and os.environ.get("WF_SYNCFS", "1") != "0"
"""Whether group commit may use syncfs (``WF_SYNCFS=0``: never, one fsync per file and
directory). Even with it, each flush asks ``_pressure.whole_flush_ok`` which way costs less:
while another program writes to the file system, a syncfs would wait for its data too."""


_deferred = threading.local()
"""``owed``: paths whose fsync the enclosing ``deferred_fsyncs()`` of this thread deferred
(an ``_Owed``)."""


class _Owed(list[str]):
    """The paths a ``deferred_fsyncs()`` block owes an fsync, each once, indexed so that a
    rename or link (``moved``) finds what it renames in constant time: a scan of the whole list
    on every rename made a block of n files cost n² (a store upgrade, tens of thousands of
    files, took minutes)."""

    def __init__(self) -> None:
        super().__init__()
        self._at: dict[str, list[int]] = {}
        """Each owed path -> its places in the list (more than one after a rename onto a path
        owed already)."""
        self._above: set[str] | None = None
        """Every directory an owed path is (or, once made, was) inside: a rename of any other
        name moves nothing owed under it. Made at the block's first rename (``moved`` without
        ``file``): a creation renames nothing inside its block and only links files, so it
        never walks up its paths' directories."""

    def append(self, path: str) -> None:
        """Owe ``path`` (once: a second fsync of it before the flush adds nothing)."""
        if path in self._at:
            return
        self._at[path] = [len(self)]
        super().append(path)
        if self._above is not None:
            self._note_above(self._above, path)

    @staticmethod
    def _note_above(above: set[str], path: str) -> None:
        # ``os.path.dirname`` up the tree, as slices (a block's first path walks up to ``/``).
        end = path.rfind(os.sep)
        while end > 0:
            parent = path[:end].rstrip(os.sep) or os.sep
            if parent in above:
                return
            above.add(parent)
            end = parent.rfind(os.sep)
        if end == 0 and path != os.sep:
            above.add(os.sep)

    def moved(self, src: str, dst: str, *, file: bool = False) -> None:
        """What is owed under ``src`` (or inside it) is owed under ``dst`` now. ``file``: ``src``
        is a file (a hard link's source), so nothing owed is inside it."""
        places = self._at.pop(src, None)
        if places is not None:
            for i in places:
                self[i] = dst
            self._at.setdefault(dst, []).extend(places)
            if self._above is not None:
                self._note_above(self._above, dst)
        if file:
            return
        if self._above is None:
            self._above = set()
            for path in self:
                self._note_above(self._above, path)
        if src not in self._above:
            return
        # A directory with owed paths inside was renamed (a run staged in ``tmp/``): rare,
        # so one pass over the list, and the index made again.
        inside = src + os.sep
        for i, path in enumerate(self):
            if path.startswith(inside):
                self[i] = dst + path[len(src) :]
        self._at.clear()
        for i, path in enumerate(self):
            self._at.setdefault(path, []).append(i)
            self._note_above(self._above, path)


def _owed_moved(src: str, dst: str, *, file: bool = False) -> None:
    """An fsync deferred under ``src`` (or a path inside it) is owed under ``dst`` now: a flush
    that goes file by file opens what it owes by name, and the old name is gone (or about to
    be), while the new one is what must survive. ``file``: ``src`` is a file."""
    owed = getattr(_deferred, "owed", None)
    if owed:
        owed.moved(src, dst, file=file)


@contextlib.contextmanager
def deferred_fsyncs() -> Iterator[list[str]]:
    """Collect the fsyncs made inside the block instead of making them; yields their paths.

    The caller must then make all of it durable before it publishes anything written inside:
    ``barrier`` (one ``syncfs``, exactly as if each fsync had been made, for the price of one
    flush: run creation made six), or ``Committer.sync_file_system`` given the owed paths, which
    makes one flush of a batch either a ``syncfs`` or an ``fsync`` of each path, whichever costs
    less at the time. Without syncfs the fsyncs are made one by one, as usual, and nothing is
    owed. Not re-entrant; per thread.
    """
    owed = _Owed()
    if not HAVE_SYNCFS or getattr(_deferred, "owed", None) is not None:
        yield owed
        return
    _deferred.owed = owed
    try:
        yield owed
    finally:
        _deferred.owed = None


class FileSystem:
    """One file system as this process flushes it whole (``syncfs``).

    ``syncfs`` reports a writeback error once per open file: the open file's cursor moves past
    the error when one call reports it, and a later call through the same file says nothing of
    it, although the pages it lost may hold what that later call was asked to make durable.
    So every ``syncfs`` of the process goes through this one open file per file system, opened
    before anything the process writes there is flushed (``mark``, called before the writes,
    opens it), and the failures reported through it are counted: a flush covers writes made
    after its caller's ``mark``, and fails, even when its own ``syncfs`` succeeds, if a failure
    was reported since then. Through any other open file, one opened later or shared with
    another process, a failure some other caller had seen would pass unnoticed.
    """

    def __init__(self, path: str, failures: int = 0) -> None:
        self.fd = open_fd(path, os.O_RDONLY)  # any file will do: syncfs flushes its system
        self.failures = failures
        """How many ``syncfs`` calls of the process (and of the parent it was forked from)
        have failed on this file system (each was reported once)."""
        self._lock = threading.Lock()
        """Held from a ``syncfs`` to its count: two made at once could each cover the other's
        writes, and the one that succeeds must see the other's failure."""

    def sync(self, path: str, since: int) -> None:
        """One ``syncfs``: everything written on the file system since the caller's ``mark``
        (``since``) is durable when it returns. ``path`` names the flush in errors."""
        with self._lock:
            try:
                syncfs(self.fd, path)
            except StoreError:
                self.failures += 1
                raise
            failed = self.failures - since
        if failed > 0:
            raise StoreError(
                f"cannot make {path} durable: {failed} flush(es) of its file system failed "
                "since it was written (a writeback error; what was written may be lost)"
            )


_file_systems: dict[int, FileSystem] = {}
"""This process's ``FileSystem`` of each device (opened once, never closed: a few at most)."""
_file_systems_lock = threading.Lock()
_failures_before_fork: dict[int, int] = {}
"""In a forked child, the parent's count of each device: a mark the child inherited (a store's,
a lease's) stays comparable with the child's own count, which goes on from there."""


def file_system(path: str, device: int) -> FileSystem:
    """The ``FileSystem`` of ``device`` (``path``, a directory on it, opens it the first time)."""
    found = _file_systems.get(device)
    if found is None:
        with _file_systems_lock:
            found = _file_systems.get(device)
            if found is None:
                found = FileSystem(path, _failures_before_fork.get(device, 0))
                _file_systems[device] = found
    return found


def mark(path: str, device: int) -> int:
    """What a later whole flush of ``device`` (``sync_whole``) must be given to cover the
    writes made after this call: call it before writing (``path``: a directory on it)."""
    return file_system(path, device).failures


def sync_whole(path: str, device: int, since: int) -> None:
    """One ``syncfs`` of ``device``, through its ``FileSystem``: every write made after the
    ``mark`` that returned ``since`` is durable, or this raises (``path`` is on it)."""
    file_system(path, device).sync(path, since)


def barrier(root: str, since: int) -> None:
    """``sync_whole`` of the file system holding the directory ``root`` (pays the fsyncs a
    block deferred; ``since``: ``mark(root, ...)`` taken before the block)."""
    sync_whole(root, os.stat(root).st_dev, since)


def _forget_file_systems() -> None:
    # A forked child opens its own: sharing the parent's open files would share their cursors
    # (a failure one process saw, the other would not), and a lock a parent's thread held.
    for device, inherited in _file_systems.items():
        _failures_before_fork[device] = inherited.failures
        with contextlib.suppress(OSError):
            os.close(inherited.fd)
    _file_systems.clear()
    global _file_systems_lock
    _file_systems_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_file_systems)


def syncfs(fd: int, path: str) -> None:
    """Flush the whole file system holding ``fd`` (one call instead of one fsync per file).

    Since Linux 5.8 syncfs reports writeback errors of the file system, so its result is
    checked like any fsync.
    """
    if _syncfs is None:  # pragma: no cover - callers check HAVE_SYNCFS
        raise StoreError(f"cannot syncfs {path}: not available on this platform")
    try:
        _check("syncfs", path)
        started = time.perf_counter()
        failed = _syncfs(fd) != 0
        _pressure.note_whole_flush(time.perf_counter() - started)
        if failed:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
    except OSError as error:
        _fail("syncfs", path, error, _NO_ALLOW)


def disk_usage(path: str) -> int:
    """Bytes a directory tree occupies on disk (allocated blocks, not apparent sizes)."""
    total = 0
    for directory, _dirs, files in os.walk(path):
        with contextlib.suppress(OSError):
            total += os.lstat(directory).st_blocks * 512
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total
