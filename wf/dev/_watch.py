"""Watching the project's Python files (watchfiles, imported on first use).

Two details matter more than they look:

* **What is watched.** A recursive watch of the project directory would also watch the store
  (``.workflows`` holds a directory per run: one inotify watch each, or one more directory to
  walk per poll) and virtualenvs. So each root is watched *non-recursively* (its own ``.py``
  files, including editors' save-by-rename) and each of its sub-directories that is not a
  store, a virtualenv or a cache is watched recursively.
* **Events or polling.** Native events (inotify, FSEvents, ...) do not arrive for changes made
  on the other side of a network or container mount (NFS, SMB, 9p, VirtualBox and Docker
  Desktop shares): there the watcher polls. Polling is chosen by ``--poll``, ``poll = true``
  in the configuration, ``WF_DEV_POLL=1``, or automatically when a root is on such a file
  system (read from ``/proc/mounts``). Polling is done here, not by watchfiles'
  ``force_polling``: its poller compares modification times in whole seconds, so a second
  save within the same second that keeps the file's size (``v1`` -> ``v2``, a formatter
  rewriting on save) goes unseen. This one compares nanosecond mtimes, sizes and inodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

from wf.store.local import _format as _store_format
from wf.store.local._notify import RESTART_CALM, restart_pause

log = logging.getLogger("wf.dev")

MOUNTS = _store_format.MOUNTS

# File systems where changes made elsewhere (the host, another machine) raise no local events.
NO_EVENTS_FS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "9p", "vboxsf", "prl_fs",
        "vmhgfs", "fuse.vmhgfs-fuse", "fuse.sshfs", "sshfs", "fuse.osxfs", "fuse.grpcfuse",
        "fakeowner", "drvfs", "afs", "ceph", "glusterfs", "fuse.glusterfs", "davfs",
    }
)  # fmt: skip

IGNORED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".nox",
     ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", ".idea", ".vscode",
     ".workflows", "site-packages", "build", "dist"}
)  # fmt: skip

DEBOUNCE_MS = 1600
"""Longest a burst of changes is gathered before it is handed over."""
STEP_MS = 50
"""Quiet time that ends a burst: a save (often several events) becomes one change."""
POLL_DELAY_MS = 250
"""Between two looks at the files when polling."""
POLL_AFTER = 3
"""Failures in a row of a notifier that heard nothing (a directory whose name is not UTF-8
fails a recursive one at its first look, each time it is started) after which its group of
directories is polled instead, for the rest of the session."""


class ChangeKind(enum.StrEnum):
    """What happened to a file."""

    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"


@dataclasses.dataclass(frozen=True)
class Change:
    """One changed Python file."""

    kind: ChangeKind
    path: Path


@dataclasses.dataclass(frozen=True)
class PollingChoice:
    """Whether to poll, and why (shown at start)."""

    polling: bool
    reason: str


def env_flag(name: str) -> bool:
    """True when the environment variable is set to something other than empty/0/false/no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def filesystem_type(path: Path, mounts: str = MOUNTS) -> str | None:
    """The type of the file system holding ``path`` (longest mount point prefix), if known."""
    return _store_format.filesystem_type(str(path), mounts)


def choose_polling(
    roots: Sequence[Path], *, requested: bool, mounts: str = MOUNTS
) -> PollingChoice:
    """Decide between native events and polling for ``roots``."""
    if requested:
        return PollingChoice(True, "polling requested")
    if env_flag("WF_DEV_POLL"):
        return PollingChoice(True, "polling requested by WF_DEV_POLL")
    for root in roots:
        kind = filesystem_type(root, mounts)
        if kind in NO_EVENTS_FS:
            return PollingChoice(True, f"{root} is on {kind}, where file events do not arrive")
    return PollingChoice(False, "file-system events")


def is_ignored_dir(path: Path, extra: Iterable[Path] = ()) -> bool:
    """Directories never watched: stores, virtualenvs, VCS and tool caches."""
    if path.name in IGNORED_DIRS or (path / "pyvenv.cfg").exists():
        return True
    resolved = path.resolve()
    return any(resolved == e for e in extra)


