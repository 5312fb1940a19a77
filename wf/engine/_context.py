"""The state of one run while a process drives it: operation ids, history, waits, suspension.

Every durable operation calls ``RunContext.begin_op`` synchronously, at the moment user code calls
it, which hands out the next operation id and — when the journal already has that id — checks that
the journal recorded the same kind of operation with the same name. So ids follow program order
whatever order concurrent operations finish in.

Suspension: a run is *quiescent* when no operation that can complete soon is in flight (no step
running, no short timer) and at least one long wait (a far timer, a hook, a child) is pending.
When that stays true for a few event-loop turns (the workflow's own task switching settles), the
run suspends: the context records the earliest deadline, cancels the workflow task and every
operation attempted while it unwinds raises ``Suspending``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from wf import _events
from wf._exceptions import NondeterminismError, StoreCorrupted, StoreError, UsageError
from wf.engine._clock import thread_work
from wf.engine._instruments import events as _observe
from wf.engine._scopes import CancelScope, current_scope

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike
    from wf.engine._instruments import DriveObserver
    from wf.store import Event, Lease, RunRecord

_current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "wf_current_run", default=None
)
_current_step: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar(
    "wf_current_step", default=None
)


@dataclasses.dataclass(slots=True, eq=False)
class SelectBranch:
    """A ``wf.select`` branch that runs as a task of its own (a helper coroutine): it takes
    its op ids only as it runs, so they are noted here. When it loses, the decision journals
    them (``lost_ops``) and a replay, which runs only the winner, skips them."""

    run: RunContext
    """The run whose select it is: a run started from the branch (a child driven in this
    process, whose task inherits the context) takes its own ids."""
    scope: CancelScope | None = None
    """The timeout scope around the select: the blocks inside the branch are its code's."""
    ops: list[int] = dataclasses.field(default_factory=list)
    lost: bool = False
    """Set by the decision: the branch is being cancelled and takes no more op ids."""
    awaited: list[asyncio.Future[Any]] = dataclasses.field(default_factory=list)
    """The operation futures the branch's code awaited (``_futures.note_awaited``): a timeout
    block around the select ended no sooner than those of its winner (``_compose._select``),
    and is not held open by those of a loser."""
    ended_at: float | None = None
    """When, by the durable clock, the latest operation whose outcome came in the branch's
    code ended (``RunContext.mark_done_at``, a replayed step's recorded end): when the branch
    ended, once its task is done (its code takes no durable time of its own). None while
    none has ended."""

    def note_end(self, at: float) -> None:
        """An operation of the branch's code ended at ``at`` by the durable clock."""
        if self.ended_at is None or at > self.ended_at:
            self.ended_at = at


select_branches: contextvars.ContextVar[tuple[SelectBranch, ...]] = contextvars.ContextVar(
    "wf_select_branches", default=()
)
"""The select branches the running code is part of (inner selects nest in outer branches)."""

ends_into: contextvars.ContextVar[SelectBranch | None] = contextvars.ContextVar(
    "wf_ends_into", default=None
)
"""The innermost select branch the running code is part of, which the ends of its operations
are noted in (``SelectBranch.ended_at``); None outside one, and in the tasks a select starts
for candidates that are wf operations (an inner select's losers are no end of the branch
around it: the inner decision notes its winner's end)."""

# The journal schema (``wf._events``): which events open an operation, and the fields each kind
# must have.
OPENING_EVENTS = _events.OPENING_EVENTS
_REQUIRED = _events.REQUIRED
"""The fields replay reads from each kind of event. A journal line that is valid JSON but lacks
one is corruption, found when the journal is indexed (the run fails with ``StoreCorrupted``
naming the event), never as a ``KeyError`` raised into workflow code halfway through a replay,
where an ``except Exception`` could even swallow it."""
_REQUIRED_SETS = {
    kind.name: (
        frozenset(kind.fields),
        "op" in kind.fields,
        0 if kind.name == _events.FIRST_EVENT else -1 if kind.outcome is not None else None,
        "until" in kind.fields,
    )
    for kind in _events.KINDS.values()
}
"""Every kind of event, for a quick check of each: its fields as a set, whether ``op`` is one
(it must then be an integer), its place in the journal if that is fixed (0: the first
event; -1: the last, an outcome's), else None, and whether ``until`` is one (it must then be
a time, or null: no deadline). One found elsewhere gets the whole check
(``wf._events.event_damage``: a failed run's retry may follow its outcome). An event of no
kind here (a stray write, a newer wf's event) is damage too, never passed over: replaying
around it could give a wrong result."""
_TIMES = (float, int, type(None))
"""What an ``until`` may be: a time, or None (no deadline: an older wf's ``wf.sleep(inf)``)."""
_STEP_ENDS = frozenset({"step_completed", "step_failed"})
_RARE_EVENTS = frozenset({"cancel_requested", "cancel_delivered", "run_retrying", "wake_requested"})
"""The kinds ``_index_journal`` does more with than index them by operation."""

S = TypeVar("S")

_QUIESCENT_TURNS = 4
"""Event-loop turns a run must stay quiescent before it suspends (lets gather/TaskGroup settle)."""


class ReplayFrontier(BaseException):
    """Raised in check mode (``wf check --replay``) when the code reaches an operation the
    journal does not hold: everything before it replayed, and nothing may execute."""


class Suspending(BaseException):
    """Raised inside a run that is being suspended or evicted; never seen by user code that
    does not catch ``BaseException``, and never recorded."""


