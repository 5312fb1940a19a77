"""Wake-ups across processes: ``LISTEN`` on one connection, ``NOTIFY`` sent in batches.

Every write that other processes may wait for is announced on the store's channel with a payload
of one letter and the run id: ``q`` when the queue may have changed (a run created, saved,
posted to, released — what ``wait_for_activity`` waits for), ``r`` when only the run's journal
or streams grew, or the run started or ended without making anything startable (what
``wait_for_run`` and ``wait_for_change`` also wait for). A run's end is ``q`` only when the run
is in a group (its lane's next run may start); a cap's place announces itself when released, and
a child's end posts to its parent, so no worker need hear of the end of any other run: with W
workers, announcing every end on ``q`` made each worker's ends reach all W of them.

The changes of one round trip go out coalesced, one notification per letter with the run ids
separated by spaces: every listening process receives every notification, so per-run
notifications would cost each of W workers the announcements of all the others' runs.

The two letters go on two channels. A process listens on the queue channel (``q``), which is
what workers need, from the first thing in it that waits for news (a worker, a wait, a run's
driver watching its inbox; ``PostgresStore.open`` too): a one-shot command (``wf runs``, ``wf
cancel``, a producer's detached start) opens no connection to listen, which it would not use.
The others (``r``: a busy worker's steps and ends) go on a channel of their own that a process
listens on only once something in it waits for a run or for any change (``wait_for_run``: a
``Run.result()``, a watch; ``wait_for_change``: the API server's event stream, ``wf inspect``'s
list), and stops listening there once nothing has waited for ``RUN_LISTEN_LINGER`` seconds: W
workers then do not each receive the steps and ends of all the others' runs. A listening backend
commits a transaction for every batch of notifications it reads, so each notification a process
need not hear also spares the server work.

The ``NOTIFY`` is *not* part of the writing transaction. PostgreSQL serialises the commits of
transactions that notify on one database-wide lock, held through the commit's WAL flush, which
would undo group commit for every append. Instead, after the write commits, its run id joins a
batch that one ``SELECT pg_notify(...)`` per round trip sends with ``synchronous_commit`` off (a
notification needs no durability). Notifications are hints: a process that dies between a
commit and its notification only delays waiters until their timeout. (A rate limit's start
taken back, which is rare, notifies ``RATES`` in its own statement instead: its store may be
closing, see ``PostgresStore.close``.)

Waiters in the same process are woken at once, without a round trip; the process's own
notifications, which the server delivers to its listening connection too, are then ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable

import psycopg
from psycopg import sql

from wf._exceptions import StoreError
from wf._tasks import cancel_within
from wf.store._inboxes import InboxWatchers
from wf.store.postgres._conn import (
    Conn,
    Pool,
    abandon,
    close_when_idle,
    connect,
    failure,
    one_line,
)

log = logging.getLogger("wf.store.postgres")

QUEUE = "q"
"""Payload prefix: the queue may have changed (wakes ``wait_for_activity`` and the run)."""
RUN = "r"
"""Payload prefix: only the run's journal or streams changed (wakes ``wait_for_run``)."""
SCHEDULES = "s"
"""Payload: a schedule was saved or removed (wakes ``wait_for_activity``; counted in
``Signals.schedule_changes``, so that workers read their schedules again)."""
RATES = "t"
"""Payload: a rate limit's start was taken back (wakes ``wait_for_activity``; counted in
``Signals.rate_returns``, so that workers holding runs for a rate limit read it again). An
older wf takes it for any change of the queue."""

_CANNOT_LISTEN = "wf cannot LISTEN on PostgreSQL yet: %s"
_LISTENS_AGAIN = "wf listens on PostgreSQL again"
_SENDING = "notify"
"""What ``Signals._failed`` calls sending notifications (channels are its other keys)."""

_RECONNECT_DELAY = (0.1, 5.0)


RUN_LISTEN_LINGER = 30.0
"""Seconds the run channel stays listened to after its last wait (``listen_runs``): while a
process listens there, every worker announces its runs' steps and ends, so a process that
waited for one run once must not keep them all at it for the rest of its life."""

_TRACKED_RUNS = 4096
"""How many recently read runs remember their last change (see ``Signals.reading_run``)."""


class _RunWaiters:
    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.count = 0


