"""Connections: how they are opened, a small pool, and turning driver errors into ``StoreError``.

psycopg's own pool lives in a separate package (``psycopg_pool``); the store needs only a bounded
set of reusable autocommit connections, which is a semaphore and a list.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import select
import socket
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg.types.json import Json, set_json_loads

from wf._exceptions import StoreCorrupted, StoreError, StoreUnavailable, UsageError
from wf.store import _forks

Conn = AsyncConnection[TupleRow]

_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


CONNECT_TIMEOUT = 10
"""Seconds a connection's opening may take, unless the DSN or ``PGCONNECT_TIMEOUT`` says."""


def build_conninfo(dsn: str, schema: str | None) -> str:
    """The connection string of every connection: the DSN, a default timeout and the schema.

    The timeout of a connection's opening is the DSN's ``connect_timeout``, else libpq's
    ``PGCONNECT_TIMEOUT``, else ``CONNECT_TIMEOUT``: an address nothing answers (packets
    dropped) fails in seconds, not after the kernel's minutes of SYN retries."""
    if schema is not None and not _SCHEMA_RE.match(schema):
        # Kept to plain identifiers so that it needs no quoting in ``options`` or in SQL.
        raise UsageError(f"invalid Postgres schema name {schema!r}: use letters, digits and '_'")
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        raise UsageError(f"invalid PostgreSQL DSN: {error}") from None
    extra: dict[str, Any] = {}
    if "connect_timeout" not in given:
        given_by_env = os.environ.get("PGCONNECT_TIMEOUT", "").strip()
        if not given_by_env:
            extra["connect_timeout"] = CONNECT_TIMEOUT
        elif not (given_by_env.isascii() and given_by_env.lstrip("-").isdigit()):
            # libpq would refuse it at every connection, as a failure of the store (exit 3).
            raise UsageError(
                f"invalid PGCONNECT_TIMEOUT={given_by_env!r}: a whole number of seconds"
            )
    if "application_name" not in given:
        extra["application_name"] = "wf"
    if schema is not None:
        path = f"-c search_path={schema}"
        extra["options"] = f"{given['options']} {path}" if given.get("options") else path
    return make_conninfo(dsn, **extra)


KEEPALIVE = (30, 10, 3)
"""Seconds idle before probing, seconds between probes, probes lost before a peer is dead."""


def with_keepalives(conninfo: str) -> str:
    """``conninfo`` for a long-lived idle connection: TCP keepalives on both ends.

    The server releases a dead client's advisory locks only once it notices the connection is
    gone. A killed process closes its socket, which the server sees at once; a machine that
    vanishes (power, network) closes nothing, and without keepalives the kernel's default of
    two hours would pass before its runs are recovered. The server-side settings are ordinary
    per-session parameters (``-c tcp_keepalives_*``); they do not apply to Unix sockets.
    """
    given = conninfo_to_dict(conninfo)
    idle, interval, count = KEEPALIVE
    extra: dict[str, Any] = {}
    if "keepalives_idle" not in given:
        extra.update(keepalives=1, keepalives_idle=idle)
        extra.update(keepalives_interval=interval, keepalives_count=count)
    server = (
        f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} "
        f"-c tcp_keepalives_count={count}"
    )
    options = given.get("options")
    extra["options"] = f"{server} {options}" if options else server
    return make_conninfo(conninfo, **extra)


