"""Who holds a lease: an instance's own connection, so a dead process's leases end at once.

A lease's key holds ``<epoch>:<call>:<holder>``, where the holder is the ``CLIENT ID`` of a
connection the instance keeps open for nothing else (it blocks in a ``BLPOP`` that nothing
answers). The server closes that connection when the process dies (the kernel closes its
sockets, even after ``SIGKILL``) or when it is killed (``CLIENT KILL``), and client ids are
never reused while the server runs, so a holder that is no longer in ``CLIENT LIST`` is gone for
good: a claim that finds runs held by such a holder takes them over at once, rather than waiting
out the lease's time to live. Takeover bumps the run's fencing epoch, so whatever the old holder
still sends is refused (``fenced``), as for an expired lease.

Scripts cannot call ``CLIENT``, so the check is the client's: a claim (or ``try_acquire``) that
finds runs held answers with their holders, ``suspects`` picks those not seen connected in the
last ``RECHECK`` seconds, one ``CLIENT LIST ID`` looks at them, and the claim is sent again
naming the dead ones. When the instance's own connection drops, every lease it holds under that
id is lost (the driver stops, as on PostgreSQL when the lock connection drops); it reconnects
with a new id for the leases it takes next. A server that forbids ``CLIENT LIST`` (some managed
services) gets no such check: leases of dead processes end with their time to live.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from wf._exceptions import StoreError, StoreUnavailable
from wf.store import _forks

if TYPE_CHECKING:
    from wf.store.redis._store import RedisStore

log = logging.getLogger("wf.store.redis")

T = TypeVar("T")

RECHECK = 0.5
"""Seconds a holder seen connected is taken to be alive without asking the server again."""

KEPT_DEAD = 256
"""Dead holders an instance remembers (and names in every claim), most recent first."""

BLOCK = 5
"""Seconds of each ``BLPOP`` on the holder connection (a wait that nothing ends); its reply
must come within ``BLOCK + SLACK`` seconds of the event loop's running time, else the connection
is taken to be dead (and is closed: the server then drops the holder too). Time the loop did not
run (blocking code in an async step) is not counted (``answered``): the reply may have waited
for the loop all along, and a loop that comes back finds its leases as it left them."""

SLACK = 10.0

TICK = 0.5
"""Seconds of one look at whether the holder connection's reply came: of a look that took
longer (the loop was blocked) only this much is counted."""


class Holder:
    """This instance's holder id (its own connection's ``CLIENT ID``) and what it knows of
    other holders: alive a moment ago, or gone."""

    def __init__(self, store: RedisStore, lost: Callable[[str, str], None]) -> None:
        """``lost(holder, why)``: this instance's connection with that id dropped."""
        self._store = store
        self._lost = lost
        self._id: str | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._alive: dict[str, float] = {}
        self._dead: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._can_list = True
        self._client: aioredis.Redis | None = None
        """The holder connection's client while it is up."""

    @property
    def current(self) -> str | None:
        """This instance's holder id if its holder connection is up (no round trip)."""
        return self._id

    async def ident(self) -> str:
        """This instance's holder id, connecting its holder connection first if needed."""
        if self._id is not None:
            return self._id
        async with self._lock:
            if self._id is None:
                # No read timeout of redis-py's (it counts time the loop was blocked as time the
                # server did not answer): ``answered`` keeps the reply's deadline.
                client = self._store._connect_single(self._store.client_name + "-lease", None)
                try:
                    found = str(await answered(client.client_id(), SLACK))
                except BaseException as error:
                    with contextlib.suppress(Exception):
                        await client.aclose()
                    if isinstance(error, RedisError | OSError):
                        # A refused connection (``maxclients``, a server restarting) is the
                        # store's outage as any other call's: ``StoreUnavailable``.
                        raise self._store._failure(error) from error
                    raise
                self._id = found
                self._client = client
                _forks.hold(self)
                self._task = asyncio.get_running_loop().create_task(
                    self._watch(client, found), context=contextvars.Context()
                )
            return self._id

    async def _watch(self, client: aioredis.Redis, ident: str) -> None:
        """Block on the holder connection until it fails: then its leases are lost."""
        key = self._store._key("hold:", ident)
        why = "its connection to Redis was closed"
        try:
            while True:
                await answered(client.blpop([key], timeout=BLOCK), BLOCK + SLACK)
        except asyncio.CancelledError:
            raise
        except (RedisError, OSError) as error:  # TimeoutError is an OSError
            why = f"its connection to Redis was dropped ({error})"
            self._store._holder_failed(error)
        finally:
            if self._id == ident:
                self._id = None
            if self._client is client:
                self._client = None
                _forks.let_go(self)
            with contextlib.suppress(BaseException):
                await asyncio.shield(client.aclose())
        self._lost(ident, why)

    def lock_fds(self) -> list[int]:
        """The holder connection's socket (``_forks``): a forked child that kept it open would
        keep this holder connected for the server, so the leases of a process that died
        would wait out their time to live instead of being taken over at once."""
        connection = getattr(self._client, "connection", None)
        writer = getattr(connection, "_writer", None)
        sock = None if writer is None else writer.get_extra_info("socket")
        return [] if sock is None else [sock.fileno()]

    def forked(self) -> None:
        self._client = None  # the parent's: the child never closes it nor says goodbye
        _forks.let_go(self)

    @property
    def dead(self) -> list[str]:
        """Holders known to be gone (named in claims: their leases may be taken over)."""
        return list(self._dead)

    def suspects(self, holders: Iterable[str]) -> list[str]:
        """The holders worth asking the server about: not this instance, not known dead, and not
        seen connected in the last ``RECHECK`` seconds."""
        if not self._can_list:
            return []
        now = time.monotonic()
        return sorted(
            {
                h
                for h in holders
                if h
                and h != self._id
                and h not in self._dead
                and now - self._alive.get(h, -1e9) > RECHECK
            }
        )

    async def find_dead(self, holders: list[str]) -> list[str]:
        """Which of ``holders`` are no longer connected (one ``CLIENT LIST ID``)."""
        if not holders:
            return []
        try:
            found = await self._store._call("client_list", None, holders)
        except StoreError as error:  # a refusal: leases of dead holders end with their TTL
            # Refused for good (a user without the right to CLIENT LIST), not for now (a
            # server busy or loading: ``StoreUnavailable``), which would end the checks.
            if isinstance(error.__cause__, ResponseError) and not isinstance(
                error, StoreUnavailable
            ):
                self._can_list = False
                log.debug("wf redis: CLIENT LIST refused (%s): leases end with their TTL", error)
            return []
        now = time.monotonic()
        connected = {str(entry.get("id")) for entry in found}
        dead = []
        for holder in holders:
            if holder in connected:
                self._alive[holder] = now
            else:
                self._alive.pop(holder, None)
                self._dead[holder] = None
                dead.append(holder)
        while len(self._dead) > KEPT_DEAD:
            self._dead.popitem(last=False)
        if len(self._alive) > 4 * KEPT_DEAD:
            self._alive = {h: t for h, t in self._alive.items() if now - t <= RECHECK}
        return dead

    async def close(self) -> None:
        task, self._task = self._task, None
        self._id = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def answered(call: Awaitable[T], within: float) -> T:
    """``call``'s result, if it comes within ``within`` seconds of the loop's running time; else
    ``call`` is cancelled and ``TimeoutError`` raised. A look (``TICK``) that took longer counts
    as ``TICK``: the loop did not run meanwhile, so the reply may have come and not been read."""
    task = asyncio.ensure_future(call)
    waited = 0.0
    try:
        while True:
            began = time.monotonic()
            done, _ = await asyncio.wait({task}, timeout=TICK)
            if done:
                return task.result()
            waited += min(time.monotonic() - began, TICK)
            if waited >= within:
                raise TimeoutError(f"no reply from Redis within {within:g} s")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
