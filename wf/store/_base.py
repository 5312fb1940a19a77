"""The Store interface: everything the engine needs from persistence, and nothing more.

A store keeps, per run, a *record* (a summary: status, output, wake-up time), an append-only
*journal* of events (the truth), an *inbox* any process may post to (hook payloads, cancel
requests), and byte *streams*. It also keeps a durable *queue* of due work and a *hook index*
mapping tokens to runs.

Exactly one process drives a run at a time: it holds the run's ``Lease`` (``try_acquire``). Only the
lease holder appends to the journal or replaces the record. Everyone else reads, or posts to the
inbox.

The record is a cache of the journal: the journal's first event (``run_started``) carries the
record as created (``record``, without ``input``, which is beside it), and its last event is the
outcome once there is one. A store may therefore make ``save`` durable lazily and rebuild a
record lost in a power cut from the journal (``record_from_journal``).

The queue is derived from records: every non-terminal run has one queue entry whose due time is
``now`` for ``pending``/``running`` runs (a running run whose lease is free is an orphan to
recover), ``wake_at`` for suspended runs (``None``: only a posted message wakes it), and no entry
for finished runs. ``post`` makes the run due at once.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
import dataclasses
import enum
import functools
import inspect
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any, ClassVar

from wf import _events
from wf._exceptions import RunNotFound, StoreCorrupted, StoreError
from wf.store._faults import Faults
from wf.store._inboxes import unwatched

Event = dict[str, Any]
"""One journal event: a JSON object with at least ``type`` and ``ts`` (epoch seconds)."""

Progress = Callable[[int, int], object]
"""``on_progress(done, total)``: how far a long store operation is (``verify``, a gc)."""

LogEntry = dict[str, Any]
"""One line a step printed, or one record it logged: a JSON object with ``ts``, ``op``,
``step``, ``attempt``, ``stream`` and ``text`` (see ``wf.engine._steplogs``)."""


RECORD_TIMES = ("created_at", "updated_at", "wake_at")
"""The times of a run record: they decide what is due, so one that is not a number is damage
(``StoreCorrupted``), never a ``TypeError`` in whoever compares it."""


def bad_time(data: dict[str, Any]) -> str | None:
    """The first of a stored record's times that is neither a number nor None, if any."""
    for field in RECORD_TIMES:
        value = data.get(field)
        if value is not None and type(value) is not float and type(value) is not int:
            return field
    return None


