"""Queue options of a workflow and of one run, their validation, and admission under caps.

A workflow declares its options once (``@wf.workflow(priority=..., group=...)``); a run may
override some of them (``flow.with_options(...)``). Everything a later driver needs to enforce
them travels in the run's record (``priority``, ``group``, ``queue``, ``attempt``,
``max_attempts``, ``limits``), so a worker that never imported the workflow still orders and
caps it correctly.

Admission (``admit``) is asked before a run is driven: its group lane, the workflow's rate
limit, then the store-wide and per-workflow caps. The store makes each of these atomic across
processes (``Store.lane_ahead``, ``try_rate``, ``try_slot``); the rules live here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import math
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wf._exceptions import StoreCorrupted, UsageError, WFError
from wf.store import Hold, RunRecord, RunStatus, Slot, Store, lane_of
from wf.store._faults import named_place
from wf.store._limits import (
    BEYOND,
    LATEST,
    check_at,
    check_due,
    check_name,
    iso_time,
    shown,
)

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

log = logging.getLogger("wf")

MAX_PRIORITY = 2**21 - 1
"""Priorities run from 0 to this, higher first."""

Backoff = Callable[[int], float]
"""Attempt number (1-based, the attempt that failed) -> seconds to wait before the next."""


def exp_backoff(base: float = 0.5, factor: float = 2.0, cap: float = 30.0) -> Backoff:
    """Exponential backoff with full jitter: a uniform draw in ``[0, min(cap, base*factor**n)]``
    where ``n`` is the number of the attempt that failed minus one."""
    if base < 0 or factor < 1 or cap < 0:
        raise UsageError("exp_backoff needs base >= 0, factor >= 1 and cap >= 0")

    def backoff(attempt: int) -> float:
        ceiling = min(cap, base * factor ** max(0, attempt - 1))
        return random.uniform(0.0, ceiling)

    backoff.__qualname__ = f"exp_backoff(base={base}, factor={factor}, cap={cap})"
    return backoff


MAX_COUNT = 2**53 - 1
"""The largest count an option takes (attempts, recoveries, concurrency...): the largest
integer every JSON reader keeps exact, well inside what a journal line can carry."""


def positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
        raise UsageError(
            f"{name} must be an integer from {minimum} to {MAX_COUNT}, not {shown(value)}"
        )
    return value


def check_priority(value: Any) -> int:
    """A valid priority, or a ``UsageError`` saying the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRIORITY:
        raise UsageError(
            f"priority must be an integer from 0 to {MAX_PRIORITY}, not {shown(value)}"
        )
    return value


