"""Hooks, byte streams and child runs, in-process (cross-process tests live in tests/cli)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import pydantic
import pytest

import wf
from wf import Engine
from wf.testing import MockClock, TestEngine


@dataclasses.dataclass
class Approval:
    approved: bool
    by: str


seen: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()


@wf.step
def record(text: str) -> None:
    seen.append(text)


@wf.workflow
async def approval_flow(order: str) -> str:
    hook = wf.create_hook(Approval, token=f"approve:{order}")
    await record("asked")
    decision = await hook.next()
    await record(f"decided by {decision.by}")
    return "approved" if decision.approved else "rejected"


async def wait_status(run: wf.Run[object], status: wf.RunStatus) -> None:
    for _ in range(2000):
        if await run.status() == status:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"run never became {status}")


async def test_a_hook_suspends_the_run_and_a_payload_resumes_it(wf_engine: Engine) -> None:
    run = await wf.start(approval_flow, "o-1")
    await wait_status(run, wf.RunStatus.SUSPENDED)
    record_ = await run.record()
    assert record_.waiting_for == [{"kind": "hook", "target": "approve:o-1", "until": None}]
    assert [h.token for h in await wf_engine.store.list_hooks(run.id)] == ["approve:o-1"]
    owner = await wf.resume_hook("approve:o-1", {"approved": True, "by": "ada"})
    assert owner == run
    assert await run.result() == "approved"
    assert seen == ["asked", "decided by ada"]  # "asked" ran once despite the replay
    assert await wf_engine.store.list_hooks() == []  # the token is free once the run ended


@wf.workflow
async def two_answers() -> list[str]:
    hook = wf.create_hook(str, token="answers")
    first = await hook.next()
    await wf.sleep(3600)  # a timer not due yet: settled
    return [first, await hook.next()]


async def test_settle_waits_until_the_run_has_taken_a_payload_in(
    wf_engine: Engine, mock_clock: wf.testing.MockClock
) -> None:
    run = await wf.start(two_answers)
    settled = await run.settle(timeout=10)
    assert settled.status is wf.RunStatus.SUSPENDED
    assert [(w["kind"], w["target"]) for w in settled.waiting_for or ()] == [("hook", "answers")]
    await wf.resume_hook("answers", "yes")
    settled = await run.settle(timeout=10)  # took "yes" in, now sleeps: nothing due
    assert settled.status is wf.RunStatus.SUSPENDED and settled.wake_at is not None
    assert [w["kind"] for w in settled.waiting_for or ()] == ["sleep"]
    await wf.resume_hook("answers", "again")  # a message in its inbox: due, driven here
    mock_clock.jump(3600)
    assert (await run.settle(timeout=10)).status is wf.RunStatus.COMPLETED
    assert await run.result() == ["yes", "again"]


async def test_an_invalid_payload_is_refused_to_the_sender(wf_engine: Engine) -> None:
    run = await wf.start(approval_flow, "o-2")
    await wait_status(run, wf.RunStatus.SUSPENDED)
    with pytest.raises(wf.HookError, match="approved"):
        await wf.resume_hook("approve:o-2", {"approved": "maybe?", "by": 3})
    assert await run.status() == wf.RunStatus.SUSPENDED
    assert await wf_engine.store.read_inbox(run.id) == []


async def test_an_unknown_token_is_a_clear_error(wf_engine: Engine) -> None:
    with pytest.raises(wf.HookError, match="no live hook"):
        await wf.resume_hook("nobody", {})


@wf.workflow
async def collector(count: int) -> list[int]:
    hook = wf.create_hook(int)
    await record(hook.token)
    received: list[int] = []
    async for value in hook:
        received.append(value)
        if len(received) == count:
            break
    return received


async def test_many_payloads_arrive_in_order_and_generated_tokens_are_unguessable(
    wf_engine: Engine,
) -> None:
    run = await wf.start(collector, 5)
    await wait_status(run, wf.RunStatus.SUSPENDED)
    token = seen[0]
    assert len(token) >= 22  # 24 random bytes, url-safe base64 (192 bits)
    for value in range(5):
        await wf.resume_hook(token, value)
    assert await run.result() == [0, 1, 2, 3, 4]


@wf.workflow
async def claims(token: str) -> str | None:
    hook = wf.create_hook(str, token=token)
    conflict = await hook.get_conflict()
    if conflict is not None:
        return conflict.id
    return await hook.next()


async def test_a_token_belongs_to_one_live_run_and_is_free_again_after(
    wf_engine: Engine,
) -> None:
    first = await wf.start(claims, "shared")
    await wait_status(first, wf.RunStatus.SUSPENDED)
    second = await wf.start(claims, "shared")
    assert await second.result() == first.id
    await wf.resume_hook("shared", "hello")
    assert await first.result() == "hello"
    third = await wf.start(claims, "shared")
    await wait_status(third, wf.RunStatus.SUSPENDED)
    await wf.resume_hook("shared", "again")
    assert await third.result() == "again"


@wf.workflow
async def disposes() -> str:
    async with wf.create_hook(str, token="temp") as hook:
        await hook.get_conflict()
    return "done"


async def test_dispose_releases_the_token(wf_engine: Engine) -> None:
    run = await wf.start(disposes)
    assert await run.result() == "done"
    with pytest.raises(wf.HookError):
        await wf.resume_hook("temp", "late")


@wf.step
async def report(lines: int) -> int:
    async with wf.stream_writer() as out:
        for i in range(lines):
            await out.write(f"line {i}\n")
        await out.close()
    async with wf.stream_writer("log") as log:
        await log.write(b"\x00\x01")
    return lines


@wf.step
def sync_report() -> None:
    with wf.stream_writer("sync") as out:
        out.write("from a thread")


@wf.workflow
async def reporting() -> int:
    count = await report(3)
    await sync_report()
    await wf.sleep(86400)  # replay must not write the chunks again
    return count


async def test_streams_are_written_by_steps_and_read_from_outside(wf_engine: Engine) -> None:
    run = await wf.start(reporting)
    assert await run.result() == 3
    chunks = [c async for c in run.read_stream()]
    assert chunks == [b"line 0\n", b"line 1\n", b"line 2\n"]
    assert [c async for c in run.read_stream(start=-1)] == [b"line 2\n"]
    assert [c async for c in run.read_stream("log")] == [b"\x00\x01"]
    assert [c async for c in run.read_stream("sync")] == [b"from a thread"]
    streams = await wf_engine.store.list_streams(run.id)
    assert streams == {"default": (3, True), "log": (1, True), "sync": (1, True)}


@wf.step
async def slow_report() -> None:
    async with wf.stream_writer() as out:
        for i in range(3):
            await out.write(str(i))
            await asyncio.sleep(0.01)


@wf.workflow
async def slow_reporting() -> None:
    await slow_report()


async def test_a_reader_follows_a_stream_live(wf_engine: Engine) -> None:
    run = await wf.start(slow_reporting)
    chunks = [c async for c in run.read_stream()]
    assert chunks == [b"0", b"1", b"2"]


@wf.step
async def answer(text: str) -> None:
    async with wf.stream_writer() as out:
        await out.write(text)


@wf.workflow
async def answers_once_approved() -> str:
    hook = wf.create_hook(str, token="go-ahead")
    text = await hook.next()
    await answer(text)
    return text


async def test_a_reader_waits_for_a_stream_a_suspended_run_opens_once_it_resumes(
    wf_engine: Engine,
) -> None:
    run = await wf.start(answers_once_approved)
    await wait_status(run, wf.RunStatus.SUSPENDED)
    reader = asyncio.ensure_future(_collect(run.read_stream()))
    await asyncio.sleep(0.05)  # a few looks at the store: the stream is not open yet
    assert not reader.done()  # waiting, where it used to raise StreamNotFound
    await wf.resume_hook("go-ahead", "hello")
    assert await run.result() == "hello"  # driven on (here by the wait for its result)
    assert await asyncio.wait_for(reader, 30) == [b"hello"]
    with pytest.raises(wf.StreamNotFound):  # ended without it: no wait
        await _collect(run.read_stream("never"))


async def _collect(chunks: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in chunks]


async def test_reading_a_stream_the_run_never_created_names_its_streams(
    wf_engine: Engine,
) -> None:
    run = await wf.start(reporting)
    assert await run.result() == 3
    with pytest.raises(wf.StreamNotFound) as caught:
        _ = [c async for c in run.read_stream("typo")]
    assert str(caught.value) == (
        f"run {run.id} has no stream 'typo' (its streams: 'default', 'log', 'sync')"
    )
    assert caught.value.streams == ["default", "log", "sync"]


@wf.step
async def opens_quietly() -> None:
    async with wf.stream_writer("quiet"):
        pass  # nothing to say this time


@wf.workflow
async def quiet() -> str:
    await opens_quietly()
    return "done"


async def test_a_stream_opened_but_never_written_ends_with_its_run_closed_and_empty(
    wf_engine: Engine,
) -> None:
    """Its run's end used to fail on it (``max()`` of no index): the run never ended."""
    run = await wf.start(quiet)
    assert await run.result() == "done"
    assert (await run.status()) is wf.RunStatus.COMPLETED
    assert [c async for c in run.read_stream("quiet")] == []


