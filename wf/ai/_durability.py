"""``WfDurability``: the Pydantic AI durability capability whose durable units are wf steps.

Pydantic AI builds its durable-execution integrations (Temporal, DBOS, Prefect) on one public
surface, ``pydantic_ai.durable_exec``: a capability subclassing ``BaseDurabilityCapability``
declares the engine (``DurabilityEngineSpec``) and hands over a ``DurableOperationBackend``; the
base wraps the model, the toolsets (function, MCP, dynamic) and the event stream so that each model
request and each tool call goes through the backend. This module is wf's side of that contract:

- the backend runs each operation as a wf step, named after Pydantic AI's journal convention
  (``{agent}__model.request_stream``, ``{agent}__function_toolset__{id}.call_tool:{tool}``,
  ``{agent}__mcp_server__{id}.call_tool``, ...), with wf's step retries and durable backoff;
  results cross as JSON (``JSON_CODEC``), which wf's journal stores as it is;
- provider errors are sorted into retryable (honouring ``retry-after``) and fatal (``_errors``);
- the durable container is a wf workflow: inside one (and not inside a step) the capability is
  active; anywhere else it is transparent and the agent runs as usual;
- waits for external events (tool approvals, ``RequestInput``, questions) are wf hooks, so a run
  waiting for a person suspends and holds no process, for as long as it takes;
- the agent graph's own sleeps become ``wf.sleep``;
- model text streams into a byte stream of the run (``_stream``).
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from pydantic import JsonValue
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetKind,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
)
from pydantic_ai.exceptions import ModelAPIError
from pydantic_ai.external_events import (
    ExternalEventError,
    ExternalEventWaiter,
    external_event_scope,
)
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import ToolsetTool

from wf._exceptions import FatalError
from wf.ai._errors import provider_error
from wf.ai._stream import StreamFormat, stream_handler
from wf.engine._compose import timeout as wf_timeout
from wf.engine._context import RunContext as WfRunContext
from wf.engine._context import current_run
from wf.engine._hooks import create_hook
from wf.engine._ops import now as wf_now
from wf.engine._ops import sleep as wf_sleep
from wf.engine._step import Step


class StepOptions(TypedDict, total=False):
    """Retry options of the steps wf runs for an agent (the keyword options of ``@wf.step``).

    Per tool, put them under the ``"wf"`` key of the tool's metadata
    (``Tool(fn, metadata={"wf": {"max_retries": 0}})``), or ``{"wf": False}`` to run that tool
    inline in the workflow instead of in a step of its own.
    """

    max_retries: int
    backoff: float
    backoff_factor: float
    max_backoff: float


_hook_payload_type: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "wf_ai_hook_payload_type", default=Any
)
"""The payload type of the hook the next external-event wait creates (approvals set theirs, so
``wf hook resume`` refuses a payload that is not a decision instead of the run failing on it)."""

_hook_payload_check: contextvars.ContextVar[Callable[[Any], None] | None] = contextvars.ContextVar(
    "wf_ai_hook_payload_check", default=None
)
"""What the hook the next external-event wait creates refuses beyond its type (``Hook.refuse``):
the run validates every payload again as it takes it in, so this holds on replay too."""

# Agent runs started so far in each drive of a wf run, for default agent run ids: the same count,
# in program order, on every replay.
_agent_runs: weakref.WeakKeyDictionary[WfRunContext, int] = weakref.WeakKeyDictionary()


def in_workflow() -> bool:
    """Whether this is workflow code of a wf run (not a step, not outside any run)."""
    return current_run() is not None


class _StepBackend(JournalCallableOperationBackend[StepOptions]):
    """Runs each durable operation of the agent as one wf step."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepOptions,
    ) -> object:
        async def unit() -> object:
            try:
                return await body()
            except ModelAPIError as error:
                raise provider_error(error, step.max_backoff) from error

        step: Step[[], object] = Step(unit, name=name, **(config or {}))
        return await step()


class _HookWaiter(ExternalEventWaiter):
    """Waits for an external event on a wf hook: the run suspends until the token is resumed."""

    def __init__(self, agent_name: str) -> None:
        self._agent_name = agent_name

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,
    ) -> JsonValue:
        hook = create_hook(_hook_payload_type.get())
        hook.refuse = _hook_payload_check.get()

        async def ask_once() -> JsonValue:
            return await ask(hook.token)

        # In a step: ``ask`` may notify someone; its answer is recorded, so a replay does not
        # ask again.
        asking: Step[[], JsonValue] = Step(
            ask_once, name=f"{self._agent_name}__external_event.{name}.ask"
        )
        answer = await asking()
        if answer is not None:
            hook.dispose()
            return answer
        # Not ``finally``: while the run suspends on ``next()`` its coroutine is dropped, and
        # a dispose there would be an operation the replay never meets.
        try:
            if timeout is None:
                payload = await hook.next()
            else:
                async with wf_timeout(timeout.total_seconds()):
                    payload = await hook.next()
        except TimeoutError:
            hook.dispose()
            raise ExternalEventError(f"no answer within {timeout}") from None
        hook.dispose()  # the token is free at once, not only when the run ends
        result: JsonValue = payload
        return result