def seconds_of(what: str, value: Any) -> float:
    """Seconds from a number or a ``timedelta``."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{what} must be seconds or a timedelta, not {value!r}")
    try:
        seconds = float(value)  # an int too large for a float overflows here
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        shown = f"{value!r}"[:60]
        raise UsageError(f"{what} must be a finite number of seconds or a timedelta, not {shown}")
    return seconds


@dataclasses.dataclass(frozen=True)
class QueueOptions:
    """The queue options of a workflow (see ``@wf.workflow``)."""

    max_attempts: int = 1
    backoff: Backoff | None = None
    priority: int = 0
    group: str | Callable[..., str | None] | None = None
    group_concurrency: int = 1
    concurrency: int | None = None
    rate_limit: tuple[int, float] | None = None
    queue: str | None = None
    progress: Any = None
    max_recoveries: int | None = None
    """Deaths of the driving process in a row, without progress, before the run fails with
    ``wf.RunStalled`` (None: the engine's, ``[tool.wf] max_recoveries``)."""

    def __post_init__(self) -> None:
        positive_int("max_attempts", self.max_attempts)
        if self.max_recoveries is not None:
            positive_int("max_recoveries", self.max_recoveries)
        if self.backoff is not None and not callable(self.backoff):
            raise UsageError(f"backoff must be a callable attempt -> seconds, not {self.backoff!r}")
        check_priority(self.priority)
        if self.group is not None and not callable(self.group):
            check_name("group", self.group)
        positive_int("group_concurrency", self.group_concurrency)
        if self.concurrency is not None:
            positive_int("concurrency", self.concurrency)
        if self.rate_limit is not None:
            try:
                n, window = self.rate_limit
            except (TypeError, ValueError):
                raise UsageError(
                    f"rate_limit must be (n, seconds), not {self.rate_limit!r}"
                ) from None
            positive_int("rate_limit's n", n)
            seconds = seconds_of("rate_limit's window", window)
            if seconds <= 0:
                raise UsageError(f"rate_limit's window must be positive, not {window!r}")
            object.__setattr__(self, "rate_limit", (n, seconds))
        if self.queue is not None:
            check_name("queue", self.queue)

    def limits(self) -> dict[str, Any] | None:
        """What the record carries so that any driver enforces the caps and limits."""
        out: dict[str, Any] = {}
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.group_concurrency != 1:
            out["group_concurrency"] = self.group_concurrency
        if self.rate_limit is not None:
            out["rate_limit"] = list(self.rate_limit)
        return out or None

    def next_delay(self, attempt: int, *, where: str = "") -> float:
        """Seconds to wait after ``attempt`` failed.

        A backoff that raises, or gives anything but a finite number of seconds >= 0 (or a
        ``timedelta``), is a ``UsageError`` naming it: the same call would fail the same way
        on every attempt, so the run fails with it (``wf.engine._driver``)."""
        backoff = self.backoff or _DEFAULT_BACKOFF
        name = getattr(backoff, "__qualname__", None) or shown(backoff)
        name = f"{name} of {where}" if where else name
        try:
            delay = backoff(attempt)
        except Exception as exc:
            raise UsageError(
                f"backoff {name} raised {type(exc).__name__} for attempt {attempt}: {exc}"
            ) from exc
        try:
            seconds = seconds_of("backoff's result", delay)
        except UsageError:
            seconds = -1.0
        if not 0 <= seconds <= LATEST:
            raise UsageError(
                f"backoff {name} returned {shown(delay)} for attempt {attempt}: expected a "
                "finite number of seconds >= 0 or a timedelta"
            )
        return seconds


_DEFAULT_BACKOFF = exp_backoff()

_RUN_OPTION_NAMES = (
    "priority",
    "group",
    "max_attempts",
    "max_recoveries",
    "delay",
    "at",
    "unique",
    "deployment",
)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Per-run overrides given to ``Workflow.with_options``."""

    priority: int | None = None
    group: str | None = None
    max_attempts: int | None = None
    max_recoveries: int | None = None
    delay: float | None = None
    at: dt.datetime | None = None
    unique: bool = False
    deployment: str | None = None
    """``"latest"``: a child run started with it is pinned to the deployment of the process
    that starts it, not to its parent's (None: the parent's; a run started outside a workflow
    always gets its process's)."""

    @classmethod
    def build(cls, base: RunOptions | None, given: Mapping[str, Any]) -> RunOptions:
        """Validate ``given`` (keyword arguments of ``with_options``) over ``base``."""
        unknown = sorted(set(given) - set(_RUN_OPTION_NAMES))
        if unknown:
            raise UsageError(
                f"unknown run option(s) {', '.join(map(repr, unknown))}: "
                f"expected {', '.join(_RUN_OPTION_NAMES)}"
            )
        values = dataclasses.asdict(base) if base is not None else {}
        values.update(given)
        if values.get("priority") is not None:
            check_priority(values["priority"])
        if values.get("group") is not None:
            check_name("group", values["group"])
        for name in ("max_attempts", "max_recoveries"):
            if values.get(name) is not None:
                positive_int(name, values[name])
        if values.get("delay") is not None:
            delay = seconds_of("delay", values["delay"])
            if delay > LATEST:
                raise UsageError(f"delay of {delay:g} s ends past 9999-12-31, the latest due time")
            values["delay"] = delay
        at = values.get("at")
        if at is not None:
            if not isinstance(at, dt.datetime):
                raise UsageError(f"at must be a datetime, not {at!r}")
            if at.tzinfo is None or at.utcoffset() is None:
                raise UsageError(f"at needs a time zone ({at.isoformat()} has none)")
            check_at("at", at)
        if values.get("delay") is not None and at is not None:
            raise UsageError("give delay or at, not both")
        if values.get("deployment") not in (None, "latest"):
            raise UsageError(
                f"deployment must be 'latest' (pin a child run to the starting process's "
                f"deployment, not its parent's), not {values['deployment']!r}"
            )
        if not isinstance(values.get("unique", False), bool):
            raise UsageError(f"unique must be True or False, not {values['unique']!r}")
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The options given, as ``POST /api/v1/runs`` takes them (``at`` in ISO 8601)."""
        given = {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, False)}
        if self.at is not None:
            given["at"] = self.at.isoformat()
        return given

    def due_at(self, now: float) -> float | None:
        """When a run started now with these options is due; None: at once (as for a past
        ``at`` or a ``delay <= 0``: a producer that computed ``at`` a moment ago is not wrong)."""
        if self.delay is not None and self.delay > 0:
            return check_due(f"delay of {self.delay:g} s", now + self.delay)
        if self.at is not None:
            at = self.at.timestamp()
            return at if at > now else None
        return None


def group_key(options: QueueOptions, run: RunOptions | None, args: Any, kwargs: Any) -> str | None:
    """The run's group: the run option, else the workflow's (a string, or computed from the
    validated arguments)."""
    if run is not None and run.group is not None:
        return run.group
    group = options.group
    if group is None or isinstance(group, str):
        return group
    try:
        key = group(*args, **kwargs)
    except Exception as exc:
        raise UsageError(f"the group function raised {type(exc).__name__}: {exc}") from None
    if key is None:
        return None
    if not isinstance(key, str):
        raise UsageError(f"the group function must return a str or None, not {key!r}")
    return check_name("group", key)


# -- admission ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QueueHold(Hold):
    """A ``Hold`` that names what ends it, so that a worker can look again without driving the
    run: ``lane`` (lane, width; ``lane_of``) when its group's lane holds it, ``slot`` (name,
    capacity) when a cap does, ``rate`` (the limit's name) when a rate limit does (until
    ``retry_at``; ``per``: its starts and window, ``heard``: the store's ``rate_returns``
    before the limit was asked, so that a start taken back since is noticed)."""

    lane: tuple[str, int] | None = None
    slot: tuple[str, int] | None = None
    rate: str | None = None
    per: tuple[int, float] | None = None
    heard: int = 0
    rank: Rank | None = None
    """The run's place in the queue's order (``rank``), for a cap's hold."""