class StoreFailure(Suspending):
    """The store failed to record an operation (a full disk, an I/O error). It unwinds the
    workflow like a suspension, so user code cannot catch it and carry on without the record;
    the driver stops and raises ``error``, and the run stays due for a later driver."""

    def __init__(self, error: StoreError) -> None:
        super().__init__(str(error))
        self.error = error
        self.began: int | None = None
        """Where the drive it stopped began in the journal (``RunContext.drive_began``), once
        the drive wrote its marker: the note ``drive_failed`` names it (``_recovery``)."""
        self.drive: str | None = None
        """The token of the drive it stopped (``RunContext.drive_token``): the note repeats it."""


def current_run() -> RunContext | None:
    """The run driven by the current task, or None outside a run (or inside a step)."""
    if _current_step.get() is not None:
        return None
    return _current_run.get()


def require_run(what: str) -> RunContext:
    """The current run, or a ``UsageError`` saying ``what`` only works inside a workflow."""
    ctx = current_run()
    if ctx is None:
        raise UsageError(f"{what} can only be called inside a workflow (not in a step)")
    return ctx


@dataclasses.dataclass(slots=True, eq=False)
class StepContext:
    """What a running step may ask about itself (``wf.step_id()``, stream writers). Read-only
    but for ``ended`` (``end()``); not frozen, as one is made per step attempt and a frozen
    dataclass costs three times as much to make."""

    run: RunContext
    op: int
    name: str
    attempt: int
    stream_before: dict[str, int] | None = None
    """Stream -> chunks this attempt had written when this run of it first took a writer of
    the stream: more than 0 when a crash cut the attempt off after it wrote (``retried``).
    None until the attempt takes a writer (most never do: no dict per step)."""
    on_end: list[Callable[[], None]] | None = None
    """Called when the attempt ends (its stream writers stop taking writes); None: none."""
    ended: bool = False
    """Whether the attempt has ended (``end()``)."""

    def end(self) -> None:
        """The attempt is over: what it handed out (stream writers) stops working."""
        self.ended = True
        callbacks, self.on_end = self.on_end, None
        for callback in callbacks or ():
            callback()


@dataclasses.dataclass(slots=True)
class OpHistory:
    """What the journal holds for one operation id (slotted: one is made per operation of a
    replayed journal, a quarter quicker so)."""

    kind: str
    name: str
    events: list[Event]


@dataclasses.dataclass(eq=False)
class Wait:
    """A pending wait of the workflow: a timer (``deadline``) or an outside event (None)."""

    op: int
    kind: str
    target: str | None
    """What it waits on: a hook's token, a child's run id, a step's name (its retry)."""
    deadline: float | None
    future: asyncio.Future[Any]
    long: bool
    scope: CancelScope | None = None
    internal: bool = False
    key: Any = None
    """What an outside event must match to resolve this wait (a hook op, a child run id)."""
    """A wf-internal timer (a timeout's deadline): cancellations are not delivered to it."""


def describe_op(kind: str, name: str) -> str:
    """Human form of an operation for divergence messages: ``step 'charge'``."""
    return f"{kind} {name!r}"


