"""Cron schedules: ``wf.schedule`` / ``wf.unschedule`` / ``wf.schedules``, and firing them.

Registering validates everything at once (the cron expression, the time zone, the input against
the workflow's signature) and stores the schedule with its next fire time. Workers fire due
schedules (``fire_due``) and sleep until the next fire time, never polling for it.

**Series that end.** croniter's seconds and year fields can name a series with a last fire
(``34 15 3 12 * */30 2026``). That last fire is decided like any other, and the schedule is then
saved as ``ended`` with no ``next_run``: nothing computes it again. An expression with no fire
after the moment it is registered (``0 0 30 2 *``, or a series wholly in the past) is refused.

**Exactly once.** A fire's run id is derived from the schedule id and the fire time
(``fire_run_id``), so workers racing on one fire create one run: the store's ``create_run``
refuses the second. The decision around it (skip it? catch up how many?) and the schedule's new
state are made under the schedule's lock, so two workers never decide differently. A crash after
the run was created and before the state was saved is harmless: the next worker decides the
same fire again and finds its run already there (its run even if the schedule was edited
since: ``start_fire`` adopts it).

**Catch-up.** Fires missed while no worker ran are all due at once when one starts: ``"one"``
(the default) starts the latest and counts the others as skipped, ``"none"`` starts a fire only
if it is on time (less than ``MISSED_AFTER`` late), ``"all"`` starts every one (of the latest
``CATCH_UP_MAX``, a slice a pass). Whatever the gap, this is bounded work (``_catchup``): the
missed fires are never walked one by one.

**Overlap.** By default a fire is skipped while the schedule's previous run is still going
(``skip_if_running``), and fires share a queue group named after the schedule, so they run one
at a time. ``allow_overlap=True`` does neither.

**Daylight saving time.** Times are computed by croniter in the schedule's zone (``zoneinfo``;
UTC when none is given). A wall time that does not exist (02:30 on a spring-forward night) fires
once, at the end of the gap (03:00). A wall time that happens twice (01:30 on a fall-back night)
fires once, the first time, for a schedule with a fixed minute and hour (``@daily`` and the
other midnight macros among them); a schedule with a
wildcard in its minute or hour (``*/15 * * * *``, ``0 * * * *``) keeps its real-time rhythm
through the repeated hour, as cron does.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import re
from typing import TYPE_CHECKING, Any

from wf._exceptions import (
    LeaseLost,
    RunAlreadyExists,
    RunNotFound,
    StoreCorrupted,
    StoreUnavailable,
    UsageError,
    WFError,
)
from wf.engine._catchup import Plan, plan
from wf.engine._clock import thread_work
from wf.engine._codec import decode, encode
from wf.engine._cron import check_cron, check_tz, first_fire, zone_name
from wf.engine._firing import FIRE_CONCURRENCY, Firing
from wf.engine._queueing import check_priority, served
from wf.engine._signature import bind_input, validate_arguments
from wf.engine._workflow import Workflow, resolve_workflow_off_loop
from wf.store import RunRecord, Schedule, Store
from wf.store._base import CATCH_UP
from wf.store._ids import _b32
from wf.store._limits import check_name, iso_time, shown

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

log = logging.getLogger("wf.schedules")

MISSED_AFTER = 60.0
"""A fire more than this many seconds late counts as missed (``catch_up="none"`` skips it)."""
MISSED = "missed: no worker was running"
"""The skip reason of a fire missed while no worker ran."""
DROPPED = "missed: its cron expression or zone changed before a worker fired them"
"""The skip reason of fires due when the schedule's times were changed: the new times replace
them."""
PAUSED = "missed: the schedule was paused before a worker fired them"
"""The skip reason of fires due when the schedule was paused."""
LATE = "missed: the worker looked too late"
"""The skip reason of fires missed although the worker deciding them was running since before
the first of them (it heard of the schedule late: a store that cannot hear other processes'
schedule changes, whose workers notice them at their ``poll``)."""
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")  # fullmatch: ``$`` passes a final newline


# -- validation ------------------------------------------------------------------------------


def check_id(schedule_id: str) -> str:
    """The id if well-formed; else ``UsageError`` naming the field."""
    if not isinstance(schedule_id, str) or not _ID.fullmatch(schedule_id):
        raise UsageError(
            f"schedule id: {schedule_id!r} is not valid (letters, digits, '_', '.', ':', '-'; "
            "at most 128, starting with a letter or digit)"
        )
    return schedule_id


def fire_run_id(schedule_id: str, fire_at: float) -> str:
    """The run id of a fire: a well-formed run id (sorting by fire time) from the schedule id
    and the fire time alone, so every worker derives the same one."""
    millis = round(fire_at * 1000)
    tail = int.from_bytes(hashlib.blake2b(schedule_id.encode(), digest_size=10).digest(), "big")
    return "wrun_" + _b32(millis, 10) + _b32(tail, 16)


# -- the public API --------------------------------------------------------------------------


async def schedule(
    schedule_id: str,
    workflow: Workflow[..., Any],
    *,
    cron: str,
    input: Any = None,
    tz: str | dt.tzinfo | None = None,
    skip_if_running: bool = True,
    catch_up: str = "one",
    priority: int | None = None,
    group: str | None = None,
    allow_overlap: bool = False,
    target: str | None = None,
) -> Schedule:
    """Create or replace (by id) a cron schedule that starts ``workflow`` with ``input``.

    ``input`` reads like ``wf run --input``: an object maps parameters by name, a list gives
    them by position, another value is the single argument. Everything is validated now: a
    malformed ``cron``, an unknown ``tz`` or an ``input`` that does not fit raises
    ``UsageError`` naming the field. ``tz`` is an IANA name or a ``zoneinfo.ZoneInfo`` (kept as
    its name); names whose zone depends on the machine (``localtime``) are refused.
    ``skip_if_running`` skips a fire while the previous run is still going; ``catch_up`` says
    what to do with fires missed while no worker ran (``"one"``, ``"none"``, ``"all"``);
    ``priority`` and ``group`` are passed to each run (the group defaults to the schedule id, so
    fires run one at a time); ``allow_overlap=True`` lets fires overlap (no skipping, no group).
    Replacing a schedule keeps its history; its next fire time is computed again when the cron
    expression or zone changed. Returns the stored schedule.
    """
    from wf.engine._current import current_engine

    return await register(
        current_engine(),
        schedule_id,
        workflow,
        cron=cron,
        input=input,
        tz=zone_name(tz),
        skip_if_running=skip_if_running,
        catch_up=catch_up,
        priority=priority,
        group=group,
        allow_overlap=allow_overlap,
        target=target,
    )


async def unschedule(schedule_id: str) -> bool:
    """Remove a schedule; False if there was none. Runs it started are kept."""
    from wf.engine._current import current_engine

    store = current_engine().store
    async with store.holding_schedule(check_id(schedule_id)):
        return await store.delete_schedule(schedule_id)


async def schedules() -> list[Schedule]:
    """Every schedule of the store, by id (``next_run``, ``last_fire_at``, ``last_run_id``,
    ``skipped``... are epoch seconds and ids, like ``RunRecord``'s)."""
    from wf.engine._current import current_engine

    return await current_engine().store.list_schedules()


async def register(
    engine: EngineLike,
    schedule_id: str,
    workflow: Workflow[..., Any],
    *,
    cron: str,
    input: Any = None,
    tz: str | None = None,  # a name: the HTTP API's body is derived from it
    skip_if_running: bool = True,
    catch_up: str = "one",
    priority: int | None = None,
    group: str | None = None,
    allow_overlap: bool = False,
    target: str | None = None,
) -> Schedule:
    """``wf.schedule`` on a given engine (see there)."""
    check_id(schedule_id)
    if not isinstance(workflow, Workflow):
        raise UsageError(f"wf.schedule() needs a @wf.workflow, got {type(workflow).__name__}")
    cron = check_cron(cron)
    tz = zone_name(tz)
    if catch_up not in CATCH_UP:
        raise UsageError(f"catch_up: {catch_up!r} is not one of {', '.join(CATCH_UP)}")
    for name, flag in (("skip_if_running", skip_if_running), ("allow_overlap", allow_overlap)):
        if not isinstance(flag, bool):
            raise UsageError(f"{name}: expected true or false, got {shown(flag)}")
    if priority is not None:
        check_priority(priority)  # every fire would fail on it, and a huge one cannot be kept
    if group is not None:
        check_name("group", group)
    where = f"schedule {schedule_id!r} of workflow {workflow.name!r}"
    args, kwargs = bind_input(workflow.fn, input)
    args, kwargs = validate_arguments(workflow.fn, args, kwargs, where=where)
    encoded = encode({"args": list(args), "kwargs": kwargs}, where=f"input of {where}")
    now = engine.clock.now()
    store = engine.store
    async with store.holding_schedule(schedule_id):
        try:
            existing = await store.get_schedule(schedule_id)
        except StoreCorrupted:
            existing = None  # a damaged schedule is replaced whole: registering repairs it
        # Same times keep the next fire already computed (even one due now, not yet fired,
        # however far back: a program registering at each start must not lose the fires
        # missed while it was down; the catch-up decides them, in bounded work). A schedule
        # whose series ended is computed again, and refused if it stays ended.
        kept = (
            existing.next_run
            if existing is not None and (existing.cron, existing.tz) == (cron, tz)
            else None
        )
        made = Schedule(
            id=schedule_id,
            workflow=workflow.name,
            cron=cron,
            tz=tz,
            target=target or workflow.target,
            input=encoded,
            skip_if_running=skip_if_running and not allow_overlap,
            catch_up=catch_up,
            allow_overlap=allow_overlap,
            priority=priority,
            group=group,
            created_at=existing.created_at if existing is not None else now,
            updated_at=now,
            next_run=kept if kept is not None else first_fire(cron, tz, now),
        )
        if existing is not None:
            made.last_fire_at = existing.last_fire_at
            made.last_run_id = existing.last_run_id
            made.skipped = existing.skipped
            made.last_skipped_at = existing.last_skipped_at
            made.last_skip_reason = existing.last_skip_reason
            if existing.paused:
                # A pause is the operator's: registering again (a program at each start) keeps it.
                made.paused, made.next_run = True, None
            elif kept is None:
                count_dropped(existing, made, now, DROPPED)
        await store.save_schedule(made)
    return made


def count_dropped(existing: Schedule, made: Schedule, now: float, why: str) -> None:
    """Count, on ``made``, the fires of ``existing`` due by ``now`` that will never start a
    run (``why``: ``DROPPED`` by new times, or ``PAUSED``), in bounded work."""
    if existing.next_run is None or existing.next_run > now:
        return
    try:
        check_cron(existing.cron)
        check_tz(existing.tz)
        todo = plan(existing.cron, existing.tz, "one", existing.next_run, now)
    except (UsageError, ValueError):  # croniter's errors are ValueErrors
        return  # an old expression croniter refuses (damage) leaves nothing to count
    if not todo.due:
        return
    count = todo.passed + len(todo.due)
    reason = why + (f" (at least {count} fires)" if todo.passed_more else "")
    _skip(made, todo.due[-1], reason, count)


# -- firing ----------------------------------------------------------------------------------


async def fire_due(
    engine: EngineLike, *, watching_since: float | None = None, firing: Firing | None = None
) -> float | None:
    """Fire every due schedule of the store; return the earliest next fire time (or None).

    ``watching_since``: the time the calling worker first looked at the schedules; fires it
    misses from then on are counted as ``LATE``, not as missed while no worker ran.
    ``firing``: what the calling worker keeps between passes (see ``Firing``).

    Called by workers on each pass. Due schedules fire in tasks of their own, up to
    ``FIRE_CONCURRENCY`` at once, starting at a random place in the list. A schedule left due
    (another process is firing it, its workflow's module is still importing, it failed) is
    looked at again after ``BUSY_RETRY`` seconds, then twice as long each time, up to
    ``RETRY_MAX``. A schedule that cannot be read or fired (a damaged file or row, a cron
    expression croniter refuses) is skipped and noted once in the store's ``faults`` (the
    store skips a file it cannot read at all); the others fire.
    """
    firing = firing if firing is not None else Firing()
    store = engine.store
    now = engine.clock.now()
    # Only the due schedules are read (and the earliest later fire): a pass costs the same
    # whether the store holds ten schedules or thousands that are not due.
    listed, next_fire = await store.due_schedules(now)
    start = firing.next_pass(listed)
    due: list[Schedule] = []
    upcoming: list[float] = [] if next_fire is None else [next_fire]
    for found in listed[start:] + listed[:start]:
        later = firing.waiting(found.id, now)
        if later is None:
            due.append(found)
            continue
        upcoming.append(later)

    async def fire_some() -> None:
        while due:
            found = due.pop()
            left_due = True  # so when its fault is contained: looked at again later
            with store.faults.contain("schedule", found.id, store.schedule_location(found.id)):
                fired = await fire(
                    engine, found.id, now, watching_since=watching_since, firing=firing
                )
                # Nothing decided (another process is on it, its module still importing):
                # wait longer each time. A slice of a catch-up decided: the next one at once.
                left_due = fired is None or fired.next_run == found.next_run
            if left_due:
                upcoming.append(firing.back_off(found.id, now))
                continue
            firing.fired(found.id)
            if fired is not None and fired.next_run is not None:
                upcoming.append(fired.next_run)

    due.reverse()  # popped from the end: the list's order, from the random start
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(FIRE_CONCURRENCY, len(due))):
                group.create_task(fire_some())
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # a store failure: the worker's to handle
    return min(upcoming, default=None)


