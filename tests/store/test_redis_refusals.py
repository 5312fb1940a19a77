"""``RedisStore`` when the server refuses commands for a while: out of memory under
``maxmemory`` (``OOM``), a read-only replica (``READONLY``: a failover), busy running another
client's long script (``BUSY``), loading its data after a restart (``LOADING``), a replica cut
from its primary (``MASTERDOWN``). Each is the server's passing refusal, not damage of a run
nor the end of a worker: ``wf.StoreUnavailable``, which a worker waits out (it exited 3 within
a second), and no key is named damaged (a refused ``INCR`` of the creation sequence read as a
sequence that is no number, with the advice to overwrite it).

A proxy between the store and the test's server answers the refused commands with the error
(``tests.store.refusing_proxy``): the server's configuration, shared by every test, is left
alone.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

redis = pytest.importorskip("redis")

import wf  # noqa: E402
from tests.store.helpers import redis_prefix  # noqa: E402
from tests.store.refusing_proxy import RefusingProxy  # noqa: E402
from wf.engine._current import use_engine  # noqa: E402
from wf.engine._engine import Engine  # noqa: E402
from wf.store.conformance import event, record  # noqa: E402
from wf.store.redis import RedisStore  # noqa: E402

URL = os.environ.get("WF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

REFUSALS = {
    "oom": ("OOM command not allowed when used memory > 'maxmemory'.", True),
    "readonly": ("READONLY You can't write against a read only replica.", True),
    "busy": (
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        False,
    ),
    "loading": ("LOADING Redis is loading the dataset in memory", False),
    "masterdown": (
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        False,
    ),
    "misconf": (
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to"
        " persist to disk.",
        True,
    ),
    "noreplicas": ("NOREPLICAS Not enough good replicas to write.", True),
}
"""What Redis answers a command it refuses for now, and whether it refuses only writes."""


@pytest.fixture
def prefix() -> Iterator[str]:
    yield from redis_prefix(URL)


@pytest_asyncio.fixture
async def proxy() -> AsyncIterator[tuple[RefusingProxy, str]]:
    client = redis.Redis.from_url(URL)
    kwargs = client.connection_pool.connection_kwargs
    client.close()
    found = RefusingProxy(
        kwargs.get("host", "127.0.0.1"), int(kwargs.get("port", 6379)), int(kwargs.get("db", 0))
    )
    url = await found.start()
    try:
        yield found, url
    finally:
        await found.close()


STEPS_RUN: list[int] = []


@wf.step
async def noted(i: int) -> int:
    STEPS_RUN.append(i)
    await asyncio.sleep(0.01)
    return i


@wf.workflow(name="redis_refusals:steps")
async def steps(x: int) -> int:
    for i in range(4):
        x += await noted(i)
    return x


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(REFUSALS))
async def test_a_worker_waits_out_a_server_that_refuses_for_a_while(
    kind: str,
    prefix: str,
    proxy: tuple[RefusingProxy, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The refusal comes while the worker drives runs: its looks at the queue and the drives'
    writes are refused, the worker goes on (it exited 3 within a second, leaving its runs
    running), and once the server takes them again every run is driven to its end."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.02, 0.1))
    monkeypatch.setattr(_worker, "LEASE_LOST_RETRY", 0.05)
    refusing, url = proxy
    error, writes_only = REFUSALS[kind]
    # A lease whose release was refused lapses after its TTL (15 s by default), when the
    # run is claimed again: short here.
    store = RedisStore(url, prefix=prefix, lease_ttl=1.5)
    engine = Engine(store)
    STEPS_RUN.clear()
    try:
        with use_engine(engine):
            runs = [await wf.start(steps, i * 100, detach=True) for i in range(6)]
            worker = wf.Worker(engine, poll=0.05, retention=False, concurrency=2)
            serving = asyncio.create_task(worker.run(until_idle=True))
            async with asyncio.timeout(20):
                while not STEPS_RUN:
                    await asyncio.sleep(0.005)
            refusing.refuse(error, writes_only=writes_only)
            async with asyncio.timeout(20):
                while refusing.refused < 10 and not serving.done():
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # a few looks at the queue refused in a row
            assert not serving.done(), serving.exception()
            refusing.refuse(None)
            await asyncio.wait_for(serving, 40)
            assert [await run.result() for run in runs] == [i * 100 + 6 for i in range(6)]
    finally:
        await store.close()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "damaged" not in said and "WFDAMAGE" not in said, said


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["oom", "readonly"])
async def test_a_creation_refused_is_the_servers_refusal_not_a_damaged_sequence(
    kind: str, prefix: str, proxy: tuple[RefusingProxy, str]
) -> None:
    """``INCR`` of the creation sequence refused (out of memory, a read-only replica) was
    said as ``…seq: the creation sequence is not a number (…); set it to the highest creation
    number``: advice to overwrite a key that is fine."""
    refusing, url = proxy
    store = RedisStore(url, prefix=prefix)
    try:
        await store.create_run(record(), [event("run_started")])  # the store is open
        refusing.refuse(REFUSALS[kind][0])
        with pytest.raises(wf.StoreUnavailable) as raised:
            await store.create_run(record(), [event("run_started")])
        said = str(raised.value)
        assert "refused the write" in said, said
        assert "creation sequence" not in said and "seq" not in said.split("(")[0], said
        refusing.refuse(None)
        assert await store.create_run(record(), [event("run_started")])
    finally:
        await store.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["readonly", "masterdown"])
async def test_a_refusal_that_may_mean_the_wrong_server_reconnects_the_pool(
    kind: str, prefix: str, proxy: tuple[RefusingProxy, str]
) -> None:
    """A failover moved the address (a DNS name, a proxy) to the new primary: the pooled
    connections stayed on the old server, now a replica, and every write was refused for as
    long as the worker waited (300 s), then it exited; ``wf serve`` never recovered. One
    refusal that may mean "the wrong server" drops the pool's connections: the next writes
    reach the new primary."""
    refusing, url = proxy
    store = RedisStore(url, prefix=prefix)
    try:
        # Several connections in the pool, all to the server that is about to be demoted.
        await asyncio.gather(
            *(store.create_run(record(), [event("run_started")]) for _ in range(5))
        )
        refusing.fail_over(REFUSALS[kind][0])
        with pytest.raises(wf.StoreUnavailable):
            await store.create_run(record(), [event("run_started")])
        made = await asyncio.gather(
            *(store.create_run(record(), [event("run_started")]) for _ in range(5)),
            return_exceptions=True,
        )
        assert made == [True] * 5, made
    finally:
        await store.close()


@pytest.mark.timeout(30)
async def test_refusals_while_the_address_is_still_the_old_server_redial_once_a_second(
    prefix: str, proxy: tuple[RefusingProxy, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the address still reaches the demoted server (a DNS name not moved yet, a
    switchover under way), every write meets ``READONLY``, and each made the subscriptions
    again: 20 writers for 5 s kept up to 46 subscriber connections open at once and woke
    every waiter 59 times. The store makes its connections again at most once a second."""
    from wf.store.redis import _signals

    refusing, url = proxy
    store = RedisStore(url, prefix=prefix)
    redials: list[None] = []
    redial = _signals.Signals.redial

    def counted(self: _signals.Signals) -> None:
        redials.append(None)
        redial(self)

    monkeypatch.setattr(_signals.Signals, "redial", counted)
    try:
        await store.wait_for_activity(0)  # subscribed
        refusing.refuse(REFUSALS["readonly"][0])
        refused = await asyncio.gather(
            *(store.create_run(record(), [event("run_started")]) for _ in range(20)),
            return_exceptions=True,
        )
        assert all(isinstance(r, wf.StoreUnavailable) for r in refused), refused
        assert len(redials) == 1, f"{len(redials)} redials for 20 refusals"
    finally:
        await store.close()


