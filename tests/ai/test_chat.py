"""examples/agent_chat.py: a chat of three turns as one durable run, suspended between turns,
with a tool approval granted in one turn and denied in another."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import wf

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_chat.py"
requests: list[int] = []


def answer(messages: list[ModelMessage]) -> str | ToolCallPart:
    """Counts the user's messages in the history it is sent: proof the history is kept."""
    prompts = [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
    last = messages[-1].parts
    returns = [p for p in last if isinstance(p, ToolReturnPart)]
    if returns:
        return f"turn {len(prompts)}: {returns[0].content}"
    text = str(prompts[-1])
    if text.startswith("save "):
        return ToolCallPart("save_note", {"text": text[5:]}, tool_call_id=f"save_{len(prompts)}")
    return f"turn {len(prompts)}: you said {text!r}"


async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
    requests.append(len(messages))
    reply = answer(messages)
    if isinstance(reply, str):
        for word in reply.split(" "):
            yield word + " "
    else:
        delta: DeltaToolCalls = {
            0: DeltaToolCall(
                reply.tool_name, json.dumps(reply.args), tool_call_id=reply.tool_call_id
            )
        }
        yield delta


def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    reply = answer(messages)
    return ModelResponse(parts=[TextPart(reply) if isinstance(reply, str) else reply])


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("WF_CHAT_MODEL", "test")  # no key needed to import it
    spec = importlib.util.spec_from_file_location("agent_chat", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_chat"] = module
    spec.loader.exec_module(module)
    module.agent.model = FunctionModel(whole, stream_function=stream, model_name="scripted")
    requests.clear()
    yield module
    sys.modules.pop("agent_chat", None)


def lines(chunks: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in b"".join(chunks).splitlines()]


async def test_three_turns_with_suspensions_and_approvals(
    wf_engine: wf.Engine, example: ModuleType
) -> None:
    run = await wf.start(example.chat, "demo")
    store = wf_engine.store

    async def turn(message: str) -> list[dict[str, Any]]:
        before = len((await store.read_chunks(run.id, "agent"))[0])
        await wf.resume_hook("chat:demo", message)
        settled = await run.settle(timeout=10)
        assert settled.status is wf.RunStatus.SUSPENDED, settled.error  # no process holds it
        return lines((await store.read_chunks(run.id, "agent", before))[0])

    assert (await run.settle(timeout=10)).status is wf.RunStatus.SUSPENDED

    first = await turn("hello")
    assert first[-1] == {"event_kind": "agent_run_result", "output": "turn 1: you said 'hello' "}

    second = await turn("save milk")
    [request] = [e for e in second if e["event_kind"] == "approval_request"]
    assert request["calls"] == [
        {"tool_name": "save_note", "args": {"text": "milk"}, "tool_call_id": "save_2"}
    ]
    await wf.resume_hook(request["token"], True)
    await run.settle(timeout=10)
    done = lines((await store.read_chunks(run.id, "agent"))[0])
    assert done[-1]["output"] == "turn 2: saved: milk "

    third = await turn("save eggs")
    [request] = [e for e in third if e["event_kind"] == "approval_request"]
    await wf.resume_hook(request["token"], {"approved": False, "message": "no more notes"})
    await run.settle(timeout=10)
    done = lines((await store.read_chunks(run.id, "agent"))[0])
    assert done[-1]["output"] == "turn 3: no more notes "

    await wf.resume_hook("chat:demo", "/bye")
    assert await run.result(timeout=10) == 3
    # Each model request was made once, however many times the run was replayed: five of them
    # (one per plain turn, two per turn with a tool), each sent the whole history so far.
    assert requests == [1, 3, 5, 7, 9]
    journal = await store.read_journal(run.id)
    assert sum(e["type"] == "run_suspended" for e in journal) >= 5
