"""The local store's reads of big byte streams: a batch at a time, off the event loop."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

from tests.store.helpers import acquire, created
from wf.store.local import LocalStore

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