class RunWatch:
    """One waiter's watch of a run: the event of the moment it began watching. A change that
    comes before the wait itself (while the caller checks that the run exists) sets that event
    and replaces ``_RunWaiters.event`` with a fresh one for later watchers: a wait on the
    fresh one would miss it."""

    def __init__(self, waiters: _RunWaiters) -> None:
        self.waiters = waiters
        self.event = waiters.event


class Signals:
    """asyncio events fed by local writes and by notifications of other processes.

    A wait must not miss a change that committed after the caller's last read but was announced
    before the wait began (the read's reply and the notification travel on different
    connections). Every announcement therefore gets a tick; reads of the queue and of runs note
    the tick they started at; a wait returns at once when a change is newer than that read.
    """

    def __init__(
        self,
        pool: Pool,
        conninfo: str,
        label: str,
        channel: str,
        run_channel: str,
        *,
        listening_key: int,
    ) -> None:
        self._pool = pool
        self._conninfo = conninfo
        self._label = label
        self._channel = channel
        self._run_channel = run_channel
        self._listening_key = listening_key
        """Advisory lock every process listening on the run channel holds shared (see
        ``_NOTIFY``)."""
        self._run_listener: asyncio.Task[None] | None = None
        self._run_conn: Conn | None = None
        self._run_starting: asyncio.Task[bool] | None = None
        self._run_failed_at = -float("inf")
        self._run_waits = 0
        """Waits in progress that need the run channel (``wait_change``, ``wait_run``)."""
        self._run_used_at = 0.0
        """Loop time the run channel was last needed: its listener stops ``RUN_LISTEN_LINGER``
        seconds after, if no wait is in progress then."""
        self._run_reaper: asyncio.Task[None] | None = None
        self._closing = False
        self.schedule_changes = 0
        """Schedule changes heard of (``SCHEDULES``; and a reconnection, which may have lost
        some)."""
        self.rate_returns = 0
        """Rate limits' starts taken back heard of (``RATES``; and the first ``LISTEN`` or a
        reconnection, which may have missed some)."""
        self._activity = asyncio.Event()
        self._change = asyncio.Event()
        """Set by any announcement, either letter: what views of many runs wait for."""
        self._runs: dict[str, _RunWaiters] = {}
        self.inboxes = InboxWatchers()
        """Watchers of runs' inboxes (``PostgresStore.watch_inbox``): a post announces
        ``QUEUE`` and the run id, so every ``QUEUE`` of a watched run calls them."""
        self._claimed: dict[str, bool] = {}
        """Runs whose inboxes a claim read ahead for their drivers, until a driver takes the
        inbox or the lease goes: whether a ``QUEUE`` of the run (a post, perhaps, that the
        read missed) was heard since (``claim_reading``)."""
        self._tick = 0
        self._queue_read = 0
        self._queue_changed = 0
        self._list_read = 0
        self._any_changed = 0
        self._run_reads: OrderedDict[str, int] = OrderedDict()
        self._run_changes: dict[str, int] = {}
        self._outbox: set[str] = set()
        self._sender: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        """The queue channel's listener being started (``listen``)."""
        self._hearing: asyncio.Task[None] | None = None
        """``listen_soon``'s start, for inbox watchers."""
        self._hear_timer: asyncio.TimerHandle | None = None
        self._conn: Conn | None = None
        self._down: dict[str, Callable[..., None]] = {}
        """The channels (and ``NOTIFY`` for sending) that failed and were said to: said once
        per outage, and once when they work again, never at every retry."""
        self._heeded = False
        """Whether anything here reads the queue or waits to hear of changes: only then is a
        lost ``LISTEN`` connection worth a warning (a one-shot command, ``wf store verify``,
        ``wf gc``, needs no notification)."""

    # -- reads ----------------------------------------------------------------------------

    def reading_queue(self) -> None:
        """A read of the queue starts: later changes end the next ``wait_activity`` at once."""
        self._heeded = True
        self._queue_read = self._tick

    def reading_runs(self) -> None:
        """A listing of runs starts: later changes end the next ``wait_change`` at once."""
        self._list_read = self._tick

    def reading_run(self, run_id: str) -> None:
        """A read of the run starts: later changes end the next ``wait_run`` at once."""
        self._run_reads[run_id] = self._tick
        self._run_reads.move_to_end(run_id)
        if len(self._run_reads) > _TRACKED_RUNS:
            oldest, _ = self._run_reads.popitem(last=False)
            self._run_changes.pop(oldest, None)

    def claim_reading(self, run_ids: Iterable[str]) -> None:
        """A claim is about to read these runs' inboxes for their drivers: a post heard of
        from now on may be missing from what it reads (``claim_read_stale``)."""
        for run_id in run_ids:
            self._claimed[run_id] = False

    def claim_read_stale(self, run_id: str) -> bool:
        """Whether the run's inbox may have had a post since its claim read it (its driver
        reads it again), and forget the run. A run no claim read counts as not stale."""
        return self._claimed.pop(run_id, False)

    # -- waking ---------------------------------------------------------------------------

    def wake(self, payload: str) -> None:
        """Wake local waiters for a change: ``QUEUE``/``RUN`` then a run id, or several run
        ids separated by spaces (a coalesced notification, see ``_send``)."""
        kind, rest = payload[:1], payload[1:]
        self._tick += 1
        self._any_changed = self._tick
        self._change.set()
        self._change = asyncio.Event()
        if kind == SCHEDULES:
            self.schedule_changes += 1
        elif kind == RATES:
            self.rate_returns += 1
        ids = rest.split(" ") if " " in rest else [rest]
        if kind != RUN:
            self._queue_changed = self._tick
            self._activity.set()
            self._activity = asyncio.Event()
            if kind == QUEUE:
                self.inboxes.heard(ids)
                if self._claimed:
                    for run_id in ids:
                        if run_id in self._claimed:
                            self._claimed[run_id] = True
        for run_id in ids:
            if run_id in self._run_reads:
                self._run_changes[run_id] = self._tick
            waiters = self._runs.get(run_id)
            if waiters is not None:
                waiters.event.set()
                waiters.event = asyncio.Event()

    def wake_all(self) -> None:
        """Wake every waiter (after the listener reconnects: notifications may have been lost)."""
        self.wake(SCHEDULES)
        self.rate_returns += 1
        self.inboxes.heard_all()
        self._claimed = dict.fromkeys(self._claimed, True)
        for run_id in self._run_reads:
            self._run_changes[run_id] = self._tick
        for waiters in self._runs.values():
            waiters.event.set()
            waiters.event = asyncio.Event()

    def changed(self, kind: str, run_id: str) -> None:
        """A write committed: wake local waiters now, and other processes soon."""
        payload = kind + run_id
        self.wake(payload)
        self._outbox.add(payload)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send())

    async def wait_activity(self, timeout: float) -> None:
        """Until the queue may have changed since it was last read, or ``timeout`` seconds."""
        self._heeded = True
        if await self.listen() or self._queue_changed > self._queue_read:
            self._queue_read = self._tick  # reported once, even to a caller that never reads
            await asyncio.sleep(0)
            return
        event = self._activity
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    async def wait_change(self, timeout: float) -> None:
        """Until any run may have changed since runs were last listed (either letter: a run
        created, started, ended, its journal grown), or ``timeout`` seconds. The caller must
        be listening on the run channel (``listen_runs``)."""
        self._heeded = True
        if self._any_changed > self._list_read:
            self._list_read = self._tick  # reported once
            await asyncio.sleep(0)
            return
        event = self._change
        self._run_waits += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await event.wait()
        finally:
            self._run_waits -= 1
            self._run_used_at = asyncio.get_running_loop().time()

    def watch(self, run_id: str) -> RunWatch | None:
        """Start watching a run; None if it changed since it was last read (do not wait)."""
        self._heeded = True
        read = self._run_reads.get(run_id)
        if read is not None and self._run_changes.get(run_id, 0) > read:
            self._run_reads[run_id] = self._tick  # reported once
            return None
        waiters = self._runs.get(run_id)
        if waiters is None:
            waiters = self._runs[run_id] = _RunWaiters()
        waiters.count += 1
        return RunWatch(waiters)

    async def wait_run(self, run_id: str, watch: RunWatch, timeout: float) -> None:
        """Until the watched run may have changed since ``watch`` began, or ``timeout``."""
        self._run_waits += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await watch.event.wait()
        finally:
            self._run_waits -= 1
            self._run_used_at = asyncio.get_running_loop().time()
            self.unwatch(run_id, watch)

    def unwatch(self, run_id: str, watch: RunWatch) -> None:
        """Stop watching (the entry goes when its last waiter does: no growth with runs)."""
        waiters = watch.waiters
        waiters.count -= 1
        if waiters.count <= 0 and self._runs.get(run_id) is waiters:
            del self._runs[run_id]

    # -- sending --------------------------------------------------------------------------

    async def _send(self) -> None:
        while self._outbox:
            batch = _coalesce(self._outbox)
            self._outbox.clear()
            channels = [self._run_channel if p[:1] == RUN else self._channel for p in batch]
            try:
                async with self._pool.connection("send notifications") as conn:
                    await conn.execute(
                        _NOTIFY, [channels, batch, self._run_channel, self._listening_key]
                    )
            except StoreError as error:
                self._failed(
                    _SENDING, log.warning, "wf could not notify other processes: %s", error
                )
                return
            self._works(_SENDING, "wf notifies other processes again")

    def _failed(
        self, what: str, say: Callable[..., None], message: str, error: BaseException
    ) -> None:
        """``what`` (a channel, or ``_SENDING``) failed: said at its first failure in a row."""
        if what in self._down:
            log.debug(message, error)
        else:
            self._down[what] = say
            say(message, error)

    def _works(self, what: str, message: str) -> None:
        """``what`` works (again): said if its failure was."""
        said = self._down.pop(what, None)
        if said is not None:
            said(message)  # as loud as its failure was

    async def flush(self) -> None:
        """Wait until queued notifications are sent."""
        if self._sender is not None and not self._sender.done():
            with contextlib.suppress(Exception):
                await self._sender

    # -- listening ------------------------------------------------------------------------

    async def listen(self) -> bool:
        """Make sure this process hears the queue channel; True when it did not until now: a
        change announced meanwhile was not heard, and the caller is to read again rather than
        wait. ``StoreError`` if it cannot connect (the next call tries again)."""
        if self._listener is not None:
            return False
        starting = self._starting
        if starting is None:
            starting = self._starting = asyncio.get_running_loop().create_task(self.start())
        try:
            await asyncio.shield(starting)
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None
        self._claimed = dict.fromkeys(self._claimed, True)  # posts to them were not heard
        self.rate_returns += 1  # nor a rate limit's start taken back: limits are read again
        return True

    def listen_soon(self) -> None:
        """``listen`` for an inbox watcher (``watch_inbox`` cannot await), if one still
        watches ``HEAR_INBOXES_AFTER`` seconds from now: most runs driven outside a worker end
        sooner (a ``wf cancel`` driving the run it cancels), and a connection they would not
        use is not opened. Once listening, every watcher is called (a post before was not
        heard). A failure to connect is said; the watchers' polls go on meanwhile, and the
        next watch tries again."""
        if self._listener is not None or self._closing or self._hear_timer is not None:
            return
        if self._hearing is None or self._hearing.done():
            loop = asyncio.get_running_loop()
            self._hear_timer = loop.call_later(HEAR_INBOXES_AFTER, self._hear_inboxes)

    def _hear_inboxes(self) -> None:
        self._hear_timer = None
        if self.inboxes and not self._closing and self._listener is None:
            self._hearing = asyncio.get_running_loop().create_task(self._listen_for_inboxes())

    async def _listen_for_inboxes(self) -> None:
        try:
            started = await self.listen()
        except StoreError as error:
            log.warning("wf cannot LISTEN on PostgreSQL yet: %s", error)
            return
        if started:
            self.inboxes.heard_all()

    async def start(self) -> None:
        """Connect and ``LISTEN`` on the queue channel; returns once notifications are being
        received."""
        conn = await connect(self._conninfo, self._label)
        try:
            await _listen(conn, self._channel)
        except BaseException:
            await _close(conn)
            raise
        self._conn = conn
        self._listener = asyncio.get_running_loop().create_task(self._receive(conn, self._channel))

    async def listen_runs(self) -> bool:
        """Make sure this process hears of journal and stream changes (``RUN``); True when
        it did not until now: a change announced meanwhile was not heard, and the caller is
        to read the run again rather than wait."""
        loop = asyncio.get_running_loop()
        self._run_used_at = loop.time()
        if self._run_listener is not None:
            return False
        if loop.time() - self._run_failed_at < _RECONNECT_DELAY[1]:
            return False  # cannot listen for now: waits end by their timeouts
        starting = self._run_starting
        if starting is None:
            starting = self._run_starting = loop.create_task(self._start_runs())
        try:
            await asyncio.shield(starting)
        finally:
            if starting.done() and self._run_starting is starting:
                self._run_starting = None
        return True

    async def _start_runs(self) -> bool:
        try:
            conn = await connect(self._conninfo, self._label)
        except StoreError as error:
            self._run_failed_at = asyncio.get_running_loop().time()
            self._failed(self._run_channel, log.warning, _CANNOT_LISTEN, error)
            return False
        try:
            await _listen(conn, self._run_channel, self._listening_key)
        except StoreError as error:
            await _close(conn)
            self._run_failed_at = asyncio.get_running_loop().time()
            self._failed(self._run_channel, log.warning, _CANNOT_LISTEN, error)
            return False
        self._works(self._run_channel, _LISTENS_AGAIN)
        self._run_conn = conn
        loop = asyncio.get_running_loop()
        self._run_listener = loop.create_task(self._receive(conn, self._run_channel))
        if self._run_reaper is None or self._run_reaper.done():
            self._run_reaper = loop.create_task(self._stop_runs_when_unused())
        return True

    async def _stop_runs_when_unused(self) -> None:
        """Stop listening on the run channel once nothing has needed it for
        ``RUN_LISTEN_LINGER`` seconds (``listen_runs`` starts it again when a wait needs it)."""
        loop = asyncio.get_running_loop()
        while self._run_listener is not None:
            idle = loop.time() - self._run_used_at
            if (
                self._run_waits == 0
                and not self._runs
                and self._run_starting is None
                and idle >= RUN_LISTEN_LINGER
            ):
                # Forgotten at once, before any await: a wait that comes while the connection
                # closes starts a listener of its own (and reads again) instead of trusting
                # this one. Closing the connection lets go of the shared lock that made the
                # other processes announce on the run channel.
                listener, conn = self._run_listener, self._run_conn
                self._run_listener = self._run_conn = None
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener
                if conn is not None:
                    # Shielded: ``close`` cancels this task, and no longer knows this conn.
                    await asyncio.shield(_close(conn))
                continue  # a wait may have started another listener meanwhile: watch it
            await asyncio.sleep(max(RUN_LISTEN_LINGER - idle, RUN_LISTEN_LINGER / 10))

    async def _receive(self, conn: Conn, channel: str) -> None:
        delay = _RECONNECT_DELAY[0]
        runs = channel == self._run_channel
        say = log.warning
        while not self._closing:
            try:
                async for notify in conn.notifies():
                    delay = _RECONNECT_DELAY[0]
                    if notify.pid in self._pool.pids:
                        continue  # our own: ``changed`` woke our waiters when it was sent
                    self.wake(notify.payload)
            except (psycopg.Error, StoreError, OSError) as error:
                say = log.warning if self._heeded or runs else log.debug
                say("wf lost its PostgreSQL LISTEN connection: %s", one_line(error))
            await _close(conn)
            self._set_conn(runs, None)
            # Reconnect with backoff; until then waiters fall back to their timeouts.
            fresh: Conn | None = None
            while fresh is None and not self._closing:
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RECONNECT_DELAY[1])
                try:
                    fresh = await connect(self._conninfo, self._label)
                except StoreError as error:
                    self._failed(channel, say, _CANNOT_LISTEN, error)
                    continue
                try:
                    await _listen(fresh, channel, self._listening_key if runs else None)
                except StoreError as error:
                    await _close(fresh)
                    fresh = None
                    self._failed(channel, say, _CANNOT_LISTEN, error)
            if fresh is None or self._closing:
                if fresh is not None:
                    await _close(fresh)
                return
            self._works(channel, _LISTENS_AGAIN)
            conn = fresh
            self._set_conn(runs, conn)
            self.wake_all()

    def _set_conn(self, runs: bool, conn: Conn | None) -> None:
        if runs:
            self._run_conn = conn
        else:
            self._conn = conn

    async def close(self) -> None:
        """Send what is queued, stop listening, close the connection."""
        await self.flush()
        if self._hear_timer is not None:
            self._hear_timer.cancel()
            self._hear_timer = None
        for starting in (self._run_starting, self._starting, self._hearing):
            if starting is not None:
                with contextlib.suppress(BaseException):
                    await starting
        self._closing = True
        tasks = [t for t in (self._run_reaper, self._listener, self._run_listener) if t is not None]
        # Bounded: a listener whose cancellation a driver turned into an error of its own sees
        # ``_closing`` and ends; one that still does not is not waited for.
        with contextlib.suppress(BaseException):
            await cancel_within(tasks, CLOSE_WAIT)
        self._listener = self._run_listener = self._run_reaper = None
        for conn in (self._conn, self._run_conn):
            if conn is not None:
                await _close(conn)
        self._conn = self._run_conn = None

    def abandon(self) -> None:
        """Forget tasks and connections of a finished event loop."""
        for conn in (self._conn, self._run_conn):
            if conn is not None:
                abandon(conn)
        self._conn = self._run_conn = None
        self._listener = self._run_listener = self._sender = self._run_starting = None
        self._run_reaper = self._starting = self._hearing = None
        if self._hear_timer is not None:
            self._hear_timer.cancel()
            self._hear_timer = None