def watch_plan(roots: Sequence[Path], ignore: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """``(watched non-recursively, watched recursively)`` for the given roots."""
    flat: list[Path] = []
    deep: list[Path] = []
    ignored = [p.resolve() for p in ignore]
    for root in roots:
        root = root.resolve()
        if root.is_file():
            flat.append(root.parent)  # the directory, so a save by rename is seen too
            continue
        if not root.is_dir():
            continue
        flat.append(root)
        with contextlib.suppress(OSError):
            for entry in sorted(root.iterdir()):
                if entry.is_dir() and not is_ignored_dir(entry, ignored):
                    deep.append(entry)
    return _unique(flat), _unique(deep)


def _unique(paths: list[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))


class Watcher:
    """Yields batches of changed ``.py`` files under ``roots`` until ``stop`` is set."""

    def __init__(
        self,
        roots: Sequence[Path],
        *,
        polling: bool,
        ignore: Sequence[Path] = (),
        debounce_ms: int = DEBOUNCE_MS,
        step_ms: int = STEP_MS,
        poll_delay_ms: int = POLL_DELAY_MS,
    ) -> None:
        self.roots = [Path(r) for r in roots]
        self.polling = polling
        self.ignore = [Path(p).resolve() for p in ignore]
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.poll_delay_ms = poll_delay_ms
        self.flat, self.deep = watch_plan(self.roots, self.ignore)
        self._queue: asyncio.Queue[tuple[float, list[Change]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, stop: asyncio.Event) -> None:
        """Start watching; once this returns, changes are seen (the watches are in place)."""
        if self.polling:
            first = await asyncio.to_thread(self._snapshot)
            self._tasks.append(asyncio.create_task(self._poll(first, stop)))
            return
        groups = [(self.flat, False), (self.deep, True)]
        for paths, recursive in groups:
            if paths:
                self._tasks.append(asyncio.create_task(self._pump(paths, recursive, stop)))
        # Each pump creates its watcher synchronously before its first await: one loop turn
        # puts every watch in place, so a change made after ``start`` returns is not missed.
        for _ in range(2):
            await asyncio.sleep(0)

    async def batches(self, stop: asyncio.Event) -> AsyncIterator[tuple[float, list[Change]]]:
        """``(monotonic time seen, changes)`` for each burst; bursts that queued up while the
        caller was busy are merged into one."""
        while not stop.is_set():
            getter = asyncio.ensure_future(self._queue.get())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
                if not getter.done():
                    getter.cancel()
            if not getter.done() or getter.cancelled():
                return
            seen, changes = getter.result()
            while not self._queue.empty():
                _, more = self._queue.get_nowait()
                changes.extend(more)
            yield seen, _merge(changes)

    async def close(self) -> None:
        """Stop the watcher threads (the stop event must be set first)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _pump(self, paths: list[Path], recursive: bool, stop: asyncio.Event) -> None:
        import watchfiles

        watch_filter = watchfiles.PythonFilter(ignore_paths=[str(p) for p in self.ignore])
        options: dict[str, Any] = {
            "watch_filter": watch_filter,
            "debounce": self.debounce_ms,
            "step": self.step_ms,
            "stop_event": stop,
            "force_polling": False,
            "recursive": recursive,
            "ignore_permission_denied": True,
        }
        failures = 0
        deaf = 0  # failures in a row of a notifier that heard nothing
        while not stop.is_set():
            started = time.monotonic()
            heard = False
            try:
                async for raw in watchfiles.awatch(*paths, **options):
                    heard = True
                    changes = [
                        Change(_KINDS[int(kind)], Path(path))
                        for kind, path in raw
                        if recursive or Path(path).parent in paths
                    ]
                    if changes:
                        self._queue.put_nowait((time.monotonic(), changes))
                return
            except Exception as error:  # a name not in UTF-8 fails the notifier for good
                cause = failure_cause(error)
                if time.monotonic() - started > RESTART_CALM:
                    # Worked a while: the first failure of a row again, deaf or not.
                    failures = deaf = 0
                deaf = 0 if heard else deaf + 1
                if deaf >= POLL_AFTER:
                    log.warning(
                        "file watcher of %s keeps failing (%s); polling those directories instead",
                        ", ".join(str(p) for p in paths),
                        cause,
                    )
                    first = await asyncio.to_thread(self._snapshot, [(paths, recursive)])
                    await self._poll(first, stop, [(paths, recursive)])
                    return
                pause = restart_pause(failures)
                failures += 1
                (log.warning if failures == 1 else log.debug)(
                    "file watcher failed (%s); restarting it in %g s (a save meanwhile may "
                    "be missed: save again)",
                    cause,
                    pause,
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await stop.wait()

    async def _poll(
        self,
        previous: dict[Path, tuple[int, int, int]],
        stop: asyncio.Event,
        groups: list[tuple[list[Path], bool]] | None = None,
    ) -> None:
        """Look at the files of ``groups`` (``(directories, recursive)``; all of them if
        None) every ``poll_delay_ms``."""
        delay, step = self.poll_delay_ms / 1000, self.step_ms / 1000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
                return
            current = await asyncio.to_thread(self._snapshot, groups)
            changes = _diff(previous, current)
            if not changes:
                continue
            # A save is often several writes: look again until the files stay put (at most
            # the debounce time), so it becomes one change.
            began = time.monotonic()
            while time.monotonic() - began < self.debounce_ms / 1000:
                await asyncio.sleep(step)
                settled = await asyncio.to_thread(self._snapshot, groups)
                if settled == current:
                    break
                changes = _diff(previous, settled)
                current = settled
            previous = current
            if changes:
                self._queue.put_nowait((time.monotonic(), changes))

    def _snapshot(
        self, groups: list[tuple[list[Path], bool]] | None = None
    ) -> dict[Path, tuple[int, int, int]]:
        """``.py`` file -> (mtime in ns, size, inode) under the watched directories (those
        of ``groups``, if given)."""
        found: dict[Path, tuple[int, int, int]] = {}
        for paths, recursive in (
            [(self.flat, False), (self.deep, True)] if groups is None else groups
        ):
            for directory in paths:
                _scan(directory, found, recursive=recursive, ignore=self.ignore)
        return found


def failure_cause(error: BaseException) -> str:
    """What failed, out of the exception groups around it (watchfiles raises its error
    inside a task group: "unhandled errors in a TaskGroup (1 sub-exception)" said nothing)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(failure_cause(e) for e in error.exceptions)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _scan(
    directory: Path,
    found: dict[Path, tuple[int, int, int]],
    *,
    recursive: bool,
    ignore: Sequence[Path],
) -> None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_file() and entry.name.endswith(".py"):
                info = entry.stat()
                found[Path(entry.path)] = (info.st_mtime_ns, info.st_size, info.st_ino)
            elif recursive and entry.is_dir(follow_symlinks=False):
                path = Path(entry.path)
                if not is_ignored_dir(path, ignore):
                    _scan(path, found, recursive=True, ignore=ignore)
        except OSError:
            continue  # vanished while we looked: the next look sees it gone


def _diff(
    before: dict[Path, tuple[int, int, int]], after: dict[Path, tuple[int, int, int]]
) -> list[Change]:
    changes = [Change(ChangeKind.DELETED, p) for p in before if p not in after]
    for path, stamp in after.items():
        old = before.get(path)
        if old is None:
            changes.append(Change(ChangeKind.ADDED, path))
        elif old != stamp:
            changes.append(Change(ChangeKind.MODIFIED, path))
    return changes


_KINDS = {1: ChangeKind.ADDED, 2: ChangeKind.MODIFIED, 3: ChangeKind.DELETED}


def _merge(changes: list[Change]) -> list[Change]:
    # The last word on each path wins; an add followed by a modify is still an add.
    latest: dict[Path, Change] = {}
    for change in changes:
        previous = latest.get(change.path)
        if (
            previous is not None
            and previous.kind is ChangeKind.ADDED
            and (change.kind is ChangeKind.MODIFIED)
        ):
            continue
        latest[change.path] = change
    return sorted(latest.values(), key=lambda c: str(c.path))
