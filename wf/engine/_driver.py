"""Driving one run: take its lease, replay the journal through the workflow, record the outcome.

The order of writes is what makes a crash at any point harmless: the journal is the truth and
is appended first; the record (a summary) is saved after. A driver that finds an outcome in the
journal but not in the record only repairs the record.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from wf import _events
from wf._exceptions import (
    Cancelled,
    LeaseLost,
    LoadError,
    OutputValidationError,
    RunNotFound,
    RunStalled,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    UsageError,
    ValueEncodingError,
    WorkflowNotFound,
)
from wf.engine._alone import is_suspect, last_driver_died, recovered_line
from wf.engine._clock import thread_work
from wf.engine._codec import decode, encode
from wf.engine._compose import compensate
from wf.engine._context import (
    RunContext,
    StoreFailure,
    Suspending,
    _current_run,
    _current_step,
)
from wf.engine._deployment import deployment_of
from wf.engine._errors import describe_error, fails_at_once, made_up_cancel, uncaught
from wf.engine._futures import in_run, install_task_factory, workflow_task
from wf.engine._inbox import InboxNews, InboxPoller, apply_messages
from wf.engine._instruments import drive as _instrument_drive
from wf.engine._instruments import drive_ended
from wf.engine._queueing import Admission, admit, needs_admission, order_keys
from wf.engine._recovery import Recoveries, recoveries
from wf.engine._ref import adopt, placement_problem
from wf.engine._run import is_due, reopen
from wf.engine._signature import validate_arguments, validate_output
from wf.engine._steplogs import wrap_streams
from wf.engine._workflow import Workflow, resolve_workflow_off_loop
from wf.store import Event, Hold, Lease, RunRecord, RunStatus
from wf.store._limits import check_due

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

log = logging.getLogger("wf")

OUTCOME_EVENTS = {kind: RunStatus(status) for kind, status in _events.OUTCOME_EVENTS.items()}


def recorded_outcome(journal: list[Event]) -> Event | None:
    """The run's outcome event if the journal has one (always the last event)."""
    if journal and journal[-1].get("type") in OUTCOME_EVENTS:
        return journal[-1]
    return None


def apply_outcome(record: RunRecord, outcome: Event) -> None:
    """Copy an outcome event into the record."""
    record.status = OUTCOME_EVENTS[outcome["type"]]
    record.output = outcome.get("output")
    record.error = outcome.get("error")
    record.wake_at = None
    record.waiting_for = None
    record.updated_at = outcome["ts"]


async def drive(
    engine: EngineLike,
    run_id: str,
    *,
    lease: Lease | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> RunRecord | None:
    """Drive the run until it ends or suspends; None if another driver holds it.

    ``lease``: the run's lease if the caller took it already (a worker's claim); it is
    released here in any case. ``loop``: the running loop, if the caller has it (a lookup
    asks the process id, a system call).

    Loops while the run is due again at once (a message arrived while it was suspending).
    Returns None too when a cap, a group lane or a rate limit holds the run back: it stays
    pending, and ``engine.holds[run_id]`` says why (and when to look again).
    """
    fresh = run_id in engine.fresh
    started_with = engine.fresh.pop(run_id, None)
    if lease is None:
        lease = await engine.store.try_acquire(run_id)
        if lease is None:
            return None
    admission: list[Admission] = []
    try:
        while True:
            try:
                record = await _drive_once(
                    engine, lease, run_id, admission, fresh=fresh, loop=loop, given=started_with
                )
                fresh, started_with = False, None
            except StoreFailure as failure:
                # Not the run's failure: the store's. The run stays due for a later driver,
                # and no process died: noted so that no driver counts it (``_recovery``).
                if failure.began is not None and not isinstance(
                    failure.error, LeaseLost | StoreUnavailable
                ):
                    await _note_failed(
                        engine, lease, run_id, failure.began, failure.drive, failure.error
                    )
                raise failure.error from None
            except _Held as held:
                engine.holds[run_id] = held.hold
                return None
            except _PinnedElsewhere:
                return None  # its own deployment's workers drive it, as if another process did
            except _Apart as handed:
                said = handed.said
                break  # driven by another process, which takes the lease itself
            if record.status is not RunStatus.SUSPENDED or _events.is_evicted(record.waiting_for):
                return record  # an evicted run (drain, reload) is left to the next driver
            if not await is_due(engine, record):
                return record
    finally:
        try:
            await lease.release()
        finally:
            for taken in admission:
                await taken.release()
    apart = engine.drive_apart
    assert apart is not None  # only then is ``_Apart`` raised
    await apart(run_id, said)
    try:
        return await engine.store.get_run(run_id)  # as the other process left it
    except RunNotFound:
        return None  # deleted meanwhile


async def _note_failed(
    engine: EngineLike,
    lease: Lease,
    run_id: str,
    began: int,
    drive: str | None,
    error: StoreError,
) -> None:
    """Note in the journal that the store stopped the drive that began at ``began``, whose
    markers carry the token ``drive`` (none when it wrote no marker) (``drive_failed``); if
    the store cannot take that either, the process's next drive of the run notes it
    (``DriveGate.failed``)."""
    words = str(error)[:500]
    note = drive_failed_note(engine.clock.now(), began, drive, words)
    try:
        await lease.append([note])
    except StoreError:
        engine.drive_gate.failed(run_id, began, drive, words)


def drive_failed_note(
    ts: float, began: int, drive: str | None, error: str, *, reason: str | None = None
) -> Event:
    """The ``drive_failed`` event naming the drive that began at ``began`` with token
    ``drive`` (not written when the drive wrote no marker: ``_recovery`` matches it with
    none). ``reason``: ``interrupted`` for a drive its process ended on purpose; none for one
    the store stopped."""
    note: Event = {"type": "drive_failed", "ts": ts, "began": began, "error": error}
    if drive is not None:
        note["drive"] = drive
    if reason is not None:
        note["reason"] = reason
    return note


INTERRUPTED_NOTE_WAIT = 1.0
"""Seconds an interrupted drive waits for the store to take its note (``drive_failed``) before
it lets its process go on ending without it (the drive then counts as a death, as before)."""

INTERRUPTED = (
    "interrupted: its process ended the drive on purpose (Ctrl-C, SIGTERM, a stop, or the "
    "program's end)"
)
"""The ``error`` words of an interrupted drive's note."""


drive_owner: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "drive_owner", default=None
)
"""The task that asked for the drive (``Engine.drive_soon``): a program's main, a worker's
loop. Set in the drive's own context."""


