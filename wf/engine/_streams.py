"""Byte streams: a step writes chunks; readers in any process follow them live.

Only the run's driver writes (steps run in the driver), so one writer at a time per stream is an
in-process lock. Each write is journaled (``stream_write``: the step, its attempt, the stream,
the chunk index) durably *before* the chunk is written, and the store ignores a write of an
index it already has. So a completed step is never re-run (replay) and never writes again, and
no chunk is ever written twice. A step run again — a retry of the step or of the run (a new
attempt), or the same attempt re-run after a crash — writes new chunks after everything its
earlier runs wrote: readers have seen those, so they stay, and what a writer writes need not be
what it wrote before (a model's answer is not). ``StreamWriter.retried`` tells the step, which
may say it starts again. A chunk journaled but not yet written when the process died is a gap
the next write fills, whoever writes it. A stream a writer closed (``stream_closed``) stays
closed for the run's attempt: a write that would add a chunk to it raises ``UsageError``.
Streams still open when the run ends are closed by the driver; a run retried after that (``wf
retry``, a workflow's own retries) may write to them again, behind the end their followers
stopped at.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from wf._exceptions import StoreCorrupted, UsageError
from wf.engine._context import RunContext, StepContext
from wf.engine._features import Feature
from wf.engine._step import current_step
from wf.store import Event, RunRecord
from wf.store._faults import collect_faults, named_place
from wf.store._limits import check_segment

DEFAULT_STREAM = "default"

T = TypeVar("T")


@dataclasses.dataclass
class StreamState:
    """A run's streams (``RunContext.state(StreamState)``)."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    """Stream -> chunks written so far (the next chunk's index)."""
    writes: dict[tuple[int, str, Any], list[int]] = dataclasses.field(default_factory=dict)
    """(step op, stream, attempt) -> chunk index of each write that attempt of the step made,
    in order (journaled before the chunk): whether a step's earlier runs wrote to a stream.
    ``attempt``: ``(run attempt, step attempt)``; None for a write journaled by an older wf,
    which recorded no attempt."""
    gaps: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """Stream -> the indexes journaled before this process drove the run whose chunks the
    store lacks (the process died between the two): the next writes fill them, in order, as
    the store takes a stream's chunks only in order."""
    closed: set[tuple[str, Any]] = dataclasses.field(default_factory=set)
    """(stream, run attempt) of each close by a writer: a write that would add a chunk to the
    stream in that run attempt is refused."""
    locks: dict[str, asyncio.Lock] = dataclasses.field(default_factory=dict)


def _attempt(step: StepContext) -> tuple[int, int]:
    """Which attempt of its step ``step`` is: the run's attempt (``wf retry``, a workflow's own
    retries) and the step's (its retries). A crash re-runs the same attempt: both stay."""
    return (step.run.record.attempt, step.attempt)


def _read_write(ctx: RunContext, event: Event) -> None:
    attempt = event.get("attempt")
    tag = (event["run_attempt"], attempt) if attempt is not None else None
    key = (event["step"], event["stream"], tag)
    ctx.state(StreamState).writes.setdefault(key, []).append(event["index"])


