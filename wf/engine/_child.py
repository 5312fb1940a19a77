"""Child runs: ``await wf.start(other, ...)`` inside a workflow.

The child's id is derived from the parent's id and the operation id (``<parent>.<op>``), so a
replay re-attaches to the same child instead of starting a second one. ``await child.result()``
inside the parent is a durable wait: the parent suspends, and the child's outcome, posted to the
parent's inbox when the child ends, wakes it (``child_finished`` in the parent's journal).

A child started with an explicit ``run_id`` that exists already (another parent's child, or a
run started from outside) is *adopted*: ``wf.start`` hands it back, and the run registers as one
more waiter of it. It posts ``child_waiter`` to the child's inbox (the child journals it and
tells every waiter when it ends; at its end it also reads the waiters it had not taken in yet),
then looks at the child: if it has ended, its outcome is taken in at once. The same look runs
before every drive of the parent, so a crash between the two never leaves it waiting.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from wf._exceptions import RunNotFound, UsageError
from wf.engine._aside import drive_aside
from wf.engine._context import RunContext, current_run
from wf.engine._enginelike import EngineLike
from wf.engine._features import Feature
from wf.engine._inbox import apply_messages
from wf.engine._ref import WorkflowRef
from wf.engine._run import Run, outcome
from wf.engine._workflow import Workflow
from wf.store import Event, InboxMessage, RunRecord, RunStatus
from wf.store._ids import MAX_ID_LENGTH, has_generated_form

T = TypeVar("T")


@dataclasses.dataclass
class ChildState:
    """A parent run's view of its children (``RunContext.state(ChildState)``)."""

    results: dict[str, Event] = dataclasses.field(default_factory=dict)
    """Child run id -> its ``child_finished`` event."""
    retried: set[str] = dataclasses.field(default_factory=set)
    """Children whose failure an earlier attempt took in: this attempt awaits their outcome
    again (``wf retry`` may have given them a new one), see ``_forget_failed``."""
    adopted: set[str] = dataclasses.field(default_factory=set)
    """Children this run did not start (an explicit ``run_id`` that existed): it looks at
    them before each drive, see ``refresh_children``."""
    waiters: set[str] = dataclasses.field(default_factory=set)
    """In a child: runs other than its parent that await its outcome (``child_waiter``)."""
    recording: set[str] = dataclasses.field(default_factory=set)
    """Children whose ``child_finished`` is being written: a second message about one (two
    inbox applies at once) is not recorded again while the first write is in flight."""


def _read_finished(ctx: RunContext, event: Event) -> None:
    state = ctx.state(ChildState)
    state.results[event["child"]] = event
    state.retried.discard(event["child"])


def _read_started(ctx: RunContext, event: Event) -> None:
    if event.get("adopted"):
        ctx.state(ChildState).adopted.add(event["child"])


def _read_waiter(ctx: RunContext, event: Event) -> None:
    ctx.state(ChildState).waiters.add(event["parent"])


def _forget_failed(ctx: RunContext, event: Event) -> None:
    """A new run-level attempt (``run_retrying``): as failed steps run again, a child that
    failed is awaited again, and its outcome now taken in."""
    state = ctx.state(ChildState)
    for child, finished in list(state.results.items()):
        if finished.get("status") == "failed":
            del state.results[child]
            state.retried.add(child)


def _finished(ctx: RunContext, child_id: str) -> bool:
    return child_id in ctx.state(ChildState).results


class ChildRun(Run[T]):
    """A handle on a child run. Inside its parent's workflow, ``result()`` is a durable wait."""

    def __init__(self, run_id: str, parent: RunContext, op: int) -> None:
        super().__init__(run_id, parent.engine)
        self._parent = parent
        self._op = op

    async def result(self, timeout: float | None = None) -> T:
        ctx = current_run()
        if ctx is not self._parent:
            return await super().result(timeout)
        while (finished := ctx.state(ChildState).results.get(self.id)) is None:
            await ctx.wait(self._op, "child", self.id, None, key=self.id)
        ctx.mark_done_at(
            float(finished.get("at") or finished.get("ts") or ctx.clock.now()), self._op
        )
        record = RunRecord(
            id=self.id,
            workflow=finished.get("name", ""),
            status=RunStatus(finished["status"]),
            output=finished.get("output"),
            error=finished.get("error"),
        )
        return outcome(record)  # type: ignore[no-any-return]


