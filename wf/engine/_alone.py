"""Driving a suspect run alone, so that a run that kills its process cannot take the runs
beside it down with it.

A process death cannot be pinned on one run: every run the process was driving sees a drive
that died without progress, and counts it (``wf.engine._recovery``). A run that ends its
process on every drive (``os._exit`` in a step, an out-of-memory kill) would then take the runs
claimed beside it to ``max_recoveries`` too, and fail them with ``wf.RunStalled``. So a run
whose drivers died in it ``SUSPECT_DEATHS`` times in a row is driven alone: its drive waits
until no other drive of this process is in the workflow's code, and others wait while it
runs. Deaths while it is alone are its own; the others go on once it has passed.

It suspends at its first wait, however short (``RunContext.alone``), where an ordinary drive
holds on to a timer within ``suspend_after``: holding on alone would keep every other drive
of the process waiting (up to ``suspend_after``, 30 s by default, each time) while no code of
the suspect runs. A suspension is cheap and a suspect rare, and it is simpler than letting
the others in while the suspect waits and taking the gate back when it resumes (which would
wait for them all again, and count a death meanwhile against every run in it). Its
``run_suspended`` is progress (``wf.engine._recovery``): it passed alone the code its drivers
died in, and its next drive runs beside the others, as any drive after progress does.

One death in a row (a deploy's SIGKILL, an out-of-memory kill of the whole worker) does not
make a run suspect: recovering a worker's runs after one crash keeps its concurrency.

Nor does a drive that ended because its lease or its connection was lost (``wf.LeaseLost``,
``wf.StoreUnavailable``): it leaves a journal that reads as a death (it cannot write once its
lease is gone), but the process saw it end. The gate remembers those drives (``cut``), and
their next drive here does not count them (``deaths``): a store outage that cuts every drive
again and again would otherwise make every run suspect, each driven alone behind the others,
and fail them with ``wf.RunStalled``.

Nor, for the same reason, does that drive make the run one "whose last driver died" here
(``last_driver_died``): its record still says running, as a dead driver leaves it, but the
process saw the drive end.

**Apart.** A process that must outlive the runs it drives (``wf serve``, whose API goes down
with it) goes further: it sets ``Engine.drive_apart``, and every run whose last driver died
(``last_driver_died``) is handed to it instead of being driven in the process, which then
drives it in a process of its own. Each driver says, before it drives such a run again, which
run it is, where its drivers died and how many times (``recovered_line``): once per drive,
where the run is driven (``wf serve`` says it with the child's pid; its child says nothing
more: ``Engine.said_elsewhere``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from wf.engine._recovery import Recoveries
from wf.store import RunRecord, RunStatus

log = logging.getLogger("wf.worker")

SUSPECT_DEATHS = 2
"""Deaths in a row after which a run is driven alone (fewer if ``max_recoveries`` is lower)."""

CUT_KEPT = 10_000
"""Runs whose cut drives a process remembers, at most (the oldest are forgotten)."""

ALONE_WAIT = 60.0
"""Seconds a suspect run waits for the other drives of its process to end before it runs
beside them after all (a hung sync step must not stop it for good)."""


def is_suspect(deaths: int, max_recoveries: int) -> bool:
    """Whether a run whose drivers died ``deaths`` times in a row is driven alone: before its
    last allowed death, so the deaths that fail it are its own."""
    return deaths >= max(1, min(SUSPECT_DEATHS, max_recoveries - 1))


START_GRACE = 5.0
"""Seconds after its creation during which a run created to be driven at once, with nothing
in its journal after ``run_started``, is taken for one its creator has not taken yet
(``last_driver_died``), not one whose driver died."""


def last_driver_died(
    record: RunRecord, dead: Recoveries, *, fresh: bool, cut: bool, events: int, now: float
) -> bool:
    """Whether the last drive of ``record`` (read under its lease) ended with its process.

    The journal counts most deaths (``dead``), not all: the first drive of a run in the
    process that created it leaves no mark before its first step, and a later step's start
    need not be durable before the step runs. The record says more: a run recorded as
    running that nobody drives (its lease is ours now) was left by a driver that did not
    finish: it died, or (on a shared store) lost its lease. ``fresh``: this process created
    the run and drives it for the first time (running, but no drive of it began yet).
    ``cut``: its last drive here ended with its lease or connection lost (``DriveGate.cut``),
    which left it running too: that drive did not die.

    Nor did a drive die that never began: a run another process created to drive at once is
    running and due from its creation on, and a claim may take its lease before its creator
    does (``START_GRACE`` after creation, with ``events``, the journal's length, still 1). Its
    creator then finds the run taken and leaves it to this driver. A creator that did die in
    that first drive, within the grace, goes unsaid; its death was not counted either."""
    if dead.count > 0:
        return True
    if record.status is not RunStatus.RUNNING or fresh or cut:
        return False
    return events > 1 or now - record.created_at >= START_GRACE


def recovered_line(
    record: RunRecord, dead: Recoveries, limit: int, *, how: str, unseen: bool = False
) -> str:
    """The line a driver logs before it drives a run whose last driver died: the run, its
    workflow, the step(s) that driver died in when the journal says, the deaths in a row, and
    ``how`` it is driven now (``again``; ``in a process of its own, pid 4242``). ``unseen``:
    a run within ``START_GRACE`` whose creator's first drive left no trace."""
    if unseen:
        return (
            f"run {record.id} ({record.workflow}): its creator has not driven it, or died "
            f"in its first drive; driving it {how} (death limit {limit})"
        )
    count = max(dead.count, 1)  # an uncounted death (see ``last_driver_died``) is still one
    steps = [str(step.get("name")) for step in dead.steps[-1]] if dead.count else []
    where = f" during step {', '.join(repr(name) for name in steps)}" if steps else ""
    whose = "its last driver" if count == 1 else f"its last {count} drivers"
    return (
        f"run {record.id} ({record.workflow}): {whose} died{where}; driving it {how} "
        f"(death limit {limit})"
    )


class DriveGate:
    """The drives of one process: shared by ordinary drives, taken alone by a suspect's."""

    def __init__(self) -> None:
        self._drives = 0
        self._alone = False
        self._waiting = 0
        """Suspects waiting to drive alone: ordinary drives wait behind them."""
        self._changed: asyncio.Event | None = None
        self._cut: collections.OrderedDict[str, int] = collections.OrderedDict()
        """Runs whose last drives here ended with their lease or connection lost, or that the
        store stopped unnoted (``failed``): how many."""
        self._unnoted: dict[str, list[tuple[int, str | None, str]]] = {}
        """Runs whose drives the store stopped here, unnoted: where each began, its token, the
        error."""

    def cut(self, run_id: str) -> None:
        """A drive of ``run_id`` here ended with its lease or its connection lost."""
        self._cut[run_id] = self._cut.pop(run_id, 0) + 1
        while len(self._cut) > CUT_KEPT:
            forgotten, _ = self._cut.popitem(last=False)
            self._unnoted.pop(forgotten, None)

    def failed(self, run_id: str, began: int, drive: str | None, error: str) -> None:
        """The store stopped a drive of ``run_id`` here (the drive that began at journal
        position ``began``, with the token ``drive`` in its markers, if it wrote any) and could
        not take the note that says so (``drive_failed``): not counted here, and noted by the
        next drive of the run here (``unnoted``)."""
        self.cut(run_id)
        if run_id in self._cut:
            self._unnoted.setdefault(run_id, []).append((began, drive, error))

    def unnoted(self, run_id: str) -> list[tuple[int, str | None, str]]:
        """The drives of ``run_id`` the store stopped here whose note is still to be written:
        where each began, its token, and the store's error."""
        return self._unnoted.get(run_id, [])

    def noted(self, run_id: str) -> None:
        """The notes ``unnoted`` gave are written: the journal no longer counts those drives."""
        notes = self._unnoted.pop(run_id, [])
        left = self._cut.get(run_id, 0) - len(notes)
        if left > 0:
            self._cut[run_id] = left
        else:
            self._cut.pop(run_id, None)

    def ended(self, run_id: str) -> None:
        """A drive of ``run_id`` here ended otherwise (what it did is in the journal)."""
        self._cut.pop(run_id, None)
        self._unnoted.pop(run_id, None)

    def was_cut(self, run_id: str) -> bool:
        """Whether the last drive of ``run_id`` here ended with its lease or connection lost."""
        return run_id in self._cut

    def deaths(self, run_id: str, counted: int) -> int:
        """Of ``counted`` drives in a row the journal reads as deaths, those that were not
        drives here that ended with a lost lease (each drive counted at most once)."""
        return max(0, counted - self._cut.get(run_id, 0))

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _until(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``ready()``; False if ``timeout`` seconds passed first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not ready():
            if deadline is not None and deadline <= loop.time():
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await self._event().wait()
        return True

    async def enter(self) -> None:
        """An ordinary drive begins: at once, unless a suspect drives alone (or waits to)."""
        if self._alone or self._waiting:
            await self._until(lambda: not self._alone and not self._waiting, None)
        self._drives += 1

    def leave(self) -> None:
        """An ordinary drive ended."""
        self._drives -= 1
        if self._waiting and not self._drives:
            self._notify()

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        """An ordinary drive, as a context (``enter``, then ``leave``)."""
        await self.enter()
        try:
            yield
        finally:
            self.leave()

    @contextlib.asynccontextmanager
    async def alone(self, run_id: str) -> AsyncIterator[None]:
        """A suspect's drive: waits (at most ``ALONE_WAIT``) for the other drives to end."""
        self._waiting += 1
        try:
            alone = await self._until(lambda: not self._drives and not self._alone, ALONE_WAIT)
        finally:
            self._waiting -= 1
            self._notify()  # ordinary drives waited behind it
        if not alone:
            log.warning(
                "run %s: driven beside other runs after all: they did not end within %g s",
                run_id,
                ALONE_WAIT,
            )
            async with self.shared():
                yield
            return
        self._alone = True
        try:
            yield
        finally:
            self._alone = False
            self._notify()
