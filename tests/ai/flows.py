"""Agents and workflows for the agent tests: a scripted model (no network) and logged tools.

The model answers by the last message: a user prompt ``add X Y`` calls the ``add`` tool, ``delete
NAME`` calls ``delete`` (which requires approval), ``twice`` calls ``add`` then ``add`` again, and
any other prompt is echoed; after a tool result it reports the result. Every model request and
tool call is logged (``LOG``, and a line in ``$WF_TEST_LOG/calls`` for the subprocess tests), and
``$WF_TEST_LOG/hold_<n>`` makes the n-th model request (1-based) of a process wait while the file
exists, so a test can kill the process in the middle of the loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import wf
from wf.ai import DurableAgent

LOG: list[str] = []
_requests = 0
_tool_calls = 0


def log(line: str) -> None:
    LOG.append(line)
    directory = os.environ.get("WF_TEST_LOG")
    if directory:
        with open(Path(directory) / "calls", "a") as f:
            f.write(f"{line} {os.getpid()}\n")


async def _hold(n: int) -> None:
    directory = os.environ.get("WF_TEST_LOG")
    if directory:
        while (Path(directory) / f"hold_{n}").exists():
            await asyncio.sleep(0.02)


def decide(messages: list[ModelMessage]) -> str | ToolCallPart | list[ToolCallPart]:
    """The scripted answer: text, or a tool call."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns:
        results = [str(p.content) for p in returns]
        calls = sum(isinstance(p, ToolCallPart) for m in messages for p in m.parts)
        prompt = _last_prompt(messages)
        if prompt == "twice" and calls == 1:
            return ToolCallPart("add", {"a": int(results[0]), "b": 1}, tool_call_id="call_2")
        return "The result is " + ", ".join(results) + "."
    words = _last_prompt(messages).split()
    if words[:1] == ["add"]:
        return ToolCallPart("add", {"a": int(words[1]), "b": int(words[2])}, tool_call_id="call_1")
    if words[:1] == ["both"]:  # two calls in one response
        return [
            ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="call_a"),
            ToolCallPart("add", {"a": 3, "b": 4}, tool_call_id="call_b"),
        ]
    if words[:1] == ["twice"]:
        return ToolCallPart("add", {"a": 1, "b": 1}, tool_call_id="call_1")
    if words[:1] == ["delete"]:
        return ToolCallPart("delete", {"name": words[1]}, tool_call_id="call_del")
    return "You said: " + " ".join(words)


def _last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ""


async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    global _requests
    _requests += 1
    log(f"model {_last_prompt(messages)!r}")
    await _hold(_requests)
    answer = decide(messages)
    if isinstance(answer, str):
        return ModelResponse(parts=[TextPart(answer)])
    return ModelResponse(parts=answer if isinstance(answer, list) else [answer])


async def reply_stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    global _requests
    _requests += 1
    log(f"model {_last_prompt(messages)!r}")
    await _hold(_requests)
    answer = decide(messages)
    if isinstance(answer, str):
        words = answer.split(" ")
        for i, word in enumerate(words):
            yield word if i == 0 else " " + word
    else:
        calls = answer if isinstance(answer, list) else [answer]
        yield {
            i: DeltaToolCall(c.tool_name, json.dumps(c.args), tool_call_id=c.tool_call_id)
            for i, c in enumerate(calls)
        }


model = FunctionModel(reply, stream_function=reply_stream, model_name="scripted")
agent = Agent(model, name="calc")


@agent.tool_plain
def add(a: int, b: int) -> int:
    """Add two numbers."""
    global _tool_calls
    _tool_calls += 1
    log(f"tool add {a} {b}")
    directory = os.environ.get("WF_TEST_LOG")
    while directory and (Path(directory) / f"hold_tool_{_tool_calls}").exists():
        time.sleep(0.02)
    return a + b


@agent.tool_plain(requires_approval=True)
def delete(name: str) -> str:
    """Delete a file (needs a person's approval)."""
    log(f"tool delete {name}")
    return f"deleted {name}"


durable = DurableAgent(agent)
quiet = DurableAgent(agent, stream=None)
parallel = DurableAgent(agent, stream=None, parallel_tool_calls=True)
impatient = DurableAgent(agent, approval_timeout=timedelta(hours=1))
events = DurableAgent(agent, stream_format="events")


@wf.workflow
async def ask(prompt: str) -> str:
    result = await durable.run(prompt)
    return result.output


@wf.workflow
async def ask_quietly(prompt: str) -> str:
    result = await quiet.run(prompt)
    return result.output


@wf.workflow
async def ask_in_parallel(prompt: str) -> str:
    return (await parallel.run(prompt)).output


@wf.workflow
async def ask_impatiently(prompt: str) -> str:
    return (await impatient.run(prompt)).output


@wf.workflow
async def ask_then_wait(first: str) -> list[str]:
    """Two agent runs with a suspension between them: the second replays the first."""
    answers = [(await durable.run(first)).output]
    follow_up = await wf.create_hook(str, token="follow-up").next()
    answers.append((await durable.run(follow_up)).output)
    return answers