async def start_child(
    ctx: RunContext,
    workflow: Workflow[Any, Any] | WorkflowRef[Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    run_id: str | None = None,
    detach: bool = False,
) -> ChildRun[Any]:
    """Start (or, on replay, re-attach to) a child run of the current run (a ``wf.ref`` or a
    ``"module:attr"`` name starts it by name, as outside a run)."""
    if isinstance(workflow, str):
        workflow = WorkflowRef(workflow)
    name = workflow.name if isinstance(workflow, Workflow | WorkflowRef) else repr(workflow)
    op, history = ctx.begin_op("child", name)
    if history is not None:
        child_id = history.events[0]["child"]
    else:
        child_id = run_id if run_id is not None else derived_child_id(ctx.run_id, op)
        await ctx.settle()  # the child's input may come from results not yet durable
        # The child is the outside world: it may run at once (here or in a worker) and use a
        # hook token the workflow created, so the hooks created so far are live first.
        if ctx.outside_pending:
            await ctx.engine.features.before_outside(ctx)
        with ctx.storing():
            await ctx.engine.start(workflow, args, kwargs, run_id=child_id, detach=True, parent=ctx)
            existing = None if run_id is None else await _adopt(ctx, child_id)
        started = ctx.event("child_started", op=op, name=name, child=child_id)
        if existing is not None:
            started["adopted"] = True
        await ctx.write(started)
        if existing is not None:
            _read_started(ctx, started)
            if existing.status.is_terminal:
                await _take_in(ctx, existing)
    if not detach and child_id not in ctx.state(ChildState).results:
        drive_aside(ctx.engine, child_id)
    return ChildRun(child_id, ctx, op)


async def _adopt(ctx: RunContext, child_id: str) -> RunRecord | None:
    """If the run ``child_id`` is not this run's own child (it existed: another run or the
    outside started it), register this run as a waiter of it and return its record as it is
    after that; None for a child of this run."""
    store = ctx.engine.store
    try:
        child = await store.get_run(child_id)
    except RunNotFound:
        return None  # deleted (its tombstone keeps the id): its handle's result says so
    if child.parent_id == ctx.run_id:
        return None
    if not child.status.is_terminal:
        # Posted before the look below: if the child has not ended then, it ends after the
        # post and tells this run (it reads its waiters at its end, see ``notify_parent``).
        await store.post(child_id, "child_waiter", {"parent": ctx.run_id})
        child = await store.get_run(child_id)
    return child


async def _take_in(ctx: RunContext, child: RunRecord) -> None:
    """Take in the outcome of an ended child as if it had posted it."""
    asked = f"asked:{child.id}:{ctx.record.attempt}"
    await on_child_message(ctx, InboxMessage(asked, "child_done", outcome_message(child)), False)


_OP_ROOM = 11
"""Characters a parent id leaves for its children's ``.<op>`` suffix (ops up to 10 digits)."""


def derived_child_id(parent_id: str, op: int) -> str:
    """``<parent>.<op>``, or a ``UsageError`` if the parent's id leaves no room for the suffix.

    Checked for any op, not for this one: a parent whose id is too long fails at its first
    ``wf.start`` of a child, not after ten children have started (when ``.10`` stops fitting).
    """
    if len(parent_id) + _OP_ROOM > MAX_ID_LENGTH:
        raise UsageError(
            f"run id {parent_id!r} is too long to derive its child runs' ids "
            f"({len(parent_id)} characters; a parent's id may have at most "
            f"{MAX_ID_LENGTH - _OP_ROOM}): give the child an id with wf.start(..., run_id=...)"
        )
    return f"{parent_id}.{op}"


async def on_child_message(ctx: RunContext, message: InboxMessage, live: bool) -> None:
    """Parent side: record a child's outcome and wake whoever waits for it."""
    data = message.data
    state = ctx.state(ChildState)
    if data["child"] in state.results or data["child"] in state.recording:
        # Told twice (the child's driver crashed after telling, two applies of the inbox at
        # once): recorded, or being recorded. Marked before the write's await, so two
        # concurrent applies cannot both get through.
        return
    state.recording.add(data["child"])
    event = ctx.event(
        "child_finished",
        child=data["child"],
        name=data.get("workflow"),
        status=data["status"],
        output=data.get("output"),
        error=data.get("error"),
        message=message.id,
    )
    event["at"] = float(data.get("at") or event["ts"])  # when the child ended
    try:
        await ctx.write(event)
    finally:
        state.recording.discard(data["child"])
    _read_finished(ctx, event)
    ctx.resolve_waits(lambda w: w.kind == "child" and w.key == data["child"])


async def refresh_children(ctx: RunContext) -> None:
    """Parent side, before a drive: a child whose failure an earlier attempt took in is asked
    again, and so is an adopted child not heard from. If it has ended (failed again, completed
    after ``wf retry``, ended before it took in this run as a waiter), its outcome now is
    taken in as if the child had posted it; if it runs, it posts when it ends."""
    state = ctx.made_state(ChildState)  # made by the journal's events that fill it
    if state is None or (not state.retried and not state.adopted):
        return
    store = ctx.engine.store
    for child_id in sorted((state.retried | state.adopted) - set(state.results)):
        try:
            child = await store.get_run(child_id)
        except RunNotFound:
            continue
        if child.status.is_terminal:
            await _take_in(ctx, child)


async def on_waiter_message(ctx: RunContext, message: InboxMessage, live: bool) -> None:
    """Child side: another run awaits this run's outcome; journaled, told at the end."""
    parent = message.data["parent"]
    state = ctx.state(ChildState)
    if parent == ctx.record.parent_id or parent in state.waiters:
        return
    state.waiters.add(parent)  # before the write's await: a second apply sees it
    await ctx.write(ctx.event("child_waiter", parent=parent, message=message.id))


def outcome_message(record: RunRecord) -> dict[str, Any]:
    """What a child posts to its parent when it ends."""
    return {
        "child": record.id,
        "workflow": record.workflow,
        "status": record.status.value,
        "output": record.output,
        "error": record.error,
        "at": record.updated_at,
    }


async def notify_parent(ctx: RunContext, record: RunRecord) -> None:
    """Child side, after its outcome is recorded: tell the parent, and every other run that
    awaits it (journaled waiters, and those whose ``child_waiter`` it had not taken in)."""
    engine = ctx.engine
    parents = [] if record.parent_id is None else [record.parent_id]
    waiters = set(ctx.state(ChildState).waiters)
    if _may_be_adopted(record):
        # Posted before the outcome was recorded (a waiter that saw the run unended): read
        # now, after it, so none is missed.
        inbox = await engine.store.read_inbox(record.id)
        waiters |= {m.data["parent"] for m in inbox if m.kind == "child_waiter"}
    parents += sorted(w for w in waiters if w not in parents)
    for parent_id in parents:
        try:
            await engine.store.post(parent_id, "child_done", outcome_message(record))
        except RunNotFound:
            continue  # the parent is gone (deleted by hand: retention never deletes a live family)
        parent = engine.live.get(parent_id)
        if parent is not None:
            await apply_messages(parent, await engine.store.read_inbox(parent.run_id), live=True)
        elif parent_id == record.parent_id and _drive_parent_here(engine, record):
            # ``result()`` of the family's root waits here, driving its due runs: the parent
            # (the post made it due) is driven at once, not at that wait's next look (every
            # 2 s: a chain of ten nested children took 20 s under ``wf run``). A process that
            # drives it already keeps it; this drive then ends at once.
            drive_aside(engine, parent_id)


def _drive_parent_here(engine: EngineLike, record: RunRecord) -> bool:
    """Whether a child that ended drives its parent here: a ``result()`` here waits on the
    family (its root, or the parent itself), and nothing here drives the parent yet."""
    followed = engine.followed
    return (
        bool(followed)
        and (record.root_id in followed or record.parent_id in followed)
        and record.parent_id not in engine.drivers
        and engine.drives_pin(record.deployment)
    )


def _may_be_adopted(record: RunRecord) -> bool:
    """Whether another run may await this one: it has an id given by hand. A generated one
    (``new_run_id``) is never another call's ``run_id``, nor is a child's derived one
    (``<parent>.<op>``, ``derived_child_id``): those runs' ends read no inbox for waiters."""
    parent = record.parent_id
    if parent is not None and record.id.startswith(parent + "."):
        suffix = record.id[len(parent) + 1 :]
        return not (suffix.isascii() and suffix.isdigit())
    return not has_generated_form(record.id)


def _awaited_by_others(state: ChildState | None) -> bool:
    return state is not None and bool(state.waiters)


CHILD_FEATURE = Feature(
    "child runs",
    messages={"child_done": on_child_message, "child_waiter": on_waiter_message},
    events={
        "child_started": _read_started,
        "child_finished": _read_finished,
        "child_waiter": _read_waiter,
        "run_retrying": _forget_failed,
    },
    waits={"child": _finished},
    before_drive=refresh_children,
    after_outcome=notify_parent,
    outcome_needed=lambda ctx, record: (
        record.parent_id is not None  # its parent is told
        or _may_be_adopted(record)
        or _awaited_by_others(ctx.made_state(ChildState))
    ),
)
"""Child runs as the kernel sees them (``wf.engine._features``)."""