Rank = tuple[int, float, int, str]
"""A due run's place in the queue's order: (−priority, due time, creation number, id),
smallest first (the id only tells apart records the store has not numbered)."""


def rank(record: RunRecord) -> Rank:
    """Where the run stands in the queue's order (the order of ``Store.due_runs``)."""
    if record.wake_at is not None and record.status is RunStatus.PENDING:
        due = record.wake_at  # a delayed start, a retry's backoff
    else:
        due = record.created_at
    return (-record.priority, due, record.seq, record.id)


class HeldRuns:
    """The due runs a worker tried and found held back, and when to try them again.

    A held run is not driven again on every wake-up: a drive takes and gives back the run's
    lease, which every process on the store hears as activity, so workers re-driving held runs
    would wake each other for ever, doing nothing. Instead ``recheck`` looks read-only at what
    holds them (one lane read per group, one count per cap, the clock for rate limits): a run
    whose lane moved on, or whose rate limit's time came, is released; a cap opens as many
    places as it has free, which ``take`` hands out in the order the caller asks (the queue's
    order), so that a freed place is not raced for by every run it held. A rate limit is read
    again before its time only when the store heard of one of its starts taken back
    (``Store.rate_returns``: a caller cancelled as its start was counted): the start freed may
    let a held run through.
    """

    def __init__(self) -> None:
        self._held: dict[str, Hold] = {}
        self._rates: dict[str, float] = {}
        """Rate limit -> when it lets a start through, as its latest refusal said."""
        self._open: dict[str, int] = {}
        """Cap -> how many of its held runs may be tried until the next recheck."""
        self._heard: dict[str, int] = {}
        """Rate limit -> the store's ``rate_returns`` before its latest look (a refusal, or a
        recheck's read): a count that moved since is a start that may have been freed."""

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._held

    def add(self, run_id: str, hold: Hold) -> None:
        """The run was tried and held back by ``hold``."""
        self._held[run_id] = hold
        key = _key(hold)
        if key is not None and hold.retry_at is not None:
            self._rates[key] = hold.retry_at  # the latest refusal speaks for every run it holds
            if isinstance(hold, QueueHold) and hold.per is not None:
                self._heard[key] = hold.heard

    def retry_ats(self) -> list[float]:
        """When rate limits let held runs start."""
        out = []
        for hold in self._held.values():
            if hold.retry_at is not None:
                key = _key(hold)
                out.append(self._rates.get(key, hold.retry_at) if key else hold.retry_at)
        return out

    def returns_unheard(self, heard: int) -> bool:
        """Whether a rate limit holding a run here may have had a start taken back since it was
        last looked at: the store's ``rate_returns`` (``heard``, read now) moved since."""
        return any(
            isinstance(hold, QueueHold)
            and hold.per is not None
            and self._heard.get(_key(hold) or "", heard) != heard
            for hold in self._held.values()
        )

    def take(self, run_id: str) -> bool:
        """Whether the held run may be tried now (then it is no longer held here)."""
        hold = self._held.get(run_id)
        if hold is None:
            return True
        key = _key(hold)
        if key is None or self._open.get(key, 0) <= 0:
            return False
        self._open[key] -= 1
        del self._held[run_id]
        return True

    def ahead(self, slot: str, place: Rank) -> bool:
        """Whether a run at ``place`` must leave the cap ``slot`` to a held run ahead of it.

        A cap's place that frees while a worker looks at the queue would otherwise go to
        whichever run asks first: a run claimed fresh would overtake held runs of higher
        priority (or older ones of the same) that wait for exactly that place. Until the next
        ``recheck`` opens the cap for them (``take`` hands its places out in the queue's
        order), a run behind them waits too."""
        if self._open.get("slot:" + slot, 0) > 0:
            return False
        return any(
            isinstance(hold, QueueHold)
            and hold.slot is not None
            and hold.slot[0] == slot
            and hold.rank is not None
            and hold.rank < place
            for hold in self._held.values()
        )

    def capped(self) -> bool:
        """Whether a run is held by a cap that the last ``recheck`` found full: its places
        are held by drives (a slot is a lock its driver holds), and the first to end frees
        one."""
        return any(
            isinstance(hold, QueueHold)
            and hold.slot is not None
            and self._open.get("slot:" + hold.slot[0], 1) <= 0
            for hold in self._held.values()
        )

    def keep_only(self, due: set[str]) -> None:
        """Forget held runs that are no longer due (``due``: every run due now)."""
        for run_id in [r for r in self._held if r not in due]:
            del self._held[run_id]

    async def recheck(self, store: Store, now: float) -> bool:
        """Look (read-only) whether holds may have ended; True if some held run may be tried."""
        self._open.clear()
        released = False
        lanes: dict[str, tuple[int, list[str]]] = {}
        freed: dict[str, bool] = {}  # rate limit -> whether a start taken back lets one through
        for run_id, hold in list(self._held.items()):
            key = _key(hold)
            if isinstance(hold, QueueHold) and hold.lane is not None:
                group, width = hold.lane
                lanes.setdefault(group, (width, []))[1].append(run_id)
            elif isinstance(hold, QueueHold) and hold.slot is not None and key is not None:
                if key not in self._open:
                    name, capacity = hold.slot
                    try:
                        self._open[key] = capacity - await store.slots_taken(name, capacity)
                    except WFError:
                        self._open[key] = 1  # cannot tell: one more try decides
            elif (
                hold.retry_at is not None
                and self._rates.get(key or "", hold.retry_at) > now
                and not await self._freed(store, hold, now, freed)
            ):
                pass  # the rate limit's time has not come
            else:
                del self._held[run_id]  # its time came, or it says not what ends it: try it
                released = True
        for group, (width, run_ids) in lanes.items():
            # The first ``width`` unfinished runs of the lane may run: one read names them (the
            # runs ahead of any held run, when there are that many; else that run is one too).
            probe = run_ids[-1]
            try:
                heads = set(await store.lane_ahead(group, probe, width))
            except WFError:
                heads = set(run_ids)  # gone or unreadable: the next look at the queue decides
            if len(heads) < width:
                heads.add(probe)
            for run_id in run_ids:
                if run_id in heads:
                    del self._held[run_id]
                    released = True
        return released or any(n > 0 for n in self._open.values())

    async def _freed(self, store: Store, hold: Hold, now: float, looked: dict[str, bool]) -> bool:
        """Whether the rate limit that holds ``hold`` lets a start through before its time: a
        start of it was taken back since it was last looked at (read once per recheck)."""
        key = _key(hold)
        if not isinstance(hold, QueueHold) or hold.rate is None or hold.per is None or not key:
            return False
        if key in looked:
            return looked[key]
        looked[key] = False
        heard = store.rate_returns()
        if self._heard.get(key, heard) == heard:
            return False  # nothing taken back since: its time stands
        self._heard[key] = heard
        n, window = hold.per
        # Unreadable for now: its time stands (the next take-back heard asks again).
        with contextlib.suppress(WFError):
            looked[key] = await store.rate_retry_at(hold.rate, n, window, now) is None
        return looked[key]