def ended_on_purpose(engine: EngineLike) -> bool:
    """Whether the drive now ending cancelled was ended on purpose by its process, so that no
    driver counts it as a death (``_note_interrupted``).

    Only a drive whose own task was cancelled: a workflow that cancels its own task ends its
    drive by its code, a death each time (else a run that does so every time would be driven
    for ever). Then, the engine closing (``Engine.aclose``: Ctrl-C or SIGTERM of ``wf run``, a
    worker's stop), or anyone else's cancel of the drive, but one: ``asyncio.run`` tearing
    down a loop that stopped while the task that asked for the drive was still running (a
    step stopped the loop, or it died of an error), which cancels that task too. A program
    that returned has that task done; one whose main is cancelled while ``asyncio.run`` still
    runs it (its Ctrl-C, its own timeout) ends the drive on purpose, also when that main
    awaits the drive itself, which the cancellation of the await cancels with it."""
    task = asyncio.current_task()
    if task is None or not task.cancelling():
        return False
    if engine.closing:
        return True
    owner = drive_owner.get()
    return (
        owner is None
        or owner is task
        or owner.done()
        or not owner.cancelling()
        or _main_still_run(owner)
    )


def _main_still_run(owner: asyncio.Task[Any]) -> bool:
    """Whether ``owner`` is the main task of an ``asyncio.run`` (or ``asyncio.Runner.run``)
    that still runs it: its SIGINT handler, which cancels that task on Ctrl-C, is in force
    only until the main task ended or the loop stopped under it; the teardown that follows
    (cancelling every task left) finds Python's own handler back."""
    import signal  # only when a drive ends cancelled

    handler = signal.getsignal(signal.SIGINT)
    keywords = getattr(handler, "keywords", None)
    return isinstance(keywords, dict) and keywords.get("main_task") is owner


async def _note_interrupted(engine: EngineLike, ctx: RunContext) -> None:
    """The drive's task was cancelled (not to suspend or evict the run, nor for a lost lease):
    its process ends it on purpose (``Engine.aclose`` on Ctrl-C or SIGTERM of ``wf run``,
    ``asyncio.run`` cancelling what a program left running as it returns, a stop). No process
    died: noted so that no driver counts it (``drive_failed`` marked ``interrupted``), within
    ``INTERRUPTED_NOTE_WAIT`` (a Ctrl-C must never hang on a slow store). A crash runs none of
    this; nor does a drive the store fenced (``wf.testing.TestEngine.crash``)."""
    began = ctx.drive_began
    if began is None or ctx.closed:
        return  # no marker yet (nothing of this drive to read as a death), or ended otherwise
    ctx.closed = True  # nothing after the note: a stray step's result is this drive's no more
    note = drive_failed_note(
        engine.clock.now(), began, ctx.drive_token, INTERRUPTED, reason="interrupted"
    )
    try:
        async with asyncio.timeout(INTERRUPTED_NOTE_WAIT):
            await ctx.lease.append([note])
    except (StoreError, TimeoutError):
        # The process ends anyway: the next driver counts the drive, as it counts a death.
        log.warning("run %s: could not note its interrupted drive in time", ctx.run_id)


