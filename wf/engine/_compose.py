"""Composing durable operations: ``map``, ``select`` / ``first``, ``timeout`` / ``deadline`` and
``rollback``.

Each records what replay needs to take the same path: ``select`` records which operation won,
``timeout`` records its deadline (and where its expiry was delivered, see ``_scopes``), and
``rollback`` registers compensations in program order so a replay rebuilds the same list.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import Awaitable, Coroutine, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from wf._exceptions import UsageError
from wf.engine._context import (
    RunContext,
    SelectBranch,
    ends_into,
    require_run,
    select_branches,
)
from wf.engine._durations import due_after, wait_seconds
from wf.engine._futures import OpCall, note_awaited, op_task, task_ended_at
from wf.engine._inbox import apply_messages
from wf.engine._scopes import CancelScope, ScopeTimedOut, _current_scope, current_scope
from wf.engine._step import Step
from wf.engine._workflow import Workflow
from wf.store._limits import check_at

T = TypeVar("T")
R = TypeVar("R")


# -- map ------------------------------------------------------------------------------------


async def _gather_all(futures: list[asyncio.Future[Any]]) -> list[Any]:
    try:
        return list(await asyncio.gather(*futures))
    except BaseException:
        for future in futures:
            future.cancel()
        raise


def map(step: Step[[T], R], items: Iterable[T]) -> Awaitable[list[R]]:
    """Run ``step`` once per item concurrently; results in input order.

    The first failure cancels the calls still pending (a running sync step finishes in its
    thread, its result discarded; its run's outcome waits for it) and is raised.
    """
    ctx = require_run("wf.map()")
    if not isinstance(step, Step):
        # Anything else (a workflow called inline, a helper coroutine) may call several steps
        # per item, whose op ids would then depend on which item's step ended first: a replay
        # could not give them back in the same order (docs/guide.md, concurrency).
        what = (
            f"workflow {step.name!r}"
            if isinstance(step, Workflow)
            else f"{type(step).__name__} {getattr(step, '__qualname__', step)!r}"
        )
        raise UsageError(
            f"wf.map() runs a step per item, and {what} is not a step; to run a workflow "
            "per item, start child runs: runs = [await wf.start(flow, item) for item in "
            "items], then await asyncio.gather(*(run.result() for run in runs))"
        )
    calls = [step(item) for item in items]  # op ids taken now, in input order
    return OpCall(lambda: op_task(_gather_all([asyncio.ensure_future(c) for c in calls])), run=ctx)


# -- select / first -------------------------------------------------------------------------


def select(*awaitables: Awaitable[Any]) -> Awaitable[tuple[int, Any]]:
    """Wait for the first of several operations; return ``(index, result)``.

    The winner is the operation whose outcome came first *by the durable clock*: a timer ends
    at its deadline, a hook payload when it reached the store, a child when it ended, a step
    when it completed — so a run resumed late (a payload and an expired timer both waiting)
    picks the same winner as a run that was live all along. Messages already in the store are
    taken in before deciding. The winner is recorded, so a replay takes the same branch; the
    others are cancelled. Ties go to the lowest index. A candidate may be a helper coroutine:
    the op ids a losing one took are recorded with the decision, so a replay, which runs only
    the winner, gives the operations after the select the same ids.
    """
    ctx = require_run("wf.select()")
    if not awaitables:
        raise UsageError("wf.select() needs at least one awaitable")
    try:
        op, history = ctx.begin_op("select", "select")
    except BaseException:
        # The run is suspending, crashed or diverged: the candidates never run (and were not
        # forgotten by the user, so no "never awaited" warning for them).
        for awaitable in awaitables:
            if isinstance(awaitable, Coroutine):
                awaitable.close()
        raise
    if history is not None:
        winner = int(history.events[0]["index"])
        ctx.skip_ops(history.events[0].get("lost_ops", ()))
        for index, awaitable in enumerate(awaitables):
            if index != winner and isinstance(awaitable, Coroutine):
                awaitable.close()  # never started: a loser does not run again on replay
        return OpCall(lambda: op_task(_replayed_select(winner, awaitables[winner])), run=ctx)
    return OpCall(lambda: op_task(_start_select(ctx, op, awaitables)), run=ctx)


async def _start_select(
    ctx: RunContext, op: int, awaitables: Sequence[Awaitable[Any]]
) -> tuple[int, Any]:
    # In the select's own task: the candidates' ends are theirs (``_branch``), not those of
    # the branch the select is in (which its decision notes: ``_select``).
    outer = ends_into.get()
    token = ends_into.set(None)
    branches: list[SelectBranch | None] = []
    futures = [_branch(ctx, a, branches) for a in awaitables]
    index, value = await _select(ctx, op, futures, branches)
    ends_into.reset(token)
    if outer is not None and outer.run is ctx:
        ended = _ended_at(ctx, futures[index], branches[index])
        outer.note_end(ctx.clock.now() if ended is None else ended)
    won = branches[index]
    if won is not None:  # what the winner awaited, the code awaiting the select awaited
        for future in won.awaited:
            note_awaited(future)
    return index, value


def _branch(
    ctx: RunContext, awaitable: Awaitable[Any], branches: list[SelectBranch | None]
) -> asyncio.Future[Any]:
    # A wf operation's own future (not a task around it) carries when it ended.
    if isinstance(awaitable, OpCall):
        branches.append(None)  # its op id was taken when it was called, replayed alike
        future = awaitable.future()
        if awaitable.wf_ended_at is not None:  # a recorded outcome: noted only when selected
            ctx.timed(future, awaitable.wf_ended_at)
        return future
    if isinstance(awaitable, asyncio.Future):
        branches.append(None)  # started by the caller: it runs on replay too
        return awaitable
    # A helper coroutine takes its op ids as it runs, in a task (and the tasks it starts) that
    # notes them, so that a decision it loses journals them for replays to skip; and the ends
    # of its operations, so that it ended, by the durable clock, when the latest of them did.
    branch = SelectBranch(ctx, current_scope())
    branches.append(branch)
    token = select_branches.set((*select_branches.get(), branch))
    ends = ends_into.set(branch)
    try:
        task = asyncio.ensure_future(awaitable)
    finally:
        ends_into.reset(ends)
        select_branches.reset(token)
    return task


def _ended_at(
    ctx: RunContext, future: asyncio.Future[Any], branch: SelectBranch | None
) -> float | None:
    """When candidate ``future`` ended by the durable clock, None if wf does not know. A
    helper coroutine (``branch``) ended when the latest operation of its code, or operation
    task it awaited (one begun before the select), did."""
    at = ctx.done_at.get(future)
    if at is not None or branch is None or not future.done():
        return at
    at = branch.ended_at
    for awaited in branch.awaited:
        ended = task_ended_at(ctx, awaited)
        if ended is None:
            made_here = getattr(awaited, "wf_branch", None) is branch  # its ends are the branch's
            if awaited.done() and not awaited.cancelled() and not made_here:
                return None  # made before the select, it ended when wf does not know
            continue
        if at is None or ended > at:
            at = ended
    return at


async def _replayed_select(winner: int, awaitable: Awaitable[Any]) -> tuple[int, Any]:
    return winner, await awaitable


_SETTLE_TURNS = 3
"""Event-loop turns a decision waits after the first outcome, so that outcomes of the same
moment (a resume finds an expired timer and a received payload at once) all take part."""


async def _select(
    ctx: RunContext,
    op: int,
    futures: Sequence[asyncio.Future[Any]],
    branches: Sequence[SelectBranch | None],
) -> tuple[int, Any]:
    loop = asyncio.get_running_loop()
    decided: asyncio.Future[None] = loop.create_future()
    deciding = False

    def on_done(_: asyncio.Future[Any]) -> None:
        nonlocal deciding
        if not deciding and not decided.done():  # done: the select itself was cancelled
            # From the first outcome until the winner is durable the run is making progress:
            # it must not suspend (and lose the outcome) halfway through the decision.
            deciding = True
            ctx.add_active(1)
            decided.set_result(None)
            if ctx.timed_blocks:
                ctx.deciding[op] = (current_scope(), futures, branches, loop.create_future())

    try:
        for future in futures:
            future.add_done_callback(on_done)
        try:
            await decided
            await _take_in_messages(ctx)
            for _ in range(_SETTLE_TURNS):
                await asyncio.sleep(0)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        winner = _earliest(ctx, futures, branches)
        if ctx.timed_blocks:  # a block around it that a later drive ends ended no sooner
            ended = _ended_at(ctx, futures[winner], branches[winner])
            ctx.decided_at[op] = ctx.clock.now() if ended is None else ended
            # ... and no later for its losers' ends (a payload that came after the winner).
            ctx.dropped_ops.update(
                ctx.task_ops[f] for i, f in enumerate(futures) if i != winner and f in ctx.task_ops
            )
            ctx.dropped_ops.update(
                lost
                for i, branch in enumerate(branches)
                if branch is not None and i != winner
                for lost in branch.ops
            )
        decided_event = ctx.event("select_decided", op=op, name="select", index=winner)
        losers = _losing_steps(ctx, futures, branches, winner)
        if losers:
            decided_event["cancelled"] = losers
        lost_ops = _lost_ops(branches, winner)
        if lost_ops:
            decided_event["lost_ops"] = lost_ops
        await ctx.write(decided_event)
    finally:
        # A select cancelled before any outcome (a suspension, a timeout scope) cancels its
        # branches above; their callbacks would fire after this block and count the run active
        # for good, so they are taken off first.
        for future in futures:
            future.remove_done_callback(on_done)
        if deciding:
            ctx.add_active(-1)
            entry = ctx.deciding.pop(op, None)
            if entry is not None:
                entry[3].set_result(None)
    for index, future in enumerate(futures):
        if index != winner:
            future.cancel()
    return winner, futures[winner].result()


def _lost_ops(branches: Sequence[SelectBranch | None], winner: int) -> list[int]:
    """The op ids the losing coroutine branches took, which they stop taking now."""
    lost: set[int] = set()
    for index, branch in enumerate(branches):
        if branch is not None and index != winner:
            branch.lost = True
            lost.update(branch.ops)
    return sorted(lost)


def _losing_steps(
    ctx: RunContext,
    futures: Sequence[asyncio.Future[Any]],
    branches: Sequence[SelectBranch | None],
    winner: int,
) -> list[int]:
    """The operations of the steps still running that the decision cancels: journaled with it
    (``cancelled``), so ``wf inspect`` shows them cancelled rather than running until the run
    ends (a sync step's thread runs on to its end, its result dropped). A losing candidate
    that is a step is one; so is a step a losing helper coroutine is in (it runs in a task of
    its own, which the branch's cancellation reaches), found among the ops the branch took."""
    by_task = {id(task): op for op, task in ctx.step_calls.items()}
    losers = {
        by_task[id(future)]
        for index, future in enumerate(futures)
        if index != winner and not future.done() and id(future) in by_task
    }
    for index, branch in enumerate(branches):
        if branch is not None and index != winner:
            losers.update(op for op in branch.ops if op in ctx.step_calls)
    return sorted(losers)


async def _take_in_messages(ctx: RunContext) -> None:
    """Apply what waits in the run's inbox (a payload sent before a timer's deadline but not
    polled yet must win over that timer)."""
    messages = await ctx.engine.store.read_inbox(ctx.run_id)
    if messages:
        await apply_messages(ctx, messages, live=True)


def _earliest(
    ctx: RunContext,
    futures: Sequence[asyncio.Future[Any]],
    branches: Sequence[SelectBranch | None],
) -> int:
    """Index of the finished candidate that ended first by the durable clock."""
    now = ctx.clock.now()
    done = [index for index, future in enumerate(futures) if future.done()]
    for index in done:
        future = futures[index]
        error = None if future.cancelled() else future.exception()
        if error is not None and not isinstance(error, Exception):
            return index  # a cancellation reaching a candidate is never lost in a race
    return min(done, key=lambda index: (_ending(ctx, futures, branches, index, now), index))


def _ending(
    ctx: RunContext,
    futures: Sequence[asyncio.Future[Any]],
    branches: Sequence[SelectBranch | None],
    index: int,
    now: float,
) -> float:
    """When finished candidate ``index`` ended by the durable clock (unknown: ``now``)."""
    at = _ended_at(ctx, futures[index], branches[index])
    return now if at is None else at


async def _first(selection: Awaitable[tuple[int, Any]]) -> Any:
    return (await selection)[1]


def first(*awaitables: Awaitable[Any]) -> Awaitable[Any]:
    """The result of whichever operation finishes first (see ``select``)."""
    return _first(select(*awaitables))


# -- timeout / deadline ----------------------------------------------------------------------


class timeout:
    """A durable time limit on a block: ``async with wf.timeout(seconds):``.

    Its deadline is recorded when the block is entered, so after a crash and replay only the
    remaining time is honoured. When it expires, the block stops at its next durable operation
    (a running step finishes first) and ``TimeoutError`` is raised at the end of the block:
    also when the deadline passed during the block's last operation (the block then ran to its
    end, and its results are dropped), or had passed already when the block was entered (its
    first operation is stopped). Unlike ``asyncio.timeout``, which raises only if it cancelled
    the body, a deadline that passed before the block ended is always a ``TimeoutError``, unless
    another exception leaves the block. Where it was raised, or that the block ended in time, is
    journaled, so a replay decides the same, whatever the time then.
    """

    def __init__(self, seconds: float | _dt.timedelta) -> None:
        self._seconds: float | None = wait_seconds("wf.timeout", seconds)
        self._until: float | None = None
        self._scope: CancelScope | None = None
        self._timer: asyncio.Task[None] | None = None
        self._token: Any = None
        self._until_recorded: float | None = None
        self._expired: bool | None = None
        self._end_journaled = True

    @property
    def expired(self) -> bool:
        """Whether the deadline passed while the block ran; once the block has ended, whether
        it raised ``TimeoutError`` (the same on replay)."""
        if self._expired is not None:
            return self._expired
        return self._scope is not None and self._scope.fired

    async def __aenter__(self) -> timeout:
        ctx = require_run("wf.timeout()")
        if self._until is None:  # refused before it takes an operation id
            due_after("wf.timeout", ctx.clock.now(), self._seconds or 0.0)
        op, history = ctx.begin_op("timeout", "timeout")
        until: float | None
        if history is not None:
            recorded = history.events[0]["until"]
            # None: no deadline, ``wf.timeout(inf)`` of a wf before it refused infinity (JSON
            # has none, so it was written null): the block is never timed out.
            until = None if recorded is None else float(recorded)
            self._end_journaled = bool(history.events[0].get("end_journaled"))
        else:
            until = (
                self._until
                if self._until is not None
                else ctx.clock.now() + max(0.0, self._seconds or 0.0)
            )
            started = ctx.event("timeout_started", op=op, name="timeout", until=until)
            started["end_journaled"] = True
            # No await here: a replay enters the block without one, so a task beside it must
            # not take the next op id meanwhile (durable with the run's next durable write: a
            # crash before it loses a block that did nothing durable yet).
            ctx.write_soon(started)
        scope = CancelScope(op, current_scope() or ctx.root_scope, ops=[], awaited=[])
        ctx.timed_blocks += 1
        ctx.scopes[op] = scope
        self._scope = scope
        self._until_recorded = until
        if history is None and until is not None and until <= ctx.clock.now():
            # Over already (a past deadline, ``timeout(0)``): the block's first operation is
            # stopped, rather than those that start before the timer's task gets to run.
            ctx.fire(scope)
        # The timer runs outside the scope it guards (created before the scope is entered).
        self._timer = asyncio.get_running_loop().create_task(_expire(ctx, scope, until))
        self._token = _current_scope.set(scope)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._scope is not None and self._timer is not None
        _current_scope.reset(self._token)
        self._timer.cancel()
        ctx = require_run("wf.timeout()")
        scope = self._scope
        try:
            return self._exit(ctx, scope, exc_type, exc)
        finally:
            scope.ops = scope.awaited = None
            ctx.timed_blocks -= 1
            if not ctx.timed_blocks:
                ctx.live_ops.clear()
                ctx.decided_at.clear()
                ctx.task_ops.clear()
                ctx.dropped_ops.clear()

    def _exit(
        self,
        ctx: RunContext,
        scope: CancelScope,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
    ) -> bool:
        if scope in ctx.pending_scopes:
            ctx.pending_scopes.remove(scope)
        if isinstance(exc, ScopeTimedOut) and exc.scope is scope:
            self._expired = True
            raise TimeoutError(f"wf.timeout expired (operation #{scope.op})") from None
        self._expired = exc_type is None and self._expired_at_exit(ctx, scope)
        if self._expired:
            # The deadline passed while the block's last operation ran (no operation was left
            # to stop): the promise is a TimeoutError at the end of the block all the same.
            scope.fired = True
            raise TimeoutError(f"wf.timeout expired (operation #{scope.op}) before its block ended")
        return False

    def _expired_at_exit(self, ctx: RunContext, scope: CancelScope) -> bool:
        """Whether the block that ended with no error is timed out: a journaled fact (a
        ``cancel_delivered`` at ``exit``, or a ``timeout_ended``), or decided now and journaled
        so, by the durable clock: the block ended when what it waited for ended (the latest
        recorded end of its operations, or of what ended while this drive replayed it), never
        by the clock of a drive that reaches it later. Only a block with an operation begun in
        this drive ends by this drive's clock."""
        assert scope.op is not None
        mark = ctx.delivery_marks.get(scope.op)
        if mark is not None and mark[0] == "exit":
            del ctx.delivery_marks[scope.op]
            return True
        opened = ctx.history.get(scope.op)
        if opened is not None and opened.events[-1]["type"] == "timeout_ended":
            return False
        if ctx.replaying and not self._end_journaled:
            # A wf that journaled only a late end: the journal goes on past this block with no
            # mark, so it ended in time then (and a wf that wrote no marks never raised here).
            return False
        until = self._until_recorded
        if until is None:
            return False
        if self._end_journaled:
            ended = self._durable_end(ctx, scope)
        else:
            ended = self._recorded_end(ctx, scope)
        if ended is not None:
            expired = ended >= until
        elif ctx.checking:
            return False  # unreachable: a check stops at the first op the journal lacks
        else:
            ended = ctx.clock.now()
            expired = scope.fired or ended >= until
        ctx.decided_at[scope.op] = ended
        if expired:
            ctx.mark_delivered(scope.op, "exit", scope)
        else:
            # No flush of its own: durable with the run's next durable write (its outcome, a
            # suspension, the next operation's), as a timed-out block's mark is.
            ctx.write_soon(ctx.event("timeout_ended", op=scope.op, name="timeout"))
        return expired

    def _durable_end(self, ctx: RunContext, scope: CancelScope) -> float | None:
        """When the block ended by the durable clock, the first drive to reach its end being
        a later one than the drive that entered it; None if an operation of the block ended
        in this drive other than by the durable clock (begun in it, or a step that finished
        in it: the block ends now, by this drive's clock).

        No sooner than it began, than the recorded end of each of its operations that
        records one (a step's outcome, a select's decision, an inner block's end: those this
        drive decided by when they ended, ``RunContext.decided_at``), nor than each operation
        task the block's code awaited ended (``CancelScope.awaited``): a sleep at its deadline
        or its wake, a payload when it reached the store, a child when it ended, an operation
        begun before the block (the one that kept it open past the earlier drive). Not by
        what the block did not await (a task beside it). A sleep's own recorded start is no
        end (a select may have dropped it long before its deadline)."""
        assert scope.op is not None
        opened = ctx.history.get(scope.op)
        if opened is None or scope.op in ctx.live_ops:
            return None
        latest = float(opened.events[0].get("ts", 0.0))
        for op in scope.ops or ():
            if op in ctx.dropped_ops:
                continue
            ended = ctx.decided_at.get(op)
            if ended is None:
                ended = ctx.recorded_end(op)
                if ended is None:
                    return None
                if ctx.history[op].kind == "sleep":
                    continue
            latest = max(latest, ended)
        for task in scope.awaited or ():
            at = task_ended_at(ctx, task)
            if at is not None:
                latest = max(latest, at)
        return latest

    def _recorded_end(self, ctx: RunContext, scope: CancelScope) -> float | None:
        """When the journal shows the block's last operation ended (an empty block: when it
        began), or None when one of them ended in this drive (or is not recorded): how a
        block of a journal without ``end_journaled`` is decided."""
        assert scope.op is not None
        ops = scope.ops or ()
        if not ops:
            opened = ctx.history.get(scope.op)
            if opened is None or scope.op in ctx.live_ops:
                return None
            return float(opened.events[0].get("ts", 0.0))
        latest = 0.0
        for op in ops:
            ended = ctx.recorded_end(op)
            if ended is None:
                return None
            latest = max(latest, ended)
        return latest


class deadline(timeout):
    """Like ``wf.timeout`` but until an aware ``datetime``: ``async with wf.deadline(when):``."""

    def __init__(self, when: _dt.datetime) -> None:
        if not isinstance(when, _dt.datetime) or when.tzinfo is None or when.utcoffset() is None:
            raise UsageError("wf.deadline() needs a timezone-aware datetime")
        super().__init__(0)
        self._seconds = None
        self._until = check_at("wf.deadline", when)


async def _expire(ctx: RunContext, scope: CancelScope, until: float | None) -> None:
    assert scope.op is not None
    if until is None:
        return  # no deadline (an older wf's ``wf.timeout(inf)``)
    try:
        await ctx.wait(scope.op, "timeout", None, until, internal=True)
        await _earlier_outcomes(ctx, scope, until)
    except BaseException:
        return
    ctx.fire(scope)


async def _earlier_outcomes(ctx: RunContext, scope: CancelScope, until: float) -> None:
    """Before the block's deadline fires: let what ended earlier by the durable clock act
    first. A drive that comes after both (the run was not driven meanwhile) finds a sleep of
    the block that ended before the deadline due at the same moment as the deadline: its
    wait resolves, and a select it is a branch of decides (its winner ended in time), before
    the deadline cancels what still waits. A live drive has nothing of the kind left then."""
    while True:
        waits = [
            entry.future
            for entry in ctx.waits
            if not entry.internal
            and entry.deadline is not None
            and entry.deadline < until
            and not entry.future.done()
            and scope.contains(entry.scope, ctx.root_scope)
        ]
        if waits:
            await asyncio.wait(waits)
            await _turns()
            continue
        now = ctx.clock.now()
        selects = [
            done
            for where, candidates, branches, done in ctx.deciding.values()
            if not done.done()
            and scope.contains(where, ctx.root_scope)
            and min(
                _ending(ctx, candidates, branches, index, now)
                for index, candidate in enumerate(candidates)
                if candidate.done()
            )
            < until
        ]
        if not selects:
            return
        await asyncio.wait(selects)
        await _turns()  # the block's code goes on from the decision: it may end the block


async def _turns() -> None:
    for _ in range(_SETTLE_TURNS):
        await asyncio.sleep(0)


# -- rollback -------------------------------------------------------------------------------


def rollback(step: Step[..., Any], *args: Any, **kwargs: Any) -> None:
    """Register a compensation: if the run fails or is cancelled, ``step(*args)`` runs as a
    durable step. Compensations run last-in-first-out, each recorded, so a crash while
    compensating resumes where it stopped."""
    if not isinstance(step, Step):
        raise UsageError("wf.rollback() needs a @wf.step as the compensation")
    ctx = require_run("wf.rollback()")
    op, history = ctx.begin_op("rollback", step.name)
    if history is None:
        ctx.write_soon({"type": "rollback_registered", "op": op, "name": step.name})
    ctx.rollbacks.append((step, args, kwargs))


async def compensate(ctx: RunContext) -> list[BaseException]:
    """Run the registered compensations, last first; returns the errors of those that failed."""
    ctx.pending_scopes.clear()  # compensations run even though the run was cancelled
    errors: list[BaseException] = []
    while ctx.rollbacks:
        step, args, kwargs = ctx.rollbacks.pop()
        try:
            await step(*args, **kwargs)
        except Exception as exc:
            errors.append(exc)
    return errors
