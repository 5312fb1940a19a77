"""Pages of the runs table: filters, search, and ``before=`` paging that never loads all runs.

A page is one ``Admin.list_runs`` call of ``limit + 1`` records (the extra one only says
whether a next page exists), so the cost of a page does not grow with the store. The filters
and the search are ``wf.admin.list_runs``'s, the same as ``wf runs`` and the web UI's: a search
keeps the runs whose id or workflow name contains the text (in any case), looking at a bounded
number of runs per page (the next page goes on from where it stopped).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf import RunRecord
    from wf.admin import Admin
    from wf.store import Fault

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


@dataclasses.dataclass(frozen=True)
class RunsQuery:
    """What the runs table shows: a status, a workflow name, a search text (all optional)."""

    status: str | None = None
    workflow: str | None = None
    search: str = ""

    def describe(self) -> str:
        """``status=failed workflow=shop:order search=01J`` or ``all runs``."""
        parts = []
        if self.status:
            parts.append(f"status={self.status}")
        if self.workflow:
            parts.append(f"workflow={self.workflow}")
        if self.search:
            parts.append(f"search={self.search.strip()}")
        return " ".join(parts) or "all runs"


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of runs, newest first; ``next_before``: where the next (older) page starts,
    None on the last page."""

    runs: list[RunRecord]
    next_before: str | None
    searched: int = 0
    """Runs a search read for this page (``wf.admin.RunPage.searched``; 0 for a listing)."""
    exhausted: bool = False
    """The search's bound stopped it before the page filled: ``next_before`` searches
    further (the web UI's "Search further", the API's ``search_further``)."""
    damaged: list[Fault] = dataclasses.field(default_factory=list)
    """Damaged runs the page left out (``wf.admin.RunPage.damaged``)."""

    @property
    def has_more(self) -> bool:
        """Whether older runs follow."""
        return self.next_before is not None


async def fetch_page(
    client: Admin, query: RunsQuery, before: str | None = None, limit: int = PAGE_SIZE
) -> Page:
    """The runs of ``query`` created before ``before`` (where the previous page ended)."""
    page = await client.list_runs(
        status=[query.status] if query.status else None,
        workflow=query.workflow or None,
        limit=limit + 1,
        before=before,
        search=query.search.strip() or None,
    )
    if len(page.runs) > limit:
        return Page(page.runs[:limit], page.runs[limit - 1].id, page.searched, False, page.damaged)
    # A search may stop short at its bound: it says how far it read and where to go on.
    return Page(page.runs, page.next_before, page.searched, page.exhausted, page.damaged)
