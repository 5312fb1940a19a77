"""A stream whose files are damaged, met by a step that writes to it after the run woke or was
recovered: the step's chunks are stored after the earlier ones, or the step fails loudly as
damage does; never are its chunks dropped with the run completed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import wf
from wf.store import Store
from wf.store.local import LocalStore
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


async def _wake_after(engine: TestEngine, store: Store, how: str) -> tuple[str, bytes]:
    run = await wf.start(sleeps_between)
    await engine.quiet()  # suspended in its sleep, a's chunks stored
    _damage(store, run.id, how)
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