def test_stream_writer_outside_a_step_is_an_error() -> None:
    with pytest.raises(wf.UsageError, match="inside a step"):
        wf.stream_writer()


@wf.step
def sync_write_without_with(close: bool) -> str:
    out = wf.stream_writer("bare")
    try:
        if close:
            out.close()
        else:
            out.write("lost?")  # type: ignore[unused-coroutine]
    except wf.UsageError as exc:
        return str(exc)
    return "no error"


@wf.workflow
async def writes_bare() -> list[str]:
    return [await sync_write_without_with(False), await sync_write_without_with(True)]


async def test_a_sync_step_writing_without_with_is_told_how_not_silently_dropped(
    wf_engine: Engine,
) -> None:
    """Without ``with``, the writer's ``write`` in a sync step was a coroutine never awaited:
    the step completed and the chunk vanished. Now it raises, saying how to write there."""
    run = await wf.start(writes_bare)
    said = await run.result()
    for text, call in zip(said, ("write()", "close()"), strict=True):
        assert "in a sync step, write inside `with wf.stream_writer() as out:`" in text
        assert f"`{call}` on the writer itself is for async steps" in text


@wf.workflow
async def child_flow(n: int) -> int:
    await record(f"child {n}")
    await wf.sleep(3600 * n)
    return n * 10