def describe(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<invalid DSN>"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{parts.get('dbname', '')}"


def json_param(value: Any) -> Json:
    """``value`` as a ``json`` parameter, serialized by orjson now (errors name the value)."""
    return Json(encode(value), dumps=_identity)


def encode(value: Any) -> bytes:
    """``value`` as JSON text, by orjson; ``StoreError`` if it is not JSON."""
    try:
        return orjson.dumps(value)
    except TypeError as error:
        raise StoreError(f"cannot store a value that is not JSON ({error})") from None


def _identity(data: Any) -> bytes:
    return bytes(data)


async def connect(conninfo: str, label: str) -> Conn:
    """An autocommit connection whose ``json`` columns decode with orjson."""
    try:
        conn = await AsyncConnection.connect(conninfo, autocommit=True)
    except psycopg.Error as error:
        what = f"cannot connect to PostgreSQL at {label}"
        if misconfigured(error):
            raise StoreError(f"{what}: {one_line(error)}") from error
        raise failure(what, error) from error
    set_json_loads(loads, conn)
    _connections.open.add(conn)
    return conn


class _Connections:
    """This process's connections, whose sockets a forked child gives up (``_forks``): a
    session's advisory locks (run leases, caps' places, schedules) and an open transaction's
    row locks live as long as its socket is open, in the child too. Only the child's
    descriptor is blinded: no shutdown, no goodbye to the server, which would end the
    parent's session."""

    def __init__(self) -> None:
        self.open: weakref.WeakSet[Conn] = weakref.WeakSet()

    def lock_fds(self) -> list[int]:
        fds = []
        for conn in list(self.open):
            with contextlib.suppress(Exception):  # closed: its socket is gone already
                if not conn.closed:
                    fds.append(conn.pgconn.socket)
        return fds

    def forked(self) -> None:
        self.open.clear()  # the parent's; the child's own connections are added anew


_connections = _Connections()
_forks.hold(_connections)


class Unreadable:
    """A ``json`` cell that PostgreSQL took and orjson cannot decode: a lone surrogate escape
    (``"\\ud800"``), a number beyond a float (``1e400``), nesting deeper than 1024.

    psycopg decodes every cell of a result inside ``fetchall``: an error there would fail the
    whole result, every run of a claim or a listing with the one that carries it. Decoded to
    this instead, it fails only the item that uses it (``readable``), as damage."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<JSON wf cannot read: {self.reason}>"


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """A ``json`` cell, by orjson with the collector paused (a journal is one ``json_agg``:
    many events at once, see ``wf.store._decode``); ``Unreadable`` if orjson cannot decode
    it. The pause is inline, not ``collector_paused``: psycopg calls this for every cell, and
    a context manager cost a microsecond each."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        return Unreadable(one_line(error))
    finally:
        if paused:
            gc.enable()


def one_line(error: BaseException) -> str:
    """psycopg's message on one line: libpq's spans several (``server closed the connection
    unexpectedly`` / ``This probably means...``, a ``DETAIL:``), which would split a log
    line or a command's one-line error."""
    return " ".join(str(error).split())


def failure(what: str, error: psycopg.Error) -> StoreError:
    """The ``StoreError`` for psycopg's ``error`` in ``what`` (``PostgreSQL failed to …``).

    An ``OperationalError`` is the server not answering for now, not the statement's fault:
    a connection dropped or refused (SQLSTATE classes 08, 53 and 57: a terminated backend,
    ``too many connections``, a server shutting down or starting, an idle-session or statement
    timeout) or a lock timeout (55P03); so is a server that refuses writes for now, 25006
    (``read_only_sql_transaction``: a standby a failover left the address on, a database
    set ``default_transaction_read_only`` for a while), which passes as a restart does. It
    is ``StoreUnavailable``, which a worker tries again; anything else (a missing table, a
    refused value) is a plain ``StoreError``."""
    passing = isinstance(error, psycopg.OperationalError | psycopg.errors.ReadOnlySqlTransaction)
    if not passing:
        return StoreError(f"{what}: {one_line(error)}")
    found = StoreUnavailable(f"{what}: {one_line(error)}")
    found._refused = isinstance(error, psycopg.errors.ReadOnlySqlTransaction)
    return found


_MISCONFIGURED = (
    "does not exist",  # FATAL: database "x" / role "x" does not exist
    "password authentication failed",
    "no pg_hba.conf entry",
    "authentication failed",  # peer, ident, SCRAM
    "no password supplied",
)


def misconfigured(error: psycopg.Error) -> bool:
    """Whether a refused connection is the connection string's fault (a database or role that
    does not exist, credentials the server refuses), which no retry mends: a worker must say
    so at once, not wait for the server as it waits out a restart. psycopg gives no SQLSTATE
    for a failed connection, only the server's message."""
    return isinstance(error, psycopg.OperationalError) and any(
        words in str(error) for words in _MISCONFIGURED
    )


def refused_value(error: BaseException) -> bool:
    """Whether ``error`` (psycopg's, or the ``StoreError`` made of it) is a value of the
    statement refused (SQLSTATE class 22, a data exception, or psycopg's own refusal before
    sending: a NUL in a text value; or 23502, a null where a column takes none: a record with
    no workflow): nothing was written, and the same values would be refused again."""
    cause = error if isinstance(error, psycopg.Error) else error.__cause__
    return isinstance(cause, psycopg.DataError | psycopg.errors.NotNullViolation)


def refused_write(run_id: str, error: BaseException) -> StoreCorrupted:
    """A write of the run's own values that PostgreSQL refused (``refused_value``): the run's
    damage (a record that says what no save can store), not a failure of the store."""
    reason = one_line(error.__cause__ or error)
    return StoreCorrupted(f"wf_runs row {run_id!r}: PostgreSQL refused the run's write ({reason})")


def readable(value: Any, where: str) -> Any:
    """``value`` as decoded; ``StoreCorrupted`` naming ``where`` if it is ``Unreadable``."""
    if isinstance(value, Unreadable):
        raise StoreCorrupted(f"{where}: not JSON wf can read ({value.reason})")
    return value


def looks_alive(conn: Conn) -> bool:
    """Whether an idle connection is still usable, without a round trip.

    An idle connection (not listening) has nothing to read: anything readable is the server's
    goodbye, sent when its backend was terminated (a server restart, ``pg_terminate_backend``,
    an idle timeout). Without this check, every pooled connection killed while idle failed
    the next operation that took it; now it is dropped and another one used.
    """
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


def abandon(conn: Conn) -> None:
    """Close a connection without awaiting (its event loop may be gone)."""
    with contextlib.suppress(Exception):
        conn.pgconn.finish()


CLOSE_GRACE = 5.0
"""Seconds ``close_when_idle`` waits for an operation in flight before cutting it short."""


async def close_when_idle(conn: Conn, grace: float = CLOSE_GRACE) -> None:
    """Close ``conn`` once no task is in the middle of an operation on it.

    psycopg's ``close`` frees the libpq connection at once, without taking the connection's
    lock: an operation paused on it in another task resumes on freed memory and aborts the
    interpreter (seen in CI as ``Fatal Python error: Aborted`` in an unlock round trip that
    was in flight while its store closed). Every operation holds ``conn.lock``, so closing
    under it is safe. One that does not finish within ``grace`` seconds (a server that does
    not answer) has its socket shut down, which makes it fail at once, and is then waited for.
    """
    if conn.closed:
        return
    try:
        async with asyncio.timeout(grace):
            await conn.lock.acquire()
    except TimeoutError:
        _shut_down(conn)
        await conn.lock.acquire()
    try:
        with contextlib.suppress(Exception):
            await conn.close()
    finally:
        conn.lock.release()


def _shut_down(conn: Conn) -> None:
    """Cut the connection's socket (not free it): whatever waits on it fails promptly."""
    with contextlib.suppress(Exception):
        duplicate = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


CLOSED = "the PostgreSQL store is closed"
"""The error of an operation begun once its store closed (a query, a lease taken)."""


REFUSED_WAIT = 10.0
"""Seconds an operation refused a new connection waits for one of its pool's open ones."""


class Pool:
    """At most ``size`` autocommit connections, opened on demand and reused."""

    def __init__(self, conninfo: str, label: str, size: int) -> None:
        self._conninfo = conninfo
        self._label = label
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Conn] = []
        self._closed = False
        self.pids: set[int] = set()
        """Server process ids of this pool's open connections: a notification sent from one
        of them is this process's own (``Signals`` has woken its waiters already)."""
        self._pid_of: dict[Conn, int] = {}
        self._given_back = asyncio.Event()
        """Set when a connection goes back to the idle list (``_open`` waits for one)."""
        self.prepare: Callable[[Conn], Awaitable[None]] | None = None
        """Run on each connection opened from now on, before its first use (a failure closes
        it and fails the operation): the session sets it once the tables are checked."""

    @contextlib.asynccontextmanager
    async def connection(self, what: str) -> AsyncIterator[Conn]:
        """A connection for one operation; psycopg errors become ``StoreError`` naming ``what``
        (``StoreUnavailable`` for a dropped or refused connection, see ``failure``)."""
        async with self._slots:
            if self._closed:
                raise StoreError(CLOSED)
            conn = self._take_idle() or await self._open()
            try:
                yield conn
            except psycopg.Error as error:
                self._put_back(conn)
                raise failure(f"PostgreSQL failed to {what}", error) from error
            except BaseException:
                self._put_back(conn)
                raise
            self._put_back(conn)

    async def _open(self) -> Conn:
        """A new connection; if the server refuses it while others of this pool are open
        (``too many connections``: the server's ``max_connections`` is shared by every
        process), one of those once it is given back, within ``REFUSED_WAIT`` seconds."""
        try:
            conn = await connect(self._conninfo, self._label)
        except StoreUnavailable:
            given = await self._wait_given_back()
            if given is None:
                raise
            return given
        if self.prepare is not None:
            try:
                await self.prepare(conn)
            except BaseException as error:
                abandon(conn)
                if isinstance(error, psycopg.Error):
                    raise failure("PostgreSQL failed to check wf's tables", error) from error
                raise
        self._pid_of[conn] = conn.info.backend_pid
        self.pids.add(self._pid_of[conn])
        return conn

    async def _wait_given_back(self) -> Conn | None:
        """One of this pool's open connections once another operation gives it back (None
        if none is open, or none comes within ``REFUSED_WAIT`` seconds)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REFUSED_WAIT):
                while self._pid_of:
                    conn = self._take_idle()
                    if conn is not None:
                        return conn
                    self._given_back.clear()
                    await self._given_back.wait()
        return None

    def _take_idle(self) -> Conn | None:
        """The most recently used idle connection that still looks alive, if any."""
        while self._idle:
            conn = self._idle.pop()
            if looks_alive(conn):
                return conn
            self._drop(conn)
        return None

    def _drop(self, conn: Conn) -> None:
        # Its process id is forgotten first: the server may give it to another session.
        pid = self._pid_of.pop(conn, None)
        if pid is not None:
            self.pids.discard(pid)
        abandon(conn)
        self._given_back.set()  # one fewer open: a wait for one may be over

    def _put_back(self, conn: Conn) -> None:
        # Only a connection that is idle and healthy is reused: after a cancellation in the
        # middle of a query its state is unknown, and a fresh connection is cheap in comparison.
        healthy = not conn.closed and not conn.broken
        if healthy and conn.info.transaction_status == TransactionStatus.IDLE and not self._closed:
            self._idle.append(conn)
            self._given_back.set()
        else:
            self._drop(conn)

    async def close(self) -> None:
        """Close idle connections; connections in use are closed when given back."""
        self._closed = True
        idle, self._idle = self._idle, []
        self.pids.clear()
        self._pid_of.clear()
        for conn in idle:
            await close_when_idle(conn)

    def abandon(self) -> None:
        """Drop every idle connection without awaiting (the event loop changed)."""
        self._closed = True
        idle, self._idle = self._idle, []
        self.pids.clear()
        self._pid_of.clear()
        for conn in idle:
            abandon(conn)
