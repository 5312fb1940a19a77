"""Following a run's journal as it grows: what ``wf run``'s live view is fed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from wf.store import RunRecord, Store


class JournalSink(Protocol):
    """Where a follower passes each change: the record, the whole journal, the new events."""

    def update(
        self, record: RunRecord, journal: list[dict[str, Any]], new: list[dict[str, Any]]
    ) -> None: ...


S = TypeVar("S", bound=JournalSink)

SHARE = 0.1
"""The most of the time a view of a live run spends reading and drawing it (``rest_after``)."""


def rest_after(took: float) -> float:
    """Seconds to wait after a refresh that took ``took`` before the next one, so that a view
    that costs more as its run grows (a 30,000-step run's) keeps to ``SHARE`` of the time:
    ``wf run``'s view, its table, ``wf inspect``'s live screens."""
    return took * (1 / SHARE - 1)


class Follower(Generic[S]):
    """Feeds a sink the run's journal as it grows (events are reported once each)."""

    def __init__(self, store: Store, run_id: str, sink: S) -> None:
        self.store = store
        self.run_id = run_id
        self.sink = sink
        self._journal: list[dict[str, Any]] = []
        self._rested = 0.0
        """When (the loop's clock) the next refresh may begin (``rest_after`` the last)."""

    async def refresh(self) -> RunRecord:
        """Read the run and what its journal gained since the last refresh, and pass that on;
        returns the record. Each refresh reads only the new events (``read_journal``'s
        ``start``): following a long run costs what it appends."""
        clock = asyncio.get_running_loop().time
        began = clock()
        record = await self.store.get_run(self.run_id)
        new = await self.store.read_journal(self.run_id, len(self._journal))
        self._journal.extend(new)
        self.sink.update(record, self._journal, new)
        ended = clock()
        self._rested = ended + rest_after(ended - began)
        return record

    async def read_past(self) -> None:
        """Take the journal as it stands now as already seen: the next refresh passes it to
        the sink whole, but as new only what was appended since (``wf run --id`` of a run
        that exists: its past, read before this process drives it on)."""
        self._journal = await self.store.read_journal(self.run_id)

    async def has_messages(self) -> bool:
        """Whether messages wait in the run's inbox (a hook's payload, a cancel): the run is
        due, so a suspension read now is about to end (``wf run --id`` of a run whose hook
        got its payload while nobody drove it)."""
        return bool(await self.store.read_inbox(self.run_id))

    async def changed(self, poll: float) -> None:
        """Return once the run changed (or ``poll`` seconds passed), but not before the last
        refresh's ``rest_after``: a run driven in this process (``wf run``) changes with every
        step, and refreshing that often cost it twice what its steps did."""
        await self.store.wait_for_run(self.run_id, poll)
        rest = self._rested - asyncio.get_running_loop().time()
        if rest > 0:
            await asyncio.sleep(rest)

    async def follow(self, *, poll: float = 0.5) -> None:
        """Refresh on every change of the run (and every ``poll`` seconds) until it ends."""
        while True:
            record = await self.refresh()
            if record.status.is_terminal:
                return
            await self.changed(poll)