class _PinnedElsewhere(Exception):
    """The run is pinned to a deployment this process does not drive (``drives_pin``)."""


class _Apart(Exception):
    """The run's last driver died and this process drives such runs apart
    (``EngineLike.drive_apart``, ``wf.engine._alone``)."""

    def __init__(self, said: Callable[[str], str]) -> None:
        super().__init__()
        self.said = said
        """The line that says so, given how the run is driven (``recovered_line``)."""


class _Held(Exception):
    def __init__(self, hold: Hold) -> None:
        super().__init__(hold.reason)
        self.hold = hold


async def _drive_once(
    engine: EngineLike,
    lease: Lease,
    run_id: str,
    admission: list[Admission],
    *,
    fresh: bool = False,
    loop: asyncio.AbstractEventLoop | None = None,
    given: Workflow[Any, Any] | None = None,
) -> RunRecord:
    """One drive of the run. ``given``: the workflow object its start was given (its first
    drive, in the process that created it), whose code it runs: the registry's entry for its
    name may be another definition by now (a module reloaded since)."""
    store = engine.store
    try:
        record, journal = await lease.read_run(store)
    except StoreCorrupted:
        record, journal = await store.get_run(run_id), None
    if record.status.is_terminal and journal and journal[-1].get("type") == "run_retrying":
        # A retry (``wf retry``) whose event is recorded but whose record a crash kept from
        # being saved: the journal is the truth, the run is pending again. Repair the record
        # and go on as with any pending run.
        reopen(record, journal[-1])
        await lease.save(record)
    if record.status.is_terminal:
        if journal and recorded_outcome(journal) is not None:
            # A store that derives the record from the journal (local) shows the run ended as
            # soon as its outcome is recorded: a driver that died right after left it due,
            # with its parent not told and its hooks held. Finish that job (it is idempotent:
            # a parent takes a child's outcome once).
            await engine.features.after_outcome(RunContext(engine, record, lease, journal), record)
        return record
    if not engine.drives_pin(record.deployment):
        # Checked under the lease: an upgrade re-pins a run under it too. Its own workers'
        # code is the only code that replays it.
        raise _PinnedElsewhere
    engine.notify_crossing(record)
    try:
        if journal is None:
            journal = await store.read_journal(run_id)  # raises the corruption again
        if not journal or journal[0].get("type") != "run_started":
            # Every run's journal starts with ``run_started``: an emptied (or truncated at the
            # front) journal beside a record is damage, never a run to start over.
            raise StoreCorrupted(f"journal of run {run_id} is empty or lost its first event")
        ctx = RunContext(engine, record, lease, journal, loop)
        if fresh and len(journal) == 1:
            # Its first drive, in the process that created it: no mark before the first step
            # (a death here goes uncounted; the next driver's counts). See ``_recovery``.
            ctx.step_marked = ctx.loop.create_future()
            ctx.step_marked.set_result(None)
    except (StoreCorrupted, KeyError, TypeError, ValueError) as exc:
        # A damaged journal cannot be replayed and would be retried forever: mark the run
        # failed with the cause (naming the file and line) and leave the file as it is.
        return await _mark_corrupt(engine, lease, record, exc)
    outcome = recorded_outcome(journal)
    events = len(journal)
    # The store stopped the last drive (``drive_failed``): it ended, as a cut drive did.
    stopped = journal[-1].get("type") == "drive_failed"
    dead = recoveries(journal)
    dead = dead.first(engine.drive_gate.deaths(run_id, dead.count))
    # The context keeps what replay needs: let the rest of the journal go for the drive.
    del journal
    if outcome is not None:
        # A crash came between recording the outcome and saving the record: finish the job.
        apply_outcome(record, outcome)
        await engine.features.after_outcome(ctx, record)
        await lease.save(record)
        engine.notify_finished(record)
        return record

    if engine.draining:
        return record  # not started: it stays due for the next driver (after a reload, a restart)
    if dead.count >= (record.max_recoveries or engine.max_recoveries):
        return await _fail_stalled(engine, ctx, dead)
    starting = record.status is RunStatus.PENDING
    if (
        starting
        and record.wake_at is not None
        and record.wake_at > engine.clock.now()
        and not await store.read_inbox(run_id)
    ):
        # A delayed start or a retry's backoff: not due yet. (A message — a cancel, a wake-up,
        # a retried child's outcome — ends the wait: the run is due now, and is driven.)
        return record
    limit = record.max_recoveries or engine.max_recoveries
    cut = stopped or engine.drive_gate.was_cut(run_id)
    died = last_driver_died(
        record, dead, fresh=fresh, cut=cut, events=events, now=engine.clock.now()
    )
    # Running, not driven here, yet no death: a run within ``START_GRACE`` whose creator's
    # first drive left no trace. Its creator may not have taken it yet, or its code may have
    # killed that creator: a process that must outlive its runs drives it apart too.
    unseen = not died and record.status is RunStatus.RUNNING and not fresh and not cut
    if (died or unseen) and engine.drive_apart is not None:
        # Before its code is even imported here: this process must outlive the run. Said by
        # the process driving it apart, with where it is driven.
        raise _Apart(lambda how: recovered_line(record, dead, limit, how=how, unseen=unseen))
    # The workflow's module is imported before the drive's span begins: importing it may set
    # the tracer provider (a worker imports it only now), which the drive's span then uses.
    # Off the event loop: a slow import must not stall the other runs this process drives.
    workflow: Workflow[Any, Any] | WorkflowNotFound | LoadError
    try:
        if given is not None and given.name == record.workflow:
            workflow = given
        else:
            with thread_work(engine.clock):
                workflow = await resolve_workflow_off_loop(record.workflow, record.target)
    except (WorkflowNotFound, LoadError) as exc:
        if events == 1 and await _cancel_waits(ctx):
            return await _cancel_unstarted(engine, ctx)
        if record.by_name is not None:
            if record.status is RunStatus.RUNNING and events == 1:
                # Created to be driven here (or left so by a drive that failed the same way):
                # none of its code ran, and it waits for a process that loads it, pending
                # (docs/queues.md), not running as if its driver had died.
                record.status = RunStatus.PENDING
                await lease.save(record)
            raise  # without its declaration, nothing says which caps hold it
        workflow = exc  # raised inside the drive (and its span)
    if isinstance(workflow, Workflow):
        engine.notice_code(record, deployment_of(workflow.fn))  # before adopt() rewrites it
    if record.by_name is not None and isinstance(workflow, Workflow):
        # Started by name: the declaration says which caps hold it (and its attempts). Saved
        # before admission, so that every worker sees the caps of a run held back by them.
        before = record.copy()
        adopt(record, workflow)
        if record != before:
            await lease.save(record)
    order = engine.admission_order
    # A claim that saw the run head its lane read the stored record's width; a run started
    # by name took its declaration's just now, so its lane is read again.
    lane_seen = lease.heads_lane and record.by_name is None
    if not admission and needs_admission(engine, record, lane_seen):
        attempt = starting or events == 1
        # A place goes to the runs claimed before this one first (``AdmissionOrder``).
        await order.turn(run_id, order_keys(engine, record, attempt))
        try:
            taken = await admit(engine, record, starting=attempt, lane_seen=lane_seen)
        finally:
            order.passed(run_id)
        if isinstance(taken, Hold):
            if record.status is RunStatus.RUNNING and (fresh or (events == 1 and not died)):
                # Created to be driven at once, held before its first drive began (here, or
                # by a claim that took it before its creator did): a run held back is
                # pending, not one whose driver died (``last_driver_died``).
                record.status = RunStatus.PENDING
                await lease.save(record)
            raise _Held(taken)
        admission.append(taken)
    elif len(order):
        order.passed(run_id)
    engine.holds.pop(run_id, None)
    # A run a drive already began (running, with nothing recorded yet: its driver died at
    # once) resumes too, and says so: a drive always leaves a marker a death can be read from.
    resuming = events > 1 or (record.status is RunStatus.RUNNING and not fresh)
    if died and run_id not in engine.said_elsewhere:
        log.warning("%s", recovered_line(record, dead, limit, how="again"))
    engine.said_elsewhere.discard(run_id)
    gate = engine.drive_gate
    if dead.count and is_suspect(dead.count, limit):
        async with gate.alone(run_id):
            ctx.alone = True  # it suspends at its first wait: the others go on meanwhile
            return await _drive_observed(engine, lease, ctx, workflow, starting, resuming, dead)
    await gate.enter()
    try:
        return await _drive_observed(engine, lease, ctx, workflow, starting, resuming, dead)
    finally:
        gate.leave()


