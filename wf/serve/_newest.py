"""The store's newest runs, listed once per change for every open event stream.

``GET /api/v1/events`` tells a page which of the newest 100 runs changed. A listing per
stream would cost streams times changes (with 50 pages open while 20 runs started, a small
request beside them waited up to a second), so one listing serves every stream: the first
stream to want a newer one than it has seen starts it (after the next change, or the
keep-alive period), the others wait for that same listing.
"""

from __future__ import annotations

import asyncio

from wf.admin._feed import wait_for_change
from wf.admin._read import list_runs
from wf.store import RunRecord, Store

SHOWN = 100
"""How many of the newest runs a stream follows."""


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class NewestRuns:
    """The newest ``SHOWN`` runs of a store and a version that grows with each listing."""

    def __init__(self, store: Store, keepalive: float) -> None:
        self._store = store
        self._keepalive = keepalive
        self.version = 0
        self.records: list[RunRecord] = []
        self._next: asyncio.Future[None] | None = None

    async def after(self, version: int) -> tuple[int, list[RunRecord]]:
        """A listing newer than ``version``: the one at hand if it is, else the next one,
        made once for every caller, after the store's next change or ``keepalive`` seconds
        (then it may list the same runs)."""
        if self.version > version:
            return self.version, self.records
        if self._next is None or self._next.done():
            self._next = asyncio.ensure_future(self._list(wait=self.version > 0))
            # Its failure (the store's) is each waiting stream's to tell, in one line: one
            # that nobody waits for any more is no "exception never retrieved" traceback.
            self._next.add_done_callback(_retrieved)
        # Shielded: a stream that goes away must not cancel the listing the others wait for.
        await asyncio.shield(self._next)
        return self.version, self.records

    async def _list(self, *, wait: bool) -> None:
        if wait:
            await wait_for_change(self._store, self._keepalive)
        # A damaged run is left out (``damaged``): it is not a stream's news (nor the worker's).
        self.records = (await list_runs(self._store, limit=SHOWN)).runs
        self.version += 1
