"""Everything a store instance opens, bound to one event loop.

psycopg's async connections belong to the event loop that opened them. A program that calls
``asyncio.run`` twice with one configured store would otherwise find its connections tied to a
closed loop; the store instead notices the new loop, abandons the old session (closing its
sockets without awaiting) and opens a fresh one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib

from wf.store.postgres._conn import Pool, with_keepalives
from wf.store.postgres._locks import Locks
from wf.store.postgres._schema import ensure, lock_key, recheck
from wf.store.postgres._signals import Signals
from wf.store.postgres._writes import Writes


def channel_name(schema: str, prefix: str = "wf") -> str:
    """The ``LISTEN`` channel of the store in ``schema`` (channels are per database); with
    ``prefix`` "wfr", the channel of changes of journals and streams only (see ``Signals``)."""
    name = f"{prefix}:{schema}"
    if len(name) <= 63:  # longer identifiers are refused by pg_notify
        return name
    return f"{prefix}:" + hashlib.blake2b(schema.encode(), digest_size=16).hexdigest()


@dataclasses.dataclass
class Session:
    """The connections, locks and signals of a store instance within one event loop."""

    loop: asyncio.AbstractEventLoop
    pool: Pool
    locks: Locks
    signals: Signals
    schema: str
    writes: Writes
    """Journal appends and record saves of every lease, sent in batches."""

    def lock_key(self, run_id: str) -> int:
        """The advisory lock key of a run's lease."""
        return lock_key(self.schema, run_id)

    @classmethod
    async def open(
        cls, conninfo: str, label: str, schema: str | None, pool_size: int, wait: float | None
    ) -> Session:
        """Connect, create or check the tables (listening starts with the first wait for
        news: ``Signals.listen``). An upgrade of the tables waits for sessions of an older wf
        at most ``wait`` seconds (None: until they end)."""
        pool = Pool(conninfo, label, pool_size)
        try:
            async with pool.connection("check or set up wf's tables") as conn:
                current = await ensure(conn, schema, wait)
            # Every later query connection speaks this version too (``_users``).
            pool.prepare = functools.partial(recheck, schema=current)
            signals = Signals(
                pool,
                with_keepalives(conninfo),
                label,
                channel_name(current),
                channel_name(current, "wfr"),
                # Not a run id (those hold no NUL): never a run's lease.
                listening_key=lock_key(current, "\0listening on wfr"),
            )
        except BaseException:
            await pool.close()
            raise
        locks = Locks(with_keepalives(conninfo), label)
        return cls(asyncio.get_running_loop(), pool, locks, signals, current, Writes(pool))

    async def close(self) -> None:
        """Close every connection (held leases are released by closing their connection)."""
        await self.writes.close()
        await self.signals.close()
        await self.locks.close()
        await self.pool.close()

    def abandon(self) -> None:
        """Drop everything without awaiting: the event loop it belongs to is gone."""
        self.writes.abandon()
        self.signals.abandon()
        self.locks.abandon()
        self.pool.abandon()
