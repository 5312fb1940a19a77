"""``RedisStore``: the conformance kit, and what only a shared server can get wrong.

Each test works under a key prefix of its own (its keys are deleted afterwards), so tests may
run in parallel and leave nothing behind. The server is ``WF_TEST_REDIS_URL`` (default: the
local server's database 0); when it cannot be reached every test here is skipped, unless
``WF_REQUIRE_REDIS=1`` (``.ci/run``), which makes that a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

redis = pytest.importorskip("redis")

import wf  # noqa: E402
from tests.store.helpers import (  # noqa: E402
    REPO,
    a_take_back_wakes_the_runs_the_limit_held,
    acquire,
    assert_refused_at_once,
    created,
    drop_redis_keys,
    edit_record,
    forking_holder,
    lose_the_lease_then_take_over,
    python,
    require_redis,
    save,
    taken_over_beside_a_forked_helper,
)
from wf._config import default_store, describe_store, set_overrides  # noqa: E402
from wf._exceptions import StoreCorrupted, StoreError, StoreVersionError, UsageError  # noqa: E402
from wf.store._base import HookRecord, RunStatus, Schedule, Store, lane_of  # noqa: E402
from wf.store._faults import collect_faults  # noqa: E402
from wf.store.conformance import StoreConformance, event, record  # noqa: E402
from wf.store.redis import (  # noqa: E402
    FORMAT_VERSION,
    RedisStore,
    _lease,
    _scripts,
    _store,
    _verify,
)
from wf.testing import MockClock, TestEngine  # noqa: E402

URL = os.environ.get("WF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def redis_url() -> str:
    require_redis(URL)
    return URL


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix for one test; its keys are deleted afterwards."""
    name = f"wft:{uuid.uuid4().hex[:12]}:"
    yield name
    drop_redis_keys(redis_url, name)


def make(prefix: str, **options: Any) -> RedisStore:
    """A store instance under the test's prefix: one per simulated process."""
    return RedisStore(URL, prefix=prefix, **options)


class TestRedisStore(StoreConformance):
    """A peer is a second ``RedisStore`` on the same prefix, as another process opens it."""

    @pytest.fixture(autouse=True)
    def _use_prefix(self, prefix: str) -> None:
        self.prefix = prefix

    async def make_store(self, tmp_path: Path) -> Store:
        store = make(self.prefix)
        await store.open()
        return store

    async def make_peer(self, store: Store, tmp_path: Path) -> Store:
        peer = make(self.prefix)
        await peer.open()
        return peer

    async def damage_run(self, store: Store, run_id: str) -> None:
        client = raw_client()
        try:
            client.hset(f"{self.prefix}r:{run_id}", "rec", b"{not json")
        finally:
            client.close()

    async def edit_record(self, store: Store, run_id: str, changes: dict[str, Any]) -> None:
        await edit_record(store, run_id, changes)

    async def damage_schedule(self, store: Store, schedule_id: str) -> None:
        client = raw_client()
        try:
            client.hset(f"{self.prefix}sched", schedule_id, b"{not json")
        finally:
            client.close()


def raw_client() -> Any:
    """A plain synchronous client on the test server (the test's hands, not a store's)."""
    return redis.Redis.from_url(URL)


# -- leases: fencing, expiry, killed connections ----------------------------------------------


async def test_a_lease_lost_to_expiry_is_fenced_off(prefix: str) -> None:
    """A lease whose key expired (its process stalled past ``lease_ttl``) and was taken over:
    the old holder's writes fail, its ``on_lost`` is told, and only the new driver writes."""
    first, second = make(prefix), make(prefix)
    try:
        run = record()
        await first.create_run(run, [event("run_started")])
        old = await acquire(first, run.id)
        told: list[StoreError] = []
        old.on_lost(told.append)
        client = raw_client()
        client.delete(f"{prefix}lease:{run.id}")  # what the expiry of its time to live does
        client.hincrby(f"{prefix}r:{run.id}", "ep", 1)  # and a taking (the acquire below) next
        client.close()
        new = await acquire(second, run.id)
        with pytest.raises(StoreError, match="lost"):
            await old.append([event("step_completed", op=0, by="old")])
        assert len(told) == 1 and "lost" in str(told[0])
        with pytest.raises(StoreError, match="lost"):
            await old.save(dataclasses.replace(run, status=RunStatus.COMPLETED))
        await new.append([event("step_completed", op=0, by="new")])
        await old.release()  # gives back nothing: the lease is another's now
        assert await first.try_acquire(run.id) is None
        await new.release()
        journal = await first.read_journal(run.id)
        assert [e.get("by") for e in journal] == [None, "new"]
        assert (await first.get_run(run.id)).status is RunStatus.PENDING
    finally:
        await first.close()
        await second.close()


async def test_a_stalled_holder_learns_its_lease_expired_without_writing(prefix: str) -> None:
    """The keeper renews held leases; when it finds one gone, ``on_lost`` fires at once (the
    driver stops its steps), before the holder tries another write."""
    first, second = make(prefix, lease_ttl=0.3), make(prefix)
    try:
        run = record()
        await first.create_run(run)
        lease = await acquire(first, run.id)
        told: list[StoreError] = []
        lease.on_lost(told.append)
        await asyncio.sleep(0.5)  # renewed meanwhile: still held
        assert told == [] and await second.try_acquire(run.id) is None
        client = raw_client()
        client.delete(f"{prefix}lease:{run.id}")
        # Another driver's taking moves the epoch on: a lease that lapsed with the epoch still
        # its own would be taken back by the keeper.
        client.hincrby(f"{prefix}r:{run.id}", "ep", 1)
        client.close()
        taken = await acquire(second, run.id)
        for _ in range(100):
            if told:
                break
            await asyncio.sleep(0.02)
        assert told and "lost" in str(told[0])
        await taken.release()
        await lease.release()
    finally:
        await first.close()
        await second.close()


@pytest.fixture
def quick_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder connection's reply is due within 0.5 s (15 s otherwise): a test blocks the
    loop for longer than that without waiting as long."""
    from wf.store.redis import _holder

    monkeypatch.setattr(_holder, "BLOCK", 0.2)
    monkeypatch.setattr(_holder, "SLACK", 0.3)
    monkeypatch.setattr(_holder, "TICK", 0.1)


@pytest.mark.usefixtures("quick_holder")
async def test_a_lease_outlives_a_blocked_loop_when_nobody_took_the_run(prefix: str) -> None:
    """Blocking code in a step stops the loop, and with it the lease's renewal and the holder
    connection's reads, for longer than ``lease_ttl``. Nobody took the run meanwhile (its
    fencing epoch is the lease's): the lease is still this driver's when the loop turns again,
    as a PostgreSQL session lock is; its writes go on and no other instance may take it."""
    first, second = make(prefix, lease_ttl=0.3), make(prefix)
    try:
        run = record()
        await first.create_run(run, [event("run_started")])
        kept = await acquire(first, run.id)  # written to before the keeper renews it
        renewed = await acquire(first, (await created(first)).id)  # renewed first
        told: list[StoreError] = []
        kept.on_lost(told.append)
        renewed.on_lost(told.append)
        time.sleep(1.2)  # the loop blocked: both keys lapse, the holder's read is overdue
        await kept.append([event("step_completed", op=0)])
        await asyncio.sleep(0.5)  # the keeper's renewal, the holder's next read
        assert told == []
        assert await second.try_acquire(run.id) is None
        assert await second.try_acquire(renewed.run_id) is None
        await kept.append([event("step_completed", op=1)])
        await kept.release()
        await renewed.release()
        assert [e.get("op") for e in await second.read_journal(run.id)] == [None, 0, 1]
    finally:
        await first.close()
        await second.close()


@pytest.mark.usefixtures("quick_holder")
async def test_a_lease_another_driver_took_while_the_loop_was_blocked_is_lost(
    prefix: str,
) -> None:
    store = make(prefix, lease_ttl=0.3)
    try:
        run = record()
        await store.create_run(run, [event("run_started")])
        old = await acquire(store, run.id)
        told: list[StoreError] = []
        old.on_lost(told.append)
        time.sleep(0.6)  # lapsed; then another driver takes the run, as a claim does:
        client = raw_client()
        try:
            epoch = client.hincrby(f"{prefix}r:{run.id}", "ep", 1)
            client.set(f"{prefix}lease:{run.id}", f"{epoch}:call:other")
            with pytest.raises(StoreError, match="lost"):
                await old.append([event("step_completed", op=0, by="old")])
            assert told
            await old.release()
            assert client.get(f"{prefix}lease:{run.id}") == f"{epoch}:call:other".encode()
        finally:
            client.close()
        assert [e.get("by") for e in await store.read_journal(run.id)] == [None]
    finally:
        await store.close()


def holder_of(prefix: str, run_id: str) -> str:
    """The client id holding the run's lease (its key holds ``<epoch>:<call>:<holder>``)."""
    client = raw_client()
    try:
        token = client.get(f"{prefix}lease:{run_id}")
    finally:
        client.close()
    assert token is not None, "the run is not leased"
    return bytes(token).decode().rpartition(":")[2]


def kill_clients(*, ids: Sequence[str] = (), name: str | None = None) -> int:
    """``CLIENT KILL`` the connections with these ids, or named ``name``; how many."""
    client = raw_client()
    try:
        if name is not None:
            ids = [str(c["id"]) for c in client.client_list() if c.get("name") == name]
        return sum(int(client.execute_command("CLIENT", "KILL", "ID", i)) for i in ids)
    finally:
        client.close()


async def _acquire_soon(store: Store, run_id: str, seconds: float = 5.0) -> Any:
    """Poll until the run's lease can be taken."""
    for _ in range(int(seconds / 0.02)):
        lease = await store.try_acquire(run_id)
        if lease is not None:
            return lease
        await asyncio.sleep(0.02)
    raise AssertionError(f"lease on {run_id} never became free")


async def test_a_lease_whose_holder_connection_died_is_fenced_off(prefix: str) -> None:
    """``CLIENT KILL`` of the connection a lease names as its holder (the twin of PostgreSQL's
    ``pg_terminate_backend`` of the lock connection): another instance takes the run over at
    once, not after the lease's time to live, and the old driver is told and writes nothing."""
    first, second = make(prefix), make(prefix)
    try:
        run = record()
        await first.create_run(run, [event("run_started")])
        old = await acquire(first, run.id)
        told: list[StoreError] = []
        old.on_lost(told.append)
        await old.append([event("step_completed", op=0, by="old")])
        assert await second.try_acquire(run.id) is None
        assert kill_clients(ids=[holder_of(prefix, run.id)]) == 1
        began = asyncio.get_running_loop().time()
        new = await _acquire_soon(second, run.id)
        assert asyncio.get_running_loop().time() - began < 1.0  # the TTL is 15 s
        for _ in range(100):
            if told:
                break
            await asyncio.sleep(0.01)
        assert len(told) == 1 and "connection" in str(told[0])
        with pytest.raises(StoreError, match="lost"):
            await old.append([event("step_completed", op=1, by="old")])
        with pytest.raises(StoreError, match="lost"):
            await old.save(dataclasses.replace(run, status=RunStatus.FAILED))
        await old.release()  # nothing to give back: no error
        await new.append([event("step_completed", op=1, by="new")])
        await new.release()
        journal = await second.read_journal(run.id)
        assert [e.get("by") for e in journal] == [None, "old", "new"]
        assert (await second.get_run(run.id)).status is RunStatus.PENDING
        again = await acquire(first, run.id)  # under a fresh holder connection
        assert holder_of(prefix, run.id) != "" and told == told[:1]
        await again.release()
    finally:
        await first.close()
        await second.close()


async def test_a_lease_held_quietly_for_longer_than_a_read_timeout_is_kept(prefix: str) -> None:
    """The holder connection blocks in reads longer than redis-py's default socket timeout (5
    s): a lease held without a write for longer is neither lost nor taken."""
    first, second = make(prefix), make(prefix)
    try:
        run = record()
        await first.create_run(run, [event("run_started")])
        lease = await acquire(first, run.id)
        told: list[StoreError] = []
        lease.on_lost(told.append)
        await asyncio.sleep(6.5)
        assert told == []
        assert await second.try_acquire(run.id) is None
        await lease.append([event("step_completed", op=0)])
        await lease.release()
    finally:
        await first.close()
        await second.close()


async def test_killed_command_connections_lose_no_lease(prefix: str) -> None:
    """``CLIENT KILL`` of an instance's other connections (its pool's, its subscription's): the
    lease goes with its holder connection only, so no other instance takes the run; the holder
    reconnects and goes on."""
    first, second = make(prefix), make(prefix)
    try:
        run = record()
        await first.create_run(run, [event("run_started")])
        lease = await acquire(first, run.id)
        await lease.append([event("step_completed", op=0)])
        assert kill_clients(name=first.client_name) >= 1
        assert await second.try_acquire(run.id) is None
        await lease.append([event("step_completed", op=1)])
        await lease.release()
        assert [e.get("op") for e in await second.read_journal(run.id)] == [None, 0, 1]
        again = await acquire(second, run.id)
        await again.release()
    finally:
        await first.close()
        await second.close()


