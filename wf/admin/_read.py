"""Reading runs: pages of runs, everything about one run, and which store this is."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wf._events import journal_damage
from wf._exceptions import RunNotFound, StoreCorrupted, UsageError, WFError
from wf._tasks import in_thread_alone
from wf.admin import _journal
from wf.admin._model import (
    Compensations,
    EventPage,
    Failure,
    Operation,
    Race,
    RunDetail,
    RunLink,
    RunPage,
    SchedulePage,
    StoreInfo,
    StreamInfo,
)
from wf.store import Event, RunRecord, RunStatus, collect_faults
from wf.store._faults import Fault, named_place

if TYPE_CHECKING:
    from wf.admin._liveness import LivenessProbe
    from wf.store import QueueStats, Store

OFF_LOOP_EVENTS = 100
"""A journal longer than this is analysed (operations, failures, races...) in a thread, and its
run's document or page laid out there too, so that a server answering about a long run goes on
answering others meanwhile (``wf serve``'s run page and ``GET /api/v1/runs/{id}``). About what
a few ms of the loop build, measured on a run of 1,500 events: its page 75 ms, its JSON
document 10 ms, its analysis 2 ms; 4 requests for a run of 4,800 events held a cheap request
about 1 s when the bound was 5,000."""

OFF_LOOP_WEIGHT = 64 * 1024
"""A run whose values (input, output, error, its journal's events) weigh more than this (about
the characters of their text) has its document or page laid out in a thread too, however
short its journal: a step returning 20 MB made a page that took 5.7 s to build, and every
other request of the server waited."""


def heavy(detail: RunDetail) -> bool:
    """Whether laying out ``detail`` (a page, a JSON document) is work for a thread: a journal
    longer than ``OFF_LOOP_EVENTS``, or values weighing more than ``OFF_LOOP_WEIGHT``. Weighed
    without encoding or copying anything, and only until the bound is passed: a container's
    length counts (8 a item) before it is walked, so at most ``OFF_LOOP_WEIGHT / 8`` values
    are visited, however big one is."""
    if len(detail.events) > OFF_LOOP_EVENTS:
        return True
    run = detail.run
    # Containers to walk, by reference (a dict as its keys' and values' views): never copied.
    walking: list[Iterable[Any]] = [(run.input, run.output, run.error, detail.events)]
    weight = 0
    while walking:
        for value in walking.pop():
            weight += 8
            if isinstance(value, str | bytes):
                weight += len(value)
            elif isinstance(value, dict):
                weight += 16 * len(value)  # a key and a value each, before walking them
                if weight <= OFF_LOOP_WEIGHT:
                    walking += (value.keys(), value.values())
            elif isinstance(value, list | tuple):
                weight += 8 * len(value)  # each item, before walking them
                if weight <= OFF_LOOP_WEIGHT:
                    walking.append(value)
            if weight > OFF_LOOP_WEIGHT:
                return True
    return False


SEARCH_BUDGET = 5_000
"""At most this many runs are read for one page of a search by a part of an id (no index
holds substrings of ids), so a search answers in bounded time; the page says how many it read
and where to search further. A whole run id and a part of a workflow name are found from
indexes instead (see ``list_runs``)."""
CHILDREN_SHOWN = 1_000
"""A run's detail links at most this many of its children: its newest ones (a store lists runs
newest first only; the oldest would take reading every child), in the order it started them."""
JOURNAL_PAGE = 500
"""Journal events ``journal_page`` gives at most by default (and ``GET
/api/v1/runs/{id}/events`` at most at once)."""
_MERGED_NAMES = 20
"""A search matching more workflow names than this reads runs instead (each name is one
listing to merge)."""


def check_listing(
    *,
    status: Sequence[RunStatus | str] | None,
    limit: int,
    before: str | None,
    parent_id: str | None,
    names: Mapping[str, str | None] | None = None,
    search: str | None = None,
) -> list[RunStatus] | None:
    """A listing's filters, checked the same way by every backend (``wf.UsageError`` saying
    which is wrong); the statuses as ``RunStatus``es. ``names``: the filters that take a
    name (workflow, queue, group, deployment): given, each must be one (not "", which would
    mean no filter to one backend and no run to another). ``search``, given, is a name too,
    and not only white space (an empty search is not "every run")."""
    from wf.store._ids import validate_run_id
    from wf.store._limits import check_name

    for what, name in (names or {}).items():
        if name is not None:
            check_name(f"a {what}", name)
    if search is not None:
        if isinstance(search, str) and not search.strip():
            raise UsageError("a search cannot be empty")
        check_name("a search", search)

    known = {s.value: s for s in RunStatus}
    for value in status or ():
        if getattr(value, "value", value) not in known:
            raise UsageError(f"status {value!r} is not one of {', '.join(known)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"limit must be a whole number of at least 1, not {limit!r}")
    if before is not None:
        try:
            validate_run_id(before)
        except UsageError as exc:
            raise UsageError(f"before: {exc}") from None
    if parent_id is not None:
        validate_run_id(parent_id)
    return [known[getattr(s, "value", s)] for s in status] if status else None


async def list_runs(
    store: Store,
    *,
    status: Sequence[RunStatus | str] | None = None,
    workflow: str | None = None,
    limit: int = 50,
    before: str | None = None,
    parent_id: str | None = None,
    search: str | None = None,
    queue: str | None = None,
    group: str | None = None,
    deployment: str | None = None,
) -> RunPage:
    """A page of runs, newest first: those with one of the ``status``es, of ``workflow``
    (its exact name), below ``parent_id``, of the named ``queue``, of the ``group`` key, pinned
    to ``deployment``, created before the run ``before``. Every filter reads an index: a page
    costs the same however many runs the store holds. A ``before`` that names no run (nor a
    run deleted since) is a ``wf.UsageError``, never an empty page.

    ``search`` (case-insensitive) finds, in this order: the run with exactly that id; else the
    runs of the workflows whose name contains it, from the workflow index (when the store
    keeps the names: ``Store.workflow_names``); else the runs whose id contains it, by reading
    at most ``SEARCH_BUDGET`` runs per page, so such a page may hold fewer than ``limit`` runs
    and still have a ``next_before`` (``RunPage.searched`` and ``exhausted`` say so).
    """
    named = {"workflow": workflow, "queue": queue, "group": group, "deployment": deployment}
    statuses = check_listing(
        status=status, limit=limit, before=before, parent_id=parent_id, names=named, search=search
    )
    filters: dict[str, Any] = {
        "statuses": statuses,
        "workflow": workflow,
        "parent_id": parent_id,
        **{k: v for k, v in (("queue", queue), ("group", group), ("deployment", deployment)) if v},
    }
    with collect_faults() as damaged:
        page = await _page(store, search, filters, limit, before)
        if before is not None and not page.runs:
            await _check_cursor(store, before)
        page = await _pending_cancels(store, page)
    if not damaged:
        return page
    # A run that cannot be read, or a stray entry of the index the listing walked past.
    listed = [f for f in damaged if f.kind in ("run", "index entry")]
    return dataclasses.replace(page, damaged=listed)


async def _pending_cancels(store: Store, page: RunPage) -> RunPage:
    """Mark the listed runs asked to stop whose request no driver has taken in yet (it waits
    in the run's inbox), as the detail does (``RunDetail.cancel_requested``): one call of the
    store for the unfinished runs of the page not marked already (``Store.cancels_waiting``:
    one query on a server store), none if there are none. A request taken in is in the
    record from then on (``wf.engine._inbox``)."""
    runs = list(page.runs)
    unmarked = {
        record.id
        for record in runs
        if not record.cancel_requested and not record.status.is_terminal
    }
    if not unmarked:
        return page
    asked = await store.cancels_waiting(unmarked)
    if not asked:
        return page
    for i, record in enumerate(runs):
        if record.id in asked and record.id in unmarked:
            runs[i] = dataclasses.replace(record, cancel_requested=True)
    return dataclasses.replace(page, runs=runs)


async def _check_cursor(store: Store, before: str) -> None:
    """A store lists nothing before a run that never existed: say so (``wf.UsageError``), or
    the empty page reads as an empty store. Only an empty page is checked (one read): a run
    deleted since (its tombstone kept) still pages, as the store pages past it; so does one
    whose record cannot be read (a scanning search hands out the last run it looked at)."""
    try:
        await store.get_run(before)
    except RunNotFound:
        if await store.get_tombstone(before) is None:
            raise UsageError(f"before: no run with id {before!r}") from None
    except StoreCorrupted:
        pass  # it exists: the empty page stands


async def _page(
    store: Store, search: str | None, filters: dict[str, Any], limit: int, before: str | None
) -> RunPage:
    if not search:
        runs = await store.list_runs(limit=limit, before=before, **filters)
        return RunPage(runs, runs[-1].id if len(runs) == limit else None)
    text = search.strip()
    if before is None:
        exact = await _by_id(store, text, filters)
        if exact is _DAMAGED:
            return RunPage([], None, 1)  # named in ``damaged``, as a scan names it
        if isinstance(exact, RunRecord):
            return RunPage([exact], None, 1)
    named = await _by_name(store, text.lower(), filters, limit, before)
    if named is not None:
        return named
    return await _scan(store, text.lower(), filters, limit, before)


_DAMAGED = object()
"""``_by_id``'s answer for a run that exists but cannot be read (noted as a fault)."""


async def _by_id(store: Store, text: str, filters: dict[str, Any]) -> RunRecord | object | None:
    """The run whose id is ``text`` (as given, or in lower case), if it passes the filters;
    ``_DAMAGED`` for one whose record cannot be read: it is noted as the page's damage (the
    caller collects it), as a search by a part of its id names it, not the page's failure."""
    from wf._exceptions import UsageError
    from wf.store._ids import validate_run_id

    for candidate in dict.fromkeys((text, text.lower())):
        try:
            validate_run_id(candidate)
            record = await store.get_run(candidate)
        except (UsageError, RunNotFound):
            continue
        except StoreCorrupted as damage:
            store.faults.note("run", candidate, store.run_location(candidate), damage)
            return _DAMAGED
        if _passes(record, filters):
            return record
    return None


def _passes(record: RunRecord, filters: dict[str, Any]) -> bool:
    statuses = filters.get("statuses")
    if statuses and record.status not in statuses:
        return False
    fields = ("workflow", "parent_id", "queue", "group", "deployment")
    return all(filters.get(name) in (None, getattr(record, name)) for name in fields)


async def _by_name(
    store: Store, needle: str, filters: dict[str, Any], limit: int, before: str | None
) -> RunPage | None:
    """The runs of the workflows whose name contains ``needle``, merged newest first from
    one listing per name; None when the store keeps no names, or none (or too many) match."""
    names = await store.workflow_names()
    if names is None:
        return None
    wanted = filters.get("workflow")
    matched = [n for n in names if needle in n.lower() and (wanted is None or n == wanted)]
    if not matched or len(matched) > _MERGED_NAMES:
        return None
    rest = {k: v for k, v in filters.items() if k != "workflow"}
    found: list[RunRecord] = []
    for name in matched:
        found += await store.list_runs(workflow=name, limit=limit, before=before, **rest)
    found.sort(key=lambda r: r.seq, reverse=True)
    runs = found[:limit]
    return RunPage(runs, runs[-1].id if len(runs) == limit else None)


async def _scan(
    store: Store, needle: str, filters: dict[str, Any], limit: int, before: str | None
) -> RunPage:
    """The runs whose id or workflow name contains ``needle``, among at most
    ``SEARCH_BUDGET`` runs looked at newest first (``Store.search_runs``)."""
    found, cursor, looked = await store.search_runs(
        needle, limit=limit, budget=SEARCH_BUDGET, before=before, **filters
    )
    exhausted = cursor is not None and len(found) < limit
    return RunPage(found, cursor, looked, exhausted=exhausted)


def readable(value: Any) -> Any:
    """A recorded value (wf's tagged JSON) with each text holding lone surrogates shown as the
    text it is, not as its codec tag (``{"$t": "str", "v": <base64>}``): JSON carries such
    text as ``\\ud800`` escapes, and it reads back as the same value. Every other tag stays
    (a front end shows it as the type it names). For display only: a store keeps the tag."""
    if isinstance(value, list):
        return [readable(item) for item in value]
    if not isinstance(value, dict):
        return value
    if value.get("$t") == "str" and isinstance(value.get("v"), str):
        from wf.engine._codec import decode

        try:
            return decode(value)
        except Exception:  # a damaged tag: shown as stored
            return value
    return {key: readable(item) for key, item in value.items()}


def tagged(value: Any) -> Any:
    """``readable``'s inverse: each text holding lone surrogates as its codec tag again
    (``{"$t": "str", "v": <base64>}``), as the store keeps it: the form a record is read in
    whole (``wf run --json``, ``GET /api/v1/runs``; ``docs/cli.md``, Values)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            from wf.engine._codec import encode

            return encode(value)
        return value
    if isinstance(value, list):
        return [tagged(item) for item in value]
    if isinstance(value, dict):
        return {key: tagged(item) for key, item in value.items()}
    return value


async def existing_run(store: Store, run_id: str) -> RunRecord:
    """The run's record; ``wf.ResultExpired`` (saying when retention deleted it) for a run
    that was deleted, ``wf.RunNotFound`` for one that never was."""
    from wf._exceptions import ResultExpired, RunNotFound
    from wf.store._ids import validate_run_id

    run_id = validate_run_id(run_id)
    try:
        return await store.get_run(run_id)
    except RunNotFound as missing:
        stone = await store.get_tombstone(run_id)
        if stone is None:
            raise
        raise ResultExpired(run_id, stone.deleted_at, stone.reason) from missing


async def queue_stats(store: Store, now: float) -> list[QueueStats]:
    """Runs due at ``now`` and waiting for a driver, per workflow and group
    (``Store.queue_stats``: the web UI's queues page). A damaged due run is left out of the
    counts (``wf store verify`` names it), not noted as the store's (or a worker's) find."""
    with collect_faults():
        return await store.queue_stats(now)


def check_journal_page(start: int, limit: int) -> None:
    """A page's bounds (of a journal, or of step logs), checked the same way by every backend
    (``wf.UsageError``)."""
    from wf._exceptions import UsageError

    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise UsageError(f"start must be a whole number of at least 0, not {start!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"limit must be a whole number of at least 1, not {limit!r}")


async def journal_page(
    store: Store, run_id: str, *, start: int = 0, limit: int = JOURNAL_PAGE
) -> EventPage:
    """The run's journal events from index ``start`` on, oldest first, at most ``limit`` of
    them: a long run's journal a page at a time (``run_detail`` has all of it). Pass the
    page's ``next_start`` as ``start`` for the next one; ``more`` says events past the page
    are stored already. Raises ``wf.RunNotFound`` (``wf.ResultExpired`` for a run retention
    deleted), ``wf.UsageError`` for a ``start`` below 0 or a ``limit`` below 1."""
    check_journal_page(start, limit)
    record = await existing_run(store, run_id)
    events = await store.read_journal(record.id, start)
    page = events[:limit]
    return EventPage(record.id, page, start + len(page), len(events) > limit)


@dataclasses.dataclass(frozen=True)
class _Analysis:
    """What ``run_detail`` works out from the journal alone (no store, so a thread can)."""

    rows: list[Operation]
    started_by: dict[str, int]
    errors: list[Failure]
    races: list[Race]
    compensations: Compensations
    recoveries: list[dict[str, Any]]
    damage: str | None
    """The journal's first event replay cannot use, in words (``wf._events.journal_damage``)."""

    @classmethod
    def of(cls, journal: list[dict[str, Any]], status: str, now: float) -> _Analysis:
        from wf.engine._recovery import history as recovery_history

        rows = _journal.operations(journal, run_status=status, now=now)
        return cls(
            rows=rows,
            started_by=_journal.child_ops(journal),
            errors=_journal.failures(journal),
            races=_journal.races(journal),
            compensations=_journal.compensations(journal, rows, status),
            recoveries=recovery_history(journal),
            damage=journal_damage(journal),
        )


async def run_detail(
    store: Store,
    run_id: str,
    *,
    now: float | None = None,
    replay: bool = False,
    probe: LivenessProbe | None = None,
) -> RunDetail:
    """Everything about one run: record, operations, journal, failures, hooks, streams, its
    parent and children, decided races, compensations, the inbox.

    ``now`` (epoch seconds, default the wall clock) decides which sleeps are over; the
    terminal UI passes its engine's clock so that a fake clock gives stable screens.
    ``replay=True`` also checks that the journal still replays against the code here and
    the code's deployment hash; that imports the workflow's module, so it is never done
    unasked. For a running run, whether its driver is gone is probed (``probe``, default this
    process's probe of the store: ``wf.admin._liveness``). Raises ``wf.RunNotFound``
    (``wf.ResultExpired`` for a run retention deleted).
    """
    from wf.admin._liveness import probe_for

    record = await existing_run(store, run_id)  # one retention deleted: wf.ResultExpired
    inbox = [] if record.status.is_terminal else await store.read_inbox(run_id)
    if record.status is RunStatus.SUSPENDED and not inbox:
        # A driver elsewhere may have taken a message in between the two reads: the record
        # would be the suspension it ended, and a waiter would take the run as settled (``wf
        # hook resume`` over HTTP said "suspended" of a run a worker completed with its
        # payload). A driver acknowledges only once the record says running, so the record
        # read after the empty inbox is the word (``wf.engine._run.settled_again``).
        record = await existing_run(store, run_id)
    journal = await store.read_journal(run_id)
    children: list[RunRecord] = []
    # A damaged hook or stream is left out, and named by the caller: the run's page shows.
    # (A stream read by its name all the same is found again below, by its journal's name.)
    with collect_faults() as damaged:
        streams = await store.list_streams(run_id)
        hooks = await store.list_hooks(run_id)
        try:
            with collect_faults():  # a damaged child is left out of the links, said nowhere
                # Listings are newest first: the newest children, read in the order they started.
                children = (await store.list_runs(parent_id=run_id, limit=CHILDREN_SHOWN))[::-1]
        except StoreCorrupted as error:
            # The index of its children unreadable (on Redis, ``ix:p:…`` a stray write made of
            # another type): named, and the page shows without them (the run's own is whole).
            store.faults.note("children", run_id, named_place(error), error)
    shown_by_name: dict[str, str] = {}
    if any(fault.kind == "stream" for fault in damaged):
        found_by_name = await _found_by_name(store, run_id, journal, streams)
        streams = {**streams, **found_by_name}
        # Its fault says the name it is shown under: it is named, not left out.
        shown_by_name = {store.stream_fault(run_id, name)[0]: name for name in found_by_name}
    if not record.cancel_requested and (
        any(message.kind == "cancel" for message in inbox)
        or any(event.get("type") == "cancel_requested" for event in journal)
    ):
        # Asked to stop, wherever the request is: the record says so once a driver takes it
        # in, the detail at once (``RunDetail.cancel_requested``). Every backend's detail and
        # explanation then tell the same (the HTTP answer carries only the detail's word).
        record = dataclasses.replace(record, cancel_requested=True)
    now = time.time() if now is None else now
    with collect_faults() as lane_damage:  # a lane damaged: named, the page shows
        queue = await queue_state(store, record, journal, now)
    damaged += lane_damage
    analyse = _Analysis.of
    if len(journal) > OFF_LOOP_EVENTS:
        found = await in_thread_alone(analyse, journal, record.status.value, now)
    else:
        found = analyse(journal, record.status.value, now)
    if found.damage is not None:
        # An event replay cannot use: the run's driver fails it as damaged, ``verify`` names
        # it, and its page shows what the rest of the journal says, with this named.
        damaged.append(Fault("journal", run_id, store.run_location(run_id), found.damage))
    replays, current = await _replay_fields(store, record) if replay else (None, None)
    shown = dataclasses.replace(
        record, input=readable(record.input), output=readable(record.output)
    )
    return RunDetail(
        run=shown,
        steps=found.rows,
        events=await in_thread_alone(readable, journal)
        if len(journal) > OFF_LOOP_EVENTS
        else readable(journal),
        errors=found.errors,
        hooks=hooks,
        streams=[
            _stream_info(journal, record, name, count, closed)
            for name, (count, closed) in sorted(streams.items())
        ],
        children=[
            RunLink(child.id, child.workflow, child.status.value, found.started_by.get(child.id))
            for child in children
        ],
        parent=await _parent(store, record),
        races=found.races,
        compensations=found.compensations,
        deployment={"pinned": record.deployment, "recorded": record.code_hash, "current": current},
        replays=replays,
        inbox=[message.kind for message in inbox],
        now=now,
        queue=queue,
        schedule=await _schedule_of(store, record),
        recoveries=found.recoveries,
        driver_gone=await (probe or probe_for(store)).driver_gone(
            record.id, record.status.value, record.updated_at
        ),
        damaged=[
            dataclasses.replace(fault, shown_as=shown_by_name[fault.item])
            if fault.kind == "stream" and fault.item in shown_by_name
            else fault
            for fault in damaged
        ],
    )


def latest_progress(journal: list[dict[str, Any]]) -> Any:
    """The data of the run's latest progress report (None if it has reported none). Here, not
    beside ``wf.progress`` in ``wf.engine._watch``, whose imports (steps, workflows, the run
    context) a look at a run does not need."""
    for event in reversed(journal):
        if event.get("type") == "progress":
            from wf.engine._codec import decode

            return decode(event.get("data"))
    return None


async def queue_state(
    store: Store, record: RunRecord, journal: list[dict[str, Any]], now: float
) -> dict[str, Any]:
    """The run's queue options, its attempts (each with the error that ended it), its latest
    progress, its due time while pending, ``held``: what holds a pending run back, and
    ``unserved``: the deployment an unfinished run is pinned to when no live worker serves it
    (None otherwise)."""
    # The queue's and the codec's modules (decimal, zoneinfo) are imported only for a run
    # that needs them: most looks are at a finished run (``wf inspect --json``'s start-up).
    hold = None
    if record.status is RunStatus.PENDING:  # the only runs a hold is explained for
        from wf._config import store_wide_concurrency
        from wf.engine._queueing import explain as explain_hold

        # Read from the configuration files each time (finding the project walks up from
        # the current directory): only when it can matter, not for every look at a run.
        try:
            total = store_wide_concurrency()
        except WFError:
            total = None  # a bad setting is reported by the commands that apply it
        hold = await explain_hold(store, record, now, total)
    pin = record.deployment
    # An unfinished run pinned to a deployment no live worker serves waits for one, whatever
    # else it waits for: said beside a due timer, a delivered message, a dead driver.
    unserved = None
    if pin is not None and not record.status.is_terminal:
        from wf.engine._queueing import served

        unserved = None if await served(store, pin) else pin
    progress = latest_progress(journal)
    if progress is not None:
        from wf.engine._codec import encode

        progress = encode(progress, where="progress")
    attempts: list[dict[str, Any]] = [
        {"attempt": 1, "ts": journal[0].get("ts") if journal else None, "error": None}
    ]
    for event in journal:
        if event.get("type") == "run_retrying":
            attempts[-1]["error"] = event.get("error")
            attempts.append({"attempt": event.get("attempt"), "ts": event.get("ts"), "error": None})
    if record.status.value == "failed":
        attempts[-1]["error"] = record.error
    return {
        "priority": record.priority,
        "group": record.group,
        "queue": record.queue,
        "attempt": record.attempt,
        "max_attempts": record.max_attempts,
        "max_recoveries": record.max_recoveries,
        "limits": record.limits,
        "due_at": record.wake_at if record.status.value == "pending" else None,
        "attempts": attempts,
        "progress": progress,
        "held": None
        if hold is None
        else {"reason": hold.reason, "ahead": hold.ahead, "at": hold.retry_at},
        "unserved": unserved,
    }


async def _schedule_of(store: Store, record: RunRecord) -> dict[str, Any] | None:
    """The schedule that started the run (``{"id", "cron", "tz", "exists"}``), or None."""
    if record.schedule_id is None:
        return None
    try:
        found = await store.get_schedule(record.schedule_id)
    except StoreCorrupted:  # its file is damaged: the run's page still shows
        return {"id": record.schedule_id, "cron": None, "tz": None, "exists": True}
    if found is None:
        return {"id": record.schedule_id, "cron": None, "tz": None, "exists": False}
    return {"id": found.id, "cron": found.cron, "tz": found.tz, "exists": True}


async def _parent(store: Store, record: RunRecord) -> RunLink | None:
    """The run's parent (None for a top-level run); one that cannot be read keeps its id."""
    if record.parent_id is None:
        return None
    try:
        parent = await store.get_run(record.parent_id)
    except (RunNotFound, StoreCorrupted):  # gone, or damaged: the child's page still shows
        return RunLink(record.parent_id, None, None)
    return RunLink(parent.id, parent.workflow, parent.status.value)


async def replay_check(store: Store, run_id: str) -> dict[str, Any]:
    """Whether the run's journal still replays against the code here, as JSON (``status``:
    ``ok``, ``diverged`` or ``error``, and where). Imports the workflow's module; executes no
    step and writes nothing. Raises ``wf.RunNotFound``."""
    return (await _replay_fields(store, await store.get_run(run_id)))[0]


async def _replay_fields(store: Store, record: RunRecord) -> tuple[dict[str, Any], str | None]:
    """The replay check of this run against the code here, and the deployment hash of that
    code (None if the workflow cannot be loaded). Imports the workflow's module through the
    run's recorded target, like a worker would."""
    from wf.admin._replay import report_json
    from wf.engine._deployment import deployment_of
    from wf.engine._replay_check import check_run
    from wf.engine._workflow import resolve_workflow

    report = await check_run(store, record.id)
    try:
        current = deployment_of(resolve_workflow(record.workflow, record.target).fn)
    except Exception:  # the report already says why the code cannot be loaded
        current = None
    return report_json(report), current


def store_info(store: Store) -> StoreInfo:
    """Which kind of store ``store`` is, and where it keeps its runs."""
    name = type(store).__name__
    kinds = {
        "LocalStore": "local",
        "PostgresStore": "postgres",
        "RedisStore": "redis",
        "MemoryStore": "memory",
    }
    location = (
        getattr(store, "path", None)
        or getattr(store, "dsn", None)
        or getattr(store, "location", None)
        or ""
    )
    return StoreInfo(kinds.get(name, name), _redacted(str(location)))


def _redacted(location: str) -> str:
    """A DSN without its password."""
    if "://" not in location or "@" not in location:
        return location
    scheme, rest = location.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"


async def list_schedules(store: Store) -> list[dict[str, Any]]:
    """Every schedule as JSON (``Schedule.to_json()``), with ``last_run_status``: the status of
    the run its last fire started (``deleted`` once retention took it, ``missing`` if gone,
    ``damaged`` if its record cannot be read), and ``last_run_unserved``: the deployment that
    run is pinned to while it is unfinished and no live worker serves it (the schedule skips
    its fires until one does; None otherwise). A schedule whose stored cron expression or
    zone is refused is left out as damaged (``Store.faults``), as workers skip it and ``wf store
    verify`` names it."""
    from wf.engine._cron import check_cron, check_tz

    out = []
    for found in await store.list_schedules():
        try:
            check_cron(found.cron)
            check_tz(found.tz)
        except UsageError as error:
            store.faults.note("schedule", found.id, store.schedule_location(found.id), str(error))
            continue
        row = found.to_json()
        row["last_run_status"], row["last_run_unserved"] = await _last_run(store, found.last_run_id)
        out.append(row)
    return out


async def schedule_page(store: Store) -> SchedulePage:
    """``list_schedules``, and the schedules it left out because they cannot be read (named
    to the caller, not logged as the store's own find)."""
    with collect_faults() as damaged:
        rows = await list_schedules(store)
    return SchedulePage(rows, [f for f in damaged if f.kind.startswith("schedule")])


async def _last_run(store: Store, run_id: str | None) -> tuple[str | None, str | None]:
    """The run's status, and the deployment it waits for (``list_schedules``)."""
    from wf.engine._queueing import served

    if run_id is None:
        return None, None
    try:
        record = await store.get_run(run_id)
    except RunNotFound:
        return "deleted" if await store.get_tombstone(run_id) is not None else "missing", None
    except StoreCorrupted:
        return "damaged", None  # one damaged run never hides the schedules
    pin = record.deployment
    # Its workers gone (a deploy), the run waits for one, and the schedule skips every fire
    # meanwhile (``skip_if_running``): said where the schedule is listed.
    waits = pin is not None and not record.status.is_terminal and not await served(store, pin)
    return record.status.value, pin if waits else None


async def _found_by_name(
    store: Store, run_id: str, journal: list[Event], listed: Mapping[str, tuple[int, bool]]
) -> dict[str, tuple[int, bool]]:
    """The streams the run's journal wrote that the listing left out as damaged but that are
    read by their name all the same (on the local store, one whose only damage is its name
    file: its chunk files are named by its name's key), as ``wf stream`` and the stream
    endpoint find them: so the detail says whether such a stream is complete (a remote
    reader asks it). The damage stays named in ``damaged``, with the name it is shown under
    (``Fault.shown_as``)."""
    written = {e["stream"] for e in journal if e.get("type") in ("stream_write", "stream_closed")}
    found: dict[str, tuple[int, bool]] = {}
    for name in sorted(written - listed.keys()):
        try:
            count, closed = await store.stream_info(run_id, name)
        except StoreCorrupted:
            continue  # its own files are damaged: it cannot be read, by name or not
        if count or closed:
            found[name] = (count, closed)
    return found


def _stream_info(
    journal: list[Event], record: RunRecord, name: str, count: int, closed: bool
) -> StreamInfo:
    """Stream ``name`` as ``StreamInfo`` says it: complete once it ended (closed, or its run
    ended) with no writer cut off."""
    from wf.engine._streams import cut_writer

    if not (closed or record.status.is_terminal):
        return StreamInfo(name, count, closed, False)
    cut = cut_writer(journal, name)
    return StreamInfo(name, count, closed, cut is None, cut)
