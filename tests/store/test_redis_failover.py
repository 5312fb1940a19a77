"""``RedisStore`` through a real failover behind an address that moved (a DNS name, a proxy):
the primary demoted to a replica, the replica promoted, new connections reaching it while the
connections made before stay on the old server (``tests.store.failover``: two throwaway
``redis-server`` processes; skipped without one on PATH).

Each of the store's kinds of connection must end up on the new primary: the command pool
(``test_redis_refusals`` covers it with a simulated failover), the holder connection of its
leases, and the subscriptions its waits listen on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

pytest.importorskip("redis")

import wf
from tests.store import failover
from tests.store.failover import Pair
from tests.store.helpers import created
from wf.store.redis import RedisStore


@pytest_asyncio.fixture
async def pair() -> AsyncIterator[Pair]:
    found = Pair()
    try:
        await found.start()
        yield found
    finally:
        await found.close()


def on(server_port: int) -> RedisStore:
    """A store that talks to one server directly (not through the moving address)."""
    return RedisStore(f"redis://127.0.0.1:{server_port}/0", prefix="wf")


async def heard_within(store: RedisStore, other: RedisStore, seconds: float) -> bool:
    """Whether a run created through ``other`` ends ``store``'s wait for activity within
    ``seconds`` (the wait's own timeout is longer)."""
    await store.wait_for_activity(0)  # what was heard before is not this run
    waiting = asyncio.ensure_future(store.wait_for_activity(seconds + 3))
    await asyncio.sleep(0.02)
    began = time.monotonic()
    await created(other)
    await waiting
    return time.monotonic() - began < seconds


@pytest.mark.timeout(60)
async def test_a_subscription_left_on_the_demoted_server_listens_again(pair: Pair) -> None:
    """The subscription stayed on the old primary, a replica now that hears none of the new
    primary's writes: announcements of new runs never came again (a worker woke only by its
    poll, a wait for a result by its timeout), for as long as the process lived. A refusal
    that may mean "the wrong server" (a worker's claim meets ``READONLY``) makes the
    subscriptions again, as the command pool."""
    store = RedisStore(pair.url, prefix="wf")
    other = None
    try:
        await store.open()
        await created(store)
        await pair.fail_over(linked=False)
        other = on(pair.primary.port)
        with pytest.raises(wf.StoreUnavailable):
            await created(store)  # a write on the old server: refused as a replica's
        heard = False
        for _ in range(4):  # a new subscription's first wait may end by its making
            if await heard_within(store, other, 1.0):
                heard = True
                break
        assert heard, "the wait did not hear runs created on the new primary"
        assert await heard_within(store, other, 1.0)
        await created(store)  # and the pool's next write reaches the new primary
    finally:
        await store.close()
        if other is not None:
            await other.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("linked", [True, False])
async def test_a_lease_taken_after_a_failover_is_held_on_the_new_primary(
    pair: Pair, linked: bool
) -> None:
    """The holder connection (whose ``CLIENT ID`` names the holder in each lease's token) must
    follow the address to the new primary: a holder id of the old server's is no connection
    the new primary knows, so any other worker's claim would take the lease over at once. The
    leases held through the failover are lost (their holder id means nothing on the new
    primary); one taken after it is held.

    And the holder connection is what hears of the demotion (Redis ends its blocked wait): an
    idle worker's commands, all reads of the old server (a claim that finds nothing due
    writes nothing), were never refused, so its pool stayed there, and a replica that hears
    nothing of the new primary (not ``linked``) answered for ever that the new runs do not
    exist."""
    store = RedisStore(pair.url, prefix="wf", lease_ttl=30)
    other = None
    try:
        before = await created(store)
        lease = await store.try_acquire(before.id)
        assert lease is not None
        lost: list[wf.StoreError] = []
        lease.on_lost(lost.append)
        await pair.fail_over(linked=linked)
        other = on(pair.primary.port)
        after = await created(other)
        taken = None
        async with asyncio.timeout(20):
            while taken is None:
                try:
                    taken = await store.try_acquire(after.id)
                except (wf.StoreUnavailable, wf.RunNotFound):
                    await asyncio.sleep(0.05)  # a command met the old server
        assert lost, "a lease held through the failover was kept under a dead holder id"
        assert await other.try_acquire(after.id) is None, "held by a holder the server lost"
        await taken.release()
    finally:
        await store.close()
        if other is not None:
            await other.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("linked", [True, False])
async def test_a_process_that_only_reads_follows_the_address_to_the_new_primary(
    pair: Pair, linked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that only reads (``wf runs``, ``wf serve --no-worker``, an admin's look) is
    refused nothing on the old server, now a replica: only a write's ``READONLY`` or a lease's
    demotion made the store connect again, so it read the old server for as long as it
    lived (not ``linked``: runs created since were not found, for ever; linked: its reads
    came from a replica). A pooled connection asks its server's role once in a while
    (``ROLE_CHECK_EVERY``) and a replica's makes the connections again, as a refusal does."""
    from wf.store.redis import _store

    monkeypatch.setattr(_store, "ROLE_CHECK_EVERY", 0.2, raising=False)
    reader = RedisStore(pair.url, prefix="wf")
    other = None
    try:
        before = await created(on(pair.primary.port))
        assert (await reader.get_run(before.id)).id == before.id  # its connection: the old one
        await pair.fail_over(linked=linked)
        other = on(pair.primary.port)
        after = await created(other)
        found, role = None, None
        async with asyncio.timeout(10):
            while found is None or role != b"master":
                await asyncio.sleep(0.05)
                with contextlib.suppress(wf.RunNotFound):  # read on the old server
                    found = await reader.get_run(after.id)
                client = reader._client
                assert client is not None
                role = (await client.execute_command("ROLE"))[0]  # the server it reads
    finally:
        await reader.close()
        if other is not None:
            await other.close()


def test_a_server_started_on_a_port_another_took_meanwhile_tries_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two test processes (``pytest -n``) may probe the same free port before either server
    binds it: the second ``redis-server`` fails to bind, and its wait must not take the other
    process's server for its own (two pairs sharing one server: ``READONLY`` in the test
    whose primary the other demoted)."""
    binary = failover.require_redis_server()
    first = failover.Server(binary, set())
    try:
        probes = iter([first.port])  # the race: the first probe found it free
        monkeypatch.setattr(
            failover, "_free_port", lambda taken: next(probes, None) or _unpatched(taken)
        )
        second = failover.Server(binary, set())
        try:
            assert second.port != first.port, "took another process's server for its own"
            assert second._process.poll() is None
        finally:
            second.stop()
    finally:
        first.stop()


_unpatched = failover._free_port