async def test_the_runs_of_a_killed_process_are_claimed_at_once(prefix: str) -> None:
    """A process holding leases is SIGKILLed: its holder connection closes with it, and the
    next claim takes its runs over, rather than finding them held for the leases' TTL."""
    store = make(prefix)
    try:
        runs = [record() for _ in range(3)]
        for run in runs:
            await store.create_run(run, [event("run_started")])
        proc = python(
            "import asyncio\n"
            "from wf.store.redis import RedisStore\n"
            "async def main():\n"
            f"    store = RedisStore({URL!r}, prefix={prefix!r})\n"
            "    leases = await store.claim(4e9, 10)\n"
            "    print(len(leases), flush=True)\n"
            "    await asyncio.sleep(120)\n"
            "asyncio.run(main())\n"
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
            assert line.strip() == "3", proc.stderr.read() if proc.stderr else ""
            held: set[str] = set()
            assert await store.claim(4e9, 10, held=held) == []
            assert held == {run.id for run in runs}
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        began = asyncio.get_running_loop().time()
        leases: list[Any] = []
        while len(leases) < 3:
            assert asyncio.get_running_loop().time() - began < 2.0, "not taken over"
            leases += await store.claim(4e9, 10)
            await asyncio.sleep(0.02)
        assert sorted(lease.run_id for lease in leases) == sorted(run.id for run in runs)
        for lease in leases:
            await lease.release()
    finally:
        await store.close()


async def test_a_forked_helper_keeps_no_lease_of_a_dead_worker(prefix: str) -> None:
    """A step's helper forked by the worker inherits the holder connection's socket, which
    keeps the holder connected for the server: the worker killed, the run is free at once,
    not when the helper exits or when its lease's minute runs out. (A cap's place is a key
    with a time to live, held by no connection: it ends with its time to live, helper or
    not.)"""
    store = make(prefix, lease_ttl=60)
    try:
        run = record()
        await store.create_run(run, [event("run_started")])
        code = forking_holder(f"RedisStore({URL!r}, prefix={prefix!r}, lease_ttl=60)", run.id)
        code = "from wf.store.redis import RedisStore\n" + code
        await taken_over_beside_a_forked_helper(store, code, run.id, place_too=False)
    finally:
        await store.close()


async def test_a_driver_whose_holder_connection_is_killed_stops_at_once(prefix: str) -> None:
    """``CLIENT KILL`` of the driver's holder connection: it learns at once (it blocks on that
    connection), cancels its async step and stops; another worker takes the run over at once
    and the step's completion is recorded once."""

    async def cut(run_id: str) -> None:
        assert kill_clients(ids=[holder_of(prefix, run_id)]) == 1

    # Stopped at once, not after the 15 s TTL; taken over at once too.
    await lose_the_lease_then_take_over(
        make(prefix), make(prefix), cut, "connection to Redis", stop_within=2, finish_within=10
    )


async def test_a_driver_that_loses_its_lease_cancels_its_steps_and_stops(prefix: str) -> None:
    """The lease expires and another worker takes the run over: the first driver's keeper
    finds out, the driver cancels its async step and stops, and the run completes once."""

    async def cut(run_id: str) -> None:
        client = raw_client()
        client.delete(f"{prefix}lease:{run_id}")  # expired: the process stalled
        client.hincrby(f"{prefix}r:{run_id}", "ep", 1)  # and another driver took the run
        client.close()

    await lose_the_lease_then_take_over(
        make(prefix, lease_ttl=0.6), make(prefix), cut, "lost", stop_within=10
    )


# -- format, durability, configuration --------------------------------------------------------


async def test_a_newer_format_is_refused(prefix: str) -> None:
    client = raw_client()
    client.set(f"{prefix}format", FORMAT_VERSION + 1)
    client.close()
    store = make(prefix)
    try:
        with pytest.raises(StoreVersionError, match="newer version of wf"):
            await store.open()
    finally:
        await store.close()


async def test_a_store_of_format_1_is_upgraded_with_its_schedules_indexed_by_next_fire(
    prefix: str,
) -> None:
    """Written by a wf before the index of next fires: opening it indexes its schedules (a
    paused one has no place; a damaged one is due, so a worker's pass meets it and names it)
    and says the new format, which an older wf then refuses."""
    client = raw_client()
    try:
        client.set(f"{prefix}format", 1)
        for schedule in (
            Schedule("a", "tests:flow", "* * * * *", next_run=50.0),
            Schedule("b", "tests:flow", "* * * * *", next_run=200.0),
            Schedule("paused", "tests:flow", "* * * * *"),
        ):
            client.hset(f"{prefix}sched", schedule.id, json.dumps(schedule.to_json()))
        client.hset(f"{prefix}sched", "bad", b"{not json")
        store = make(prefix)
        try:
            await store.open()
            assert client.get(f"{prefix}format") == str(FORMAT_VERSION).encode() == b"2"
            assert client.zrange(f"{prefix}snext", 0, -1, withscores=True) == [
                (b"bad", 0.0),
                (b"a", 50.0),
                (b"b", 200.0),
            ]
            with collect_faults() as met:
                due, later = await store.due_schedules(150.0)
            assert [s.id for s in due] == ["a"] and later == 200.0
            assert [f.where for f in met] == [store.schedule_location("bad")]
        finally:
            await store.close()
    finally:
        client.close()


async def test_schedules_an_older_wf_writes_after_the_upgrade_are_indexed_within_a_look(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A wf of format 1 still running after another process upgraded the store saves and
    removes schedules without ``snext``: a worker's pass looks at every schedule every
    ``SCHEDULE_LOOK`` seconds, indexes them (so they fire) and names them, once."""
    client = raw_client()
    store = make(prefix)
    try:
        client.set(f"{prefix}format", 1)
        old = Schedule("moved", "tests:flow", "* * * * *", next_run=5_000.0)
        client.hset(f"{prefix}sched", old.id, json.dumps(old.to_json()))
        client.hset(f"{prefix}sched", "gone", json.dumps(old.to_json()))
        with caplog.at_level(logging.WARNING, logger="wf.store.redis"):
            await store.open()
        upgraded = [r.getMessage() for r in caplog.records if "upgraded" in r.getMessage()]
        assert len(upgraded) == 1 and "from format 1 to 2" in upgraded[0]
        assert await store.due_schedules(1_000.0) == ([], 5_000.0)
        # The older wf goes on: a schedule created, one fired and saved with its next fire,
        # one removed, each as format 1 wrote them (the hash alone).
        made = Schedule("made", "tests:flow", "* * * * *", next_run=1_010.0)
        client.hset(f"{prefix}sched", made.id, json.dumps(made.to_json()))
        old.next_run = 1_020.0
        client.hset(f"{prefix}sched", old.id, json.dumps(old.to_json()))
        client.hdel(f"{prefix}sched", "gone")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="wf.store.redis"):
            # Within the look's period a pass reads the index alone.
            assert await store.due_schedules(1_030.0) == ([], 5_000.0)
            due, later = await store.due_schedules(1_000.0 + _store.SCHEDULE_LOOK)
            assert [s.id for s in due] == ["made", "moved"] and later is None
            assert len(caplog.records) == 1
            said = caplog.records[0].getMessage()
            assert "older wf?" in said and f"{prefix}snext" in said
            assert all(f"{name} (" in said for name in ("made", "moved", "gone"))
            caplog.clear()
            # Once indexed, the next look finds them agreeing and says nothing.
            await store.due_schedules(1_001.0 + 2 * _store.SCHEDULE_LOOK)
            assert caplog.records == []
        assert await store.verify() == []
    finally:
        client.close()
        await store.close()


@wf.workflow
async def ticked(n: int = 0) -> int:
    return n


async def test_a_worker_fires_a_schedule_an_older_wf_saved_after_the_upgrade(
    prefix: str,
) -> None:
    """End to end, on the fake clock: the schedule saved the old way is fired once the
    worker's look comes (within ``SCHEDULE_LOOK`` of its first pass)."""
    client = raw_client()
    client.set(f"{prefix}format", 1)
    clock = MockClock(autojump=False)
    start = clock.now()
    try:
        async with TestEngine(make(prefix), clock) as engine:
            # Made here for its JSON, then written again as a wf of format 1 writes it.
            await wf.schedule("old", ticked, cron="* * * * *")
            raw = client.hget(f"{prefix}sched", "old")
            client.hdel(f"{prefix}sched", "old")
            client.zrem(f"{prefix}snext", "old")
            worker = wf.Worker(engine, retention=False, poll=0.02)
            task = asyncio.ensure_future(worker.run())
            try:
                await _until(lambda: worker.schedules_read_at is not None)
                client.hset(f"{prefix}sched", "old", raw)
                client.publish(f"{prefix}cq", "!schedules")
                clock.jump(_store.SCHEDULE_LOOK + 1)

                async def fired() -> bool:
                    runs = await engine.store.list_runs(limit=10)
                    return any(r.schedule_id == "old" for r in runs)

                await _until_async(fired)
                # The run is created before the pass that fired it ends (and notes its read).
                await _until(
                    lambda: (worker.schedules_read_at or 0.0) >= start + _store.SCHEDULE_LOOK
                )
            finally:
                worker.stop()
                await asyncio.wait_for(task, 10)
    finally:
        client.close()


def _many_schedules(client: Any, prefix: str, count: int) -> list[Schedule]:
    """``count`` schedules written with their place in ``snext``, as format 2 writes them."""
    made = [
        Schedule(f"s{i:04d}", "tests:flow", "* * * * *", next_run=10_000.0 + i)
        for i in range(count)
    ]
    pipe = client.pipeline(transaction=False)
    for schedule in made:
        pipe.hset(f"{prefix}sched", schedule.id, json.dumps(schedule.to_json()))
        pipe.zadd(f"{prefix}snext", {schedule.id: schedule.next_run})
    pipe.execute()
    return made


def _scripts_sent(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scripts the store sends from now on, in order (each call one element)."""
    sent: list[str] = []
    send = store._eval

    async def counted(script: str, *args: Any, again: bool = False) -> Any:
        sent.append(script)
        return await send(script, *args, again=again)

    monkeypatch.setattr(store, "_eval", counted)
    return sent


async def test_the_look_at_every_schedule_goes_in_slices(
    prefix: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Lua script holds the whole server: the look reads the schedules a slice per script
    (``SCHEDULE_SLICE``), not all in one, and still indexes a schedule saved without its
    place, moves one saved at another time, takes out a member that is no schedule's and
    names them in one warning, all within the pass it is due in."""
    monkeypatch.setattr(_store, "SCHEDULE_SLICE", 20)
    store = make(prefix)
    client = raw_client()
    try:
        await store.open()
        made = _many_schedules(client, prefix, 300)
        fresh = Schedule("made", "tests:flow", "* * * * *", next_run=50.0)
        client.hset(f"{prefix}sched", fresh.id, json.dumps(fresh.to_json()))
        moved = dataclasses.replace(made[150], next_run=60.0)
        client.hset(f"{prefix}sched", moved.id, json.dumps(moved.to_json()))
        client.zadd(f"{prefix}snext", {"gone": 1.0})
        sent = _scripts_sent(store, monkeypatch)
        with caplog.at_level(logging.WARNING, logger="wf.store.redis"):
            due, later = await store.due_schedules(100.0)
        assert [s.id for s in due] == ["made", moved.id] and later == 10_000.0
        # 301 schedules and 301 members, 20 a slice: at least 15 scripts, each bounded.
        assert len(sent) >= 16, len(sent)
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1 and "older wf?" in warned[0]
        assert all(f"{name} (" in warned[0] for name in ("made", moved.id, "gone"))
        indexed = dict(client.zrange(f"{prefix}snext", 0, -1, withscores=True))
        assert len(indexed) == 301 and b"gone" not in indexed
        assert indexed[b"made"] == 50.0 and indexed[moved.id.encode()] == 60.0
        # Within the look's period a pass is one script again.
        del sent[:]
        await store.due_schedules(101.0)
        assert len(sent) == 1
    finally:
        client.close()
        await store.close()


async def test_schedules_saved_between_the_slices_of_a_look_keep_their_place(
    prefix: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each slice is right on its own: a schedule saved, moved or deleted by a wf of this
    format while a look is half done keeps the index its own script wrote."""
    monkeypatch.setattr(_store, "SCHEDULE_SLICE", 20)
    store = make(prefix)
    other = make(prefix)
    client = raw_client()
    try:
        await store.open()
        made = _many_schedules(client, prefix, 200)
        send = store._eval
        calls = 0

        async def meanwhile(script: str, *args: Any, again: bool = False) -> Any:
            nonlocal calls
            calls += 1
            if calls == 3:
                await other.save_schedule(dataclasses.replace(made[0], next_run=70.0))
                await other.save_schedule(dataclasses.replace(made[199], next_run=None))
                await other.save_schedule(Schedule("new", "tests:flow", "* * * * *", next_run=80.0))
                await other.delete_schedule(made[100].id)
            return await send(script, *args, again=again)

        monkeypatch.setattr(store, "_eval", meanwhile)
        with caplog.at_level(logging.WARNING, logger="wf.store.redis"):
            due, _ = await store.due_schedules(100.0)
        # Saves of this format between slices wrote their own places: the look had nothing
        # to put right, so it names nothing.
        assert "indexed now" not in caplog.text
        assert [s.id for s in due] == ["new", made[0].id]
        indexed = dict(client.zrange(f"{prefix}snext", 0, -1, withscores=True))
        assert len(indexed) == 199
        assert made[100].id.encode() not in indexed and made[199].id.encode() not in indexed
        assert indexed[made[0].id.encode()] == 70.0 and indexed[b"new"] == 80.0
        assert await store.verify() == []
    finally:
        client.close()
        await store.close()
        await other.close()


async def test_a_look_that_fails_partway_names_what_it_indexed_and_looks_again(
    prefix: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The slices done before one failed have indexed their schedules: they are named then
    (the next look finds them agreeing), and the next pass looks again."""
    monkeypatch.setattr(_store, "SCHEDULE_SLICE", 20)
    store = make(prefix)
    client = raw_client()
    try:
        await store.open()
        made = _many_schedules(client, prefix, 200)
        client.delete(f"{prefix}snext")  # every schedule saved without its place
        send = store._eval
        calls = 0

        async def failing(script: str, *args: Any, again: bool = False) -> Any:
            nonlocal calls
            calls += 1
            if calls == 4:
                raise wf.StoreUnavailable("connection lost")
            return await send(script, *args, again=again)

        monkeypatch.setattr(store, "_eval", failing)
        with (
            caplog.at_level(logging.WARNING, logger="wf.store.redis"),
            pytest.raises(wf.StoreUnavailable),
        ):
            await store.due_schedules(100.0)
        named = caplog.text.count("put back in it")
        indexed = client.zcard(f"{prefix}snext")
        assert 0 < named == indexed < len(made)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="wf.store.redis"):
            await store.due_schedules(100.5)  # within SCHEDULE_LOOK: looked again all the same
        assert client.zcard(f"{prefix}snext") == len(made)
        assert caplog.text.count("put back in it") == len(made) - indexed
    finally:
        client.close()
        await store.close()


async def test_verify_repairs_the_index_of_next_fires_in_slices(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wf store verify`` puts ``snext`` right a slice per script too (verify runs beside
    live workers): a schedule missing from it, one at another time, a damaged one (due, so a
    pass names it) and a stray member, with more schedules than a slice."""
    monkeypatch.setattr(_store, "SCHEDULE_SLICE", 20)
    store = make(prefix)
    client = raw_client()
    try:
        await store.open()
        made = _many_schedules(client, prefix, 300)
        client.zrem(f"{prefix}snext", made[10].id)
        client.zadd(f"{prefix}snext", {made[20].id: 5.0, "gone": 1.0})
        client.hset(f"{prefix}sched", made[30].id, b"{not json")
        sent = _scripts_sent(store, monkeypatch)
        problems = await store.verify()
        index = f"{prefix}snext"
        assert sorted(p for p in problems if index in p) == sorted(
            [
                f"schedule '{made[10].id}': {index}: put back in it",
                f"schedule '{made[20].id}': {index}: moved to its next fire",
                f"schedule '{made[30].id}': {index}: moved to its next fire",
                f"schedule 'gone': {index}: removed from it (no schedule has that id)",
            ]
        )
        assert len(sent) >= 16, len(sent)
        indexed = dict(client.zrange(f"{prefix}snext", 0, -1, withscores=True))
        assert len(indexed) == 300 and indexed[made[30].id.encode()] == 0.0
        assert indexed[made[20].id.encode()] == made[20].next_run
    finally:
        client.close()
        await store.close()


async def _until(check: Any, seconds: float = 10.0) -> None:
    """Until ``check()`` (real time, bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not check():
        assert loop.time() < deadline, "not in time"
        await asyncio.sleep(0.01)


async def _until_async(check: Any, seconds: float = 10.0) -> None:
    """Until ``await check()`` (real time, bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        assert loop.time() < deadline, "not in time"
        await asyncio.sleep(0.02)


async def test_a_pass_over_the_schedules_reads_the_due_ones_alone(prefix: str) -> None:
    """A schedule not due is not read: its damage is met when it comes due (or by a listing,
    or ``wf store verify``), not by every pass of every worker."""
    store = make(prefix)
    client = raw_client()
    try:
        for schedule_id, at in (("due", 10.0), ("later", 500.0), ("damaged", 400.0)):
            await store.save_schedule(Schedule(schedule_id, "tests:flow", "* * * * *", next_run=at))
        client.hset(f"{prefix}sched", "damaged", b"{not json")
        with collect_faults() as met:
            due, later = await store.due_schedules(100.0)
        assert [s.id for s in due] == ["due"] and later == 400.0
        assert met == []
        with collect_faults() as met:
            assert [s.id for s in await store.list_schedules()] == ["due", "later"]
        assert [f.where for f in met] == [store.schedule_location("damaged")]
        await store.save_schedule(Schedule("later", "tests:flow", "* * * * *"))  # paused
        assert await store.delete_schedule("due") is True
        assert client.zrange(f"{prefix}snext", 0, -1) == [b"damaged"]
    finally:
        client.close()
        await store.close()


async def test_verify_puts_the_index_of_next_fires_right(prefix: str) -> None:
    store = make(prefix)
    client = raw_client()
    try:
        await store.save_schedule(Schedule("a", "tests:flow", "* * * * *", next_run=50.0))
        await store.save_schedule(Schedule("b", "tests:flow", "* * * * *", next_run=60.0))
        client.zrem(f"{prefix}snext", "a")
        client.zadd(f"{prefix}snext", {"b": 99.0, "gone": 1.0})
        problems = await store.verify()
        index = f"{prefix}snext"
        assert sorted(p for p in problems if index in p) == [
            f"schedule 'a': {index}: put back in it",
            f"schedule 'b': {index}: moved to its next fire",
            f"schedule 'gone': {index}: removed from it (no schedule has that id)",
        ]
        assert await store.verify() == []
        assert [s.id for s in (await store.due_schedules(100.0))[0]] == ["a", "b"]
    finally:
        client.close()
        await store.close()


async def test_a_garbage_format_is_reported(prefix: str) -> None:
    client = raw_client()
    client.set(f"{prefix}format", "nonsense")
    client.close()
    store = make(prefix)
    try:
        with pytest.raises(StoreCorrupted, match="format"):
            await store.get_run("wrun_x")
    finally:
        await store.close()


async def test_a_format_key_of_another_type_is_named(prefix: str) -> None:
    """A stray write that made the format key a hash: every command said a bare WRONGTYPE,
    naming no key."""
    client = raw_client()
    client.hset(f"{prefix}format", "x", "1")
    client.close()
    store = make(prefix)
    try:
        with pytest.raises(StoreCorrupted, match=f"{prefix}format: "):
            await store.get_run("wrun_x")
    finally:
        await store.close()


async def test_a_format_damaged_while_open_is_reported_by_store_info(prefix: str) -> None:
    store = make(prefix)
    try:
        await store.open()
        client = raw_client()
        client.set(f"{prefix}format", "nonsense")
        client.close()
        with pytest.raises(StoreCorrupted, match="not a format number"):
            await store.store_info()
    finally:
        await store.close()


async def test_an_unreachable_server_is_a_clear_error() -> None:
    store = RedisStore("redis://127.0.0.1:1/0", prefix="nowhere")
    try:
        with pytest.raises(StoreError, match=r"cannot reach Redis at redis://127\.0\.0\.1:1/0"):
            await store.open()
    finally:
        await store.close()


async def test_a_server_that_can_lose_writes_is_warned_about_once(
    prefix: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "_WARNED", set())
    client = raw_client()
    settings = client.config_get("append*")
    client.close()
    safe = settings.get("appendonly") == "yes" and settings.get("appendfsync") == "always"
    for _ in range(2):
        store = make(prefix)
        with caplog.at_level(logging.WARNING, logger="wf.store.redis"):
            await store.open()
        await store.close()
    warnings = [r for r in caplog.records if "can lose acknowledged writes" in r.getMessage()]
    assert len(warnings) == (0 if safe else 1)
    if warnings:
        assert "appendfsync always" in warnings[0].getMessage()


async def test_a_server_that_may_evict_keys_is_warned_about(
    prefix: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shared server's settings are left alone: the store is told what an evicting one says.
    import redis.asyncio

    async def config_get(self: Any, pattern: str = "*") -> dict[str, str]:
        if pattern.startswith("maxmemory"):
            return {"maxmemory": "104857600", "maxmemory-policy": "allkeys-lru"}
        return {"appendonly": "yes", "appendfsync": "always"}

    monkeypatch.setattr(_store, "_WARNED", set())
    monkeypatch.setattr(redis.asyncio.Redis, "config_get", config_get)
    store = make(prefix)
    with caplog.at_level(logging.WARNING, logger="wf.store.redis"):
        await store.open()
    await store.close()
    [warning] = [r.getMessage() for r in caplog.records if "evict" in r.getMessage()]
    assert "maxmemory-policy allkeys-lru" in warning
    assert "set maxmemory-policy noeviction" in warning
    assert not [r for r in caplog.records if "can lose acknowledged writes" in r.getMessage()]


def test_a_password_never_shows_in_messages() -> None:
    store = RedisStore("redis://app:s3cret@db.example:6380/2", prefix="billing")
    assert "s3cret" not in store.location and "s3cret" not in repr(store)
    assert store.location == "redis://app@db.example:6380/2 (keys billing:*)"


def test_a_bad_prefix_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="prefix"):
        RedisStore(URL, prefix="")


def test_wf_redis_url_selects_the_redis_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WF_REDIS_URL", URL)
    monkeypatch.setenv("WF_REDIS_PREFIX", "proj-a")
    monkeypatch.delenv("WF_POSTGRES_DSN", raising=False)
    store = default_store()
    assert isinstance(store, RedisStore) and store.prefix == "proj-a:"
    assert describe_store() == store.location
    monkeypatch.setenv("WF_POSTGRES_DSN", "postgresql://x@y/z")
    with pytest.raises(UsageError, match="both postgres_dsn and redis_url"):
        default_store()


def test_configure_takes_a_redis_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("WF_REDIS_URL", "WF_POSTGRES_DSN", "WF_REDIS_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    try:
        engine = wf.configure(redis_url=URL)
        assert engine is not None and isinstance(engine.store, RedisStore)
        assert engine.store.prefix == "wf:"
    finally:
        set_overrides(redis_url=None)


def test_the_cli_reports_and_verifies_a_redis_store(prefix: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    env.update(WF_REDIS_URL=URL, WF_REDIS_PREFIX=prefix, PYTHONPATH=REPO)
    flows = tmp_path / "flows.py"
    flows.write_text(
        "import wf\n\n@wf.step\ndef double(n: int) -> int:\n    return n * 2\n\n"
        "@wf.workflow\nasync def twice(n: int) -> int:\n    return await double(n)\n"
    )

    def wf_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "wf", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    ran = wf_cli("run", "flows.py:twice", "--input", "21", "--json")
    assert ran.returncode == 0, ran.stderr
    info = wf_cli("store", "info", "--json")
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["kind"] == "redis" and data["runs"]["completed"] == 1
    assert prefix in data["location"]
    verified = wf_cli("store", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    shown = wf_cli("info")
    assert shown.returncode == 0 and prefix in shown.stdout and "***" in shown.stdout


def test_a_missing_redis_package_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Without redis-py (a package that cannot be imported stands for it here), a command that
    opens the store says which extra to install."""
    fake = tmp_path / "fake" / "redis"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'redis'\", name='redis')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    env.update(WF_REDIS_URL=URL, PYTHONPATH=os.pathsep.join([str(fake.parent), REPO]))
    done = subprocess.run(
        [sys.executable, "-m", "wf", "runs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'wf-durable[redis]'" in lines[0], done.stderr


@pytest.mark.parametrize("ending", ["a reply", "an error"])
async def test_a_cancelled_store_call_stays_cancelled_whatever_redis_py_makes_of_it(
    ending: str,
) -> None:
    """redis-py, cancelled in the middle of a command, can still end it with a reply or an
    error of its own. The store's caller is cancelled all the same: a loop that goes on after
    store errors must not outlive its own cancellation (no server needed)."""
    started = asyncio.Event()

    async def command() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if ending == "an error":
                raise redis.exceptions.TimeoutError("Timeout reading from socket") from None
        return "OK"

    caller = asyncio.ensure_future(_store.detached(command()))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_a_store_call_after_a_caught_cancellation_still_answers() -> None:
    """Only a cancellation that comes during the call cancels it: a caller that caught one
    earlier (and goes on) gets its replies."""

    async def command() -> str:
        await asyncio.sleep(0)
        return "OK"

    async def caller() -> str:
        me = asyncio.current_task()
        assert me is not None
        me.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1)
        assert me.cancelling() == 1
        return await _store.detached(command())

    assert await caller() == "OK"


async def test_verify_walks_every_run_whatever_its_name(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs are indexed by creation number: chosen ids out of name order, and a stray member
    that is not text, are each read once (a walk by name looped over them forever)."""
    from wf.store.redis import _verify

    monkeypatch.setattr(_verify, "_BATCH", 2)
    store = make(prefix)
    try:
        for name in "edcba":
            await created(store, id=f"run-{name}")
        client = redis.Redis.from_url(URL)
        client.hset(f"{prefix}r:run-a", "rec", b"{not json")
        client.zadd(f"{prefix}ix:all", {b"\xff\xfejunk": 99})
        client.close()
        problems = await asyncio.wait_for(store.verify(), 10)
        assert len([p for p in problems if "run-a" in p]) == 1, problems
        assert len([p for p in problems if "junk" in p]) == 1, problems
        assert len(problems) == 2, problems
    finally:
        await store.close()


# -- the server refusing a connection, forgetting its scripts ---------------------------------


@contextlib.asynccontextmanager
async def full_server() -> Any:
    """The URL of a stand-in for a server at ``maxclients``: it answers every new connection
    with Redis's refusal and closes it."""

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"-ERR max number of clients reached\r\n")
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    try:
        yield f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"
    finally:
        server.close()


async def test_a_refused_lease_holder_connection_is_the_store_unavailable(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server refusing the connection that holds this instance's leases (``maxclients``
    reached, a restart) fails a claim or a lease with ``wf.StoreUnavailable``, which a worker
    waits out (it exited 1 with redis-py's error); once the server accepts it, claims go on."""
    store = make(prefix)
    try:
        run = await created(store)
        async with full_server() as url:
            # New connections only: the pool's (made already) go on to the real server.
            monkeypatch.setattr(store, "url", url)
            with pytest.raises(wf.StoreUnavailable, match="max number of clients"):
                await asyncio.wait_for(store.claim(1e12, 10), 10)
            with pytest.raises(wf.StoreUnavailable, match="max number of clients"):
                await asyncio.wait_for(store.try_acquire(run.id), 10)
        monkeypatch.undo()
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert [x.run_id for x in leases] == [run.id]
        await leases[0].release()
    finally:
        await store.close()


async def test_scripts_the_server_forgot_are_sent_whole(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script cache emptied between a script's load and its call (``SCRIPT FLUSH``, a
    restart, a failover; here every load is forgotten at once): each call, alone or in a
    pipeline of lease writes, is sent again with the script's text, and succeeds (it failed
    with "No matching script", and the worker exited 3)."""
    import redis.asyncio as aioredis
    from redis.asyncio.client import Pipeline

    forgotten = "0" * 40
    register = aioredis.Redis.register_script

    def registered(self: Any, script: Any) -> Any:
        found = register(self, script)
        found.sha = forgotten
        return found

    async def load(self: Any, script: Any) -> str:
        return forgotten

    async def load_scripts(self: Any) -> None:
        for script in self.scripts:
            script.sha = forgotten

    monkeypatch.setattr(aioredis.Redis, "register_script", registered)
    monkeypatch.setattr(aioredis.Redis, "script_load", load)
    monkeypatch.setattr(Pipeline, "load_scripts", load_scripts)
    store = make(prefix)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.append([event("step_completed", op=0)])
        await lease.release()
        assert [e.get("op") for e in await store.read_journal(run.id)] == [None, 0]
    finally:
        await store.close()


async def test_taking_a_place_sent_twice_takes_one_place(prefix: str) -> None:
    """``try_slot``'s script sent again after its reply was lost (``again``) finds the place
    the first took under the same token, instead of taking a second one."""
    from wf.store.redis import _scripts

    store = make(prefix)
    try:
        args = ("cap", "3", "token-1", "15000")
        assert await store._eval(_scripts.TRY_SLOT, *args) == 0
        assert await store._eval(_scripts.TRY_SLOT, *args) == 0
        assert await store.slots_taken("cap", 3) == 1
        assert await store._eval(_scripts.TRY_SLOT, "cap", "3", "token-2", "15000") == 1
    finally:
        await store.close()


# -- one run's key of another type, or a field that is no number ------------------------------

RUN_DAMAGE = {
    "run hash": lambda c, p, i: (c.delete(f"{p}r:{i}"), c.set(f"{p}r:{i}", b"x")),
    "journal": lambda c, p, i: (c.delete(f"{p}j:{i}"), c.set(f"{p}j:{i}", b"x")),
    "inbox": lambda c, p, i: c.set(f"{p}in:{i}", b"x"),
    "epoch": lambda c, p, i: c.hset(f"{p}r:{i}", "ep", b"abc"),
    "creation number": lambda c, p, i: c.hset(f"{p}r:{i}", "seq", b"x"),
}


@pytest.mark.parametrize("kind", sorted(RUN_DAMAGE))
async def test_one_runs_unusable_key_is_that_runs_damage_alone(prefix: str, kind: str) -> None:
    """The claim passes over the damaged run (taking nothing of it: no lease left held),
    names it, and leases the others; a listing lists the others; verify names it; a write or
    lease of the run itself is ``StoreCorrupted`` and writes nothing."""
    store = make(prefix)
    try:
        runs = [await created(store, id=f"run-{i}") for i in range(4)]
        victim = runs[1].id
        lease = await acquire(store, victim)  # a lease held across the damage, for its write
        await lease.release()
        lease = await acquire(store, victim)
        client = raw_client()
        try:
            RUN_DAMAGE[kind](client, prefix, victim)
            await lease.release()
            leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
            assert sorted(x.run_id for x in leases) == [r.id for r in runs if r.id != victim]
            assert client.exists(f"{prefix}lease:{victim}") == 0
            assert store.faults.of_kind("run") == {victim}, list(store.faults)
            for x in leases:
                await x.release()
            listed = {r.id for r in await store.list_runs(limit=10)}
            assert listed >= {r.id for r in runs if r.id != victim}
            problems = await store.verify()
            assert [p for p in problems if victim in p], problems
            assert not [p for p in problems if "b'" in p], problems  # text, not a bytes repr
            if kind != "inbox":  # the inbox is read by the claim alone
                with pytest.raises(StoreCorrupted):
                    await store.try_acquire(victim)
                assert client.exists(f"{prefix}lease:{victim}") == 0
            if kind in ("creation number", "journal"):
                client.hset(f"{prefix}r:{victim}", "ep", 0)  # leased by hand, for its write
                token = "1:x:y"
                client.set(f"{prefix}lease:{victim}", token)
                hand = _lease.RedisLease(store, victim, token, 1, runs[1].seq)
                with pytest.raises(StoreCorrupted):
                    await hand.append_and_save([event("step_started", op=0, name="s")], runs[1])
                if kind == "creation number":
                    assert client.llen(f"{prefix}j:{victim}") == 1  # nothing appended
        finally:
            client.close()
    finally:
        await store.close()


# What each read of one run reads, by the key it meets: (key without the prefix, the read).
RUN_READS: dict[str, tuple[str, Callable[[RedisStore, str], Awaitable[Any]]]] = {
    "record": ("r:{id}", lambda s, i: s.get_run(i)),
    "journal": ("j:{id}", lambda s, i: s.read_journal(i)),
    "inbox": ("in:{id}", lambda s, i: s.read_inbox(i)),
    "logs": ("lg:{id}", lambda s, i: s.read_logs(i)),
    "stream names, read": ("sn:{id}", lambda s, i: s.read_chunks(i, "out")),
    "stream chunks": ("sc:{id}:out", lambda s, i: s.read_chunks(i, "out")),
}
"""The listing of a run's streams is not among them: it leaves such a stream out and names its
key in the store's faults (``test_a_damaged_stream_is_left_out_of_its_runs_streams_and_named``)."""


@pytest.mark.parametrize("kind", sorted(RUN_READS))
async def test_a_read_of_a_run_that_meets_a_key_of_another_type_names_the_key(
    prefix: str, kind: str
) -> None:
    """A stray write replaced one of a run's keys by a value of another type: its read is a
    ``StoreCorrupted`` naming the key (``wf inspect`` said a bare ``WRONGTYPE`` for the
    journal, where the record's key was named)."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store, id="run-1")
        client.hset(f"{prefix}sn:{run.id}", "out", b"0")  # a stream, so its chunks are read
        name, read = RUN_READS[kind]
        key = prefix + name.format(id=run.id)
        client.delete(key)
        client.sadd(key, b"x")  # a set: no read of a run's keys takes one
        with pytest.raises(StoreCorrupted, match=f"^{re.escape(key)}: WRONGTYPE"):
            await read(store, run.id)
    finally:
        client.close()
        await store.close()


# -- the server's refusals are the store's failures, not the runs' damage ---------------------

SERVER_ERRORS = [
    "OOM command not allowed when used memory > 'maxmemory'.",
    "READONLY You can't write against a read only replica.",
    "BUSY Redis is busy running a script.",
    "LOADING Redis is loading the dataset in memory",
    "MASTERDOWN Link with MASTER is down",
]


def refusing(script: str, command: str, error: str) -> str:
    """``script`` as it runs while the server refuses ``command`` with ``error``: its calls go
    through a stand-in for ``redis`` that answers that one command with the error."""
    shim = (
        "local redis = setmetatable({pcall = function(cmd, ...)\n"
        f"  if string.upper(cmd) == {json.dumps(command)} then\n"
        f"    return {{err = {json.dumps(error)}}}\n"
        "  end\n"
        "  return redis.pcall(cmd, ...)\n"
        "end}, {__index = redis})\n"
    )
    return shim + script


@pytest.mark.parametrize("error", SERVER_ERRORS, ids=lambda e: e.split()[0])
async def test_a_server_refusal_during_a_claim_is_a_store_failure_not_damage(
    prefix: str, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server refusing the claim's write (out of memory: ``maxmemory``, ``noeviction``) is
    a ``StoreUnavailable``, which a worker waits out: no run is noted damaged, and once writes
    work again the same runs are claimed (they were skipped for good until the worker
    restarted)."""
    from wf.store.redis import _scripts

    store = make(prefix)
    try:
        runs = [await created(store, id=f"run-{i}") for i in range(3)]
        plain = _scripts.CLAIM
        monkeypatch.setattr(_scripts, "CLAIM", refusing(plain, "HINCRBY", error))
        with pytest.raises(StoreError) as failed:
            await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert isinstance(failed.value, wf.StoreUnavailable), failed.value
        if error.startswith("OOM"):
            assert "refused the write: out of memory" in str(failed.value)
        else:
            assert error.split()[0] in str(failed.value)
        assert list(store.faults) == []
        monkeypatch.setattr(_scripts, "CLAIM", plain)
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert sorted(x.run_id for x in leases) == [r.id for r in runs]
        for x in leases:
            await x.release()
    finally:
        await store.close()


def test_damage_that_leaves_a_script_uncaught_is_a_wfdamage_reply(prefix: str) -> None:
    """Every script catches a run's damage today; one that did not (a script changed later)
    gets a ``WFDAMAGE`` error reply naming where and why, which the store reads as
    ``StoreCorrupted``. The damage was a table without ``err``, which crashes Redis 7.0."""
    client = raw_client()
    try:
        with pytest.raises(redis.ResponseError) as replied:
            client.eval(_scripts._PRELUDE + "damage('r:x', 'not a hash')", 0, prefix)
        assert str(replied.value).startswith("WFDAMAGE r:x: not a hash")
        assert _store.damaged(replied.value) == "r:x: not a hash"
        assert client.ping()
    finally:
        client.close()


# -- a hook record that cannot be read --------------------------------------------------------

DAMAGED_HOOKS = {"not json": b"{{", "no object": b"[1]", "no run id": b'{"token": "tok1"}'}


@pytest.mark.parametrize("raw", sorted(DAMAGED_HOOKS))
async def test_a_finished_run_holding_a_damaged_hook_record_is_kept_and_named(
    prefix: str, raw: str
) -> None:
    """Deleting finished runs (``wf gc``, retention) keeps the one whose hook record cannot be
    read and names it; the others are deleted (the script's raw Lua error stopped them all)."""
    store = make(prefix)
    client = raw_client()
    try:
        runs = [await created(store, id=f"run-{i}") for i in range(3)]
        for run in runs:
            await save(store, run, RunStatus.COMPLETED)
        victim = runs[1].id
        client.sadd(f"{prefix}rh:{victim}", "tok1")
        client.hset(f"{prefix}hooks", "tok1", DAMAGED_HOOKS[raw])
        done = await asyncio.wait_for(
            store.delete_runs([r.id for r in runs], now=1e9, reason="gc"), 10
        )
        assert sorted(done.ids) == [runs[0].id, runs[2].id]
        assert client.exists(f"{prefix}r:{victim}") == 1
        [fault] = list(store.faults)
        assert fault.item == victim
        assert f"field 'tok1' of {prefix}hooks" in fault.reason, fault
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("raw", sorted(DAMAGED_HOOKS))
async def test_registering_or_releasing_a_token_whose_record_is_damaged_is_store_corrupted(
    prefix: str, raw: str
) -> None:
    """The token's record cannot be read: registering it is ``StoreCorrupted`` naming the field,
    as reading it is (``wf hook resume``), and writes nothing; registration no longer
    "succeeded" without writing, nor failed with raw Lua text."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store, id="run-new")
        client.hset(f"{prefix}hooks", "tok1", DAMAGED_HOOKS[raw])
        where = f"field 'tok1' of {prefix}hooks"
        with pytest.raises(StoreCorrupted, match=where):
            await store.register_hook(HookRecord("tok1", run.id, op=1))
        with pytest.raises(StoreCorrupted, match=where):
            await store.get_hook("tok1")
        with pytest.raises(StoreCorrupted, match=where):
            await store.release_hook("tok1", run.id)
        assert client.hget(f"{prefix}hooks", "tok1") == DAMAGED_HOOKS[raw]
        assert client.smembers(f"{prefix}rh:{run.id}") == set()
    finally:
        client.close()
        await store.close()


async def test_verify_names_a_run_whose_journal_is_gone(prefix: str) -> None:
    """A journal key evicted or deleted by hand leaves a run no worker can replay (it fails it
    as damaged): verify names it instead of saying the store is fine."""
    store = make(prefix)
    client = raw_client()
    try:
        runs = [await created(store, id=f"run-{i}") for i in range(2)]
        client.delete(f"{prefix}j:run-1")
        problems = await store.verify()
        assert len(problems) == 1 and f"{prefix}j:run-1" in problems[0], problems
        assert runs[0].id not in problems[0]
    finally:
        client.close()
        await store.close()


async def test_verify_repairs_index_entries_that_disagree_with_the_records(prefix: str) -> None:
    """Stray members of the status indexes (which ``wf store info`` counts) and of ``ix:all``,
    a run indexed under another status (and missing from its own's), a live run missing from
    the queue its ``qk`` names and a finished run whose ``qk`` names one: each named, put right
    and said so; then clean."""
    store = make(prefix)
    client = raw_client()
    try:
        live = await created(store, id="run-live")
        moved = await created(store, id="run-moved")
        done = await created(store, id="run-done")
        await save(store, done, RunStatus.COMPLETED)
        client.zadd(f"{prefix}ix:s:pending", {"notarun": 5})
        client.zadd(f"{prefix}ix:s:running", {"wrun_01AAAAAAAAAAAAAAAAAAAAAAAA": 5})
        client.zadd(f"{prefix}ix:all", {"ghost": 6})
        client.zrem(f"{prefix}ix:s:pending", moved.id)
        client.zadd(f"{prefix}ix:s:running", {moved.id: moved.seq or 0})
        [qk, qm] = client.hmget(f"{prefix}r:{live.id}", "qk", "qm")
        client.zrem(f"{prefix}q:{qk.decode()}", qm)
        client.hset(f"{prefix}r:{done.id}", "qk", qk)
        info = await store.store_info()
        assert info.runs["pending"] == 2 and info.runs["running"] == 2
        problems = await store.verify()
        assert len(problems) == 7, problems
        for needle in ("notarun", "wrun_01AAAAAAAAAAAAAAAAAAAAAAAA", "ghost", moved.id):
            assert [p for p in problems if needle in p and "removed" in p], (needle, problems)
        missing = f"run {moved.id}: missing from {prefix}ix:s:pending: put back in it"
        assert missing in problems, problems
        assert [p for p in problems if live.id in p and "put back" in p], problems
        assert [p for p in problems if done.id in p and "cleared" in p], problems
        assert await store.verify() == []
        info = await store.store_info()
        assert info.runs["pending"] == 2 and info.runs["running"] == 0, info.runs
        assert info.runs["completed"] == 1
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert sorted(x.run_id for x in leases) == [live.id, moved.id]
        for x in leases:
            await x.release()
    finally:
        client.close()
        await store.close()


async def test_verify_puts_a_queue_missing_from_the_queues_index_back(prefix: str) -> None:
    """The queues' index ``qk`` deleted or evicted: no claim finds the queues it listed, so
    their runs waited for good, and verify said the store was fine. Verify names each queue
    missing from it and puts it back; the runs are claimed again; then clean."""
    store = make(prefix)
    client = raw_client()
    try:
        runs = [await created(store, id=f"run-{i}") for i in range(3)]
        [qk] = client.hmget(f"{prefix}r:run-0", "qk")
        client.delete(f"{prefix}qk")
        assert await asyncio.wait_for(store.claim(1e12, 10), 10) == []
        problems = await store.verify()
        assert problems == [
            f"{prefix}qk: queue {qk.decode()!r} is missing from it (its runs wait): put back in it"
        ], problems
        assert await store.verify() == []
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert sorted(x.run_id for x in leases) == [r.id for r in runs]
        for x in leases:
            await x.release()
    finally:
        client.close()
        await store.close()


async def test_a_damaged_queue_member_is_named_and_rebuilt_not_dropped(prefix: str) -> None:
    """A stray write over a run's queue member ``qm``: the claim dropped the run's queue entry
    without a word, and each verify put the bad member back, which the next claim dropped
    again; the run never ran. The claim names ``qm`` and keeps the entry; verify names it,
    rebuilds it from the creation number and the id, and the run is claimed."""
    store = make(prefix)
    client = raw_client()
    try:
        runs = [await created(store, id=f"run-{i}") for i in range(2)]
        rk = f"{prefix}r:run-1"
        [qk, qm] = client.hmget(rk, "qk", "qm")
        client.hset(rk, "qm", "bogus")
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert [x.run_id for x in leases] == [runs[0].id]
        await leases[0].release()
        said = [fault.reason for fault in store.faults]
        assert any(f"field 'qm' of {rk}" in s for s in said), said
        assert client.zscore(f"{prefix}q:{qk.decode()}", qm) is not None  # its entry kept
        problems = await store.verify()
        assert len(problems) == 1, problems
        assert f"field 'qm' of {rk}" in problems[0] and "'bogus'" in problems[0], problems
        assert client.hget(rk, "qm") == qm
        assert await store.verify() == []
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert sorted(x.run_id for x in leases) == [r.id for r in runs]
        for x in leases:
            await x.release()
    finally:
        client.close()
        await store.close()


async def test_verify_reads_queue_members_in_its_batches_not_one_round_trip_a_run(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verify read each run's queue member ``qm`` with a command of its own, one after the
    other (5000 runs: 1.7 s became 4.3 s); it comes with the batch's read of the run's fields,
    and a damaged one is still found and rebuilt."""
    store = make(prefix)
    client = raw_client()
    try:
        for i in range(12):
            await created(store, id=f"run-{i}")
        rk = f"{prefix}r:run-3"
        qm = client.hget(rk, "qm")
        client.hset(rk, "qm", "bogus")
        sent: list[str] = []
        real = store._call

        async def counted(name: str, *args: Any) -> Any:
            sent.append(name)
            return await real(name, *args)

        monkeypatch.setattr(store, "_call", counted)
        problems = await store.verify()
        assert len(problems) == 1 and f"field 'qm' of {rk}" in problems[0], problems
        assert client.hget(rk, "qm") == qm
        assert sent.count("hget") == 0, sent
    finally:
        client.close()
        await store.close()


async def test_verify_puts_no_queue_emptied_meanwhile_back_in_the_queues_index(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verify decides a queue missing from the index ``qk`` is a live run's from reads made
    before; the run ended and its queue emptied in between: a plain ``ZADD NX`` put the empty
    queue back in the index. The put-back checks, with it, that the queue has runs."""
    store = make(prefix)
    client = raw_client()
    try:
        await created(store, id="run-0")
        [qk] = client.hmget(f"{prefix}r:run-0", "qk")
        index = f"{prefix}qk"
        client.delete(index)
        real = store._pipe

        async def emptied_meanwhile(*commands: Any, each: bool = False) -> Any:
            if commands and commands[0][:2] == ("zscore", index):
                client.delete(f"{prefix}q:{qk.decode()}")  # the run ended meanwhile
            return await real(*commands, each=each)

        monkeypatch.setattr(store, "_pipe", emptied_meanwhile)
        problems = await store.verify()
        assert problems == [], problems
        assert client.zscore(index, qk) is None
    finally:
        client.close()
        await store.close()


async def test_a_member_repair_keeps_the_earlier_of_the_two_queue_entries(prefix: str) -> None:
    """A run waiting on a hook (its entry at +inf) whose ``qm`` a stray write damaged, then a
    post: the post queued the run under the damaged member, due now. Verify kept the +inf
    entry and dropped the due one: the inbox held the message, the claim found nothing, and a
    second verify said nothing: stuck for good. The earlier of the two scores is kept."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store, id="run-0")
        rk = f"{prefix}r:{run.id}"
        [qk, qm] = client.hmget(rk, "qk", "qm")
        queue = f"{prefix}q:{qk.decode()}"
        client.zadd(queue, {qm: float("inf")})  # suspended: waits for a hook
        client.hset(rk, "qm", "bogus")
        await store.post(run.id, "hook", {"n": 1})
        assert client.zscore(queue, "bogus") is not None  # the post's entry, due
        problems = await store.verify()
        assert len(problems) == 1 and f"field 'qm' of {rk}" in problems[0], problems
        assert client.zscore(queue, qm) != float("inf")
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert [x.run_id for x in leases] == [run.id]
        for x in leases:
            await x.release()
    finally:
        client.close()
        await store.close()


async def test_verify_files_a_run_by_its_record_not_by_a_damaged_status_field(
    prefix: str,
) -> None:
    """A stray write over a run's ``st`` (its record says pending): verify moved the run to the
    damaged field's status index and left the field, so ``wf runs --status completed`` listed a
    pending run and every verify said it again. The record is the truth: ``st`` is set from
    it, the run filed under its status, said once; then clean."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store, id="run-0")
        await created(store, id="run-1")
        rk = f"{prefix}r:{run.id}"
        client.hset(rk, "st", "completed")
        problems = await store.verify()
        assert len(problems) == 1, problems
        assert f"field 'st' of {rk}" in problems[0] and "'pending'" in problems[0], problems
        assert client.hget(rk, "st") == b"pending"
        assert await store.verify() == []
        assert [r.id for r in await store.list_runs(statuses=[RunStatus.COMPLETED])] == []
        pending = await store.list_runs(statuses=[RunStatus.PENDING])
        assert sorted(r.id for r in pending) == ["run-0", "run-1"]
        info = await store.store_info()
        assert info.runs["pending"] == 2 and info.runs["completed"] == 0, info.runs
    finally:
        client.close()
        await store.close()


CANCEL_DAMAGE = {
    "ep": (lambda client, p, rid: client.hset(f"{p}r:{rid}", "ep", "abc"), "field 'ep' of {p}r:"),
    "seq": (
        lambda client, p, rid: client.hset(f"{p}r:{rid}", "seq", "xyz"),
        "field 'seq' of {p}r:",
    ),
    "inbox": (lambda client, p, rid: client.set(f"{p}in:{rid}", "junk"), "{p}in:"),
    "journal": (
        lambda client, p, rid: (client.delete(f"{p}j:{rid}"), client.set(f"{p}j:{rid}", "x")),
        "{p}j:",
    ),
}
"""How a stray write damages a run, and the key a message to it is refused naming."""


@pytest.mark.parametrize("damage", sorted(CANCEL_DAMAGE))
async def test_a_message_to_a_damaged_run_is_refused_naming_the_key_and_writes_nothing(
    prefix: str, damage: str
) -> None:
    """``wf cancel`` of a run a stray write damaged (an epoch or creation number that is no
    number, its journal or inbox of another type): the cancel request was stored (the inbox
    written, the message counter bumped) and the drive then failed (exit 3, two lines), or
    the inbox's bare ``WRONGTYPE`` named no key. The request is refused whole, naming the key,
    before anything is written: no driver could take it in."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store)
        if damage == "inbox":
            client.delete(f"{prefix}in:{run.id}")
        spoil, where = CANCEL_DAMAGE[damage]
        spoil(client, prefix, run.id)
        before = client.get(f"{prefix}mseq")
        with pytest.raises(StoreCorrupted) as refused:
            await store.post(run.id, "cancel", {})
        assert where.format(p=prefix) + run.id in str(refused.value), refused.value
        assert client.get(f"{prefix}mseq") == before
        if damage != "inbox":
            assert client.exists(f"{prefix}in:{run.id}") == 0
    finally:
        client.close()
        await store.close()


def test_wf_cancel_of_a_damaged_run_says_one_line_and_writes_nothing(
    prefix: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    env.update(WF_REDIS_URL=URL, WF_REDIS_PREFIX=prefix, PYTHONPATH=REPO)
    client = raw_client()
    try:

        async def make_run() -> str:
            store = make(prefix)
            try:
                return (await created(store)).id
            finally:
                await store.close()

        run_id = asyncio.run(make_run())
        client.hset(f"{prefix}r:{run_id}", "ep", "abc")
        done = subprocess.run(
            [sys.executable, "-m", "wf", "cancel", run_id],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = [line for line in done.stderr.splitlines() if not line.startswith("warning:")]
        assert done.returncode == 3, done.stderr
        assert len(lines) == 1 and f"field 'ep' of {prefix}r:{run_id}" in lines[0], lines
        assert client.exists(f"{prefix}in:{run_id}") == 0
    finally:
        client.close()


# -- what the store says when the server refuses, and of a record without an id ---------------

OOM = "OOM command not allowed when used memory > 'maxmemory'."


def test_a_refusal_is_said_in_one_clear_line_without_redis_pys_wrapping() -> None:
    store = RedisStore("redis://127.0.0.1:6379/0")
    wrapped = "Command # 1 (EXISTS wf:r:wrun_x) of pipeline caused error: "
    said = str(store._failure(redis.exceptions.OutOfMemoryError(wrapped + OOM)))
    assert "refused the write: out of memory" in said and OOM in said
    assert "Command #" not in said and "cannot reach" not in said
    said = str(store._failure(redis.exceptions.BusyLoadingError(wrapped + "LOADING loading")))
    assert said.endswith("is loading its data (LOADING loading)"), said


async def test_a_server_out_of_memory_still_opens_a_store_and_says_it_refused_writes(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command said "cannot reach Redis" while the server refused writes for lack of
    memory: it is reachable, reads still work, and a write says the server refused it."""
    from redis.asyncio import Redis

    first = make(prefix)
    run = await created(first, id="run-1")
    await first.close()

    async def refused(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise redis.exceptions.OutOfMemoryError(OOM)

    monkeypatch.setattr(Redis, "set", refused)
    store = make(prefix)
    try:
        assert (await store.get_run(run.id)).id == run.id  # the format key is read, not set
    finally:
        await store.close()
    fresh = make(prefix + "fresh:")
    try:
        with pytest.raises(StoreError, match="refused the write: out of memory") as failed:
            await fresh.open()
        assert "cannot reach" not in str(failed.value)
    finally:
        await fresh.close()


async def test_a_record_without_an_id_is_named_by_its_key(prefix: str) -> None:
    store = make(prefix)
    client = raw_client()
    try:
        await created(store, id="run-1")
        client.hset(f"{prefix}r:run-1", "rec", b"{}")
        with pytest.raises(StoreCorrupted) as failed:
            await store.get_run("run-1")
        said = str(failed.value)
        assert f"{prefix}r:run-1" in said and "the record has no 'id'" in said
        assert "None" not in said, said
    finally:
        client.close()
        await store.close()


async def test_credentials_the_server_refuses_are_no_outage(redis_url: str) -> None:
    """A user or password Redis refuses is the URL's fault: a plain ``StoreError`` at once, never
    ``wf.StoreUnavailable``, which a worker starting would wait out for its whole outage limit."""
    scheme, rest = redis_url.split("://", 1)
    host = rest.rsplit("@", 1)[-1]
    store = RedisStore(f"{scheme}://wf-no-such-user:wrong@{host}", prefix="wft:creds:")
    await assert_refused_at_once(store, "refused the credentials")


@pytest.mark.parametrize("call", ["try_acquire", "claim"])
async def test_a_lease_taking_cancelled_in_flight_leaves_the_run_free(
    prefix: str, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller of ``try_acquire`` or ``claim`` is cancelled after the script took the lease
    and before its answer is read (a drive crashed or stopped just as it started, a claim of
    a worker told to stop). No lease object was made, so nothing would renew or release the
    key, and its holder, this live process, is not dead: the run was held for the lease's
    time to live. The lease is given back instead, so any driver takes the run at once."""
    store = make(prefix, lease_ttl=60)
    peer = make(prefix, lease_ttl=60)
    answered = asyncio.Event()
    gate = asyncio.Event()
    real = RedisStore._eval_now

    async def slow_answer(self: RedisStore, script: str, args: Sequence[Any], again: bool) -> Any:
        found = await real(self, script, args, again)
        if self is store and script in (_scripts.ACQUIRE, _scripts.CLAIM):
            answered.set()  # the script ran: the lease is taken
            await gate.wait()  # and the caller has not heard yet
        return found

    try:
        run = await created(store)
        monkeypatch.setattr(RedisStore, "_eval_now", slow_answer)
        taking = store.try_acquire(run.id) if call == "try_acquire" else store.claim(4e9, 10)
        caller = asyncio.ensure_future(taking)
        await asyncio.wait_for(answered.wait(), 10)
        caller.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await _taken_in_turn(lambda taker: taker.try_acquire(run.id), peer, store)
    finally:
        await store.close()
        await peer.close()


async def _taken_in_turn(take: Callable[[RedisStore], Awaitable[Any]], *takers: RedisStore) -> None:
    """Each of ``takers`` in turn (another process, and the cancelled caller's again) gets what
    ``take`` asks for within 2 s, and gives it back: the cancelled caller kept nothing."""
    for taker in takers:
        began = time.monotonic()
        while (taken := await take(taker)) is None:
            assert time.monotonic() - began < 2.0, "still held"
            await asyncio.sleep(0.02)
        await taken.release()


@pytest.mark.parametrize("call", ["try_slot", "lock_schedule"])
async def test_a_place_or_schedule_lock_taken_by_a_cancelled_caller_is_given_back(
    prefix: str, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a cap's place (``try_slot``) and a schedule's lock: the caller cancelled
    after the server set the key and before the answer was read. No object holds the key, so
    nothing renewed or deleted it: the place stayed taken (the cap one run short), the
    schedule unfired by any other worker, for the key's time to live (``lease_ttl``). The key
    is deleted when the answer comes."""
    store = make(prefix, lease_ttl=60)
    peer = make(prefix, lease_ttl=60)
    answered = asyncio.Event()
    gate = asyncio.Event()
    real_eval, real_call = RedisStore._eval_now, RedisStore._call_now

    async def slow_eval(self: RedisStore, script: str, args: Sequence[Any], again: bool) -> Any:
        found = await real_eval(self, script, args, again)
        if self is store and script == _scripts.TRY_SLOT:
            answered.set()  # the place is taken
            await gate.wait()  # and the caller has not heard yet
        return found

    async def slow_call(self: RedisStore, name: str, *args: Any) -> Any:
        found = await real_call(self, name, *args)
        if self is store and name == "set":
            answered.set()
            await gate.wait()
        return found

    async def take(taker: RedisStore) -> Any:
        if call == "try_slot":
            return await taker.try_slot("cap", 1)
        return await taker.lock_schedule("nightly", wait=False)

    try:
        await store.open()
        monkeypatch.setattr(RedisStore, "_eval_now", slow_eval)
        monkeypatch.setattr(RedisStore, "_call_now", slow_call)
        caller = asyncio.ensure_future(take(store))
        await asyncio.wait_for(answered.wait(), 10)
        caller.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        monkeypatch.setattr(RedisStore, "_eval_now", real_eval)
        monkeypatch.setattr(RedisStore, "_call_now", real_call)
        await _taken_in_turn(take, peer, store)
    finally:
        await store.close()
        await peer.close()


async def test_a_rate_limited_start_counted_for_a_cancelled_caller_is_taken_back(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``try_rate``'s caller cancelled after the script counted the start and before its answer
    was read: no run started, yet the start counted for the whole window (here 60 s, one start
    allowed: the limit's next start waited a minute). It is taken back when the answer comes."""
    store, peer = make(prefix), make(prefix)
    answered = asyncio.Event()
    gate = asyncio.Event()
    real = RedisStore._eval_now

    async def slow_answer(self: RedisStore, script: str, args: Sequence[Any], again: bool) -> Any:
        found = await real(self, script, args, again)
        if self is store and script == _scripts.TRY_RATE and args[4] == "1":
            answered.set()  # the start is counted
            await gate.wait()  # and the caller has not heard yet
        return found

    try:
        await store.open()
        monkeypatch.setattr(RedisStore, "_eval_now", slow_answer)
        caller = asyncio.ensure_future(store.try_rate("r", 1, 60.0, 1_000.0))
        await asyncio.wait_for(answered.wait(), 10)
        caller.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        monkeypatch.setattr(RedisStore, "_eval_now", real)
        began = time.monotonic()
        while await peer.rate_retry_at("r", 1, 60.0, 1_001.0) is not None:
            assert time.monotonic() - began < 2.0, "still counted"
            await asyncio.sleep(0.02)
        assert await peer.try_rate("r", 1, 60.0, 1_001.0) is None
        assert await store.try_rate("r", 1, 60.0, 1_002.0) == pytest.approx(1_061.0)
    finally:
        await store.close()
        await peer.close()


async def test_a_start_taken_back_wakes_the_runs_the_rate_limit_held(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run held back by a rate limit while a start counted for a cancelled caller filled it
    slept until the window's end (a minute here) although the start was taken back at once:
    nothing told the worker. The take-back is announced, and the worker looks again."""
    store, peer = make(prefix), make(prefix)
    counted, gate = asyncio.Event(), asyncio.Event()
    real = RedisStore._eval_now

    async def slow_answer(self: RedisStore, script: str, args: Sequence[Any], again: bool) -> Any:
        found = await real(self, script, args, again)
        if self is peer and script == _scripts.TRY_RATE and args[4] == "1":
            counted.set()  # the start is counted
            await gate.wait()  # and the caller has not heard yet
        return found

    monkeypatch.setattr(RedisStore, "_eval_now", slow_answer)
    try:
        await a_take_back_wakes_the_runs_the_limit_held(store, peer, counted, gate)
    finally:
        await store.close()
        await peer.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lane", b"NaN"),
        ("lane", b"inf"),
        ("gw", b"0"),
        ("gw", b"-3"),
        ("gw", b"2.5"),
        ("gw", b"inf"),
    ],
)
async def test_a_damaged_lane_place_or_width_holds_neither_the_claim_nor_its_lane(
    prefix: str, field: str, value: bytes
) -> None:
    """A lane head's place (``lane``) that Lua reads as a number but ``ZCOUNT`` refuses
    (``NaN``, ``inf``) failed every claim of the store (a worker exited 3); a width (``gw``)
    of 0 or below held the lane for good with no word, and a fraction or ``inf`` failed the
    claim. Now such a place is its run's damage (named; the lane waits behind it, as a lane
    waits behind any run of it, see ``test_a_run_found_damaged_keeps_its_place_in_its_lane``)
    and such a width reads as 1: the claim leases the others, and ``lane_ahead`` names a place
    it cannot use."""
    store = make(prefix)
    client = raw_client()
    try:
        head = await created(store, id="head", group="g", limits={"group_concurrency": 1})
        await created(store, id="behind", group="g", limits={"group_concurrency": 1})
        plain = await created(store, id="plain")
        client.hset(f"{prefix}r:{head.id}", field, value)
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        taken = {x.run_id for x in leases}
        assert plain.id in taken
        if field == "gw":
            assert taken == {plain.id, head.id}  # the lane goes on, one at a time
        for x in leases:
            await x.release()
        if field == "lane":
            assert store.faults.of_kind("run") == {head.id}  # named; it keeps its place:
            again = await asyncio.wait_for(store.claim(1e12, 10, exclude={plain.id}), 10)
            assert [x.run_id for x in again] == []
            with pytest.raises(StoreCorrupted, match="field 'lane' of"):
                await store.lane_ahead(lane_of(head), head.id, 1)
    finally:
        client.close()
        await store.close()


async def test_a_run_found_damaged_keeps_its_place_in_its_lane(prefix: str) -> None:
    """A lane head whose record cannot be read is noted once it is met, by this process only:
    another may be driving it, or a repair make it whole, so it keeps its place and the run
    behind it waits (a lane of width 1 never runs two at once)."""
    store = make(prefix)
    client = raw_client()
    try:
        head = await created(store, id="head", group="g")
        behind = await created(store, id="behind", group="g")
        client.hset(f"{prefix}r:{head.id}", "rec", b"[]")
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        for lease in leases:  # what a driver does first: the damage is found by then
            with store.faults.contain("run", lease.run_id, "its hash"):
                await lease.read_run(store)
            await lease.release()
        assert store.faults.of_kind("run") == {head.id}
        leases = await asyncio.wait_for(store.claim(1e12, 10, exclude={head.id}), 10)
        assert leases == []
        assert await store.lane_ahead(lane_of(behind), behind.id, 1) == [head.id]
    finally:
        client.close()
        await store.close()


async def test_a_lane_key_of_another_type_is_named_by_the_claim_and_verify(prefix: str) -> None:
    """A group lane key (``g:<lane>``) a stray write replaced by a string: the claim blamed
    each of its runs' hashes (``WRONGTYPE``, naming ``r:<id>``) and verify said the store was
    fine. The claim names the lane key as each run's damage, the other runs go on, and verify
    names it."""
    store = make(prefix)
    client = raw_client()
    try:
        grouped = [await created(store, id=f"in-lane-{i}", group="g") for i in range(2)]
        alone = await created(store, id="alone")
        lane = lane_of(grouped[0])
        gk = f"{prefix}g:{lane}"
        client.delete(gk)
        client.set(gk, "junk")
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert [x.run_id for x in leases] == [alone.id]
        await leases[0].release()
        said = {fault.item: fault.reason for fault in store.faults}
        assert set(said) == {r.id for r in grouped}, said
        named = " ".join(gk.split())  # a lane's name holds a newline: said on one line
        assert all(named in reason and "WRONGTYPE" in reason for reason in said.values()), said
        problems = await store.verify()
        assert [p for p in problems if " ".join(p.split()).startswith(f"{named}: WRONGTYPE")], (
            problems
        )
    finally:
        client.close()
        await store.close()


async def test_a_lane_key_deleted_holds_the_runs_it_lost_until_verify_puts_them_back(
    prefix: str,
) -> None:
    """A group lane key (``g:<lane>``) deleted outright (by hand, evicted): the claim counted
    no run ahead of each run of the lane, so the run behind a running head started beside it
    in a lane of width 1, and verify said nothing. Now a run of a lane that is not in its lane
    key is named as its damage (naming the key and verify) and waits; verify puts every run
    of the lane back in it at its place, and the lane goes on in order. (A run created in
    the lane before verify is not held: docs/redis.md says so.)"""
    store = make(prefix)
    client = raw_client()
    try:
        head = await created(store, id="head", group="g")
        behind = await created(store, id="behind", group="g")
        plain = await created(store, id="plain")
        leases = await asyncio.wait_for(store.claim(1e12, 10, exclude={plain.id}), 10)
        assert [x.run_id for x in leases] == [head.id]
        running = leases[0]
        gk = f"{prefix}g:{lane_of(head)}"
        named = " ".join(gk.split())  # a lane's name holds a newline: said on one line
        client.delete(gk)
        again = await asyncio.wait_for(store.claim(1e12, 10, exclude={plain.id}), 10)
        assert [x.run_id for x in again] == [], "a run of a width-1 lane ran beside its head"
        with pytest.raises(StoreCorrupted, match="not in its lane"):
            await store.lane_ahead(lane_of(behind), behind.id, 1)  # a driver's own look
        said = {fault.item: " ".join(fault.reason.split()) for fault in store.faults}
        assert set(said) == {behind.id}, said
        assert named in said[behind.id] and "wf store verify" in said[behind.id], said
        problems = [" ".join(p.split()) for p in await store.verify()]
        for run in (head, behind):
            assert f"run {run.id}: missing from its lane {named}: put back in it" in problems, (
                problems
            )
        assert await store.verify() == []
        assert await store.lane_ahead(lane_of(behind), behind.id, 1) == [head.id]
        again = await asyncio.wait_for(store.claim(1e12, 10, exclude={plain.id}), 10)
        assert again == []  # the head still runs
        await running.release()
    finally:
        client.close()
        await store.close()


async def test_a_server_that_refuses_role_to_wf_is_read_as_before(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pooled connections ask their server's role now and then (a reader follows a failover
    so): a user whose ACL forbids ``ROLE`` (a managed server) reads and writes as before, and
    is not asked again."""
    from urllib.parse import urlsplit, urlunsplit

    from wf.store.redis import _store

    monkeypatch.setattr(_store, "ROLE_CHECK_EVERY", 0.0)  # every connection taken asks
    client = raw_client()
    user = f"wft-norole-{uuid.uuid4().hex[:8]}"
    client.acl_setuser(
        user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", "-role"],
    )  # fmt: skip
    parts = urlsplit(URL)
    url = urlunsplit(parts._replace(netloc=f"{user}:pw@{parts.hostname}:{parts.port or 6379}"))
    store = RedisStore(url, prefix=prefix)
    try:
        for _ in range(3):
            run = await created(store)
            assert (await store.get_run(run.id)).id == run.id
        assert store._client is not None
        assert store._client.connection_pool._asks is False  # type: ignore[attr-defined]
    finally:
        await store.close()
        client.acl_deluser(user)
        client.close()


async def test_a_run_created_in_a_lane_whose_key_was_deleted_is_claimed(prefix: str) -> None:
    """A run created in a lane after its key was deleted (by hand, evicted) makes the key
    again, alone in it: it is claimed (not held with the runs the key lost, which wait for
    verify), and verify puts those back ahead of it, at their places."""
    store = make(prefix)
    client = raw_client()
    try:
        head = await created(store, id="head", group="g")
        behind = await created(store, id="behind", group="g")
        gk = f"{prefix}g:{lane_of(head)}"
        client.delete(gk)
        fresh = await created(store, id="fresh", group="g")
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert [x.run_id for x in leases] == [fresh.id]
        assert store.faults.of_kind("run") == {head.id, behind.id}  # named: they wait
        assert await store.lane_ahead(lane_of(fresh), fresh.id, 5) == []
        await store.verify()
        assert await store.lane_ahead(lane_of(fresh), fresh.id, 5) == [head.id, behind.id]
        await leases[0].release()
    finally:
        client.close()
        await store.close()


async def test_a_look_at_a_run_of_a_lane_whose_key_was_deleted_shows_it_naming_the_damage(
    prefix: str,
) -> None:
    """``wf inspect`` of a pending run of a lane whose key was deleted failed outright (exit
    3, the lane's damage as the error) where it showed the run: it shows it, the damage named
    as the page's other damaged items are. And a run with no place (ended) is in no lane:
    ``lane_ahead`` does not read the key for it (one of another type raised
    ``StoreCorrupted`` where it answered [])."""
    from wf import admin

    store = make(prefix)
    client = raw_client()
    try:
        head = await created(store, id="head", group="g")
        behind = await created(store, id="behind", group="g")
        gk = f"{prefix}g:{lane_of(head)}"
        named = " ".join(gk.split())  # a lane's name holds a newline: said on one line
        client.delete(gk)
        detail = await admin.run_detail(store, behind.id)
        assert detail.run.id == behind.id
        said = [(f.item, " ".join(f.where.split())) for f in detail.damaged]
        assert said == [(behind.id, named)], detail.damaged
        client.hset(f"{prefix}r:{head.id}", "lane", "")  # as an ended run's hash: no place
        client.set(gk, "stray")  # the lane key of another type
        assert await store.lane_ahead(lane_of(head), head.id, 1) == []
    finally:
        client.close()
        await store.close()


async def test_verify_puts_a_lane_back_whole_not_a_run_re_queued_behind_its_head_first(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verify put a lane's runs back in its deleted key batch by batch, in creation order: a
    run re-queued (``wf retry``) behind the head has a place later than its creation number,
    so it was put back alone in an earlier batch, and a claim between two batches started it
    beside the running head in a lane of width 1. Now the lane is put back whole, once every
    batch was read."""
    monkeypatch.setattr(_verify, "_BATCH", 1)  # stands for 500 runs between the two
    store = make(prefix)
    client = raw_client()
    try:
        first = await created(store, id="first", group="g")
        head = await created(store, id="head", group="g")
        gk = f"{prefix}g:{lane_of(first)}"
        client.hset(f"{prefix}r:{first.id}", "lane", 99)  # re-queued behind the head
        client.zadd(gk, {first.id: 99})
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert [x.run_id for x in leases] == [head.id]
        client.delete(gk)
        started: list[str] = []
        check_listed = _verify._check_listed

        async def then_a_claim(st: RedisStore, batch: list[str]) -> list[str]:
            found = await check_listed(st, batch)
            started.extend(x.run_id for x in await store.claim(1e12, 10))  # a worker's
            return found

        monkeypatch.setattr(_verify, "_check_listed", then_a_claim)
        problems = await store.verify()
        assert started == [], "a run of a width-1 lane ran beside its head"
        assert sum("missing from its lane" in p for p in problems) == 2, problems
        assert await store.lane_ahead(lane_of(first), first.id, 1) == [head.id]
        await leases[0].release()
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("key", ["r:", "j:"])
async def test_a_lane_head_whose_key_is_of_another_type_keeps_its_place(
    prefix: str, key: str
) -> None:
    """A lane head whose hash a stray write replaced by a string: the claim dropped it from its
    lane as a run that is gone, so the run behind it started, and once the hash was put back
    the head ran beside it in a lane of width 1. Now it is named (once, however many claims)
    and keeps its place; the lane waits, as it does behind a head whose journal is of another
    type, and behind any damaged run of it on PostgreSQL."""
    store = make(prefix)
    client = raw_client()
    try:
        head = await created(store, id="head", group="g")
        behind = await created(store, id="behind", group="g")
        plain = await created(store, id="plain")
        client.rename(f"{prefix}{key}{head.id}", f"{prefix}saved")
        client.set(f"{prefix}{key}{head.id}", b"x")
        for _ in range(3):  # a worker's claims, over and over
            leases = await asyncio.wait_for(store.claim(1e12, 10, exclude={plain.id}), 10)
            assert leases == []
        assert [(f.kind, f.item) for f in store.faults] == [("run", head.id)]
        assert await store.lane_ahead(lane_of(behind), behind.id, 1) == [head.id]
        client.delete(f"{prefix}{key}{head.id}")
        client.rename(f"{prefix}saved", f"{prefix}{key}{head.id}")  # made whole again
        leases = await asyncio.wait_for(store.claim(1e12, 10, exclude={plain.id}), 10)
        assert [x.run_id for x in leases] == [head.id]
        for x in leases:
            await x.release()
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("damage", ["record", "hash"])
async def test_a_worker_until_idle_beside_a_damaged_lane_head_ends_and_says_it_undriven(
    prefix: str, damage: str
) -> None:
    """A lane whose head is damaged: ``wf worker --until-idle`` ends (the run behind waits,
    nothing is startable), having named the head once, and counts it among the runs it could
    not drive (exit 1). It had counted it only when a further claim happened after the one
    that met it: a store whose one due lane was this exited 0."""
    client = raw_client()
    try:
        async with TestEngine(make(prefix), MockClock(autojump=False)) as engine:
            head = await created(engine.store, id="head", group="g")
            behind = await created(engine.store, id="behind", group="g")
            if damage == "record":
                client.hset(f"{prefix}r:{head.id}", "rec", b"[]")
            else:
                client.rename(f"{prefix}r:{head.id}", f"{prefix}saved")
                client.set(f"{prefix}r:{head.id}", b"x")
            worker = wf.Worker(engine, retention=False, poll=0.02)
            await asyncio.wait_for(worker.run(until_idle=True), 10)
            assert [(f.kind, f.item) for f in worker.faults] == [("run", head.id)]
            assert await worker.undriven() == [head.id]
            # The lane waited behind its head: the run behind was not driven.
            assert (await engine.store.get_run(behind.id)).status is RunStatus.PENDING
    finally:
        client.close()


@pytest.mark.parametrize("key", ["ix:all", "ix:s:pending", "hooks", "sched", "tomb", "snext"])
async def test_a_store_wide_key_of_another_type_is_named_not_a_failed_verify(
    prefix: str, key: str
) -> None:
    """A stray write that replaced a store-wide hash or index by a string: ``verify`` names the
    key among its problems and goes on with the others (before, it failed whole, exit 3); a
    listing of runs that needs the index says which key (before: a bare ``WRONGTYPE``); a
    listing of hooks names it once and lists none, so a run's page still shows."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store)
        client.delete(f"{prefix}{key}")
        client.set(f"{prefix}{key}", b"x")
        problems = await store.verify()
        assert [p for p in problems if p.startswith(f"{prefix}{key}: WRONGTYPE")], problems
        assert len(problems) == len(set(problems)), problems
        if key in ("ix:all", "ix:s:pending"):
            with pytest.raises(StoreCorrupted, match=f"^{re.escape(prefix + key)}: WRONGTYPE"):
                await store.list_runs(limit=10, statuses=None if key == "ix:all" else ["pending"])
        if key == "hooks":
            assert await store.list_hooks() == []
            assert await store.list_hooks(run.id) == []
            assert [f.item for f in store.faults] == [f"{prefix}hooks"]
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("index", ["workflow", "parent"])
async def test_a_workflow_or_parent_index_of_another_type_is_named_and_its_runs_put_back(
    prefix: str, index: str
) -> None:
    """A stray write that made a workflow's (``ix:w:``) or a parent's (``ix:p:``) index a set:
    verify said the store was clean; ``wf runs -w``/``--parent`` failed naming it. Now verify
    names it too, and once the key is gone it puts back the runs written meanwhile (the
    scripts write indexes with pcall: they were left out), so the listing finds them."""
    store = make(prefix)
    client = raw_client()
    try:
        parent = await created(store, workflow="wa")
        # The same names filter the listing and make the runs.
        fields: dict[str, Any] = (
            {"workflow": "wa"} if index == "workflow" else {"parent_id": parent.id}
        )
        first = await created(store, **fields)
        key = f"{prefix}ix:w:wa" if index == "workflow" else f"{prefix}ix:p:{parent.id}"
        client.delete(key)
        client.sadd(key, "x")
        later = await created(store, **fields)  # its index write fails, the run is made
        assert (await store.get_run(later.id)).id == later.id
        problems = await store.verify()
        assert f"{key}: WRONGTYPE Operation against a key holding the wrong kind of value" in (
            problems
        ), problems
        with pytest.raises(StoreCorrupted, match=f"^{re.escape(key)}: WRONGTYPE"):
            await store.list_runs(limit=10, **fields)
        client.delete(key)  # what the line tells the operator to look at
        problems = await store.verify()
        assert set(problems) == {
            f"run {run_id}: missing from {key}: put back in it"
            for run_id in ({first.id, later.id} | ({parent.id} if index == "workflow" else set()))
        }, problems
        listed = {r.id for r in await store.list_runs(limit=10, **fields)}
        assert {first.id, later.id} <= listed
        assert await store.verify() == []
    finally:
        client.close()
        await store.close()


async def test_verify_makes_no_index_of_a_status_wf_never_writes(prefix: str) -> None:
    """A run whose status field a stray write changed: verify names the run, and puts it in
    no status index of that name (a new key nothing reads or cleans)."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store)
        client.hset(f"{prefix}r:{run.id}", "st", "bogus")
        await store.verify()
        assert client.exists(f"{prefix}ix:s:bogus") == 0
    finally:
        client.close()
        await store.close()


async def test_a_runs_page_shows_when_the_index_of_its_children_is_of_another_type(
    prefix: str,
) -> None:
    """A stray write that made a run's children's index (``ix:p:``) a string: the run's page
    (``wf inspect``, the API's and the web UI's detail) failed whole naming the key, though the
    run itself is whole. Now it shows without its children and names the key, as it does for a
    hooks key of another type."""
    from wf import admin

    store = make(prefix)
    client = raw_client()
    try:
        parent = await created(store)
        await created(store, parent_id=parent.id)
        key = f"{prefix}ix:p:{parent.id}"
        client.delete(key)
        client.set(key, b"x")
        detail = await admin.run_detail(store, parent.id)
        assert detail.run.id == parent.id and detail.children == []
        assert [(f.kind, f.where) for f in detail.damaged] == [("children", key)]
        assert "WRONGTYPE" in detail.damaged[0].reason
    finally:
        client.close()
        await store.close()


async def test_every_status_index_of_another_type_is_named(prefix: str) -> None:
    """Two status indexes replaced by strings: verify stopped its look at the status indexes at
    the first and named only it."""
    store = make(prefix)
    client = raw_client()
    try:
        await created(store)
        for status in ("running", "suspended"):
            client.set(f"{prefix}ix:s:{status}", b"x")
        problems = await store.verify()
        for status in ("running", "suspended"):
            assert [p for p in problems if p.startswith(f"{prefix}ix:s:{status}: WRONGTYPE")]
    finally:
        client.close()
        await store.close()


async def test_a_queue_key_of_another_type_holds_its_runs_alone(prefix: str) -> None:
    """A queue's key replaced by a string: claims, ``due_runs`` and ``next_due_at`` pass over
    that queue and take the others' runs (before, every claim failed with a bare
    ``WRONGTYPE`` and ``wf worker`` exited 3 at once); verify names the key. The queues'
    index of another type fails a claim naming it (and the server still answers)."""
    store = make(prefix)
    client = raw_client()
    try:
        queued = await created(store, queue="qa")
        plain = await created(store)
        [qk] = [k for k in client.zrange(f"{prefix}qk", 0, -1) if b"qa" in k]
        client.delete(f"{prefix}q:".encode() + qk)
        client.set(f"{prefix}q:".encode() + qk, b"x")
        leases = await asyncio.wait_for(store.claim(1e12, 10), 10)
        assert [x.run_id for x in leases] == [plain.id]
        [fault] = list(store.faults)  # the queue's key, named (once, however many claims)
        assert fault.kind == "queue" and fault.item.startswith(f"{prefix}q:")
        assert "WRONGTYPE" in fault.reason and "its runs wait" in fault.reason
        for x in leases:
            await x.release()
        assert await store.due_runs(1e12) == [plain.id]
        assert await store.next_due_at() == 0.0
        problems = await store.verify()
        assert [p for p in problems if "WRONGTYPE" in p and "its runs wait" in p], problems
        assert queued.id not in {x.run_id for x in leases}
        client.delete(f"{prefix}qk")
        client.set(f"{prefix}qk", b"x")
        with pytest.raises(StoreCorrupted, match=f"^{re.escape(prefix)}qk: WRONGTYPE"):
            await store.claim(1e12, 10)
        with pytest.raises(StoreCorrupted, match=f"^{re.escape(prefix)}qk: WRONGTYPE"):
            await store.next_due_at()
        assert client.ping()
        assert [p for p in await store.verify() if p.startswith(f"{prefix}qk: WRONGTYPE")]
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("index", ["ix:s:completed", "ix:s:pending", "ix:all"])
async def test_an_index_of_another_type_fails_no_run_write(prefix: str, index: str) -> None:
    """A listing index a stray write replaced by a string: the runs' writes go on (before,
    the script failed at the index after appending the events and before saving the record,
    so every run reaching that status was named damaged and left half written); the index
    alone is named, by ``store_info`` when it needs it and by verify."""
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store)
        client.delete(f"{prefix}{index}")
        client.set(f"{prefix}{index}", b"x")
        await save(store, run, RunStatus.COMPLETED)
        assert (await store.get_run(run.id)).status == RunStatus.COMPLETED
        await created(store)  # a creation too
        problems = await store.verify()
        assert [p for p in problems if p.startswith(f"{prefix}{index}: WRONGTYPE")], problems
        if index.startswith("ix:s:"):
            with pytest.raises(StoreCorrupted, match=f"^{re.escape(prefix + index)}: WRONG"):
                await store.store_info()
    finally:
        client.close()
        await store.close()


async def test_a_tree_cancel_reaches_what_it_can_list_and_names_a_children_index_of_another_type(
    prefix: str,
) -> None:
    """A stray write that made a run's children's index (``ix:p:``) a string: cancelling the
    tree failed whole naming the key, and cancelled nothing. Now the runs it can list are
    cancelled (the root, its child) and the unreadable index is named as damage, on the run
    whose children it lists; the run below it is not reached."""
    from wf import admin

    store = make(prefix)
    client = raw_client()
    try:
        async with TestEngine(store, MockClock(autojump=False)) as engine:
            root = await created(store)
            child = await created(store, parent_id=root.id)
            await created(store, parent_id=child.id)
            key = f"{prefix}ix:p:{child.id}"
            client.delete(key)
            client.set(key, b"x")
            results = await admin.cancel_tree(engine, root.id)
            assert [(r.run_id, r.sent) for r in results] == [(root.id, True), (child.id, True)]
            assert results[0].damaged == ()
            [fault] = results[1].damaged
            assert (fault.kind, fault.item, fault.where) == ("children", child.id, key)
            assert "WRONGTYPE" in fault.reason
    finally:
        client.close()


@pytest.mark.parametrize("wait", ["--wait", "--no-wait"])
async def test_wf_cancel_children_exits_1_when_a_children_index_left_runs_unreached(
    prefix: str, tmp_path: Path, wait: str
) -> None:
    """``wf cancel --children`` on a tree whose child's children's index (``ix:p:``) is a
    string: the root and the child are cancelled and the index is named in a warning line,
    yet the command exited 0 although the run below the child was not reached. It exits 1."""
    store = make(prefix)
    client = raw_client()
    try:
        root = await created(store)
        child = await created(store, parent_id=root.id)
        await created(store, parent_id=child.id)
        await store.close()
        key = f"{prefix}ix:p:{child.id}"
        client.delete(key)
        client.set(key, b"x")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
        env.update(WF_REDIS_URL=URL, WF_REDIS_PREFIX=prefix, PYTHONPATH=REPO)
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "wf", "cancel", root.id, "--children", wait],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done.stderr
        said = " ".join(done.stderr.split())
        line = f"warning: children {child.id} is damaged and its runs below were not reached"
        assert line in said and key in said, said
    finally:
        client.close()
        await store.close()


async def test_a_tree_cancel_meeting_a_damaged_child_record_says_it_as_before(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A child whose record cannot be read, met while the tree's cancel lists the tree: the
    fault was filed under the child's id, which has no result, and so said nowhere (no log
    line, not in the store's faults). It goes to the store's faults and its log, as it did
    before a children's index was named on a result; the root's result names nothing."""
    from wf import admin

    store = make(prefix)
    client = raw_client()
    try:
        async with TestEngine(store, MockClock(autojump=False)) as engine:
            root = await created(store)
            child = await created(store, parent_id=root.id)
            client.hset(f"{prefix}r:{child.id}", "rec", b"{not json")
            results = await admin.cancel_tree(engine, root.id)
            assert [r.run_id for r in results] == [root.id]
            assert results[0].damaged == ()
            assert store.faults.of_kind("run") == {child.id}
            named = [r for r in caplog.records if child.id in r.getMessage()]
            assert len(named) == 1, named
            assert named[0].getMessage().startswith(f"skipped run {child.id}")
    finally:
        client.close()


@wf.workflow
async def awaits_a_word(n: int = 0) -> str:
    return await wf.create_hook(str, token=f"word-{n}").next()


async def test_a_wait_for_a_run_whose_children_index_is_of_another_type_goes_on(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A stray write that made a run's children's index (``ix:p:``) a string: ``result()``,
    which drives the run's due descendants while it waits, failed with the key's WRONGTYPE
    although the run itself is whole. Now it goes on waiting (driving no descendant it cannot
    list), names the index once, and returns the run's outcome."""
    store = make(prefix)
    client = raw_client()
    try:
        async with TestEngine(store, MockClock(autojump=False)) as engine:
            run = await wf.start(awaits_a_word, 1, detach=True)
            key = f"{prefix}ix:p:{run.id}"
            client.set(key, b"x")
            waiting = asyncio.ensure_future(run.result(timeout=20))
            await _until_async(
                lambda: _suspended(store, run.id)  # the wait went on past its first look
            )
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await wf.resume_hook("word-1", "hello")
            assert await waiting == "hello"
            assert engine.store.faults.of_kind("children") == {run.id}
            named = [r for r in caplog.records if key in r.getMessage()]
            assert len(named) == 1, named
    finally:
        client.close()


async def _suspended(store: Store, run_id: str) -> bool:
    return (await store.get_run(run_id)).status is RunStatus.SUSPENDED


# -- one stream's key of another type, or a stream name that is not UTF-8 ---------------------

STREAM_DAMAGE = {
    "chunks a string": lambda c, p, i: (c.delete(f"{p}sc:{i}:bad"), c.set(f"{p}sc:{i}:bad", "x")),
    "name not UTF-8": lambda c, p, i: c.hset(f"{p}sn:{i}", b"\xff\xfe", "0"),
    "names a string": lambda c, p, i: (c.delete(f"{p}sn:{i}"), c.set(f"{p}sn:{i}", "x")),
    "names a set": lambda c, p, i: (c.delete(f"{p}sn:{i}"), c.sadd(f"{p}sn:{i}", "bad")),
}


def _stream_damage_where(prefix: str, run_id: str, damage: str) -> str:
    if damage == "chunks a string":
        return f"{prefix}sc:{run_id}:bad"
    if damage == "name not UTF-8":
        return f"field '\\\\xff\\\\xfe' of {prefix}sn:{run_id}"
    return f"{prefix}sn:{run_id}"


@pytest.mark.parametrize("damage", sorted(STREAM_DAMAGE))
async def test_a_damaged_stream_is_left_out_of_its_runs_streams_and_named(
    prefix: str, damage: str
) -> None:
    """A stray write made one stream's key of another type, or left a stream name that is not
    UTF-8: the listing failed whole (``WRONGTYPE``, a decode error), and with it the run's
    page. Now that stream is left out and named (the way the local store names a damaged
    stream's files); reading it, or asking its count for a writer, is ``StoreCorrupted``
    naming the key; verify names it."""
    from wf import admin
    from wf.engine._run import wait_for_stream

    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.write_chunk("bad", 0, b"x")
        await lease.write_chunk("good", 0, b"y")
        await lease.close_stream("good", 1)
        await lease.release()
        await save(store, run, RunStatus.COMPLETED)  # its streams are all it will have
        STREAM_DAMAGE[damage](client, prefix, run.id)
        where = _stream_damage_where(prefix, run.id, damage)
        whole = damage.startswith("names a")  # the run's hash of stream names: none listed
        with collect_faults() as damaged:
            streams = await store.list_streams(run.id)
        left = {} if whole else {"good": (1, True)}
        if damage == "name not UTF-8":
            left["bad"] = (1, False)
        assert streams == left
        [fault] = damaged
        assert (fault.kind, fault.where) == ("stream", where), fault
        assert not store.faults.of_kind("stream")  # the caller's to say
        detail = await admin.run_detail(store, run.id)
        assert [(f.kind, f.where) for f in detail.damaged] == [("stream", where)]
        assert [s.name for s in detail.streams] == sorted(left)
        if damage != "name not UTF-8":
            # Asked for by name: the store's damage, naming the key, never "no such stream"
            # nor a count of 0 that a writer would take as where its chunks go next.
            with pytest.raises(StoreCorrupted, match=re.escape(where)):
                await store.stream_info(run.id, "bad")
            with pytest.raises(StoreCorrupted, match=re.escape(where)):
                await store.read_chunks(run.id, "bad")
            with pytest.raises(StoreCorrupted, match=re.escape(where)):
                await wait_for_stream(store, run.id, "bad")
        if not whole:
            # A writer of another stream, or of a new one, is not stopped by this one's damage.
            assert await store.stream_info(run.id, "good") == (1, True)
            assert await store.stream_info(run.id, "never") == (0, False)
        problems = [p for p in await store.verify() if where in p]
        assert problems and problems[0].startswith(f"run {run.id}: "), problems
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("damage", ["chunks a string", "name not UTF-8"])
def test_inspect_stream_and_the_api_answer_beside_a_damaged_stream(
    prefix: str, damage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wf inspect`` and ``GET /api/v1/runs/{id}`` answer, naming the stream in ``damaged``
    (they failed, exit 3 and ``500 store_damaged``); ``wf stream`` of it is one line, exit 3."""
    import httpx
    from typer.testing import CliRunner

    from wf import Engine
    from wf.cli._app import build_app
    from wf.serve import create_app

    async def setup() -> str:
        store = make(prefix)
        try:
            run = await created(store)
            lease = await acquire(store, run.id)
            await lease.write_chunk("bad", 0, b"x")
            await lease.release()
            await save(store, run, RunStatus.COMPLETED)
            return run.id
        finally:
            await store.close()

    run_id = asyncio.run(setup())
    client = raw_client()
    try:
        STREAM_DAMAGE[damage](client, prefix, run_id)
    finally:
        client.close()
    where = _stream_damage_where(prefix, run_id, damage)
    monkeypatch.chdir(tmp_path)
    env = {"WF_REDIS_URL": URL, "WF_REDIS_PREFIX": prefix, "WF_POSTGRES_DSN": None}
    runner = CliRunner()
    shown = runner.invoke(build_app(), ["inspect", run_id, "--json"], env=env)
    assert shown.exit_code == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert [(f["kind"], f["where"]) for f in data["damaged"]] == [("stream", where)]
    assert "Traceback" not in shown.stderr
    if damage == "chunks a string":
        streamed = runner.invoke(build_app(), ["stream", run_id, "--name", "bad"], env=env)
        assert streamed.exit_code == 3, (streamed.stderr, streamed.exception)
        assert streamed.stderr.count("\n") == 1 and where in streamed.stderr, streamed.stderr

    async def api() -> None:
        store = make(prefix)
        app = create_app(Engine(store))
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                answer = await http.get(f"/api/v1/runs/{run_id}")
                assert answer.status_code == 200, answer.text
                damaged = answer.json()["damaged"]
                assert [(f["kind"], f["where"]) for f in damaged] == [("stream", where)]
                page = await http.get(f"/runs/{run_id}")
                assert page.status_code == 200 and "1 damaged stream" in page.text
        finally:
            await store.close()

    asyncio.run(api())


@pytest.mark.parametrize("command", ["HGETALL", "LLEN"])
async def test_a_server_refusal_while_listing_streams_is_a_store_failure_not_damage(
    prefix: str, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing replies a key of another type as that stream's damage; any other error (the
    server busy, loading) is the server's: raised as it was, no stream named damaged."""
    store = make(prefix)
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        await lease.write_chunk("out", 0, b"x")
        await lease.release()
        plain = _scripts.STREAMS
        monkeypatch.setattr(_scripts, "STREAMS", refusing(plain, command, SERVER_ERRORS[2]))
        with collect_faults() as damaged, pytest.raises(StoreError) as failed:
            await store.list_streams(run.id)
        assert not isinstance(failed.value, StoreCorrupted) and "BUSY" in str(failed.value)
        assert damaged == [] and list(store.faults) == []
        with pytest.raises(StoreError) as failed:
            await store.verify()
        assert not isinstance(failed.value, StoreCorrupted)
        monkeypatch.setattr(_scripts, "STREAMS", plain)
        assert await store.list_streams(run.id) == {"out": (1, False)}
    finally:
        await store.close()


def pulled_counting(script: str) -> str:
    """``script`` as it runs while adding up, under the key ``<prefix>pulled``, the bytes its
    ``LRANGE`` and ``LINDEX`` calls hand it: what it took into its memory."""
    shim = (
        "local redis = setmetatable({pcall = function(cmd, key, ...)\n"
        "  local found = redis.pcall(cmd, key, ...)\n"
        "  local name, size = string.upper(cmd), 0\n"
        "  if name == 'LRANGE' and type(found) == 'table' and not found.err then\n"
        "    for _, item in ipairs(found) do size = size + #item end\n"
        "  elseif name == 'LINDEX' and type(found) == 'string' then\n"
        "    size = #found\n"
        "  end\n"
        "  redis.call('INCRBY', ARGV[1] .. 'pulled', size)\n"
        "  return found\n"
        "end}, {__index = redis})\n"
    )
    return shim + script


async def test_a_batch_of_small_chunks_before_big_ones_pulls_no_more_than_one_big_chunk(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is read inside one script, which blocks the server: after many small chunks it
    took the next ones in one go (as many as the small ones allowed), so big chunks behind them
    were all pulled into the script to return none. It takes at most one chunk past the
    batch."""
    big, budget = 64 * 1024, 32 * 1024
    sizes = [1] * 63 + [big] * 64
    store = make(prefix)
    client = raw_client()
    try:
        run = await created(store)
        lease = await acquire(store, run.id)
        for i, size in enumerate(sizes):
            await lease.write_chunk("out", i, b"z" * size)
        await lease.release()
        monkeypatch.setattr(_scripts, "CHUNK_BATCH", pulled_counting(_scripts.CHUNK_BATCH))
        for start, count in ((0, 63), (63, 1)):
            client.delete(f"{prefix}pulled")
            chunks, closed = await store.read_chunks(run.id, "out", start, max_bytes=budget)
            assert [len(c) for c in chunks] == sizes[start : start + count] and not closed
            pulled = int(client.get(f"{prefix}pulled") or 0)
            assert sum(map(len, chunks)) <= pulled <= sum(map(len, chunks)) + big
    finally:
        client.close()
        await store.close()
