"""A driver "in another process" that takes a run's inbox in at the worst moment for a waiter.

A waiter (``run.settle()``, ``wf hook resume``'s wait, ``wf run``'s wait on hooks, a server's
run detail) decides that a suspended run is settled from its record and its inbox, read one
after the other. ``Interleaving`` makes another driver take the inbox in exactly between them,
deterministically: the waiter's store (``Interleaving.waiter_store``) lets the driver in at the
waiter's first inbox read after ``arm()``, and reads the inbox only once the driver
acknowledged its messages; the driver's store (``driver_store``) holds the driver right after
that acknowledgement, until the waiter read the record once more. So the waiter reads the record
as it was before the drive (suspended on the hook), the inbox empty, and the record again while
the drive is under way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import wf
from wf.store import Lease, RunRecord, RunStatus, Store
from wf.testing import MockClock, TestEngine

HOLD = 30.0
"""Real seconds a side waits for the other at most (a test never hangs on a broken gate)."""


class _HeldAfterAck:
    """A lease whose ``ack_inbox`` acknowledges, then waits while the interleaving says so."""

    def __init__(self, lease: Lease, interleaving: Interleaving) -> None:
        self._lease = lease
        self._interleaving = interleaving

    async def ack_inbox(self, message_ids: Sequence[str]) -> None:
        await self._lease.ack_inbox(message_ids)
        if message_ids:
            await self._interleaving.acked()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lease, name)


class _DriverStore:
    """The store as the other driver sees it: its leases are held after acknowledging."""

    def __init__(self, store: Store, interleaving: Interleaving) -> None:
        self._store = store
        self._interleaving = interleaving

    async def try_acquire(self, run_id: str) -> Lease | None:
        lease = await self._store.try_acquire(run_id)
        return None if lease is None else cast(Lease, _HeldAfterAck(lease, self._interleaving))

    async def claim(self, *args: Any, **kwargs: Any) -> list[Lease]:
        leases = await self._store.claim(*args, **kwargs)
        return [cast(Lease, _HeldAfterAck(lease, self._interleaving)) for lease in leases]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _WaiterStore:
    """The store as the waiter sees it: the armed inbox read lets the other driver in first."""

    def __init__(self, store: Store, interleaving: Interleaving) -> None:
        self._store = store
        self._interleaving = interleaving

    async def read_inbox(self, run_id: str) -> Any:
        interleaving = self._interleaving
        if not interleaving.armed_here():
            return await self._store.read_inbox(run_id)
        interleaving.armed = False
        await interleaving.let_driver_in()
        found = await self._store.read_inbox(run_id)
        interleaving.inbox_read = True
        return found

    async def get_run(self, run_id: str) -> RunRecord:
        record = await self._store.get_run(run_id)
        interleaving = self._interleaving
        if interleaving.inbox_read and interleaving.mine():
            interleaving.records_after.append(record)
            interleaving.go.set()  # the record was read after the inbox: the drive goes on
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Interleaving:
    """Puts another driver's intake of a run's inbox between a waiter's reads.

    ``drive``: starts the other driver's drive of the run (awaited to its end by ``finish``).
    ``task_bound``: only reads made by the task that calls ``arm()`` count as the waiter's
    (where the waiter's engine also drives, and reads the store in other tasks).
    """

    def __init__(self, store: Store, *, task_bound: bool = True) -> None:
        self.store = store
        self.waiter_store = cast(Store, _WaiterStore(store, self))
        """The store for the waiter's engine."""
        self.driver_store = cast(Store, _DriverStore(store, self))
        """The store for the other driver's engine."""
        self.armed = False
        self.inbox_read = False
        self.records_after: list[RunRecord] = []
        """The records the waiter read after its inbox read (the first while the drive waits)."""
        self.go = asyncio.Event()
        self.has_acked = asyncio.Event()
        self._task_bound = task_bound
        self._waiter: asyncio.Task[Any] | None = None
        self._drive: Callable[[], Awaitable[Any]] | None = None
        self.driving: asyncio.Future[Any] | None = None

    def arm(self, drive: Callable[[], Awaitable[Any]]) -> None:
        """From now on, the waiter's next inbox read lets ``drive()`` in first."""
        self._drive = drive
        self._waiter = asyncio.current_task() if self._task_bound else None
        self.armed = True

    def mine(self) -> bool:
        return self._waiter is None or asyncio.current_task() is self._waiter

    def armed_here(self) -> bool:
        return self.armed and self.mine()

    async def let_driver_in(self) -> None:
        assert self._drive is not None
        await self.until_acked(self._drive())

    async def until_acked(self, drive: Awaitable[Any]) -> None:
        """Let ``drive`` (the other driver's) go until it acknowledged the inbox (or ended)."""
        self.driving = asyncio.ensure_future(drive)
        acked = asyncio.ensure_future(self.has_acked.wait())
        try:
            done, _ = await asyncio.wait(
                {acked, self.driving}, timeout=HOLD, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            acked.cancel()
        assert done, "the other driver neither acknowledged the inbox nor ended"

    async def acked(self) -> None:
        """Called by the other driver's lease once it acknowledged messages."""
        if self.has_acked.is_set():
            return
        self.has_acked.set()
        async with asyncio.timeout(HOLD):
            await self.go.wait()

    async def finish(self) -> Any:
        """Let the other driver go on, and wait for the end of its drive."""
        self.go.set()
        if self.driving is None:
            return None
        async with asyncio.timeout(HOLD):
            return await self.driving


@contextlib.asynccontextmanager
async def engines_apart(
    store: Store, clock: MockClock
) -> AsyncIterator[tuple[Interleaving, TestEngine, TestEngine]]:
    """Two engines on ``store`` as two processes would be: ``here`` (installed: ``wf.start``
    and ``wf.resume_hook`` use it), whose reads are the waiter's, and ``elsewhere``, the other
    driver the ``Interleaving`` puts between them."""
    interleaving = Interleaving(store)
    async with (
        TestEngine(interleaving.waiter_store, clock) as here,
        TestEngine(interleaving.driver_store, clock) as elsewhere,
    ):
        with here.installed():
            yield interleaving, here, elsewhere


@wf.workflow(name="tests.elsewhere:approval")
async def approval(token: str) -> str:
    """Waits on hook ``token``; says who approved."""
    hook = wf.create_hook(str, token=token)
    return f"approved by {await hook.next()}"


async def suspended_with_payload(engine: TestEngine, token: str) -> wf.Run[str]:
    """A run (started on the installed engine) suspended on hook ``token``, its payload posted
    and taken in by nobody yet."""
    run = await wf.start(approval, token)
    record = await engine.wait_driven(run)
    assert record is not None and record.status is RunStatus.SUSPENDED
    assert await wf.resume_hook(token, "ann") == run
    return run
