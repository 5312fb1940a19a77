"""Where features (hooks, streams, child runs) plug into the kernel, so it need not import them.

A ``Feature`` names a feature's plug-in points, each optional: the inbox message kinds it
handles, the journal events it reads back on replay, the waits whose satisfaction it can see,
what it does before a drive and after a run's outcome is recorded. Each feature module defines
its ``Feature`` as a constant (importing it registers nothing); ``wf.engine._engine`` lists them
in one ``Features`` that every ``Engine`` owns (``engine.features``), and the driver, the inbox
and the run context consult that, never a module-level table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from wf.engine._context import RunContext
    from wf.store import Event, InboxMessage, RunRecord

MessageHandler = Callable[["RunContext", "InboxMessage", bool], Awaitable[None]]
"""``handler(ctx, message, live)``: record the message's effect in the run's journal; ``live``
says whether the workflow coroutine is running (else the driver is about to replay)."""

EventReader = Callable[["RunContext", "Event"], None]
"""``reader(ctx, event)``: a feature's part of rebuilding a run's state from its journal."""

WaitCheck = Callable[["RunContext", Any], bool]
"""``met(ctx, key)``: whether a feature's wait on ``key`` is already satisfied."""

DriveHandler = Callable[["RunContext"], Awaitable[None]]
"""``handler(ctx)``, before a drive takes in the run's inbox and runs the workflow (or before a
step's code runs or the run suspends: ``Feature.before_outside``)."""

OutcomeHandler = Callable[["RunContext", "RunRecord"], Awaitable[None]]
"""``handler(ctx, record)``, after the outcome is durable; repeated safely after a crash."""

OutcomeNeeded = Callable[["RunContext", "RunRecord"], bool]
"""``needed(ctx, record)``: whether the outcome handler has anything to do for this run."""

H = TypeVar("H")

KERNEL_MESSAGES = frozenset({"cancel", "wake"})
"""Inbox message kinds the kernel handles itself (``wf.engine._inbox``)."""


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature's plug-in points; every one is optional."""

    name: str
    messages: Mapping[str, MessageHandler] = dataclasses.field(default_factory=dict)
    """Inbox message kind -> its handler (posted by other runs and processes)."""
    events: Mapping[str, EventReader] = dataclasses.field(default_factory=dict)
    """Journal event kind -> its reader, which rebuilds the feature's per-run state."""
    waits: Mapping[str, WaitCheck] = dataclasses.field(default_factory=dict)
    """Wait kind -> whether such a wait is already met (a message taken in while the run
    unwound), so a suspending run becomes due instead of sleeping."""
    before_drive: DriveHandler | None = None
    """Run before every drive of a run (a parent asks its retried children for news)."""
    before_outside: DriveHandler | None = None
    """Run before the outside world may act on what the workflow did: before each attempt of a
    step runs its code, before a child run is started, and once a suspending run's journal is
    durable (make the hook tokens the workflow created so far live: a step or a child may hand
    them out or answer them, a sender may use them while the run sleeps)."""
    after_outcome: OutcomeHandler | None = None
    """Run after every outcome (release tokens, close streams, tell the parent)."""
    outcome_needed: OutcomeNeeded | None = None
    """Whether ``after_outcome`` has work for a run, told without I/O (None: always)."""


class Features:
    """The features an engine runs with, in the order their outcome handlers run, with their
    plug-in points indexed by kind (the driver, the inbox and replay look them up)."""

    def __init__(self, *features: Feature) -> None:
        self.features = features
        self.messages: dict[str, MessageHandler] = {}
        self.readers: dict[str, EventReader] = {}
        self.waits: dict[str, WaitCheck] = {}
        for feature in features:
            if kernel := KERNEL_MESSAGES & feature.messages.keys():
                raise ValueError(f"inbox message kinds {sorted(kernel)} are the kernel's own")
            _add(self.messages, feature.messages, feature)
            _add(self.readers, feature.events, feature)
            _add(self.waits, feature.waits, feature)
        self._drive = [f.before_drive for f in features if f.before_drive is not None]
        self._outside = [f.before_outside for f in features if f.before_outside is not None]
        self._outcome = [
            (f.after_outcome, f.outcome_needed) for f in features if f.after_outcome is not None
        ]

    def __iter__(self) -> Iterator[Feature]:
        return iter(self.features)

    async def before_drive(self, ctx: RunContext) -> None:
        """Let the features prepare a drive (a parent asks its retried children for news)."""
        for handler in self._drive:
            await handler(ctx)

    async def before_outside(self, ctx: RunContext) -> None:
        """Let the features prepare for the outside world (hook tokens become live). Called
        only while ``ctx.outside_pending`` is set: a feature sets it when it has work here, so
        a step of a run without any costs nothing."""
        for handler in self._outside:
            await handler(ctx)

    def outcome_work(self, ctx: RunContext, record: RunRecord) -> bool:
        """Whether ``after_outcome`` has anything to do for this run: if not, a driver may
        write the outcome and the final record together (``Lease.append_and_save``)."""
        return any(needed is None or needed(ctx, record) for _, needed in self._outcome)

    async def after_outcome(self, ctx: RunContext, record: RunRecord) -> None:
        """Release what the run held and tell whoever waits, in the features' order."""
        for handler, _ in self._outcome:
            await handler(ctx, record)


def _add(table: dict[str, H], mine: Mapping[str, H], feature: Feature) -> None:
    if taken := mine.keys() & table.keys():
        raise ValueError(f"feature {feature.name!r}: {sorted(taken)} handled by another feature")
    table.update(mine)