def user_site(depth: int = 0) -> tuple[str, int] | None:
    """``(file, line)`` of the innermost frame outside wf itself (``wf.testing`` counts as the
    user's), looking out from ``depth`` frames above the caller's; None if there is none."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:  # no frame that deep (the interpreter itself, at its exit)
        return None
    while True:
        module = frame.f_globals.get("__name__", "")
        if not (module == "wf" or module.startswith("wf.")) or module.startswith("wf.testing"):
            return frame.f_code.co_filename, frame.f_lineno
        # Only now: asking for ``f_back`` makes a frame object of the frame it names.
        back = frame.f_back
        if back is None:
            return None
        frame = back


def user_location() -> str | None:
    """``file:line`` of the innermost frame outside wf itself (the user's call site)."""
    site = user_site(1)
    return None if site is None else f"{site[0]}:{site[1]}"


class RunContext:
    """Drives one run in this process: the journal view, op ids and the waits of the workflow."""

    def __init__(
        self,
        engine: EngineLike,
        record: RunRecord,
        lease: Lease,
        journal: list[Event],
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        self.engine = engine
        self.clock = engine.clock
        self.clock_busy: Callable[[], contextlib.AbstractContextManager[Any]] | None = getattr(
            self.clock, "busy", None
        )
        """A fake clock's hold on auto-jumping while the run awaits work (``thread_work``)."""
        self.record = record
        self.lease = lease
        self.run_id = record.id
        self.history: dict[int, OpHistory] = {}
        self.wake_pending = False
        """A wake-up arrived while no sleep was pending: the next new sleep ends at once."""
        self.wake_marks: list[int] = []
        """Journal positions of ``wake_requested`` events (sleeps opened before them end)."""
        self.wake_times: list[float] = []
        """When each of ``wake_marks`` was recorded: a sleep it ended ended then."""
        self.root_scope = CancelScope(None, None)
        self.scopes: dict[int | None, CancelScope] = {None: self.root_scope}
        """Scopes by op (None: the run), so recorded deliveries find their scope on replay."""
        self.delivery_marks: dict[int, tuple[str, int | None]] = {}
        self.deciding: dict[
            int,
            tuple[
                CancelScope | None,
                Sequence[asyncio.Future[Any]],
                Sequence[SelectBranch | None],
                asyncio.Future[None],
            ],
        ] = {}
        """Selects deciding (an outcome in, the winner not yet recorded) while a ``wf.timeout``
        block is open, by op: their scope, their candidates, the helper coroutines among them
        (``SelectBranch``, None for the others), and a future done once they decided. A
        block's timer lets those with an outcome that ended before its deadline by the durable
        clock decide first (``_compose._expire``)."""
        self.task_ops: dict[asyncio.Future[Any], int] = {}
        """While a ``wf.timeout`` block is open: the operation each task that noted its end
        (``mark_done_at``) ran, so a select can name the operations it dropped."""
        self.dropped_ops: set[int] = set()
        """While a ``wf.timeout`` block is open: the operations a select this drive decided
        dropped (its losers): what ended them is no end of the block (``timeout._durable_end``)."""
        self.timed_blocks = 0
        """``wf.timeout`` blocks open: while any is, the ops this drive writes events for are
        noted in ``live_ops`` (a block whose ops all ended in the journal ended then)."""
        self.live_ops: set[int] = set()
        self.decided_at: dict[int, float] = {}
        """While a ``wf.timeout`` block is open: when (by the durable clock) an operation
        inside it ended as this drive found it, by op, where the journal's own record would
        be this drive's write: a block or a select it decided (``timeout_ended``,
        ``select_decided``), a payload taken (when it reached the store), a child's end."""
        """Op -> (``call`` or ``wait``, scope op) where a cancellation was delivered, for replay."""
        self.pending_scopes: list[CancelScope] = []
        """Fired scopes whose cancellation has not reached any code yet."""
        self.closed = False
        self.checking = False
        """Replay-check mode: never execute anything; stop at the end of recorded history."""
        self._sleep_positions: dict[int, int] = {}
        self.applied_messages: set[str] = set()
        """Inbox message ids already in the journal (a crash before the ack must not repeat)."""
        self._states: dict[type[Any], Any] = {}
        """Per-run state of the features (hooks, child runs, streams, patches), by type."""
        self.loop = loop or asyncio.get_running_loop()
        """The running loop (``loop``, when the driver has it: a lookup asks the process id)."""
        self.journal_length = len(journal)
        self.drive_began: int | None = None
        """Where this drive's first event (its marker) lands in the journal, once the driver
        writes it (``_driver._mark_drive``): a ``drive_failed`` note names the drive so."""
        self.drive_token: str | None = None
        """This drive's token, in its markers (``drive``), when it writes any: a
        ``drive_failed`` note repeats it, so that a note written late cannot name the drive
        of another process whose marker took the same position (``_recovery``)."""
        self._deferred: list[Event] = []
        self._pending_writes = 0
        """``write_pending`` calls so far; ``_covered`` of them a finished flush made durable
        (a flush counts once it returned: one whose waiter was cancelled may not have run)."""
        self._covered = 0
        self._cancel_requested_at = -1
        self._cancel_delivered_at = -1
        self.step_arguments: dict[int, bytes] = {}
        """Op -> a step's recorded arguments (``recorded_arguments``, as JSON), kept only when
        the journal shows steps in flight together (``_steps_overlap``): replay checks a step
        call's arguments against them (``wf.engine._step``)."""
        self._index_journal(journal)
        self.next_op = 0
        self.skipped_ops: set[int] = set()
        """Op ids a losing select branch took in the drive that decided it: a replay, which
        does not run the loser, hands them to no one (``skip_ops``)."""
        self.last_recorded_op = max(self.history, default=-1)
        self.active = 0
        self._long_waits = 0
        self.steps_running = 0
        self.step_marked: asyncio.Future[None] | None = None
        """Set by the drive's first live step, done once its ``step_started`` is durable:
        a process that dies in a step leaves that trace (``wf.engine._recovery``)."""
        self.running_steps: dict[int, str] = {}
        """Op -> name of the step attempts in flight (a worker's grace names the abandoned)."""
        self.running_since: dict[int, float] = {}
        """Op -> ``time.monotonic()`` when each step attempt in flight began (for people: how
        long a drain has been waiting for it)."""
        self.step_tasks: dict[int, asyncio.Task[Any]] = {}
        """Op -> task of each async step attempt in flight: cancelling the run cancels them."""
        self.cancelled_steps: set[int] = set()
        """Ops of async steps this context cancelled (their ``CancelledError`` is the run's)."""
        self.step_calls: dict[int, asyncio.Task[Any]] = {}
        """Op -> task of each step call in flight (an attempt, a retry's backoff): the run's
        outcome waits for them all (``end_steps``)."""
        self.outside_pending = False
        """Whether a feature has something to do before the run meets the outside world
        (``Features.before_outside``: a hook created and not registered yet)."""
        self.detached_threads: list[asyncio.Future[None]] = []
        """Sync step attempts whose call was cancelled (a ``TaskGroup`` or ``wf.map``
        cancelling a sibling) while their thread runs on: each future is set (on the loop)
        when its thread returns."""
        self.ending = False
        """The workflow has returned, failed or been cancelled and the steps it left running
        are being ended (``end_steps``): none starts or retries, and sync ones see
        ``wf.cancel_requested()``."""
        self.lost: StoreError | None = None
        """Set when the driver lost its lease (another may drive the run): stop, write nothing."""
        self.waits: set[Wait] = set()
        self.alone = False
        """Driven alone, as a suspect (``wf.engine._alone``): every wait is a long one, so the
        run suspends at its first wait instead of holding on to a short timer while the
        process's other drives wait behind it."""
        self.task: asyncio.Task[Any] | None = None
        self.suspending = False
        self.suspended_wake_at: float | None = None
        self.suspended_waiting_for: list[_events.Waiting] | None = None
        self.suspended_waits: list[Wait] = []
        """The long waits the run suspended on: what ``unmet`` checks once it has unwound."""
        self.due_at_once = False
        """Set when the run must not sleep after suspending: something it may wait for was
        resolved (a timer fired, a message was taken in) after it decided to suspend."""
        self.done_at: weakref.WeakKeyDictionary[asyncio.Future[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        """Operation task -> when its outcome happened by the durable clock (a timer's deadline,
        a payload's arrival in the store): what ``wf.select`` orders its candidates by."""
        self.evicting = False
        self.divergence: NondeterminismError | None = None
        self._generation = 0
        self._check_scheduled = False
        self._stable_turns = 0
        self.rollbacks: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
        """Registered compensations: (step, args, kwargs), in registration order."""
        self.observers: list[DriveObserver] = []
        """Instruments' observers of this drive: they see every event it writes."""
        if self._cancel_requested_at > self._cancel_delivered_at:
            # A cancellation was recorded but never reached the workflow (its driver stopped
            # first): the journal is the truth, so it is pending again on every replay.
            self.fire()

    # -- journal view ---------------------------------------------------------------------

    def _index_journal(self, journal: Sequence[Event]) -> None:
        readers = self.engine.features.readers  # the features' part of the run's state
        history, opening, required_of = self.history, OPENING_EVENTS, _REQUIRED_SETS
        arguments: dict[int, Any] = {}
        in_flight: set[int] = set()  # steps started and not ended, at this point of the journal
        overlap = False
        last = len(journal) - 1
        for position, event in enumerate(journal):
            kind_of = event.get("type")
            op = event.get("op")
            required = required_of.get(kind_of)  # type: ignore[arg-type]
            if (
                required is None
                or not (event.keys() >= required[0] and (not required[1] or type(op) is int))
                or (required[2] is not None and position != (last if required[2] else 0))
                or (required[3] and type(event["until"]) not in _TIMES)
            ):
                self._check_event(journal, position)
            if "message" in event:
                self.applied_messages.add(event["message"])
            rare = kind_of in _RARE_EVENTS
            if rare:
                if kind_of == "cancel_requested":
                    self._cancel_requested_at = position
                elif kind_of == "cancel_delivered" and event.get("scope") is None:
                    self._cancel_delivered_at = position
                if kind_of == "run_retrying":
                    self._forget_failures()
            reader = readers.get(kind_of)  # type: ignore[arg-type]
            if reader is not None:
                reader(self, event)
            if rare:
                if kind_of == "wake_requested":
                    self.note_wake(position, event)
                elif kind_of == "cancel_delivered" and op is not None:
                    self.delivery_marks[op] = (event.get("at", "call"), event.get("scope"))
            elif op is not None and kind_of in opening:
                if kind_of == "step_started":
                    # Taken out of the event, which then holds only atomic values: CPython's
                    # collector stops tracking it, so its full collections do not walk them
                    # again and again while a long run replays (the journal is the driver's
                    # own copy). Kept aside (as bytes, once overlap is known) for the check.
                    given = event.pop("args", None)
                    if op not in in_flight:
                        overlap = overlap or bool(in_flight)
                        in_flight.add(op)
                        if isinstance(given, dict) and "unrecorded" not in given:
                            arguments.setdefault(op, given)
                elif kind_of in _STEP_ENDS:
                    in_flight.discard(op)
                    if not overlap:
                        # Until steps overlap, replay reaches them in the order live did:
                        # only what may still overlap is kept (a sequential run keeps none).
                        arguments.pop(op, None)
                found = history.get(op)
                if found is None:
                    history[op] = OpHistory(opening[kind_of], event["name"], [event])
                    if kind_of == "sleep_started":
                        self._sleep_positions[op] = position
                else:
                    found.events.append(event)
        if overlap:
            # Steps ran together (``gather``, ``TaskGroup``, ``wf.map``): a replay that gave
            # their continuations other op ids than live would hand one call another's
            # result, which the names alone may not show. Sequential runs skip the check.
            self.step_arguments = {op: orjson.dumps(given) for op, given in arguments.items()}

    def _forget_failures(self) -> None:
        """A new run-level attempt: steps that failed in earlier attempts run again (their
        start stays, so op ids keep their places); everything that completed replays."""
        for history in self.history.values():
            if history.kind == "step" and history.events[-1]["type"] == "step_failed":
                history.events = [e for e in history.events[:1] if e["type"] == "step_started"]
                if not history.events:
                    history.events = [{"type": "step_started", "name": history.name}]

    def _check_event(self, journal: Sequence[Event], position: int) -> None:
        """``StoreCorrupted`` if the event is damaged (``wf._events.event_damage``)."""
        found = _events.event_damage(journal, position)
        if found is not None:
            raise StoreCorrupted(f"journal of run {self.run_id}: {found}")

    def state(self, kind: type[S]) -> S:
        """This run's state of a feature (``kind()`` on first use): hooks, child runs and
        streams keep theirs here instead of in attributes of the context."""
        found = self._states.get(kind)
        if found is None:
            found = self._states[kind] = kind()
        return found

    def made_state(self, kind: type[S]) -> S | None:
        """This run's state of a feature if anything made it yet (``state``), else None:
        a check of a state that no event or call touched need not make it."""
        return self._states.get(kind)

    def _note_live(self, events: Sequence[Event]) -> None:
        for event in events:
            op = event.get("op")
            if type(op) is int:
                self.live_ops.add(op)

    def recorded_end(self, op: int) -> float | None:
        """When the journal, as this drive found it, shows operation ``op`` ended; None if it
        does not (not recorded, unfinished, or its end came in this drive: ``live_ops``)."""
        found = self.history.get(op)
        if found is None or op in self.live_ops or _unfinished(found):
            return None
        last = found.events[-1]
        if found.kind == "sleep" and len(found.events) == 1:
            # A sleep's end is not journaled: it ended at its ``until`` (or, woken, after it
            # began: the earliest it can have, a block around it ended in time so).
            until = last.get("until")
            if self.sleep_was_woken(op) or until is None:
                return float(last.get("ts", 0.0))
            return float(until)
        return float(last.get("ts", 0.0))

    def sleep_was_woken(self, op: int) -> bool:
        """Whether a wake request was recorded after sleep ``op`` began."""
        return self.sleep_woken_at(op) is not None

    def sleep_woken_at(self, op: int) -> float | None:
        """When the first wake request recorded after sleep ``op`` began was recorded (the
        sleep ended then, or at its deadline if sooner); None if none was."""
        position = self._sleep_positions.get(op)
        if position is None:
            return None
        for mark, at in zip(self.wake_marks, self.wake_times, strict=True):
            if mark > position:
                return at
        return None

    def note_wake(self, position: int, event: Event) -> None:
        """A ``wake_requested`` event is at ``position`` of the journal."""
        self.wake_marks.append(position)
        self.wake_times.append(float(event.get("ts", 0.0)))

    @property
    def replaying(self) -> bool:
        """True while the code is re-reaching operations the journal already holds."""
        return self.next_op <= self.last_recorded_op

    # -- operations -----------------------------------------------------------------------

    def begin_op(self, kind: str, name: str) -> tuple[int, OpHistory | None]:
        """Hand out the next operation id and check it against the journal.

        Raises ``NondeterminismError`` (and remembers it, so the run fails even if user code
        swallows it), ``Suspending`` while the run unwinds, and ``Cancelled`` once per
        cancellation.
        """
        if self.suspending or self.evicting or self.closed:
            raise Suspending()
        if self.divergence is not None:
            raise self.divergence
        selecting = select_branches.get()  # empty but inside a select's helper coroutine
        branches = [branch for branch in selecting if branch.run is self] if selecting else ()
        if branches and any(branch.lost for branch in branches):
            # A lost branch the decision is cancelling: an id taken now would be one the
            # decision did not journal as lost, and a replay would hand it to the next op.
            raise asyncio.CancelledError()
        op = self.next_op
        self.next_op += 1
        while self.next_op in self.skipped_ops:
            self.next_op += 1
        for branch in branches:
            branch.ops.append(op)
        self._generation += 1
        found = self.history.get(op)
        if found is not None and (found.kind != kind or found.name != name):
            self.divergence = NondeterminismError(
                op, describe_op(found.kind, found.name), describe_op(kind, name), user_location()
            )
            raise self.divergence
        # An op id the journal skipped while recording later ones is an operation that was
        # begun and never recorded (a sleep created but not awaited yet, when a child started
        # next was recorded and then the driver died): it runs now, as it would have then.
        if found is None and self.checking:
            raise ReplayFrontier()
        if self.timed_blocks:
            inside = current_scope()
            while inside is not None:
                if inside.ops is not None:
                    inside.ops.append(op)
                inside = inside.parent
        if self.delivery_marks:
            self._deliver_recorded(op, "call")
        if self.pending_scopes and (found is None or _unfinished(found)):
            # A cancellation takes effect at the first operation the journal does not hold
            # finished: a step its dead driver left running is not started again.
            self._deliver_pending(op, "call")
        return op, found

    def skip_ops(self, ops: Sequence[int]) -> None:
        """Hand the op ids ``ops`` (a replayed select's losers') to no operation."""
        self.skipped_ops.update(op for op in ops if op >= self.next_op)
        while self.next_op in self.skipped_ops:
            self.next_op += 1

    def finish_check(self) -> None:
        """At the end of the workflow: every recorded operation must have been reached."""
        if self.divergence is None and self.next_op <= self.last_recorded_op:
            found = self.history.get(self.next_op)
            recorded = describe_op(found.kind, found.name) if found else None
            self.divergence = NondeterminismError(
                self.next_op, recorded, "the end of the workflow", None
            )

    # -- journal writes -------------------------------------------------------------------

    def event(self, type_: str, **fields: Any) -> Event:
        """A journal event stamped with the clock."""
        return {"type": type_, "ts": self.clock.now(), **fields}  # a given ``ts`` wins

    async def write(self, *events: Event, durable: bool = True) -> int:
        """Append events durably (shares the flush with concurrent runs); returns the journal
        position of the last one (-1 when nothing was written).

        ``durable=False``: return once the events would outlive this process, not
        necessarily a crash of the machine or the store's server (``Lease.append_visible``);
        earlier ``write_pending`` writes are then not covered.

        Once the run has an outcome nothing more is written: a stray step that outlived its
        workflow must not append after the final event.
        """
        if self.closed:
            return -1
        if self._deferred:
            events, self._deferred = (*self._deferred, *events), []
        covers = self._pending_writes  # this append's flush covers every earlier write
        if self.timed_blocks:
            self._note_live(events)
        if self.observers:
            _observe(self.observers, events)
        # Every store orders a journal by the calls to append (made here before any await), so
        # positions are counted now: a write begun while this one is in flight comes after it.
        position = self.journal_length + len(events) - 1
        self.journal_length += len(events)
        # An append in flight is progress: the run is not quiescent until it is durable (a
        # ``select`` recording its winner must not be cut short by a suspension), and a fake
        # clock must not expire a timer racing a step whose outcome is being written.
        with self.working():
            try:
                if durable:
                    await self.lease.append(events)
                else:
                    await self.lease.append_visible(events)
            except StoreError as error:
                self.closed = True  # nothing more is recorded by this driver
                raise StoreFailure(error) from error
        if durable:
            self._covered = max(self._covered, covers)
        self._generation += 1
        return position

    def write_pending(self, *events: Event) -> bool:
        """Write events now that must be durable before anything this run does next can be
        seen outside it, but not before the workflow goes on: ``settle`` (or the next durable
        write) flushes them. False if the store cannot hold them so (the caller then
        ``write``s them); True once written, or if the run writes nothing more.

        A step's completion goes this way: the next step's code, a child's creation, a hook's
        registration and a cancel or wake sent to another run all ``settle`` first, and the
        outcome's append carries it, so the last step of a run costs no flush of its own.
        """
        if self.closed:
            return True
        if self._deferred:
            events = (*self._deferred, *events)
        try:
            if not self.lease.append_pending(events):
                return False  # nothing written: ``write`` takes ``_deferred`` with them
        except StoreError as error:
            self.closed = True
            raise StoreFailure(error) from error
        self._deferred = []
        if self.timed_blocks:
            self._note_live(events)
        if self.observers:
            _observe(self.observers, events)
        self.journal_length += len(events)
        self._pending_writes += 1
        self._generation += 1
        return True

    async def settle(self) -> None:
        """Return once every event of this run written so far is durable (what
        ``write_pending`` wrote included): called before anything leaves the run."""
        covers = self._pending_writes
        if covers == self._covered or self.closed:
            return
        with self.working():
            try:
                await self.lease.settle()
            except StoreError as error:
                self.closed = True
                raise StoreFailure(error) from error
        self._covered = max(self._covered, covers)

    def write_soon(self, *events: Event) -> None:
        """Append events that become durable with the next durable append."""
        if self.closed:
            return
        if self._deferred:
            events, self._deferred = (*self._deferred, *events), []
        if not events:
            return
        stamped = [e if "ts" in e else {**e, "ts": self.clock.now()} for e in events]
        if self.timed_blocks:
            self._note_live(stamped)
        if self.observers:
            _observe(self.observers, stamped)
        try:
            self.lease.append_soon(stamped)
        except StoreError as error:
            # As for ``write``: the store's failure, never an exception workflow or step code
            # could catch (this also runs inside a step, when it first suspends).
            self.closed = True
            raise StoreFailure(error) from error
        self.journal_length += len(events)

    def defer(self, event: Event) -> None:
        """Hold a bookkeeping event (``step_started``) until the next write of the run, or
        ``flush_deferred``, whichever comes first; it is written before anything after it.

        A step that finishes without ever suspending (a trivial async step) then writes its
        start and its end in one append: one system call fewer per step. A step that suspends
        flushes it at once (``_step``), so the journal shows it running while it runs.
        """
        if not self.closed:
            self._deferred.append(event)

    def flush_deferred(self) -> None:
        """Write what ``defer`` holds (not durably: with the next append)."""
        if self._deferred:
            self.write_soon()

    def working(self) -> _Working:
        """Within the block the run awaits the store's work (a journal write, a flush, a
        child's creation, a hook's registration, a message it sends): it is in flight, never
        quiescent, however idle the loop looks while a round trip is out. A run suspended in
        the middle would drop the operation half done, and its long waits would run out while
        it sat suspended (a ``wf.timeout`` expired that way on PostgreSQL)."""
        return _Working(self)

    @contextlib.contextmanager
    def storing(self) -> Iterator[None]:
        """``working``, around a call to the store made for the workflow's code (a child's
        creation, a hook's registration, a message it sends): a failure of the store there
        is the driver's (``StoreFailure``: the run stays due, and its next drive makes the
        call again), as for a journal write, never an exception the workflow's code could
        catch, or fail the run with (a dropped connection had failed runs). Damage
        (``wf.StoreCorrupted``: a hook's record, or the record of an existing run a child's
        ``run_id`` names, that cannot be read) is no failure of the store's that a later
        drive gets past: it stays the workflow's to meet. (Damage met creating a child is
        the store's: ``Engine.start`` makes it a ``wf.StoreError``.)"""
        with self.working():
            try:
                yield
            except StoreCorrupted:
                raise
            except StoreError as error:
                self.closed = True  # nothing more is recorded by this driver
                raise StoreFailure(error) from error

    # -- waits and quiescence -------------------------------------------------------------

    def add_active(self, delta: int) -> None:
        """Count operations in flight that can complete soon (steps, short timers)."""
        self.active += delta
        if self.active == 0 and self._long_waits:
            # Only a run with a long wait can become quiescent; scheduling the check after
            # every step would also push the journal flush off its inline fast path.
            self.poke()

    async def wait(
        self,
        op: int,
        kind: str,
        target: str | None,
        deadline: float | None,
        *,
        long: bool | None = None,
        internal: bool = False,
        key: Any = None,
    ) -> Any:
        """Wait for a timer (``deadline``) or for an outside event (``deadline=None``).

        A timer within ``engine.suspend_after`` sleeps in-process; anything longer is a long wait
        that lets the run suspend (every timer, for a run driven alone: ``alone``). Returns the
        value the wait was resolved with.
        """
        if not internal:
            self._deliver_recorded(op, "wait")
            if self.pending_scopes and not self.replaying:
                self._deliver_pending(op, "wait")
        loop = asyncio.get_running_loop()
        if long is None:
            hold = 0.0 if self.alone else self.engine.suspend_after
            long = deadline is None or deadline - self.clock.now() > hold
        entry = Wait(
            op, kind, target, deadline, loop.create_future(), long, current_scope(), internal, key
        )
        self.waits.add(entry)
        if long:
            self._long_waits += 1
        timer: asyncio.Task[None] | None = None
        if deadline is not None:
            # Every timer runs in-process while the run is live, long ones too: a long timer
            # that expires while a step still runs (``select(slow_step(), sleep(40))``) fires
            # at its deadline. Only a short one keeps the run from suspending.
            if not long:
                self.active += 1
            timer = loop.create_task(self.clock.sleep_until(deadline))
            timer.add_done_callback(lambda _t: _resolve(entry.future, None))
        if long:
            self.poke()
        try:
            value = await entry.future
            self._generation += 1  # resolved: whatever follows is progress, not quiescence
            return value
        finally:
            self.waits.discard(entry)
            if long:
                self._long_waits -= 1
            if timer is not None:
                timer.cancel()
                if not long:
                    self.add_active(-1)

    def resolve_waits(self, predicate: Callable[[Wait], bool], value: Any = None) -> int:
        """Resolve pending waits matching ``predicate``; returns how many."""
        count = 0
        for entry in list(self.waits):
            if predicate(entry) and _resolve(entry.future, value):
                count += 1
        return count

    # -- cancellation -----------------------------------------------------------------------

    def fire(self, scope: CancelScope | None = None) -> None:
        """Cancel a scope (default: the whole run). Pending waits inside it raise now; if there
        are none, the next operation started inside it raises. A timeout's scope leaves running
        steps alone; the run's cancels its async steps (``cancel_steps``)."""
        scope = scope or self.root_scope
        if scope.fired:
            return
        scope.fired = True
        self.pending_scopes.append(scope)
        if not self.replaying:
            self._deliver_to_waits(scope)
        if scope is self.root_scope:
            # The run is cancelled: its async steps get asyncio's cancellation now (sync steps
            # in threads cannot be interrupted; they may poll ``wf.cancel_requested()``).
            self.cancel_steps()

    def cancel_steps(self) -> None:
        """Cancel the async step attempts in flight (the run is cancelled or lost)."""
        for op, task in list(self.step_tasks.items()):
            if op not in self.cancelled_steps and not task.done():
                self.cancelled_steps.add(op)
                task.cancel()

    async def end_steps(self) -> None:
        """Before the run's outcome (or its next attempt): end every step it started.

        Async step attempts get asyncio's cancellation and a retry's backoff ends; sync ones,
        whose threads cannot be interrupted, run to their end (``wf.cancel_requested()`` is
        True for them meanwhile) and their results are recorded. So no step of the run runs
        on after its outcome, and its compensations run after its steps.
        """
        self.ending = True
        try:
            for op, task in list(self.step_calls.items()):
                if op in self.step_tasks and op not in self.cancelled_steps:
                    task.cancel()  # an async attempt in flight
            for entry in list(self.waits):
                if entry.kind == "retry" and entry.op in self.step_calls:
                    entry.future.cancel()  # a step waiting to retry: it retries no more
            while self.lost is None and (self.step_calls or self.detached_threads):
                calls = list(self.step_calls.values())
                if calls:
                    await asyncio.gather(*calls, return_exceptions=True)
                    continue
                returned = self.detached_threads.pop()
                with thread_work(self.clock):  # no thread of its own: the step's tells it
                    await asyncio.shield(returned)
        finally:
            self.ending = False

    def deliver_to_step(self, op: int) -> BaseException:
        """An async step was cancelled with the run: the cancellation lands on its call
        (recorded, so replay raises there too instead of running the step)."""
        self.cancelled_steps.discard(op)
        if self.root_scope in self.pending_scopes:
            self.pending_scopes.remove(self.root_scope)
        self._mark(op, "call", self.root_scope)
        return self.root_scope.exception()

    async def threads_returned(self) -> None:
        """Return once the threads of the sync steps whose calls were cancelled returned."""
        while self.detached_threads:
            returned = self.detached_threads.pop()
            with thread_work(self.clock):
                await asyncio.shield(returned)

    def lose(self, error: StoreError) -> None:
        """The lease is gone: another driver may take the run over. Cancel the async steps
        and the workflow at once and record nothing more (a sync step runs on in its thread:
        its result is dropped)."""
        if self.lost is not None:
            return
        self.lost = error
        self.closed = True
        self.cancel_steps()
        if self.task is not None:
            self.task.cancel()

    def _deliver_to_waits(self, scope: CancelScope) -> bool:
        delivered = False
        for entry in sorted(self.waits, key=lambda w: w.op):
            if entry.internal or entry.future.done():
                continue
            if scope.contains(entry.scope, self.root_scope):
                entry.future.set_exception(scope.exception())
                self._mark(entry.op, "wait", scope)
                delivered = True
        if delivered:
            self.pending_scopes.remove(scope)
        return delivered

    def _mark(self, op: int, at: str, scope: CancelScope) -> None:
        self.write_soon({"type": "cancel_delivered", "op": op, "at": at, "scope": scope.op})

    def mark_delivered(self, op: int, at: str, scope: CancelScope) -> None:
        """Journal that ``scope``'s cancellation reached the code at ``op`` (``at``: "call",
        "wait", or "exit": a timeout's block that ended after its deadline)."""
        self._mark(op, at, scope)

    def _deliver_recorded(self, op: int, at: str) -> None:
        mark = self.delivery_marks.get(op)
        if mark is not None and mark[0] == at:
            del self.delivery_marks[op]
            scope = self.scopes.get(mark[1], self.root_scope)
            scope.fired = True
            raise scope.exception()

    def _deliver_pending(self, op: int, at: str) -> None:
        inner = current_scope()
        for scope in self.pending_scopes:
            if scope.contains(inner, self.root_scope):
                self.pending_scopes.remove(scope)
                self._mark(op, at, scope)
                raise scope.exception()

    def poke(self) -> None:
        """Something changed that may make the run quiescent: check soon."""
        if not self._check_scheduled and self.task is not None:
            self._check_scheduled = True
            self._stable_turns = 0
            self._seen_generation = self._generation
            asyncio.get_running_loop().call_soon(self._check_quiescent)

    def _quiescent(self) -> bool:
        return (
            self.active == 0
            and any(w.long and not w.future.done() for w in self.waits)
            and not self.suspending
            and self.task is not None
            and not self.task.done()
        )

    def _check_quiescent(self) -> None:
        if not self._quiescent() or self._generation != self._seen_generation:
            self._check_scheduled = False
            if self._quiescent():
                self.poke()
            return
        self._stable_turns += 1
        if self._stable_turns < _QUIESCENT_TURNS:
            asyncio.get_running_loop().call_soon(self._check_quiescent)
            return
        self._check_scheduled = False
        if any([self._deliver_to_waits(scope) for scope in list(self.pending_scopes)]):
            # A cancellation that arrived while suspended reaches the waits replay re-created.
            return
        self.suspend()

    def wake_at(self) -> float | None:
        """Earliest deadline among the pending long waits (None: only outside events)."""
        deadlines = [w.deadline for w in self.waits if w.long and w.deadline is not None]
        return min(deadlines) if deadlines else None

    def waiting_for(self) -> list[_events.Waiting]:
        """The pending long waits, structured (``wf._events.Waiting``), in a stable order."""
        found = {
            (w.kind, w.target, w.deadline) for w in self.waits if w.long and not w.future.done()
        }
        return [
            _events.waiting(kind, target, until)  # type: ignore[arg-type]
            for kind, target, until in sorted(found, key=lambda t: (t[0], t[1] or "", t[2] or 0))
        ]

    def suspend(self) -> None:
        """Drop the workflow coroutine now; the driver records the wake-up conditions."""
        # Snapshot before unwinding: cancelling the task removes the waits as it goes.
        self.suspended_wake_at = self.wake_at()
        self.suspended_waiting_for = self.waiting_for() or None
        self.suspended_waits = [w for w in self.waits if w.long and not w.future.done()]
        if any(w.future.done() and not w.future.cancelled() for w in self.waits):
            # A wait was resolved (a timer, a message) and the code has not seen it yet: the
            # run can move, so it is due at once (a replay takes that path).
            self.due_at_once = True
        self.suspending = True
        if self.task is not None:
            self.task.cancel()

    def unmet(self) -> bool:
        """After suspending: True if every wait the run suspended on is still unmet here.

        A message taken in while the run unwound (a child's outcome, a payload), a payload that
        arrived before its ``next()`` began to wait, a cancellation not delivered yet or a
        timer already due each make the run due again at once instead of asleep.
        """
        if self.due_at_once or self.pending_scopes:
            return False
        now = self.clock.now()
        for wait in self.suspended_waits:
            if wait.deadline is not None and wait.deadline <= now:
                return False
            met = self.engine.features.waits.get(wait.kind)
            if met is not None and met(self, wait.key):
                return False
        return True

    def timed(self, future: asyncio.Future[Any], at: float) -> asyncio.Future[Any]:
        """``future``, noted as having ended at ``at`` by the durable clock (a recorded step)."""
        self.done_at[future] = at
        return future

    def mark_done_at(self, at: float, op: int | None = None) -> None:
        """Record when the current operation's outcome happened by the durable clock (and,
        given ``op`` inside a timeout's block, when that operation ended: ``decided_at``)."""
        task = asyncio.current_task(self.loop)
        if task is not None:
            self.done_at[task] = at
        branch = ends_into.get()
        if branch is not None and branch.run is self:
            branch.note_end(at)
        if op is not None and self.timed_blocks:
            self.decided_at[op] = at
            if task is not None:
                self.task_ops[task] = op

    def evict(self) -> None:
        """Stop at the next durable operation (drain, reload); the run is due again at once.

        Running steps finish first (their results are recorded), then the coroutine is dropped.
        """
        self.evicting = True
        if self.steps_running == 0 and self.task is not None:
            self.task.cancel()

    def drive_dropped(self) -> bool:
        """Whether the workflow's task is cancelled or being cancelled: mostly this process
        ending the drive (a suspension, an eviction, a lost lease, a stop or a crash), where an
        operation the code made and was still holding was not forgotten: a replay makes it
        again, and awaits it (``OpCall`` does not warn that it was never awaited). Also a
        ``TaskGroup`` of the workflow's own aborting on an error: an operation dropped there
        goes unwarned too (the error is what the user sees)."""
        task = self.task
        return task is not None and (task.cancelling() > 0 or task.cancelled())

    def step_finished(self) -> None:
        """A step attempt ended: an eviction that waited for it may proceed."""
        self.steps_running -= 1
        if self.evicting and self.steps_running == 0 and self.task is not None:
            self.task.cancel()


class _Working:
    """``RunContext.working``: a class, not a generator, as it wraps every flush of a step."""

    __slots__ = ("_clock_busy", "_ctx")

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self._clock_busy: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> None:
        ctx = self._ctx
        ctx.active += 1
        if ctx.clock_busy is not None:
            self._clock_busy = busy = ctx.clock_busy()
            busy.__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            if self._clock_busy is not None:
                self._clock_busy.__exit__(None, None, None)
        finally:
            self._ctx.add_active(-1)


def _unfinished(found: OpHistory) -> bool:
    """Whether a recorded step has no outcome yet (started, or waiting for a retry)."""
    return found.kind == "step" and found.events[-1]["type"] in ("step_started", "step_retrying")


def _resolve(future: asyncio.Future[Any], value: Any) -> bool:
    if future.done():
        return False
    future.set_result(value)
    return True
