"""Step logs of a run: what its steps printed or logged, per step attempt, optionally live."""

from __future__ import annotations

from collections.abc import AsyncIterator

from wf.store import LogEntry, Store
from wf.store._ids import validate_run_id


async def follow_logs(
    store: Store,
    run_id: str,
    *,
    step: str | None = None,
    follow: bool = False,
    poll: float = 2.0,
) -> AsyncIterator[LogEntry]:
    """The run's step log entries, oldest first (only step ``step``'s, if given); with
    ``follow``, new ones as its steps write them, until the run ends.

    Raises ``wf.RunNotFound`` (before yielding anything) for an unknown run.
    """
    run_id = validate_run_id(run_id)
    await store.get_run(run_id)
    seen = 0
    while True:
        entries = await store.read_logs(run_id, seen)
        seen += len(entries)
        for entry in entries:
            if step is None or entry.get("step") == step:
                yield entry
        if not follow:
            return
        if not entries:
            # A step's last lines are stored before its outcome, so once the run has ended,
            # one more read (just done) had everything.
            if (await store.get_run(run_id)).status.is_terminal:
                if not await store.read_logs(run_id, seen):
                    return
                continue
            await store.wait_for_run(run_id, poll)