async def check_stored(store: Store) -> list[str]:
    """What ``wf store verify`` adds to the store's own check: each readable schedule's cron
    expression and zone, which only the kernel can judge. One line per damaged schedule."""
    problems = []
    for found in await store.list_schedules():
        try:
            check_cron(found.cron)
            check_tz(found.tz)
        except UsageError as error:
            problems.append(f"{store.schedule_location(found.id)}: schedule {found.id!r}: {error}")
    return problems


async def fire(
    engine: EngineLike,
    schedule_id: str,
    now: float,
    *,
    watching_since: float | None = None,
    firing: Firing | None = None,
) -> Schedule | None:
    """Decide and start the due fires of one schedule under its lock; the schedule after.

    None when another process holds the lock (it is deciding the same fires). ``watching_since``
    and ``firing``: see ``fire_due``. With ``firing``, a schedule whose workflow's module is
    still importing after ``IMPORT_WAIT`` is left due, its ``last_error`` saying so.
    """
    store = engine.store
    async with store.holding_schedule(schedule_id, wait=False) as held:
        if not held:
            return None
        found = await store.get_schedule(schedule_id)
        if found is None or found.next_run is None or found.next_run > now:
            return found
        loading = await firing.loading(engine, found) if firing is not None else None
        if loading is not None:
            found.last_error = f"its workflow's module is still importing after {loading:.1f} s"
            if firing is not None and firing.say(schedule_id, "importing", now):
                log.warning("schedule %s: %s (%s)", schedule_id, found.last_error, found.target)
            await store.save_schedule(found)
            return found
        # Bounded work whatever the gap: see ``_catchup``.
        first = found.next_run
        todo = plan(found.cron, found.tz, found.catch_up, found.next_run, now)
        due = todo.due
        found.next_run = todo.next_run
        if todo.next_run is None:
            # The series ended with these fires: recorded, so it is never computed again.
            found.ended = True
            # Its moments, as every worker log line's, in ISO 8601, UTC (docs/cli.md, "Times").
            last = iso_time(due[-1])
            log.info("schedule %s: its series has ended (its last fire was %s)", schedule_id, last)
        if found.catch_up == "all":
            chosen = due
        elif found.catch_up == "one":
            chosen = due[-1:]
        else:
            chosen = [due[-1]] if now - due[-1] <= MISSED_AFTER else []
        missed = [at for at in due if at not in chosen]
        if todo.passed or missed:
            watched = watching_since is not None and watching_since <= first
            _miss(found, todo, missed, LATE if watched else MISSED)
        for fire_at in chosen:
            if found.skip_if_running and (going := await _still_going(engine, found.last_run_id)):
                reason = f"the previous run {found.last_run_id} was still going"
                pin = going.deployment
                if pin is not None and not await served(engine.store, pin):
                    # Its deployment's workers are gone (a deploy): every later fire is skipped
                    # too until one comes back or the run moves, so the line names whom it
                    # waits for, as ``wf schedules`` does (``last_run_unserved``).
                    reason += f" (waiting for a worker of deployment {pin})"
                    if firing is None or firing.say(schedule_id, reason, now):
                        log.warning(
                            "schedule %s: the fire of %s skipped: %s; no live worker serves "
                            "deployment %s (wf deployments upgrade %s, or start one of its "
                            "workers)",
                            schedule_id,
                            iso_time(fire_at),
                            reason,
                            pin,
                            pin,
                        )
                _skip(found, fire_at, reason)
                continue
            try:
                run_id = await start_fire(engine, found, fire_at, firing=firing)
            except (StoreUnavailable, LeaseLost):
                # The store's moment, not the fire's: the schedule stays due (unsaved) and
                # the fire is made when the store answers again (its run's id is the fire's).
                raise
            except Exception as error:  # one fire's fault stays with its schedule
                # Anything else (a bug, a store's surprise) is this fire's error too: recorded
                # and counted, the schedule saved, never left due for the next pass to call
                # "missed while no worker ran".
                why = (
                    str(error) if isinstance(error, WFError) else f"{type(error).__name__}: {error}"
                )
                _skip(found, fire_at, "error")
                found.last_error = why
                if firing is None or firing.say(schedule_id, why, now):
                    log.error(
                        "schedule %s: the fire of %s failed: %s%s",
                        schedule_id,
                        iso_time(fire_at),
                        why,
                        "" if firing is None else " (said again after an hour if it persists)",
                    )
                continue
            if firing is not None:
                firing.ok(schedule_id)
            found.last_fire_at = fire_at
            found.last_run_id = run_id
            found.last_error = None
        found.updated_at = now
        await store.save_schedule(found)
        return found


