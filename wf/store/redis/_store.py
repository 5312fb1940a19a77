"""``RedisStore``: the ``Store`` contract on Redis, for teams whose infrastructure is Redis.

See ``docs/redis.md`` for the keys, leases, the queue, notifications and durability.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import math
import re
import secrets
import time
import urllib.parse
import weakref
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any, TypeVar

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ConnectionError,
    MasterDownError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from wf._exceptions import (
    RunNotFound,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    StoreVersionError,
    UsageError,
)
from wf.store._base import (
    Deleted,
    Event,
    HookRecord,
    InboxMessage,
    Lease,
    LogEntry,
    Pins,
    Progress,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleLock,
    Slot,
    Store,
    StoreStats,
    Tombstone,
    WebhookDelivery,
    stamp_seq,
)
from wf.store._faults import named_place
from wf.store.redis import _decode, _scripts
from wf.store.redis._batch import Batcher
from wf.store.redis._holder import Holder
from wf.store.redis._lease import Keeper, RedisLease, queue_tag, record_args
from wf.store.redis._signals import SCHEDULES, Signals, _wait
from wf.store.redis._taking import give_back, holding, taking, uncount, unlock
from wf.store.redis._wire import packed

log = logging.getLogger("wf.store.redis")

T = TypeVar("T")

VERSION = 2
"""The key layout this code writes (``<prefix>format``); a newer one is refused, an older one
upgraded when opened (``_scripts.UPGRADE``). 2: schedules indexed by next fire (``snext``)."""

SCHEDULE_LOOK = 60.0
"""Seconds (of the ``now`` that ``due_schedules`` is given) between two looks at every schedule
by a worker's pass: a wf of format 1 that was running when the store was upgraded saves its
schedules without their place in ``snext``, where a pass reads alone; the look indexes them
(and so fires them, within this delay) and names them in a warning."""

SCHEDULE_SLICE = 100
"""Schedules one script of a look at every schedule reads (``HSCAN``'s ``COUNT``, a hint; the
members of ``snext`` one script checks are ``4 *`` this, each a lookup with no decoding): a
script holds the whole server while it runs, so the look is many short scripts, not one whose
length grows with the schedules (see docs/redis.md)."""

CLAIM_BUDGET = 10_000
"""Due runs one claim looks at, at most (held and waiting ones included)."""

REDIAL_EVERY = 1.0
"""Seconds between two makings again of the connections on a refusal that may mean "the wrong
server": while the address still reaches the old server (a DNS name not moved yet), every
write is refused, and each making again opened new subscriptions and woke every waiter."""

ROLE_CHECK_EVERY = 5.0
"""Seconds a pooled connection is used before it asks its server's role again (``ROLE``, one
round trip, only when taken from the pool after that long): a process that only reads is
refused nothing by the old primary a failover left up (a replica now), and read it for as long
as the connection lived. A connection just made reached where the address points now: not
asked."""


_WARNED: set[str] = set()
"""Servers whose durability this process has warned about (once each)."""


def describe(url: str) -> str:
    """The URL without its password (for messages and ``wf info``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=user + host))


