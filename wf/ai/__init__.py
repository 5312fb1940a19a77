"""Durable AI agents: Pydantic AI agents as wf runs (``pip install 'wf-durable[ai]'``).

``wf.ai.DurableAgent(agent)`` wraps any Pydantic AI agent. Inside a ``@wf.workflow``,
``await durable.run(prompt)`` records each model request and each tool call (MCP servers'
included) as a wf step, streams the model's text into a byte stream of the run, and suspends the
run on a hook while a tool waits for approval; outside a workflow it is the plain agent.
``wf.ai.WfDurability`` is the same as a Pydantic AI capability, for
``Agent(..., capabilities=[WfDurability()])``. See docs/ai.md.

This subpackage is imported only when used: ``import wf`` never imports Pydantic AI.
"""

from __future__ import annotations

from wf._extras import extra_needed, missing_extra

try:
    import pydantic_ai  # noqa: F401
except ModuleNotFoundError as missing:  # the line a user sees names the install
    if missing_extra(missing) != "ai":
        raise  # Pydantic AI is there but lacks a module of its own: its error says which
    also = " and the provider you use (e.g. 'pydantic-ai-slim[openai]')"
    raise extra_needed(missing, "ai", "wf.ai", also) from missing

from wf.ai._agent import DurableAgent
from wf.ai._approvals import ApprovalPayload, Decision, HookApprovals
from wf.ai._durability import StepOptions, WfDurability

__all__ = [
    "ApprovalPayload",
    "Decision",
    "DurableAgent",
    "HookApprovals",
    "StepOptions",
    "WfDurability",
]
