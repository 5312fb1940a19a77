"""Which wf processes use the tables, by the schema version they speak; an upgrade waits for
the older ones (the PostgreSQL counterpart of the local store's ``users.lock``).

Every query connection of a store instance holds a **session-level shared advisory lock**
keyed by the schema and the version its wf speaks (the two-``int4`` form: ``hashtext('wf users
' || schema)``, version), taken before it reads the version. A migration, in its transaction
under the schema's lock, tries the same keys of every older version exclusively
(``pg_try_advisory_xact_lock``: never a wait in SQL): while another session holds one, it lets
go of everything, says who holds them and tries again a moment later. Once it has them all it
keeps them until it commits, so a session of an older wf that announces meanwhile waits for the
commit and then reads the new version, which it refuses.

Advisory locks rather than ``application_name``: a session's locks end with it, whatever ends
it (``kill -9``, a crash, ``pg_terminate_backend``); a pooler in session mode keeps a server
connection open after its client left, still listed in ``pg_stat_activity``, but releases its
advisory locks (``DISCARD ALL``); the DSN may set ``application_name`` itself; and only a lock
lets the migration shut newcomers out until it commits. The query connections carry it
because they are the ones that write, and a process has one from its first operation on: no
connection is added, not even to one-shot commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, ClassVar

from wf._exceptions import StoreError, UpgradeInterrupted
from wf.store.postgres._conn import Conn

log = logging.getLogger("wf.store")

ANNOUNCE = "SELECT pg_advisory_lock_shared(hashtext('wf users ' || %(schema)s), %(version)s)"
"""This session speaks ``version`` of the tables in ``schema`` (until the session ends)."""

ANNOUNCE_CURRENT = "pg_advisory_lock_shared(hashtext('wf users ' || current_schema()), %s)"
"""The same for the current schema, as a column of a larger ``SELECT`` (NULL, and nothing
held, when the search path names no schema that exists)."""

_SHUT_OUT = """
SELECT coalesce(bool_and(pg_try_advisory_xact_lock(hashtext('wf users ' || %(schema)s), v)), true)
FROM generate_series(1, %(version)s - 1) AS v
"""
"""Whether no session speaks a version older than ``version``; the locks taken (exclusive,
until the transaction ends) keep sessions of an older wf from announcing meanwhile."""

_HOLDERS = """
SELECT l.pid, l.objid::bigint, a.application_name, a.client_hostname, host(a.client_addr),
       a.client_port
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (hashtext('wf users ' || %(schema)s)::bigint & 4294967295)
  AND l.objid::bigint < %(version)s