class _RedialingPool(aioredis.BlockingConnectionPool):
    """A pool whose connections can all be made again (``redial``) without closing one that
    another task may be using: each connection made before is closed and opened again by the
    task that takes it next, once it is its own.

    A connection taken ``ROLE_CHECK_EVERY`` seconds or more after it last asked asks its
    server's role first: a replica's (a failover left the old primary up, the address now
    elsewhere) is made again at once, and once a connection made again reaches a primary,
    ``moved`` is called (the store makes every other connection again, as on a ``READONLY``
    refusal). Writers hear of a failover from the refusals of their writes; a process that
    only reads hears of it this way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dialled = 0
        self._dialled_in: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.moved: Callable[[], None] | None = None
        self._asks = True
        """False once the server refused ``ROLE`` (an ACL, a renamed command): not asked again."""

    def redial(self) -> None:
        self._dialled += 1

    async def ensure_connection(self, connection: Any) -> None:
        now = time.monotonic()
        if self._dialled_in.get(connection, self._dialled) != self._dialled:
            await connection.disconnect()
            connection.wf_asked_at = now  # made again now: where the address points
        # An attribute, not a weak dictionary: this is every command's path. A connection
        # redis-py made again by itself (found stale) may ask once more than it needs.
        asked = getattr(connection, "wf_asked_at", None)
        if asked is None:
            connection.wf_asked_at = asked = now  # a new connection
        await super().ensure_connection(connection)
        self._dialled_in[connection] = self._dialled
        if self._asks and now - asked >= ROLE_CHECK_EVERY:
            connection.wf_asked_at = now
            if await self._primary(connection) is False:
                # Made again: where the address points now (the old server while a DNS name
                # has not moved yet: asked again later). A primary there: the others follow.
                await connection.disconnect()
                await super().ensure_connection(connection)
                if await self._primary(connection) and self.moved is not None:
                    self.moved()

    async def _primary(self, connection: Any) -> bool | None:
        """Whether the connection's server is a primary (None: it does not say). A connection
        that fails meanwhile is made again, as redis-py makes one found stale."""
        try:
            await connection.send_command("ROLE")
            role = await connection.read_response()
        except BusyLoadingError:  # an answer (a ``ConnectionError`` in redis-py): loading
            return None
        except ResponseError as error:
            # Not for this client (an ACL, a renamed command): not asked again. Any other
            # refusal (``BUSY``) is the server's for now.
            if isinstance(error, NoPermissionError) or "unknown command" in str(error).lower():
                self._asks = False
            return None
        except (ConnectionError, TimeoutError, OSError):
            await connection.disconnect()
            await super().ensure_connection(connection)
            return None
        if not isinstance(role, list) or not role:
            return None
        return _text(role[0]) == "master"


class RedisStore(Store):
    """Runs, journals, the queue, hooks and streams in Redis, shared by any number of processes.

    ``url``: ``redis://[user:password@]host:port/db`` (``rediss://`` for TLS). ``prefix``: every
    key starts with it (``wf:`` by default), so several projects share one server.
    ``lease_ttl``: seconds a lease (a slot, a schedule lock) outlives a process that stopped
    renewing it; a live holder renews every third of it. ``pool_size``: connections for
    commands (calls beyond it wait for one), besides one per pub/sub subscription.
    """

    claims_lane_heads = True
    filters_deployments = True

    def __init__(
        self, url: str, *, prefix: str = "wf", lease_ttl: float = 15.0, pool_size: int = 20
    ) -> None:
        if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
            raise UsageError(f"Redis key prefix must be a non-empty word, not {prefix!r}")
        if not lease_ttl > 0:
            raise UsageError(f"lease_ttl must be a positive number of seconds, not {lease_ttl!r}")
        self.url = url
        self.prefix = prefix if prefix.endswith(":") else prefix + ":"
        self.lease_ttl = float(lease_ttl)
        self.pool_size = max(1, int(pool_size))
        self.location = f"{describe(url)} (keys {self.prefix}*)"
        self.client_name = "wf-" + secrets.token_hex(4)
        """The name of this instance's connections in ``CLIENT LIST`` (its holder connection's:
        this and ``-lease``)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: aioredis.Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self._signals = Signals(self._connect, self.prefix)
        self._keeper = Keeper(self)
        self._holder = Holder(self, self._holder_lost)
        self._batcher = Batcher(self)
        self._checked = False
        self._redial = False
        """A refusal that may mean "the wrong server" came (``_WRONG_SERVER``): the pool's idle
        connections are dropped before the next command (``_ready``)."""
        self._redialled_at = -math.inf
        """When (``time.monotonic``) the connections were last made again (``REDIAL_EVERY``)."""
        self._look_at: float | None = None
        """The ``now`` from which ``due_schedules`` next looks at every schedule
        (``SCHEDULE_LOOK``); None: at its first call."""

    def __repr__(self) -> str:
        return f"RedisStore({describe(self.url)!r}, prefix={self.prefix!r})"

    # -- connection ---------------------------------------------------------------------------

    def _connect(self) -> aioredis.Redis:
        # No retries: a write whose reply was lost may have been applied, and sent again it
        # would append its events twice. A pooled connection the server closed while idle is
        # replaced when taken from the pool (redis-py sees the end of its stream) instead.
        # A blocking pool: a burst of calls (a gather of a hundred starts) waits for one of
        # ``pool_size`` connections instead of failing with "too many connections".
        try:
            pool = _RedialingPool.from_url(
                self.url,
                max_connections=self.pool_size,
                timeout=30,
                client_name=self.client_name,
                retry=Retry(NoBackoff(), 0),
                socket_connect_timeout=10,
                socket_keepalive=True,
            )
            pool.connection_class = packed(pool.connection_class)
            pool.moved = self._drop_connections
            return aioredis.Redis.from_pool(pool)  # closing the client closes its pool
        except ValueError as error:
            raise UsageError(f"bad Redis URL {describe(self.url)!r}: {error}") from None

    def _connect_single(self, name: str, read_timeout: float | None) -> aioredis.Redis:
        """A client of one connection of its own (the holder connection, ``_holder``), whose
        reads wait up to ``read_timeout`` seconds (None: for ever; redis-py's default would cut
        its blocking reads short)."""
        return aioredis.Redis.from_url(
            self.url,
            single_connection_client=True,
            client_name=name,
            socket_timeout=read_timeout,
            retry=Retry(NoBackoff(), 0),
            socket_connect_timeout=10,
            socket_keepalive=True,
        )

    def _holder_lost(self, holder: str, why: str) -> None:
        self._keeper.lose_holder(holder, why)

    def _holder_failed(self, error: BaseException) -> None:
        """The holder connection's wait failed with ``error``. A primary demoted to a replica
        ends it (``UNBLOCKED``), and refuses it on a replica (``READONLY``): the address may
        have moved to a new primary (a failover behind a DNS name or a proxy), so every
        connection is made again. Only this connection may hear of it: an idle worker's
        claims, finding nothing due on the old server, write nothing there to be refused."""
        if wrong_server(error) or demoted(error):
            self._drop_connections()

    async def open(self) -> None:
        """Connect, check the key layout's format and the server's durability, and start
        listening now rather than on first use. Raises ``StoreError`` if the server cannot be
        reached, ``StoreVersionError`` if its keys were written by a newer wf."""
        await detached(self._ready())
        await self._signals.listen(self._signals.queue_channel)

    async def _ready(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._client is None:
            self._signals.abandon()
            self._client = self._connect()
            self._scripts = {}
            self._signals = Signals(self._connect, self.prefix)
            self._keeper = Keeper(self)
            self._holder = Holder(self, self._holder_lost)
            self._batcher = Batcher(self)
            self._loop = loop
            self._checked = False
            self._redial = False
        if self._redial:
            # A failover may have moved the address (a DNS name, a proxy) to a new primary:
            # the pooled connections stay on the old server, now a replica, so each is made
            # again (as redis-py's Sentinel pool does on ``READONLY``).
            # Not closed here: a connection idle now may be taken by another task before the
            # close, which would cut its command. Each is made again by the task taking it.
            self._redial = False
            pool = self._client.connection_pool
            if isinstance(pool, _RedialingPool):
                pool.redial()
        if not self._checked:
            await self._check_format(self._client)
            self._checked = True
        return self._client

    def _format_number(self, key: str, raw: bytes | str | None) -> int:
        try:
            return int(raw or b"")
        except ValueError:
            raise StoreCorrupted(
                f"Redis store at {self.location}: {key} holds {raw!r}, not a format number"
            ) from None

    async def _check_format(self, client: aioredis.Redis) -> None:
        key = self.prefix + "format"

        async def read() -> Any:
            # Read first: a server refusing writes (out of memory) still answers what reads.
            raw = await client.get(key)
            if raw is None:
                await client.set(key, VERSION, nx=True)
                raw = await client.get(key)
            return raw

        try:
            try:
                raw = await read()
            except (ConnectionError, TimeoutError, OSError):
                raw = await read()  # idempotent: once more, on a fresh connection, as ``_call``
        except ResponseError as error:  # it answered: reachable, but it refused
            raise self._failure(error, key) from None
        except AuthenticationError as error:
            # The URL's fault, which no retry mends: said at once, not waited out as a restart.
            raise StoreError(
                f"Redis at {describe(self.url)} refused the credentials: {error}"
            ) from None
        except (RedisError, OSError) as error:
            raise StoreUnavailable(f"cannot reach Redis at {describe(self.url)}: {error}") from None
        version = self._format_number(key, raw)
        if version < VERSION:
            version = await self._upgrade(client)
        if version > VERSION:
            raise StoreVersionError(
                f"Redis store at {self.location} was written by a newer version of wf (format "
                f"{version}; this wf knows format {VERSION}); upgrade wf"
            )
        await self._check_durability(client)

    async def _upgrade(self, client: aioredis.Redis) -> int:
        """Bring a store of an older key layout up to this one (one script, idempotent: sent
        again on a fresh connection when the first failed); the store's format after it."""
        key = self.prefix + "format"

        async def send() -> Any:
            return await client.eval(_scripts.UPGRADE, 0, self.prefix, str(VERSION))

        try:
            try:
                found = await send()
            except (ConnectionError, TimeoutError, OSError):
                found = await send()
        except (RedisError, OSError) as error:
            raise self._failure(error) from None  # damage names its key itself
        if found is None:
            return self._format_number(key, None)
        after, before = (int(number) for number in found)
        if after != before:
            # Said once, by the process that upgraded it: wf processes of the older format
            # still running go on writing it the old way (see ``SCHEDULE_LOOK``).
            log.warning(
                "upgraded the Redis store at %s from format %d to %d; upgrade every wf "
                "process on it (see docs/redis.md)", self.location, before, after,
            )  # fmt: skip
        return after

    async def _check_durability(self, client: aioredis.Redis) -> None:
        where = describe(self.url)
        if where in _WARNED:
            return
        _WARNED.add(where)
        try:
            found = {**await client.config_get("append*"), **await client.config_get("maxmemory*")}
        except (RedisError, OSError):
            return  # a managed server that forbids CONFIG: nothing to say
        settings = {_text(k): _text(v) for k, v in found.items()}
        policy = settings.get("maxmemory-policy", "noeviction")
        if settings.get("maxmemory", "0") != "0" and policy != "noeviction":
            log.warning(
                "warning: Redis at %s may evict keys when full (maxmemory-policy %s): an "
                "evicted run is lost with its journal; set maxmemory-policy noeviction "
                "(see docs/redis.md)",
                where,
                policy,
            )
        if settings.get("appendonly") == "yes" and settings.get("appendfsync") == "always":
            return
        log.warning(
            "warning: Redis at %s can lose acknowledged writes (appendonly %s, appendfsync %s): "
            "a crash of the server may make a step run again; set appendonly yes and "
            "appendfsync always for the durability of the other stores (see docs/redis.md)",
            where,
            settings.get("appendonly", "?"),
            settings.get("appendfsync", "?"),
        )

    def _key(self, *parts: str) -> str:
        return self.prefix + "".join(parts)

    async def _eval(self, script: str, *args: Any, again: bool = False) -> Any:
        """Run a script. ``again``: the script is idempotent, so it is sent once more when the
        connection failed (the first may or may not have been applied)."""
        return await detached(self._eval_now(script, args, again))

    async def _eval_now(self, script: str, args: Sequence[Any], again: bool) -> Any:
        client = await self._ready()
        found = self._script(client, script)

        async def send() -> Any:
            try:
                return await found(args=[self.prefix, *args])
            except NoScriptError:
                # The server's script cache was emptied (``SCRIPT FLUSH``, a restart, a
                # failover) between the load and the call: the script did not run, so it is
                # sent whole, which needs no cache.
                return await client.eval(script, 0, self.prefix, *args)

        try:
            try:
                return await send()
            except (ConnectionError, TimeoutError, OSError):
                if not again:
                    raise
                return await send()  # on a fresh connection
        except (RedisError, OSError) as error:
            raise self._failure(error) from error

    def _script(self, client: aioredis.Redis, script: str) -> AsyncScript:
        found = self._scripts.get(script)
        if found is None:
            found = self._scripts[script] = client.register_script(script)
        return found

    def _failure(self, error: BaseException, key: str | None = None) -> StoreError:
        """A Redis error as this store reports it: ``StoreCorrupted`` for a value of the wrong
        type or form (``damaged``; ``key``: the key the command was about, when one), which no
        retry mends; ``StoreUnavailable`` for a connection that dropped, was refused or timed
        out, and for the server refusing the command for now (``refused_for_now``: out of
        memory, a read-only replica, busy or loading): a worker tries again; ``StoreError``
        for anything else."""
        found = damaged(error)
        refusal = refused_for_now(error)
        failed: StoreError
        if found is not None:
            failed = StoreCorrupted(found if key is None else f"{key}: {found}")
        elif refusal is not None:
            failed = StoreUnavailable(f"Redis at {describe(self.url)} {refusal}")
            failed._refused = True
            if wrong_server(error):
                self._drop_connections()
        elif isinstance(error, ConnectionError | TimeoutError | OSError):
            failed = StoreUnavailable(f"Redis at {describe(self.url)} failed: {_said(error)}")
        else:
            failed = StoreError(f"Redis at {describe(self.url)} failed: {_said(error)}")
        failed.__cause__ = error
        return failed

    def _drop_connections(self) -> None:
        """The pool's connections are made again: those in use when released, the idle ones
        before the next command (``_ready``); and the subscriptions, at once."""
        client = self._client
        now = time.monotonic()
        if client is None or now - self._redialled_at < REDIAL_EVERY:
            return
        self._redialled_at = now
        self._signals.redial()
        self._redial = True
        for connection in list(client.connection_pool._in_use_connections):
            connection.mark_for_reconnect()  # type: ignore[no-untyped-call]

    async def _send_scripts(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Idempotent script calls in one pipeline (``Batcher``): each call's result, or its
        error as an exception object; sent once more whole if the connection failed."""
        client = await self._ready()

        async def send() -> list[Any]:
            async with client.pipeline(transaction=False) as pipe:
                for script, args in calls:
                    await self._script(client, script)(args=[self.prefix, *args], client=pipe)
                results = list(await pipe.execute(raise_on_error=False))
            missed = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
            if missed:
                # The script cache was emptied after the pipeline loaded its scripts: those
                # calls did not run; they are sent again whole (as ``_eval_now``).
                async with client.pipeline(transaction=False) as pipe:
                    for i in missed:
                        script, args = calls[i]
                        pipe.eval(script, 0, self.prefix, *args)
                    for i, result in zip(
                        missed, await pipe.execute(raise_on_error=False), strict=True
                    ):
                        results[i] = result
            return results

        try:
            try:
                return await send()
            except (ConnectionError, TimeoutError, OSError):
                return await send()
        except (RedisError, OSError) as error:
            raise self._failure(error) from error

    async def _call(self, name: str, *args: Any) -> Any:
        """One command; reads, idempotent writes and writes whose second application does no
        harm only (``INCR`` of the creation sequence: a gap): it is sent again on a fresh
        connection when the first failed."""
        return await detached(self._call_now(name, *args))

    async def _call_now(self, name: str, *args: Any) -> Any:
        client = await self._ready()
        try:
            try:
                return await getattr(client, name)(*args)
            except (ConnectionError, TimeoutError, OSError):
                return await getattr(client, name)(*args)
        except (RedisError, OSError) as error:
            raise self._failure(error, _text(args[0]) if args else None) from error

    async def _pipe(self, *commands: tuple[Any, ...], each: bool = False) -> list[Any]:
        """Commands in one ``MULTI``/``EXEC``: one consistent view. A command's own error (a
        key of another type) is raised as ``_call`` raises it, naming the command's key;
        ``each``: it is that command's result instead, as an exception object."""
        return await detached(self._pipe_now(commands, each))

    async def _pipe_now(self, commands: Sequence[tuple[Any, ...]], each: bool) -> list[Any]:
        client = await self._ready()

        async def send() -> list[Any]:
            async with client.pipeline(transaction=True) as pipe:
                for name, *args in commands:
                    getattr(pipe, name)(*args)
                return list(await pipe.execute(raise_on_error=False))

        try:
            try:
                found = await send()
            except (ConnectionError, TimeoutError, OSError):
                found = await send()  # reads and idempotent writes only, as ``_call``
        except (RedisError, OSError) as error:
            raise self._failure(error) from error
        if not each:
            for (_, *args), result in zip(commands, found, strict=True):
                if isinstance(result, Exception):
                    raise self._failure(result, _text(args[0]) if args else None) from result
        return found

    # -- runs -----------------------------------------------------------------------------

    async def create_run(
        self, record: RunRecord, events: Sequence[Event] = (), *, explicit: bool = False
    ) -> bool:
        # The creation number first (a number lost to a creation that finds the id taken
        # leaves a gap, never a repeat), stamped in the record and its run_started event.
        seq = await self._next_seq()
        stamped = record.copy()
        events = stamp_seq(stamped, events, seq)
        encoded = [orjson.dumps(event) for event in events]
        # Sent again when the connection fails: the number is this creation's alone, so the
        # script answers "created" to a second attempt that finds the run made with it (the
        # first attempt's reply was lost), and "taken" to any other creation of the id.
        made = await self._eval(
            _scripts.CREATE_EXPLICIT if explicit else _scripts.CREATE,
            record.id,
            *record_args(stamped),
            str(seq),
            *encoded,
            again=True,
        )
        if made:
            record.seq = seq
        return bool(made)

    async def _next_seq(self) -> int:
        key = self._key("seq")
        try:
            # Sent again when the connection fails: a number the lost attempt took is a gap
            # in the sequence, never a repeat.
            return int(await self._call("incr", key))
        except StoreCorrupted as error:
            # A value that is not an integer (or a key of another type): damage, which no
            # retry mends. The server refusing the write (out of memory, a read-only replica)
            # is no such thing: a ``StoreUnavailable``, raised as it is.
            raise StoreCorrupted(
                f"{key}: the creation sequence is not a number ({_said(error.__cause__ or error)});"
                " set it to the highest creation number in the store (`wf store verify` says"
                " which)"
            ) from None

    async def get_run(self, run_id: str) -> RunRecord:
        self._signals.reading_run(run_id)
        raw = await self._call("hget", self._key("r:", run_id), "rec")
        if raw is None:
            raise RunNotFound(run_id)
        return self._record(run_id, raw)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        limit: int = 50,
        before: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> list[RunRecord]:
        self._signals.reading_runs()
        # Queue, group and deployment live only in the record: the script decodes it for
        # these filters (no index of its own, so such a listing reads what it passes over).
        fields = {
            name: value
            for name, value in (("queue", queue), ("group", group), ("deployment", deployment))
            if value is not None
        }
        wanted = None if not statuses else sorted({RunStatus(s).value for s in statuses})
        if parent_id is not None:
            keys = ["ix:p:" + parent_id]
        elif workflow is not None:
            keys = ["ix:w:" + workflow]
        elif wanted is not None:
            keys = ["ix:s:" + status for status in wanted]
        else:
            keys = ["ix:all"]
        out: list[RunRecord] = []
        cursor = ""
        if before is not None:
            found = await self._seq_of(before)
            if found is None:
                return out  # no such run ever existed
            cursor = found
        while len(out) < limit:
            found, cursor, bad = await self._eval(
                _scripts.LIST,
                orjson.dumps(keys),
                cursor,
                str(limit - len(out)),
                "5000",
                orjson.dumps(wanted),
                workflow or "",
                parent_id or "",
                orjson.dumps(fields),
                again=True,
            )
            self._note_damaged(list(zip(bad[::2], bad[1::2], strict=True)))
            pairs = zip(found[::2], found[1::2], strict=True)
            out += filter(None, (self._listed(_text(run_id), raw) for run_id, raw in pairs))
            cursor = _text(cursor)
            if not cursor:
                break
        return out

    def _listed(self, run_id: str, raw: bytes) -> RunRecord | None:
        """A listed run's record; None for a damaged one, noted in ``faults`` and left out:
        one damaged run never hides the others."""
        record: RunRecord | None = None
        with self.faults.contain("run", run_id, self.run_location(run_id)):
            record = self._record(run_id, raw)
        return record

    async def _seq_of(self, run_id: str) -> str | None:
        """The creation number of a run, or of a deleted run's tombstone; None if neither."""
        seq, tomb = await self._pipe(
            ("hget", self._key("r:", run_id), "seq"), ("hget", self._key("tomb"), run_id)
        )
        if seq is not None:
            return _text(seq)
        if tomb is not None:
            return str(_decode.tombstone(tomb, self._key("tomb"), run_id).seq)
        return None

    async def read_journal(self, run_id: str, start: int = 0) -> list[Event]:
        self._signals.reading_run(run_id)
        start = max(0, start)
        exists, events = await self._pipe(
            ("exists", self._key("r:", run_id)), ("lrange", self._key("j:", run_id), start, -1)
        )
        if not exists:
            raise RunNotFound(run_id)
        return _decode.events(events, self._key("j:", run_id), first=start)

    async def try_acquire(self, run_id: str) -> Lease | None:
        holder = await self._holder_id()
        found = await self._acquire(run_id, holder)
        if int(found[0]) == 0:
            # Held: by a process that died? Then its lease is taken over at once.
            suspects = self._holder.suspects([_text(found[1])])
            if suspects and await self._holder.find_dead(suspects):
                found = await self._acquire(run_id, holder)
        status = int(found[0])
        if status < 0:
            raise RunNotFound(run_id)
        if status == 0:
            return None
        return RedisLease(self, run_id, _text(found[1]), int(found[2]), int(found[3]))

    async def _holder_id(self) -> str:
        """This instance's holder id (a round trip only when its connection must be made)."""
        found = self._holder.current
        return found if found is not None else await detached(self._holder.ident())

    async def _acquire(self, run_id: str, holder: str) -> Any:
        # Sent again when the connection fails: the call word makes a second attempt take
        # again what a first, whose reply was lost, took. Not cancelled with its caller: what
        # it took is given back then (``_taking``).
        args = [
            run_id,
            str(self._ttl_ms()),
            holder,
            orjson.dumps(self._holder.dead),
            secrets.token_hex(4),
        ]
        return await taking(
            self,
            _scripts.ACQUIRE,
            args,
            lambda found: [(run_id, _text(found[1]))] if int(found[0]) == 1 else [],
        )

    def _ttl_ms(self) -> int:
        return max(1, int(self.lease_ttl * 1000))

    async def claim(
        self,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
        exclude: Collection[str] = (),
        held: set[str] | None = None,
        waiting: set[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[Lease]:
        """One script takes the leases of up to ``limit`` due runs in queue order, skipping
        held runs and runs waiting in their lane, and returns what their drivers read first."""
        if limit <= 0:
            return []
        self._signals.reading_queue()
        holder = await self._holder_id()
        tags = orjson.dumps(None if queues is None else [queue_tag(q) for q in queues])
        pins = _pins(deployments)

        async def look(limit: int, exclude: Collection[str]) -> Any:
            args = [
                repr(float(now)),
                str(limit),
                str(self._ttl_ms()),
                tags,
                orjson.dumps(list(exclude)),
                str(CLAIM_BUDGET),
                pins,
                holder,
                orjson.dumps(self._holder.dead),
                secrets.token_hex(4),  # sent again when the connection fails: see ``_acquire``
            ]
            return await taking(self, _scripts.CLAIM, args, lambda found: _tokens(found[0]))

        leased, held_ids, waiting_ids, holders, bad = await look(limit, exclude)
        try:
            self._note_damaged(bad)
            suspects = self._holder.suspects(_text(h) for h in holders)
            if suspects and len(leased) < limit and await self._holder.find_dead(suspects):
                # Runs held by processes that died: take them over now, not after their TTL.
                taken = {_text(found[0]) for found in leased}
                more, held_ids, waiting_ids, _, bad = await look(
                    limit - len(leased), {*exclude, *taken}
                )
                self._note_damaged(bad)
                leased = [*leased, *more]
            reads = [self._claimed(*found) for found in leased]
            damaged = [found for found, read in zip(leased, reads, strict=True) if read is None]
            if damaged:  # given back, untouched
                releases = give_back(self, _tokens(damaged))
                await asyncio.shield(asyncio.gather(*releases, return_exceptions=True))
        except BaseException:
            # Cancelled (or failed) with leases taken and no lease object made: none would
            # renew or release them, and their holder, this process, is alive (``_taking``).
            give_back(self, _tokens(leased))
            raise
        if held is not None:
            held.update(_text(i) for i in held_ids)
        if waiting is not None:
            waiting.update(_text(i) for i in waiting_ids)
        return [
            RedisLease(self, _text(found[0]), _text(found[1]), len(found[3]), read[0].seq, read)
            for found, read in zip(leased, reads, strict=True)
            if read is not None
        ]

    def _note_damaged(self, found: Sequence[Sequence[bytes]]) -> None:
        """Note the runs a script passed over as damaged (``[id, why]`` each): the worker
        leaves them alone from then on; ``wf store verify`` names them too."""
        for entry in found:
            if len(entry) > 2:  # ``[key, why, 'queue']``: a queue key of another type
                key = _text(entry[0])
                damage = StoreCorrupted(f"{_text(entry[1])}: its runs wait")
                self.faults.note("queue", key, key, damage)
                continue
            run = _text(entry[0])
            self.faults.note("run", run, self.run_location(run), StoreCorrupted(_text(entry[1])))

    def _claimed(
        self, run_id: bytes, token: bytes, raw: bytes, journal: list[bytes], inbox: list[bytes]
    ) -> tuple[RunRecord, list[Event], list[InboxMessage]] | None:
        """What the driver of a run a claim took reads first; None for a run that cannot be
        read (noted in ``faults``: the worker leaves it alone from then on, and the claim goes
        on with the others)."""
        read = None
        run = _text(run_id)
        with self.faults.contain("run", run, self.run_location(run)):
            read = (
                self._record(run, raw),
                _decode.events(journal, self._key("j:", run)),
                _decode.inbox(inbox, self._key("in:", run)),
            )
        return read

    def _record(self, run_id: str, raw: bytes | None) -> RunRecord:
        return _decode.record(raw, _decode.field_of(self.run_location(run_id), "rec"), run_id)

    # -- inbox and queue ------------------------------------------------------------------

    async def post(self, run_id: str, kind: str, data: dict[str, Any]) -> str:
        message_id = await self._eval(_scripts.POST, run_id, orjson.dumps([kind, data]))
        if message_id is None:
            raise RunNotFound(run_id)
        return _text(message_id)

    async def post_once(
        self, run_id: str, kind: str, data: dict[str, Any], delivery: WebhookDelivery
    ) -> WebhookDelivery | None:
        # Sent again when the connection failed under it: a repeat posts nothing.
        found = await self._eval(
            _scripts.POST_ONCE,
            run_id,
            orjson.dumps([kind, data]),
            delivery.id,
            orjson.dumps(delivery.to_json()),
            repr(float(delivery.at)),
            again=True,
        )
        if found is None:
            raise RunNotFound(run_id)
        posted, value = found
        if int(posted):
            return None
        try:
            return WebhookDelivery.from_json(orjson.loads(value))
        except ValueError as error:
            where = f"{self._key('deliveries')} {delivery.id!r}"
            raise StoreCorrupted(f"{where}: not a webhook delivery ({error})") from None

    async def read_inbox(self, run_id: str) -> list[InboxMessage]:
        self._signals.reading_run(run_id)
        exists, flat = await self._pipe(
            ("exists", self._key("r:", run_id)), ("hgetall", self._key("in:", run_id))
        )
        if not exists:
            raise RunNotFound(run_id)
        pairs = [x for item in flat.items() for x in item]
        return _decode.inbox(pairs, self._key("in:", run_id))

    async def cancels_waiting(self, run_ids: Collection[str]) -> set[str]:
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return set()
        self._signals.reading_runs()
        found = await self._pipe(
            *(("hvals", self._key("in:", run_id)) for run_id in ids), each=True
        )
        asked = set()
        for run_id, values in zip(ids, found, strict=True):
            if isinstance(values, Exception):
                continue  # a damaged inbox (a key of another type): the record's word stands
            for value in values:
                try:
                    kind = orjson.loads(value)[0]
                except (ValueError, TypeError, IndexError, KeyError):
                    continue  # damage: the run's own reads say so; the record's word stands
                if kind == "cancel":
                    asked.add(run_id)
                    break
        return asked

    async def due_runs(
        self,
        now: float,
        limit: int = 100,
        queues: Sequence[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[str]:
        self._signals.reading_queue()
        tags = None if queues is None else [queue_tag(q) for q in queues]
        found = await self._eval(
            _scripts.DUE,
            repr(float(now)),
            str(limit),
            orjson.dumps(tags),
            _pins(deployments),
            again=True,
        )
        return [_text(run_id) for run_id in found]

    async def next_due_at(
        self, after: float | None = None, queues: Sequence[str] | None = None
    ) -> float | None:
        self._signals.reading_queue()
        tags = None if queues is None else [queue_tag(q) for q in queues]
        found = await self._eval(
            _scripts.NEXT_DUE,
            "" if after is None else repr(float(after)),
            orjson.dumps(tags),
            again=True,
        )
        return None if found is None else float(found)

    async def wait_for_activity(self, timeout: float) -> None:
        await detached(self._ready())
        await self._signals.wait_activity(timeout)

    async def wait_for_change(self, timeout: float) -> None:
        await detached(self._ready())
        await self._signals.wait_change(timeout)

    def watch_inbox(self, run_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Called back on every announcement of the run on the queue channel (a post makes
        one, heard by every instance, this one included) and when the subscription is made
        again. Watching needs the instance's client on this loop (a run's driver has it);
        without it, nothing is heard."""
        if self._loop is not asyncio.get_running_loop() or self._client is None:
            return super().watch_inbox(run_id, callback)
        return self._signals.watch_inbox(run_id, callback)

    async def wait_for_run(self, run_id: str, timeout: float) -> None:
        await detached(self._ready())
        # Watch first, then check the run exists: a change in between is not missed.
        event = await self._signals.watch_run(run_id)
        if not await self._call("exists", self._key("r:", run_id)):
            raise RunNotFound(run_id)
        if event is not None:
            await _wait(event, timeout)

    # -- lanes, slots, rates ---------------------------------------------------------------

    async def lane_ahead(self, lane: str, run_id: str, limit: int) -> list[str]:
        gk = self._key("g:", lane)
        # The run's place and its member in the lane key, in one view: a run not in its lane
        # key (the key deleted or evicted) cannot say which runs are ahead of it (one may be
        # running), as the claim says (``CLAIM``); a run that ended meanwhile has no place.
        # The key's error is the run's only when it has a place (an ended run is in no lane).
        place, member = await self._pipe(
            ("hget", self._key("r:", run_id), "lane"), ("zscore", gk, run_id), each=True
        )
        if isinstance(place, Exception):
            raise self._failure(place, self._key("r:", run_id)) from place
        if not place:
            return []
        if isinstance(member, Exception):
            raise self._failure(member, gk) from member
        try:
            number = float(place)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):  # a stray write (ZRANGEBYSCORE would refuse it)
            where = _decode.field_of(self._key("r:", run_id), "lane")
            raise StoreCorrupted(f"{where}: not a place in a lane ({_decode.field_name(place)!r})")
        if member is None:
            raise StoreCorrupted(
                f"{_decode.field_name(gk)}: run {run_id} is not in its lane (the key deleted?):"
                " the lane waits until wf store verify puts its runs back"
            )
        found = await self._call("zrangebyscore", gk, "-inf", f"({number!r}", 0, limit)
        return [_text(x) for x in found]

    async def probe_write(self) -> None:
        # A key of the store's own, set with a short life, then deleted: a server refusing
        # writes refuses the SET; a DEL lost leaves a key that expires by itself.
        key = self._key("probe:", secrets.token_hex(8))
        await self._call("set", key, b"1", 10)
        await self._call("delete", key)

    async def try_slot(self, name: str, capacity: int) -> Slot | None:
        token = secrets.token_hex(8)
        # Not cancelled with its caller: a place taken then is given back (``_taking``).
        args = [name, str(capacity), token, str(self._ttl_ms())]

        def hand_back(place: Any) -> None:
            if int(place) >= 0:
                unlock(self, f"slot:{name}:{int(place)}", token, "cq")

        index = int(await holding(self._eval_now(_scripts.TRY_SLOT, args, True), hand_back))
        if index < 0:
            return None
        key = f"slot:{name}:{index}"
        self._keeper.hold(key, token)
        return _RedisSlot(self, key, token)

    async def slots_taken(self, name: str, capacity: int) -> int:
        return int(await self._eval(_scripts.SLOTS_TAKEN, name, str(capacity), again=True))

    async def try_rate(self, name: str, n: int, window: float, now: float) -> float | None:
        # Not cancelled with its caller (``_taking``): a start counted for a caller cancelled
        # before it heard is taken back when the answer comes, as no run started with it. The
        # token makes the call safe to send again (a start counted once).
        token = secrets.token_hex(8)
        args = [name, str(n), repr(float(now - window)), repr(float(now)), "1", token]

        def hand_back(oldest: Any) -> None:
            if oldest is None:
                uncount(self, name, token)

        oldest = await holding(self._eval_now(_scripts.TRY_RATE, args, True), hand_back)
        return None if oldest is None else float(oldest) + window

    async def rate_retry_at(self, name: str, n: int, window: float, now: float) -> float | None:
        oldest = await self._eval(
            _scripts.TRY_RATE,
            name,
            str(n),
            repr(float(now - window)),
            repr(float(now)),
            "0",
            "",
            again=True,
        )
        return None if oldest is None else float(oldest) + window

    # -- hooks ----------------------------------------------------------------------------

    async def register_hook(self, hook: HookRecord) -> str | None:
        encoded = orjson.dumps(dataclasses.asdict(hook))
        owner = await self._eval(
            _scripts.REGISTER_HOOK, hook.token, hook.run_id, encoded, again=True
        )
        return None if owner is None else _text(owner)

    async def get_hook(self, token: str) -> HookRecord | None:
        raw = await self._call("hget", self._key("hooks"), token)
        return None if raw is None else _decode.hook(raw, self._key("hooks"), token)

    async def release_hook(self, token: str, run_id: str) -> None:
        await self._eval(_scripts.RELEASE_HOOK, token, run_id, again=True)

    async def save_delivery(self, delivery: WebhookDelivery) -> None:
        """``deliveries`` (id -> JSON) and ``delivered`` (ids by time), set only if absent."""
        encoded = orjson.dumps(delivery.to_json())
        await self._pipe(
            ("hsetnx", self._key("deliveries"), delivery.id, encoded),
            ("zadd", self._key("delivered"), {delivery.id: delivery.at}, True),
        )

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, WebhookDelivery]:
        keys = list(dict.fromkeys(delivery_ids))
        if not keys:
            return {}
        values = await self._call("hmget", self._key("deliveries"), keys)
        found = {}
        for key, raw in zip(keys, values, strict=True):
            if raw is None:
                continue
            try:
                found[key] = WebhookDelivery.from_json(orjson.loads(raw))
            except ValueError as error:
                where = f"{self._key('deliveries')} {key!r}"
                raise StoreCorrupted(f"{where}: not a webhook delivery ({error})") from None
        return found

    async def prune_deliveries(self, before: float) -> int:
        old = await self._call("zrangebyscore", self._key("delivered"), "-inf", f"({before!r}")
        if not old:
            return 0
        await self._pipe(
            ("hdel", self._key("deliveries"), *old), ("zrem", self._key("delivered"), *old)
        )
        return len(old)

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        key = self._key("hooks")
        found: list[tuple[Any, Any]] = []
        try:
            if run_id is None:
                found = list((await self._call("hgetall", key)).items())
            else:
                tokens = sorted(await self._call("smembers", self._key("rh:", run_id)))
                values = await self._call("hmget", key, tokens) if tokens else []
                found = list(zip(tokens, values, strict=True))
        except StoreCorrupted as error:
            # The hooks hash (or the run's set of tokens) of another type, a stray write's:
            # named once (the key, as ``_failure`` says it), and no hook listed from it, rather
            # than failing the listing or the run's page.
            named = named_place(error)
            self.faults.note("hooks", run_id or named, named, error)
        hooks = []
        for name, raw in found:
            token = _decode.field_name(name)
            if raw is None:
                continue
            # A damaged hook is left out (noted once): the others are still listed.
            with self.faults.contain("hook", token, _decode.field_of(key, token)):
                hooks.append(_decode.hook(raw, key, token))
        return [h for h in hooks if run_id is None or h.run_id == run_id]

    # -- streams and logs -------------------------------------------------------------------

    async def read_chunks(
        self, run_id: str, stream: str, start: int = 0, *, max_bytes: int | None = None
    ) -> tuple[list[bytes], bool]:
        self._signals.reading_run(run_id)
        if max_bytes is not None:
            found = await self._eval(
                _scripts.CHUNK_BATCH, run_id, stream, max(0, start), max_bytes, _MOST_CHUNKS
            )
            if found is None:
                raise RunNotFound(run_id)
            return [bytes(c) for c in found[1:]], found[0] == 1
        chunks_key, names_key = self._key("sc:", run_id, ":", stream), self._key("sn:", run_id)
        exists, chunks, closed = await self._pipe(
            ("exists", self._key("r:", run_id)),
            ("lrange", chunks_key, max(0, start), -1),
            ("hget", names_key, stream),
            each=True,
        )
        self._read_whole(run_id, exists, (chunks_key, chunks), (names_key, closed))
        return [bytes(c) for c in chunks], closed == b"1"

    async def list_streams(self, run_id: str) -> dict[str, tuple[int, bool]]:
        self._signals.reading_run(run_id)
        found = await self._eval(_scripts.STREAMS, run_id, again=True)
        if found is None:
            raise RunNotFound(run_id)
        streams, damaged = self._streams_read(run_id, found)
        for item, where, reason in damaged:
            # Left out and named, as the local store names a stream's damaged files: the
            # run's page and its other streams still read.
            self.faults.note("stream", item, where, reason)
        return streams

    def _streams_read(
        self, run_id: str, found: Sequence[Any]
    ) -> tuple[dict[str, tuple[int, bool]], list[tuple[str, str, str]]]:
        """``STREAMS``'s reply as the run's streams, and the damaged ones (item, where, why):
        a chunks key or the hash of names of another type, a name that is not UTF-8."""
        names_key = self._key("sn:", run_id)
        if found[0]:
            why = _decode.field_name(found[0])
            return {}, [(f"{run_id}/*", names_key, f"{why}: no stream of the run is listed")]
        streams: dict[str, tuple[int, bool]] = {}
        damaged = []
        for i in range(1, len(found), 3):
            raw, count, closed = found[i : i + 3]
            name = _decode.field_name(raw)
            if int(count) < 0:
                key = self._key("sc:", run_id, ":", name)
                damaged.append((f"{run_id}/{name}", key, _decode.field_name(closed)))
                continue
            try:
                text = raw.decode() if isinstance(raw, bytes) else str(raw)
            except UnicodeDecodeError as error:
                where = _decode.field_of(names_key, name)
                damaged.append(
                    (f"{run_id}/{name}", where, f"the stream's name is not UTF-8 ({error})")
                )
                continue
            streams[text] = (int(count), closed == b"1")
        return streams, damaged

    async def stream_info(self, run_id: str, stream: str) -> tuple[int, bool]:
        """This stream's own keys, read whatever the run's other streams hold: one of them
        damaged does not stop a writer of this one; this one's key of another type is
        ``StoreCorrupted`` naming it (never a count of 0, which would drop the chunks)."""
        self._signals.reading_run(run_id)
        chunks_key, names_key = self._key("sc:", run_id, ":", stream), self._key("sn:", run_id)
        exists, count, closed = await self._pipe(
            ("exists", self._key("r:", run_id)),
            ("llen", chunks_key),
            ("hget", names_key, stream),
            each=True,
        )
        self._read_whole(run_id, exists, (chunks_key, count), (names_key, closed))
        return int(count), closed == b"1"  # (0, False) for a stream not written yet

    def _read_whole(self, run_id: str, exists: Any, *read: tuple[str, Any]) -> None:
        """Raise what a pipelined read of one run's keys met: ``RunNotFound`` for no run, else
        the store's error naming the key whose command failed (``StoreCorrupted`` for a key of
        another type)."""
        if isinstance(exists, Exception):
            raise self._failure(exists) from exists
        if not exists:
            raise RunNotFound(run_id)
        for key, value in read:
            if isinstance(value, Exception):
                raise self._failure(value, key) from value

    async def read_logs(self, run_id: str, start: int = 0) -> list[LogEntry]:
        self._signals.reading_run(run_id)
        exists, entries = await self._pipe(
            ("exists", self._key("r:", run_id)),
            ("lrange", self._key("lg:", run_id), 0, -1),
        )
        if not exists:
            raise RunNotFound(run_id)
        return _decode.log_entries(entries)[max(0, start) :]

    # -- schedules and retention ------------------------------------------------------------

    async def lock_schedule(self, schedule_id: str, *, wait: bool = True) -> ScheduleLock | None:
        """A key set ``NX`` to a token of this holder, kept alive while held."""
        key = "slock:" + schedule_id
        token = secrets.token_hex(8)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30.0
        delay = 0.002

        async def take() -> bool:
            took = await self._call_now("set", self._key(key), token, None, self._ttl_ms(), True)
            # Sent twice after a failed connection, the second SET finds the first's key.
            return bool(took) or await self._call_now("get", self._key(key)) == token.encode()

        while True:
            # Not cancelled with its caller: a lock taken then is given back (``_taking``).
            if await holding(take(), lambda took: unlock(self, key, token, "") if took else None):
                self._keeper.hold(key, token)
                return _RedisScheduleLock(self, key, token)
            if not wait:
                return None
            if loop.time() > deadline:
                raise StoreError(f"schedule {schedule_id!r} stayed locked for 30 s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def save_schedule(self, schedule: Schedule) -> None:
        # With its next fire in ``snext``, so a worker's pass reads the due ones alone.
        fire = "" if schedule.next_run is None else repr(float(schedule.next_run))
        await self._eval(
            _scripts.SAVE_SCHEDULE,
            schedule.id,
            orjson.dumps(schedule.to_json()),
            fire,
            SCHEDULES,
            again=True,
        )

    def run_location(self, run_id: str) -> str:
        return self._key("r:", run_id)

    def schedule_location(self, schedule_id: str) -> str:
        return _decode.field_of(self._key("sched"), schedule_id)

    def _schedule(self, schedule_id: str, raw: bytes) -> Schedule:
        return _decode.schedule(raw, self._key("sched"), schedule_id)

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        raw = await self._call("hget", self._key("sched"), schedule_id)
        return None if raw is None else self._schedule(schedule_id, raw)

    async def delete_schedule(self, schedule_id: str) -> bool:
        # Sent again when the connection fails, as before the index: a second attempt after
        # a lost reply finds nothing to remove and says False.
        return bool(await self._eval(_scripts.DELETE_SCHEDULE, schedule_id, SCHEDULES, again=True))

    async def due_schedules(self, now: float) -> tuple[list[Schedule], float | None]:
        """The due schedules from ``snext`` (schedules by next fire), and no other read; but
        every ``SCHEDULE_LOOK`` seconds a look at every schedule first that makes ``snext``
        agree with them (a wf of format 1 still running writes schedules without it), named
        in a warning when it had to."""
        if self._look_at is None or not self._look_at - SCHEDULE_LOOK <= now < self._look_at:
            # Set before the look's first await, so that a pass overlapping it (another
            # worker on this store object) does not look too; put back if the look fails.
            looked_at, self._look_at = self._look_at, now + SCHEDULE_LOOK
            indexed: list[tuple[bytes, bytes]] = []
            try:
                await self._index_schedules(indexed, keep_damaged=True)
            except BaseException:
                self._look_at = looked_at
                raise
            finally:
                # What the slices done so far changed is named even if a later one failed:
                # the next look finds those schedules agreeing and would not name them.
                if indexed:
                    log.warning(
                        "Redis store at %s: schedules saved without their place in %s (written "
                        "by an older wf?), indexed now: %s",
                        self.location,
                        self._key("snext"),
                        ", ".join(f"{_text(key)} ({_text(what)})" for key, what in indexed),
                    )
        found, later = await self._eval(_scripts.DUE_SCHEDULES, repr(float(now)), again=True)
        due = []
        for key, raw in zip(found[::2], found[1::2], strict=True):
            schedule_id = _decode.field_name(key)
            # A damaged field is skipped (noted once): the other schedules still fire.
            with self.faults.contain("schedule", schedule_id, self.schedule_location(schedule_id)):
                due.append(self._schedule(schedule_id, raw))
        due.sort(key=lambda schedule: schedule.id)
        return due, None if later is None else float(later)

    async def _index_schedules(
        self, changes: list[tuple[bytes, bytes]], *, keep_damaged: bool
    ) -> None:
        """``snext`` made to agree with the schedules, a slice per script (``SCHEDULE_SLICE``):
        each schedule put at its next fire, each member that is no schedule's taken out.
        ``keep_damaged``: a damaged schedule already in it keeps its place (else it is put at
        0, due). Adds (schedule id, what was done) to ``changes`` for each change as each
        slice ends (so a caller still has them if a later slice fails). A schedule saved
        meanwhile moved its own place (``SAVE_SCHEDULE``); one an older wf saved behind a
        slice already read is met by the next look (HSCAN sees every field there throughout)."""
        for script, count in (
            (_scripts.INDEX_SCHEDULES, SCHEDULE_SLICE),
            (_scripts.UNINDEX_STRAYS, 4 * SCHEDULE_SLICE),
        ):
            cursor: bytes | str = "0"
            while True:
                cursor, done = await self._eval(
                    script, cursor, count, "1" if keep_damaged else "", again=True
                )
                changes += zip(done[::2], done[1::2], strict=True)
                if _text(cursor) == "0":
                    break

    def schedule_changes(self) -> int:
        return self._signals.schedule_changes

    def rate_returns(self) -> int:
        return self._signals.rate_returns

    async def list_schedules(self) -> list[Schedule]:
        found = await self._call("hgetall", self._key("sched"))
        schedules = []
        for key in sorted(found):
            schedule_id = _decode.field_name(key)
            # A damaged field is skipped (noted once): the other schedules still fire.
            with self.faults.contain("schedule", schedule_id, self.schedule_location(schedule_id)):
                schedules.append(self._schedule(schedule_id, found[key]))
        return schedules

    async def delete_runs(self, run_ids: Sequence[str], *, now: float, reason: str) -> Deleted:
        out = Deleted()
        for run_id in run_ids:
            size = -1
            # A run a key of whose (or a hook record it holds) cannot be read is kept, named
            # once; the others are deleted.
            with self.faults.contain("run", run_id, self.run_location(run_id)):
                size = int(await self._eval(_scripts.DELETE_RUN, run_id, repr(float(now)), reason))
            if size >= 0:
                out.ids.append(run_id)
                out.bytes += size
        return out

    async def get_tombstone(self, run_id: str) -> Tombstone | None:
        raw = await self._call("hget", self._key("tomb"), run_id)
        return None if raw is None else _decode.tombstone(raw, self._key("tomb"), run_id)

    async def store_info(self) -> StoreStats:
        statuses = list(RunStatus)
        commands = [
            *(("zcard", self._key("ix:s:", s.value)) for s in statuses),
            ("hlen", self._key("sched")),
            ("hlen", self._key("tomb")),
            ("get", self._key("format")),
        ]
        found = await self._pipe(*commands)  # a key of another type: named
        counts = {s.value: int(n) for s, n in zip(statuses, found, strict=False)}
        schedules, tombstones, version = found[len(statuses) :]
        return StoreStats(
            kind="redis",
            location=self.location,
            format=None if version is None else self._format_number(self._key("format"), version),
            runs=counts,
            schedules=int(schedules),
            tombstones=int(tombstones),
            size_bytes=None,
        )

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        from wf.store.redis._verify import verify

        return await verify(self)

    # -- lifecycle ------------------------------------------------------------------------

    async def close(self) -> None:
        client, self._client = self._client, None
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            self._signals.abandon()
            return
        await self._keeper.close()
        await self._holder.close()
        await self._signals.close()
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()


async def detached(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` in a task of its own with a fresh context.

    The store is called from inside runs, whose context makes the tasks created there
    workflow tasks (refused by ``asyncio.wait_for``, which redis-py uses for its I/O): a fresh
    context makes redis-py's tasks ordinary ones. Cancelling the caller cancels the task.

    A cancelled caller stays cancelled even when the task does not end as cancelled: redis-py,
    cancelled in the middle of a command, can end it with a reply or turn the cancellation
    into an error of its own. Passed on as a result or a ``StoreError``, that would let a loop
    that goes on after store errors (retention, compaction) outlive its own cancellation.
    """
    caller = asyncio.current_task()
    asked = caller.cancelling() if caller is not None else 0
    task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
    try:
        result = await task
    except asyncio.CancelledError:
        raise
    except BaseException as error:
        if caller is not None and caller.cancelling() > asked:
            raise asyncio.CancelledError from error
        raise
    if caller is not None and caller.cancelling() > asked:
        raise asyncio.CancelledError
    return result


_MOST_CHUNKS = 1024
"""The chunks a batch (``read_chunks``' ``max_bytes``) holds at most: the script that reads it
holds the server meanwhile."""

_DAMAGE_ERRORS = ("WRONGTYPE", "not an integer", "not a valid float")
"""What Redis says of a value of the wrong type or form (a key a stray write replaced, a
field that is no number): damage (the scripts' ``caught`` knows the same marks)."""


_PASSING = (
    (
        OutOfMemoryError,
        "OOM",
        "when used memory > 'maxmemory'",
        "refused the write: out of memory ({}); free memory or raise maxmemory (see docs/redis.md)",
    ),
    (
        ReadOnlyError,
        "READONLY",
        "write against a read only replica",
        "refused the write: it is a read-only replica ({})",
    ),
    (
        None,
        "BUSY",
        "Redis is busy running a script",
        "is busy running another client's script ({})",
    ),
    (BusyLoadingError, "LOADING", "Redis is loading the dataset", "is loading its data ({})"),
    (
        MasterDownError,
        "MASTERDOWN",
        "Link with MASTER is down",
        "is a replica cut from its primary ({})",
    ),
    (
        None,
        "MISCONF",
        "unable to persist to disk",
        "refused the write: it cannot save to disk ({})",
    ),
    (
        None,
        "NOREPLICAS",
        "Not enough good replicas",
        "refused the write: too few replicas answer ({})",
    ),
    (TryAgainError, "TRYAGAIN", "", "refused the command for now ({})"),
)
"""The server's refusals of a command for now (its error class in redis-py, or None; the reply's
code; what the reply says, also within a script's error; the store's words): the server's
state, not the command's nor a stored value's, which passes (memory freed, a failover over,
another client's script ended or killed, the data loaded), so a worker waits it out."""


def refused_for_now(error: BaseException) -> str | None:
    """What the store says of ``error`` when it is the server refusing the command for now
    (``_PASSING``: out of memory, a read-only replica, busy, loading...), else None."""
    if not isinstance(error, ResponseError | BusyLoadingError):
        return None
    text = _said(error)
    for kind, code, words, said in _PASSING:
        if (
            (kind is not None and isinstance(error, kind))
            or text.startswith(code + " ")
            or f"-{code} " in text
            or (words and words in text)
        ):
            return said.format(text)
    return None


_WRONG_SERVER = ("READONLY", "MASTERDOWN", "LOADING")
"""Refusals that may mean the connection reached the wrong server: a replica (after a failover
that moved the address to the new primary) or a server restarting."""


def wrong_server(error: BaseException) -> bool:
    """Whether ``error`` is a refusal that may mean "the wrong server" (``_WRONG_SERVER``)."""
    if not isinstance(error, ResponseError | BusyLoadingError):
        return False
    text = _said(error)
    return any(
        isinstance(error, kind)
        or text.startswith(code + " ")
        or f"-{code} " in text
        or (words and words in text)
        for kind, code, words, _ in _PASSING
        if code in _WRONG_SERVER and kind is not None
    )


def demoted(error: BaseException) -> bool:
    """Whether ``error`` is what a blocked command hears when its server, a primary, becomes a
    replica (Redis ends every blocked command so: ``UNBLOCKED``)."""
    return isinstance(error, ResponseError) and _said(error).startswith("UNBLOCKED ")


def damaged(error: BaseException) -> str | None:
    """What ``error`` says is damaged, when it is a reply that only a stored value of the wrong
    type or form makes (a script's ``WFDAMAGE`` reply: where and why); None for any other."""
    if not isinstance(error, ResponseError):
        return None
    text = _said(error)
    if text.startswith("WFDAMAGE "):
        return text.removeprefix("WFDAMAGE ")
    if any(mark in text for mark in _DAMAGE_ERRORS):
        return re.sub(r" script: \w+, on @user_script:\d+\.$", "", text)
    return None


def _said(error: BaseException) -> str:
    """What the server said, without redis-py's wrapping (``Command # 1 (EXISTS …) of pipeline
    caused error: ``) and a script's place (`` script: …, on @user_script:12.``)."""
    text = str(error).partition(" of pipeline caused error: ")
    said = text[2] if text[1] else text[0]
    return re.sub(r" script: \w+, on @user_script:\d+\.$", "", said)


def _pins(deployments: Pins | None) -> bytes:
    """A deployment filter as the scripts read it: null (every run), or a list whose null
    stands for unpinned runs."""
    return orjson.dumps(None if deployments is None else list(deployments))


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def _tokens(leased: Sequence[Sequence[Any]]) -> list[tuple[str, str]]:
    """The run ids and lease tokens of a claim's leased runs (``[id, token, ...]`` each)."""
    return [(_text(found[0]), _text(found[1])) for found in leased]


class _RedisSlot(Slot):
    def __init__(self, store: RedisStore, key: str, token: str) -> None:
        self._store, self._key, self._token = store, key, token
        self._released = False

    async def release(self) -> None:
        if not self._released:
            self._released = True
            self._store._keeper.drop(self._key, self._token)
            await self._store._eval(_scripts.UNLOCK, self._key, self._token, "cq", again=True)


class _RedisScheduleLock(ScheduleLock):
    def __init__(self, store: RedisStore, key: str, token: str) -> None:
        self._store, self._key, self._token = store, key, token
        self._released = False

    async def release(self) -> None:
        if not self._released:
            self._released = True
            self._store._keeper.drop(self._key, self._token)
            await self._store._eval(_scripts.UNLOCK, self._key, self._token, "", again=True)