def _key(hold: Hold) -> str | None:
    if isinstance(hold, QueueHold):
        if hold.slot is not None:
            return "slot:" + hold.slot[0]
        if hold.rate is not None:
            return "rate:" + hold.rate
    return None


@dataclasses.dataclass
class Admission:
    """The places a driven run holds (released when its drive ends)."""

    slots: list[Slot] = dataclasses.field(default_factory=list)

    async def release(self) -> None:
        for slot in self.slots:
            await slot.release()
        self.slots.clear()


class AdmissionOrder:
    """The order in which the drives of a worker's claim ask for their places: the claim's.

    A claim hands its runs over in the queue's order (an orphan of a dead worker in the place
    it had), but each drive reads its run before it asks for its places, and some reads take
    longer (an orphan's recovery reads its journal): a run behind it would take the place a
    cap had free first. So a claimed run asks for a cap, or for a rate limit's permit, only
    once every run claimed before it by this process has asked for the same ones, or is known
    not to need them. Runs that need none never wait (nor make others wait once read); nor do
    runs this process drives without a claim (``wf.start``'s own drive).
    """

    def __init__(self) -> None:
        self._queued: dict[str, frozenset[str] | None] = {}
        """Runs claimed that have not asked yet, in claim order -> what they will ask for
        (None: not read yet)."""
        self._changed: asyncio.Event | None = None

    def __len__(self) -> int:
        return len(self._queued)

    def queue(self, run_id: str) -> None:
        """The run was claimed: its drive asks after those claimed before it."""
        self._queued.pop(run_id, None)
        self._queued[run_id] = None

    async def turn(self, run_id: str, keys: frozenset[str]) -> None:
        """Wait until the runs claimed before ``run_id`` have asked for ``keys`` (the caps and
        limits it asks for), or said they need none of them."""
        if run_id not in self._queued:
            return
        if not keys:
            self.passed(run_id)  # a group's lane has an order of its own
            return
        self._queued[run_id] = keys
        self._notify()  # runs behind it waited to know what it asks for
        while self._behind(run_id, keys):
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    def passed(self, run_id: str) -> None:
        """The run asked for its places, needs none, or its drive ended."""
        if self._queued.pop(run_id, False) is not False:
            self._notify()

    def _behind(self, run_id: str, keys: frozenset[str]) -> bool:
        for other, theirs in self._queued.items():
            if other == run_id:
                return False
            if theirs is None or not theirs.isdisjoint(keys):
                return True
        return False

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None


