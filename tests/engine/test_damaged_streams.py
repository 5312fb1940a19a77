"""A stream whose files are damaged, met by a step that writes to it after the run woke or was
recovered: the step's chunks are stored after the earlier ones, or the step fails loudly as
damage does; never are its chunks dropped with the run completed."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import wf
from wf.store import Store
from wf.store.local import LocalStore, _fsops
from wf.store.local._layout import stream_key
from wf.testing import TestEngine

pytestmark = [pytest.mark.stores("local"), pytest.mark.timeout(60)]

gate: dict[str, asyncio.Event] = {}


@wf.step
async def write_two(tag: str) -> list[int]:
    if tag in gate:
        await gate[tag].wait()
    async with wf.stream_writer("out") as out:
        return [await out.write(f"{tag}-1\n"), await out.write(f"{tag}-2\n")]


@wf.workflow
async def sleeps_between() -> list[list[int]]:
    first = await write_two("a")
    await wf.sleep(86400)
    return [first, await write_two("b")]


@wf.workflow
async def waits_between() -> list[list[int]]:
    return [await write_two("a"), await write_two("b")]


def _damage(store: Store, run_id: str, how: str) -> None:
    assert isinstance(store, LocalStore)
    base = os.path.join(store.run_location(run_id), stream_key("out"))
    if how == "name not UTF-8":
        Path(base + ".name").write_bytes(b"\xff\xfe")
    elif how == "name of another stream":
        Path(base + ".name").write_bytes(b"default")
    elif how == "data a directory":
        os.remove(base + ".data")
        os.mkdir(base + ".data")
    elif how == "name not UTF-8, data a directory":
        Path(base + ".name").write_bytes(b"\xff\xfe")
        os.remove(base + ".data")
        os.mkdir(base + ".data")
    else:  # the index is a directory: its chunk count cannot be read
        os.remove(base + ".idx")
        os.mkdir(base + ".idx")


async def _outcome(engine: TestEngine, run: wf.Run[list[list[int]]]) -> tuple[str, bytes]:
    record = await engine.store.get_run(run.id)
    try:
        chunks, _ = await engine.store.read_chunks(run.id, "out")
    except wf.StoreCorrupted:
        chunks = []  # the index that says where they are is damaged
    return record.status.value, b"".join(chunks)


def _damage_redis(store: Store, run_id: str, how: str) -> None:
    """On Redis: ``out``'s chunks key a string, or another stream named by bytes that are not
    UTF-8 (a stray write's)."""
    import redis

    from wf.store.redis import RedisStore

    assert isinstance(store, RedisStore)
    client = redis.Redis.from_url(store.url)
    try:
        if how == "chunks a string":
            client.delete(f"{store.prefix}sc:{run_id}:out")
            client.set(f"{store.prefix}sc:{run_id}:out", "x")
        else:
            client.hset(f"{store.prefix}sn:{run_id}", b"\xff\xfe", "0")
    finally:
        client.close()


async def _wake_after(engine: TestEngine, store: Store, how: str) -> tuple[str, bytes]:
    run = await wf.start(sleeps_between)
    await engine.quiet()  # suspended in its sleep, a's chunks stored
    (_damage_redis if how in ("chunks a string", "another name not UTF-8") else _damage)(
        store, run.id, how
    )
    await engine.settle()
    return await _outcome(engine, run)


async def _recover_after(engine: TestEngine, store: Store, how: str) -> tuple[str, bytes]:
    gate["b"] = asyncio.Event()
    try:
        run = await wf.start(waits_between)
        for _ in range(1000):  # until a's chunks are stored and b waits at its gate
            if len((await engine.store.read_chunks(run.id, "out"))[0]) == 2:
                break
            await asyncio.sleep(0.001)
        await engine.crash(run)
        _damage(store, run.id, how)
        gate["b"].set()
        await wf.Worker(engine).run(until_idle=True)
        return await _outcome(engine, run)
    finally:
        gate.clear()


@pytest.mark.parametrize("how", ["name not UTF-8", "name of another stream"])
@pytest.mark.parametrize("between", ["wake", "recovery"])
async def test_a_stream_with_a_damaged_name_file_keeps_every_chunk_written_after_a_wake(
    wf_engine: TestEngine, engine_store: Store, how: str, between: str
) -> None:
    # Its chunk files are named by the stream's key, not by the name file: still writable.
    if between == "wake":
        status, data = await _wake_after(wf_engine, engine_store, how)
    else:
        status, data = await _recover_after(wf_engine, engine_store, how)
    assert (status, data) == ("completed", b"a-1\na-2\nb-1\nb-2\n")


@pytest.mark.parametrize("between", ["wake", "recovery"])
async def test_a_stream_whose_index_is_damaged_fails_the_run_rather_than_drop_chunks(
    wf_engine: TestEngine, engine_store: Store, between: str
) -> None:
    if between == "wake":
        status, _ = await _wake_after(wf_engine, engine_store, "index a directory")
    else:
        status, _ = await _recover_after(wf_engine, engine_store, "index a directory")
    assert status == "failed"
    [run] = await engine_store.list_runs()
    assert run.error is not None and run.error["type"] == "wf.StoreCorrupted"


@pytest.mark.stores("redis")
async def test_another_streams_damage_on_redis_stops_no_writer(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    """A stream name that is not UTF-8 beside ``out``: the writer's count came from the
    listing, which failed (a decode error), and so did the step."""
    status, data = await _wake_after(wf_engine, engine_store, "another name not UTF-8")
    assert (status, data) == ("completed", b"a-1\na-2\nb-1\nb-2\n")


@pytest.mark.stores("redis")
async def test_a_stream_key_of_another_type_on_redis_fails_the_run_naming_it(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    status, _ = await _wake_after(wf_engine, engine_store, "chunks a string")
    assert status == "failed"
    [run] = await engine_store.list_runs()
    assert run.error is not None and run.error["type"] == "wf.StoreCorrupted"
    assert f"sc:{run.id}:out" in run.error["message"], run.error


@wf.step
async def opens_again() -> str:
    for attempt in range(2):
        try:
            async with wf.stream_writer("out") as out:
                await out.write("x")
            return f"written at attempt {attempt}"
        except wf.StoreError:
            continue
    return "gave up"


@wf.workflow
async def catches_and_opens_again() -> str:
    return await opens_again()


async def test_a_writer_that_failed_to_open_lets_go_of_its_stream(
    wf_engine: TestEngine, engine_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's count could not be read (an ``EIO``, damage): no ``async with`` body ran,
    and the stream is free again for a step that catches the error and opens it once more.
    It stayed taken until the step ended, so that second open waited for good."""
    real = engine_store.stream_info
    calls = [0]

    async def fails_once(run_id: str, name: str) -> tuple[int, bool]:
        calls[0] += 1
        if calls[0] == 1:
            raise wf.StoreError("out: [EIO] once")
        return await real(run_id, name)

    monkeypatch.setattr(engine_store, "stream_info", fails_once)
    run = await wf.start(catches_and_opens_again)
    assert await asyncio.wait_for(run.result(), 10) == "written at attempt 1"


async def _chunks(stream: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in stream]


@pytest.mark.parametrize("how", ["name not UTF-8", "name of another stream"])
async def test_a_stream_whose_name_file_is_damaged_is_read_by_its_name(
    wf_engine: TestEngine, engine_store: Store, how: str
) -> None:
    """The listing leaves the stream out, but a reader asking by its name reads its chunk
    files by the name's key (``wf stream``, the API's stream endpoint, ``Run.read_stream``)."""
    run = await wf.start(sleeps_between)
    await wf_engine.quiet()  # suspended in its sleep, a's chunks stored, the stream open
    _damage(engine_store, run.id, how)
    now = wf.admin.follow_stream(engine_store, run.id, "out", follow=False)
    assert await _chunks(now) == [b"a-1\n", b"a-2\n"]
    follower = asyncio.create_task(_chunks(run.read_stream("out")))
    await wf_engine.settle()
    assert await asyncio.wait_for(follower, 10) == [b"a-1\n", b"a-2\n", b"b-1\n", b"b-2\n"]
    ended = wf.admin.follow_stream(engine_store, run.id, "out", start=-1, follow=False)
    assert await _chunks(ended) == [b"b-2\n"]


@pytest.mark.parametrize("how", ["name not UTF-8", "name of another stream"])
async def test_a_stream_whose_name_file_is_damaged_is_closed_when_its_run_ends(
    wf_engine: TestEngine, engine_store: Store, how: str
) -> None:
    """Run end closes every stream still open, this one too: found by the names the run's
    journal wrote, not only by the listing's."""
    run = await wf.start(sleeps_between)
    await wf_engine.quiet()
    _damage(engine_store, run.id, how)
    await wf_engine.settle()
    assert (await engine_store.get_run(run.id)).status.value == "completed"
    assert await engine_store.read_chunks(run.id, "out", 4) == ([], True)
    assert await engine_store.stream_info(run.id, "out") == (4, True)


async def test_the_stream_a_damaged_name_file_names_is_not_given_its_chunks(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    """The name file of "out" says "default": the chunks are out's (its files are named by
    its key), so a reader asking for "default" is told the run has no such stream."""
    run = await wf.start(sleeps_between)
    await wf_engine.quiet()
    _damage(engine_store, run.id, "name of another stream")
    await wf_engine.settle()
    with pytest.raises(wf.StreamNotFound):
        await _chunks(wf.admin.follow_stream(engine_store, run.id, "default"))
    with pytest.raises(wf.StreamNotFound):
        await _chunks(run.read_stream("default"))


async def test_a_stream_whose_index_is_damaged_is_still_the_stores_error_by_name(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    run = await wf.start(sleeps_between)
    await wf_engine.quiet()
    _damage(engine_store, run.id, "index a directory")
    with pytest.raises(wf.StoreCorrupted, match="no readable stream 'out'"):
        await _chunks(wf.admin.follow_stream(engine_store, run.id, "out", follow=False))
    await wf_engine.settle()  # the run fails on it (a test above)
    with pytest.raises(wf.StoreCorrupted, match="no readable stream 'out'"):
        await _chunks(run.read_stream("out"))


async def test_a_healthy_runs_end_asks_the_store_for_no_stream_by_name(
    wf_engine: TestEngine, engine_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run end looks for streams the listing left out by the journal's names: a healthy run's
    are all listed, so the writer's one count is all ``stream_info`` is asked."""
    real = engine_store.stream_info
    asked: list[str] = []

    async def counted(run_id: str, name: str) -> tuple[int, bool]:
        asked.append(name)
        return await real(run_id, name)

    monkeypatch.setattr(engine_store, "stream_info", counted)
    run = await wf.start(waits_between)
    assert await asyncio.wait_for(run.result(), 10) == [[0, 1], [2, 3]]
    await wf_engine.quiet()
    assert asked == ["out"]
    assert await engine_store.read_chunks(run.id, "out", 4) == ([], True)


@wf.workflow
async def writes_then_sleeps() -> list[int]:
    first = await write_two("a")
    await wf.sleep(86400)
    return first


@pytest.mark.parametrize("how", ["data a directory", "name not UTF-8, data a directory"])
async def test_a_stream_that_cannot_be_closed_keeps_its_run_from_ending_never(
    wf_engine: TestEngine, engine_store: Store, how: str
) -> None:
    """Closing is best effort at run end: a stream whose data file is damaged (its index still
    counts its chunks) cannot be closed, and its run ends all the same. The listing leaves it
    out and ``stream_info`` refuses it by name, so run end passes it over without trying its
    close (a close that meets damage itself: the test below). The damage stays the reader's to
    meet, by name."""
    run = await wf.start(writes_then_sleeps)
    await wf_engine.quiet()  # suspended in its sleep, a's chunks stored, the stream open
    _damage(engine_store, run.id, how)
    await wf_engine.settle()
    assert (await engine_store.get_run(run.id)).status.value == "completed"
    assert await asyncio.wait_for(run.result(), 10) == [0, 1]
    with pytest.raises(wf.StoreCorrupted, match=r"\.data"):
        await _chunks(run.read_stream("out"))


async def test_a_stream_whose_close_meets_damage_is_left_open_and_named(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    """Damage met only by the close (its data file turned into a directory after the listing
    counted it): the run ends all the same, the stream is left open, its damage noted in the
    store's faults (the worker's log and summary)."""
    run = await wf.start(writes_then_sleeps)
    await wf_engine.quiet()
    with _fsops.inject("open", errno.EISDIR, match=".data") as refused:
        await wf_engine.settle()
    assert refused.hits == 1  # the close's open of the data file: nothing else opened it
    assert (await engine_store.get_run(run.id)).status.value == "completed"
    assert await engine_store.stream_info(run.id, "out") == (2, False)
    [fault] = [f for f in engine_store.faults if f.kind == "stream"]
    assert "is a directory where a file belongs" in fault.reason
    # Named as the store's listing and ``wf store verify`` name the stream: one item, not two.
    key = stream_key("out")
    assert (fault.item, fault.where) == (
        f"{run.id}/{key}",
        os.path.join(engine_store.run_location(run.id), key),
    )


@pytest.mark.stores("memory", "local")
async def test_a_stream_listing_that_refuses_keeps_its_run_from_ending_never(
    wf_engine: TestEngine, engine_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's stream listing refuses as damaged (no store's does today; a store that did):
    run end is best effort, so the refusal is noted in the store's faults and the streams the
    run's journal wrote are closed by name; the run ends. It failed the run's end on every
    drive: the run stayed running for good."""

    async def refused(run_id: str) -> dict[str, tuple[int, bool]]:
        raise wf.StoreCorrupted(f"wf:streams:{run_id}: a key of the wrong type")

    run = await wf.start(writes_then_sleeps)
    await wf_engine.quiet()  # suspended in its sleep, a's chunks stored, the stream open
    monkeypatch.setattr(engine_store, "list_streams", refused)
    await wf_engine.settle()
    assert (await engine_store.get_run(run.id)).status.value == "completed"
    assert await asyncio.wait_for(run.result(), 10) == [0, 1]
    # Closed by its name where the store counts a stream by its name (the local store); the
    # memory store counts it from its listing, which refuses too: left open there.
    _, closed = await engine_store.read_chunks(run.id, "out", 2)
    assert closed is isinstance(engine_store, LocalStore)
    [fault] = [f for f in engine_store.faults if f.kind == "streams"]
    assert (fault.item, fault.where, fault.reason) == (
        run.id,
        f"wf:streams:{run.id}",
        "a key of the wrong type",
    )


def _cut_data(store: Store, run_id: str) -> None:
    """``out``'s name file not UTF-8 and its data file emptied: neither its name nor a chunk
    can be read (its index still says two)."""
    assert isinstance(store, LocalStore)
    base = os.path.join(store.run_location(run_id), stream_key("out"))
    Path(base + ".name").write_bytes(b"\xff\xfe")
    os.truncate(base + ".data", 0)


async def test_a_stream_whose_name_and_data_are_both_damaged_is_named_as_damaged(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    """Not "the run has no stream 'out'": its files are there, named by the name's key, and
    damaged. Asked by its name, before and after its run ends; left open at run end (a close
    would take its index's word back and hide the damage)."""
    run = await wf.start(writes_then_sleeps)
    await wf_engine.quiet()  # suspended in its sleep, a's chunks stored, the stream open
    _cut_data(engine_store, run.id)
    base = os.path.join(engine_store.run_location(run.id), stream_key("out"))
    said = rf"no readable stream 'out': {base}.*not UTF-8"
    with pytest.raises(wf.StoreCorrupted, match=said):
        await _chunks(wf.admin.follow_stream(engine_store, run.id, "out", follow=False))
    await wf_engine.settle()
    assert await asyncio.wait_for(run.result(), 10) == [0, 1]
    with pytest.raises(wf.StoreCorrupted, match=said):
        await _chunks(run.read_stream("out"))
    assert not os.path.exists(base + ".closed")
    assert os.path.getsize(base + ".idx") == 16  # its index as the damage left it


@wf.step
async def write_one() -> int:
    async with wf.stream_writer("out") as out:
        return await out.write("x")


@wf.workflow
async def writes_one_then_sleeps() -> int:
    index = await write_one()
    await wf.sleep(86400)
    return index


def _unstore(store: Store, run_id: str, how: str) -> None:
    """Take ``out`` out of the store as a crash between journaling its first chunk and storing
    it leaves it: on the local store, files opened and no chunk in them, their name file's
    entry lost to a power cut (``files without a name``), or no file at all."""
    if isinstance(store, LocalStore):
        base = os.path.join(store.run_location(run_id), stream_key("out"))
        os.remove(base + ".name")
        if how == "no file":
            os.remove(base + ".data")
            os.remove(base + ".idx")
        else:
            os.truncate(base + ".data", 0)
            os.truncate(base + ".idx", 0)
        return
    from wf.store.memory import MemoryStore

    if isinstance(store, MemoryStore):
        del store._runs[run_id].streams["out"]
        return
    from wf.store.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        import psycopg

        with psycopg.connect(store.dsn, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {store.schema}.wf_stream_chunks WHERE run_id = %s", [run_id])
        return
    import redis

    from wf.store.redis import RedisStore

    assert isinstance(store, RedisStore)
    client = redis.Redis.from_url(store.url)
    try:
        client.hdel(f"{store.prefix}sn:{run_id}", "out")
        client.delete(f"{store.prefix}sc:{run_id}:out")
    finally:
        client.close()


@pytest.mark.stores("memory", "local", "postgres", "redis")
@pytest.mark.parametrize("how", ["no file", "files without a name"])
async def test_a_stream_no_chunk_of_which_was_stored_reads_empty_and_closed_at_run_end(
    wf_engine: TestEngine, engine_store: Store, how: str
) -> None:
    """The run's journal says it wrote ``out``; the store has none of it (the process died
    between the two). Run end closes it as it closes every stream the run wrote: an empty
    stream, closed, not "the run has no stream 'out'" (nor one its followers wait on)."""
    if how == "files without a name" and not isinstance(engine_store, LocalStore):
        pytest.skip("a local store's files")
    run = await wf.start(writes_one_then_sleeps)
    await wf_engine.quiet()
    _unstore(engine_store, run.id, how)
    await wf_engine.settle()
    assert await asyncio.wait_for(run.result(), 10) == 0
    assert await _chunks(run.read_stream("out")) == []
    assert await engine_store.list_streams(run.id) == {"out": (0, True)}
    assert await _chunks(wf.admin.follow_stream(engine_store, run.id, "out")) == []


@wf.step
async def write_three() -> int:
    async with wf.stream_writer("out") as out:
        for chunk in ("x", "y", "z"):
            index = await out.write(chunk)
        return index


@wf.workflow
async def writes_three_then_sleeps() -> int:
    index = await write_three()
    await wf.sleep(86400)
    return index


@pytest.mark.stores("memory", "local", "postgres", "redis")
async def test_a_stream_the_journal_wrote_chunks_of_and_the_store_lost_is_a_fault(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    """Three chunks were stored (the journal has indexes 0 to 2), then the stream's files were
    lost: run end does not close it empty, which would read as a stream that had nothing; it
    notes the loss in the store's faults and leaves the stream open."""
    run = await wf.start(writes_three_then_sleeps)
    await wf_engine.quiet()
    _unstore(engine_store, run.id, "no file")
    await wf_engine.settle()
    assert await asyncio.wait_for(run.result(), 10) == 2
    [fault] = [f for f in engine_store.faults if f.kind == "stream"]
    assert fault.item == engine_store.stream_fault(run.id, "out")[0]
    assert "the journal says 3 chunks were written, the store has none" in fault.reason
    assert await engine_store.list_streams(run.id) == {}
    with pytest.raises((wf.StreamNotFound, wf.StoreCorrupted)):
        await _chunks(run.read_stream("out"))


@wf.step(max_retries=2, backoff=0)
async def write_three_once_more() -> int:
    async with wf.stream_writer("out") as out:
        for chunk in ("x", "y", "z"):
            index = await out.write(chunk)
        return index


@wf.workflow
async def writes_three() -> int:
    return await write_three_once_more()


async def test_a_chunk_the_store_failed_to_take_is_written_by_the_steps_retry(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    """The second chunk's write was journaled, then the data file refused it (``EIO``): the
    step's retry writes its chunks after the first, from that index on. They were written
    after it, at indexes the store does not take out of order: dropped, and the run
    completed with them lost."""
    with _fsops.inject("write", errno.EIO, match=".data", after=1, times=1) as refused:
        run = await wf.start(writes_three)
        assert await asyncio.wait_for(run.result(), 10) == 3
    assert refused.hits == 1
    assert await _chunks(run.read_stream("out")) == [b"x", b"x", b"y", b"z"]


@wf.step
async def catches_a_failed_write_and_closes() -> str:
    async with wf.stream_writer("out") as out:
        await out.write("x")
        try:
            await out.write("y")
        except wf.StoreError:
            await out.write("y again")
        await out.close()
    return "closed"


@wf.workflow
async def closes_after_a_failed_write() -> str:
    return await catches_a_failed_write_and_closes()


async def test_a_step_that_catches_a_failed_write_writes_and_closes_on(
    wf_engine: TestEngine, engine_store: Store
) -> None:
    with _fsops.inject("write", errno.EIO, match=".data", after=1, times=1) as refused:
        run = await wf.start(closes_after_a_failed_write)
        assert await asyncio.wait_for(run.result(), 10) == "closed"
    assert refused.hits == 1
    assert await _chunks(run.read_stream("out")) == [b"x", b"y again"]
    assert await engine_store.stream_info(run.id, "out") == (2, True)