@wf.workflow
async def parent_flow() -> list[int]:
    children = [await wf.start(child_flow, n) for n in (1, 2)]
    await record("children started")
    return [await child.result() for child in children]


async def test_a_parent_waits_durably_for_its_children(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    run = await wf.start(parent_flow)
    assert await run.result() == [10, 20]
    assert sorted(seen) == ["child 1", "child 2", "children started"]
    children = await wf_engine.store.list_runs(parent_id=run.id)
    assert sorted(c.id for c in children) == [f"{run.id}.0", f"{run.id}.1"]
    assert all(c.root_id == run.id for c in children)
    journal = await wf_engine.store.read_journal(run.id)
    assert [e["type"] for e in journal].count("child_finished") == 2


@wf.workflow
async def inline_parent() -> int:
    return await child_flow(0) + 1  # a direct call runs the child's steps in this run


async def test_calling_a_workflow_directly_runs_it_inline(wf_engine: Engine) -> None:
    run = await wf.start(inline_parent)
    assert await run.result() == 1
    assert await wf_engine.store.list_runs(parent_id=run.id) == []


gate: dict[str, asyncio.Event] = {}


@wf.step
async def writes_then_hangs() -> str:
    async with wf.stream_writer() as out:
        await out.write("header\n")
    async with wf.stream_writer() as out:  # a second writer in the same step
        await out.write("body\n")
    seen.append("wrote")
    if len(seen) == 1:
        await gate["forever"].wait()  # the first attempt's process dies here
    return "done"


@wf.workflow
async def interrupted_writer() -> str:
    return await writes_then_hangs()


async def test_a_step_rerun_after_a_crash_writes_after_the_chunks_readers_saw(
    wf_engine: TestEngine,
) -> None:
    gate["forever"] = asyncio.Event()
    run = await wf.start(interrupted_writer)
    while seen != ["wrote"]:
        await asyncio.sleep(0.001)
    await wf_engine.crash(run)  # the driver dies mid-step, after its writes
    await wf.Worker(wf_engine).run(until_idle=True)
    assert await run.result() == "done"
    assert seen == ["wrote", "wrote"]  # the step did run twice (at least once)...
    chunks = [c async for c in run.read_stream()]  # ...and its chunks are kept, then new ones
    assert chunks == [b"header\n", b"body\n", b"header\n", b"body\n"]


async def test_a_sender_that_cannot_import_the_payload_type_checks_the_recorded_schema(
    wf_engine: Engine,
) -> None:
    run = await wf.start(approval_flow, "o-9")
    await wait_status(run, wf.RunStatus.SUSPENDED)
    hook = await wf_engine.store.get_hook("approve:o-9")
    assert hook is not None and hook.schema is not None
    # As seen from a process that cannot import this test module (another directory, the CLI):
    elsewhere = dataclasses.replace(
        hook, schema={**hook.schema, "type": "not_importable_here:Approval"}
    )
    await wf_engine.store.release_hook(hook.token, hook.run_id)
    assert await wf_engine.store.register_hook(elsewhere) is None
    with pytest.raises(wf.HookError, match="invalid at approved"):
        await wf.resume_hook("approve:o-9", {"approved": "maybe?", "by": "x"})
    await wf.resume_hook("approve:o-9", {"approved": True, "by": "grace"})
    assert await run.result() == "approved"


async def test_a_sender_never_imports_the_module_a_stored_payload_type_names(
    wf_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorded payload type is data: a module planted where the sender runs (the CLI's
    directory) must not be imported; the recorded schema checks the payload instead."""
    planted = tmp_path / "planted_wf_hook_types.py"
    planted.write_text("import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run = await wf.start(approval_flow, "o-10")
    await wait_status(run, wf.RunStatus.SUSPENDED)
    hook = await wf_engine.store.get_hook("approve:o-10")
    assert hook is not None and hook.schema is not None
    planted_ref = dataclasses.replace(
        hook, schema={**hook.schema, "type": "planted_wf_hook_types:Approval"}
    )
    await wf_engine.store.release_hook(hook.token, hook.run_id)
    assert await wf_engine.store.register_hook(planted_ref) is None
    with pytest.raises(wf.HookError, match="invalid at approved"):
        await wf.resume_hook("approve:o-10", {"approved": "maybe?", "by": "x"})
    await wf.resume_hook("approve:o-10", {"approved": True, "by": "grace"})
    assert await run.result() == "approved"
    assert not planted.with_suffix(".ran").exists()


@wf.workflow
async def waits_on_a_long_child() -> int:
    child = await wf.start(child_flow, 48)
    return await child.result()


async def test_cancelling_a_parent_and_its_child_cancels_both(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    parent = await wf.start(waits_on_a_long_child)
    await wait_status(parent, wf.RunStatus.SUSPENDED)
    (child,) = await wf_engine.store.list_runs(parent_id=parent.id)
    child_run = wf.get_run(child.id)
    await wait_status(child_run, wf.RunStatus.SUSPENDED)
    await child_run.cancel(wait=True)  # the child ends first: its RunCancelled reaches the parent
    await parent.cancel(wait=True)
    assert await child_run.status() == wf.RunStatus.CANCELLED
    assert await parent.status() == wf.RunStatus.CANCELLED


@wf.workflow
async def dispose_then_wait() -> list[str]:
    first = wf.create_hook(str, token="first")
    answers = [await first.next()]
    first.dispose()  # recorded: a replay must meet it again, not take it for new code
    answers.append(await wf.create_hook(str, token="second").next())
    return answers


async def test_a_run_that_disposed_a_hook_replays(wf_engine: Engine) -> None:
    run = await wf.start(dispose_then_wait)
    await wait_status(run, wf.RunStatus.SUSPENDED)
    await wf.resume_hook("first", "a")
    await run.settle(timeout=10)
    await wf.resume_hook("second", "b")  # resumes the run from the top: a replay
    assert await run.result(timeout=10) == ["a", "b"]


@wf.workflow
async def slow_part(x: int) -> int:
    await wf.sleep(3600)
    return x


@wf.workflow(max_attempts=1)
async def bad_part() -> int:
    raise wf.FatalError("no such part")


@wf.workflow(max_attempts=1)
async def two_parts() -> int:
    slow = await wf.start(slow_part, 7)
    bad = await wf.start(bad_part)
    return await bad.result() + await slow.result()


async def test_a_child_runs_on_when_its_parent_fails(wf_engine: Engine) -> None:
    """docs/guide.md, "Child runs": a child's life is its own (a retry of the parent would
    await it again); only ``cancel --children`` stops a tree."""
    run = await wf.start(two_parts)
    with pytest.raises(wf.RunFailed, match="no such part"):
        await run.result()
    slow = wf.get_run(f"{run.id}.0")
    assert await slow.result() == 7  # the clock jumps the hour: the child ended on its own


@wf.step
async def hands_out(token: str) -> str:
    # The receiver of the token answers before the step returns (a payment provider calling
    # the callback URL from inside its API call).
    await wf.resume_hook(token, 42)
    return "handed out"


@wf.workflow
async def early_answer(token: str) -> list[object]:
    hook = wf.create_hook(int, token=token)
    handed = await hands_out(hook.token)
    return [handed, await hook.next()]


async def test_a_payload_sent_before_next_is_taken(wf_engine: Engine) -> None:
    run = await wf.start(early_answer, "early-1")
    assert await asyncio.wait_for(run.result(), 10) == ["handed out", 42]
    assert await wf_engine.store.list_hooks(run.id) == []  # released with the run's end


engines: dict[str, Engine] = {}


@wf.step
async def webhook_seen(token: str) -> object:
    hook = await engines["current"].store.get_hook(token)
    return None if hook is None else hook.schema.get("webhook", {}).get("method")


@wf.workflow
async def early_webhook() -> object:
    hook = wf.create_webhook(dict, method="PUT", respond=200)
    return await webhook_seen(hook.token)


async def test_a_webhook_is_live_with_its_settings_before_the_next_step_runs(
    wf_engine: Engine,
) -> None:
    engines["current"] = wf_engine
    run = await wf.start(early_webhook)
    assert await asyncio.wait_for(run.result(), 10) == "PUT"


@dataclasses.dataclass
class When:
    at: datetime.datetime
    n: int = 0


@wf.workflow
async def when_flow(token: str) -> str:
    hook = wf.create_hook(When, token=token)
    when = await hook.next()
    return f"{when.at.isoformat()} {when.n}"


async def _as_seen_elsewhere(engine: Engine, token: str, json_schema: object) -> None:
    """Make the hook's record look as it does to a process that cannot import its type."""
    hook = await engine.store.get_hook(token)
    assert hook is not None and hook.schema is not None
    schema = {**hook.schema, "type": "not_importable_here:When", "json": json_schema}
    await engine.store.release_hook(hook.token, hook.run_id)
    assert await engine.store.register_hook(dataclasses.replace(hook, schema=schema)) is None


async def test_the_recorded_schema_check_checks_formats_as_pydantic_does(
    wf_engine: Engine,
) -> None:
    run = await wf.start(when_flow, "when-1")
    await wait_status(run, wf.RunStatus.SUSPENDED)
    hook = await wf_engine.store.get_hook("when-1")
    assert hook is not None and hook.schema is not None
    await _as_seen_elsewhere(wf_engine, "when-1", hook.schema["json"])
    with pytest.raises(wf.HookError, match="invalid at at: 'not a date' is not a 'date-time'"):
        await wf.resume_hook("when-1", {"at": "not a date"})
    await wf.resume_hook("when-1", {"at": "2026-01-01T00:00:00"})  # no offset: pydantic takes it
    assert await run.result() == "2026-01-01T00:00:00 0"


async def test_a_payload_the_run_refuses_is_journaled_and_logged(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    run = await wf.start(when_flow, "when-2")
    await wait_status(run, wf.RunStatus.SUSPENDED)
    await _as_seen_elsewhere(wf_engine, "when-2", None)  # a sender with nothing to check
    with caplog.at_level("WARNING", logger="wf"):
        await wf.resume_hook("when-2", {"at": "not a date"})  # accepted by the sender...
        settled = await run.settle(timeout=10)  # ...taken in and refused: the run waits on
    assert settled.status is wf.RunStatus.SUSPENDED
    journal = await wf_engine.store.read_journal(run.id)
    refused = [e for e in journal if e["type"] == "hook_payload_refused"]
    assert len(refused) == 1, [e["type"] for e in journal]
    assert refused[0]["token"] == "when-2" and refused[0]["index"] == 0
    assert "at" in refused[0]["error"]
    assert any(run.id in r.getMessage() and "when-2" in r.getMessage() for r in caplog.records)
    await wf.resume_hook("when-2", {"at": "2026-01-01T00:00:00+00:00", "n": 3})
    assert await run.result() == "2026-01-01T00:00:00+00:00 3"
    journal = await wf_engine.store.read_journal(run.id)
    assert sum(e["type"] == "hook_payload_refused" for e in journal) == 1  # not again on replay


@wf.workflow
async def sleeps_before_waiting(token: str) -> int:
    hook = wf.create_hook(int, token=token)
    await wf.sleep(3600)
    return await hook.next()


async def test_a_hook_is_live_while_its_run_sleeps_before_next(
    wf_engine: Engine, mock_clock: wf.testing.MockClock
) -> None:
    run = await wf.start(sleeps_before_waiting, "sleepy-1")
    assert (await run.settle(timeout=10)).status is wf.RunStatus.SUSPENDED
    await wf.resume_hook("sleepy-1", 7)  # during the sleep: kept for next()
    mock_clock.jump(3600)
    assert await asyncio.wait_for(run.result(), 10) == 7


@wf.step(max_retries=0)
async def answer_parent(token: str) -> str:
    await wf.resume_hook(token, 11)  # no retry: refused if the parent's hook is not live yet
    return "sent"


@wf.workflow
async def calls_back(token: str) -> str:
    return await answer_parent(token)


@wf.workflow
async def hook_then_child(token: str) -> int:
    hook = wf.create_hook(int, token=token)
    # No step in between: the child is the outside world, and may call back at once.
    child = await wf.start(calls_back, token)
    assert await child.result() == "sent"
    return await hook.next()


async def test_a_hook_is_live_before_a_child_started_right_after_it_runs(
    wf_engine: Engine,
) -> None:
    run = await wf.start(hook_then_child, "from-child-1")
    assert await asyncio.wait_for(run.result(), 10) == 11


@wf.workflow
async def waits_for_its_hook() -> int:
    return await wf.create_hook(int, token="kid-hook").next()


PARENT_GATE: list[asyncio.Event] = []


@wf.step
async def parent_busy() -> int:
    seen.append("parent busy")
    await PARENT_GATE[0].wait()
    return 1


@wf.workflow
async def busy_while_child_runs() -> int:
    child = await wf.start(waits_for_its_hook)
    busy, result = await asyncio.gather(parent_busy(), child.result())
    return busy + result


async def test_a_child_told_twice_at_once_is_recorded_once(wf_engine: TestEngine) -> None:
    """Two applies of a parent's inbox at once (its poller and a child's driver), each with a
    message about the same child: the parent recorded ``child_finished`` twice, as the first
    was in flight when the second checked."""
    from wf.engine._codec import encode
    from wf.engine._inbox import apply_messages
    from wf.store import InboxMessage

    PARENT_GATE[:] = [asyncio.Event()]
    parent = await wf.start(busy_while_child_runs)
    async with asyncio.timeout(10):
        while "parent busy" not in seen:
            await asyncio.sleep(0.001)
    (child,) = await wf_engine.store.list_runs(parent_id=parent.id)
    told = {"child": child.id, "workflow": child.workflow, "status": "completed"}
    told |= {"output": encode(41), "error": None, "at": None}
    # The messages as posted: not read back from the inbox, where the parent's own poller may
    # have applied them already (a post waits for its flushes, and the loop runs meanwhile).
    first, second = [
        InboxMessage(await wf_engine.store.post(parent.id, "child_done", told), "child_done", told)
        for _ in range(2)
    ]
    ctx = wf_engine.live[parent.id]
    await asyncio.gather(
        apply_messages(ctx, [first], live=True), apply_messages(ctx, [second], live=True)
    )
    PARENT_GATE[0].set()
    assert await parent.result(timeout=10) == 42
    journal = await wf_engine.store.read_journal(parent.id)
    assert [e["type"] for e in journal].count("child_finished") == 1
    await wf.get_run(child.id).cancel()


@wf.workflow
async def shared_kid(tag: str) -> str:
    return await wf.create_hook(str, token=f"kid:{tag}").next()


@wf.workflow
async def awaits_shared_kid(kid_id: str) -> str:
    kid = await wf.start(shared_kid, kid_id, run_id=kid_id)
    return await kid.result()


async def test_a_second_parent_of_a_running_child_is_told_its_outcome(
    wf_engine: Engine,
) -> None:
    """docs/guide.md, "Child runs": ``wf.start`` with the id of a run that exists (same
    workflow, same input) hands that run back. A second parent awaiting it was never told
    its outcome (only its first parent was) and stayed suspended."""
    first = await wf.start(awaits_shared_kid, "shared-1")
    await wait_status(first, wf.RunStatus.SUSPENDED)
    await wait_status(wf.get_run("shared-1"), wf.RunStatus.SUSPENDED)  # its hook is live
    second = await wf.start(awaits_shared_kid, "shared-1")
    await wait_status(second, wf.RunStatus.SUSPENDED)
    await wf.resume_hook("kid:shared-1", "done")
    assert await first.result(timeout=10) == "done"
    assert await second.result(timeout=10) == "done"
    assert (await wf.get_run("shared-1").record()).parent_id == first.id


async def test_a_parent_adopting_an_ended_child_takes_its_outcome_at_once(
    wf_engine: Engine,
) -> None:
    first = await wf.start(awaits_shared_kid, "shared-2")
    await wait_status(first, wf.RunStatus.SUSPENDED)
    await wait_status(wf.get_run("shared-2"), wf.RunStatus.SUSPENDED)  # its hook is live
    await wf.resume_hook("kid:shared-2", "early")
    assert await first.result(timeout=10) == "early"
    second = await wf.start(awaits_shared_kid, "shared-2")
    assert await second.result(timeout=10) == "early"


async def test_a_parent_awaiting_a_run_started_from_outside_is_told_its_outcome(
    wf_engine: Engine,
) -> None:
    outside = await wf.start(shared_kid, "shared-3", run_id="shared-3")
    await wait_status(outside, wf.RunStatus.SUSPENDED)
    parent = await wf.start(awaits_shared_kid, "shared-3")
    await wait_status(parent, wf.RunStatus.SUSPENDED)
    await wf.resume_hook("kid:shared-3", "from outside")
    assert await outside.result(timeout=10) == "from outside"
    assert await parent.result(timeout=10) == "from outside"
    journal = await wf_engine.store.read_journal("shared-3")
    assert [e["parent"] for e in journal if e["type"] == "child_waiter"] == [parent.id]


@wf.workflow
async def nested(depth: int) -> int:
    if depth == 0:
        return await wf.create_hook(int, token="nested-leaf").next()
    child = await wf.start(nested, depth - 1)
    return await child.result() + 1


async def test_a_chain_of_nested_children_resumes_each_parent_at_once(
    wf_engine: Engine,
) -> None:
    """While ``result()`` of a family's root waits here, a child that ended drives its
    suspended parent at once: each level waited for that wait's next look at the family
    (every 2 s), 20 s for ten levels under ``wf run``."""
    root = await wf.start(nested, 3)
    leaf = wf.get_run(f"{root.id}.0.0.0")
    async with asyncio.timeout(10):
        while not await wf_engine.store.list_hooks(leaf.id):
            await asyncio.sleep(0.001)
    loop = asyncio.get_running_loop()
    began = loop.time()
    result = asyncio.ensure_future(root.result(timeout=10))
    await wf.resume_hook("nested-leaf", 39)
    assert await result == 42
    assert loop.time() - began < 3.0  # each of the three parents, at once (was >= 2 s each)


@wf.workflow(max_attempts=1)
async def recreates_in_a_loop() -> list[str]:
    got = []
    for _ in range(2):
        hook = wf.create_hook(str, token="again")  # never disposed: the token is still live
        got.append(await hook.next())
    return got


async def test_creating_a_hook_whose_token_the_run_holds_is_an_error(wf_engine: Engine) -> None:
    run = await wf.start(recreates_in_a_loop)
    await wait_status(run, wf.RunStatus.SUSPENDED)
    await wf.resume_hook("again", "one")
    with pytest.raises(wf.RunFailed, match="dispose") as caught:
        await run.result(timeout=10)  # not suspended for ever on a hook nobody can reach
    assert caught.value.error_type.endswith("HookError")
    assert "'again'" in caught.value.message
    assert await wf_engine.store.list_hooks() == []


@wf.workflow
async def recreates_after_dispose() -> list[str]:
    first = wf.create_hook(str, token="again")
    got = [await first.next()]
    try:
        wf.create_hook(str, token="again")
    except wf.HookError as exc:  # raised again, at the same place, on every replay
        got.append(f"refused: {'still held' in str(exc)}")
    first.dispose()
    second = wf.create_hook(str, token="again")  # disposed: the token is the run's to take again
    got.append(await second.next())
    return got


async def test_a_token_disposed_may_be_taken_again_by_the_same_run(wf_engine: Engine) -> None:
    run = await wf.start(recreates_after_dispose)
    await wait_status(run, wf.RunStatus.SUSPENDED)
    await wf.resume_hook("again", "one")
    await run.settle(timeout=10)
    assert await run.status() == wf.RunStatus.SUSPENDED
    [live] = await wf_engine.store.list_hooks(run.id)
    assert live.token == "again"
    await wf.resume_hook("again", "two")  # resumes the run from the top: a replay
    assert await run.result(timeout=10) == ["one", "refused: True", "two"]


class PlainPayload:
    """A plain class: pydantic cannot validate a payload into it, and wf cannot store one."""

    def __init__(self, a: int) -> None:
        self.a = a


@wf.workflow
async def waits_for_a_plain_class() -> str:
    hook = wf.create_hook(PlainPayload, token="plain")
    return repr(await hook.next())


async def test_a_hook_no_payload_can_ever_fit_is_refused_at_create_hook(
    wf_engine: Engine,
) -> None:
    run = await wf.start(waits_for_a_plain_class)
    with pytest.raises(wf.RunFailed, match="PlainPayload") as caught:
        await run.result(timeout=10)  # not suspended on a hook no payload can reach
    assert caught.value.error_type.endswith("UsageError")
    assert "dataclass" in caught.value.message
    assert await wf_engine.store.list_hooks() == []


class Colour(enum.Enum):
    RED = "red"


class IntCode(enum.IntEnum):
    ONE = 1


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Pair(NamedTuple):
    a: int
    b: str


class Order(pydantic.BaseModel):
    id: int


@dataclasses.dataclass
class Tree:
    """A type that holds itself: looked into once, not for ever."""

    value: int
    children: list[Tree]


@dataclasses.dataclass
class Blob:
    data: bytearray
    at: datetime.datetime


_CODEC_PAYLOADS: list[tuple[Any, Any]] = [
    (bytearray, bytearray(b"abc")),
    (bytes, b"abc"),
    (datetime.datetime, datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC)),
    (datetime.date, datetime.date(2026, 1, 2)),
    (datetime.timedelta, datetime.timedelta(seconds=5)),
    (decimal.Decimal, decimal.Decimal("1.10")),
    (uuid.UUID, uuid.UUID(int=7)),
    (set[int], {1, 2}),
    (frozenset[str], frozenset({"a"})),
    (tuple[int, str], (1, "a")),
    (Colour, Colour.RED),
    (IntCode, IntCode.ONE),
    (Point, Point(1, 2)),
    (Pair, Pair(1, "b")),
    (Order, Order(id=3)),
    (list[bytearray], [bytearray(b"x")]),
    (dict[str, bytearray], {"k": bytearray(b"y")}),
    (bytearray | None, None),
    (Tree, Tree(1, [Tree(2, [])])),
    (Blob, Blob(bytearray(b"z"), datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))),
]