def order_keys(engine: EngineLike, record: RunRecord, starting: bool) -> frozenset[str]:
    """What ``admit`` asks for the run, in the terms of ``AdmissionOrder``."""
    keys = {"slot:" + name for name, _, _ in slot_names(engine, record)}
    if starting and (record.limits or {}).get("rate_limit") is not None:
        keys.add(f"rate:workflow:{record.workflow}")
    return frozenset(keys)


def slot_names(engine: EngineLike, record: RunRecord) -> list[tuple[str, int, str]]:
    """The caps that apply to the run: (slot name, capacity, words for ``wf inspect``)."""
    return _caps(engine.concurrency, record)


def _caps(total: int | None, record: RunRecord) -> list[tuple[str, int, str]]:
    caps = []
    if total is not None:
        caps.append(("*", total, f"the store-wide cap ({total} at once)"))
    limit = (record.limits or {}).get("concurrency")
    if limit is not None:
        words = f"the cap of workflow {record.workflow!r} ({limit} at once)"
        caps.append((f"workflow:{record.workflow}", int(limit), words))
    return caps


def needs_admission(engine: EngineLike, record: RunRecord, lane_seen: bool = False) -> bool:
    """Whether any cap or limit applies (most runs: none, and admission costs nothing).
    ``lane_seen``: the run's lease says it heads its group's lane (``admit``'s), so the
    group asks for nothing more: a run with no cap and no rate limit besides goes straight
    to its drive (no ``AdmissionOrder`` turn, no empty ``Admission`` to release)."""
    if engine.concurrency is not None:
        return True
    if not record.group:
        return bool(record.limits)
    if not lane_seen:
        return True
    return any(key != "group_concurrency" for key in record.limits or ())


