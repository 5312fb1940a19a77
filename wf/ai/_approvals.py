"""Tool approvals on a wf hook: the run suspends until someone approves or denies.

A tool registered with ``requires_approval=True`` (or raising ``ApprovalRequired``) makes Pydantic
AI hand the pending calls to the ``handle_deferred_tool_calls`` hook of the agent's capabilities.
``HookApprovals`` answers it with Pydantic AI's ``wait_for_external_event``, which inside a wf run
is a wf hook (``WfDurability`` installs the waiter): a step announces the request — the hook's
token, each call's tool name, arguments and id — on the run's stream and in its log, and the run
suspends on the hook, holding no process, until a decision arrives::

    wf hook resume TOKEN --data true                     # approve every pending call
    wf hook resume TOKEN --data false                    # deny them all
    wf hook resume TOKEN --data '{"approved": false, "message": "not on Fridays"}'
    wf hook resume TOKEN --data '{"call_1": true, "call_2": {"approved": false}}'  # per call

A payload that is not a decision is refused to the sender (the hook is typed), and the run keeps
waiting. A denial's ``message`` is what the model is told. The agent run then continues with the
approved calls executed — one durable run, however long the wait.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, RootModel
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.external_events import ExternalEventError, wait_for_external_event
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied

from wf.ai._durability import hook_payload_type
from wf.ai._stream import StreamFormat, write_line

logger = logging.getLogger("wf.ai")


class Decision(BaseModel):
    """Approve or deny; ``message`` tells the model why a call was denied."""

    approved: bool
    message: str | None = None


class ApprovalPayload(RootModel[bool | Decision | dict[str, bool | Decision]]):
    """What ``wf hook resume`` sends to an approval hook: one decision for every pending call
    (``true``, ``false``, ``{"approved": ..., "message": ...}``), or a decision per tool call id."""


def _denied(decision: bool | Decision) -> ToolDenied | None:
    if isinstance(decision, bool):
        return None if decision else ToolDenied()
    if decision.approved:
        return None
    return ToolDenied(decision.message) if decision.message else ToolDenied()


def decide(requests: DeferredToolRequests, payload: Any) -> DeferredToolResults:
    """The results a decision payload gives the pending approvals (undecided calls are denied)."""
    value = ApprovalPayload.model_validate(payload).root
    approvals: dict[str, bool | Any] = {}
    for call in requests.approvals:
        if isinstance(value, dict):
            decision: bool | Decision = value.get(call.tool_call_id, Decision(approved=False))
            if call.tool_call_id not in value:
                decision = Decision(approved=False, message="No decision was given for this call.")
        else:
            decision = value
        denied = _denied(decision)
        approvals[call.tool_call_id] = True if denied is None else denied
    return requests.build_results(approvals=approvals)


def describe(requests: DeferredToolRequests) -> list[dict[str, Any]]:
    """The pending approvals, as JSON: tool name, arguments and call id each."""
    return [
        {"tool_name": c.tool_name, "args": c.args_as_dict(), "tool_call_id": c.tool_call_id}
        for c in requests.approvals
    ]


@dataclass
class HookApprovals(AbstractCapability[Any]):
    """Answers tool approvals with a decision received on a wf hook (see the module docstring)."""

    stream: str | None = None
    stream_format: StreamFormat = "text"
    timeout: timedelta | None = None
    name: str = "approval"

    def get_ordering(self) -> CapabilityOrdering:
        # Last: any handler that can decide without a person goes first.
        return CapabilityOrdering(position="innermost")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        if not requests.approvals:
            return None  # external calls and questions are someone else's
        pending = describe(requests)

        async def announce(token: str) -> None:
            await self._announce(token, pending)

        try:
            with hook_payload_type(ApprovalPayload):
                payload = await wait_for_external_event(
                    self.name, ask=announce, timeout=self.timeout
                )
        except ExternalEventError as error:
            message = f"No decision on this tool call arrived: {error}"
            return requests.build_results(
                approvals={c.tool_call_id: ToolDenied(message) for c in requests.approvals}
            )
        return decide(requests, payload)

    async def _announce(self, token: str, pending: list[dict[str, Any]]) -> None:
        resume = f"wf hook resume {token} --data true"
        logger.warning("approval needed for %s: %s", json.dumps(pending), resume)
        if self.stream is None:
            print(f"approval needed: {json.dumps(pending)}\n  {resume}", file=sys.stderr)
            return
        if self.stream_format == "events":
            line = {"event_kind": "approval_request", "token": token, "calls": pending}
            await write_line(self.stream, json.dumps(line).encode() + b"\n")
        else:
            calls = ", ".join(
                f"{c['tool_name']}({json.dumps(c['args'])}) [{c['tool_call_id']}]" for c in pending
            )
            await write_line(self.stream, f"\n[approval needed] {calls}\n  {resume}\n".encode())
