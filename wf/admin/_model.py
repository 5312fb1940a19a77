"""The typed results of ``wf.admin``: plain dataclasses, each with ``to_json()``.

``to_json()`` gives the documented JSON shapes (``wf inspect --json``, the HTTP API), so every
front end (the CLI, the terminal UI, the HTTP server and its web UI) renders the same data.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from wf._events import Waiting
from wf.store import Fault, HookRecord, RunRecord

ErrorInfo = dict[str, Any]
"""``{"type", "message"}`` of a failure (the journal's error without module or traceback)."""


@dataclasses.dataclass
class Attempt:
    """One attempt of a step: when it ran, how it ended (``running``, ``completed``,
    ``retried``, ``failed``, ``interrupted``, ``cancelled``) and, for a retried one, when the
    next begins."""

    number: int
    started_at: float
    finished_at: float | None = None
    status: str = "running"
    error: ErrorInfo | None = None
    retry_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The attempt as a JSON object."""
        return dataclasses.asdict(self)


OperationKind = Literal["step", "sleep", "hook", "child", "patch"]
"""What an operation of a run is (``patch``: the marker of a ``wf.patched()`` change the run
took, named by the change id: a replay meets it, so removing the call breaks the run)."""


@dataclasses.dataclass
class Operation:
    """One step, sleep, hook or child run of a run, as people see it.

    ``kind``: ``step``, ``sleep``, ``hook`` or ``child``. ``name``: a step's name, a hook's
    token, a child's run id. Step statuses: ``running``, ``retrying``, ``completed``,
    ``failed``, ``interrupted`` (running when its run stopped being driven: it runs again),
    ``cancelled`` (running when its run ended, or when a ``wf.select`` it lost decided: a sync
    step's thread runs on to its end, its result dropped). Sleeps: ``sleeping``, ``done`` or
    ``cancelled`` (its run ended first). Hooks: ``waiting``, ``received`` (``attempts``
    counts payloads), ``disposed``. Child runs: ``running``, then the child's final status.
    ``duration`` is in seconds once finished; ``error`` is the latest failure; ``retry_at``
    when a step waiting to retry runs again; ``until`` a sleep's deadline; ``spans`` a step's
    attempts.
    """

    op: int
    kind: OperationKind
    name: str
    status: str = "running"
    attempts: int = 0
    started_at: float = 0.0
    finished_at: float | None = None
    duration: float | None = None
    error: ErrorInfo | None = None
    retry_at: float | None = None
    until: float | None = None
    spans: list[Attempt] = dataclasses.field(default_factory=list)
    args: Any = None
    """A step's arguments as its last ``step_started`` recorded them (tagged JSON
    ``{"args": [...], "kwargs": {...}}``, or a truncated preview); None for other kinds."""

    def finish(self, ts: float) -> None:
        """Mark the operation finished at ``ts``."""
        self.finished_at = ts
        self.duration = ts - self.started_at

    def to_json(self, *, spans: bool = False) -> dict[str, Any]:
        """The operation as a JSON object (a row of ``steps`` in ``wf inspect --json``);
        ``spans=True`` adds its attempts (``spans``, as the HTTP API gives them)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del data["spans"]
        if spans:
            data["spans"] = [span.to_json() for span in self.spans]
        return data


@dataclasses.dataclass(frozen=True)
class Failure:
    """One recorded failure: a step attempt (retried or final) or the run's own."""

    ts: float | None
    op: int | None
    name: str | None
    attempt: int | None
    retried: bool
    type: str | None
    message: str | None
    traceback: str | None

    def to_json(self) -> dict[str, Any]:
        """The failure as a JSON object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class StreamInfo:
    """A byte stream of a run: how many chunks it has, whether it is closed, and whether it is
    complete: ended (closed, or its run ended) with its writer done — the step that wrote its
    last chunk finished, or a writer closed it. Closed and not complete: cut off (the step
    writing it failed, or the run ended while it wrote; ``cut_step`` names it); readers raise
    ``wf.StreamIncomplete`` at its end."""

    name: str
    chunks: int
    closed: bool
    complete: bool
    cut_step: str | None = None


@dataclasses.dataclass(frozen=True)
class RunLink:
    """Another run related to this one (its parent or a child): ``op`` is the parent's
    operation that started a child. ``workflow`` and ``status`` are None for a parent that
    can no longer be read."""

    id: str
    workflow: str | None
    status: str | None
    op: int | None = None


@dataclasses.dataclass(frozen=True)
class Race:
    """A decided ``wf.select`` / ``wf.first``: ``winner`` is the index of the operation that
    finished first (a replay takes the same branch)."""

    op: int | None
    winner: int | None
    decided_at: float | None


@dataclasses.dataclass
class Compensations:
    """What ``wf.rollback`` registered, which compensations ran, and which failed."""

    registered: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    ran: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    errors: list[ErrorInfo] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RunDetail:
    """Everything known about one run, read at time ``now``.

    ``inbox``: the kinds of messages posted to the run and not yet delivered (empty for a run
    that has ended). ``deployment``: ``pinned`` (the deployment the run is pinned to, None:
    unpinned), ``recorded`` (the hash of its code when it started) and ``current`` (of the code
    here). ``replays``/``deployment["current"]`` are filled only when asked for (the replay
    check imports the workflow's code). ``children``: the run's newest 1,000 children
    (``CHILDREN_SHOWN``; the store lists runs newest first), in the order it started them.
    """

    run: RunRecord
    steps: list[Operation]
    events: list[dict[str, Any]]
    errors: list[Failure]
    hooks: list[HookRecord]
    streams: list[StreamInfo]
    children: list[RunLink]
    parent: RunLink | None
    races: list[Race]
    compensations: Compensations
    deployment: dict[str, str | None]
    replays: dict[str, Any] | None
    inbox: list[str]
    now: float
    queue: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Queue options and state (``wf.admin.queue_state``): priority, group, queue, attempts,
    latest progress, ``held`` (``{"reason", "ahead"}``: what holds a pending run back) and
    ``unserved`` (the deployment an unfinished run is pinned to that no live worker serves)."""
    schedule: dict[str, Any] | None = None
    """The schedule whose fire started the run: ``{"id", "cron", "tz", "exists"}`` (``exists``
    False once it was removed), or None for a run no schedule started."""
    recoveries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Each recovery from a driver that died in the run (``ts``, ``in_a_row``, ``steps``: the
    steps it died in, ``stalled``: the deaths that failed the run with ``wf.RunStalled``)."""
    driver_gone: bool | None = None
    """For a running run: True when no process holds its lock (its driver died; a worker
    recovers it), False while one does; None for a run that is not running or not probed."""
    damaged: list[Fault] = dataclasses.field(default_factory=list)
    """What the detail left out because it cannot be read (a damaged hook record or stream of
    the run: ``wf.store.Fault``), for the front end to name; the rest of the detail stands.
    A stream whose only damage is its name file is named here and is in ``streams`` all the
    same, under the name the run's journal wrote: its fault's ``shown_as`` is that name (it
    was not left out; empty for every item that was)."""

    @property
    def cancel_requested(self) -> bool:
        """Whether the run was asked to stop: in its journal, its record, or still in its
        inbox (no driver has taken the request in yet) — shown as soon as it is sent."""
        return (
            self.run.cancel_requested
            or "cancel" in self.inbox
            or any(event.get("type") == "cancel_requested" for event in self.events)
        )

    def to_json(self, *, spans: bool = False) -> dict[str, Any]:
        """The detail as ``wf inspect --json`` prints it (``why`` is added by the renderer);
        ``spans=True`` adds each step's attempts."""
        parent = self.parent
        cancel_requested = self.cancel_requested
        return {
            "run": {**self.run.to_json(), "cancel_requested": cancel_requested},
            "cancel_requested": cancel_requested,
            "steps": [row.to_json(spans=spans) for row in self.steps],
            "events": self.events,
            "errors": [failure.to_json() for failure in self.errors],
            "hooks": [dataclasses.asdict(hook) for hook in self.hooks],
            "streams": {
                s.name: {
                    "chunks": s.chunks,
                    "closed": s.closed,
                    "complete": s.complete,
                    "cut_step": s.cut_step,
                }
                for s in self.streams
            },
            "children": [
                {"id": c.id, "workflow": c.workflow, "status": c.status, "op": c.op}
                for c in self.children
            ],
            "parent": (
                None
                if parent is None
                else {"id": parent.id, "workflow": parent.workflow, "status": parent.status}
            ),
            "races": [dataclasses.asdict(race) for race in self.races],
            "compensations": dataclasses.asdict(self.compensations),
            "deployment": dict(self.deployment),
            "replays": self.replays,
            "queue": self.queue,
            "schedule": self.schedule,
            "recoveries": self.recoveries,
            "driver_gone": self.driver_gone,
            "damaged": [fault.to_json() for fault in self.damaged],
        }


@dataclasses.dataclass(frozen=True)
class RunPage:
    """One page of runs, newest first; ``next_before`` pages on (None on the last page)."""

    runs: list[RunRecord]
    next_before: str | None
    searched: int = 0
    """Runs a search read for this page (0 for a listing, which reads an index)."""
    exhausted: bool = False
    """A search stopped at its bound (``SEARCH_BUDGET`` runs) before filling the page: the
    page is what that many runs held, and ``next_before`` searches further."""
    damaged: list[Fault] = dataclasses.field(default_factory=list)
    """Runs this page passed over because their record cannot be read (each with where it
    lives and why): left out, so that one damaged run never hides the others. ``wf store
    verify`` names every damaged item."""


@dataclasses.dataclass(frozen=True)
class SchedulePage:
    """Every schedule the store can read, by id, each as JSON with its last run's status
    (``wf.admin.list_schedules``'s rows), and those it cannot."""

    schedules: list[dict[str, Any]]
    damaged: list[Fault] = dataclasses.field(default_factory=list)
    """Schedules left out because their stored definition cannot be read (each with where it
    lives and why; on the local store the item is the file's name, which is a hash of the
    id). They do not fire; the others do. ``wf store verify`` names them too."""

    def to_json(self) -> dict[str, Any]:
        """The body of ``GET /api/v1/schedules``."""
        return {"schedules": self.schedules, "damaged": [f.to_json() for f in self.damaged]}


@dataclasses.dataclass(frozen=True)
class HookPage:
    """Live hooks, oldest first (``wf.admin.list_hooks``), and those the store cannot read."""

    hooks: list[HookRecord]
    damaged: list[Fault] = dataclasses.field(default_factory=list)
    """Hooks left out because their stored record cannot be read (each with where it lives
    and why). A payload cannot be delivered to one; ``wf store verify`` names them too."""

    def to_json(self) -> dict[str, Any]:
        """The body of ``GET /api/v1/hooks``."""
        return {
            "hooks": [dataclasses.asdict(hook) for hook in self.hooks],
            "damaged": [f.to_json() for f in self.damaged],
        }


@dataclasses.dataclass(frozen=True)
class EventPage:
    """A page of a run's journal, oldest event first (``wf.admin.journal_page``)."""

    run_id: str
    events: list[dict[str, Any]]
    next_start: int
    """The index of the event after this page: pass it as ``start`` for the next page."""
    more: bool
    """Events past this page are stored already."""

    def to_json(self) -> dict[str, Any]:
        """The body of ``GET /api/v1/runs/{id}/events``."""
        return dataclasses.asdict(self)


ReasonKind = Literal[
    "queued",
    "held",
    "completed",
    "cancelled",
    "failed",
    "driver_gone",
    "step_running",
    "retrying",
    "sleeping",
    "between",
    "hook",
    "child",
    "resume",
    "waiting",
    "suspended",
    "due",
    "wakes",
    "no_timer",
    "cancel_requested",
    "undelivered",
    "unserved",
]
"""Every fact ``wf.admin.explain`` can state: a closed set, so a front end that puts them
into words (``wf.admin._words.sentence``) is checked against it."""

Tone = Literal["info", "wait", "ok", "warn", "error"]
"""How a reason reads."""


@dataclasses.dataclass(frozen=True)
class Reason:
    """One fact of an explanation, as data; front ends put it into words.

    ``kind`` says which fact, ``tone`` how it reads (``info``, ``wait``, ``ok``, ``warn``,
    ``error``); the other fields are those the kind uses:

    - ``queued``; ``held`` (``detail``: the cap, lane, limit or delay that holds a pending
      run back, ``count``: runs ahead of it, ``at``: when it is due); ``completed`` /
      ``cancelled`` (``took``); ``failed`` (``name``,
      ``attempt``: the failed step and its attempts, when a step failed; ``error``);
    - ``driver_gone`` (``count``: operations done); ``step_running`` (``op``, ``name``,
      ``attempt``, ``since``; ``stale`` when its driver is gone); ``retrying`` (``op``,
      ``name``, ``attempt``: the attempt that failed, ``max_attempts`` if recorded, ``at``,
      ``error``); ``sleeping`` (``at``); ``between``;
    - ``hook`` (``name``: the token); ``child`` (``name``: the child's id, ``status``);
      ``resume`` (the driver stopped); ``waiting`` (``detail``: what the run says it waits
      for); ``suspended``; ``due``; ``wakes`` (``at``); ``no_timer``;
    - ``cancel_requested``; ``undelivered`` (``count``, ``kinds``); ``unserved`` (``name``:
      the deployment the unfinished run is pinned to, which no live worker serves).
    """

    kind: ReasonKind
    tone: Tone
    op: int | None = None
    name: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    at: float | None = None
    since: float | None = None
    took: float | None = None
    status: str | None = None
    error: ErrorInfo | None = None
    count: int | None = None
    kinds: tuple[str, ...] = ()
    detail: str | None = None
    stale: bool = False

    def to_json(self) -> dict[str, Any]:
        """The reason as a JSON object, without the fields its kind does not use."""
        data = dataclasses.asdict(self)
        data["kinds"] = list(self.kinds)
        return {k: v for k, v in data.items() if v not in (None, [], False)}


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why a run is where it is: its status and the facts behind it, most important first.

    ``waiting_for`` is what a suspended run recorded it waits on (``wf._events.Waiting``
    entries: kind, target, until); ``wake_at`` its timer.
    """

    status: str
    reasons: tuple[Reason, ...]
    waiting_for: list[Waiting] | None = None
    wake_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The explanation as a JSON object."""
        return {
            "status": self.status,
            "reasons": [reason.to_json() for reason in self.reasons],
            "waiting_for": self.waiting_for,
            "wake_at": self.wake_at,
        }


@dataclasses.dataclass(frozen=True)
class ControlResult:
    """The outcome of a cancel or wake request: ``sent`` is False when the run had already
    ended; ``status`` is the run's status after the request (after it ended, with ``wait``).
    ``undriven``: with ``wait``, why the run could not be driven here although the request is
    stored (its workflow does not import in this process); a worker where it does applies it.
    ``refused``: why nothing was sent to a run that had not ended (a wake of a run with no sleep
    to end), in words. ``damaged``: with a tree's cancel, the run's children's index when it
    cannot be read (on Redis, ``ix:p:…`` a stray write made of another type): the runs below
    it that only that index names were not reached (``kind`` ``children``, as a run's page
    names it).
    """

    run_id: str
    sent: bool
    status: str
    undriven: str | None = None
    refused: str | None = None
    damaged: tuple[Fault, ...] = ()


@dataclasses.dataclass(frozen=True)
class StoreInfo:
    """Which store this is (``local``, ``postgres``, ``redis``, ``memory``, or the class
    name) and where; ``drives``: whether the backend drives the runs a caller waits for
    (False for a ``wf serve --no-worker``: only a ``wf worker`` on its store does);
    ``deployment``: the deployment whose runs (and unpinned ones) it drives, None: runs of
    every deployment (a run pinned to another one is left to that deployment's workers)."""

    kind: str
    location: str
    drives: bool = True
    deployment: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The info as a JSON object."""
        return dataclasses.asdict(self)