async def admit(
    engine: EngineLike, record: RunRecord, *, starting: bool, lane_seen: bool = False
) -> Admission | Hold:
    """Take the places the run needs to be driven now, or say what holds it back.

    ``starting``: an attempt begins (only starts count against a rate limit). ``lane_seen``:
    the run's lease says it heads its group's lane (``Lease.heads_lane``): no look at the lane.
    """
    store = engine.store
    limits = record.limits or {}
    lane = lane_of(record)
    if lane is not None and not lane_seen:
        width = int(limits.get("group_concurrency", 1))
        ahead = await store.lane_ahead(lane, record.id, width)
        if len(ahead) >= width:
            words = f"group {record.group!r} runs {width} at a time"
            return QueueHold(words, len(ahead), lane=(lane, width))
    admission = Admission()
    try:
        return await _take_places(engine, record, admission, starting)
    except BaseException:
        # Failed or cancelled after taking places (a later cap's, the rate limit's look):
        # nothing else would release them, and they kept every other run of their caps out
        # (on Redis, renewed for as long as the process lived).
        await _release_anyway(admission)
        raise


async def _take_places(
    engine: EngineLike, record: RunRecord, admission: Admission, starting: bool
) -> Admission | Hold:
    """``admit``'s caps and rate limit, the places taken going into ``admission``."""
    store = engine.store
    limits = record.limits or {}
    place = rank(record)
    held_ahead = engine.held_ahead
    for name, capacity, words in slot_names(engine, record):
        if held_ahead is not None and held_ahead(name, place):
            slot = None  # runs ahead of it wait for this cap's next place
        else:
            slot = await store.try_slot(name, capacity)
        if slot is None:
            await admission.release()
            return QueueHold(f"held by {words}", capacity, slot=(name, capacity), rank=place)
        admission.slots.append(slot)
    rate = limits.get("rate_limit")
    if rate is not None and starting:
        n, window = int(rate[0]), float(rate[1])
        name = f"workflow:{record.workflow}"
        heard = store.rate_returns()  # before the count: a take-back after it is noticed
        retry_at = await store.try_rate(name, n, window, engine.clock.now())
        if retry_at is not None:
            await admission.release()
            words = f"held by the rate limit of workflow {record.workflow!r} ({n} per {window:g} s)"
            return QueueHold(words, 0, retry_at, rate=name, per=(n, window), heard=heard)
    return admission


async def _release_anyway(admission: Admission) -> None:
    """Release the places taken, in a task of its own: a caller cancelled again meanwhile
    does not stop it. A place whose release fails is kept until its store lets it go (on
    Redis, its key's time to live)."""
    if not admission.slots:
        return
    try:
        await asyncio.shield(admission.release())
    except Exception as error:  # the failure that got here is the one raised
        log.debug("wf: releasing a run's places failed: %s", error)


