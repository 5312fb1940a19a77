"""DurableAgent in-process: the steps of an agent run, streaming, replays, approvals."""

from __future__ import annotations

import json
from typing import Any

import pytest

import wf
from tests.ai import flows


def step_names(journal: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in journal if e["type"] == "step_completed"]


async def read(run: wf.Run[Any], name: str = "agent") -> bytes:
    """What the stream holds now (``run.read_stream`` would follow it until the run ends)."""
    chunks, _ = await run.engine.store.read_chunks(run.id, name)
    return b"".join(chunks)


async def test_each_model_request_and_tool_call_is_a_step(wf_engine: wf.Engine) -> None:
    run = await wf.start(flows.ask, "add 2 3")
    assert await run.result(timeout=10) == "The result is 5."
    journal = await wf_engine.store.read_journal(run.id)
    assert step_names(journal) == [
        "calc__model.request_stream",
        "calc__function_toolset__<agent>.call_tool:add",
        "calc__model.request_stream",
    ]
    assert flows.LOG == ["model 'add 2 3'", "tool add 2 3", "model 'add 2 3'"]
    # The recorded model response is Pydantic AI's JSON form of the message: plain JSON.
    response = next(e for e in journal if e["type"] == "step_completed")["result"]
    assert response["parts"][0]["tool_name"] == "add"
    assert json.loads(response["parts"][0]["args"]) == {"a": 2, "b": 3}  # as streamed


async def test_without_a_stream_the_model_is_asked_without_streaming(wf_engine: wf.Engine) -> None:
    run = await wf.start(flows.ask_quietly, "hello there")
    assert await run.result(timeout=10) == "You said: hello there"
    journal = await wf_engine.store.read_journal(run.id)
    assert step_names(journal) == ["calc__model.request"]
    assert await wf_engine.store.list_streams(run.id) == {}


async def test_outside_a_workflow_it_is_the_plain_agent(wf_engine: wf.Engine) -> None:
    result = await flows.durable.run("add 1 1")
    assert result.output == "The result is 2."
    assert flows.LOG == ["model 'add 1 1'", "tool add 1 1", "model 'add 1 1'"]
    assert await wf_engine.store.list_runs() == []


async def test_the_answer_streams_into_the_run_and_a_replay_does_not_stream_it_again(
    wf_engine: wf.Engine,
) -> None:
    run = await wf.start(flows.ask_then_wait, "add 20 22")
    settled = await run.settle(timeout=10)
    assert settled.status is wf.RunStatus.SUSPENDED
    assert await read(run) == b"The result is 42.\n"
    flows.LOG.clear()
    # The run was dropped while it waited: this payload resumes it from the top, a replay.
    await wf.resume_hook("follow-up", "and now?")
    assert await run.result(timeout=10) == ["The result is 42.", "You said: and now?"]
    assert flows.LOG == ["model 'and now?'"]  # nothing of the first agent run ran again
    assert await read(run) == b"The result is 42.\nYou said: and now?\n"


async def test_the_events_format_writes_json_lines_and_the_run_result() -> None:
    async with wf.testing.engine() as eng:

        @wf.workflow(name="tests.ai.events")
        async def events(prompt: str) -> str:
            return (await flows.events.run(prompt)).output

        run = await wf.start(events, "add 1 2")
        assert await run.result(timeout=10) == "The result is 3."
        lines = [json.loads(line) for line in (await read(run)).splitlines()]
        kinds = [line["event_kind"] for line in lines]
        assert "function_tool_call" in kinds and "function_tool_result" in kinds
        assert kinds[-1] == "agent_run_result" and lines[-1]["output"] == "The result is 3."
        text = "".join(
            line["delta"]["content_delta"]
            for line in lines
            if line["event_kind"] == "part_delta" and line["delta"]["part_delta_kind"] == "text"
        )
        assert text.endswith("result is 3.")
        names = step_names(await eng.store.read_journal(run.id))
        assert names.count("calc__event_stream_handler") >= 2  # the tool events, a step each


