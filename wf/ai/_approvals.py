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
waiting; so is a per-call map naming a call id that is not pending (or none): the run refuses it
as it takes it in (``wf hook resume`` exits 2 naming the pending ids), and waits on. A
denial's ``message`` is what the model is told; other keys of a decision (``"by": "alice"``) are
kept in the journal and otherwise ignored.

A run whose first approval wait was recorded before this reading (wf 8a5d24a1 and earlier: no
``APPROVALS_CHANGE`` marker in its journal) keeps the reading it ran with, so it replays as it
ran: ``{"approved": true}`` is a map naming a call "approved", and a map naming no pending call
is taken (the calls it does not name are denied), not refused. The agent run then continues with the
approved calls executed — one durable run, however long the wait.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.external_events import ExternalEventError, wait_for_external_event
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied

from wf.ai._durability import hook_payload_type
from wf.ai._stream import StreamFormat, write_line
from wf.engine._context import current_run
from wf.engine._patch import patched

logger = logging.getLogger("wf.ai")


class Decision(BaseModel):
    """Approve or deny; ``message`` tells the model why a call was denied."""

    # Other keys (audit fields: "by") are kept, not refused: they were taken before, and a map
    # of call ids is told by its lacking "approved" (``ApprovalPayload`` tries a decision first).
    model_config = ConfigDict(extra="allow")

    approved: bool
    message: str | None = None


class ApprovalPayload(
    RootModel[
        Annotated[bool | Decision | dict[str, bool | Decision], Field(union_mode="left_to_right")]
    ]
):
    """What ``wf hook resume`` sends to an approval hook: one decision for every pending call
    (``true``, ``false``, ``{"approved": ..., "message": ...}``), or a decision per tool call id.
    Read in that order: ``{"approved": true}`` is a decision, never a call named "approved"."""


APPROVALS_CHANGE = "wf.ai.approvals.decision-first"
"""The ``wf.patched`` change id a run records at its first approval wait: the run reads decisions
as ``ApprovalPayload`` says and refuses a map naming no pending call. A run recorded without it
keeps the earlier reading (``_LegacyPayload``, nothing refused)."""


class _LegacyPayload(
    RootModel[bool | Decision | dict[str, bool | Decision]]  # pydantic's "smart" union
):
    """How wf read a decision before ``APPROVALS_CHANGE``: a JSON object whose values are all
    booleans or decisions was a map of call ids (``{"approved": true}`` named a call)."""


def _legacy(payload: Any) -> bool | Decision | dict[str, bool | Decision]:
    """``payload`` (as the hook gives it) read the earlier way, from the JSON it was sent as."""
    value = payload.root if isinstance(payload, ApprovalPayload) else payload
    if isinstance(value, Decision):
        value = value.model_dump(mode="json", exclude_unset=True)
    elif isinstance(value, dict):
        value = {
            k: v.model_dump(mode="json", exclude_unset=True) if isinstance(v, Decision) else v
            for k, v in value.items()
        }
    return _LegacyPayload.model_validate(value).root


def _new_reading() -> bool:
    """Whether this run reads decisions as ``ApprovalPayload`` does (see ``APPROVALS_CHANGE``)."""
    return current_run() is None or patched(APPROVALS_CHANGE)


def _denied(decision: bool | Decision) -> ToolDenied | None:
    if isinstance(decision, bool):
        return None if decision else ToolDenied()
    if decision.approved:
        return None
    return ToolDenied(decision.message) if decision.message else ToolDenied()


def refuse_unknown_calls(requests: DeferredToolRequests, payload: Any) -> None:
    """Raise ``ValueError`` for a per-call decision that names a call not pending (a typo'd
    id would otherwise leave the real call undecided, denied) or names none."""
    value = payload.root if isinstance(payload, ApprovalPayload) else payload
    if not isinstance(value, dict):
        return
    pending = [call.tool_call_id for call in requests.approvals]
    unknown = [key for key in value if key not in pending]
    if unknown or not value:
        named = ", ".join(repr(key) for key in unknown) or "no call"
        raise ValueError(
            f"the decision names {named}, not a pending tool call: the pending calls are "
            f"{', '.join(repr(p) for p in pending)}"
        )


def decide(
    requests: DeferredToolRequests, payload: Any, *, legacy: bool = False
) -> DeferredToolResults:
    """The results a decision payload gives the pending approvals (undecided calls are denied);
    ``legacy``: read as before ``APPROVALS_CHANGE``."""
    value = _legacy(payload) if legacy else ApprovalPayload.model_validate(payload).root
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

        new = _new_reading()
        try:
            refuse = functools.partial(refuse_unknown_calls, requests) if new else None
            with hook_payload_type(ApprovalPayload, refuse):
                payload = await wait_for_external_event(
                    self.name, ask=announce, timeout=self.timeout
                )
        except ExternalEventError as error:
            message = f"No decision on this tool call arrived: {error}"
            return requests.build_results(
                approvals={c.tool_call_id: ToolDenied(message) for c in requests.approvals}
            )
        return decide(requests, payload, legacy=not new)

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
