"""The local store's reads of big byte streams: a batch at a time, off the event loop."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from tests.store.helpers import acquire, created
from wf.store.local import LocalStore, _streams

CHUNK = 4 * 1024 * 1024
COUNT = 8


async def _big_stream(tmp_path: Path) -> tuple[LocalStore, str]:
    store = LocalStore(str(tmp_path / "s"))
    run = await created(store)
    lease = await acquire(store, run.id)
    for index in range(COUNT):
        await lease.write_chunk("out", index, bytes([65 + index]) * CHUNK)
    await lease.close_stream("out", COUNT)
    await lease.release()
    return store, run.id


async def test_reading_a_big_stream_holds_a_batch_not_the_stream(tmp_path: Path) -> None:
    # `wf stream` of 20 chunks of 20 MB peaked at 816 MB: the whole stream was read at once,
    # then cut into chunks (twice its size). A reader holds a chunk or so now.
    store, run_id = await _big_stream(tmp_path)
    seen = 0
    tracemalloc.start()
    try:
        async for chunk in store.stream_chunks(run_id, "out", follow=False):
            assert chunk == bytes([65 + seen]) * CHUNK
            seen += 1
            del chunk
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == COUNT
    # A batch, the chunk in flight and the tracing's own: far from the stream's 8 chunks.
    assert peak < 4 * CHUNK, f"peak {peak / 2**20:.1f} MB to read {COUNT} chunks of 4 MB"


async def test_a_big_read_leaves_the_event_loop_free(tmp_path: Path) -> None:
    # Three readers of a big stream over `wf serve` made a listing of runs take seconds: each
    # read of many MB held the loop. Such a read is made in a thread: the loop goes on.
    store, run_id = await _big_stream(tmp_path)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0)
    try:
        for start in (0, COUNT - 1):
            before = ticks
            chunks, closed = await store.read_chunks(run_id, "out", start, max_bytes=CHUNK)
            assert (len(chunks), closed) == (1, True)
            assert ticks > before, "the loop ran nothing while the read went on"
            before = ticks
            chunks, _ = await store.read_chunks(run_id, "out", start)  # unbounded too
            assert len(chunks) == COUNT - start
            assert ticks > before, "the loop ran nothing while the read went on"
    finally:
        ticker.cancel()


@pytest.mark.parametrize("start", [0, 1])
async def test_a_read_racing_the_repair_of_a_torn_chunk_returns_whole_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: int
) -> None:
    # A writer died mid-chunk: the chunk's index entry reached the disk, a third of its data
    # did not. A reader read that index; a new writer's repair then cut the entry and wrote
    # two chunks over the same bytes before the reader read the data: it returned 200 KB of
    # the one and 100 KB of the other as one chunk (the torn entry's bounds on new bytes).
    store = LocalStore(str(tmp_path / "s"))
    run = await created(store)
    lease = await acquire(store, run.id)
    first, torn, new = b"A" * 300_000, b"T" * 100_000, [b"N" * 200_000, b"M" * 200_000]
    await lease.write_chunk("out", 0, first)
    await lease.release()
    run_dir = tmp_path / "s" / "runs" / run.id
    (data,) = run_dir.glob("s-*.data")
    (idx,) = run_dir.glob("s-*.idx")
    with data.open("ab") as file:
        file.write(torn)
    with idx.open("ab") as file:
        file.write((len(first) + 300_000).to_bytes(8, "big"))  # the torn chunk's end
    real = _streams.locate
    raced = []

    def locate(*args: Any, **kwargs: Any) -> _streams.Span:
        span = real(*args, **kwargs)
        if not raced:  # the repair and the new chunks land between the index and the data
            raced.append(True)
            writer = _streams.StreamWriter(str(run_dir), "out")
            for chunk in new:
                writer.write(chunk)
            writer.release()
        return span

    monkeypatch.setattr(_streams, "locate", locate)
    chunks, closed = await store.read_chunks(run.id, "out", start)
    assert raced and not closed
    whole = [first, *new][start:]
    assert [len(c) for c in chunks] == [len(c) for c in whole[: len(chunks)]]
    assert chunks == whole[: len(chunks)]
    assert await store.read_chunks(run.id, "out") == ([first, *new], False)