def _lane_words(record: RunRecord, width: int, ahead: list[str]) -> str:
    """Why a run waits in its lane, naming the runs ahead of it that hold the lane's places
    (its first ``width``: running, or next to run) and how many more there are."""
    scope = f"queue {record.queue!r}" if record.queue is not None else "its workflow"
    holders = ", ".join(ahead[:width])
    more = f" and {len(ahead) - width} more" if len(ahead) > width else ""
    return (
        f"waiting in group {record.group!r} of {scope} ({width} at a time) behind {holders}{more}"
    )


async def explain(
    store: Store, record: RunRecord, now: float, total: int | None = None
) -> Hold | None:
    """Why a pending run has not started (without taking anything), for ``wf inspect``.

    ``total``: the store-wide cap this process knows of (``wf.configure(concurrency=)``)."""
    if record.status is not RunStatus.PENDING:
        return None
    if record.wake_at is not None and record.wake_at > now:
        stamp = _stamp(record.wake_at)
        if record.attempt > 1:
            words = f"attempt {record.attempt} of {record.max_attempts} is due at {stamp}"
        else:
            words = f"delayed: due at {stamp}"
        return Hold(words, 0, record.wake_at)
    limits = record.limits or {}
    lane = lane_of(record)
    if lane is not None:
        width = int(limits.get("group_concurrency", 1))
        try:
            ahead = await store.lane_ahead(lane, record.id, 1000)
        except StoreCorrupted as error:
            # The lane's key damaged (deleted, of another type): the claim holds the run, and
            # a look at it names the damage as it names any damaged item, rather than failing.
            store.faults.note("lane", record.id, named_place(error), error)
            return Hold(f"held: its lane is damaged ({named_place(error)})", 0)
        if len(ahead) >= width:
            return Hold(_lane_words(record, width, ahead), len(ahead))
    for name, capacity, words in _caps(total, record):
        if await store.slots_taken(name, capacity) >= capacity:
            everyone = name == "*"  # the store-wide cap holds every run; a workflow's, its own
            return Hold(f"held by {words}", await _waiting_ahead(store, record, now, everyone))
    rate = limits.get("rate_limit")
    if rate is not None:
        n, window = int(rate[0]), float(rate[1])
        retry_at = await store.rate_retry_at(f"workflow:{record.workflow}", n, window, now)
        if retry_at is not None:
            stamp = _stamp(retry_at)
            limit = f"the rate limit of workflow {record.workflow!r} ({n} per {window:g} s)"
            words = f"held by {limit} until {stamp}"
            return Hold(words, await _waiting_ahead(store, record, now, False), retry_at)
    if record.deployment is not None and not await served(store, record.deployment):
        from wf.engine._deployments import waiting_for_worker

        return Hold(waiting_for_worker(record.deployment))
    return None


async def served(store: Store, deployment: str) -> bool:
    """Whether a live worker drives runs pinned to ``deployment`` (its own, or any)."""
    from wf.engine._deployments import ANY, WORKER_PLACES

    for name in (deployment, ANY):
        if await store.slots_taken("deployment:" + name, WORKER_PLACES):
            return True
    return False


def _stamp(at: float) -> str:
    text = iso_time(at)
    return "a time " + text if text == BEYOND else text


async def _waiting_ahead(store: Store, record: RunRecord, now: float, everyone: bool) -> int:
    """Due runs waiting to start before ``record`` (the queue's order) that the same cap or
    limit holds: every such run (``everyone``) or those of its workflow. Counts up to 1,000."""
    due = await store.due_runs(now, limit=10_000)
    before = due[: due.index(record.id)] if record.id in due else due
    count = 0
    for run_id in before[:1000]:
        try:
            other = await store.get_run(run_id)
        except WFError:
            continue  # gone meanwhile
        if other.status is RunStatus.RUNNING:
            continue  # being driven (or an orphan about to be): not waiting
        if everyone or other.workflow == record.workflow:
            count += 1
    return count
