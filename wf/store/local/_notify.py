"""Waking waiters: in-process signals, file-system events, and a polling safety net.

Three sources, from fastest to slowest:

* writes made in this process (any ``LocalStore`` on the same directory) wake waiters at once
  through the process-wide ``Hub`` of that directory;
* writes of other processes arrive as file-system events from one shared watcher thread per
  directory (watchfiles, imported on first use), watching ``queue/`` (activity), ``schedules/``
  (a schedule saved or removed: activity, and counted in ``Hub.schedule_changes``) and the
  directories of the runs someone waits on (non-recursive: a run's files are flat, and
  watching all of ``runs/`` would take one inotify watch per run);
  The watcher looks at what its notifier gathered every ``STEP_MS`` while someone here waits
  for a change, every ``QUIET_STEP_MS`` while nobody does (each look takes the GIL). Its
  threads do not preempt others as they wake (``SCHED_BATCH``, ``_batching``);
* a poll compares a cheap *fingerprint* (names, inodes, sizes) every ``WF_POLL_INTERVAL``
  seconds (default 1 s), for file systems without events or a watcher that failed. Setting
  ``WF_POLL_INTERVAL`` turns events off and polls only.

A wait compares against the fingerprint taken when the caller last *read* (``get_run``,
``read_journal``, ``due_runs``, ...), so a change that landed between that read and the wait
returns at once instead of being slept through. Waits may wake spuriously: callers re-read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any

from wf.store._inboxes import InboxWatchers
from wf.store.local._layout import INBOX_DIR, NOW, parse_queue_name

log = logging.getLogger("wf.store.local")

_DELETED = 3
"""watchfiles' code of a removal (``watchfiles.Change.deleted``)."""

_ECHOES = 10_000
"""Own changes to ``queue/`` the watcher has not reported back yet that a hub keeps at most
(all are dropped past it: their events are then heard as news, an extra look at worst)."""

WATCH_IDLE = 60.0
"""A run directory nobody waited on for this long is dropped from the watch list."""

DEBOUNCE_MS = 50
"""Milliseconds over which the watcher gathers a burst of changes into one report."""

STEP_MS = 5
"""Milliseconds between the watcher's looks at what its notifier gathered while someone in
this process waits for a change (``Hub.wait``: an idle worker, a caller of ``result()``): a
change is reported 5-10 ms after it is made."""

QUIET_STEP_MS = 20
"""The same while nobody has waited for ``WAITED_RECENTLY`` seconds (a worker whose every
place is taken waits for its own runs):
each look takes the GIL (watchfiles' loop), and with four workers on two cores the looks'
wake-ups preempted the workers' event loops about once per run drained. A change is then
reported 20-40 ms after it is made (a cancel another process posts to a run driven here,
heard by its driver's inbox watch); ``QUIET_TIMEOUT_MS`` bounds how long a wait begun
meanwhile keeps the slower looks."""

WAITED_RECENTLY = 1.0
"""Seconds after a wait during which the watcher still looks every ``STEP_MS``: an idle
worker is between two waits (looking at the queue) whenever a report of the watcher's has
woken it, and the next report must not come slower for that."""

QUIET_TIMEOUT_MS = 200
"""Milliseconds a quiet look lasts without a change before the watcher chooses its step
again (5 s while someone waits: nothing to choose then)."""

RESTART_FIRST = 0.05
"""Seconds before a failed watcher gets a new notifier (or a failed start is tried again):
doubled for each failure in a row, up to ``RESTART_MAX``. A notifier fails for good once it
met a name that is not UTF-8 (watchfiles: ``Unable to decode path``), so one such file in
``queue/`` or ``schedules/`` stopped the events of the whole process; the store polls during
the pause."""

RESTART_MAX = 30.0
"""The longest pause before a watcher is restarted."""

RESTART_CALM = 60.0
"""Seconds a notifier must have worked for its failure to count as the first of a row."""

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]

QueueNews = dict[str, bool]
"""Names of ``queue/`` heard to change since a view last read them -> whether the last report
of the name was its removal alone (True: the view drops it without a look; False: the view
looks whether it is there). ``""``: look at the whole directory."""


