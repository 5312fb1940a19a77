"""An MCP server's tools through DurableAgent: its tool listing and each tool call are steps,
and a replay calls the server for nothing that was recorded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastmcp", reason="MCP support: pip install 'pydantic-ai-slim[mcp]'")

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.test import TestModel

import wf
from wf.ai import DurableAgent

SERVER = Path(__file__).with_name("mcp_server.py")


async def test_mcp_tool_calls_are_steps_and_replay_without_calling_the_server(
    wf_engine: wf.Engine, tmp_path: Path
) -> None:
    env = {"WF_TEST_LOG": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    transport = StdioTransport(command=sys.executable, args=[str(SERVER)], env=env)
    agent = Agent(TestModel(), name="weather", toolsets=[MCPToolset(transport, id="units")])
    durable = DurableAgent(agent, stream=None)

    @wf.workflow(name="tests.ai.mcp")
    async def convert() -> list[str]:
        outputs = [(await durable.run("how cold is 0F?")).output]
        await wf.create_hook(str, token="again").next()  # suspends: the resume replays
        outputs.append((await durable.run("and again?")).output)
        return outputs

    run = await wf.start(convert)
    await run.settle(timeout=30)
    await wf.resume_hook("again", "go")
    assert await run.result(timeout=30) == ['{"to_celsius":-17.78}'] * 2
    # One call per agent run: the first run's call was replayed from the journal.
    assert (tmp_path / "mcp_calls").read_text().splitlines() == ["to_celsius 0.0"] * 2
    journal = await wf_engine.store.read_journal(run.id)
    steps = [e["name"] for e in journal if e["type"] == "step_completed"]
    assert steps[:4] == [
        "weather__mcp_server__units.get_tools",
        "weather__model.request",
        "weather__mcp_server__units.call_tool",
        "weather__model.request",
    ]
    assert steps[4:] == steps[:4]
