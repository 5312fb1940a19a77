"""Waiting for change: the store's notifications, for front ends that show runs live.

A change feed is no read ``wf.admin`` answers with a result: it is the store's own
notification (file-system events on the local store, ``LISTEN`` on PostgreSQL, a channel on
Redis; a bounded poll elsewhere), passed through here so that a page, a stream of server-sent
events or a terminal screen waits on ``wf.admin`` alone and reads what changed through its
readers, as a command does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from wf._exceptions import RunNotFound, StoreCorrupted

if TYPE_CHECKING:
    from wf.store import RunRecord, Store


async def wait_for_run(store: Store, run_id: str, timeout: float) -> None:
    """Return once run ``run_id`` may have changed (its record, journal, logs or streams), or
    after ``timeout`` seconds: the store's notification (``Store.wait_for_run``), which
    readers follow by reading again. It may return early; it never says what changed."""
    await store.wait_for_run(run_id, timeout)


async def wait_for_change(store: Store, timeout: float) -> None:
    """Return once any run of the store may have changed (one was created, or changed
    status), or after ``timeout`` seconds (``Store.wait_for_change``): what a listing that
    shows runs live waits on before it lists again."""
    await store.wait_for_change(timeout)


async def run_changes(
    store: Store, run_id: str, wait: float
) -> AsyncGenerator[tuple[RunRecord, int]]:
    """Run ``run_id``'s record and the length of its journal, now and again after each
    change of the run (or every ``wait`` seconds without one: the same pair again), until
    the run is gone or can no longer be read (deleted, or damaged since): then it ends.

    ``GET /api/v1/events?run=ID`` streams it. Only what the journal gained is read each time:
    a long run's feed would otherwise read all of it on every step."""
    events = 0
    while True:
        try:
            record = await store.get_run(run_id)
            events += len(await store.read_journal(run_id, events))
        except (RunNotFound, StoreCorrupted):
            return
        yield record, events
        await store.wait_for_run(run_id, wait)