def poll_interval() -> tuple[float, bool]:
    """``(seconds between polls, whether to use file-system events)`` from the environment."""
    raw = os.environ.get("WF_POLL_INTERVAL")
    if raw:
        try:
            return max(0.01, float(raw)), False
        except ValueError:
            log.warning("ignoring WF_POLL_INTERVAL=%r: not a number of seconds", raw)
    return 1.0, True


class Hub:
    """Waiters of one store directory in this process, and its shared watcher."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.queue_dir = os.path.join(root, "queue")
        self.schedules_dir = os.path.join(root, "schedules")
        self.runs_dir = os.path.join(root, "runs")
        self._lock = threading.Lock()
        self._waiters: dict[str, set[_Waiter]] = {}
        self._waited_at = -WAITED_RECENTLY
        """``time.monotonic()`` when a wait last began or ended (``waited_on``)."""
        self._queue_news: list[QueueNews] = []
        self._schedule_news: list[set[str]] = []
        self._watcher: _Watcher | None = None
        self._watcher_failed = False
        self._retry_at = 0.0
        """``time.monotonic()`` from which a watcher that failed to start is tried again."""
        self._start_failures = 0
        self._schedules_watched = False
        self.users = 0
        """Open ``LocalStore`` instances on this directory; the last ``close`` stops the watcher."""
        self.activity = 0
        """Changes to ``queue/`` heard of so far: this process's own (``bump``, ``touch("")``)
        and other processes' (file-system events). Also counted: a change of watcher, which
        may have missed events."""
        self.schedule_changes = 0
        """Schedule changes heard of: this process's own (``schedule_changed``) and other
        processes' (file-system events of ``schedules/``); also a change of watcher, which
        may have missed some."""
        self.heard_from = -1
        """``activity`` when the watcher of ``queue/`` started: a count taken before it was
        heard nothing from other processes."""
        self._echoes: dict[str, bool] = {}
        """``queue/`` names this process made (True) or removed (False) whose events the
        watcher has not reported back yet (``expect``)."""
        self.held: dict[str, tuple[str, float]] = {}
        """Run id -> (its listed due field, monotonic time): runs a claim found held by another
        driver (``LocalStore.claim``); a lease of this process forgets its run on release."""
        self.listed_running: dict[str, float] = {}
        """Run id -> monotonic time a claim first passed it over because ``by-status/`` lists
        it running (``LocalStore.claim``): tried for its lock once ``HELD_RETRY`` is over."""
        self.inboxes = InboxWatchers()
        """Watchers of runs' inboxes (``LocalStore.watch_inbox``): told of this process's
        posts by ``LocalStore.post``, of other processes' by the due-now entry every post
        writes in ``queue/`` (see ``dispatch``)."""

    # -- signalling ------------------------------------------------------------------------

    def bump(self) -> None:
        """Count a change to ``queue/`` made by this process (waking no one)."""
        with self._lock:
            self.activity += 1

    def expect(self, name: str, present: bool) -> Callable[[], None] | None:
        """This process is about to make (``present``) or remove the entry ``name`` of
        ``queue/``: its event, when the watcher reports it back, is no news (``_echo``): the
        views of this process are told as it is made, and a worker woken by its own runs' ends
        would look at the queue again for nothing. Remembered *before* the change, so a report
        that comes at once finds it. Returns what forgets it (None: nothing remembered), to call
        if the change was not made.

        An addition of a due-now name is never expected: a post replaces that entry (``poke``),
        so another process's post in the same moment shows as the same event, the one that
        tells a run's driver of the post; heard back, it is one look more."""
        if present and name.startswith(NOW):
            return None
        with self._lock:
            if self._watcher is None:
                return None
            if len(self._echoes) >= _ECHOES:
                self._echoes.clear()
            previous = self._echoes.get(name)
            self._echoes[name] = present

        def forget() -> None:
            # The change was not made: an event of the name that took the echo meanwhile
            # was another process's, heard now.
            with self._lock:
                taken = self._echoes.pop(name, None) is None
                if previous is not None and not taken:
                    self._echoes[name] = previous
            if taken:
                self.dispatch({os.path.join(self.queue_dir, name)})

        return forget

    def _echo(self, name: str, path: str, kept: Container[str], gone: Container[str]) -> bool:
        """Whether the events of ``path`` (the entry ``name``) are only this process's own
        change coming back: the watcher saw it made and not removed, or removed and not made,
        as this process did (``expect``). Anything else (another process undid it or did it
        again since) is news, and so is an event the process did not expect."""
        with self._lock:
            present = self._echoes.pop(name, None)
        if present is None:
            return False
        return (path in kept) is present and (path in gone) is not present

    def schedule_changed(self, name: str = "") -> None:
        """A schedule was saved or removed by this process (``name``: its file's; ``""``: any
        of them): count it, tell the views of ``schedules/``, and wake the waiters."""
        with self._lock:
            self._schedules_news(name)
            self.schedule_changes += 1
        self.touch("")

    # -- what changed in schedules/, for the views kept of it (``LocalStore.due_schedules``) --

    def subscribe_schedules(self) -> set[str]:
        """A set the names of ``schedules/`` files heard to change are added to (``""``: read
        them all again), taken with ``take_schedule_news``. It starts with ``""``."""
        news = {""}
        with self._lock:
            self._schedule_news.append(news)
        return news

    def unsubscribe_schedules(self, news: set[str]) -> None:
        with self._lock:
            self._schedule_news = [n for n in self._schedule_news if n is not news]

    def take_schedule_news(self, news: set[str]) -> set[str]:
        """The names heard of since the last take (and empty the set)."""
        with self._lock:
            taken = set(news)
            news.clear()
        return taken

    def hearing_schedules(self) -> bool:
        """Whether file-system events of ``schedules/`` arrive: a view of it kept in memory
        learns of every change (else it must be read again each time)."""
        return self.hearing() and self._schedules_watched

    def _schedules_news(self, name: str) -> None:
        # Called holding ``_lock``, before the count moves: whoever sees the count move
        # finds the name.
        for news in self._schedule_news:
            news.add(name)

    # -- what changed in queue/, for the views kept of it (``_queue.Queue``) ----------------

    def subscribe_queue(self) -> QueueNews:
        """The names of ``queue/`` entries heard to change, added as they are heard of
        (``""``: look at the whole directory again), taken with ``take_queue_news``. It starts
        with ``""``."""
        news: QueueNews = {"": False}
        with self._lock:
            self._queue_news.append(news)
        return news

    def unsubscribe_queue(self, news: QueueNews) -> None:
        with self._lock:
            self._queue_news = [n for n in self._queue_news if n is not news]

    def queue_changed(
        self, names: Iterable[str], source: QueueNews | None = None, gone: Iterable[str] = ()
    ) -> None:
        """Tell every view but ``source``'s that these names may have changed (to be looked
        up), and that the names ``gone`` were removed (heard removed and not made since: no
        look needed, unless a later report says otherwise)."""
        if not self._queue_news:
            return  # no view kept in this process (nobody claims here)
        with self._lock:
            for news in self._queue_news:
                if news is not source:
                    news.update(dict.fromkeys(names, False))
                    news.update(dict.fromkeys(gone, True))

    def take_queue_news(self, news: QueueNews) -> QueueNews:
        """The names heard of since the last take, each with whether it was last heard
        removed (and empty the news)."""
        with self._lock:
            taken = dict(news)
            news.clear()
        return taken

    def waited_on(self) -> bool:
        """Whether anyone in this process waits for a change (``wait``), now or within the last
        ``WAITED_RECENTLY`` seconds. Unlocked: the watcher asks it before each look, and a
        wait that begins meanwhile is seen by the next (``QUIET_TIMEOUT_MS``)."""
        return bool(self._waiters) or time.monotonic() - self._waited_at < WAITED_RECENTLY

    def hearing(self) -> bool:
        """Whether file-system events of ``queue/`` arrive (the watcher runs)."""
        return self._watcher is not None and not self._watcher_failed

    def touch(self, key: str) -> None:
        """Wake everyone waiting on ``key`` (a run id, or ``""`` for activity). Thread-safe."""
        if key and key not in self._waiters:
            # Nobody waits on the run (every journal write touches it). Unlocked: a waiter
            # registering in another thread now would miss the touch with the lock too (it
            # looks at the run, then registers), and finds the change by its next look.
            return
        with self._lock:
            if not key:
                self.activity += 1
            waiters = self._waiters.pop(key, None)
        if not waiters:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, future in waiters:
            if loop is running:
                _wake(future)
            elif not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_wake, future)

    async def wait(
        self,
        key: str,
        timeout: float,
        fingerprint: Any,
        base: object,
        interval: float,
        poll: Callable[[], bool] | None = None,
    ) -> None:
        """Until ``key`` is touched, ``fingerprint()`` differs from ``base``, or timeout.

        ``poll``: a costlier look, taken every ``interval`` seconds of waiting (not at once),
        that ends the wait when it says something changed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        polled = False
        while True:
            if fingerprint() != base or (polled and poll is not None and poll()):
                return
            polled = True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            waiter: _Waiter = (loop, loop.create_future())
            with self._lock:
                self._waiters.setdefault(key, set()).add(waiter)
                self._waited_at = time.monotonic()
            try:
                async with asyncio.timeout(min(remaining, interval)):
                    await waiter[1]
                return
            except TimeoutError:
                pass
            finally:
                with self._lock:
                    self._waited_at = time.monotonic()
                    found = self._waiters.get(key)
                    if found is not None:
                        found.discard(waiter)
                        if not found:
                            del self._waiters[key]

    # -- file-system events ----------------------------------------------------------------

    def watch(self, path: str | None) -> bool:
        """Make sure events for ``queue/`` (and ``path``, if given) arrive; False if unavailable."""
        if self._watcher_failed and (
            self._watcher is not None or time.monotonic() < self._retry_at
        ):  # a running watcher restarts its notifier itself (``_Watcher._run``)
            return False
        try:
            if self._watcher is None:
                # ``schedules/`` exists from a store's first wait for activity (``LocalStore``).
                watched = [self.queue_dir]
                self._schedules_watched = os.path.isdir(self.schedules_dir)
                if self._schedules_watched:
                    watched.append(self.schedules_dir)
                self._watcher = _Watcher(self, watched)
                with self._lock:
                    self.activity += 1
                    self.heard_from = self.activity
                    self._schedules_news("")
                    self.schedule_changes += 1
                self._watcher_failed = False
                self._start_failures = 0
                self.queue_changed({""})  # nothing was heard before: views look again
            elif not self._schedules_watched and os.path.isdir(self.schedules_dir):
                self._watcher.add(self.schedules_dir, keep=True)
                self._schedules_watched = True
            if path is not None:
                self._watcher.add(path)
        except Exception as error:  # ImportError, inotify limits, an unsupported file system
            if self._watcher is not None:
                # Only the added path failed (a run directory removed meanwhile): the
                # watcher goes on with what it watched (``_Watcher.add`` kept it).
                log.debug("cannot watch %s (%s)", path or self.schedules_dir, error)
                return False
            pause = restart_pause(self._start_failures)
            self._start_failures += 1
            (log.warning if self._start_failures == 1 else log.debug)(
                "file-system events unavailable for %s (%s); polling, trying again in %g s",
                self.root,
                error,
                pause,
            )
            self._retry_at = time.monotonic() + pause
            self._watcher_failed = True
            self.queue_changed({""})
            return False
        return True

    def dispatch(
        self,
        paths: set[str],
        kept: Container[str] | None = None,
        gone: Container[str] | None = None,
    ) -> None:
        """Route changed paths to their waiters (called from the watcher thread); ``kept``:
        those of them that were added or changed, not only removed (None: all); ``gone``:
        those that were removed (None: not known). A post adds its due-now entry; a driver
        removing its run's entry posted nothing. With both known, an entry of ``queue/``
        whose events are this process's own change (``expect``) is no news."""
        keys = set()
        prefix = self.runs_dir + os.sep
        queued = self.queue_dir + os.sep
        scheduled = self.schedules_dir + os.sep
        names = set()
        removed = set()
        """Names of ``queue/`` this report has only removed (none made or changed): the views
        drop them without looking them up (``QueueNews``)."""
        posted: set[str] = set()
        for path in paths:
            if path.startswith(scheduled):
                name = path[len(scheduled) :]
                if name.endswith(".json") and not name.startswith("."):  # not locks, not temps
                    with self._lock:
                        self._schedules_news(name)
                        self.schedule_changes += 1
                    keys.add("")
            elif path.startswith(prefix):
                parts = path[len(prefix) :].split(os.sep, 2)
                keys.add(parts[0])
                if len(parts) > 1 and parts[1] == INBOX_DIR and (kept is None or path in kept):
                    posted.add(parts[0])  # a message written (not acknowledged) in a watched inbox
            elif path.startswith(queued):
                name = path[len(queued) :]
                if (
                    self._echoes
                    and kept is not None
                    and gone is not None
                    and self._echo(name, path, kept, gone)
                ):
                    continue
                if kept is not None and gone is not None and path in gone and path not in kept:
                    removed.add(name)
                else:
                    names.add(name)
                keys.add("")
                if name.startswith(NOW) and (kept is None or path in kept):
                    # A post's due-now entry (``Queue.poke``): its run's driver looks at once,
                    # and, watched or not, a lease's first read of its inbox (``news``).
                    entry = parse_queue_name(name) if self.inboxes else None
                    if entry is not None:
                        posted.add(entry[1])
                    else:
                        self.inboxes.news += 1
            elif path.startswith(self.queue_dir):
                names.add("")  # the directory itself: look at all of it
                keys.add("")
        if names or removed:
            self.queue_changed(names, gone=removed)
        if posted:
            self.inboxes.heard(posted)
        for key in keys:
            self.touch(key)

    def close(self) -> None:
        """One store instance is done; the last one stops the watcher thread."""
        with self._lock:
            self.users = max(0, self.users - 1)
            if self.users:
                return
            watcher, self._watcher = self._watcher, None
            self._watcher_failed = False
        if watcher is not None:
            watcher.stop()


