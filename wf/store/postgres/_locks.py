"""Run leases as session-level advisory locks, all held on one connection per store instance.

``pg_try_advisory_lock`` belongs to the session that took it: PostgreSQL releases it when that
connection closes, including when the process dies or the network drops it. Orphaned runs are
therefore recovered without lease timeouts or heartbeats.

One connection holds the locks of every lease of a store instance (a session may hold any number
of advisory locks), so a worker driving a thousand runs uses one connection for them, not a
thousand. Advisory locks are re-entrant within a session, so exclusivity between leases of the
same instance is kept in memory (``_reserved``).

If the lock connection is lost while the process lives on, its locks are gone at the server and
another process may take the runs over. ``generation`` counts lock connections, so leases can
tell they were taken on a lost one, and the fencing token of each lease (``lease_epoch``, see
``_lease``) refuses the writes of a driver that was overtaken.

An idle connection does not notice that the server dropped it (``pg_terminate_backend``, a
restart, a network cut): while locks are held, a watchdog pings the lock connection every
``CHECK_INTERVAL`` seconds, and a lost connection at once tells every lease taken on it
(``watch``), so that their drivers stop — rather than run steps the next holder runs too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from wf._exceptions import StoreError
from wf.store.postgres._conn import (
    CLOSED,
    Conn,
    abandon,
    close_when_idle,
    connect,
    failure,
    looks_alive,
)

log = logging.getLogger("wf.store.postgres")

T = TypeVar("T")


GRANTED = (
    "ARRAY(SELECT json_array_elements_text(nullif(current_setting('wf.granted', true), '')::json))"
)
"""The names of the locks the scan of ``try_many`` took, as a ``text[]``, in the statements of
a ``Then``: the scan leaves them in a setting local to the round trip's transaction."""

_SCAN = (
    "SELECT n FROM unnest(%s::bigint[]) WITH ORDINALITY AS k(key, n) "
    "WHERE pg_try_advisory_lock(k.key) LIMIT %s"
)
"""``try_many``'s scan: the limit stops it once ``want`` locks are granted (never more taken)."""

_SCAN_THEN = """
WITH granted AS MATERIALIZED (
    SELECT n, name FROM unnest(%s::bigint[], %s::text[]) WITH ORDINALITY AS k(key, name, n)
    WHERE pg_try_advisory_lock(k.key) LIMIT %s
)
SELECT n, set_config('wf.granted', (SELECT json_agg(name)::text FROM granted), true)
FROM granted
"""
"""``_SCAN`` that also leaves the names granted for the statements after it (``GRANTED``)."""


@dataclasses.dataclass
class Then:
    """Statements sent right after ``try_many``'s scan, in its round trip and transaction (a
    pipeline on the lock connection): each reads the locks taken as ``GRANTED``. ``statements``
    is given the names the scan will try (those not reserved here) just before it is sent, and
    returns the statements with their parameters. After the scan: ``rows``, each statement's
    rows, or ``error``, what failed in them (the locks the scan took are held either way)."""

    statements: Callable[[list[str]], Sequence[tuple[str, Sequence[object]]]]
    tried: list[str] = dataclasses.field(default_factory=list)
    """The names given to ``statements``."""
    rows: list[list[tuple[Any, ...]]] | None = None
    error: psycopg.Error | None = None


def _check_interval() -> float:
    try:
        return float(os.environ.get("WF_POSTGRES_LEASE_CHECK", "1.0"))
    except ValueError:
        return 1.0