def _skip(found: Schedule, fire_at: float, reason: str, count: int = 1) -> None:
    found.skipped += count
    if found.last_skipped_at is None or fire_at >= found.last_skipped_at:
        found.last_skipped_at = fire_at
        found.last_skip_reason = reason


def _miss(found: Schedule, todo: Plan, missed: list[float], why: str) -> None:
    """Count the missed fires (``why``: ``MISSED`` or ``LATE``): those a catch-up passed over
    and those it decided not to start. A count that stopped at ``MISSED_COUNTED`` is a lower
    bound, and the reason says "at least"."""
    count = todo.passed + len(missed)
    reason = why
    if todo.passed_more:
        reason = f"{why} (at least {count} fires)"
    log.info(
        "schedule %s: %s%d fire(s) missed %s (catch_up=%r)",
        found.id,
        "at least " if todo.passed_more else "",
        count,
        "while no worker ran" if why == MISSED else "although a worker was running",
        found.catch_up,
    )
    last = missed[-1] if missed else todo.last_passed
    if last is not None:
        _skip(found, last, reason, count)
    else:
        found.skipped += count


async def _still_going(engine: EngineLike, run_id: str | None) -> RunRecord | None:
    """The record of ``run_id`` while that run is unfinished; None once it ended or is gone."""
    if run_id is None:
        return None
    try:
        record = await engine.store.get_run(run_id)
    except RunNotFound:
        return None
    return None if record.status.is_terminal else record