def restart_pause(failures: int) -> float:
    """Seconds before the next try after ``failures`` failures in a row (0: the first)."""
    return min(RESTART_MAX, RESTART_FIRST * 2.0 ** min(failures, 32))


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Watcher:
    """One watchfiles notifier in one daemon thread; replaced whole when the paths change."""

    def __init__(self, hub: Hub, paths: list[str]) -> None:
        from watchfiles._rust_notify import RustNotify  # heavy-ish: only when someone waits

        self._factory = RustNotify
        self._hub = hub
        self._lock = threading.Lock()
        self._paths: dict[str, float] = dict.fromkeys(paths, float("inf"))
        self._switch = threading.Event()
        self._stopped = False
        self._failures = 0
        """Failures in a row (``_failed``)."""
        self._started = time.monotonic()
        """When the notifier last started (``RESTART_CALM``)."""
        self._notify = self._make()
        self._thread = threading.Thread(target=self._run, name="wf-store-watch", daemon=True)
        with _batching():
            self._thread.start()

    def _make(self) -> Any:
        # Constructed on the caller's thread: its watches are live when this returns, so no
        # change made after ``add`` returns can be missed.
        with _batching():  # its reading thread, started here, inherits the policy
            return self._factory(sorted(self._paths), False, False, 300, False, True)

    def add(self, path: str, *, keep: bool = False) -> None:
        """Watch ``path`` too; ``keep``: for good, else until nobody waited on it for
        ``WATCH_IDLE`` seconds."""
        now = time.monotonic()
        with self._lock:
            if path in self._paths:
                self._paths[path] = max(self._paths[path], now)
                return
            idle = [p for p, seen in self._paths.items() if now - seen > WATCH_IDLE]
            for stale in idle:
                del self._paths[stale]
            self._paths[path] = float("inf") if keep else now
            try:
                notify = self._make()
            except Exception:
                del self._paths[path]  # the notifier in use goes on without it
                raise
            self._notify = notify
            self._switch.set()
        self._missed()

    def _missed(self, restarted: bool = False) -> None:
        """Events the replaced notifier had not delivered yet are dropped with it: count a
        change, so that no waiter relies on having heard them, and views look again.
        ``restarted``: after a failure, when nothing was heard for a while: a count taken
        meanwhile is compared by listing (``Hub.heard_from``), and events arrive again.
        Either way every run waiting on its inbox looks at it (the Redis and PostgreSQL
        stores do after a reconnect)."""
        hub = self._hub
        hub.bump()
        with hub._lock:
            hub._echoes.clear()
            hub._schedules_news("")
            hub.schedule_changes += 1
            if restarted:
                hub.heard_from = hub.activity
                hub._watcher_failed = False
        hub.queue_changed({""})
        hub.inboxes.heard_all()  # a post among the dropped events: every waiter looks

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` before a restart, or until stopped (``stop``, ``add``)."""
        self._switch.wait(seconds)

    def _failed(self, notify: Any, error: Exception) -> None:
        """The notifier failed (a name not in UTF-8 makes watchfiles fail every look after,
        a watched directory vanished): close it, poll meanwhile, and replace it after a
        pause that doubles with each failure in a row (``RESTART_FIRST``), until one works
        or the watcher is stopped."""
        with contextlib.suppress(Exception):
            notify.close()
        with self._lock:
            if notify is not self._notify:
                return  # replaced meanwhile (``add``): the new one is looked at next
        hub = self._hub
        hub._watcher_failed = True
        hub.queue_changed({""})
        if time.monotonic() - self._started > RESTART_CALM:
            self._failures = 0
        while not self._stopped:
            pause = restart_pause(self._failures)
            (log.warning if self._failures == 0 else log.debug)(
                "file-system watcher failed (%s); polling, restarting it in %g s", error, pause
            )
            self._failures += 1
            self._pause(pause)
            if self._stopped:
                return
            try:
                with self._lock:
                    self._notify = self._make()
            except Exception as again:  # the directory is still gone, inotify limits
                error = again
                continue
            self._started = time.monotonic()
            self._missed(restarted=True)
            log.info("file-system watcher restarted")
            return

    def stop(self) -> None:
        self._stopped = True
        self._switch.set()

    def _run(self) -> None:
        while not self._stopped:
            with self._lock:
                notify = self._notify
                self._switch.clear()
            if self._hub.waited_on():
                step, timeout = STEP_MS, 5000
            else:
                step, timeout = QUIET_STEP_MS, QUIET_TIMEOUT_MS
            try:
                result = notify.watch(DEBOUNCE_MS, step, timeout, self._switch)
            except Exception as error:  # a name not in UTF-8, the directory vanished
                self._failed(notify, error)
                continue
            if isinstance(result, set):
                kept = {path for change, path in result if change != _DELETED}
                gone = {path for change, path in result if change == _DELETED}
                self._hub.dispatch({path for _, path in result}, kept, gone)
            with self._lock:
                replaced = notify is not self._notify
            if replaced or self._stopped:
                notify.close()
        with self._lock, contextlib.suppress(Exception):
            self._notify.close()


@contextlib.contextmanager
def _batching() -> Iterator[None]:
    """Run the calling thread as ``SCHED_BATCH`` meanwhile (Linux), so that the threads it
    starts are such threads for good (a thread inherits its creator's policy): as often and
    as long as others, but their wake-ups do not preempt the thread running on the core. The
    caller's thread is back to the default policy after; one running under another policy
    (set by the user), or a system without it, is left as it is.

    The watcher's threads wake for every change another process makes to ``queue/`` (with
    four workers, each hears the other three end every run), and those wake-ups preempted
    the workers' loops; now they wait for the core's next turn, a few milliseconds at most
    beside the 5-50 ms a report takes anyway."""
    batch = getattr(os, "SCHED_BATCH", None)
    switched = False
    if batch is not None:
        try:
            if os.sched_getscheduler(0) == os.SCHED_OTHER:
                os.sched_setscheduler(0, batch, os.sched_param(0))
                switched = True
        except OSError:  # not allowed here (a sandbox): the threads keep the default
            pass
    try:
        yield
    finally:
        if switched:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


_hubs: dict[str, Hub] = {}
_hubs_lock = threading.Lock()


def hub_for(root: str) -> Hub:
    """The process-wide hub of a store directory (shared by every store instance on it)."""
    with _hubs_lock:
        hub = _hubs.get(root)
        if hub is None:
            hub = _hubs[root] = Hub(root)
        hub.users += 1
        return hub