class Locks:
    """The advisory locks of one store instance."""

    def __init__(self, conninfo: str, label: str) -> None:
        self._conninfo = conninfo
        self._label = label
        self._conn: Conn | None = None
        self._connecting = asyncio.Lock()
        self._held: dict[str, int] = {}
        self._reserved: set[str] = set()
        self.generation = 0
        """Bumped whenever the lock connection is replaced: older locks are gone."""
        self._watchers: dict[int, dict[str, Callable[[], None]]] = {}
        """Generation -> run id -> what to call when that generation's connection is lost."""
        self._watchdog: asyncio.Task[None] | None = None
        self.check_interval = _check_interval()
        self._unlocks: list[tuple[int, int, asyncio.Future[None]]] = []
        """Keys waiting to be unlocked by the next batch (``unlock``)."""
        self._unlocker: asyncio.Task[None] | None = None
        self._sending = asyncio.Lock()
        """Held by whatever sends on the lock connection: psycopg would pipeline a statement
        sent by another task while a ``Then``'s pipeline is open, in its transaction."""
        self._closed = False
        """Set by ``close``: a claim still in flight then must not open a connection (nothing
        would close it, and the locks it took would keep their runs until the process ends)."""

    def held(self, run_id: str, generation: int) -> bool:
        """Whether a lock taken in ``generation`` is, as far as this process knows, still held."""
        conn = self._conn
        return (
            generation == self.generation
            and run_id in self._held
            and conn is not None
            and not conn.closed
            and not conn.broken
        )

    async def _connection(self) -> Conn:
        async with self._connecting:
            if self._closed:
                raise StoreError(CLOSED)
            conn = self._conn
            # A connection whose backend was killed while it sat idle (an idle-session
            # timeout, ``pg_terminate_backend``) does not know it yet: its socket holds the
            # server's goodbye. Checked only when no operation is in flight on it (whose reply
            # would make the socket readable too).
            if conn is not None and (conn.lock.locked() or looks_alive(conn)):
                return conn
            if conn is not None:
                self._lost()
            fresh = await connect(self._conninfo, self._label)
            if self._closed:  # closed while it was being opened
                await close_when_idle(fresh)
                raise StoreError(CLOSED)
            self._conn = fresh
            return fresh

    def _lost(self) -> None:
        if self._conn is not None:
            abandon(self._conn)
        self._conn = None
        self._held.clear()
        lost = self._watchers.pop(self.generation, {})
        self.generation += 1
        for run_id, callback in lost.items():
            log.warning("lease on run %s lost with the lock connection: its driver stops", run_id)
            callback()

    def watch(self, run_id: str, generation: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` once if the lock connection of ``generation`` is found lost while
        the run's lock is held (at once if it is gone already)."""
        if generation != self.generation:
            callback()
            return
        self._watchers.setdefault(generation, {})[run_id] = callback
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    def unwatch(self, run_id: str, generation: int) -> None:
        """The lease is released: nothing to tell it any more."""
        self._watchers.get(generation, {}).pop(run_id, None)

    async def _watch(self) -> None:
        """Ping the lock connection while leases watch it; a failed ping means it is gone."""
        while self._watchers.get(self.generation):
            await asyncio.sleep(self.check_interval)
            conn = self._conn
            if conn is None or not self._watchers.get(self.generation):
                continue
            try:
                if conn.closed or conn.broken:
                    raise psycopg.OperationalError("the lock connection is closed")
                async with self._sending:
                    await conn.execute("SELECT 1")
            except psycopg.Error:
                # A ping cancelled on a live connection (``pg_cancel_backend``) lost nothing.
                if conn is self._conn and _broken(conn):
                    self._lost()

    async def try_lock(self, run_id: str, key: int) -> int | None:
        """Take the run's lock without waiting; its generation, or None if it is taken."""
        if run_id in self._reserved:
            return None
        self._reserved.add(run_id)
        attempt = asyncio.get_running_loop().create_task(self._try(key))
        try:
            generation = await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # The lock may still be granted after we stop waiting: hand it back then.
            attempt.add_done_callback(lambda done: self._abandoned(run_id, key, done))
            raise
        except BaseException:
            self._give_back([(run_id, key)])
            raise
        if generation is None:
            self._reserved.discard(run_id)
        else:
            self._held[run_id] = key
        return generation

    async def _try(self, key: int) -> int | None:
        for retry in (False, True):
            conn = await self._connection()
            generation = self.generation
            try:
                async with self._sending:
                    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", [key])
                    row = await cur.fetchone()
            except psycopg.Error as error:
                # The connection died, and every lock on it: one retry on a fresh one. A
                # failure that left it alive (a statement timeout) fails this attempt alone.
                dead = _broken(conn)
                if dead and conn is self._conn:
                    self._lost()
                if retry or not dead:
                    raise failure("PostgreSQL failed to take a run lease", error) from error
                continue
            return generation if row is not None and row[0] else None
        return None  # pragma: no cover - the loop returns or raises

    async def try_any(self, candidates: list[tuple[str, int]]) -> tuple[str, int] | None:
        """Take the first free lock of ``candidates`` (name, key) in one round trip; its name
        and generation, or None if every one is taken (here or by another session).

        For a cap's places: the locks this instance holds already are skipped in memory
        (advisory locks are re-entrant within a session)."""
        free = [(name, key) for name, key in candidates if name not in self._reserved]
        if not free:
            return None
        names = [name for name, _ in free]
        self._reserved.update(names)
        attempt = asyncio.get_running_loop().create_task(self._try_any([key for _, key in free]))
        try:
            found = await asyncio.shield(attempt)
        except asyncio.CancelledError:
            attempt.add_done_callback(lambda done: self._abandoned_scan(free, done, _one_granted))
            raise
        except BaseException:
            self._give_back(free)
            raise
        if found is None:
            self._reserved.difference_update(names)
            return None
        index, generation = found
        name, key = free[index]
        self._reserved.difference_update(n for n in names if n != name)
        self._held[name] = key
        return name, generation

    async def _try_any(self, keys: list[int]) -> tuple[int, int] | None:
        # The limit stops the scan at the first lock granted: never more than one taken.
        rows, generation = await self._scan(
            "SELECT n FROM unnest(%s::bigint[]) WITH ORDINALITY AS k(key, n) "
            "WHERE pg_try_advisory_lock(k.key) LIMIT 1",
            [keys],
            "take a cap's place",
        )
        return None if not rows else (rows[0] - 1, generation)

    async def _scan(
        self,
        query: str,
        params: Sequence[object],
        what: str,
        follow: Sequence[tuple[str, Sequence[object]]] = (),
        then: Then | None = None,
    ) -> tuple[list[int], int]:
        """Run a lock-taking ``query`` on the lock connection; its numbers and the generation.
        With ``follow``, those statements go after it in one pipeline (one round trip, one
        transaction), and their rows or their failure are left in ``then``.

        A connection found dead by the query (and every lock on it) is replaced and the query
        sent once more on the fresh one, as ``_try`` does: a dropped connection is no reason
        to fail a claim. Nothing was granted on the dead one (its locks went with it). A
        failure that leaves the connection alive fails the scan alone: the connection, and
        every lease on it, is kept."""
        for retry in (False, True):
            conn = await self._connection()
            generation = self.generation
            try:
                async with self._sending:
                    if not follow:
                        cur = await conn.execute(query, params)
                        rows = await cur.fetchall()
                    else:
                        rows = await _pipelined(conn, query, params, follow, then)
            except psycopg.Error as error:
                # Only a connection psycopg found broken is gone: a statement timeout or a
                # cancelled scan is an ``OperationalError`` too, and leaves the connection,
                # and the locks of every lease on it, as they were.
                dead = _broken(conn)
                if dead and conn is self._conn:
                    self._lost()
                if retry or not dead:
                    raise failure(f"PostgreSQL failed to {what}", error) from error
                continue
            return [int(row[0]) for row in rows], generation
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def try_many(
        self, candidates: list[tuple[str, int]], want: int, then: Then | None = None
    ) -> tuple[list[str], list[str], int]:
        """Take the locks of up to ``want`` of ``candidates`` (name, key), first free first, in
        one round trip; the names taken, those tried and found held (by another session), and
        the generation. ``then``: statements sent in the same round trip, after the scan
        (their rows or error in ``then``; not sent if no candidate is free).

        For a worker's claim: the locks this instance holds already are skipped in memory
        (advisory locks are re-entrant within a session: taking one again would succeed)."""
        free = [(name, key) for name, key in candidates if name not in self._reserved]
        if not free or want <= 0:
            return [], [], self.generation
        names = [name for name, _ in free]
        self._reserved.update(names)
        follow: Sequence[tuple[str, Sequence[object]]] = ()
        if then is not None:
            then.tried = names
            follow = then.statements(names)
        attempt = asyncio.get_running_loop().create_task(
            self._try_many([key for _, key in free], want, names, follow, then)
        )
        try:
            found = await asyncio.shield(attempt)
        except asyncio.CancelledError:
            attempt.add_done_callback(lambda done: self._abandoned_scan(free, done, _as_granted))
            raise
        except BaseException:
            self._give_back(free)
            raise
        indices, generation = found
        taken = set(indices)
        # The scan stops at the ``want``-th lock granted: candidates after it were not tried.
        tried = len(free) if len(taken) < want else max(taken) + 1
        out, refused = [], []
        for i, (name, key) in enumerate(free):
            if i in taken:
                self._held[name] = key
                out.append(name)
                continue
            self._reserved.discard(name)
            if i < tried:
                refused.append(name)
        return out, refused, generation

    async def _try_many(
        self,
        keys: list[int],
        want: int,
        names: list[str],
        follow: Sequence[tuple[str, Sequence[object]]] = (),
        then: Then | None = None,
    ) -> tuple[list[int], int]:
        if then is None:
            rows, generation = await self._scan(_SCAN, [keys, want], "take run leases")
        else:
            rows, generation = await self._scan(
                _SCAN_THEN, [keys, names, want], "take run leases", follow, then
            )
        return [n - 1 for n in rows], generation

    def _abandoned_scan(
        self,
        free: list[tuple[str, int]],
        attempt: asyncio.Task[T],
        granted: Callable[[T], tuple[list[int], int] | None],
    ) -> None:
        """A lock-taking scan whose caller was cancelled has ended: hand back what it was
        granted (``granted``: the indices in ``free``, and the generation). Held by this session
        and by no lease, those locks would keep their runs (or places) from every other process,
        and, locks being re-entrant, from this one too once taken again and released, until
        the lock connection closed.

        The scan's own task cancelled (as ``asyncio.run`` cancels every task when it ends)
        does not say what the server granted: every lock it tried is given back then (none
        is a lease's: the scan skips reserved names; an unlock of a lock this session does not
        hold changes nothing)."""
        got = None
        if attempt.cancelled():
            got = (list(range(len(free))), self.generation)
        elif attempt.exception() is None:
            got = granted(attempt.result())
        indices, generation = ([], 0) if got is None else got
        taken = set(indices)
        for i, (name, key) in enumerate(free):
            if i in taken:
                self._held[name] = key
                asyncio.get_running_loop().create_task(self.unlock(name, generation))
            else:
                self._reserved.discard(name)

    def _give_back(self, free: list[tuple[str, int]]) -> None:
        """A lock-taking statement failed: hand back every lock it tried. One that failed on a
        live connection (a statement timeout, a cancel from the server) may have been granted
        some before it failed, and a session's advisory lock outlives its statement: kept by no
        lease, it would keep its run (or place) from every other process until the connection
        closed. None of them is a lease's (the names are reserved; an unlock of a lock the
        session does not hold changes nothing), and on a lost connection there is nothing to
        give back (``unlock`` looks at the generation)."""
        generation = self.generation
        for name, key in free:
            self._held[name] = key
            asyncio.get_running_loop().create_task(self.unlock(name, generation))

    def _abandoned(self, run_id: str, key: int, attempt: asyncio.Task[int | None]) -> None:
        """A lock attempt whose caller was cancelled has ended: give back what it was granted.
        Its own task cancelled does not say whether the server granted the lock: it is given
        back then too (the name is reserved, so no lease of this session holds it; an unlock
        of a lock the session does not hold changes nothing)."""
        if attempt.cancelled():
            generation: int | None = self.generation
        elif attempt.exception() is not None:
            generation = None
        else:
            generation = attempt.result()
        if generation is None:
            self._reserved.discard(run_id)
            return
        self._held[run_id] = key
        asyncio.get_running_loop().create_task(self.unlock(run_id, generation))

    async def unlock(self, run_id: str, generation: int) -> None:
        """Give the lock back (nothing to do if its connection is gone: so is the lock)."""
        try:
            if not self.held(run_id, generation):
                return
            key = self._held.pop(run_id)
            # Unlocks that come while one is in flight go together in the next round trip
            # (a worker ends many runs at once). Shielded: a lock left behind by a cancelled
            # release would block the run until this process exits.
            loop = asyncio.get_running_loop()
            done: asyncio.Future[None] = loop.create_future()
            self._unlocks.append((key, generation, done))
            if self._unlocker is None or self._unlocker.done():
                self._unlocker = loop.create_task(self._unlock_batches())
            await asyncio.shield(done)
        finally:
            self._reserved.discard(run_id)

    async def _unlock_batches(self) -> None:
        while self._unlocks:
            batch, self._unlocks = self._unlocks, []
            conn, generation = self._conn, self.generation
            # Keys of an older generation went with the connection that held them.
            keys = [key for key, taken_in, _ in batch if taken_in == generation]
            try:
                if keys and conn is not None:
                    async with self._sending:
                        await conn.execute(
                            "SELECT pg_advisory_unlock(k) FROM unnest(%s::bigint[]) AS k", [keys]
                        )
            except psycopg.Error:
                # Cannot say whether the locks are still held: dropping the connection ends it.
                if conn is self._conn:
                    self._lost()
            finally:
                for _, _, done in batch:
                    if not done.done():
                        done.set_result(None)

    def _forget_unlocks(self) -> None:
        """Closing the connection releases every lock: nothing left to unlock."""
        pending, self._unlocks = self._unlocks, []
        for _, _, done in pending:
            if not done.done():
                done.set_result(None)

    async def close(self) -> None:
        """Close the connection, which releases every lock still held.

        An unlock round trip or a lease attempt may be in flight on the connection (drivers
        hand their leases back as the store closes): the connection is closed only once it
        is over (``close_when_idle``), never under it.
        """
        self._closed = True
        self._forget_unlocks()
        self._watchers.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()
        conn, self._conn = self._conn, None
        self._held.clear()
        self._reserved.clear()
        if conn is not None:
            await close_when_idle(conn)

    def abandon(self) -> None:
        """Drop the connection without awaiting (its event loop is gone)."""
        self._closed = True
        self._unlocks = []
        self._unlocker = None
        self._watchers.clear()
        if self._conn is not None:
            abandon(self._conn)
        self._conn = None
        self._held.clear()
        self._reserved.clear()


def _broken(conn: Conn) -> bool:
    """Whether a connection whose statement failed is gone (and every lock on it): psycopg
    says so, once it met a lost connection, by ``broken`` or ``closed``."""
    return conn.closed or conn.broken


async def _pipelined(
    conn: Conn,
    query: str,
    params: Sequence[object],
    follow: Sequence[tuple[str, Sequence[object]]],
    then: Then | None,
) -> list[tuple[Any, ...]]:
    """``query``'s rows, with ``follow`` sent after it in the same pipeline: their rows, or
    the error that failed them (``query`` ran), go to ``then``, whatever its kind (a lock or
    statement timeout, a deadlock: the connection, and the locks on it, are fine). A failure
    of ``query`` itself, or of the connection, is raised."""
    cursors = []
    first = None
    try:
        async with conn.pipeline():
            first = await conn.execute(query, params)
            for statement, values in follow:
                cursors.append(await conn.execute(statement, values))
    except psycopg.Error as error:
        if first is None or conn.closed or conn.broken:
            raise
        try:
            rows = await first.fetchall()
        except psycopg.Error:
            raise error from None  # the scan failed: nothing after it ran
        if then is not None:
            then.error = error
        return rows
    rows = await first.fetchall()
    if then is not None:
        then.rows = [await cursor.fetchall() for cursor in cursors]
    return rows


def _one_granted(found: tuple[int, int] | None) -> tuple[list[int], int] | None:
    """``try_any``'s scan's answer as the indices granted and the generation."""
    return None if found is None else ([found[0]], found[1])


def _as_granted(found: tuple[list[int], int]) -> tuple[list[int], int]:
    """``try_many``'s scan's answer: already the indices granted and the generation."""
    return found