async def _drive_observed(
    engine: EngineLike,
    lease: Lease,
    ctx: RunContext,
    workflow: Workflow[Any, Any] | WorkflowNotFound | LoadError,
    starting: bool,
    resuming: bool,
    dead: Recoveries,
) -> RunRecord:
    """``_drive_live``, seen by the engine's instruments if it has any."""
    if not engine.instrumented():
        return await _drive_live(engine, lease, ctx, workflow, starting, resuming, dead)
    observers = _instrument_drive(engine.instruments, ctx.record, resuming)
    ctx.observers = observers
    try:
        ended = await _drive_live(engine, lease, ctx, workflow, starting, resuming, dead)
    except BaseException as exc:
        drive_ended(observers, None, exc)
        raise
    drive_ended(observers, ended, None)
    return ended


async def _drive_live(
    engine: EngineLike,
    lease: Lease,
    ctx: RunContext,
    workflow: Workflow[Any, Any] | WorkflowNotFound | LoadError,
    starting: bool,
    resuming: bool,
    dead: Recoveries,
) -> RunRecord:
    """Run the workflow (a replay, then live) to an outcome or a suspension, and record it.

    ``workflow``: the run's workflow, or why it could not be found or loaded. ``dead``: the
    drivers that died in the run in a row before this one (recorded with ``run_resumed``, for
    readers)."""
    store, record, run_id = engine.store, ctx.record, ctx.run_id
    if not isinstance(workflow, Workflow):
        raise workflow
    await engine.features.before_drive(ctx)
    # Watched from before the read: a post that lands before the poller starts is not left
    # to its first poll.
    news = InboxNews(store, run_id)
    try:
        taken = await lease.read_inbox(store)
        await apply_messages(ctx, taken, live=False, ack=False)
        await _mark_drive(engine, lease, ctx, starting, resuming, dead, taken=bool(taken))
        if taken:
            # Out of the inbox only once the record says running: a waiter that finds the
            # inbox empty then reads a record at least that new, never the suspension these
            # messages end (``Run.settle``, ``wf.admin``'s run detail). Until then a crash
            # leaves them to the next driver, which takes each in once (its journal says).
            await lease.ack_inbox([message.id for message in taken])
    except BaseException:
        news.stop()
        raise

    engine.live[run_id] = ctx
    lease.on_lost(ctx.lose)
    poller = InboxPoller(engine, ctx, news)
    try:
        status, fields = await _run_workflow(ctx, workflow)
    except StoreFailure as failure:
        failure.began = ctx.drive_began
        failure.drive = ctx.drive_token
        raise
    except asyncio.CancelledError:
        if not ended_on_purpose(engine):
            raise  # the workflow's code cancelled it, or the loop died under the process
        try:
            await _note_interrupted(engine, ctx)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            # The drive ends cancelled, whatever became of its note: a fenced lease (a crash,
            # ``TestEngine.crash``) refused it, or a second cancellation cut it short.
            pass
        raise
    finally:
        poller.stop()
        engine.live.pop(run_id, None)

    # From here on the context writes nothing: a stray task of the workflow cannot append
    # after the run's last event.
    ctx.closed = True
    if status is RunStatus.SUSPENDED:
        wake_at = fields["wake_at"]
        if not ctx.evicting and not ctx.unmet():
            # What it waits for is already here (taken in while it unwound): it must not
            # sleep. Due at once, so this driver (``drive``'s loop) or any other resumes it.
            wake_at = ctx.clock.now()
        await lease.append(
            [ctx.event("run_suspended", wake_at=wake_at, waiting_for=fields["waiting_for"])]
        )
        # Hooks created and not waited on yet (the run sleeps first): live while it sleeps.
        if ctx.outside_pending:
            await engine.features.before_outside(ctx)
        record.status = RunStatus.SUSPENDED
        record.wake_at = wake_at
        record.waiting_for = fields["waiting_for"]
        record.updated_at = engine.clock.now()
        await lease.save(record)
        return record
    if status is RunStatus.PENDING:
        return await _retry_later(ctx, fields["error"], fields["retry_at"])

    return await _record_outcome(engine, ctx, ctx.event(_OUTCOME_TYPE[status], **fields))