@wf.step
async def send_payload(token: str, payload: Any) -> None:
    await wf.resume_hook(token, payload)


@wf.workflow
async def waits_for_a_codec_type(index: int) -> str:
    kind, payload = _CODEC_PAYLOADS[index]
    hook = wf.create_hook(kind, token=f"codec-{index}")
    await send_payload(f"codec-{index}", payload)
    got = await hook.next()
    await wf.sleep(60)  # suspends: the payload comes back from a replay too
    return repr(got)


@pytest.mark.parametrize(
    "index", range(len(_CODEC_PAYLOADS)), ids=lambda i: repr(_CODEC_PAYLOADS[i][0])
)
async def test_a_hook_of_any_type_the_codec_stores_is_accepted(
    wf_engine: Engine, index: int
) -> None:
    # Was: create_hook(bytearray) refused ("pydantic has no schema, wf cannot store one"),
    # though the codec stores one: runs of an older wf waiting on such a hook failed on replay.
    _, payload = _CODEC_PAYLOADS[index]
    run = await wf.start(waits_for_a_codec_type, index)
    assert await run.result(timeout=10) == repr(payload)


@wf.workflow
async def waits_for_a_list_of_a_plain_class() -> str:
    hook = wf.create_hook(list[PlainPayload], token="plain-list")
    return repr(await hook.next())