@pytest.mark.timeout(60)
async def test_the_pool_made_again_cuts_no_command_of_another_task(
    prefix: str, proxy: tuple[RefusingProxy, str]
) -> None:
    """The pool was made again (after a refusal that may mean the wrong server) by closing
    its idle connections, which redis-py picks at once and closes a loop step later: a task
    that took one of them in between lost its command (a write not sent again: the store
    failed for it). A connection is made again only by the task that takes it."""
    refusing, url = proxy
    store = RedisStore(url, prefix=prefix)
    try:
        run = record()
        await store.create_run(run, [event("run_started")])
        await asyncio.gather(*(store.post(run.id, "note", {"i": i}) for i in range(3)))
        refusing.fail_over(REFUSALS["readonly"][0])
        with pytest.raises(wf.StoreUnavailable):
            await store.post(run.id, "note", {})
        posted = await asyncio.gather(
            store.get_run(run.id),  # the first call after the refusal makes the pool again
            *(store.post(run.id, "note", {"i": i}) for i in range(3)),
            return_exceptions=True,
        )
        assert not [p for p in posted if isinstance(p, BaseException)], posted
    finally:
        await store.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["oom", "readonly", "misconf", "noreplicas"])
async def test_a_foreground_ride_out_waits_for_writes_not_for_a_read(
    kind: str, prefix: str, proxy: tuple[RefusingProxy, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wf run``'s ride-out checked the store with a read, which a server refusing only
    writes answers: it said "answers again" at once, drove the run again into the same
    refusal, and after 10 such pairs in 7 s exited 3 (the running step run again each time).
    It waits until a write is taken: said once each way, the step run no more than once more,
    the run completed."""
    from wf import admin
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.02, 0.1))
    refusing, url = proxy
    store = RedisStore(url, prefix=prefix, lease_ttl=1.5)
    engine = Engine(store)
    said: list[str] = []
    STEPS_RUN.clear()
    try:
        with use_engine(engine):
            run = await wf.start(steps, 1, detach=True)
            driving = asyncio.create_task(
                admin.drive_through_outages(
                    run,
                    on_failed=lambda error, limit: said.append("failed"),
                    on_back=lambda after: said.append("back"),
                )
            )
            async with asyncio.timeout(20):
                while not STEPS_RUN:
                    await asyncio.sleep(0.005)
            refusing.refuse(REFUSALS[kind][0], writes_only=True)
            async with asyncio.timeout(20):
                while not said and not driving.done():
                    await asyncio.sleep(0.01)
            ran = len(STEPS_RUN)
            await asyncio.sleep(1.5)  # many tries at 0.1 s
            assert not driving.done(), driving.exception()
            assert said == ["failed"], said
            assert len(STEPS_RUN) == ran, STEPS_RUN
            refusing.refuse(None)
            await asyncio.wait_for(driving, 30)
            assert said == ["failed", "back"], said
            assert await run.result() == 1 + 0 + 1 + 2 + 3
    finally:
        await store.close()


@pytest.mark.timeout(60)
async def test_a_worker_started_on_a_replica_says_it_was_refused_not_unanswered(
    prefix: str,
    proxy: tuple[RefusingProxy, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker pointed at a read-only replica as it starts was said to meet a store that
    "does not answer … (no answer in the 10s …)": it answered, and refused. Said as a
    refusal, in the server's words."""
    import logging

    from wf.engine import _worker

    monkeypatch.setattr(_worker, "OUTAGE_RETRY", (0.01, 0.05))
    refusing, url = proxy
    refusing.refuse(REFUSALS["readonly"][0], writes_only=True)
    store = RedisStore(url, prefix=prefix)
    try:
        worker = wf.Worker(Engine(store), retention=False, start_wait=0.3)
        with (
            caplog.at_level(logging.WARNING, logger="wf.worker"),
            pytest.raises(wf.StoreUnavailable) as raised,
        ):
            await asyncio.wait_for(worker.run(), 30)
    finally:
        await store.close()
    said = str(raised.value)
    assert said.endswith("(refused for the 0.3s since the worker started)"), said
    assert "You can't write against a read only replica" in said, said
    lines = [r.getMessage() for r in caplog.records if r.name == "wf.worker"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("the store refuses the worker's commands as it starts: "), lines
    assert "read-only replica" in lines[0] and "does not answer" not in lines[0], lines
