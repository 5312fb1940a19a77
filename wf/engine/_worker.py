"""The worker: deliver every due run (new, orphaned, woken by timers or messages) until stopped.

It waits on the store's activity signal (file-system events / notifications), on the next
due time and on the next schedule fire time, never polling in a tight loop. Stopping drains:
runs in flight stop at their next durable operation (a running step finishes first) and are
left due for the next worker.

**A bulkhead.** No single item stops it: whatever one run, schedule, hook, lane entry or
store file cannot be read or driven is noted once in the store's ``faults``
(``wf.store._faults``: logged with its id and where it lives, counted in ``faults``), skipped,
and everything else goes on. Each item's work runs inside ``Faults.contain``: each run of the
claim, each schedule's fire, each run the invariant check looks at or repairs, each run a
retention sweep looks at. A drive that raises something other than a wf error (a record the
kernel cannot make sense of) counts as damage too. Only a failure of the store itself (not
reachable, disk full) goes on up.

It also fires due cron schedules (``_schedules.fire_due``, before each look at the queue, so a
fire's run is driven in the same pass) and applies retention in the background
(``_retention.sweep``, a page at a time with pauses, so deliveries never wait on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

from wf._exceptions import (
    LeaseLost,
    LoadError,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    UsageError,
    WFError,
    WorkflowNotFound,
)
from wf._files import too_few_files
from wf._tasks import cancel_within
from wf.engine._aside import STORE_FAILED_RETRY, note_failed
from wf.engine._deployments import WORKER_PLACES, pins_of, worker_slot
from wf.engine._engine import Engine, env_number, require_otel
from wf.engine._firing import Firing
from wf.engine._instruments import poll as _instrument_poll
from wf.engine._invariant import CHECKED_RUN, Stuck, repair, stuck_runs
from wf.engine._queueing import HeldRuns
from wf.engine._watchdog import LoopWatchdog
from wf.store import Faults, RunRecord, Slot
from wf.store._base import WAITING_REPORTED
from wf.store._limits import check_name

log = logging.getLogger("wf.worker")


BUSY_SKIPS = 10
"""A worker busy driving runs puts its background compaction off this many looks in a row."""

CANCEL_GRACE = 5.0
"""Seconds a stopping worker waits, once its drain's grace is over, for the drives it cancelled
to end: one that ignores its cancellation is left running, not waited for."""

LEASE_LOST_RETRY = 1.0
"""Seconds before a run whose lease was lost (``wf.LeaseLost``: a dropped connection), or whose
drive met a dropped connection (``wf.StoreUnavailable``), is tried here again; a store failure
of another kind waits ``STORE_FAILED_RETRY``."""

LEASE_LOST_RETRIES = 3
"""Lost leases in a row after which a run's next one counts as a store failure: a connection
that drops again and again is not a blip (and ``--until-idle`` must end). The run is put
aside for twice ``LEASE_LOST_RETRY``, doubled each time it comes back to lose again, up to
``STORE_FAILED_RETRY``: in a store-wide outage nearly every run driven crosses the line, and
none of them is to blame, so the backlog is not all put aside for the longest pause."""

PUT_ASIDE_KEPT = 10_000
"""Runs whose put-asides in a row a worker remembers, at most."""

OUTAGE_LIMIT = 300.0
"""Seconds a worker goes on trying a store that does not answer its looks at the queue
(``wf.StoreUnavailable``: a dropped or refused connection, a lock timeout) before ``run`` gives
up and raises the failure: a server gone for good is not waited for forever. Its opening of the
store as it starts is given ``START_WAIT``."""

START_WAIT = 10.0
"""Seconds a worker goes on trying to open a store that has not answered once since it started
(``wf.StoreUnavailable``: a refused connection, an address nothing answers, a server still
starting) before ``prepare`` gives up and raises the failure: a mistyped address is said within
seconds, not after the ``OUTAGE_LIMIT`` a store that answered is waited for, while a server
restarting as the worker starts is still waited for. A try that takes longer (a connection
that times out: 10 s by default) ends the wait at its end. ``WF_START_WAIT`` sets it (a
worker started beside a database still initialising: ``WF_START_WAIT=120``)."""

OUTAGE_RETRY = (0.5, 5.0)
"""The first and the longest pause (seconds) between two tries of a store that does not
answer: doubled at each failure in a row."""

BACKGROUND_GRACE = 5.0
"""Seconds a stopping worker waits for its retention and compaction loops to end once
cancelled: a loop stuck in a call that does not end on cancellation is left behind, not
waited for."""


class Worker:
    """Delivers due work of ``engine.store`` with at most ``concurrency`` runs driven at once."""

    def __init__(
        self,
        engine: Engine,
        *,
        concurrency: int = 100,
        poll: float = 2.0,
        on_error: Callable[[str, BaseException], None] | None = None,
        queues: Sequence[str] | None = None,
        check_every: float = 300.0,
        on_repair: Callable[[Stuck], None] | None = None,
        schedules: bool = True,
        retention: bool = True,
        retention_interval: float = 60.0,
        retention_page: int = 100,
        retention_pause: float = 0.05,
        any_deployment: bool = False,
        compact: bool = True,
        compact_after: float = 60.0,
        compact_interval: float = 30.0,
        compact_slice: int = 100,
        compact_pause: float = 0.25,
        outage_limit: float = OUTAGE_LIMIT,
        start_wait: float | None = None,
    ) -> None:
        """``check_every``: seconds between two looks for runs that break the wake-up invariant
        (``wf.engine._invariant``; also one at start); each one found is made due, logged, and
        passed to ``on_repair``. ``any_deployment``: drive runs of every deployment, not only
        those pinned to ``engine.deployment`` (and unpinned ones).

        ``compact``: in the background, have the store make runs that ended more than
        ``compact_after`` seconds ago take less room (``Store.compact``: the local store
        packs them into segment files), ``compact_slice`` runs at a time in a worker
        thread with ``compact_pause`` seconds between slices while there is more, and a look
        every ``compact_interval`` seconds (real time) otherwise; a look while runs are
        being driven here is put off (``_compact_loop``).

        ``outage_limit``: seconds in a row ``run`` goes on trying a store that fails with
        ``wf.StoreUnavailable`` (a dropped or refused connection: logged once, tried again
        after 0.5 s, then up to every 5 s) before it raises that failure. Any other store
        failure (a full disk) is raised at once. ``start_wait``: the same for ``prepare``,
        as it opens a store that has not answered yet (seconds since its first try; default
        ``WF_START_WAIT``, else ``START_WAIT``)."""
        self.engine = engine
        self.deployments = pins_of(engine.deployment, any_deployment=any_deployment)
        if any_deployment:
            engine.any_deployment = True  # the drives of runs it claims, and the process's
        """The pins of the runs served (None: every run; see ``wf.engine._deployments``)."""
        self._place: Slot | None = None
        self.check_every = check_every
        self.on_repair = on_repair
        self.repairs: list[Stuck] = []
        """Every repair this worker made (expected: none)."""
        self._next_check = 0.0
        self._leased_by_check: set[str] = set()
        self.concurrency = concurrency
        engine.want_step_threads(concurrency)  # each run driven here may be in a sync step
        self.queues = [check_name("queue", q) for q in queues] if queues else None
        """Serve only runs of these named queues (None: every run)."""
        self.poll = poll
        self.on_error = on_error
        self.on_timer: Callable[[float, str | None], None] | None = None
        """Told (the timer's due time, the run it wakes if known) when ``run(until_idle=True)``
        has nothing to do now but wait for a timer: once per change of the earliest one
        (``wf worker --until-idle`` says so rather than wait silently); with ``leave_timers``,
        of the earliest timer it returns without waiting for."""
        self.on_abandoned: Callable[[str, int, str, float], None] | None = None
        """Told (the run, the step's operation and name, the grace) of each step still running
        when the stop's grace ran out, instead of the worker's own warning: said once, by
        whoever says it (``wf worker`` in its own words and fields)."""
        self.leave_timers = False
        """With ``run(until_idle=True)``: return once nothing is due now, rather than wait for
        a timer to come (a sleep, a delayed run), which stays for a later worker (``wf worker
        --until-idle --leave-timers``: a cron job draining an old deployment ends although one
        of its runs sleeps for a day)."""
        self._told_timer: float | None = None
        self.schedules = schedules
        """Fire due cron schedules."""
        self.retention = retention
        """Delete finished runs past their retention, in the background."""
        self.retention_interval = retention_interval
        """Seconds (real time) between two background sweeps."""
        self.retention_page = retention_page
        self.retention_pause = retention_pause
        self.compacting = compact
        self.compact_after = compact_after
        self.compact_interval = compact_interval
        self.compact_slice = compact_slice
        self.compact_pause = compact_pause
        self.outage_limit = outage_limit
        self.start_wait = (
            start_wait if start_wait is not None else env_number("WF_START_WAIT", START_WAIT)
        )
        self.compacted = 0
        """Runs this worker's background compaction packed."""
        self.fired_at: float | None = None
        """The earliest next fire time of the store's schedules, as last read."""
        self._schedules_read = -float("inf")
        self._schedules_failing = False
        """The last look at the schedules failed (and that was said)."""
        self._schedule_changes: int | None = None
        """The store's ``schedule_changes`` when this worker last read its schedules."""
        self._watching_since: float | None = None
        """Clock time of this worker's first look at the schedules (in this ``run``): a fire
        missed after it was not missed for want of a running worker."""
        self._firing: Firing | None = None
        """What this worker keeps between its looks at the schedules (backoffs, imports)."""
        self.schedules_read_at: float | None = None
        """The clock's time when the worker last read the schedules (None: not yet)."""
        self.swept = 0
        """Runs deleted by this worker's retention sweeps."""
        self._stop = asyncio.Event()
        self._prepared = False
        self._busy_elsewhere: set[str] = set()
        self._due_elsewhere = False
        """Set by ``_more_to_come``: what keeps an idle worker waiting is due now, and
        driven elsewhere as far as it knows (not a timer)."""
        self._held = HeldRuns()
        """Due runs a group lane, a cap or a rate limit held back when this worker tried them:
        tried again only when their hold may have ended (see ``HeldRuns``)."""
        self._looked_early = False
        self._claimed_all = False
        """The last claim took fewer runs than it had places for: it left nothing startable."""
        self._was_full = False
        """The last look at the queue found no free place (``_start_due``)."""
        self._waiting: set[str] = set()
        """Due runs the last claim left out because their group lane is full (on stores that
        read lanes when claiming): not startable until the lane moves on."""
        self.held_drives = 0
        """Drives that ended held back (each took and gave back the run's lease for nothing)."""
        self._broken: dict[str, float] = {}
        self._lease_lost: dict[str, int] = {}
        """Runs whose last drive here lost its lease, and how many in a row did: due again
        within ``LEASE_LOST_RETRY``, which ``--until-idle`` waits for."""
        self._put_aside: dict[str, int] = {}
        """Runs put aside for losing their lease too often in a row (``LEASE_LOST_RETRIES``),
        and how many times in a row: the pause before the next try doubles each time."""
        self._inflight: set[str] = set()
        self.driven = 0
        self.unloadable: dict[str, BaseException] = {}
        """Runs this worker could not drive because their workflow cannot be imported here
        (``wf.LoadError`` / ``wf.WorkflowNotFound``), with the error."""
        self._store_failed: set[str] = set()
        self._refused: dict[str, int] = {}
        self._warned_files = False
        """Runs a claim skipped for now (``Faults.for_now``), with the failures seen of each."""
        self.abandoned: list[tuple[str, int, str]] = []
        """(run id, op, step name) of the steps still running when the drain's grace ran out:
        abandoned, they run again when their run resumes."""
        self.threads_abandoned = False
        """Whether an abandoned step is a sync one, whose thread runs on (and would hold up
        the interpreter's exit)."""
        self.left_running: list[str] = []
        """Runs whose drive did not end within ``CANCEL_GRACE`` of its cancellation, after the
        drain's grace (a step that swallows ``CancelledError``): the worker stopped without
        them; their tasks run on in the event loop (and would hold up its closing)."""

    @property
    def faults(self) -> Faults:
        """The items skipped as damaged (of the store, shared with its readers): each logged
        once, with its id and where it lives."""
        return self.engine.store.faults

    @property
    def waiting(self) -> frozenset[str]:
        """Due runs the last look at the queue left waiting in their group's lane, on stores
        whose claim reads lanes (``Store.claim``: after a claim that leased nothing, a long
        lane's first ``WAITING_REPORTED`` at least; after others, maybe fewer): they are not
        driven (nor held) until the runs ahead of them end. On other stores such runs are
        driven once and held instead (``held_drives``)."""
        return frozenset(self._waiting)

    def stop(self) -> None:
        """Ask the worker to drain and return from ``run``."""
        self._stop.set()

    async def prepare(self) -> None:
        """Get ready to serve (``run`` does this first, once): open the store (connect, check
        its format, start hearing of changes), build the input validators of every workflow
        declared so far and import what fires schedules, so that the first runs do not pay
        for them. Raises what
        opening the store raises (``wf.StoreUnavailable``: not answering in the ``start_wait``
        seconds since its first try; ``wf.StoreVersionError``; any other ``wf.StoreError`` at
        once), and ``wf.UsageError`` when ``WF_OTEL`` / ``WF_OTEL_METRICS`` ask for
        OpenTelemetry and it is not installed (every drive would fail on it)."""
        if self._prepared:
            return
        # A store that does not answer as the worker starts (a server restarting, a dropped
        # connection) is tried again with the outage's backoff, said once, and once when it
        # answers (a worker started during a restart had exited 3 after three tries); but a
        # store that never answered is given ``start_wait``, not the outage limit: an address
        # nothing answers (mistyped, a black hole) had the worker wait 300 s before it said so.
        outage = _Outage(self.start_wait, starting=True)
        while True:
            try:
                await self._prepare_once()
            except StoreUnavailable as error:
                if self._stop.is_set():
                    raise  # stopped while it waited: the store never answered
                await self._pause(outage.failed(error))
            else:
                outage.over()
                return

    async def _prepare_once(self) -> None:
        require_otel()
        from wf.engine._signature import prepare_validator
        from wf.engine._workflow import declared_workflows

        store = self.engine.store
        await store.open()
        if self.deployments is not None and not store.filters_deployments:
            raise UsageError(
                f"this store cannot serve only the runs of deployment {self.engine.deployment!r}"
                " (it does not filter by deployment): run the worker with --any-deployment"
            )
        for workflow in declared_workflows():
            prepare_validator(workflow.fn)
        if self.schedules:
            # What fires them, imported now rather than on the first pass of ``run``: with
            # the source compiled at import (no cached bytecode), 5 ms of each worker's
            # serving time.
            import wf.engine._schedules  # noqa: F401
        self._prepared = True

    async def run(self, *, until_idle: bool = False, grace: float = 30.0) -> None:
        """Deliver due work until ``stop()`` (or, with ``until_idle``, until nothing is due or
        running and no timer is pending).

        While it waits for a timer it still wakes on store activity (a new run, a payload, a
        cancel that ends the run the timer belonged to) and on ``stop()``.
        """
        await self.prepare()
        files = too_few_files(self.concurrency)
        if files is not None and not self._warned_files:
            self._warned_files = True
            log.warning("%s", files)
        self._watching_since = None
        placed = self._place is not None
        sweeper = (
            asyncio.get_running_loop().create_task(self._retention_loop())
            if self.retention
            else None
        )
        packer = (
            asyncio.get_running_loop().create_task(self._compact_loop())
            if self.compacting
            else None
        )
        engine = self.engine
        outer, engine.held_ahead = engine.held_ahead, self._held.ahead
        # Runs driven here beside the claimed ones (children, parents told of their end)
        # count against this worker's places too.
        bound, engine.max_drivers = engine.max_drivers, self.concurrency
        watchdog = LoopWatchdog(asyncio.get_running_loop())
        watchdog.start()
        try:
            outage = _Outage(self.outage_limit)
            while not self._stop.is_set():
                try:
                    if not placed:
                        # Seen by ``wf deployments`` while it serves; freed by the store if the
                        # process dies. Taken in the loop: a connection that drops as the worker
                        # starts is an outage like any other, waited out.
                        self._place = await self.engine.store.try_slot(
                            worker_slot(self.deployments), WORKER_PLACES
                        )
                        placed = True
                    await self._check_invariant()
                    await self._tick_schedules()
                    started = await self._start_due()
                    idle = until_idle and not started and not self._mine()
                    if idle and not await self._more_to_come():
                        return
                    await self._wait(started, for_others=idle and self._due_elsewhere)
                except StoreUnavailable as error:
                    # A dropped connection, a server refusing connections for now: not the
                    # end of the worker. Said once, tried again with backoff (runs in flight
                    # go on meanwhile), up to ``outage_limit`` seconds in a row.
                    await self._pause(outage.failed(error))
                else:
                    outage.over()
        finally:
            await _end_background(sweeper, packer)
            try:
                await self._drain(grace)
            finally:
                watchdog.stop()
                engine.held_ahead = outer
                engine.max_drivers = bound
                place, self._place = self._place, None
                if place is not None:
                    with contextlib.suppress(WFError):
                        await place.release()

    async def serve(self, *, grace: float = 30.0, retry: float = 5.0) -> None:
        """``run`` until ``stop()``, for a worker that lives inside another program (``wf
        serve``, ``wf dev``): when the store itself fails (what no bulkhead contains: the
        server unreachable, the disk gone), say so and start again after ``retry`` seconds,
        rather than die while the program around it goes on without a worker. A store that
        has not answered yet is waited for as one that went away (``outage_limit``, not
        ``start_wait``): a worker ended at once only to start again said so every 15 s."""
        self.start_wait = max(self.start_wait, self.outage_limit)
        while not self._stop.is_set():
            try:
                await self.run(grace=grace)
            except Exception as error:
                log.error("the worker stopped: %s; starting again in %gs", error, retry)
                await self._pause(retry)

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if ``stop()`` is called meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    async def _check_invariant(self) -> None:
        """At start and every ``check_every`` seconds: repair suspended runs that should be due."""
        now = asyncio.get_running_loop().time()
        if now < self._next_check:
            return
        self._next_check = now + self.check_every
        try:
            self._leased_by_check.clear()
            found = await stuck_runs(self.engine, leased=self._leased_by_check)
        except Exception as error:  # a check that cannot be made is no reason to stop serving
            log.error("could not check for stuck runs: %s", error)
            return
        for stuck in found:
            self.repairs.append(stuck)
            where = self.engine.store.run_location(stuck.run_id)
            with self.faults.contain(CHECKED_RUN, stuck.run_id, where):
                await repair(self.engine, stuck)
            if self.on_repair is not None:
                self.on_repair(stuck)

    # -- schedules and retention (#16) ---------------------------------------------------

    async def _tick_schedules(self) -> None:
        """Fire due schedules: when the earliest known fire time has come, when the store heard
        of a schedule saved or removed (``Store.schedule_changes``: a counter, no I/O), and at
        least every ``poll`` seconds (for changes a store cannot hear of)."""
        if not self.schedules:
            return
        from wf.engine._schedules import fire_due

        loop = asyncio.get_running_loop()
        due = self.fired_at is not None and self.fired_at <= self.engine.clock.now()
        heard = self.engine.store.schedule_changes()
        if (
            not due
            and heard == self._schedule_changes
            and loop.time() - self._schedules_read < self.poll
        ):
            return
        self._schedules_read = loop.time()
        self._schedule_changes = heard
        try:
            now = self.engine.clock.now()
            if self._watching_since is None:
                self._watching_since = now
            if self._firing is None:
                self._firing = Firing()
            self.fired_at = await fire_due(
                self.engine, watching_since=self._watching_since, firing=self._firing
            )
            self.schedules_read_at = now
        except WFError as error:  # the store failed (each schedule's own fault is contained)
            self.fired_at = None
            # Said once while it goes on failing (tried at every look at the queue, as the
            # queue's outage is), and once when it works again.
            if self._schedules_failing:
                log.debug("firing schedules: %s", error)
            else:
                self._schedules_failing = True
                log.error("firing schedules: %s; trying again until it works", error)
        else:
            if self._schedules_failing:
                self._schedules_failing = False
                log.warning("firing schedules works again")

    async def _retention_loop(self) -> None:
        """Sweep now and then, reading only runs a retention this worker knows of can concern:
        every finished run with a store-wide retention; else the finished runs of the
        workflows registered here that declare one (a run carries its workflow's retention,
        and the workers that run a workflow have it registered); with neither, nothing."""
        from wf.engine._retention import sweep
        from wf.engine._workflow import retained_workflows

        await asyncio.sleep(min(1.0, self.retention_interval))
        while not self._stop.is_set():
            everything = self.engine.retention is not None
            for workflow in [None] if everything else retained_workflows():
                try:
                    done = await sweep(
                        self.engine,
                        workflow=workflow,
                        page=self.retention_page,
                        pause=self.retention_pause,
                    )
                except Exception as error:  # retention waits for the next sweep; work goes on
                    # A damaged run is contained by the sweep (named, kept). What else fails
                    # stops this workflow's sweep alone, said with its workflow; the store
                    # failing (not damage) stops them all: each would fail as this one did.
                    whose = "" if workflow is None else f" to the runs of {workflow}"
                    said = error if isinstance(error, WFError) else repr(error)
                    log.error("applying retention%s: %s", whose, said)
                    if isinstance(error, StoreError) and not isinstance(error, StoreCorrupted):
                        break
                    continue
                self.swept += len(done.deleted)
                if done.deleted:
                    log.info("retention deleted %d finished run(s)", len(done.deleted))
            await asyncio.sleep(self.retention_interval)

    async def _compact_loop(self) -> None:
        """Compact finished runs now and then, a slice at a time (see ``__init__``).

        A look while this worker drives runs is put off, up to ``BUSY_SKIPS`` times in a row:
        compaction is never urgent, and it shares the process (its thread holds the GIL while
        it reads and compresses) with the drain."""
        skipped = 0
        said: str | None = None
        await asyncio.sleep(self.compact_interval)
        while not self._stop.is_set():
            if self._mine() and skipped < BUSY_SKIPS:
                skipped += 1
                await asyncio.sleep(self.compact_interval)
                continue
            skipped = 0
            try:
                done = await self.engine.store.compact(
                    now=self.engine.clock.now(),
                    older_than=self.compact_after,
                    limit=self.compact_slice,
                )
            except Exception as error:  # compaction waits for the next look; work goes on
                # Said once while it lasts (a full disk would say it every look), and again
                # if it changes or comes back after a look that worked.
                if str(error) != said:
                    log.error("compacting finished runs: %s", error)
                said = str(error)
                done = 0
            else:
                said = None
            self.compacted += done
            more = done >= self.compact_slice
            await asyncio.sleep(self.compact_pause if more else self.compact_interval)

    async def _more_to_come(self) -> bool:
        """For ``--until-idle``, with nothing driven here: whether anything can still happen
        without the outside world (a due run to start, a run driven elsewhere to end, a timer,
        a rate limit's end, a cap's place to free)."""
        engine = self.engine
        now = engine.clock.now()
        self._due_elsewhere = False
        if self.schedules and self.fired_at is not None and self.fired_at <= now:
            return True  # a schedule still due (a catch-up of many fires): fire it first
        next_due = await engine.store.next_due_at(queues=self.queues)
        if next_due is None:
            return False
        if self.deployments is not None and not await engine.store.due_runs(
            math.inf, limit=1, queues=self.queues, deployments=self.deployments
        ):
            return False  # what is queued is pinned to other deployments: not ours to wait for
        if next_due > now:
            if self.leave_timers:
                await self._tell_timer(next_due)  # the one it leaves
                return False
            await self._tell_timer(next_due)
            return True
        if await self._anything_startable():
            # Due now and not startable here yet: driven elsewhere (found leased by a claim, or
            # on PostgreSQL still due while another worker drives it, so that an orphan is
            # taken over). Wait for its end, then look again: a lease a claim found may have
            # been another worker's brief try of a run that a cap or lane then held back, and
            # that worker may be stopping too; leaving now would leave that run to nobody.
            self._due_elsewhere = True
            return True
        # Everything due cannot be loaded here, or is held back. A rate limit ends by itself; a
        # timer (a delayed run at the head of a lane, a sleeping run) comes due by itself; a
        # cap's places are held by drives, whose ends free them: wait for them, hearing the
        # store meanwhile. A lane whose head waits for the outside world (a hook, a message)
        # does not move by itself: stop.
        if self._held.retry_ats() or await self._recheck_held():
            return True
        if self._held.capped():
            self._due_elsewhere = True
            return True
        if self.leave_timers:
            return False  # what comes due later is left for a later worker
        return await engine.store.next_due_at(after=now, queues=self.queues) is not None

    async def _tell_timer(self, due: float) -> None:
        """``on_timer``, once per earliest timer an idle worker waits for."""
        if self.on_timer is None or due == self._told_timer:
            return
        self._told_timer = due
        runs = await self.engine.store.due_runs(
            due, limit=1, queues=self.queues, deployments=self.deployments
        )
        self.on_timer(due, runs[0] if runs else None)

    async def _anything_startable(self) -> bool:
        """Whether a due run is neither held back here, broken here, nor waiting for its turn
        (it may be leased elsewhere: ``_busy_elsewhere`` is what the last claim found)."""
        now = self.engine.clock.now()
        damaged = self.faults.of_kind("run")
        for run_id in await self._due_runs(now, WAITING_REPORTED):
            if (
                run_id not in self._held
                and run_id not in damaged
                and run_id not in self._waiting
                and (self._broken.get(run_id, 0.0) <= now or run_id in self._lease_lost)
            ):
                return True
        return False

    def _pinned(self) -> dict[str, Any]:
        """The ``deployments`` argument of a claim, if this worker serves only some (a store
        that does not filter is never asked: see ``prepare``)."""
        return {} if self.deployments is None else {"deployments": self.deployments}

    async def _due_runs(self, now: float, limit: int) -> list[str]:
        """The due runs this worker serves (its queues and deployments)."""
        return await self.engine.store.due_runs(now, limit, self.queues, **self._pinned())

    def _mine(self) -> list[asyncio.Task[RunRecord | None]]:
        return [t for t in self.engine.drivers.values() if not t.done()]

    async def _start_due(self) -> int:
        engine = self.engine
        if engine.instruments:
            await _instrument_poll(engine.instruments, engine)
        free = self.concurrency - len(self._mine())
        self._was_full = free <= 0
        if free <= 0:
            return 0
        # The free places are this look's until its runs are driven: a child run started
        # meanwhile beside its parent would take one of them (``Engine.room_to_drive``).
        engine.claiming += free
        try:
            return await self._claim_due(free)
        finally:
            engine.claiming -= free

    async def _claim_due(self, free: int) -> int:
        """Claim up to ``free`` due runs and drive them; how many were claimed."""
        engine = self.engine
        # Held runs whose hold has ended go first, in the queue's order: a run that a cap held
        # keeps its turn over runs behind it that were never tried.
        await self._recheck_held()
        now = engine.clock.now()
        # Runs driven here, or whose outcome has not been looked at yet, or broken for now:
        # the claim does not take them. Every other run it returns is leased already (one
        # batch of round trips for all of them, on stores that can), and is driven with it.
        exclude = set(engine.drivers) | self._inflight | self._busy_elsewhere
        exclude.update(run_id for run_id, until in self._broken.items() if until > now)
        exclude.update(self._damaged())
        if len(self._held):
            # Held runs are tried again only when a look at what holds them allows it, in the
            # queue's order (``HeldRuns.take``); the others are left out of the claim.
            limit = free + len(self._busy_elsewhere) + len(self._held) + 10
            due = await self._due_runs(now, limit)
            if len(due) < limit:
                self._held.keep_only(set(due))  # every due run is in ``due``: the rest ended
            for run_id in due:
                if run_id in self._held and not self._held.take(run_id):
                    exclude.add(run_id)
        # Runs found held by another driver join ``_busy_elsewhere`` (looked at again after
        # the next wait), as a failed drive of theirs did before claims.
        self._waiting.clear()
        leases = await engine.store.claim(
            now,
            free,
            queues=self.queues,
            exclude=exclude,
            held=self._busy_elsewhere,
            waiting=self._waiting,
            **self._pinned(),
        )
        self._claimed_all = len(leases) < free
        for lease in leases:
            run_id = lease.run_id
            engine.holds.pop(run_id, None)  # set again by the driver if held again
            # Its drive asks for cap places after the runs claimed before it (the queue's
            # order), however long their drives take to read them.
            engine.admission_order.queue(run_id)
            task = engine.drive_soon(run_id, lease=lease)
            self._inflight.add(run_id)
            task.add_done_callback(functools.partial(self._done, run_id))
        return len(leases)

    def _damaged(self) -> set[str]:
        """Runs skipped as damaged (by the claim, or by a drive of this worker): left alone,
        and ``--until-idle`` does not wait for them. A run whose files refused the claim for
        now (``EACCES``, ``EIO``: noted ``again``) is tried again ``STORE_FAILED_RETRY`` after
        each failure instead."""
        damaged = self.faults.of_kind("run")
        for_now = self.faults.for_now("run")
        now = self.engine.clock.now()
        for run_id in for_now:
            tries = self.faults.tries("run", run_id)
            if self._refused.get(run_id) != tries:
                self._refused[run_id] = tries
                self._broken[run_id] = now + STORE_FAILED_RETRY
        for run_id in set(self._refused) - for_now:
            del self._refused[run_id]  # read since
        for run_id in damaged - for_now - self._store_failed:
            self._broken[run_id] = math.inf
            self._store_failed.add(run_id)
        return damaged - for_now

    def _done(self, run_id: str, task: asyncio.Task[RunRecord | None]) -> None:
        self._inflight.discard(run_id)
        self.engine.admission_order.passed(run_id)  # a drive that ended before it asked
        lost = self._lease_lost.pop(run_id, 0)
        if task.cancelled():
            return
        error = task.exception()
        note_failed(self.engine, run_id, error)  # a result() here drives it no sooner either
        if error is not None and not isinstance(error, Exception):
            # Neither the run's doing (``_no_exit`` makes a BaseException of the workflow's
            # code its failure) nor damage: the drive itself was torn down, as a dying process
            # ends it (``TestEngine.crash`` fences the crashed driver's writes so, and a drive
            # cancelled while it suspends goes on to write). The run stays due for the next
            # driver, this worker's after ``LEASE_LOST_RETRY``: noted as damage, it was set
            # aside for good by every worker sharing the store's faults.
            self._broken[run_id] = self.engine.clock.now() + LEASE_LOST_RETRY
            log.warning("run %s: its drive was torn down (%r); driven again", run_id, error)
            return
        if isinstance(error, LeaseLost | StoreUnavailable) and lost < LEASE_LOST_RETRIES:
            # The hold ended (a dropped connection, a takeover), or a connection dropped under
            # a write (which may or may not have landed: the journal says, and the next drive
            # replays it), not the run: it is due again at once, for whichever worker takes it
            # first, this one included.
            self._broken[run_id] = self.engine.clock.now() + LEASE_LOST_RETRY
            self._lease_lost[run_id] = lost + 1
            if self.on_error is not None:
                self.on_error(run_id, error)
            else:
                log.warning("run %s: %s (driven again)", run_id, error)
            return
        aside = self._put_aside.pop(run_id, 0)
        if error is not None:
            # A run whose workflow cannot be loaded (or a store error) is retried later, not
            # in a tight loop; the error is reported once per attempt. Damage does not heal
            # by itself: a damaged run is reported once and left alone by this worker.
            damaged = isinstance(error, StoreCorrupted) or not isinstance(error, WFError)
            later = math.inf if damaged else STORE_FAILED_RETRY
            if isinstance(error, LeaseLost | StoreUnavailable):
                if len(self._put_aside) < PUT_ASIDE_KEPT:  # runs that ended elsewhere stay
                    self._put_aside[run_id] = aside + 1
                later = min(STORE_FAILED_RETRY, LEASE_LOST_RETRY * 2 ** (aside + 1))
            self._broken[run_id] = self.engine.clock.now() + later
            if isinstance(error, LoadError | WorkflowNotFound):
                self.unloadable[run_id] = error
            if isinstance(error, StoreError) or damaged:
                self._store_failed.add(run_id)
            if damaged:
                self.faults.note("run", run_id, self.engine.store.run_location(run_id), error)
            if self.on_error is not None:
                self.on_error(run_id, error)
            elif damaged:
                log.debug("run %s", run_id, exc_info=error)  # said once by ``note``
            elif isinstance(error, WFError):
                log.error("run %s: %s", run_id, error)
            else:
                log.error("run %s", run_id, exc_info=error)
        elif task.result() is None:
            hold = self.engine.holds.get(run_id)
            if hold is not None:
                self._held.add(run_id, hold)
                self.held_drives += 1
            elif run_id not in self._leased_by_check:  # not the invariant check's brief look
                self._busy_elsewhere.add(run_id)
        else:
            self.unloadable.pop(run_id, None)
            self._store_failed.discard(run_id)
            self.driven += 1

    async def _wait(self, started: int, *, for_others: bool = False) -> None:
        """Until something may be startable here. ``for_others``: with ``--until-idle``,
        nothing is driven here and what is due is driven elsewhere; those runs' ends are what
        this worker waits for, to stop then rather than at the next poll."""
        engine = self.engine
        if started and not self._claimed_all:
            # The claim filled what it was asked for: there may be more to take at once.
            self._looked_early = False
            await asyncio.sleep(0)
            return
        # Nothing started, or everything startable was (the claim took fewer than it could):
        # what changes after its look at the queue is announced, so wait for that.
        if (
            not self._looked_early
            and len(self._mine()) < self.concurrency
            and await self._recheck_held()
        ):
            # A held run may start now: its hold ended before this worker could hear of it.
            # Once: if the look at the queue starts nothing, this worker waits.
            self._looked_early = True
            await asyncio.sleep(0)
            return
        self._looked_early = False
        now = engine.clock.now()
        if self.schedules and self.fired_at is not None and self.fired_at <= now:
            # A fire came due since the last look (or a catch-up goes on, a slice a pass):
            # fire it now, not after a poll, once the loop had its turn (runs, signals, stop).
            await asyncio.sleep(0)
            return
        mine = self._mine()
        if len(mine) >= self.concurrency:
            # No free place: nothing the store announces (a new run, a message, another
            # process's run ending) could start here before one of our own runs ends. Waking
            # for it would cost every full worker a look at the queue for each announcement of
            # every other worker; so wait for our runs (and the poll, for schedules).
            await self._wait_full(mine, now)
            return
        # The next timer, even while runs that cannot start here are due now (held back, or
        # driven elsewhere): a delayed run at the head of a lane must start when it is due.
        next_due = await engine.store.next_due_at(after=now, queues=self.queues)
        mine = self._mine()
        if self._was_full and len(mine) < self.concurrency:
            # Places freed since the look that found none (runs ending while the next due
            # time was read): look again now, not when the store next wakes this worker.
            return
        # A rate limit says when it lets a held run start: look again then.
        retry_ats = self._held.retry_ats()
        if retry_ats:
            next_due = min(retry_ats) if next_due is None else min(next_due, *retry_ats)
        if self.schedules and engine.store.schedule_changes() != self._schedule_changes:
            # A schedule changed after this pass's look at the schedules: its announcement
            # came while the queue was read, and that read took the store's wake-up for
            # itself (the wait below would sleep through it, up to the poll). Look again now.
            # Nothing is awaited from here to the wait: an announcement after this check
            # finds the queue's read stale and ends the wait at once.
            return
        if self._held.returns_unheard(engine.store.rate_returns()):
            # The same for a start of a rate limit that holds a run here, taken back after
            # this pass's look at its held runs: the next look reads the limit again.
            return
        timeout = self.poll
        waiters: list[asyncio.Future[Any]] = [
            # A run ending elsewhere makes nothing startable, so ``wait_for_activity`` need
            # not hear of it (on PostgreSQL it does not: nobody pays to announce every end).
            # (Hearing of every change costs the other workers: they announce their runs'
            # steps and ends while anyone listens, on PostgreSQL for the rest of this
            # process's life once it started to. So only when what is due is theirs.)
            asyncio.ensure_future(
                engine.store.wait_for_change(timeout)
                if for_others
                else engine.store.wait_for_activity(timeout)
            ),
            asyncio.ensure_future(self._stop.wait()),
        ]
        if mine:
            waiters.append(
                asyncio.ensure_future(asyncio.wait(mine, return_when=asyncio.FIRST_COMPLETED))
            )
        if next_due is not None and next_due > now:
            waiters.append(asyncio.ensure_future(engine.clock.sleep_until(next_due)))
        if self.schedules and self.fired_at is not None and self.fired_at > now:
            # The next fire time is a timer like any other: no polling for schedules.
            waiters.append(asyncio.ensure_future(engine.clock.sleep_until(self.fired_at)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        # Runs another process was driving may have been released meanwhile: look again (and
        # the next look at the queue rechecks the held runs).
        self._busy_elsewhere.clear()

    async def _wait_full(self, mine: list[asyncio.Task[RunRecord | None]], now: float) -> None:
        """``_wait`` with every place taken: until one of our runs ends, ``stop()``, the next
        schedule fire or ``poll`` seconds (schedules added elsewhere, the invariant check)."""
        waiters: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(asyncio.wait(mine, return_when=asyncio.FIRST_COMPLETED)),
            asyncio.ensure_future(asyncio.sleep(self.poll)),
            asyncio.ensure_future(self._stop.wait()),
        ]
        if self.schedules and self.fired_at is not None and self.fired_at > now:
            waiters.append(asyncio.ensure_future(self.engine.clock.sleep_until(self.fired_at)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        self._busy_elsewhere.clear()

    async def _recheck_held(self) -> bool:
        """Whether a held run may be tried again now (read-only looks: no lease is taken)."""
        if not len(self._held):
            return False
        return await self._held.recheck(self.engine.store, self.engine.clock.now())

    async def undriven(self) -> list[str]:
        """Runs this worker could not drive because the store failed (a full disk, an I/O
        error, damage) and that are still not finished: ``--until-idle`` must not report
        success while they stay due."""
        # Damage the last claim passed over counts too (on stores whose claim reads the runs
        # it meets: local, Redis), not only once a further claim has taken it in: else the
        # exit said 0 for a store whose one due run is damaged, and 1 with another run beside.
        self._damaged()
        left = []
        for run_id in sorted(self._store_failed | self.faults.for_now("run")):
            try:
                record = await self.engine.store.get_run(run_id)
            except WFError:
                left.append(run_id)  # cannot even be read: certainly not driven
                continue
            if not record.status.is_terminal:
                left.append(run_id)
        return left

    async def _drain(self, grace: float) -> None:
        mine = self._mine()
        if not mine:
            return
        # Drivers still taking their lease see the flag and leave their run due; the live ones
        # are evicted (running steps finish, then the coroutine is dropped).
        was_draining, self.engine.draining = self.engine.draining, True
        try:
            for ctx in list(self.engine.live.values()):
                ctx.evict()
            _done, pending = await asyncio.wait(mine, timeout=grace)
            if pending:
                # The grace is over: steps still running are abandoned (async ones cancelled;
                # a sync step's thread runs on, its result unrecorded). Their runs stay due and
                # the steps run again when the runs resume. Say which.
                live = list(self.engine.live.values())
                self.abandoned = [
                    (ctx.run_id, op, name)
                    for ctx in live
                    for op, name in sorted(ctx.running_steps.items())
                ]
                self.threads_abandoned = any(
                    op not in ctx.step_tasks for ctx in live for op in ctx.running_steps
                )
                for run_id, op, name in self.abandoned:
                    if self.on_abandoned is not None:
                        self.on_abandoned(run_id, op, name, grace)
                        continue
                    log.warning(
                        "grace of %gs over: abandoned step %r (operation #%d) of run %s; "
                        "it runs again when the run resumes",
                        grace,
                        name,
                        op,
                        run_id,
                    )
            self.left_running = await abandon_drives(self.engine, pending)
            for run_id in self.left_running:
                log.error(
                    "run %s did not stop when cancelled (a step that catches "
                    "CancelledError and goes on?): left running, unrecorded",
                    run_id,
                )
        finally:
            self.engine.draining = was_draining  # an outer drain (wf dev's reload) goes on


async def abandon_drives(engine: Engine, drives: Collection[asyncio.Task[Any]]) -> list[str]:
    """Cancel ``drives`` (tasks of ``engine.drivers``) and wait ``CANCEL_GRACE`` for them: the
    runs whose drive still runs then (a step that swallows its ``CancelledError``), sorted."""
    stuck = await cancel_within(drives, CANCEL_GRACE)
    return sorted(run_id for run_id, task in engine.drivers.items() if task in stuck)


async def _end_background(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the worker's background loops and wait for them, within ``BACKGROUND_GRACE``."""
    # The drain still runs if this wait is cancelled: the worker is stopping either way.
    with contextlib.suppress(BaseException):
        late = await cancel_within([t for t in tasks if t is not None], BACKGROUND_GRACE)
        for task in late:
            log.error("a background task of the worker did not end when stopped: %s", task)


class _Outage:
    """Failures in a row of a worker's looks at the queue (or, ``starting``, of its opening of
    the store) with ``wf.StoreUnavailable``."""

    def __init__(self, limit: float, *, starting: bool = False) -> None:
        self.limit = limit
        self.starting = starting
        self.since: float | None = None
        self.pause = OUTAGE_RETRY[0]
        if starting:  # counted from the first try: one that times out takes 10 s itself
            self.since = asyncio.get_running_loop().time()
        self.said = False

    def failed(self, error: StoreUnavailable) -> float:
        """Seconds to wait before the next try (never past the limit); raises ``error`` once
        the store has failed for ``limit`` seconds in a row (real time: the store's outage
        is)."""
        now = asyncio.get_running_loop().time()
        if self.since is None:
            self.since = now
        if now - self.since >= self.limit:
            if self.starting:
                why = (
                    f"refused for the {self.limit:g}s"
                    if error._refused
                    else f"no answer in the {self.limit:g}s"
                )
                ended = StoreUnavailable(f"{error} ({why} since the worker started)")
                ended._refused = error._refused
                raise ended from error
            log.error("the store has failed for %gs in a row: the worker stops", self.limit)
            raise error
        if not self.said:
            self.said = True
            if self.starting and error._refused:
                # It answered: it refused what the worker asked (a replica, a standby, out
                # of memory), in the server's words.
                starting = "the store refuses the worker's commands as it starts"
            elif self.starting:
                starting = "the store does not answer as the worker starts"
            else:
                starting = "the store failed"
            log.error(
                "%s: %s; trying again until it %s (for up to %gs)",
                starting,
                error,
                "takes them" if self.starting and error._refused else "answers",
                self.limit,
            )
        pause, self.pause = self.pause, min(self.pause * 2, OUTAGE_RETRY[1])
        return min(pause, self.since + self.limit - now)

    def over(self) -> None:
        """A look at the queue succeeded: the store answers again."""
        if self.said and self.since is not None:
            took = asyncio.get_running_loop().time() - self.since
            log.warning("the store answers again (after %.1fs)", took)
        self.since = None
        self.said = False
        self.pause = OUTAGE_RETRY[0]