def _read_closed(ctx: RunContext, event: Event) -> None:
    ctx.state(StreamState).closed.add((event["stream"], event.get("run_attempt")))


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

    def _check_step(self) -> None:
        if self._step.ended:
            raise UsageError(
                f"the writer of stream {self.name!r} belongs to step {self._step.name!r}, "
                "which has returned: a stream is written only inside the step"
            )

    async def __aenter__(self) -> StreamWriter:
        self._check_step()
        await self._lock.acquire()
        if self._step.ended:  # the step ended while this waited for the lock
            self._lock.release()
            self._check_step()
        self._held = True
        step = self._step
        if step.on_end is None:
            step.on_end = []
        step.on_end.append(self._end)
        ctx = self._ctx
        state = ctx.state(StreamState)
        try:
            await self._count(state)
        except BaseException:
            self._end()  # no `async with` body runs: a step that opens it again may
            raise
        if step.stream_before is None:
            step.stream_before = {}
        if self.name not in step.stream_before:
            step.stream_before[self.name] = len(self._earlier(state))
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end()

    async def _count(self, state: StreamState) -> None:
        """Know where the stream's next chunk goes (``state.counts``, ``state.gaps``), from the
        store and the journal, unless known already.

        This stream's own count, not a listing's: a listing leaves a damaged stream out, and a
        count of 0 would send this step's chunks where the store has some (taken as replays,
        dropped). Damage fails the step here instead."""
        if self.name in state.counts:
            return
        ctx = self._ctx
        stored = (await ctx.engine.store.stream_info(ctx.run_id, self.name))[0]
        if self.name in state.counts:
            return  # a write beside this one counted meanwhile: one count, its gaps taken once
        journaled = [i for (_, s, _), idx in state.writes.items() if s == self.name for i in idx]
        state.counts[self.name] = max([stored, *(i + 1 for i in journaled)])
        state.gaps[self.name] = sorted({i for i in journaled if i >= stored})

    def _end(self) -> None:
        """Let go of the stream (the ``async with`` ends, or its step did)."""
        if self._held:
            self._held = False
            self._lock.release()

    @property
    def retried(self) -> bool:
        """Whether this step wrote to this stream before this run of it: an earlier attempt (a
        retry of the step, or of the run), or this same attempt cut off by a crash. Its readers
        have seen what was written then, which stays, and may want to be told the step starts
        again: this run's chunks come after those."""
        if (self._step.stream_before or {}).get(self.name, 0):
            return True  # this attempt wrote before a crash re-ran it
        this = _attempt(self._step)
        return any(
            chunks and op == self._step_op and stream == self.name and tag not in (this, None)
            for (op, stream, tag), chunks in self._ctx.state(StreamState).writes.items()
        )

    def _earlier(self, state: StreamState) -> list[int]:
        """The chunks this attempt of the step has written (before a crash re-ran it too), in
        order."""
        key = (self._step_op, self.name, _attempt(self._step))
        found = state.writes.get(key)
        if found is None:
            # Writes an older wf journaled without their attempt: taken as this attempt's,
            # as that wf did.
            found = state.writes.pop((self._step_op, self.name, None), [])
            state.writes[key] = found
        return found

    def _async_only(self, call: str) -> None:
        """Refuse ``call`` from a sync step's thread: there the coroutine it returns would never
        run, and the chunk would vanish without a word."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                f"stream {self.name!r}: in a sync step, write inside `with "
                f"wf.stream_writer() as out:` with plain calls (`out.write(data)`, "
                f"`out.close()`); `{call}` on the writer itself is for async steps, awaited "
                "inside `async with`"
            ) from None

    def write(self, data: bytes | str) -> Coroutine[Any, Any, int]:
        """Append one chunk (``str`` is encoded as UTF-8); durable when the awaited call
        returns. Returns the chunk's index. From a sync step (no ``await`` there) it raises
        ``wf.UsageError`` at once: a sync step writes through ``with``."""
        self._async_only("write()")
        return self._write(data)

    async def _write(self, data: bytes | str) -> int:
        self._check_step()
        if not self._held:
            raise UsageError("use the stream writer inside `async with wf.stream_writer():`")
        if self.closed:
            raise UsageError(f"stream {self.name!r} is closed")
        chunk = data.encode() if isinstance(data, str) else bytes(data)
        ctx = self._ctx
        state = ctx.state(StreamState)
        await self._count(state)  # forgotten by a write the store failed
        gaps = state.gaps.get(self.name)
        if gaps:
            index = gaps.pop(0)  # journaled before a crash, never written: fill it
        else:
            if (self.name, ctx.record.attempt) in state.closed:
                raise UsageError(
                    f"stream {self.name!r} is closed (by this step or an earlier attempt of "
                    "it): a closed stream stays closed, its readers have seen its end"
                )
            index = state.counts[self.name]
            state.counts[self.name] = index + 1
            run_attempt, attempt = _attempt(self._step)
            await ctx.write(
                ctx.event(
                    "stream_write",
                    step=self._step_op,
                    attempt=attempt,
                    run_attempt=run_attempt,
                    stream=self.name,
                    index=index,
                )
            )
            self._earlier(state).append(index)
        try:
            await ctx.lease.write_chunk(self.name, index, chunk)
        except BaseException:
            # Journaled, and stored or not (an EIO, a lost connection): the next write, this
            # step's retry's say, asks the store again, and fills the index if it lacks it.
            # Counted on, a chunk the store lacks would send the next ones past its end
            # (taken out of order: dropped).
            state.counts.pop(self.name, None)
            state.gaps.pop(self.name, None)
            raise
        return index

    def close(self) -> Coroutine[Any, Any, None]:
        """Mark the end of the stream: readers stop after the last chunk. It stays closed,
        for later attempts of the step too. From a sync step, as ``write``: ``wf.UsageError``."""
        self._async_only("close()")
        return self._close()

    async def _close(self) -> None:
        self._check_step()
        if not self.closed:
            ctx = self._ctx
            state = ctx.state(StreamState)
            run_attempt, attempt = _attempt(self._step)
            if (self.name, run_attempt) not in state.closed:
                await ctx.write(
                    ctx.event(
                        "stream_closed",
                        step=self._step_op,
                        attempt=attempt,
                        run_attempt=run_attempt,
                        stream=self.name,
                    )
                )
                state.closed.add((self.name, run_attempt))
            await self._count(state)  # forgotten by a write the store failed
            await ctx.lease.close_stream(self.name, state.counts[self.name])
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
        return self._writer._call(self._writer._write(data))

    def close(self) -> None:
        """Mark the end of the stream."""
        self._writer._call(self._writer._close())


def stream_writer(name: str | None = None) -> StreamWriter:
    """A writer for the current run's byte stream ``name`` (default ``"default"``).

    Only inside a step: streams carry side effects (progress, output) and steps are where side
    effects belong; a writer used after its step returned raises ``wf.UsageError``.

    Readers never see a chunk taken back or written twice: a step re-run after a crash maps its
    writes onto the chunks it wrote before; a retried step (a new attempt) appends its chunks
    after those of the attempts that failed. A stream a writer closed stays closed for the rest
    of the run's attempt (a write that would add a chunk raises ``wf.UsageError``).
    """
    step = current_step()
    if step is None:
        raise UsageError("wf.stream_writer() can only be used inside a step")
    name = DEFAULT_STREAM if name is None else check_segment("a stream name", name)
    return StreamWriter(step, name)


def cut_writer(journal: Sequence[Event], name: str) -> str | None:
    """The name of the step whose writing of stream ``name`` was cut off, or None.

    Cut off: the attempt of the step that wrote the stream's last chunk did not complete and no
    writer closed the stream after that chunk (its attempt failed and was not retried, or the
    run ended while it wrote). Asked once the stream has ended (closed, or its run ended);
    while the run goes on, a writer that failed may still be retried.
    """
    last: Event | None = None
    done = False
    names: dict[Any, str] = {}
    for event in journal:
        kind = event["type"]
        if kind == "step_started":
            names[event["op"]] = event["name"]  # written with the step's end, at times
        elif kind == "stream_write" and event["stream"] == name:
            last, done = event, False
        elif last is None:
            continue
        elif kind == "stream_closed" and event["stream"] == name:
            done = True
        elif kind == "step_completed" and event["op"] == last["step"]:
            done = done or last.get("attempt") in (None, event.get("attempt"))
    if last is None or done:
        return None
    return names.get(last["step"], f"op {last['step']}")


async def close_streams(ctx: RunContext, record: RunRecord) -> None:
    """Close the run's open streams (its outcome is recorded).

    Best effort: a stream whose files are damaged, or a listing that refuses as damaged, is
    left as it is, named in the store's faults, and the run ends all the same (run end is
    repeated by every drive until it is done: damage that raised would keep the run from
    ending for good)."""
    state = ctx.state(StreamState)
    if not state.counts and not state.writes:
        return  # the run never wrote a stream: nothing to list or close
    store = ctx.engine.store
    try:
        with collect_faults() as found:
            listed = await store.list_streams(ctx.run_id)
    except StoreCorrupted as error:
        # No store's listing refuses as damaged today (each leaves a damaged stream out and
        # names it); one that did must not keep the run from ending: the streams its journal
        # wrote are still closed by name, below.
        where = named_place(error, store.run_location(ctx.run_id))
        store.faults.note("streams", ctx.run_id, where, error)
        listed, found = {}, []
    for fault in found:  # said as the listing says them outside the collecting
        store.faults.note_collected(fault)
    damaged = {fault.item for fault in found if fault.kind == "stream"}
    for name, (count, closed) in listed.items():
        if not closed:
            await _close_at_run_end(ctx, name, count)
    # A stream the listing left out as damaged may still be found by its name (on the local
    # store, one whose only damage is its name file: its chunk files are named by its key),
    # and its followers wait for its close: the journal names every stream the run wrote.
    # So does a stream none of whose chunks reached the store (the process died between
    # journaling its first write and storing it): closed empty, as every store keeps a stream
    # closed with no chunk, not left "not found" to its readers; but only when the journal
    # has no chunk past the first. A healthy run's are all listed, so this asks nothing more
    # of the store.
    for name in sorted({stream for (_, stream, _) in state.writes} - listed.keys()):
        try:
            count, closed = await store.stream_info(ctx.run_id, name)
        except StoreCorrupted:
            continue  # its chunk files are damaged (the listing noted it): none to close by
        if closed or (not count and store.stream_fault(ctx.run_id, name)[0] in damaged):
            # No chunk of it reads and the listing named it damaged (its name file, and its
            # data): left as it is, its readers told of the damage (a close would repair its
            # index to its data, and hide it).
            continue
        # -1: opened and never written (its writer journals nothing): closed empty.
        journaled = max(
            (i for (_, s, _), idx in state.writes.items() if s == name for i in idx), default=-1
        )
        if not count and journaled > 0:
            # A chunk past the first was journaled, so one at least was stored (a stream's
            # chunks are written in order): the store lost them. Closed empty, it would read
            # as a stream that had nothing; left open, named in the faults.
            item, where = store.stream_fault(ctx.run_id, name)
            store.faults.note(
                "stream",
                item,
                where,
                f"the journal says {journaled + 1} chunks were written, the store has none",
            )
            continue
        await _close_at_run_end(ctx, name, count)


async def _close_at_run_end(ctx: RunContext, name: str, count: int) -> None:
    """Close one stream as its run ends; one whose files refuse as damaged (a data file that
    is a directory, its index still read) is noted and left open: its readers meet the
    damage by name. Noted as the store's own listing notes the stream (``Store.stream_fault``),
    so that it is one item in a worker's summary and ``wf store verify``."""
    try:
        await ctx.lease.close_stream(name, count)
    except StoreCorrupted as error:
        store = ctx.engine.store
        item, where = store.stream_fault(ctx.run_id, name)
        store.faults.note("stream", item, where, error)


def _streams_to_close(ctx: RunContext, record: RunRecord) -> bool:
    state = ctx.made_state(StreamState)
    return state is not None and bool(state.counts or state.writes)


STREAM_FEATURE = Feature(
    "streams",
    events={"stream_write": _read_write, "stream_closed": _read_closed},
    after_outcome=close_streams,
    outcome_needed=_streams_to_close,
)
"""Byte streams as the kernel sees them (``wf.engine._features``)."""
