"""``RedisStore`` when a reply is lost: the server ran the command, the connection dropped
before its answer came back. A proxy between the store and the server does it on cue: it passes
a chosen command on, waits for the server's answer, and closes the connection instead of
passing the answer back.

The store sends its idempotent scripts once more on a fresh connection (a lease's write, its
release, a claim, a lease taken with ``try_acquire``, a run's creation): a write sent twice is
written once, a claim sent twice hands out each run once, no lease is left held by the attempt
whose reply was lost, and a creation sent twice makes one run, whose start returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import pytest_asyncio

redis = pytest.importorskip("redis")

import wf  # noqa: E402
from tests.store.helpers import redis_prefix  # noqa: E402
from wf.engine._current import use_engine  # noqa: E402
from wf.engine._engine import Engine  # noqa: E402
from wf.store._base import RunStatus  # noqa: E402
from wf.store.conformance import event, record  # noqa: E402
from wf.store.redis import RedisStore  # noqa: E402

URL = os.environ.get("WF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


class ReplyLosingProxy:
    """A TCP proxy to the Redis server that loses the replies of chosen commands.

    ``lose(match, times)``: the next ``times`` requests whose bytes satisfy ``match`` reach the
    server, and their connection is closed when the answer comes back, without passing it on.
    """

    def __init__(self, host: str, port: int, db: int = 0) -> None:
        self._upstream = (host, port)
        self._db = db
        self._server: asyncio.Server | None = None
        self._match: Callable[[bytes], bool] | None = None
        self._times = self._seen = 0
        self._every = 1
        self.lost = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/{self._db}"  # the test server's database

    def lose(self, match: Callable[[bytes], bool], times: int = 1, every: int = 1) -> None:
        """Lose the answers of ``times`` requests that ``match``: every ``every``-th of them
        (2: one, and not the next, which may be the same request sent again)."""
        self._match, self._times, self._every, self._seen = match, times, every, 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        doomed = asyncio.Event()  # this connection's next answer is to be lost

        async def to_server() -> None:
            while data := await reader.read(65536):
                if self._times > 0 and self._match is not None and self._match(data):
                    self._seen += 1
                    if (self._seen - 1) % self._every == 0:
                        self._times -= 1
                        doomed.set()
                up_writer.write(data)
                await up_writer.drain()

        async def to_client() -> None:
            while data := await up_reader.read(65536):
                if doomed.is_set():
                    self.lost += 1
                    return  # the server answered; the client never hears it
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.create_task(to_server()), asyncio.create_task(to_client())]
        for pump in pumps:
            self._tasks.add(pump)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
                self._tasks.discard(pump)
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


@pytest.fixture
def prefix() -> Iterator[str]:
    yield from redis_prefix(URL)


@pytest_asyncio.fixture
async def proxy() -> AsyncIterator[tuple[ReplyLosingProxy, str]]:
    client = redis.Redis.from_url(URL)
    kwargs = client.connection_pool.connection_kwargs
    client.close()
    found = ReplyLosingProxy(
        kwargs.get("host", "127.0.0.1"), int(kwargs.get("port", 6379)), int(kwargs.get("db", 0))
    )
    url = await found.start()
    try:
        yield found, url
    finally:
        await found.close()


def script_call(*words: str) -> Callable[[bytes], bool]:
    """A request that runs a script (``EVALSHA``) naming every one of ``words``."""
    needles = [w.encode() for w in words]
    return lambda data: b"EVALSHA" in data.upper() and all(n in data for n in needles)


async def test_a_lease_write_whose_reply_was_lost_is_written_once(
    prefix: str, proxy: tuple[ReplyLosingProxy, str]
) -> None:
    losing, url = proxy
    store = RedisStore(url, prefix=prefix)
    try:
        run = record()
        await store.create_run(run, [event("run_started")])
        lease = await store.try_acquire(run.id)
        assert lease is not None
        losing.lose(script_call(run.id, "step_completed"))
        await lease.append([event("step_completed", op=0)])
        assert losing.lost == 1
        await lease.append([event("step_completed", op=1)])  # the lease goes on
        run.status, run.output = RunStatus.COMPLETED, wf.encode(7)
        losing.lose(script_call(run.id, "run_completed"))
        await lease.append_and_save([event("run_completed")], run)
        assert losing.lost == 2
        await lease.release()
        kinds = [(e["type"], e.get("op")) for e in await store.read_journal(run.id)]
        assert kinds == [
            ("run_started", None),
            ("step_completed", 0),
            ("step_completed", 1),
            ("run_completed", None),
        ]
        assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
    finally:
        await store.close()


async def test_a_claim_whose_reply_was_lost_hands_out_each_run_once(
    prefix: str, proxy: tuple[ReplyLosingProxy, str]
) -> None:
    """The claim sent again takes again what the lost attempt took (its leases carry the
    call's word): the runs are handed out once, under leases that write, and none stays held
    by the attempt whose answer never came."""
    losing, url = proxy
    store, other = RedisStore(url, prefix=prefix), RedisStore(URL, prefix=prefix)
    try:
        runs = [record() for _ in range(4)]
        for run in runs:
            await store.create_run(run, [event("run_started")])
        losing.lose(script_call("null"))  # the claim's arguments: no queue filter, no pins
        leases = await store.claim(4e9, 10)
        assert losing.lost == 1
        assert sorted(lease.run_id for lease in leases) == sorted(run.id for run in runs)
        for lease in leases:
            await lease.append([event("step_completed", op=0)])
            assert await other.try_acquire(lease.run_id) is None
            await lease.release()
        for run in runs:  # none held by the lost attempt
            again = await other.try_acquire(run.id)
            assert again is not None
            await again.release()
            assert [e["type"] for e in await other.read_journal(run.id)] == [
                "run_started",
                "step_completed",
            ]
    finally:
        await store.close()
        await other.close()


async def test_a_lease_taken_whose_reply_was_lost_is_taken_once(
    prefix: str, proxy: tuple[ReplyLosingProxy, str]
) -> None:
    losing, url = proxy
    store, other = RedisStore(url, prefix=prefix), RedisStore(URL, prefix=prefix)
    try:
        run = record()
        await store.create_run(run, [event("run_started")])
        losing.lose(script_call(run.id))
        lease = await store.try_acquire(run.id)
        assert losing.lost == 1
        assert lease is not None  # not "held": the lost attempt's lease is taken again
        await lease.append([event("step_completed", op=0)])
        assert await other.try_acquire(run.id) is None
        await lease.release()
        again = await other.try_acquire(run.id)
        assert again is not None
        await again.release()
    finally:
        await store.close()
        await other.close()


@wf.step
async def counted(n: int) -> int:
    return n + 1


@wf.workflow
async def five_steps(n: int) -> int:
    for _ in range(5):
        n = await counted(n)
    return n


async def test_a_run_whose_writes_lose_their_replies_records_each_step_and_its_end_once(
    prefix: str, proxy: tuple[ReplyLosingProxy, str]
) -> None:
    """Driven through the engine, with the replies of many of its writes lost: each step's
    completion and the outcome are in the journal once."""
    losing, url = proxy
    store = RedisStore(url, prefix=prefix)
    try:
        with use_engine(Engine(store)):
            # Every other write that carries a step's events (they name it): the next one may
            # be the same write sent again, which the store sends only once more.
            losing.lose(script_call("counted"), times=6, every=2)
            run = await wf.start(five_steps, 0)
            assert await run.result(timeout=20) == 5
        assert losing.lost >= 5
        journal = await store.read_journal(run.id)
        ops = [e["op"] for e in journal if e["type"] == "step_completed"]
        assert ops == [0, 1, 2, 3, 4]
        assert [e["type"] for e in journal].count("run_completed") == 1
    finally:
        await store.close()


@wf.workflow
async def one_step(n: int) -> int:
    return await counted(n)


def creation(*words: str) -> Callable[[bytes], bool]:
    """A run's creation: the script call that carries its ``run_started`` event."""
    return script_call("run_started", *words)


@pytest.mark.parametrize(
    "how",
    [
        {},
        {"run_id": "order-7"},
        {"run_id": "order-8", "unique": True},
    ],
    ids=["generated id", "given id", "unique"],
)
async def test_a_start_whose_creation_reply_was_lost_returns_its_run(
    prefix: str, proxy: tuple[ReplyLosingProxy, str], how: dict[str, object]
) -> None:
    """The creation is sent again and answered as created: the caller gets its handle (not a
    ``StoreError``, nor ``RunAlreadyExists`` for a unique start), and the run exists once."""
    losing, url = proxy
    store = RedisStore(url, prefix=prefix)
    try:
        with use_engine(Engine(store)):
            workflow = one_step.with_options(unique=True) if how.get("unique") else one_step
            run_id = how.get("run_id")
            losing.lose(creation())
            run = await wf.start(workflow, 4, run_id=None if run_id is None else str(run_id))
            assert losing.lost == 1
            assert await run.result(timeout=20) == 5
        assert run_id is None or run.id == run_id
        journal = await store.read_journal(run.id)
        assert [e["type"] for e in journal].count("run_started") == 1
        assert [r.id for r in await store.list_runs()] == [run.id]
    finally:
        await store.close()


async def test_a_creation_sent_again_is_answered_as_made_and_another_of_its_id_is_not(
    prefix: str, proxy: tuple[ReplyLosingProxy, str]
) -> None:
    """Store level: the run is created once, in the queue once; a later creation of the same
    id (another call, with other content) still finds it taken."""
    losing, url = proxy
    store = RedisStore(url, prefix=prefix)
    try:
        run = record()
        losing.lose(creation(run.id))
        assert await store.create_run(run, [event("run_started")], explicit=True) is True
        assert losing.lost == 1 and run.seq > 0
        assert [e["type"] for e in await store.read_journal(run.id)] == ["run_started"]
        assert await store.due_runs(4e9, 10) == [run.id]
        again = record(id=run.id, workflow="tests:other")
        assert await store.create_run(again, [event("run_started")], explicit=True) is False
        assert await store.create_run(record(id=run.id), [event("run_started")]) is False
        assert (await store.get_run(run.id)).workflow == run.workflow
    finally:
        await store.close()