@pytest.mark.parametrize(
    ("decision", "output", "deleted"),
    [
        (True, "The result is deleted notes.txt.", True),
        (False, "The result is The tool call was denied..", False),
        (
            {"approved": False, "message": "not on Fridays"},
            "The result is not on Fridays.",
            False,
        ),
        ({"call_del": True}, "The result is deleted notes.txt.", True),
        ({"approved": True}, "The result is deleted notes.txt.", True),  # was: a call id
        ({"approved": True, "by": "alice"}, "The result is deleted notes.txt.", True),  # audit
    ],
)
async def test_a_tool_that_needs_approval_waits_on_a_hook(
    wf_engine: wf.Engine, decision: Any, output: str, deleted: bool
) -> None:
    run = await wf.start(flows.ask, "delete notes.txt")
    settled = await run.settle(timeout=10)
    assert settled.status is wf.RunStatus.SUSPENDED  # no process holds it while it waits
    [hook] = await wf_engine.store.list_hooks(run.id)
    notice = (await read(run)).decode()
    assert "[approval needed] delete" in notice and hook.token in notice
    assert flows.LOG == ["model 'delete notes.txt'"]  # the tool has not run

    await wf.resume_hook(hook.token, decision)
    assert await run.result(timeout=10) == output
    assert ("tool delete notes.txt" in flows.LOG) is deleted
    assert flows.LOG.count("model 'delete notes.txt'") == 2  # the first request was replayed


async def test_a_payload_that_is_not_a_decision_is_refused_to_the_sender(
    wf_engine: wf.Engine,
) -> None:
    run = await wf.start(flows.ask, "delete x")
    await run.settle(timeout=10)
    [hook] = await wf_engine.store.list_hooks(run.id)
    with pytest.raises(wf.HookError):
        await wf.resume_hook(hook.token, "yes please")
    assert await run.status() is wf.RunStatus.SUSPENDED  # still waiting for a real decision
    await wf.resume_hook(hook.token, False)
    assert "denied" in await run.result(timeout=10)


@pytest.mark.parametrize("decision", [{"call_typo": True}, {"call_del": True, "call_x": False}, {}])
async def test_a_decision_per_call_naming_no_pending_call_is_refused_by_the_run(
    wf_engine: wf.Engine, decision: dict[str, bool]
) -> None:
    run = await wf.start(flows.ask, "delete notes.txt")
    await run.settle(timeout=10)
    [hook] = await wf_engine.store.list_hooks(run.id)
    await wf.resume_hook(hook.token, decision)  # stored: the sender cannot know the call ids
    await run.settle(timeout=10)
    # Was: the pending call denied ("No decision was given for this call.") and the run ended.
    assert await run.status() is wf.RunStatus.SUSPENDED
    [refused] = [
        e for e in await wf_engine.store.read_journal(run.id) if e["type"] == "hook_payload_refused"
    ]
    assert "'call_del'" in refused["error"] and "\n" not in refused["error"]
    assert all(repr(k) in refused["error"] for k in decision if k != "call_del")
    await wf.resume_hook(hook.token, {"call_del": True})
    assert await run.result(timeout=10) == "The result is deleted notes.txt."


@pytest.mark.parametrize("workflow", [flows.ask_quietly, flows.ask_in_parallel])
async def test_two_tool_calls_of_one_response_each_take_a_step(
    wf_engine: wf.Engine, workflow: wf.Workflow[Any, str]
) -> None:
    run = await wf.start(workflow, "both")
    assert await run.result(timeout=10) == "The result is 3, 7."
    names = step_names(await wf_engine.store.read_journal(run.id))
    assert names.count("calc__function_toolset__<agent>.call_tool:add") == 2
    assert sorted(line for line in flows.LOG if line.startswith("tool")) == [
        "tool add 1 2",
        "tool add 3 4",
    ]


async def test_an_approval_nobody_gives_in_time_is_denied(wf_engine: wf.Engine) -> None:
    run = await wf.start(flows.ask_impatiently, "delete notes.txt")
    # The fake clock jumps over the hour while the run waits: the timeout is a durable timer.
    assert await run.result(timeout=10) == (
        "The result is No decision on this tool call arrived: no answer within 1:00:00."
    )
    assert "tool delete notes.txt" not in flows.LOG
    assert await wf_engine.store.list_hooks(run.id) == []


_cut_attempts: list[int] = []


async def _cut_once(messages: Any, info: Any) -> Any:
    """Streams half an answer and fails (a provider's 503) the first time, whole the next."""
    from pydantic_ai.exceptions import ModelHTTPError

    _cut_attempts.append(1)
    yield "Half an"
    if len(_cut_attempts) == 1:
        raise ModelHTTPError(503, "scripted", "overloaded")
    yield " answer, whole."