def queue_options(found: Schedule) -> dict[str, Any]:
    """The queue options each fire's run gets: ``priority`` and ``group`` (by default the
    schedule id, so fires of one schedule run one at a time; none with ``allow_overlap``)."""
    options: dict[str, Any] = {}
    if found.priority is not None:
        options["priority"] = found.priority
    group = found.group if found.group is not None else (None if found.allow_overlap else found.id)
    if group is not None:
        options["group"] = group
    return options


async def start_fire(
    engine: EngineLike, found: Schedule, fire_at: float, *, firing: Firing | None = None
) -> str:
    """Create (queued, not driven here) the run of one fire; its id. Idempotent per fire.
    ``firing``: the workflow is the one its ``loading`` waited for."""
    workflow: Any
    if firing is not None:
        workflow = await firing.resolve(found)
    else:
        with thread_work(engine.clock):  # an import the workflow needs runs off the loop
            workflow = await resolve_workflow_off_loop(found.workflow, found.target)
    data = decode(found.input) if found.input is not None else {"args": [], "kwargs": {}}
    options = queue_options(found)
    # Seam for queue semantics (#15): a workflow handle that takes run options gets the
    # schedule's priority and group; without it the options are recorded on the schedule only.
    with_options = getattr(workflow, "with_options", None)
    if options and with_options is not None:
        workflow = with_options(**options)
    run_id = fire_run_id(found.id, fire_at)
    try:
        run = await engine.start(
            workflow,
            tuple(data.get("args", ())),
            dict(data.get("kwargs", {})),
            run_id=run_id,
            detach=True,
            target=found.target,
            schedule_id=found.id,
        )
    except RunAlreadyExists as error:
        if error.run_id != run_id:
            raise
        # A worker created this fire's run and died before saving the schedule, which was
        # edited since (another input or workflow): the run is this fire's all the same.
        log.info("schedule %s: the fire's run %s was made before an edit", found.id, run_id)
        return run_id
    return run.id
