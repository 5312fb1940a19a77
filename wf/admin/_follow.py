"""Following a run's journal as it grows: what ``wf run``'s live view is fed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from wf.store import RunRecord, Store


class JournalSink(Protocol):
    """Where a follower passes each change: the record, the whole journal, the new events."""

    def update(
        self, record: RunRecord, journal: list[dict[str, Any]], new: list[dict[str, Any]]
    ) -> None: ...


S = TypeVar("S", bound=JournalSink)


class Follower(Generic[S]):
    """Feeds a sink the run's journal as it grows (events are reported once each)."""

    def __init__(self, store: Store, run_id: str, sink: S) -> None:
        self.store = store
        self.run_id = run_id
        self.sink = sink
        self._seen = 0

    async def refresh(self) -> RunRecord:
        """Read the run and its journal once and pass on what is new; returns the record."""
        record = await self.store.get_run(self.run_id)
        journal = await self.store.read_journal(self.run_id)
        new = journal[self._seen :]
        self._seen = len(journal)
        self.sink.update(record, journal, new)
        return record

    async def follow(self, *, poll: float = 0.5) -> None:
        """Refresh on every change of the run (and every ``poll`` seconds) until it ends."""
        while True:
            record = await self.refresh()
            if record.status.is_terminal:
                return
            await self.store.wait_for_run(self.run_id, poll)