class RunStatus(enum.StrEnum):
    """Where a run is in its life. A ``str`` enum: ``RunStatus.COMPLETED == "completed"``."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """True once the run has an outcome and will never run again."""
        return self in _TERMINAL

    def __str__(self) -> str:
        return self.value


_TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


@dataclasses.dataclass
class RunRecord:
    """The summary of one run. ``input``/``output`` hold *encoded* (tagged JSON) values."""

    id: str
    workflow: str
    status: RunStatus = RunStatus.PENDING
    target: str | None = None
    """How a fresh process imports the workflow: ``pkg.module:attr`` or ``path/file.py:attr``."""
    input: Any = None
    output: Any = None
    error: dict[str, Any] | None = None
    created_at: float = dataclasses.field(default_factory=time.time)
    updated_at: float = dataclasses.field(default_factory=time.time)
    wake_at: float | None = None
    waiting_for: list[_events.Waiting] | None = None
    """What a suspended run waits for: ``wf._events.Waiting`` entries (kind, target, until)."""
    parent_id: str | None = None
    root_id: str | None = None
    deployment: str | None = None
    """The deployment the run is pinned to (``[tool.wf] deployment`` of the process that started
    it, or its parent's): only workers of that deployment (or of none) drive it. None: unpinned."""
    code_hash: str | None = None
    """A short hash of the workflow's source file when the run was created (informative)."""
    resumes: int = 0
    cancel_requested: bool = False
    """Set when the run's driver takes a cancellation in (saved at once); a request still in
    the inbox is not in the record: ``wf.admin``'s listings and details say both."""
    priority: int = 0
    """0 .. 2**21-1, higher first; FIFO within one priority (see ``docs/queues.md``)."""
    group: str | None = None
    """The FIFO lane the run belongs to: runs of one group start in order of their creation."""
    queue: str | None = None
    """The named queue: ``wf worker --queue NAME`` serves only those."""
    attempt: int = 1
    """The run-level attempt this is (1-based); a retry makes it one more."""
    max_attempts: int = 1
    max_recoveries: int | None = None
    """Deaths of its driving process in a row, without progress, before the run fails with
    ``wf.RunStalled`` (None: the driving engine's setting)."""
    limits: dict[str, Any] | None = None
    """Caps and limits that hold this run back while they are full: ``concurrency`` (runs of
    its workflow at once), ``group_concurrency``, ``rate_limit`` (``[n, seconds]``)."""
    trace: dict[str, str] | None = None
    """Trace context of the run's producer (W3C ``traceparent``/``tracestate``), set by an
    instrument at creation, so the drives of the run join the producer's trace wherever and
    whenever they happen."""
    # -- schedules and retention (#16) --
    schedule_id: str | None = None
    """The schedule whose fire started this run, if one did."""
    retention: float | None = None
    """Seconds a finished run is kept (``@wf.workflow(retention=...)``); None: the store-wide
    setting decides; negative (``-1``): kept forever, whatever the store-wide setting (the
    workflow said ``retention=None``)."""
    by_name: list[str] | None = None
    """Set while a run started by name (``wf.ref``) waits for its first driver: the options its
    producer gave. The driver completes the record from the workflow's declaration."""
    seq: int = 0
    """The run's place in the store-wide creation sequence, set by ``Store.create_run`` (0
    before): runs of equal priority and due time leave the queue in this order, and listings
    are newest-created first. Never the run id's order: ids may be chosen by callers."""

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object (the on-disk and ``--json`` shape).

        Shallow: ``input``/``output``/``error`` already hold encoded JSON, and this runs on every
        save (``dataclasses.asdict`` deep-copied them, a third of a save's cost).
        """
        fields = self.__dict__
        if tuple(fields) == _RECORD_FIELDS:  # made by ``__init__`` or from a record's JSON
            data = dict(fields)
        else:  # in another order (a journal's record puts ``input`` last; a jsonb's): fields'
            data = dict(zip(_RECORD_FIELDS, map(fields.__getitem__, _RECORD_FIELDS), strict=True))
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], run_id: str | None = None) -> RunRecord:
        """Rebuild a record from ``to_json`` output; unknown keys are ignored (forward compat).
        Anything else (damage) raises ``StoreCorrupted``, never another error. ``run_id``: the
        run whose record the store holds there; a record naming another id is damage."""
        if not isinstance(data, dict):
            raise StoreCorrupted(f"a run record is not a JSON object ({data!r:.40})")
        if data.keys() <= _RECORD_NAMES:
            kwargs = dict(data)  # the usual case: what this wf wrote
        else:
            kwargs = {k: v for k, v in data.items() if k in _RECORD_NAMES}
        if "code_hash" not in kwargs and kwargs.get("deployment") is not None:
            # Written before pinning: ``deployment`` held the code hash, and the run is unpinned.
            kwargs["code_hash"], kwargs["deployment"] = kwargs["deployment"], None
        status = kwargs.get("status", "pending")
        try:
            kwargs["status"] = RunStatus(status)
        except ValueError:
            # Damage, or a newer wf's status: never a ValueError retried forever by a worker.
            raise StoreCorrupted(
                f"run {data.get('id')!r} has an unknown status {status!r} (damaged, or written "
                "by a newer wf)"
            ) from None
        check_kinds(kwargs, data.get("id"))
        if run_id is not None and kwargs["id"] != run_id:
            # Another run's record where this one's belongs: read as this run, it would list
            # a run that does not exist and be saved under an id nobody holds the lease of.
            raise StoreCorrupted(f"run {run_id!r}: the record names another id {kwargs['id']!r}")
        if kwargs.get("waiting_for") is not None:
            kwargs["waiting_for"] = _events.read_waiting(kwargs["waiting_for"])  # older: words
        if len(kwargs) < len(_RECORD_FIELDS):
            return cls(**kwargs)  # defaults to fill in
        return cls._of_fields(kwargs)  # every field given

    def copy(self) -> RunRecord:
        """A shallow copy (``dataclasses.replace(record)`` without its work per field)."""
        return self._of_fields(self.__dict__)

    @classmethod
    def _of_fields(cls, fields: dict[str, Any]) -> RunRecord:
        """A record of exactly these fields: what ``__init__`` would do, field by field, when
        every field is given (it has no other work: no ``__post_init__``)."""
        record = object.__new__(cls)
        record.__dict__.update(fields)
        return record


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(RunRecord))
_RECORD_NAMES = frozenset(_RECORD_FIELDS)
_RECORD_KINDS: tuple[tuple[str, type], ...] = (
    *((name, str) for name in ("id", "workflow", "target", "parent_id", "root_id")),
    *((name, str) for name in ("deployment", "code_hash", "group", "queue", "schedule_id")),
    *((name, int) for name in ("resumes", "priority", "attempt", "max_attempts")),
    *((name, int) for name in ("max_recoveries", "seq")),
    ("cancel_requested", bool),
    *((name, dict) for name in ("error", "limits", "trace")),
    ("by_name", list),
    ("retention", float),
)
"""The type of each stored field a reader relies on (None is allowed: a missing value is
the field's default, or a field whose None means "not set"; not for ``id`` and ``workflow``,
which have no default).
``float`` takes an int too (JSON has one kind of number). ``input`` and ``output`` are any
JSON to a store (the driver checks an input's shape)."""
_RECORD_REQUIRED = ("id", "workflow")
"""The fields a record has no default for: checked first (never None), the others after."""
_OPTIONAL_KINDS = tuple(item for item in _RECORD_KINDS if item[0] not in _RECORD_REQUIRED)
_KIND_CLASSES: dict[type, type | tuple[type, ...]] = {float: (float, int)}
"""What ``isinstance`` takes for a kind, where it is not the kind alone."""
_KIND_WORDS: dict[type, str] = {
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    dict: "an object",
    list: "a list",
}


def check_kinds(fields: dict[str, Any], run_id: Any) -> None:
    """Raise ``StoreCorrupted`` if a record's field (as stored) has a type a reader does not
    rely on: its times, then ``_RECORD_KINDS``. ``from_json``'s checks, also run by a store that
    takes a record as given without parsing it (a creation), so what it writes can be read."""
    wrong = bad_time(fields)
    if wrong is not None:
        raise StoreCorrupted(f"run {run_id!r}: {wrong} is not a time ({fields[wrong]!r:.40})")
    get = fields.get
    if get("id").__class__ is not str or get("workflow").__class__ is not str:
        for name in _RECORD_REQUIRED:  # missing, None or of another kind (a str subclass aside)
            value = get(name)
            if value is None:
                # Without an id the record cannot say whose it is: the caller's location does.
                who = "" if name == "id" else f"run {run_id!r}: "
                raise StoreCorrupted(f"{who}the record has no {name!r}")
            if not isinstance(value, str):
                raise StoreCorrupted(f"run {run_id!r}: {name} is not a string ({value!r:.40})")
    for name, kind in _OPTIONAL_KINDS:
        value = get(name)
        if (
            value is not None
            and value.__class__ is not kind
            and not isinstance(value, _KIND_CLASSES.get(kind, kind))
        ):
            # Damage: said here, for the run alone, not as a TypeError wherever it is used.
            raise StoreCorrupted(
                f"run {run_id!r}: {name} is not {_KIND_WORDS[kind]} ({value!r:.40})"
            )
    recoveries = get("max_recoveries")
    if recoveries is not None and recoveries < 0:
        # A count of deaths in a row: under 0, the first claim would fail the run as stalled.
        raise StoreCorrupted(
            f"run {run_id!r}: max_recoveries is not a number from 0 ({recoveries!r:.40})"
        )


def pin_of_raw(data: dict[str, Any]) -> str | None:
    """The deployment a stored record (as JSON) is pinned to: ``RunRecord.from_json``'s reading
    of it, for a store that reads the field without building the record."""
    if "code_hash" not in data:
        return None  # written before pinning: ``deployment`` is the code hash
    pin = data.get("deployment")
    return pin if isinstance(pin, str) else None


Pins = Collection[str | None]
"""Which runs a worker drives by their pin: these deployment ids, and unpinned runs if it holds
None. ``None`` instead of a collection: every run (``wf worker --any-deployment``)."""


def pin_allowed(pin: str | None, deployments: Pins | None) -> bool:
    """Whether a run pinned to ``pin`` (None: unpinned) passes the filter ``deployments``."""
    return deployments is None or pin in deployments


@dataclasses.dataclass(frozen=True)
class InboxMessage:
    """A message posted to a run from outside its driver. ``id`` is unique and sortable."""

    id: str
    kind: str
    """``hook`` (payload for a hook token), ``cancel``, ``wake``, or ``child_done``."""
    data: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class HookRecord:
    """A live hook: ``token`` belongs to run ``run_id`` (its operation ``op``)."""

    token: str
    run_id: str
    op: int
    schema: dict[str, Any] | None = None
    """JSON schema of the payload type, so senders validate before posting."""
    created_at: float = 0.0

    @classmethod
    def from_json(cls, data: Any) -> HookRecord:
        """Rebuild from its stored JSON object (``dataclasses.asdict``); ``ValueError`` naming
        what is wrong if ``data`` is not one (a damaged hook is skipped, never half-read)."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if not isinstance(data.get("token"), str) or not isinstance(data.get("run_id"), str):
            raise ValueError("its token or run id is not a string")
        schema = data.get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise ValueError(f"its schema is {type(schema).__name__}")
        try:
            return cls(
                data["token"],
                data["run_id"],
                int(data["op"]),
                schema,
                float(data.get("created_at") or 0.0),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"its op or time is missing or not a number ({error!r})") from None


@functools.cache
def _reads_in_batches(store_class: type[Store]) -> bool:
    """Whether ``store_class.read_chunks`` takes ``max_bytes``: a store written outside wf to
    the contract before it (``read_chunks(run_id, stream, start=0)``) does not, and
    ``stream_chunks`` reads its streams whole rather than fail every read. Looked up once a
    class."""
    try:
        parameters = inspect.signature(store_class.read_chunks).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume the current contract
        return True
    return any(p.name == "max_bytes" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def batch(chunks: Sequence[bytes], max_bytes: int | None) -> list[bytes]:
    """The first of ``chunks``, then the next while their bytes stay within ``max_bytes``
    (all of them without it): a batch as ``Store.read_chunks`` returns one."""
    if max_bytes is None:
        return list(chunks)
    size, fit = 0, 0
    for chunk in chunks:
        size += len(chunk)
        if fit and size > max_bytes:
            break
        fit += 1
    return list(chunks[:fit])


DELIVERY_KEPT = 24 * 3600.0
"""How long after a delivery with an idempotency key a retry still gets the first reply once
the webhook's hook is released (its run ended), and a keyed ``wf.resume_hook`` is remembered
(its repeat delivers nothing new): seconds. The store keeps such deliveries
(``Store.save_delivery``), so any server process answers it, also after a restart; ``wf gc``
and a running ``wf serve`` prune them after."""

STREAM_BATCH_BYTES = 1 << 20
"""The bytes ``Store.stream_chunks`` reads at a time (``read_chunks``' ``max_bytes``): a reader
of a stream of many MB (``wf stream``, ``GET /runs/{id}/streams/...``) holds one batch, not
the stream, and each read is short."""


@dataclasses.dataclass(frozen=True)
class WebhookDelivery:
    """A webhook delivery that carried an idempotency key, kept for a while (``wf serve``
    answers a retry with the same key by the first reply, also after the hook was released).

    A keyed ``wf.resume_hook`` is kept as one too (``Store.post_once``), with ``header`` ""
    and no reply.

    ``id`` is derived from the token and the key; ``header`` (lower case) carried the key;
    ``reply`` is the webhook's static reply (None: the run writes it to its stream
    ``wf:webhook:<id>``); ``at`` is when it was delivered (epoch seconds)."""

    id: str
    token: str
    run_id: str
    header: str
    reply: dict[str, Any] | None
    at: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> WebhookDelivery:
        """Rebuild from :meth:`to_json`; ``ValueError`` naming what is wrong otherwise."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        for name in ("id", "token", "run_id", "header"):
            if not isinstance(data.get(name), str):
                raise ValueError(f"its {name} is not a string")
        reply = data.get("reply")
        if reply is not None and not isinstance(reply, dict):
            raise ValueError(f"its reply is {type(reply).__name__}")
        at = data.get("at")
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise ValueError("its time is not a number")
        return cls(data["id"], data["token"], data["run_id"], data["header"], reply, float(at))


@dataclasses.dataclass(frozen=True)
class QueueStats:
    """Runs waiting to be taken, per workflow and group (None: runs without a group)."""

    workflow: str
    group: str | None
    depth: int
    """Runs due now that no driver has taken: pending, or suspended and due again."""
    oldest_due_at: float
    """Since when the longest-waiting of them has been due (epoch seconds)."""


def queue_stats_of(records: Sequence[RunRecord], now: float) -> list[QueueStats]:
    """Group due records into ``QueueStats`` (the reference computation every store matches).

    A running run is due too (an orphan is recovered that way) but is being driven, or will be
    found orphaned by the next driver: it is not counted as waiting.
    """
    found: dict[tuple[str, str | None], tuple[int, float]] = {}
    for record in records:
        if record.status not in (RunStatus.PENDING, RunStatus.SUSPENDED):
            continue
        if record.wake_at is not None and record.wake_at <= now:
            since = record.wake_at  # a timer that fired, a delayed start, a retry's backoff
        elif record.status is RunStatus.PENDING:
            since = record.created_at
        else:
            since = record.updated_at  # poked by a message (a hook payload, a cancel)
        key = (record.workflow, record.group)
        depth, oldest = found.get(key, (0, since))
        found[key] = (depth + 1, min(oldest, since))
    return [
        QueueStats(workflow, group, depth, oldest)
        for (workflow, group), (depth, oldest) in sorted(
            found.items(), key=lambda item: (item[0][0], item[0][1] or "")
        )
    ]


_OUTCOME_STATUS = {kind: RunStatus(status) for kind, status in _events.OUTCOME_EVENTS.items()}


def lane_key(workflow: str, queue: str | None, group: str) -> str:
    """The name of a group lane: the group within its queue, the named queue or else the
    workflow (a workflow without ``queue=`` is a queue of its own). Workflows that name the
    same queue share its lanes; unrelated workflows never wait in one another's."""
    scope = f"queue {queue}" if queue is not None else f"workflow {workflow}"
    return f"{scope}\n{group}"


def lane_of(record: RunRecord) -> str | None:
    """The group lane the run waits in (``lane_key``); None for a run in no group."""
    if record.group is None:
        return None
    return lane_key(record.workflow, record.queue, record.group)


def stamp_seq(record: RunRecord, events: Sequence[Event], seq: int) -> list[Event]:
    """Give the run its creation sequence number: set ``record.seq``, and return the events
    with the record a ``run_started`` event carries numbered too (copies: the caller's events
    are left alone), so that a record rebuilt from the journal has its place."""
    record.seq = seq
    out = list(events)
    for at, found in enumerate(out):
        snapshot = found.get("record")
        if found.get("type") == "run_started" and isinstance(snapshot, dict):
            out[at] = {**found, "record": {**snapshot, "seq": seq}}
    return out


def record_from_journal(events: Sequence[Event]) -> RunRecord | None:
    """Rebuild a run's record from its journal; None if it has no ``run_started`` record.

    Status comes from the last event: an outcome, a suspension (with its wake-up time), else
    ``running`` once anything happened after the start (the next driver brings it up to date).
    """
    record = created_record(events[0]) if events else None
    return None if record is None else brought_up_to(record, events)


def created_record(first: Event) -> RunRecord | None:
    """The record a journal's first event carries (``run_started``'s), as the run was created;
    None if it carries none."""
    if first.get("type") != "run_started" or "record" not in first:
        return None
    return RunRecord.from_json({**first["record"], "input": first.get("input")})


def brought_up_to(record: RunRecord, events: Sequence[Event]) -> RunRecord:
    """``record`` (the ``created_record`` of ``events[0]``, changed in place) brought up to the
    journal's last event: ``record_from_journal`` without parsing the first event again."""
    last = events[-1]
    kind = last.get("type")
    if kind in _OUTCOME_STATUS:
        record.status = _OUTCOME_STATUS[kind]
        record.output = last.get("output")
        record.error = last.get("error")
    elif kind == "run_suspended":
        record.status = RunStatus.SUSPENDED
        record.wake_at = last.get("wake_at")
        record.waiting_for = _events.read_waiting(last.get("waiting_for"))
    elif kind == "run_retrying":
        # A failed attempt waiting for its next one: pending again, due at ``retry_at``.
        record.status = RunStatus.PENDING
        record.wake_at = last.get("retry_at")
        record.attempt = int(last.get("attempt", record.attempt))
        record.max_attempts = int(last.get("max_attempts", record.max_attempts))
        record.error = last.get("error")
    elif len(events) > 1:
        record.status = RunStatus.RUNNING
    record.updated_at = float(last.get("ts", record.updated_at))
    return record


class Pages:
    """The ``before=`` cursor of a loop over ``Store.list_runs`` pages, which stops at a page
    that makes no progress: one whose last run was already a cursor. A sound index never
    gives one back; a fault of one (an entry left at an older creation number, so a page
    before a run held the run) made such a loop ask for the same pages forever, and no
    future fault may spin it again."""

    def __init__(self) -> None:
        self.before: str | None = None
        """The cursor for the next page (None: the first)."""
        self._used: set[str] = set()

    def take(self, page: Sequence[RunRecord]) -> bool:
        """Whether ``page`` is new ground (not empty, its last run never a cursor); if so the
        cursor moves past it, else the loop stops without it."""
        if not page or page[-1].id in self._used:
            return False
        self.before = page[-1].id
        self._used.add(self.before)
        return True


@dataclasses.dataclass(frozen=True)
class Hold:
    """Why a due run may not start now: ``reason`` in words, ``ahead`` runs before it, and
    when to look again (``retry_at``; None: when something else changes)."""

    reason: str
    ahead: int = 0
    retry_at: float | None = None


class Slot(abc.ABC):
    """One place of a capacity (a concurrency cap), held until ``release`` or process death."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Give the place back. Idempotent."""


# -- schedules and retention (#16) ----------------------------------------------------------


@dataclasses.dataclass
class Schedule:
    """A cron schedule: its definition, and the state its fires left behind.

    Times are epoch seconds, like ``RunRecord``'s. ``input`` holds the *encoded* arguments
    (``{"args": [...], "kwargs": {...}}``). ``skipped`` counts fires that started no run
    (missed while no worker ran, or skipped while the previous run was still going);
    ``last_skipped_at``/``last_skip_reason`` say which was the latest and why.
    """

    id: str
    workflow: str
    cron: str
    tz: str | None = None
    target: str | None = None
    input: Any = None
    skip_if_running: bool = True
    catch_up: str = "one"
    allow_overlap: bool = False
    priority: int | None = None
    group: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    next_run: float | None = None
    last_fire_at: float | None = None
    last_run_id: str | None = None
    skipped: int = 0
    last_skipped_at: float | None = None
    last_skip_reason: str | None = None
    last_error: str | None = None
    """Why the latest fire could not start its run (the workflow no longer loads, say)."""
    ended: bool = False
    """The series has ended: the expression names no time after its last fire (croniter's
    year field), so ``next_run`` is None and it is never computed again."""
    paused: bool = False
    """Paused (``wf schedule pause``): ``next_run`` is None, and it fires nothing until it is
    resumed, from the time it is resumed."""

    def to_json(self) -> dict[str, Any]:
        """The schedule as a JSON object (the stored and ``--json`` shape)."""
        return {name: getattr(self, name) for name in _SCHEDULE_FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        """Rebuild from ``to_json`` output; unknown keys are ignored (forward compat).

        ``ValueError`` naming the field if ``data`` is not a schedule (not an object, a field
        missing or of the wrong type): a damaged schedule is skipped, never half-read."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        for name, kinds in _SCHEDULE_TYPES.items():
            value = data.get(name)
            if name in _SCHEDULE_REQUIRED and value is None:
                raise ValueError(f"{name!r} is missing")
            if value is not None and (
                not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
            ):
                raise ValueError(f"{name!r} is {type(value).__name__}: {value!r:.60}")
            if (
                name in _SCHEDULE_TIMES
                and isinstance(value, int | float)
                and not _EARLIEST <= value <= _LATEST
            ):
                raise ValueError(f"{name!r} is no time: {value!r:.60}")
        catch_up = data.get("catch_up")
        if catch_up is not None and catch_up not in CATCH_UP:
            # Fired as "none" by a wf that knows no other: damage, as ``wf.schedule`` says.
            raise ValueError(f"'catch_up' is {catch_up!r:.40}, not one of {', '.join(CATCH_UP)}")
        given = data.get("input")
        if given is not None:
            # Every fire would fail on another shape: damage, named where the schedule is read.
            for name, kind in (("args", list), ("kwargs", dict)):
                if name in given and not isinstance(given[name], kind):
                    shape = type(given[name]).__name__
                    raise ValueError(f"'input' has {name!r} of {shape}, not {kind.__name__}")
        return cls(**{k: v for k, v in data.items() if k in _SCHEDULE_NAMES})


CATCH_UP = ("one", "none", "all")
"""What a schedule does with fires missed while no worker ran (``wf.schedule(catch_up=)``)."""
_SCHEDULE_FIELDS = tuple(f.name for f in dataclasses.fields(Schedule))
_SCHEDULE_NAMES = frozenset(_SCHEDULE_FIELDS)
_SCHEDULE_REQUIRED = frozenset({"id", "workflow", "cron"})
_SCHEDULE_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "workflow": (str,),
    "cron": (str,),
    "tz": (str,),
    "target": (str,),
    "input": (dict,),  # the encoded {"args", "kwargs"}: anything else fails every fire
    "skip_if_running": (bool,),
    "catch_up": (str,),
    "allow_overlap": (bool,),
    "priority": (int,),
    "group": (str,),
    "created_at": (int, float),
    "updated_at": (int, float),
    "next_run": (int, float),
    "last_fire_at": (int, float),
    "last_run_id": (str,),
    "skipped": (int,),
    "last_skipped_at": (int, float),
    "last_skip_reason": (str,),
    "last_error": (str,),
    "ended": (bool,),
    "paused": (bool,),
}
"""What each stored field may hold (None aside): ``from_json`` refuses anything else."""
_SCHEDULE_TIMES = frozenset(
    {"created_at", "updated_at", "next_run", "last_fire_at", "last_skipped_at"}
)
_EARLIEST, _LATEST = -62135596800.0, 253402300799.0
"""The epoch seconds of years 1 to 9999, what a date can show: a time beyond them (or NaN) is
no time a schedule was given, and would fail every comparison or display of it."""


@dataclasses.dataclass(frozen=True)
class Tombstone:
    """What is left of a deleted run: enough to say it existed, and when and why it went."""

    id: str
    workflow: str
    status: str
    deleted_at: float
    reason: str = "retention"
    """``retention`` (a retention policy) or ``gc`` (``wf gc --older-than`` and the like)."""
    seq: int = 0
    """The deleted run's creation sequence number: a listing paged ``before=`` a run deleted
    since keeps its place."""

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tombstone:
        """Rebuild from ``to_json`` output; ``TypeError`` if ``data`` is not one (a field of
        another type: anything else in a tombstone file is damage, never a deleted run)."""
        if not isinstance(data, dict):
            raise TypeError("a tombstone is a JSON object")
        fields = (
            ("id", data.get("id"), str),
            ("workflow", data.get("workflow", ""), str),
            ("status", data.get("status", ""), str),
            ("reason", data.get("reason", "retention"), str),
        )
        for name, value, kind in fields:
            if not isinstance(value, kind):
                raise TypeError(f"a tombstone's {name} is a string")
        deleted_at, seq = data.get("deleted_at", 0.0), data.get("seq") or 0
        if isinstance(deleted_at, bool) or not isinstance(deleted_at, (int, float)):
            raise TypeError("a tombstone's deleted_at is a number")
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError("a tombstone's seq is an integer")
        return cls(data["id"], fields[1][1], fields[2][1], float(deleted_at), fields[3][1], seq)


@dataclasses.dataclass
class Deleted:
    """The outcome of ``Store.delete_runs``: the ids deleted and the bytes they occupied."""

    ids: list[str] = dataclasses.field(default_factory=list)
    bytes: int = 0


def kept_count(n: int) -> str:
    """A kept run count (a cache, ``verify`` repairs it) as said: one that drifted below
    zero (a process killed between two changes of it) is never shown as a negative number."""
    return str(n) if n >= 0 else "below 0"


@dataclasses.dataclass
class StoreStats:
    """``wf store info``: what a store is and holds."""

    kind: str
    location: str
    format: int | None
    runs: dict[str, int]
    """Run counts by status (every status present, zeros included)."""
    schedules: int
    tombstones: int
    size_bytes: int | None
    """Space on disk (or in the database); None when the store cannot tell."""

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return dataclasses.asdict(self)


class ScheduleLock(abc.ABC):
    """Held while a schedule is changed or fired: one process at a time decides for it."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Give the lock up. Idempotent."""


class Lease(abc.ABC):
    """Exclusive right to drive one run. Released by ``release()`` or when the process dies."""

    run_id: str

    soon_outlives_process: ClassVar[bool] = False
    """True if ``append_soon`` has handed the events to the operating system or the server
    when it returns, so that they survive this process's death (not a power loss): the
    engine then marks a drive's first step with it instead of a flush of its own
    (``wf.engine._recovery`` counts process deaths)."""

    heads_lane: bool = False
    """True if the claim that took this lease found the run among the first
    ``group_concurrency`` unfinished runs of its group's lane (or in no lane), on a store
    whose claim is the word on a lane's heads: the run heads its lane for as long as the
    lease lasts, and admission need not read the lane again. PostgreSQL numbers a lane in
    commit order and a retry goes to the back, so no run can come ahead of a head; the local
    store keeps a lane's heads while they are unfinished (``LocalStore._lane_heads``), so a
    run of the group whose creation was under way when they were chosen waits behind them."""

    @abc.abstractmethod
    async def append(self, events: Sequence[Event]) -> None:
        """Append events to the journal; they are durable when this returns.

        Concurrent appends (different runs in one process) share the flush (group commit).
        """

    async def append_visible(self, events: Sequence[Event]) -> None:
        """Append events and return once they would outlive this process's death, though not
        necessarily a crash of the machine or of the store's server: what the engine's mark
        of a drive's first step needs (``wf.engine._recovery`` counts process deaths). The
        next ``append`` makes them durable with its own events. By default ``append``."""
        await self.append(events)

    @abc.abstractmethod
    def append_soon(self, events: Sequence[Event]) -> None:
        """Write events now; they become durable with the next ``append`` (or ``release``).

        For bookkeeping that may be lost in a crash without harm (``step_started``).
        """

    def append_pending(self, events: Sequence[Event]) -> bool:
        """Write events whose durability may wait until ``settle`` or the next ``append``
        (or ``release``); True if this store took them, False if it cannot (the caller then
        ``append``s them).

        Written now (the local store), or held a moment for the lease's next write to carry
        them and then written by one of their own (PostgreSQL: ``PENDING``). Unlike
        ``append_soon``'s, these events are never dropped: a failure to write them raises
        here or fails the next ``settle``/``append``/``save`` (and every later write of the
        lease, where the write was their own). The engine writes a step's completion this way
        and settles before anything the run does next can be seen outside it, so the last
        step's completion shares the outcome's flush or commit. A store opts in only where a
        later flush covers every earlier write of the journal.
        """
        return False

    async def settle(self) -> None:
        """Return once every event ``append_pending`` wrote is durable (nothing to do if none
        is waiting, or the store never takes them)."""
        return None

    @abc.abstractmethod
    async def save(self, record: RunRecord) -> None:
        """Atomically replace the run's record, and its queue entry to match."""

    def save_soon(self, record: RunRecord) -> bool:
        """Save a record that marks the run running (due now, as before) with the lease's next
        journal write, in its transaction, if the store can; False if it cannot (the caller
        then saves). Until then readers may see the previous record: for a run being started
        or resumed that is still due now, so a crash before the write loses nothing.

        A later ``save`` (or ``append_and_save``) replaces a record still waiting."""
        return False

    async def append_and_save(self, events: Sequence[Event], record: RunRecord) -> None:
        """``append(events)`` then ``save(record)``; a store may make both one transaction
        (the record is never saved without the events, nor the events durable without it)."""
        await self.append(events)
        await self.save(record)

    @abc.abstractmethod
    async def ack_inbox(self, message_ids: Sequence[str]) -> None:
        """Remove messages from the inbox once their effect is in the journal."""

    @abc.abstractmethod
    async def write_chunk(self, stream: str, index: int, data: bytes) -> None:
        """Durably append chunk ``index`` to a byte stream (indices start at 0, no gaps)."""

    @abc.abstractmethod
    async def close_stream(self, stream: str, chunks: int) -> None:
        """Mark a stream finished after ``chunks`` chunks."""

    @abc.abstractmethod
    async def append_logs(self, entries: Sequence[LogEntry]) -> None:
        """Append what steps printed or logged to the run's step logs, in order.

        Best effort: not part of the run's truth, need not be durable when this returns.
        """

    @abc.abstractmethod
    async def release(self) -> None:
        """Flush anything pending and give up the lease. Idempotent."""

    def on_lost(self, callback: Callable[[StoreError], None]) -> None:  # noqa: B027 - optional
        """Call ``callback`` as soon as the lease is found lost while held (another driver may
        take the run over): its holder must stop at once. A store whose leases cannot be lost
        while their process lives (the local store's OS locks) never calls it."""

    async def read_run(self, store: Store) -> tuple[RunRecord, list[Event]]:
        """The run's exact record and its journal, as the holder sees them (a fresh copy).

        Only the holder writes either, so its view is the truth while it holds the lease. The
        default reads them from ``store``; a store whose lease keeps them at hand (the local
        store's) answers without reading again.
        """
        return await store.get_run(self.run_id), await store.read_journal(self.run_id)

    async def read_inbox(self, store: Store) -> list[InboxMessage]:
        """The run's unacknowledged messages, as ``store.read_inbox``; a store whose claim
        read them along with the lease (``Store.claim``) answers the first call from that."""
        return await store.read_inbox(self.run_id)


WAITING_REPORTED = 1_000
"""How many of a lane's waiting runs ``Store.claim`` must report in ``waiting`` at least when
it leases nothing (the first in claim order; more is allowed): a worker that drives nothing
asks whether anything is startable among the first this many due runs, so a lane's later runs
can never be among them, and reporting a long lane whole on every claim would cost each claim
time in proportion to the lane."""


CREATOR_LEASES: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "wf_creator_leases", default=None
)
"""The id of the run the current task is creating and leases next (``Engine.start`` of a run
it drives: ``create_run``, then ``try_acquire``). A store may take that lease while it makes
the creation durable and hand it to this process's next ``try_acquire`` of the run (the local
store takes it while its flush runs in the thread); a store that does not ignores it."""


MINTED_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("wf_minted_id", default=None)
"""The id of the run the current task is creating, when ``new_run_id`` made it for this very
creation (``Engine.start`` given no id). No run, creation cut short or packed run can hold it
(a process never makes an id twice, a forked child makes its own), so a store may skip its
looks for one; whatever publishes the run must still refuse an id taken meanwhile. A store that
looks anyway ignores it."""


class Store(abc.ABC):
    """Persistence for runs. Every method is safe to call from any process."""

    claims_lane_heads: bool = False
    """Whether ``claim`` leaves out the runs that wait in their group's lane (and names them
    in its ``waiting``), rather than lease them for their admission to hold back."""
    filters_deployments: bool = False
    """Whether ``due_runs`` and ``claim`` take ``deployments`` (runs pinned to a deployment,
    ``wf worker`` with a deployment id): a store that does not serves only ``--any-deployment``
    workers."""

    @property
    def faults(self) -> Faults:
        """The items this store (and the workers on it) skipped as damaged (``wf.store._faults``):
        each logged once, counted in the worker's summary."""
        found: Faults | None = self.__dict__.get("_faults")
        if found is None:
            found = self.__dict__["_faults"] = Faults()
        return found

    def run_location(self, run_id: str) -> str:
        """Where a run lives, for messages (a directory, a table row)."""
        return f"run {run_id}"

    def stream_fault(self, run_id: str, stream: str) -> tuple[str, str]:
        """The id and the place a damaged item names the run's byte stream ``stream`` by
        (``Fault.item``, ``Fault.where``): the same as this store's own readers note it, so
        that one stream is one item in a worker's summary and ``wf store verify``."""
        return f"{run_id}/{stream}", self.run_location(run_id)

    def schedule_location(self, schedule_id: str) -> str:
        """Where a schedule lives, for messages (a file path, a table row)."""
        return f"schedule {schedule_id!r}"

    # -- runs -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def create_run(
        self, record: RunRecord, events: Sequence[Event] = (), *, explicit: bool = False
    ) -> bool:
        """Create the run with its first journal events and queue it; False if the id exists.

        ``explicit``: the id was given by the caller (an idempotency key), not generated: it
        is also taken (False) while a tombstone says its run was deleted, so a deleted run is
        never started again under its id (until its tombstone is pruned). A generated id
        cannot be a deleted run's, so its creation skips that look.

        Creation is atomic: a reader sees the whole run or no run. The store gives the run the
        next number of its creation sequence and sets ``record.seq`` (on the caller's record
        too); a store that rebuilds records from the journal numbers the record a
        ``run_started`` event carries as well (``stamp_seq``).
        """

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunRecord:
        """The run's record. Raises ``RunNotFound``."""

    @abc.abstractmethod
    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        limit: int = 50,
        before: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> list[RunRecord]:
        """Runs newest-created first (by ``RunRecord.seq``, never by id), at most ``limit``;
        with ``before`` (a run id), only runs created before that run (also when it has been
        deleted since; none when no such run ever existed).

        Filters combine (all must hold): ``statuses`` (any of them), ``workflow`` (its exact
        name), ``parent_id``, ``queue`` (a named queue), ``group`` (a group key, in any queue)
        and ``deployment`` (the deployment a run is pinned to). Queue, group and deployment
        filters cover runs of every status, finished ones too. Each filter is answered from
        an index, so a page costs the same however many runs the store holds.

        A run whose record cannot be read (damage) is left out, noted in ``faults`` (kind
        ``run``; or given to a ``collect_faults`` caller), and does not count towards
        ``limit``: one damaged run never fails a listing nor ends its pages early."""

    async def search_runs(
        self,
        text: str,
        *,
        limit: int,
        budget: int,
        before: str | None = None,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> tuple[list[RunRecord], str | None, int]:
        """The runs whose id or workflow name contains ``text`` (lower case; compared with
        the lower-cased id and name), newest-created first, among at most ``budget`` runs
        looked at (``list_runs``'s order and filters, from ``before``), stopping at ``limit``.

        Returns the matches, the id of the last run looked at (where to go on; None when no
        run is left after it) and how many runs were looked at. A damaged run is left out as
        ``list_runs`` leaves it out. The default reads the runs'
        records page by page; a store may look at less (names in an index, a query that
        sends back only the matches)."""
        found: list[RunRecord] = []
        looked, cursor = 0, before
        filters: dict[str, Any] = {
            k: v
            for k, v in (("queue", queue), ("group", group), ("deployment", deployment))
            if v is not None
        }
        while len(found) < limit and looked < budget:
            page = min(500, budget - looked)
            batch = await self.list_runs(
                statuses=statuses,
                workflow=workflow,
                parent_id=parent_id,
                limit=page,
                before=cursor,
                **filters,
            )
            for record in batch:
                cursor = record.id
                looked += 1
                if text in record.id.lower() or text in record.workflow.lower():
                    found.append(record)
                    if len(found) == limit:
                        break
            if len(batch) < page and (not batch or cursor == batch[-1].id):
                return found, None, looked  # nothing left after the last one looked at
        return found, cursor, looked

    async def workflow_names(self) -> list[str] | None:
        """The names of the workflows the store has runs of (a name may outlive its last run
        until the index forgets it), read from the workflow index without a scan of the runs;
        None when the store cannot tell that way. A search by workflow name lists the runs of
        the names that match (``list_runs(workflow=...)``) rather than read runs one by one."""
        return None

    @abc.abstractmethod
    async def read_journal(self, run_id: str, start: int = 0) -> list[Event]:
        """The run's journal from event ``start`` on, oldest event first. Raises
        ``RunNotFound``.

        Following a run's journal: read from the count seen so far after each
        ``wait_for_run`` (an append wakes it). Stores read only what is new then, so following
        a run costs what it appends, not its whole journal again each time.
        """

    async def first_event(self, run_id: str) -> Event | None:
        """The run's first journal event (``run_started``: which workflow, with what input),
        or None when it cannot be read: a run whose record and journal are damaged further on
        can still be named (``wf check --replay``). Raises nothing for a damaged run.

        Stores whose journal is one file override it to read only its first line, so a
        damaged later line does not hide it."""
        try:
            events = await self.read_journal(run_id)
        except (RunNotFound, StoreError):
            return None
        return events[0] if events else None

    @abc.abstractmethod
    async def try_acquire(self, run_id: str) -> Lease | None:
        """Take the run's lease without waiting; None if another driver holds it."""

    # -- inbox and queue ------------------------------------------------------------------

    @abc.abstractmethod
    async def post(self, run_id: str, kind: str, data: dict[str, Any]) -> str:
        """Durably add a message to the run's inbox and make the run due now; returns its id."""

    def posting(self, run_id: str) -> bool:
        """Whether a ``post`` to the run is under way in this process: one whose message may
        already be in the inbox while the run is not due yet (the local store flushes between
        the two). A store whose post makes both at once says False."""
        return False

    @abc.abstractmethod
    async def read_inbox(self, run_id: str) -> list[InboxMessage]:
        """Messages not yet acknowledged, oldest first."""

    async def cancels_waiting(self, run_ids: Collection[str]) -> set[str]:
        """The runs among ``run_ids`` with a ``cancel`` message in their inbox that no driver
        has acknowledged yet: asked to stop, though their records may not say so yet (a
        listing marks them, ``wf.admin.list_runs``). Runs that do not exist (deleted since)
        and inboxes that cannot be read are left out: the record's word stands for them.

        One query of the store for all of them (a server store overrides this default, which
        reads each inbox in turn: cheap for a store in memory or on local files)."""
        found = set()
        for run_id in dict.fromkeys(run_ids):
            try:
                messages = await self.read_inbox(run_id)
            except (RunNotFound, StoreCorrupted):
                continue
            if any(m.kind == "cancel" for m in messages):
                found.add(run_id)
        return found

    @abc.abstractmethod
    async def due_runs(
        self,
        now: float,
        limit: int = 100,
        queues: Sequence[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[str]:
        """Ids of non-terminal runs due at or before ``now``: higher ``priority`` first, then
        earliest due, then earliest created (``RunRecord.seq``). With ``queues``, only runs of
        those named queues; with ``deployments``, only runs whose pin is in it (None in it:
        unpinned runs too; see ``filters_deployments``)."""

    async def claim(
        self,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
        exclude: Collection[str] = (),
        held: set[str] | None = None,
        waiting: set[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[Lease]:
        """Take the leases of up to ``limit`` due runs without waiting, in ``due_runs`` order
        (with its ``queues`` and ``deployments`` filters):
        runs another driver holds are skipped (and added to ``held``, if given), and so are the
        ids in ``exclude`` (the caller's own). The worker's way to fill its free slots.

        A store may also skip runs that wait in their group's lane (``group_concurrency``
        unfinished runs of the group are ahead of them: ``lane_ahead``), adding them to
        ``waiting`` if given, rather than lease runs whose driver's admission would only hold
        them back and give the lease back (``claims_lane_heads``). A claim that leases
        nothing reports the lane's waiting runs it skipped (the first ``WAITING_REPORTED`` of
        a lane's in claim order are enough); one that leases runs may report fewer or none
        (PostgreSQL's look by lanes never reads them). Skipping is an
        optimisation, never the rule: the driver's admission decides. A run driven by the
        caller counts as unfinished in its lane, so ``exclude`` does not make its lane free.

        The default looks at the queue, then tries each run's lease in turn; a store may do it
        in fewer round trips and without trying runs that are plainly held (PostgreSQL: one
        batch per call, see ``wf.store.postgres``).
        """
        leases: list[Lease] = []
        if limit <= 0:
            return leases
        kwargs: dict[str, Any] = {} if deployments is None else {"deployments": deployments}
        look = limit + len(exclude) + 10
        for run_id in await self.due_runs(now, limit=look, queues=queues, **kwargs):
            if len(leases) >= limit:
                break
            if run_id in exclude:
                continue
            try:
                lease = await self.try_acquire(run_id)
            except RunNotFound:
                continue  # deleted since the queue was read
            except BaseException:
                for taken in leases:
                    await taken.release()
                raise
            if lease is not None:
                leases.append(lease)
            elif held is not None:
                held.add(run_id)
        return leases

    @abc.abstractmethod
    async def next_due_at(
        self, after: float | None = None, queues: Sequence[str] | None = None
    ) -> float | None:
        """The earliest due time in the queue, or None when nothing is queued with a time.

        With ``after``: the earliest due time later than ``after`` (the next timer, even while
        runs that cannot start yet are due now). With ``queues``: of runs of those named queues
        only (what ``wf worker --queue`` serves)."""

    @abc.abstractmethod
    async def wait_for_activity(self, timeout: float) -> None:
        """Return when the queue may have changed (a post, a new run, a record) or on timeout."""

    def schedule_changes(self) -> int:
        """How many schedule changes (a schedule saved, replaced or removed, by this process or,
        where the store hears them, by others) this instance has heard of: a worker reads its
        schedules again when the count moves, and such a change also ends ``wait_for_activity``.
        A store that hears no other process's schedule changes keeps 0: its workers notice them
        at their ``poll``."""
        return 0

    def rate_returns(self) -> int:
        """How many starts of rate limits taken back (a ``try_rate`` caller cancelled while
        the store counted its start) this instance has heard of, by this process or others: a
        worker holding runs for a rate limit reads the limit again when the count moves (the
        start freed may let one of them through before the window's end), and such a take-back
        also ends ``wait_for_activity``. A store that counts a start without pausing (nothing
        to take back) keeps 0."""
        return 0

    async def wait_for_change(self, timeout: float) -> None:
        """Return when any run may have changed since runs were last listed (created,
        started, ended), or on timeout: for views of many runs (an event stream, a live list).
        Workers wait for ``wait_for_activity`` instead, which need not hear of a run that
        started or ended without making anything startable. Waits may end spuriously."""
        await self.wait_for_activity(timeout)

    @abc.abstractmethod
    async def wait_for_run(self, run_id: str, timeout: float) -> None:
        """Return when the run's record or journal may have changed, or on timeout."""

    def watch_inbox(self, run_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (on the calling event loop's thread, soon) whenever a message may
        have been posted to the run's inbox, by this process or, where the store hears them,
        by another; returns the function that stops the calls. How a run's driver hears a
        cancel, a hook payload or a child's end at once instead of at its next look.

        A hint, like every notification: calls may be spurious, and a post may go unheard (a
        lost connection, a store that hears nothing), so the caller still looks now and then.
        The default hears nothing."""
        del run_id, callback
        return unwatched

    async def probe_write(self) -> None:
        """Write nothing durable, as a write would: raise ``wf.StoreUnavailable`` when the store
        refuses writes now (a read-only replica or database, a server out of memory or unable
        to save), return when it takes them. Leaves nothing behind. How ``wf run``'s ride-out
        tells a store that answers again from one that answers only reads. The default (a
        store with nothing that refuses writes by itself) returns."""
        return None

    # -- queue semantics: lanes, slots, rates -----------------------------------------------

    @abc.abstractmethod
    async def lane_ahead(self, lane: str, run_id: str, limit: int) -> list[str]:
        """Unfinished runs of the group lane ``lane`` (``lane_of``: a group within its queue)
        created before ``run_id``, oldest first, at most ``limit``. Lane order is creation
        order, made strict by the store (a run created later never sorts ahead of one created
        earlier, whatever the ids or clocks say). An ended run saved unfinished again (``wf
        retry``) re-enters its lane at the back."""

    @abc.abstractmethod
    async def try_slot(self, name: str, capacity: int) -> Slot | None:
        """Take one of ``capacity`` places named ``name`` without waiting, across every process
        on the store; None when all are taken. A dead process's places come back by
        themselves."""

    @abc.abstractmethod
    async def slots_taken(self, name: str, capacity: int) -> int:
        """How many of the places are taken now (for ``wf inspect``)."""

    @abc.abstractmethod
    async def try_rate(self, name: str, n: int, window: float, now: float) -> float | None:
        """Count a start against at most ``n`` per ``window`` seconds: None if counted, else
        when a start will be allowed again (nothing counted)."""

    @abc.abstractmethod
    async def rate_retry_at(self, name: str, n: int, window: float, now: float) -> float | None:
        """What ``try_rate`` would answer now, counting nothing (for ``wf inspect``): None if a
        start would be allowed, else when one will be."""

    async def queue_stats(self, now: float, *, limit: int = 10_000) -> list[QueueStats]:
        """Runs due at ``now`` and waiting for a driver, per workflow (and group).

        For metrics (queue depth, age of the oldest due run). The default reads the record of
        each due run, at most ``limit`` of them; a store with an index answers in one query.
        A damaged run is left out (and noted), as ``list_runs`` leaves it out.
        """
        records: list[RunRecord] = []
        for run_id in await self.due_runs(now, limit):
            try:
                with self.faults.contain("run", run_id, self.run_location(run_id)):
                    records.append(await self.get_run(run_id))
            except RunNotFound:
                continue  # removed meanwhile: not waiting
        return queue_stats_of(records, now)

    # -- hooks ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def register_hook(self, hook: HookRecord) -> str | None:
        """Claim ``hook.token`` for ``hook.run_id`` atomically.

        Returns None when claimed (or already owned by the same run), else the owning run's id.
        """

    @abc.abstractmethod
    async def get_hook(self, token: str) -> HookRecord | None:
        """The live hook with that token, or None."""

    @abc.abstractmethod
    async def release_hook(self, token: str, run_id: str) -> None:
        """Free the token if ``run_id`` owns it."""

    @abc.abstractmethod
    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        """Live hooks, of one run or of all runs."""

    async def save_delivery(self, delivery: WebhookDelivery) -> None:  # noqa: B027 - optional
        """Keep a webhook delivery that carried an idempotency key (the first one kept for an
        id stays). Not a hook: never listed, never holds the token.

        A store that cannot keep them (this default) keeps none: a retry after the hook was
        released is then answered 404, as for an unknown token."""

    async def post_once(
        self, run_id: str, kind: str, data: dict[str, Any], delivery: WebhookDelivery
    ) -> WebhookDelivery | None:
        """``post`` the message and keep ``delivery`` (as ``save_delivery``), unless a delivery
        is kept under ``delivery.id`` already: then post nothing and return that one (None:
        posted now). A keyed ``wf.resume_hook`` posts so: a caller that retries after its reply
        was lost delivers once.

        The stores wf ships check, post and keep in one atomic step. This default does them
        one after the other: two callers racing with one id may both post."""
        kept = (await self.get_deliveries([delivery.id])).get(delivery.id)
        if kept is not None:
            return kept
        await self.post(run_id, kind, data)
        await self.save_delivery(delivery)
        return None

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, WebhookDelivery]:
        """The deliveries kept under those ids (in one read where the store can): id -> it;
        an id with none is left out."""
        return {}

    async def prune_deliveries(self, before: float) -> int:
        """Remove the deliveries made before ``before`` (epoch seconds); how many (a store may
        also drop them by itself once older than a day, and count them here or not)."""
        return 0

    # -- streams --------------------------------------------------------------------------

    @abc.abstractmethod
    async def read_chunks(
        self, run_id: str, stream: str, start: int = 0, *, max_bytes: int | None = None
    ) -> tuple[list[bytes], bool]:
        """Chunks from index ``start`` on (``start`` >= 0), and whether the stream is closed.

        With ``max_bytes``, a batch of them, so that a reader of a big stream holds a batch
        at a time, not the stream: the first chunk from ``start`` (alone when it is bigger
        than ``max_bytes``), then the next ones while the batch's bytes stay within
        ``max_bytes``. A store may end a batch sooner (after some number of chunks), never
        empty while there is a chunk at ``start``; the caller reads on from ``start +
        len(chunks)``. ``closed`` is the stream's, whatever the batch holds."""

    @abc.abstractmethod
    async def list_streams(self, run_id: str) -> dict[str, tuple[int, bool]]:
        """Stream name -> (chunk count, closed) for a run. A stream that cannot be read is left
        out (noted in ``faults``)."""

    async def stream_info(self, run_id: str, stream: str) -> tuple[int, bool]:
        """One stream's (chunk count, closed); ``(0, False)`` for a stream not written yet.

        Raises ``StoreCorrupted`` when the stream cannot be read, never ``(0, False)``: a
        writer would take that count as where its chunks go next, and the store would drop
        them as replays of the chunks it has. This default reads ``list_streams``, which
        leaves a damaged stream out: a stream it lacks while it noted any damage is taken as
        damaged (which one it was is not known here)."""
        from wf.store._faults import collect_faults

        with collect_faults() as damaged:
            streams = await self.list_streams(run_id)
        found = streams.get(stream)
        if found is not None:
            return found
        if damaged:
            said = "; ".join(str(fault) for fault in damaged)
            raise StoreCorrupted(f"run {run_id}: stream {stream!r} cannot be read: {said}")
        return 0, False

    # -- step logs ------------------------------------------------------------------------

    @abc.abstractmethod
    async def read_logs(self, run_id: str, start: int = 0) -> list[LogEntry]:
        """The run's step log entries from index ``start`` on, oldest first.

        Raises ``RunNotFound``. Following a run's logs: read from the count seen so far after
        each ``wait_for_run`` (an append wakes it).
        """

    # -- schedules and retention (#16) ---------------------------------------------------
    # Schedules live in the store beside runs; the engine decides when they fire
    # (``wf.engine._schedules``) and which runs retention deletes (``wf.engine._retention``).

    @abc.abstractmethod
    async def lock_schedule(self, schedule_id: str, *, wait: bool = True) -> ScheduleLock | None:
        """Exclusive right to change or fire the schedule, across processes.

        With ``wait=False``, None when another holder has it; with ``wait=True``, waits (a
        holder keeps it for milliseconds) and raises ``StoreError`` after a long while.
        """

    @abc.abstractmethod
    async def save_schedule(self, schedule: Schedule) -> None:
        """Create or replace the schedule (the caller holds its lock)."""

    @abc.abstractmethod
    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule with that id, or None."""

    @abc.abstractmethod
    async def delete_schedule(self, schedule_id: str) -> bool:
        """Remove the schedule; False if there was none. Runs it started are kept."""

    @abc.abstractmethod
    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, by id."""

    async def due_schedules(self, now: float) -> tuple[list[Schedule], float | None]:
        """The schedules due by ``now`` (a ``next_run`` at or before it), by id, and the
        earliest ``next_run`` after ``now`` (None if there is none): what a worker's pass over
        the schedules reads. A damaged schedule is skipped, as by ``list_schedules``. This
        default filters ``list_schedules``; a store that can select the due ones alone does."""
        due: list[Schedule] = []
        later: float | None = None
        for found in await self.list_schedules():
            if found.next_run is None:
                continue
            if found.next_run <= now:
                due.append(found)
            elif later is None or found.next_run < later:
                later = found.next_run
        return due, later

    @abc.abstractmethod
    async def delete_runs(self, run_ids: Sequence[str], *, now: float, reason: str) -> Deleted:
        """Delete finished runs wholly: record, journal, inbox, streams, hooks, index entries.

        A run that is not finished, or that a driver holds, is left alone (the caller's policy
        decided the rest). Each deleted run leaves a ``Tombstone`` (``deleted_at=now``).
        Returns the ids deleted and the bytes they occupied.
        """

    @abc.abstractmethod
    async def get_tombstone(self, run_id: str) -> Tombstone | None:
        """What is left of a deleted run, or None (never deleted, or never existed)."""

    async def prune_tombstones(self, before: float) -> int:
        """Remove the tombstones of runs deleted before ``before`` (epoch seconds); how many.

        A store that cannot prune them keeps them all (this default), which is always safe:
        a tombstone only lets ``before=`` paging pass a deleted run and ``wf inspect`` say
        the run was deleted rather than unknown.
        """
        return 0

    async def compact(
        self,
        *,
        now: float,
        older_than: float,
        limit: int,
        on_progress: Progress | None = None,
    ) -> int:
        """Make up to ``limit`` runs that ended before ``now - older_than`` take less room
        (the local store packs them into segment files); how many. Readers see no
        difference. A store whose rows are small already has nothing to do (this default).
        ``on_progress(done, total)``: as ``verify``'s."""
        return 0

    @abc.abstractmethod
    async def store_info(self) -> StoreStats:
        """Format version, run counts by status, schedules, tombstones, size."""

    @abc.abstractmethod
    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        """Check every run against the format; one line per problem. A run's journal must
        hold only events replay can use (``wf._events.journal_damage``): such a run is named
        as damaged, as its driver fails it. Changes nothing, except what a store keeps beside
        its runs, each change said in a line: run counts for ``store_info``, set to a count of
        the runs when they differ; and (the local store) listing entries a run lacks, put
        back, and entries naming a run that does not exist, removed.

        ``on_progress(done, total)``, if given, is called now and then (maybe from another
        thread) by a store whose check takes a while (the local store: runs checked)."""

    @contextlib.asynccontextmanager
    async def holding_schedule(self, schedule_id: str, *, wait: bool = True) -> AsyncIterator[bool]:
        """``lock_schedule`` as a context: yields whether the lock is held."""
        lock = await self.lock_schedule(schedule_id, wait=wait)
        try:
            yield lock is not None
        finally:
            if lock is not None:
                await lock.release()

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:  # noqa: B027 - optional hook, most stores need nothing
        """Get ready now rather than on first use (connect, check the format, start hearing
        of changes): what a worker does before it serves."""

    async def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release resources (connections, watchers)."""

    async def stream_chunks(
        self,
        run_id: str,
        stream: str,
        start: int = 0,
        *,
        poll: float = 5.0,
        follow: bool = True,
    ) -> AsyncIterator[bytes]:
        """Yield the chunks of a stream from ``start`` (negative: from the end); with ``follow``,
        wait for new ones until the stream closes or its run has ended.

        Waits with ``wait_for_run`` (file events / notifications), not a busy loop. A run that
        ended with the stream still open, or never opened (a typo in a name, a stream a crash
        left unclosed), ends the stream too, instead of waiting forever: chunks are durable
        before the run's outcome is recorded, so one more read after seeing the run finished
        gets them all. Chunks are read in batches of about ``STREAM_BATCH_BYTES``.
        """
        if start < 0:
            count = (await self.stream_info(run_id, stream))[0]
            start = max(0, count + start)
        index = start
        run_over = False
        while True:
            if _reads_in_batches(type(self)):
                chunks, closed = await self.read_chunks(
                    run_id, stream, index, max_bytes=STREAM_BATCH_BYTES
                )
            else:  # a store of the contract before ``max_bytes``: whole reads
                chunks, closed = await self.read_chunks(run_id, stream, index)
            for chunk in chunks:
                yield chunk
            index += len(chunks)
            if chunks:
                continue  # more may have arrived while the caller took these
            if closed or not follow or run_over:
                return
            # Read the status *before* the next read of chunks: if the run is over then, that
            # read is the last one needed.
            run_over = (await self.get_run(run_id)).status.is_terminal
            if not run_over:
                await self.wait_for_run(run_id, poll)