def _cut_agent(fmt: Any) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    model = FunctionModel(stream_function=_cut_once, model_name="cut")
    return wf.ai.DurableAgent(
        Agent(model, name="cut"), stream_format=fmt, model_step={"backoff": 0}
    )


@pytest.mark.parametrize("fmt", ["text", "events"])
async def test_a_model_request_cut_mid_answer_and_retried_marks_the_retry_in_the_stream(
    fmt: str,
) -> None:
    _cut_attempts.clear()
    durable = _cut_agent(fmt)
    async with wf.testing.engine():

        @wf.workflow(name=f"tests.ai.cut_{fmt}")
        async def cut(prompt: str) -> str:
            return (await durable.run(prompt)).output

        run = await wf.start(cut, "go")
        assert await run.result(timeout=10) == "Half an answer, whole."
        data = await read(run)
    assert len(_cut_attempts) == 2
    if fmt == "text":
        assert data == b"Half an\n[retrying: the answer was cut off; it starts again]\n" + (
            b"Half an answer, whole.\n"
        )
        return
    kinds = [json.loads(line)["event_kind"] for line in data.splitlines()]
    retry = kinds.index("retry")
    assert "part_start" in kinds[:retry] and kinds[retry + 1] == "part_start"
    assert "retry" not in kinds[retry + 1 :]


async def test_a_model_request_cut_off_for_good_leaves_its_stream_incomplete() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    _cut_attempts.clear()
    model = FunctionModel(stream_function=_cut_once, model_name="cut")
    durable = wf.ai.DurableAgent(Agent(model, name="cut"), model_step={"max_retries": 0})
    async with wf.testing.engine():

        @wf.workflow(name="tests.ai.cut_for_good")
        async def cut(prompt: str) -> str:
            return (await durable.run(prompt)).output

        run = await wf.start(cut, "go")
        with pytest.raises(wf.RunFailed):
            await run.result(timeout=10)
        chunks: list[bytes] = []
        with pytest.raises(wf.StreamIncomplete) as incomplete:
            async for chunk in run.read_stream("agent"):
                chunks.append(chunk)
    assert b"".join(chunks) == b"Half an"
    assert incomplete.value.step == "cut__model.request_stream"


_crash_calls: list[int] = []
_crash_gate: dict[str, Any] = {}


async def _other_answer_after_a_crash(messages: Any, info: Any) -> Any:
    """Streams part of one answer, then hangs (the process dies); asked again, answers
    otherwise, as a model does."""
    _crash_calls.append(1)
    if len(_crash_calls) == 1:
        yield "The first"
        yield " answer"
        await _crash_gate["hang"].wait()
        yield ", never finished."
        return
    yield "Another answer."


@pytest.mark.parametrize("fmt", ["text", "events"])
async def test_a_model_request_cut_by_a_crash_streams_the_new_answer_whole_after_a_marker(
    wf_engine: Any, fmt: str
) -> None:
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    _crash_calls.clear()
    _crash_gate["hang"] = asyncio.Event()
    model = FunctionModel(stream_function=_other_answer_after_a_crash, model_name="crash")
    durable = wf.ai.DurableAgent(Agent(model, name="crash"), stream_format=fmt, stream_interval=0)

    @wf.workflow(name=f"tests.ai.crash_{fmt}")
    async def crashed(prompt: str) -> str:
        return (await durable.run(prompt)).output

    run = await wf.start(crashed, "go")
    for _ in range(2000):
        if b"answer" in await read(run):
            break
        await asyncio.sleep(0.001)
    await wf_engine.crash(run)
    await wf.Worker(wf_engine).run(until_idle=True)
    assert await run.result(timeout=10) == "Another answer."
    assert len(_crash_calls) == 2
    data = await read(run)
    if fmt == "text":
        assert data == (
            b"The first answer\n[retrying: the answer was cut off; it starts again]\n"
            b"Another answer.\n"
        )
        return
    lines = [json.loads(line) for line in data.splitlines()]
    kinds = [line["event_kind"] for line in lines]
    retry = kinds.index("retry")
    after = json.dumps(lines[retry + 1 :])
    assert "The first" in json.dumps(lines[:retry]) and "The first" not in after
    assert kinds[retry + 1] == "part_start" and "Another answer." in after