async def _mark_drive(
    engine: EngineLike,
    lease: Lease,
    ctx: RunContext,
    starting: bool,
    resuming: bool,
    dead: Recoveries,
    *,
    taken: bool = False,
) -> None:
    """Record that a drive begins (an attempt's or a resumption's marker) and that the run
    is running: in the store's record when this returns if ``taken`` (inbox messages were
    taken in, acknowledged next)."""
    record = ctx.record
    now = engine.clock.now()
    gate = engine.drive_gate
    # Drives of the run here the store stopped, whose note it could not take then: noted now,
    # before this drive's marker (``_recovery``).
    markers: list[Event] = [
        drive_failed_note(now, began, drive, error)
        for began, drive, error in gate.unnoted(ctx.run_id)
    ]
    notes = len(markers)
    # The drive's token, in its markers: its ``drive_failed`` note repeats it (``_recovery``).
    # Made only for a marker: a run's first drive here, by its creator, has none (the random
    # bytes are a system call).
    token = secrets.token_hex(4) if starting or resuming else ""
    if starting:
        # An attempt begins (the first of a queued run, or a retry): ``run.watch()`` says so.
        markers.append(ctx.event("run_attempt", ts=now, attempt=record.attempt, drive=token))
    if resuming and (not starting or dead.count):
        record.resumes += 1
        recovered = {"recoveries": dead.count, "steps": list(dead.steps[-1])} if dead.count else {}
        if starting:
            recovered["same_drive"] = True  # one drive, two markers (``recoveries``)
        markers.append(
            ctx.event("run_resumed", ts=now, resumes=record.resumes, drive=token, **recovered)
        )
    if len(markers) > notes:
        ctx.drive_token = token
    # The drive's marker outlives this process before the workflow's code runs: a death in
    # that code is then counted too (``wf.engine._recovery``). Where a soon write does not
    # (PostgreSQL, Redis) it is written at once, below, carrying the record's save; it stands
    # for the first step's own mark, but in a run whose drivers died before: that one names
    # the step.
    ctx.drive_began = ctx.journal_length + notes
    visible = bool(markers) and ctx.step_marked is None and not ctx.lease.soon_outlives_process
    if not visible:
        ctx.write_soon(*markers)
        if notes:
            gate.noted(ctx.run_id)
    if resuming or record.status is not RunStatus.RUNNING or record.wake_at is not None:
        record.status = RunStatus.RUNNING
        record.wake_at = None
        record.waiting_for = None
        # The time of the event just written: a store that rebuilds records from the
        # journal's ends (the local store) then has no record file to write for this save.
        record.updated_at = now
        # Still due now, as it was: a store may carry this save with the first step's append,
        # or with the marker's write below. Not later when messages were taken in: they are
        # acknowledged once it is saved. (A run that was suspended resumes with a marker
        # written at once, so this costs a save of its own only to a fresh run's first
        # drive that finds a message, a cancel sent before it began.)
        if (taken and not visible) or not lease.save_soon(record.copy()):
            await lease.save(record)
    if visible:
        await ctx.write(*markers, durable=False)
        if notes:
            gate.noted(ctx.run_id)
        if not dead.count:
            ctx.step_marked = ctx.loop.create_future()
            ctx.step_marked.set_result(None)


