"""The agent's events, written to one of the run's byte streams as they arrive.

The writer runs where the events are: model events inside the model-request step, live while the
provider streams (so ``wf stream RUN --follow`` and ``run.read_stream()`` show the answer growing),
and the workflow-side events (tool calls and results) each inside a small step of their own. A
replayed step is not run again, so a replay never writes its text twice; a model request run
again (retried, or re-run after a crash killed its process) writes its whole new answer after
the partial one the cut-off run wrote
(``wf.engine._streams``), after a line that says so (``RETRY_TEXT``, or ``{"event_kind":
"retry"}`` in the events format): a reader drops what it built of the cut-off response.

Two formats:

- ``"text"``: the model's text only, UTF-8, each response ending with a newline. What a person
  wants to watch; the tool events are not written (and take no steps).
- ``"events"``: one JSON object per line, each an event in Pydantic AI's own JSON form
  (``event_kind`` tells them apart: ``part_start``, ``part_delta``, ``function_tool_call``, ...),
  plus wf's own ``approval_request`` and ``agent_run_result`` lines. What a program (a chat page, a
  terminal client) reads.

Each write is a journal record and a chunk, so deltas are coalesced: a chunk is written once
``interval`` seconds passed since the last one (and at the end of the step), not per token.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.tools import RunContext

from wf.engine._step import current_step
from wf.engine._streams import StreamWriter, stream_writer

StreamFormat = Literal["text", "events"]

_EVENT_ADAPTER: TypeAdapter[AgentStreamEvent] = TypeAdapter(AgentStreamEvent)


def event_line(event: AgentStreamEvent) -> bytes:
    """One event as a JSON line, in Pydantic AI's JSON form."""
    return _EVENT_ADAPTER.dump_json(event) + b"\n"


class CoalescingWriter:
    """Buffers small pieces and writes them to a wf stream at most every ``interval`` seconds."""

    def __init__(self, writer: StreamWriter, interval: float) -> None:
        self._writer = writer
        self._interval = interval
        self._buffer: list[bytes] = []
        self._last = time.monotonic()

    async def add(self, data: bytes) -> None:
        if not data:
            return
        self._buffer.append(data)
        if time.monotonic() - self._last >= self._interval:
            await self.flush()

    async def flush(self) -> None:
        if self._buffer:
            chunk = b"".join(self._buffer)
            self._buffer.clear()
            await self._writer.write(chunk)
        self._last = time.monotonic()


def _text_of(event: AgentStreamEvent) -> str:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def stream_handler(
    name: str,
    fmt: StreamFormat,
    interval: float,
    user_handler: EventStreamHandler[Any] | None,
) -> EventStreamHandler[Any]:
    """An event-stream handler writing to the run's stream ``name`` (inside a step), then handing
    the same events on to ``user_handler`` if there is one."""

    async def handler(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        async with stream_writer(name) as writer:
            if writer.retried:  # an earlier run was cut off: readers have its partial text
                await writer.write(await retry_marker(name, fmt))
            out = CoalescingWriter(writer, interval)
            wrote_text = False

            async def passing() -> AsyncIterator[AgentStreamEvent]:
                nonlocal wrote_text
                async for event in events:
                    if fmt == "events":
                        await out.add(event_line(event))
                    else:
                        text = _text_of(event)
                        wrote_text = wrote_text or bool(text)
                        if isinstance(event, PartEndEvent) and isinstance(event.part, TextPart):
                            text += "\n" if wrote_text else ""
                            wrote_text = False
                        await out.add(text.encode())
                    yield event

            try:
                if user_handler is not None:
                    await user_handler(ctx, passing())
                async for _ in passing():  # what the user's handler left, or all of it
                    pass
            finally:
                await out.flush()

    return handler


RETRY_TEXT = b"[retrying: the answer was cut off; it starts again]\n"
"""The line the text format writes before a retried request's answer."""

RETRY_EVENT = b'{"event_kind":"retry"}\n'
"""The line the events format writes before a retried request's events."""


async def retry_marker(name: str, fmt: StreamFormat) -> bytes:
    """What tells readers of stream ``name`` that the failed attempt's partial answer above is
    void and the answer starts again: a line of its own (after a newline, if the partial
    answer ended mid-line)."""
    if fmt == "events":
        return RETRY_EVENT  # every event is a whole line
    step = current_step()
    assert step is not None  # the writer is used inside a step
    ctx = step.run
    store = ctx.engine.store
    count = (await store.stream_info(ctx.run_id, name))[0]
    last, _ = await store.read_chunks(ctx.run_id, name, max(count - 1, 0))
    ended = not last or last[-1].endswith(b"\n")
    return RETRY_TEXT if ended else b"\n" + RETRY_TEXT


async def write_line(name: str, data: bytes) -> None:
    """Write one chunk to the run's stream ``name`` (inside a step)."""
    async with stream_writer(name) as writer:
        await writer.write(data)