HEAR_INBOXES_AFTER = 0.2
"""Seconds a run's inbox is watched before a process that does not listen yet starts to
(``listen_soon``): a post from another process reaches a younger run at this delay."""

CLOSE_WAIT = 2.0
"""Seconds ``close`` waits for the listeners it cancelled to end."""

_PAYLOAD_LIMIT = 7000
"""Bytes per coalesced payload (PostgreSQL refuses payloads of 8,000 bytes or more)."""


def _coalesce(outbox: set[str]) -> list[str]:
    """The changes of one round trip as few notifications as fit: one per kind, its run ids
    separated by spaces. Every listener handles each notification it receives, so a worker
    among W others would otherwise handle W times every append and save of the whole store."""
    by_kind: dict[str, list[str]] = {}
    for payload in sorted(outbox):
        by_kind.setdefault(payload[:1], []).append(payload[1:])
    out = []
    for kind, ids in by_kind.items():
        chunk: list[str] = []
        size = 1
        for run_id in ids:
            if chunk and size + len(run_id) + 1 > _PAYLOAD_LIMIT:
                out.append(kind + " ".join(chunk))
                chunk, size = [], 1
            chunk.append(run_id)
            size += len(run_id) + 1
        out.append(kind + " ".join(chunk))
    return out


_NOTIFY = (
    "SELECT pg_notify(c, p), set_config('synchronous_commit', 'off', true)"
    " FROM unnest(%s::text[], %s::text[]) AS n(c, p)"
    " WHERE c <> %s OR NOT pg_try_advisory_xact_lock(%s)"
)
"""Send a batch; the run channel's payloads only while a process listens there.

A ``NOTIFY`` wakes every backend of the database that listens on *any* channel (each then
commits a transaction to read it), so the run channel's announcements, one per round trip of
every busy worker, woke every worker's listening backend although no worker listens to them.
A process listening on the run channel holds an advisory lock shared on that connection for as
long as it listens (``_listen``); the batch tries that lock exclusively, in the same statement,
and announces on the run channel only when it cannot take it. No change is missed: a listener
takes the lock before it first reads (its first wait returns at once, ``listen_runs``), and a
writer looks after its change committed, so a change a writer did not announce was committed
before the listener's read. (Taken, the lock is let go at the statement's end.)"""


async def _listen(conn: Conn, channel: str, listening_key: int | None = None) -> None:
    """``LISTEN`` on ``channel``; with ``listening_key``, also hold that advisory lock shared
    for the connection's life (it says someone listens there, see ``_NOTIFY``)."""
    try:
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        if listening_key is not None:
            await conn.execute("SELECT pg_advisory_lock_shared(%s)", [listening_key])
    except psycopg.Error as error:
        raise failure("PostgreSQL failed to LISTEN", error) from error


async def _close(conn: Conn) -> None:
    await close_when_idle(conn)
