"""Step logs of a run: what its steps printed or logged, per step attempt, optionally live."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from wf import _events
from wf._exceptions import UsageError
from wf.store import LogEntry, Store
from wf.store._ids import validate_run_id
from wf.store._limits import check_name, shown

_STEP_EVENTS = frozenset(kind for kind, op in _events.OPENING_EVENTS.items() if op == "step")
"""Journal events that name one of the run's steps (in ``name``)."""

_NAMED = 20
"""At most this many of a run's step names are listed in the error for a step it has not."""

JournalPages = Callable[[int], Awaitable[tuple[list[dict[str, Any]], int, bool]]]
"""Reads a run's journal from an event index on: ``(events, next_start, more)``."""


async def check_step(run_id: str, step: str, pages: JournalPages) -> None:
    """Return if run ``run_id``'s journal has a step named ``step``; else ``wf.UsageError``
    naming the steps it has, as ``wf.StreamNotFound`` names a run's streams: ``wf logs
    --step typo`` says so, rather than print nothing. Every backend checks with these words."""
    names: set[str] = set()
    start, more = 0, True
    while more:
        events, start, more = await pages(start)
        found = {str(e.get("name")) for e in events if e.get("type") in _STEP_EVENTS}
        if step in found:
            return
        names |= found
    raise UsageError(f"run {run_id} has no step {shown(step)} (its steps: {_listed(names)})")


def _listed(names: Iterable[str]) -> str:
    ordered = sorted(names)
    if not ordered:
        return "none"
    listed = ", ".join(shown(name) for name in ordered[:_NAMED])
    more = len(ordered) - _NAMED
    return listed + (f" and {more} more" if more > 0 else "")


def step_name(step: str | None) -> str | None:
    """``step`` if it may be a step's name (None: every step), else ``wf.UsageError``."""
    return None if step is None else check_name("a step name", step)


async def checked_logs(
    run_id: str,
    step: str | None,
    follow: bool,
    entries: AsyncIterator[LogEntry],
    pages: JournalPages,
) -> AsyncIterator[LogEntry]:
    """``entries`` (a backend's log entries of run ``run_id``, only step ``step``'s), with
    ``step`` checked against the run's steps: at once without ``follow``; with it, once the
    run ended without that step writing anything (a live run may still come to it)."""
    if step is None:
        async for entry in entries:
            yield entry
        return
    if not follow:
        await check_step(run_id, step, pages)
    seen = False
    async for entry in entries:
        seen = True
        yield entry
    if follow and not seen:
        await check_step(run_id, step, pages)


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

    Raises ``wf.RunNotFound`` (before yielding anything) for an unknown run,
    ``wf.ResultExpired`` for a deleted one, and ``wf.UsageError`` for a step the run has
    not (naming those it has).
    """
    run_id = validate_run_id(run_id)
    step = step_name(step)

    async def pages(start: int) -> tuple[list[dict[str, Any]], int, bool]:
        events = await store.read_journal(run_id, start)
        return events, start + len(events), False

    async for entry in checked_logs(
        run_id, step, follow, _follow_logs(store, run_id, step, follow, poll), pages
    ):
        yield entry


async def _follow_logs(
    store: Store, run_id: str, step: str | None, follow: bool, poll: float
) -> AsyncIterator[LogEntry]:
    from wf.admin._read import existing_run

    await existing_run(store, run_id)
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


LOG_PAGE = 500
"""The default (and ``GET /api/v1/runs/{id}/logs``' largest) page of step log entries."""


@dataclasses.dataclass(frozen=True)
class LogPage:
    """Step log entries of a run from an index on (``log_page``)."""

    run_id: str
    status: str
    """The run's status when the entries were read (read first: once it has ended, every
    entry of its attempts was in the page's read)."""
    entries: list[LogEntry]
    """Oldest first; only step ``step``'s when asked for (indices still count every entry)."""
    next_start: int
    """Where the next page begins: pass it as ``start``."""
    more: bool
    """Entries past this page are stored already."""

    def to_json(self) -> dict[str, Any]:
        """As ``GET /api/v1/runs/{id}/logs`` answers."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "entries": self.entries,
            "next_start": self.next_start,
            "more": self.more,
        }


async def log_page(
    store: Store,
    run_id: str,
    *,
    start: int = 0,
    limit: int | None = LOG_PAGE,
    step: str | None = None,
    wait: float = 0.0,
    gone: Callable[[], Awaitable[bool]] | None = None,
) -> LogPage:
    """The run's step log entries from index ``start`` on, oldest first, at most ``limit``
    (None: all of them), only step ``step``'s if given; with ``wait``, a read that finds no
    entries waits up to that many seconds for some (or for the run's end) before answering,
    unless ``gone()`` says the asker went away. ``wf.RunNotFound`` / ``wf.ResultExpired``,
    ``wf.UsageError`` for a ``start`` below 0 or a ``limit`` below 1. ``GET
    /api/v1/runs/{id}/logs``, the web UI's run page and the terminal UI read logs here."""
    import asyncio

    from wf.admin._read import check_journal_page, existing_run

    check_journal_page(start, 1 if limit is None else limit)
    step = step_name(step)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        # The record first: once it has ended, every entry of its attempts is stored already.
        record = await existing_run(store, run_id)
        entries = await store.read_logs(record.id, start)
        remaining = deadline - loop.time()
        if entries or record.status.is_terminal or remaining <= 0:
            break
        if gone is not None and await gone():
            break
        await store.wait_for_run(record.id, min(remaining, 1.0))
    page = entries if limit is None else entries[:limit]
    return LogPage(
        record.id,
        record.status.value,
        [e for e in page if step is None or e.get("step") == step],
        start + len(page),
        len(entries) > len(page),
    )
