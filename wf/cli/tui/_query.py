"""Pages of the runs table: filters, id search, and ``before=`` paging that never loads all runs.

A page is one ``list_runs`` call of ``limit + 1`` records (the extra one only says whether a next
page exists), so the cost of a page does not grow with the store. Runs are listed newest-created
first, which is not the order of their ids (callers may choose ids), so a search by id *prefix*
reads pages of runs and keeps the matching ones, looking at most ``SEARCH_BUDGET`` runs per page
of results (the next page goes on from where it stopped).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from wf.store import RunRecord, RunStatus

if TYPE_CHECKING:
    from wf.store import Store

PAGE_SIZE = 100
STATUS_CYCLE: tuple[str | None, ...] = (
    None,
    "running",
    "suspended",
    "failed",
    "pending",
    "completed",
    "cancelled",
)
"""``s`` on the runs screen steps through these; the states needing attention come first."""

SEARCH_BATCH = 500
SEARCH_BUDGET = 20_000
"""Runs an id search looks at, at most, for one page of results."""

_ULID_TAIL = re.compile(r"^[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]*$")


@dataclasses.dataclass(frozen=True)
class RunsQuery:
    """What the runs table shows: a status, a workflow name, an id prefix (all optional)."""

    status: str | None = None
    workflow: str | None = None
    search: str = ""

    def describe(self) -> str:
        """``status=failed workflow=shop:order id=wrun_01J…`` or ``all runs``."""
        parts = []
        if self.status:
            parts.append(f"status={self.status}")
        if self.workflow:
            parts.append(f"workflow={self.workflow}")
        if self.search:
            parts.append(f"id={normalize_search(self.search)}…")
        return " ".join(parts) or "all runs"


def normalize_search(text: str) -> str:
    """The id prefix to look for: generated ids are upper case after ``wrun_``; type either."""
    text = text.strip()
    if text[:5].lower() == "wrun_" and _ULID_TAIL.match(text[5:]):
        return "wrun_" + text[5:].upper()
    return text


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of runs, newest first, and whether older runs follow."""

    runs: list[RunRecord]
    has_more: bool


async def fetch_page(
    store: Store, query: RunsQuery, before: str | None = None, limit: int = PAGE_SIZE
) -> Page:
    """The runs of ``query`` created before ``before`` (the previous page's last run)."""
    statuses = [RunStatus(query.status)] if query.status else None
    workflow = query.workflow or None
    prefix = normalize_search(query.search)
    if not prefix:
        records = await store.list_runs(
            statuses=statuses, workflow=workflow, limit=limit + 1, before=before
        )
        return Page(records[:limit], len(records) > limit)
    found: list[RunRecord] = []
    looked = 0
    while len(found) <= limit and looked < SEARCH_BUDGET:
        batch = await store.list_runs(
            statuses=statuses, workflow=workflow, limit=SEARCH_BATCH, before=before
        )
        found.extend(r for r in batch if r.id.startswith(prefix))
        looked += len(batch)
        if len(batch) < SEARCH_BATCH:
            break
        before = batch[-1].id
    return Page(found[:limit], len(found) > limit)
