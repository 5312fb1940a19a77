"""``DurableAgent``: any Pydantic AI agent, durable inside a wf workflow.

A ``WrapperAgent`` (Pydantic AI's public base for agents that wrap another, as ``TemporalAgent``,
``DBOSAgent`` and ``PrefectAgent`` are): every way of running it (``run``, ``run_stream``,
``iter``, ``run_stream_events``) goes through ``iter``, which — inside a workflow only — adds
two capabilities to the run: ``WfDurability`` (model requests and tool calls as steps, the event
stream into the run's byte stream, waits as hooks) and ``HookApprovals`` (tool approvals decided
on a hook). Outside a workflow, or inside a step, it is the plain agent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from pydantic_ai.agent import AbstractAgent, AgentRun, EventStreamHandler, WrapperAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model
from pydantic_ai.output import OutputDataT
from pydantic_ai.tools import AgentDepsT
from pydantic_core import to_jsonable_python

from wf._exceptions import UsageError
from wf.ai._approvals import HookApprovals
from wf.ai._durability import StepOptions, WfDurability, in_workflow
from wf.ai._stream import StreamFormat, write_line
from wf.engine._futures import in_run
from wf.engine._step import Step


class DurableAgent(WrapperAgent[AgentDepsT, OutputDataT]):
    """Wraps a Pydantic AI agent so that, inside a ``@wf.workflow``, ``await durable.run(...)``
    is durable: each model request and each tool call (MCP servers' included) is a wf step —
    recorded, retried by wf's step rules, replayed after a crash without calling the model again.

    ::

        agent = Agent("openai:gpt-5", name="support", tools=[...])
        durable = wf.ai.DurableAgent(agent)

        @wf.workflow
        async def answer(question: str) -> str:
            result = await durable.run(question)
            return result.output
    """

    def __init__(
        self,
        wrapped: AbstractAgent[AgentDepsT, OutputDataT],
        *,
        name: str | None = None,
        stream: str | None = "agent",
        stream_format: StreamFormat = "text",
        stream_interval: float = 0.05,
        approvals: bool = True,
        approval_timeout: timedelta | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        models: Mapping[str, Model] | None = None,
        model_step: StepOptions | None = None,
        tool_step: StepOptions | None = None,
        mcp_step: StepOptions | None = None,
        parallel_tool_calls: bool = False,
    ) -> None:
        """Args:
        wrapped: the agent.
        name: names the agent's steps (default: the agent's ``name``). Keep it stable: a replay
            matches steps by name.
        stream: the run's byte stream the agent writes to (``None``: none). ``wf stream RUN
            --name agent --follow`` and ``run.read_stream("agent")`` show the answer growing.
        stream_format: ``"text"``: the model's text; ``"events"``: JSON lines of every event,
            approval requests and each run's result (for programs: a chat client).
        stream_interval: write at most one chunk per this many seconds (deltas are coalesced).
        approvals: decide tools that require approval on a wf hook (the run suspends until
            ``wf hook resume TOKEN --data true|false``). ``False``: leave deferred tool calls to
            the agent (its run ends with ``DeferredToolRequests`` output if it allows that).
        approval_timeout: deny pending approvals when no decision arrived in this long.
        event_stream_handler: also handle the events yourself (in steps, like the stream).
        models: other models a run may switch to, by id (``durable.run(..., model="fast")``).
        model_step / tool_step / mcp_step: retry options of the model-request, tool-call and
            MCP steps (``max_retries``, ``backoff``, ``backoff_factor``, ``max_backoff``).
        parallel_tool_calls: run one response's tool calls concurrently (see ``WfDurability``).
        """
        super().__init__(wrapped)
        agent_name = name or wrapped.name
        if not agent_name:
            raise UsageError(
                "a durable agent needs a name: Agent(..., name=...) or "
                "DurableAgent(agent, name=...) (it names the agent's steps, so keep it stable)"
            )
        self._agent_name = agent_name
        self.stream = stream
        self.stream_format: StreamFormat = stream_format
        self.durability: WfDurability[AgentDepsT] = WfDurability(
            name=agent_name,
            models=models,
            event_stream_handler=event_stream_handler,
            stream=stream,
            stream_format=stream_format,
            stream_interval=stream_interval,
            model_step=model_step,
            tool_step=tool_step,
            mcp_step=mcp_step,
            parallel_tool_calls=parallel_tool_calls,
        )
        self._approvals = (
            HookApprovals(stream=stream, stream_format=stream_format, timeout=approval_timeout)
            if approvals
            else None
        )

    @property
    def name(self) -> str | None:
        return self._agent_name

    @name.setter
    def name(self, value: str | None) -> None:
        raise UsageError("a durable agent's name names its steps: set it when wrapping")

    @asynccontextmanager
    async def iter(
        self,
        user_prompt: Any = None,
        *,
        capabilities: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AgentRun[AgentDepsT, Any]]:
        """Run the wrapped agent's ``iter``; inside a workflow, durably (see the class)."""
        if not in_workflow():
            async with self.wrapped.iter(user_prompt, capabilities=capabilities, **kwargs) as run:
                yield run
            return
        extra: list[AbstractCapability[AgentDepsT]] = [*(capabilities or ()), self.durability]
        if self._approvals is not None:
            extra.append(self._approvals)
        # Pydantic AI's run machinery hands off between its own tasks with ``asyncio.wait``
        # (handler started / ``wrap_run`` returned: decided by code, not by timing). wf refuses
        # that helper in tasks workflow code creates, as a guard against racing durable
        # operations; the agent's internal tasks are not such a race, so they are plain tasks.
        # Every durable operation inside still goes through wf (steps, hooks, timers).
        plain = in_run.set(False)
        try:
            async with self.wrapped.iter(user_prompt, capabilities=extra, **kwargs) as run:
                yield run
        finally:
            in_run.reset(plain)
        if self.stream is not None and self.stream_format == "events" and run.result is not None:
            await self._write_result(run.result.output)

    async def _write_result(self, output: Any) -> None:
        """Mark the end of an agent run on the events stream, with its output: a client reading
        the stream knows the answer is complete."""
        line = {"event_kind": "agent_run_result", "output": to_jsonable_python(output)}
        stream = self.stream
        assert stream is not None

        async def write() -> None:
            await write_line(stream, json.dumps(line).encode() + b"\n")

        await Step(write, name=f"{self._agent_name}__stream.agent_run_result")()
