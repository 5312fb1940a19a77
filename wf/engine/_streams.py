"""Byte streams: a step writes chunks; readers in any process follow them live.

Only the run's driver writes (steps run in the driver), so one writer at a time per stream is an
in-process lock. Each write is journaled (``stream_write``: the step, the stream, the chunk index)
durably *before* the chunk is written, and the store ignores a write of an index it already has.
So a completed step is never re-run (replay) and never writes again, and a step re-run after a
crash maps its n-th write to the chunk its earlier attempt gave that write: no chunk is written
twice. Streams still open when the run ends are closed by the driver.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from wf._exceptions import UsageError
from wf.engine._context import RunContext, StepContext
from wf.engine._features import Feature
from wf.engine._step import current_step
from wf.store import Event, RunRecord
from wf.store._limits import check_segment

DEFAULT_STREAM = "default"

T = TypeVar("T")


@dataclasses.dataclass
class StreamState:
    """A run's streams (``RunContext.state(StreamState)``)."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    """Stream -> chunks written so far (the next chunk's index)."""
    writes: dict[tuple[int, str], list[int]] = dataclasses.field(default_factory=dict)
    """(step op, stream) -> chunk index of each write the step made, in order (journaled
    before the chunk), so a step re-run after a crash rewrites the same chunks, not new."""
    locks: dict[str, asyncio.Lock] = dataclasses.field(default_factory=dict)


def _read_write(ctx: RunContext, event: Event) -> None:
    key = (event["step"], event["stream"])
    ctx.state(StreamState).writes.setdefault(key, []).append(event["index"])


class StreamWriter:
    """Writes chunks to one stream of the current run. Use ``async with`` in async steps and
    ``with`` in sync steps (which run in a thread)."""

    def __init__(self, step: StepContext, name: str) -> None:
        self._ctx = step.run
        self._step = step
        self.name = name
        self._step_op = step.op
        self._lock = step.run.state(StreamState).locks.setdefault(name, asyncio.Lock())
        self._held = False
        self.closed = False

    async def __aenter__(self) -> StreamWriter:
        await self._lock.acquire()
        self._held = True
        ctx = self._ctx
        state = ctx.state(StreamState)
        if self.name not in state.counts:
            streams = await ctx.engine.store.list_streams(ctx.run_id)
            journaled = [i for (_, s), idx in state.writes.items() if s == self.name for i in idx]
            stored = streams.get(self.name, (0, False))[0]
            state.counts[self.name] = max([stored, *(i + 1 for i in journaled)])
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held:
            self._held = False
            self._lock.release()

    async def write(self, data: bytes | str) -> int:
        """Append one chunk (``str`` is encoded as UTF-8); durable when this returns.
        Returns the chunk's index."""
        if not self._held:
            raise UsageError("use the stream writer inside `async with wf.stream_writer():`")
        if self.closed:
            raise UsageError(f"stream {self.name!r} is closed")
        chunk = data.encode() if isinstance(data, str) else bytes(data)
        ctx = self._ctx
        state = ctx.state(StreamState)
        made = self._step.stream_cursors.get(self.name, 0)
        earlier = state.writes.setdefault((self._step_op, self.name), [])
        if made < len(earlier):
            index = earlier[made]  # an earlier attempt of this step made this write already
        else:
            index = state.counts[self.name]
            state.counts[self.name] = index + 1
            await ctx.write(
                ctx.event("stream_write", step=self._step_op, stream=self.name, index=index)
            )
            earlier.append(index)
        self._step.stream_cursors[self.name] = made + 1
        await ctx.lease.write_chunk(self.name, index, chunk)
        return index

    async def close(self) -> None:
        """Mark the end of the stream: readers stop after the last chunk."""
        if not self.closed:
            count = self._ctx.state(StreamState).counts[self.name]
            await self._ctx.lease.close_stream(self.name, count)
            self.closed = True

    # -- for sync steps, which run in a worker thread ---------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._ctx.loop).result()

    def __enter__(self) -> SyncStreamWriter:
        self._call(self.__aenter__())
        return SyncStreamWriter(self)

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._call(self.__aexit__(et, e, tb))


class SyncStreamWriter:
    """The blocking face of a ``StreamWriter``, for sync steps."""

    def __init__(self, writer: StreamWriter) -> None:
        self._writer = writer

    def write(self, data: bytes | str) -> int:
        """Append one chunk; returns its index."""
        return self._writer._call(self._writer.write(data))

    def close(self) -> None:
        """Mark the end of the stream."""
        self._writer._call(self._writer.close())


def stream_writer(name: str | None = None) -> StreamWriter:
    """A writer for the current run's byte stream ``name`` (default ``"default"``).

    Only inside a step: streams carry side effects (progress, output) and steps are where side
    effects belong.
    """
    step = current_step()
    if step is None:
        raise UsageError("wf.stream_writer() can only be used inside a step")
    name = DEFAULT_STREAM if name is None else check_segment("a stream name", name)
    return StreamWriter(step, name)


async def close_streams(ctx: RunContext, record: RunRecord) -> None:
    """Close the run's open streams (its outcome is recorded)."""
    state = ctx.state(StreamState)
    if not state.counts and not state.writes:
        return  # the run never wrote a stream: nothing to list or close
    for name, (count, closed) in (await ctx.engine.store.list_streams(ctx.run_id)).items():
        if not closed:
            await ctx.lease.close_stream(name, count)


def _streams_to_close(ctx: RunContext, record: RunRecord) -> bool:
    state = ctx.state(StreamState)
    return bool(state.counts or state.writes)


STREAM_FEATURE = Feature(
    "streams",
    events={"stream_write": _read_write},
    after_outcome=close_streams,
    outcome_needed=_streams_to_close,
)
"""Byte streams as the kernel sees them (``wf.engine._features``)."""