async def test_a_plain_class_inside_a_hook_type_is_refused_by_its_name(
    wf_engine: Engine,
) -> None:
    run = await wf.start(waits_for_a_list_of_a_plain_class)
    with pytest.raises(wf.RunFailed) as caught:
        await run.result(timeout=10)
    assert "validated into PlainPayload (in list[" in caught.value.message


@dataclasses.dataclass
class HoldsAPlain:
    p: PlainPayload


class PlainTuple(NamedTuple):
    n: int
    p: PlainPayload


@dataclasses.dataclass
class HoldsAHolder:
    inner: list[HoldsAPlain | None]


@wf.workflow
async def waits_for_a_holder_of_a_plain_class(index: int) -> str:
    kind = [HoldsAPlain, PlainTuple, HoldsAHolder, dict[str, PlainTuple]][index]
    hook = wf.create_hook(kind, token=f"holder-{index}")
    return repr(await hook.next())


@pytest.mark.parametrize("index", range(4))
async def test_a_dataclass_or_named_tuple_holding_a_plain_class_is_refused(
    wf_engine: Engine, index: int
) -> None:
    # Was: accepted whatever its fields held; every wf.resume_hook then raised
    # ValueEncodingError ("contains a PlainPayload at .p") and the run waited for ever.
    run = await wf.start(waits_for_a_holder_of_a_plain_class, index)
    with pytest.raises(wf.RunFailed) as caught:
        await run.result(timeout=10)
    assert caught.value.error_type.endswith("UsageError")
    assert "validated into PlainPayload (in " in caught.value.message
    assert await wf_engine.store.list_hooks() == []
