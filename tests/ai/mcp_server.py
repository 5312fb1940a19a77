"""A tiny MCP server over stdio for tests/ai/test_mcp.py: one tool, each call logged."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("units")


@server.tool()
def to_celsius(fahrenheit: float) -> float:
    """Convert a temperature from Fahrenheit to Celsius."""
    directory = os.environ.get("WF_TEST_LOG")
    if directory:
        with open(Path(directory) / "mcp_calls", "a") as f:
            f.write(f"to_celsius {fahrenheit}\n")
    return round((fahrenheit - 32) * 5 / 9, 2)


if __name__ == "__main__":
    server.run()