@dataclass(init=False, kw_only=True)
class WfDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent durable in wf: attach it to an ``Agent`` and call ``agent.run()`` inside a
    ``@wf.workflow``. Each model request and each tool call is then a wf step: recorded, retried
    by wf's rules, replayed without calling the model again after a crash. Outside a workflow the
    capability is transparent. ``wf.ai.DurableAgent`` attaches it for you.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="wf",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="workflow",
        # wf journals JSON: values are reduced to Pydantic AI's JSON form inside the step, which
        # wf's codec stores unchanged (plain JSON encodes as itself).
        codec=JSON_CODEC,
        serialization_failure=lambda error: FatalError(f"an agent value cannot be stored: {error}"),
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        # Steps run in the driver's own process, so an MCP server is entered by its first step and
        # kept for the run (one session per run, not one per call).
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        unsupported_runtime_toolset_kinds=frozenset({"mcp", "dynamic"}),
        journal_discovery=True,
        # wf numbers operations in the order they are called. Tool calls run one at a time so
        # their steps are numbered the same on every replay (see ``parallel_tool_calls``).
        sequential_tools_in_durable_context=True,
        tool_config_key="wf",
    )

    def __init__(
        self,
        *,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        stream: str | None = None,
        stream_format: StreamFormat = "text",
        stream_interval: float = 0.05,
        model_step: StepOptions | None = None,
        tool_step: StepOptions | None = None,
        mcp_step: StepOptions | None = None,
        parallel_tool_calls: bool = False,
    ) -> None:
        """Args:
        name: names the agent's steps (default: the agent's ``name``); keep it stable, a
            replay matches steps by name.
        models: other models a run may switch to (``agent.run(model=...)``), by id.
        event_stream_handler: also handle the agent's events (model events live in the
            model step, tool events in a step each).
        stream: the run's byte stream the events are written to (``None``: none).
        stream_format: ``"text"`` (the model's text) or ``"events"`` (JSON lines).
        stream_interval: coalesce stream writes to at most one per this many seconds.
        model_step / tool_step / mcp_step: step retry options of model requests, function
            tool calls and MCP calls.
        parallel_tool_calls: run a response's tool calls concurrently. Off by default: wf numbers
            steps in call order, and concurrent tool calls only keep one order if no tool awaits
            anything before its step starts.
        """
        handler: EventStreamHandler[AgentDepsT] | None = event_stream_handler
        if stream is not None:
            handler = stream_handler(stream, stream_format, stream_interval, event_stream_handler)
        super().__init__(models=models, event_stream_handler=handler, name=name)
        self._user_handler = event_stream_handler
        self.stream = stream
        self.stream_format: StreamFormat = stream_format
        self._model_step = model_step or {}
        self._tool_step = tool_step or {}
        self._mcp_step = mcp_step or {}
        self._parallel = parallel_tool_calls

    # --- the engine ------------------------------------------------------------------------

    @property
    def in_durable_context(self) -> bool:
        return in_workflow()

    def get_durable_operation_backend(self) -> DurableOperationBackend[StepOptions]:
        def tool_config(
            operation_id: DurableOperationId, tool: object | None, tool_name: str
        ) -> StepOptions | Literal[False]:
            assert isinstance(operation_id, ToolsetCallToolId | ToolsetValidateToolArgumentsId)
            base = self._toolset_base_config(operation_id.toolset_kind)
            resolve = self._build_resolve_tool_config(base)
            config: Any = resolve(tool if isinstance(tool, ToolsetTool) else None, tool_name)
            return config  # type: ignore[no-any-return]

        return _StepBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(
                model=self._model_step,
                event={},
                capability={},
                tool=self._tool_step,
                resolve_tool=tool_config,
            ),
        )

    def _toolset_base_config(self, kind: ToolsetKind) -> Any:
        return self._mcp_step if kind == "mcp" else self._tool_step

    def get_default_run_id(self) -> str | None:
        ctx = current_run()
        if ctx is None:
            return None
        count = _agent_runs.get(ctx, 0)
        _agent_runs[ctx] = count + 1
        return f"{ctx.run_id}:agent:{count}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        # Recorded (wf.now()), so a replay counts the run's ``timeout=`` from its first start.
        return wf_now() if self.in_durable_context else None

    async def _dispatch_event_stream_event(
        self, ctx: RunContext[AgentDepsT], event: AgentStreamEvent
    ) -> None:
        # In the text format, with no handler of the user's, tool events are not written:
        # delivering them would only spend a step each on nothing.
        if self._user_handler is None and self.stream_format == "text":
            return
        await super()._dispatch_event_stream_event(ctx, event)

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        if not self.in_durable_context:
            return await handler()
        with contextlib.ExitStack() as stack:
            stack.enter_context(external_event_scope(_HookWaiter(self.name)))
            stack.enter_context(_durable_graph_sleep())
            agent = self._agent
            if self._parallel and agent is not None:
                stack.enter_context(agent.parallel_tool_call_execution_mode("parallel"))
                return await handler()
            return await super().wrap_run(ctx, handler=handler)


@contextlib.contextmanager
def _durable_graph_sleep() -> Iterator[None]:
    """The agent graph's waits (between polls of a background request) as wf.sleep timers."""
    try:
        from pydantic_ai._agent_graph import set_agent_graph_sleep
    except ImportError:  # pragma: no cover - a Pydantic AI without the hook
        yield
        return

    async def sleep(seconds: float) -> None:
        await wf_sleep(seconds)

    with set_agent_graph_sleep(sleep):
        yield


@contextlib.contextmanager
def hook_payload_type(tp: Any, refuse: Callable[[Any], None] | None = None) -> Iterator[None]:
    """Within the block, external-event waits create hooks whose payloads must fit ``tp``, and
    pass ``refuse`` (which raises ``ValueError`` for a payload the run refuses: it is journaled
    as refused, ``wf hook resume`` exits 2, and the wait goes on)."""
    token = _hook_payload_type.set(tp)
    check = _hook_payload_check.set(refuse)
    try:
        yield
    finally:
        _hook_payload_check.reset(check)
        _hook_payload_type.reset(token)