async def _record_outcome(engine: EngineLike, ctx: RunContext, event: Event) -> RunRecord:
    """Append the run's outcome, do what follows it, and save the final record."""
    record, lease = ctx.record, ctx.lease
    apply_outcome(record, event)
    if not engine.features.outcome_work(ctx, record):
        # Nothing to release or tell (``after_outcome`` has nothing to do): the outcome and
        # the record that says so may be one write.
        await lease.append_and_save([event], record)
        engine.notify_finished(record)
        return record
    await lease.append([event])
    # Before the terminal save: a finished run leaves the queue, so a crash after the save
    # would never be looked at again. Until the save, the next driver repeats these (they
    # are idempotent) through the repair path above.
    await engine.features.after_outcome(ctx, record)
    await lease.save(record)
    engine.notify_finished(record)
    return record


async def _cancel_waits(ctx: RunContext) -> bool:
    """Whether a cancel waits in the inbox of a run that has not started."""
    return any(m.kind == "cancel" for m in await ctx.lease.read_inbox(ctx.engine.store))


async def _cancel_unstarted(engine: EngineLike, ctx: RunContext) -> RunRecord:
    """Cancel a run that never started and whose workflow this process cannot load: no code
    of it ever ran, so none needs to run to end it (else a run named by a typo, or of a
    workflow since removed, could never be ended: only a worker that loads it would)."""
    await apply_messages(ctx, await ctx.lease.read_inbox(engine.store), live=False)
    ctx.closed = True
    return await _record_outcome(engine, ctx, ctx.event("run_cancelled"))


async def _fail_stalled(engine: EngineLike, ctx: RunContext, dead: Recoveries) -> RunRecord:
    """The run's drivers died ``max_recoveries`` times in a row: fail it with
    ``wf.RunStalled``, without running its code again (nor retrying it)."""
    error = RunStalled(ctx.run_id, dead.count, dead.named_steps())
    log.error("%s", error)
    ctx.closed = True
    return await _record_outcome(engine, ctx, ctx.event("run_failed", error=describe_error(error)))


def _next_attempt_at(ctx: RunContext, workflow: Workflow[Any, Any]) -> float:
    """When the run's next attempt is due: after the workflow's backoff (``UsageError`` if
    the backoff fails, or its due time is past the latest wf keeps)."""
    delay = workflow.options.next_delay(ctx.record.attempt, where=f"workflow {workflow.name!r}")
    return check_due(
        f"the backoff of {delay:g} s after attempt {ctx.record.attempt}", ctx.clock.now() + delay
    )


async def _retry_later(ctx: RunContext, error: dict[str, Any], retry_at: float) -> RunRecord:
    """The attempt failed and another is allowed: record it, due after the backoff."""
    record = ctx.record
    now = ctx.clock.now()
    record.attempt += 1
    await ctx.lease.append(
        [
            ctx.event(
                "run_retrying",
                attempt=record.attempt,
                max_attempts=record.max_attempts,
                error=error,
                retry_at=retry_at,
            )
        ]
    )
    record.status = RunStatus.PENDING
    record.wake_at = retry_at
    record.waiting_for = None
    record.error = error
    record.updated_at = now
    await ctx.lease.save(record)
    return record


