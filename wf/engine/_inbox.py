"""A run's inbox: messages posted by other runs and processes, turned into journal events.

``cancel`` and ``wake`` are the kernel's own; every other kind belongs to a feature (hooks,
child runs), whose handler the run's engine knows (``engine.features.messages``, see
``wf.engine._features``), so the kernel does not import its features.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from wf._exceptions import LeaseLost, StoreCorrupted, StoreError, StoreVersionError
from wf.engine._instruments import message as _instrument_message
from wf.store import InboxMessage, RunStatus

if TYPE_CHECKING:
    from wf.engine._context import RunContext
    from wf.engine._enginelike import EngineLike
    from wf.store import Store

log = logging.getLogger("wf")

RETRY_CAP = 5.0
"""The longest pause (seconds) between two looks at an inbox whose reads fail for now (the
first is ``engine.inbox_poll``, doubled at each failure in a row), unless ``inbox_poll`` is
longer."""


async def apply_messages(
    ctx: RunContext, messages: list[InboxMessage], *, live: bool, ack: bool = True
) -> None:
    """Turn inbox messages into journal events (once each), then acknowledge them (unless
    ``ack`` is False: the caller does, once it can, ``wf.engine._driver``'s drive start)."""
    if not messages:
        return
    if live and (ctx.suspending or ctx.evicting or ctx.closed):
        # The workflow coroutine is going away and could not see the message: leave it in
        # the inbox, where it keeps the run due for its next driver.
        return
    for message in messages:
        if message.id in ctx.applied_messages:
            continue
        ctx.applied_messages.add(message.id)
        if ctx.observers:
            _instrument_message(ctx.observers, message)
        if message.kind == "cancel":
            ctx.record.cancel_requested = True
            # In the stored record by the time the message leaves the inbox: listings read
            # records (``wf runs``), and the run's next save may be a long sync step away.
            # Carried by the event's write where the store can, else saved first. (A run not
            # running yet has it saved by its drive's start, just after.)
            running = ctx.record.status is RunStatus.RUNNING and not ctx.closed
            if running and not ctx.lease.save_soon(ctx.record.copy()):
                try:
                    await ctx.lease.save(ctx.record)
                except BaseException:
                    # Not applied: the message stays in the inbox, and the poller's next look
                    # (after a store failure) or the run's next driver takes it in again.
                    ctx.applied_messages.discard(message.id)
                    raise
            await ctx.write(ctx.event("cancel_requested", message=message.id))
            ctx.fire()
        elif message.kind == "wake":
            woken = ctx.event("wake_requested", message=message.id)
            ctx.note_wake(await ctx.write(woken), woken)
            if live and not ctx.resolve_waits(lambda w: w.kind == "sleep"):
                # No sleep now (a step is running): the wake is not dropped, the run's next
                # sleep ends at once (it records a deadline of now, so replay agrees).
                ctx.wake_pending = True
        else:
            handler = ctx.engine.features.messages.get(message.kind)
            if handler is None:
                log.warning(
                    "run %s: ignoring inbox message of unknown kind %r", ctx.run_id, message.kind
                )
            else:
                await handler(ctx, message, live)
    if live and (ctx.suspending or ctx.evicting):
        # The run began to suspend while these were being recorded: their effect is in the
        # journal but no wait saw it. The driver makes the run due again (``unmet``).
        ctx.due_at_once = True
    if ack:
        await ctx.lease.ack_inbox([m.id for m in messages])


class InboxNews:
    """A run's inbox watched from before its driver's first read of it until the run's
    ``InboxPoller`` takes the watch over: a post that lands between that read and the
    poller's start (while the drive records its start) is then looked for at once, not at
    the first poll, a second later. The store's reads are as fresh as the read they follow:
    a claim that read the inbox ahead reads it again on news of a post since
    (``Lease.read_inbox``)."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.heard = False
        self._to: Callable[[], None] | None = None
        self.stop = store.watch_inbox(run_id, self._call)
        """Stops the watch (the poller's, once it took it over)."""

    def _call(self) -> None:
        if self._to is None:
            self.heard = True
        else:
            self._to()

    def hand_to(self, callback: Callable[[], None]) -> bool:
        """From now on news goes to ``callback``; whether some came before."""
        self._to = callback
        return self.heard


class InboxPoller:
    """While a run is live, pick up messages posted by other processes (cancel, wake, hooks,
    child outcomes): at once when the store says one may have come (``Store.watch_inbox``,
    fed by the store's change notifications), and every ``engine.inbox_poll`` seconds in any
    case, as notifications are hints that may be lost.

    A timer, not a task sleeping in a loop: most runs end before their first look, and a
    timer costs them nothing to start and cancel (a task costs a loop turn at each end). A
    look runs in a task of its own, and the next is timed from its end; news that comes
    while a look is in progress (which may have read the inbox before the message landed)
    takes one more look after it.

    A look the store fails (a dropped connection, a server restarting) is no reason to stop
    looking: a cancel sent later must still reach the run. The next look comes after a pause
    that doubles at each failure in a row (up to ``RETRY_CAP``); the outage is said once, and
    its end once. Looks stop for good only when looking again is pointless: the run records
    nothing more (a write of its failed), its lease is lost, or the inbox is damaged.

    ``news``: the watch the drive started before reading the inbox, taken over (news it
    brought meanwhile makes the first look at once).
    """

    def __init__(self, engine: EngineLike, ctx: RunContext, news: InboxNews | None = None) -> None:
        self._engine = engine
        self._ctx = ctx
        self._loop = ctx.loop  # known: asyncio's lookup checks the process id, a system call
        self._look: asyncio.Task[None] | None = None
        self._again = False
        self._stopped = False
        self._failing_since: float | None = None
        """Loop time of the first failed look of the failures in a row (None: none failed)."""
        self._pause = engine.inbox_poll
        self._context = contextvars.copy_context()
        """The driver's context, where every look runs: a look started by news that a run of
        this process posted (``_heard``, called in the poster's context) is none of that
        run's work (its task would be the workflow's, its warnings its step's output)."""
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(
            engine.inbox_poll, self._start_look
        )
        if news is None:
            self._unwatch = engine.store.watch_inbox(ctx.run_id, self._heard)
        else:
            self._unwatch = news.stop
            if news.hand_to(self._heard):
                self._heard()

    def _heard(self) -> None:
        if self._stopped:
            return
        if self._look is not None:
            self._again = True
            return
        if self._timer is not None:
            self._timer.cancel()
        self._start_look()

    def _start_look(self) -> None:
        self._timer = None
        if not self._stopped:
            self._look = self._loop.create_task(self._read(), context=self._context.copy())
            self._look.add_done_callback(self._looked)

    async def _read(self) -> None:
        messages = await self._engine.store.read_inbox(self._ctx.run_id)
        if messages:
            await apply_messages(self._ctx, messages, live=True)

    def _looked(self, task: asyncio.Task[None]) -> None:
        self._look = None
        if self._stopped or task.cancelled():
            return
        error = task.exception()
        if error is not None:
            if not self._worth_again(error):
                # No more looks: say why, once.
                log.warning("run %s: stopped polling its inbox: %r", self._ctx.run_id, error)
                self._stop_watching()
                return
            self._timer = self._loop.call_later(self._failed(error), self._start_look)
            return
        if self._failing_since is not None:
            took = self._loop.time() - self._failing_since
            log.warning("run %s: its inbox is read again (after %.1fs)", self._ctx.run_id, took)
            self._failing_since = None
            self._pause = self._engine.inbox_poll
        if self._again:
            self._again = False
            self._start_look()
            return
        self._timer = self._loop.call_later(self._engine.inbox_poll, self._start_look)

    def _worth_again(self, error: BaseException) -> bool:
        """Whether a look that failed with ``error`` is to be made again: when the store
        failed for now, not when the run records nothing more, has lost its lease, or its
        inbox is damaged (or the look met a bug)."""
        if self._ctx.closed or not isinstance(error, StoreError):
            return False
        return not isinstance(error, LeaseLost | StoreCorrupted | StoreVersionError)

    def _failed(self, error: BaseException) -> float:
        """Seconds until the next look after a failed one; the first failure in a row is said."""
        if self._failing_since is None:
            self._failing_since = self._loop.time()
            log.warning(
                "run %s: cannot read its inbox for now: %s; trying again until it answers",
                self._ctx.run_id,
                error,
            )
        pause = self._pause
        self._pause = min(self._pause * 2, max(RETRY_CAP, self._engine.inbox_poll))
        return pause

    def _stop_watching(self) -> None:
        self._stopped = True
        self._unwatch()

    def stop(self) -> None:
        """No more looks; one in progress is cancelled."""
        self._stop_watching()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._look is not None:
            self._look.cancel()