ORDER BY l.pid
"""

POLL = 0.5
"""Seconds between two tries of a waiting upgrade."""

SAY_EVERY = 30.0
"""Seconds between two lines of a long wait."""

ONE_SHOT_WAIT = 60.0
"""Seconds a store opened by its first operation (a one-shot command) waits for older
sessions before it gives up (``WF_POSTGRES_UPGRADE_WAIT``); ``open()`` (a worker, ``wf serve``)
waits without limit."""

_SHOWN = 5
"""Sessions named in a line; the others are counted."""


def one_shot_wait() -> float:
    """``WF_POSTGRES_UPGRADE_WAIT`` seconds, else ``ONE_SHOT_WAIT`` (a value that is not a
    number of seconds counts as unset)."""
    try:
        seconds = float(os.environ.get("WF_POSTGRES_UPGRADE_WAIT", ONE_SHOT_WAIT))
    except ValueError:
        return ONE_SHOT_WAIT
    return seconds if seconds >= 0 else ONE_SHOT_WAIT


async def announce(conn: Conn, schema: str, version: int) -> None:
    await conn.execute(ANNOUNCE, {"schema": schema, "version": version})


async def shut_out(conn: Conn, schema: str, version: int) -> bool:
    """In the migration's transaction: whether no session of an older wf uses the tables (and
    none can start to until it ends)."""
    cur = await conn.execute(_SHUT_OUT, {"schema": schema, "version": version})
    row = await cur.fetchone()
    return bool(row and row[0])


@dataclasses.dataclass(frozen=True)
class Holder:
    """A session of an older wf, as ``pg_stat_activity`` shows it."""

    pid: int
    version: int
    application: str | None
    host: str

    def __str__(self) -> str:
        app = f"application {self.application!r}" if self.application else "no application name"
        return f"pid {self.pid} on {self.host} ({app}, schema version {self.version})"


async def holders(conn: Conn, schema: str, version: int) -> list[Holder]:
    """The sessions that speak a version older than ``version`` of the tables in ``schema``."""
    cur = await conn.execute(_HOLDERS, {"schema": schema, "version": version})
    return [_holder(row) for row in await cur.fetchall()]


def _holder(row: tuple[Any, ...]) -> Holder:
    pid, version, application, hostname, address, port = row
    # No address: a Unix socket (port -1), or a session of another role, whose address this
    # one may not see without pg_read_all_stats.
    host = hostname or address or ("a local socket" if port == -1 else "a hidden host")
    return Holder(int(pid), int(version), application, host)


def _named(found: list[Holder]) -> str:
    named = ", ".join(str(holder) for holder in found[:_SHOWN])
    more = len(found) - _SHOWN
    return f"{named} and {more} more" if more > 0 else named


class Wait:
    """An upgrade waiting for sessions of an older wf: says who once, then how long every
    ``SAY_EVERY`` seconds, gives up after ``bound`` seconds (None: never), and stops on
    SIGTERM or Ctrl-C (on the main thread: elsewhere Python delivers no signal)."""

    def __init__(self, where: str, target: int, bound: float | None) -> None:
        self.where = where
        self.found = 0
        """The version of the tables found by the last try."""
        self.target = target
        self.bound = bound
        self.started: float | None = None
        self._said = 0.0
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped_by: signal.Signals | None = None
        self.elsewhere = False
        """Set when a try found the tables upgraded by another wf, not by this wait."""

    async def pause(self, version: int, found: list[Holder]) -> None:
        """One more try to upgrade from ``version`` failed because of ``found``: say so if due,
        then wait before the next (``StoreError`` past the bound, ``UpgradeInterrupted`` on a
        stop signal)."""
        self.found = version
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.started is None:
            self.started = self._said = now
            self._take_signals(loop)
            limit = "" if self.bound is None else f" (at most {self.bound:g} s)"
            log.warning(
                "%s are in use by %d session%s of an older wf: %s; its upgrade from version %d "
                "to %d waits until they end%s, as an older wf must not go on driving runs on "
                "tables it does not know (stop them: wf workers, wf serve, programs that use wf)",
                self.where, len(found), "" if len(found) == 1 else "s", _named(found),
                self.found, self.target, limit,
            )  # fmt: skip
        elif now - self._said >= SAY_EVERY:
            self._said = now
            log.warning(
                "%s: the upgrade to version %d still waits for %d session%s of an older wf "
                "(%.0f s so far)", self.where, self.target, len(found),
                "" if len(found) == 1 else "s", now - self.started,
            )  # fmt: skip
        waited = now - self.started
        if self.bound is not None and waited >= self.bound:
            raise StoreError(
                f"{self.where} were not upgraded from version {self.found} to {self.target}: "
                f"after {waited:.0f} s, {len(found)} session{'' if len(found) == 1 else 's'} "
                f"of an older wf still use{'s' if len(found) == 1 else ''} them ({_named(found)}); "
                "stop them (wf workers, wf serve, programs that use wf) and try again"
            )
        pause = POLL if self.bound is None else min(POLL, max(self.bound - waited, 0.0))
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(pause):
                await self._stop.wait()
        self.check()

    def check(self) -> None:
        """``UpgradeInterrupted`` if a stop signal came while it waited (also when it came
        during a try: the upgrade that try would start is not begun)."""
        if self._stopped_by is not None:
            name = "Ctrl-C" if self._stopped_by == signal.SIGINT else self._stopped_by.name
            raise UpgradeInterrupted(
                f"{name}: stopped waiting to upgrade {self.where} from version {self.found} "
                f"to {self.target} (see the line above); nothing was changed"
            )

    def _take_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stop = asyncio.Event()
        self._loop = loop
        if threading.current_thread() is threading.main_thread():
            _Signals.take(self)

    def stop(self, signum: int) -> None:
        """A stop signal came (from the signal handler, on the main thread)."""
        self._stopped_by = signal.Signals(signum)
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def finished(self, upgraded: bool) -> None:
        """The wait is over: the signals are the process's again once no wait is left, and a
        wait that was said ends with a line too when the tables were upgraded (by this wait,
        or found upgraded by another wf)."""
        _Signals.give_back(self)
        if upgraded and self.started is not None:
            waited = asyncio.get_running_loop().time() - self.started
            if self.elsewhere:
                log.warning(
                    "%s: another wf upgraded them to version %d while this one waited "
                    "(%.0f s)", self.where, self.target, waited,
                )  # fmt: skip
            else:
                log.warning(
                    "%s: no older wf uses them any more after %.0f s: upgraded to version %d",
                    self.where, waited, self.target,
                )  # fmt: skip


class _Signals:
    """One SIGTERM and SIGINT handler for every wait of the process (waits of several stores
    may overlap and end in any order): taken by the first wait, given back by the last, and
    only if it is still this one (a handler set since is left as it is)."""

    waits: ClassVar[list[Wait]] = []
    previous: ClassVar[dict[signal.Signals, Any]] = {}

    @classmethod
    def take(cls, wait: Wait) -> None:
        if not cls.waits:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(ValueError, OSError):
                    cls.previous[sig] = signal.signal(sig, cls.handler)
        cls.waits.append(wait)

    @classmethod
    def give_back(cls, wait: Wait) -> None:
        if wait not in cls.waits:
            return
        cls.waits.remove(wait)
        if cls.waits:
            return
        previous, cls.previous = cls.previous, {}
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(sig) == cls.handler:
                    signal.signal(sig, handler)

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        for wait in list(cls.waits):
            wait.stop(signum)


@contextlib.contextmanager
def waiting(where: str, target: int, bound: float | None) -> Iterator[Wait]:
    """A ``Wait`` for the upgrade of ``where`` to version ``target``, ``bound`` seconds at most."""
    wait = Wait(where, target, bound)
    try:
        yield wait
    except BaseException:
        wait.finished(upgraded=False)
        raise
    wait.finished(upgraded=True)