async def _no_exit(
    workflow: Workflow[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The workflow's coroutine, with a ``BaseException`` its code raises (``sys.exit``, a
    ``KeyboardInterrupt``, a ``CancelledError`` nothing asked for: ``uncaught``) made the run's
    failure: a ``SystemExit`` or a ``KeyboardInterrupt`` out of a task ends the event loop, the
    worker and every run in it; the others would leave the run unrecorded, driven again.

    The coroutine is made here, not handed in: a task cancelled before its first step (a crash,
    a stop, a lost lease just after the drive began) never runs this, and would drop one made
    for it never awaited (a ``RuntimeWarning`` naming the user's workflow)."""
    try:
        return await workflow.fn(*args, **kwargs)
    except Exception:
        raise
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # a real cancellation (the run's, a suspension, a lost lease)
        raise made_up_cancel(f"workflow {workflow.name!r}") from exc
    except BaseException as exc:
        error = uncaught(f"workflow {workflow.name!r}", exc)
        if error is None:
            raise
        raise error from exc


def _retryable(ctx: RunContext, exc: BaseException) -> bool:
    """Whether a failed attempt may be followed by another."""
    if ctx.record.attempt >= ctx.record.max_attempts:
        return False
    return not fails_at_once(exc)  # input and output validation too


async def _mark_corrupt(
    engine: EngineLike, lease: Lease, record: RunRecord, exc: Exception
) -> RunRecord:
    if not isinstance(exc, StoreCorrupted):
        # Valid JSON whose events lack fields the kernel needs: corruption all the same.
        exc = StoreCorrupted(f"journal of run {record.id} has a malformed event: {exc!r}")
    # Said once and counted with the other damaged items (the worker's summary).
    engine.store.faults.note(
        "run", record.id, engine.store.run_location(record.id), exc, failed=True
    )
    record.status = RunStatus.FAILED
    record.error = describe_error(exc)
    record.wake_at = None
    record.waiting_for = None
    record.updated_at = engine.clock.now()
    await lease.save(record)
    return record


_OUTCOME_TYPE = {v: k for k, v in OUTCOME_EVENTS.items()}


async def _run_workflow(
    ctx: RunContext, workflow: Workflow[Any, Any]
) -> tuple[RunStatus, dict[str, Any]]:
    """Run the workflow coroutine to an outcome; returns the status and the outcome's fields."""
    where = f"workflow {workflow.name!r}"
    try:
        stored = decode(ctx.record.input) or {}
        if not isinstance(stored, dict):
            raise StoreCorrupted(f"run {ctx.run_id}: its stored input is not arguments")
        args, kwargs = validate_arguments(
            workflow.fn, tuple(stored.get("args", ())), dict(stored.get("kwargs", {})), where=where
        )
        if ctx.record.by_name is not None:
            problem = placement_problem(ctx.record, workflow, args, kwargs)
            if problem is not None:
                raise problem
            ctx.record.by_name = None  # adopted: saved with the record's next save
    except Exception as exc:
        return RunStatus.FAILED, {"error": describe_error(exc)}

    context = contextvars.copy_context()
    context.run(_current_run.set, ctx)
    context.run(_current_step.set, None)
    context.run(in_run.set, True)
    wrap_streams()  # a run's output never fails it (``_steplogs._Tee``)
    loop = ctx.loop  # known: asyncio's lookup checks the process id, a system call
    install_task_factory(loop)
    task = workflow_task(loop, _no_exit(workflow, args, kwargs), context)
    ctx.task = task
    try:
        output = await task
        if _unwound(ctx, task):
            _swallowed(ctx, workflow.name)
            raise Suspending()
    except StoreFailure:
        raise
    except (asyncio.CancelledError, Suspending):
        if ctx.lost is not None:
            # Another driver may have the run now. A sync step's thread runs on, though: this
            # process drives the run again only once it returned, never two of its steps at
            # once (a takeover by another process may overlap it: docs/postgres.md).
            await ctx.threads_returned()
            raise StoreFailure(ctx.lost) from None
        if ctx.divergence is not None:
            await _end_steps(ctx)
            return RunStatus.FAILED, {"error": describe_error(ctx.divergence)}
        if ctx.suspending or ctx.evicting:
            return RunStatus.SUSPENDED, _suspension(ctx)
        raise
    except Cancelled:
        await _end_steps(ctx)
        if ctx.divergence is not None:
            return RunStatus.FAILED, {"error": describe_error(ctx.divergence)}
        return await _compensated(ctx, context, RunStatus.CANCELLED, {})
    except Exception as exc:
        if _unwound(ctx, task):
            _swallowed(ctx, workflow.name)
            return RunStatus.SUSPENDED, _suspension(ctx)
        await _end_steps(ctx)
        if ctx.divergence is not None:
            return RunStatus.FAILED, {"error": describe_error(ctx.divergence)}
        if ctx.root_scope.fired:
            # Cancelled while it was failing (say, a cancelled child's RunCancelled reached it
            # before its own cancellation did): the run's outcome is the cancellation.
            error = {"error": describe_error(exc)}
            return await _compensated(ctx, context, RunStatus.CANCELLED, error)
        if _retryable(ctx, exc):
            try:
                retry_at = _next_attempt_at(ctx, workflow)
            except UsageError as bad:  # the backoff failed: so would every later attempt's
                error = {"error": describe_error(bad)}
                return await _compensated(ctx, context, RunStatus.FAILED, error)
            # Another attempt follows: compensations wait for the run's real end.
            return RunStatus.PENDING, {"error": describe_error(exc), "retry_at": retry_at}
        return await _compensated(ctx, context, RunStatus.FAILED, {"error": describe_error(exc)})
    await _end_steps(ctx)  # steps it started and never awaited: none runs on after the outcome
    ctx.finish_check()
    if ctx.divergence is not None:
        return RunStatus.FAILED, {"error": describe_error(ctx.divergence)}
    if ctx.root_scope in ctx.pending_scopes:
        # A cancel journaled before the outcome that never reached the code (it came during
        # the last step, a sync one that ran to its end): the run's end is its next durable
        # operation, so the run ends cancelled and its compensations run. No delivery is
        # recorded: a replay fires the cancel again and returns here the same way.
        return await _compensated(ctx, context, RunStatus.CANCELLED, {})
    try:
        if not isinstance(output, Coroutine):  # an un-awaited call: ``encode`` asks about await
            output = validate_output(workflow.fn, output, where=where)
    except OutputValidationError as exc:
        # No further attempt: the same code would return the same value.
        return await _compensated(ctx, context, RunStatus.FAILED, {"error": describe_error(exc)})
    try:
        encoded = encode(output, where=f"output of {where}")
    except ValueEncodingError as exc:
        return RunStatus.FAILED, {"error": describe_error(exc)}
    return RunStatus.COMPLETED, {"output": encoded}


async def _end_steps(ctx: RunContext) -> None:
    """End the steps the workflow left running (``RunContext.end_steps``) before its outcome,
    its compensations or its next attempt."""
    if ctx.step_calls or ctx.detached_threads:
        await ctx.end_steps()
    if ctx.lost is not None:
        raise StoreFailure(ctx.lost) from None  # lost while they ended: record nothing


async def _compensated(
    ctx: RunContext, context: contextvars.Context, status: RunStatus, fields: dict[str, Any]
) -> tuple[RunStatus, dict[str, Any]]:
    """Run the compensations registered with ``wf.rollback`` before recording the outcome."""
    if not ctx.rollbacks:
        return status, fields
    task = asyncio.get_running_loop().create_task(compensate(ctx), context=context)
    ctx.task = task
    try:
        errors = await task
        if _unwound(ctx, task):
            _swallowed(ctx, "compensations")
            raise Suspending()
    except (asyncio.CancelledError, Suspending):
        if ctx.suspending or ctx.evicting:
            return RunStatus.SUSPENDED, _suspension(ctx)
        raise
    if ctx.divergence is not None:
        return RunStatus.FAILED, {"error": describe_error(ctx.divergence)}
    if errors:
        fields = {**fields, "rollback_errors": [describe_error(e) for e in errors]}
    return status, fields


def _unwound(ctx: RunContext, task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` ended after being cancelled to suspend or evict the run (an eviction
    that waited for running steps has not cancelled it yet: its outcome is the run's)."""
    return (ctx.suspending or ctx.evicting) and task.cancelling() > 0


def _swallowed(ctx: RunContext, what: str) -> None:
    """The code went on after the ``CancelledError`` that unwinds a suspending (or evicted)
    run: what it did next is not the run's (no durable operation was recorded, as
    ``begin_op`` refused them), so the run is suspended all the same, and on its resume the
    wait it suspended at ends as it would have. Said once per run and drive."""
    log.warning(
        "run %s: %s caught the CancelledError that suspends it at a durable wait and went "
        "on; wf suspended the run anyway and discarded what it did after: re-raise "
        'asyncio.CancelledError (docs/design.md, "Suspension by quiescence")',
        ctx.run_id,
        what if what == "compensations" else f"workflow {what!r}",
    )


def _suspension(ctx: RunContext) -> dict[str, Any]:
    if ctx.evicting:
        # Suspended by ``RunContext.evict`` (a drain, a reload): due at once, but not here.
        now = ctx.clock.now()
        return {"wake_at": now, "waiting_for": [_events.waiting("resume", until=now)]}
    return {"wake_at": ctx.suspended_wake_at, "waiting_for": ctx.suspended_waiting_for}
