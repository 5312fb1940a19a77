"""What a stream's readers see across a step's runs: a retry (a new attempt) and a crash re-run
of the same attempt both write new chunks after the earlier ones (no chunk twice, none taken
back), a closed stream stays closed, and a writer stops working when its step returns."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import wf
from wf.testing import TestEngine

attempts: list[int] = []
gate: dict[str, asyncio.Event] = {}
retried: list[bool] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    attempts.clear()
    gate.clear()
    retried.clear()


@wf.step(max_retries=3)
async def retried_writer() -> str:
    n = min(len(attempts), 1)  # the first attempt fails, every later call is the second
    attempts.append(n)
    async with wf.stream_writer() as out:
        retried.append(out.retried)  # whether an earlier attempt wrote: readers saw it
        await out.write(f"attempt {n}: starting\n")
        if n == 0:
            await out.write("attempt 0: partial\n")
            raise wf.RetryableError("transient", after=0.1)
        await out.write(f"attempt {n}: A\n")
        if n == 1 and "hang" in gate:
            await gate["hang"].wait()  # the process dies here, in the second attempt
        await out.write(f"attempt {n}: B\n")
    return "ok"


@wf.workflow
async def retried_flow() -> str:
    return await retried_writer()


async def _chunks(run: wf.Run[object], name: str | None = None) -> list[bytes]:
    return [c async for c in run.read_stream(name)]


async def test_a_retried_step_writes_new_chunks_after_the_failed_attempt(
    wf_engine: TestEngine,
) -> None:
    run = await wf.start(retried_flow)
    assert await run.result() == "ok"
    assert await _chunks(run) == [
        b"attempt 0: starting\n",
        b"attempt 0: partial\n",
        b"attempt 1: starting\n",
        b"attempt 1: A\n",
        b"attempt 1: B\n",
    ]
    assert retried == [False, True]


async def test_a_crash_in_a_retry_writes_the_rerun_after_what_readers_saw(
    wf_engine: TestEngine,
) -> None:
    gate["hang"] = asyncio.Event()
    run = await wf.start(retried_flow)
    while len(attempts) < 2:
        await asyncio.sleep(0.001)
    for _ in range(100):  # until the second attempt's "A" is written
        if len((await wf_engine.store.read_chunks(run.id, "default"))[0]) == 4:
            break
        await asyncio.sleep(0.001)
    await wf_engine.crash(run)
    del gate["hang"]
    await wf.Worker(wf_engine).run(until_idle=True)
    assert await run.result() == "ok"
    assert attempts == [0, 1, 1]  # the second attempt ran again after the crash
    assert retried == [False, True, True]
    assert await _chunks(run) == [
        b"attempt 0: starting\n",
        b"attempt 0: partial\n",
        b"attempt 1: starting\n",
        b"attempt 1: A\n",  # the crash cut attempt 1 off here; its re-run starts again
        b"attempt 1: starting\n",
        b"attempt 1: A\n",
        b"attempt 1: B\n",
    ]


answers: list[str] = []


@wf.step
async def answers_differently() -> str:
    """Writes an answer that differs from one run of the step to the next (a model's)."""
    answer = ["the first answer, cut off", "another answer"][len(answers)]
    answers.append(answer)
    async with wf.stream_writer() as out:
        retried.append(out.retried)
        if out.retried:
            await out.write("[starts again]\n")
        for word in answer.split(" "):
            await out.write(word + " ")
            if len(answers) == 1 and word == "first":
                await gate["hang"].wait()  # the process dies here
    return answer


@wf.workflow
async def answers_flow() -> str:
    return await answers_differently()


async def test_a_crash_rerun_that_writes_other_bytes_streams_them_whole_after_a_marker(
    wf_engine: TestEngine,
) -> None:
    answers.clear()
    gate["hang"] = asyncio.Event()
    run = await wf.start(answers_flow)
    for _ in range(1000):
        if len((await wf_engine.store.read_chunks(run.id, "default"))[0]) == 2:
            break
        await asyncio.sleep(0.001)
    await wf_engine.crash(run)
    await wf.Worker(wf_engine).run(until_idle=True)
    assert await run.result() == "another answer"
    assert retried == [False, True]  # a crash re-run is told, as a retry is
    assert b"".join(await _chunks(run)) == b"the first [starts again]\nanother answer "


@wf.step
async def dies_mid_write() -> str:
    attempts.append(len(attempts))
    async with wf.stream_writer() as out:
        if out.retried:
            await out.write("again\n")
        await out.write("a\n")
        if len(attempts) == 1:
            await gate["go"].wait()
        await out.write("b\n")
    return "ok"


@wf.workflow
async def dies_mid_write_flow() -> str:
    return await dies_mid_write()


async def _crashed_before_its_chunk_b(
    wf_engine: TestEngine, flow: wf.Workflow[[], str]
) -> wf.Run[str]:
    """Start ``flow`` (a step writing ``a``, waiting for the gate, writing ``b``), crash its
    driver once ``b`` is journaled but not written, then drive it again."""
    gate["go"] = asyncio.Event()
    run = await wf.start(flow)
    for _ in range(1000):
        if len((await wf_engine.store.read_chunks(run.id, "default"))[0]) == 1:
            break
        await asyncio.sleep(0.001)
    lease: Any = wf_engine._crashable.leases[run.id]
    wrote = lease.write_chunk
    dying = asyncio.Event()

    async def dies_before_the_chunk(stream: str, index: int, data: bytes) -> None:
        if data == b"b\n":
            dying.set()
            await asyncio.Event().wait()  # journaled, never written: the process dies here
        await wrote(stream, index, data)

    lease.write_chunk = dies_before_the_chunk
    gate["go"].set()
    async with asyncio.timeout(10):
        await dying.wait()
    await wf_engine.crash(run)
    await wf.Worker(wf_engine).run(until_idle=True)
    return run


async def test_a_chunk_journaled_but_never_written_before_a_crash_is_filled_by_the_next_write(
    wf_engine: TestEngine,
) -> None:
    run = await _crashed_before_its_chunk_b(wf_engine, dies_mid_write_flow)
    assert await run.result() == "ok"
    assert await _chunks(run) == [b"a\n", b"again\n", b"a\n", b"b\n"]


@wf.step(max_retries=2)
async def closes_then_fails() -> str:
    n = len(attempts)
    attempts.append(n)
    async with wf.stream_writer() as out:
        if n == 0:
            await out.write("attempt 0\n")
            await out.close()
            raise wf.RetryableError("upload failed after the stream was closed", after=0.1)
        await out.write(f"attempt {n}\n")
    return "ok"


@wf.workflow
async def closes_then_fails_flow() -> str:
    return await closes_then_fails()


async def test_a_stream_an_earlier_attempt_closed_stays_closed(wf_engine: TestEngine) -> None:
    run = await wf.start(closes_then_fails_flow)
    with pytest.raises(wf.RunFailed, match="UsageError: stream 'default' is closed"):
        await run.result()
    assert attempts == [0, 1]  # refused at once, not retried
    assert await _chunks(run) == [b"attempt 0\n"]


leaked: list[str] = []


@wf.step
async def leaks_a_writer() -> str:
    writer = wf.stream_writer("leak")
    await writer.__aenter__()
    await writer.write("in step\n")

    async def later() -> None:
        await gate["late"].wait()
        try:
            await writer.write("after the step returned\n")
            leaked.append("wrote")
        except wf.UsageError as exc:
            leaked.append(str(exc))
        gate["done"].set()

    asyncio.get_running_loop().create_task(later())
    return "done"


@wf.step
async def writes_after(name: str) -> None:
    async with wf.stream_writer(name) as out:  # the leaked writer does not hold the stream
        await out.write("next step\n")


@wf.workflow
async def leaky_flow() -> str:
    result = await leaks_a_writer()
    await writes_after("leak")
    return result


async def test_a_writer_used_after_its_step_returned_is_refused(wf_engine: TestEngine) -> None:
    leaked.clear()
    gate["late"], gate["done"] = asyncio.Event(), asyncio.Event()
    run = await wf.start(leaky_flow)
    assert await asyncio.wait_for(run.result(), 10) == "done"  # bounded: a held stream hangs
    gate["late"].set()
    await asyncio.wait_for(gate["done"].wait(), 5)
    assert len(leaked) == 1 and "has returned" in leaked[0]
    assert await _chunks(run, "leak") == [b"in step\n", b"next step\n"]


@wf.step
async def fails_the_first_run() -> str:
    n = len(attempts)
    attempts.append(n)
    async with wf.stream_writer() as out:
        await out.write(f"run attempt {n}\n")
        if n == 0:
            raise wf.FatalError("fails for good, until retried by hand")
    return "ok"


@wf.workflow
async def retried_by_hand() -> str:
    return await fails_the_first_run()


async def test_a_run_retried_by_hand_writes_new_chunks_too(wf_engine: TestEngine) -> None:
    run = await wf.start(retried_by_hand)
    with pytest.raises(wf.RunFailed):
        await run.result()
    await run.retry()
    await wf.Worker(wf_engine).run(until_idle=True)
    assert await run.result() == "ok"
    assert await _chunks(run) == [b"run attempt 0\n", b"run attempt 1\n"]


@wf.step(max_retries=0)
async def cut_writer(close: bool) -> None:
    async with wf.stream_writer() as out:
        await out.write("Half an")
        if close:
            await out.close()
        raise wf.FatalError("the provider hung up")


@wf.step
async def whole_writer() -> None:
    async with wf.stream_writer() as out:
        await out.write("A whole answer.\n")  # left open: the run's end closes it


@wf.workflow
async def cut_flow(where: str) -> None:
    if where == "after":
        await whole_writer()
        raise wf.FatalError("a later step failed")
    await cut_writer(where == "closed")


async def test_a_stream_whose_writer_was_cut_off_ends_with_stream_incomplete(
    wf_engine: TestEngine,
) -> None:
    run = await wf.start(cut_flow, "cut")
    with pytest.raises(wf.RunFailed):
        await run.result()
    chunks: list[bytes] = []
    with pytest.raises(wf.StreamIncomplete) as cut:
        async for chunk in run.read_stream():
            chunks.append(chunk)
    assert chunks == [b"Half an"]  # every chunk first, then the error
    assert (cut.value.run_id, cut.value.name) == (run.id, "default")
    assert cut.value.step.endswith("cut_writer")
    assert "is incomplete" in str(cut.value)


@pytest.mark.parametrize("where", ["closed", "after"])
async def test_a_stream_its_writer_closed_or_finished_is_complete_whatever_the_run_did(
    wf_engine: TestEngine, where: str
) -> None:
    run = await wf.start(cut_flow, where)
    with pytest.raises(wf.RunFailed):
        await run.result()
    assert b"".join(await _chunks(run)) in (b"Half an", b"A whole answer.\n")


@wf.step
async def dies_mid_write_then_closes() -> str:
    attempts.append(len(attempts))
    async with wf.stream_writer() as out:
        if out.retried:
            await out.close()  # the re-run has nothing more to say
            return "closed"
        await out.write("a\n")
        await gate["go"].wait()
        await out.write("b\n")
    return "ok"


@wf.workflow
async def dies_mid_write_then_closes_flow() -> str:
    return await dies_mid_write_then_closes()


async def test_a_gap_no_later_write_fills_ends_the_stream_at_its_last_stored_chunk(
    wf_engine: TestEngine,
) -> None:
    run = await _crashed_before_its_chunk_b(wf_engine, dies_mid_write_then_closes_flow)
    assert await run.result() == "closed"
    async with asyncio.timeout(5):  # the reader ends: no chunk it waits for that never comes
        assert await _chunks(run) == [b"a\n"]
    assert (await wf_engine.store.list_streams(run.id))["default"] == (1, True)
