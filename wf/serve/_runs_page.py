"""The runs page: filters (status, workflow, queue, group, deployment, search), the table,
paging."""

from __future__ import annotations

import time
from typing import Any

from wf.admin import RunPage
from wf.admin._words import run_info
from wf.serve._html import (
    Moments,
    badge,
    damaged_notice,
    duration,
    esc,
    line,
    segment,
    url,
    when,
)
from wf.serve._params import LIST_FILTERS
from wf.store import RunRecord, RunStatus

STATUSES = [status.value for status in RunStatus]


def runs_body(page: RunPage, filters: dict[str, Any], *, first_page: bool) -> str:
    """The runs page's content: the filter bar, the table and the pager."""
    return f"""
<section class="head">
  <h1>Runs</h1>
  {_filters(filters)}
</section>
<section class="card">
  {runs_table(page, filters, first_page=first_page)}
</section>
"""


def _filters(filters: dict[str, Any]) -> str:
    status = filters.get("status") or ""
    others = {k: v for k, v in _kept(filters).items() if k != "status"}
    chips = [_chip("all", url("/", **others), not status)]
    for value in STATUSES:
        chips.append(_chip(value, url("/", status=value, **others), value in status.split(",")))
    named = "".join(
        f'\n  <input name="{name}" placeholder="{name}" value="{esc(filters.get(name))}"'
        f' aria-label="{name}" size="10">'
        for name in LIST_FILTERS
    )
    options = "".join(
        f'<option value="{v}"{" selected" if v == status else ""}>{v or "any status"}</option>'
        for v in ["", *STATUSES, *([status] if status and status not in STATUSES else [])]
    )  # several statuses (``?status=failed&status=cancelled``): one option of their own
    return f"""
<div class="chips">{"".join(chips)}</div>
<form class="filters" method="get" action="/">
  <select name="status" aria-label="status">{options}</select>
  <input name="workflow" placeholder="workflow (exact name)" value="{esc(filters.get("workflow"))}"
         aria-label="workflow">{named}
  <input name="q" type="search" placeholder="search ids and workflows"
         value="{esc(filters.get("q"))}" aria-label="search">
  <button class="btn primary" type="submit">Filter</button>
</form>"""


def _chip(label: str, link: str, on: bool) -> str:
    tone = f" {badge_tone(label)}" if label != "all" else ""
    return f'<a class="chip{" on" if on else ""}{tone}" href="{esc(link)}">{esc(label)}</a>'


def badge_tone(status: str) -> str:
    from wf.serve._html import STATUS_TONE

    return STATUS_TONE.get(status, "info")


def runs_table(page: RunPage, filters: dict[str, Any], *, first_page: bool) -> str:
    """The table of runs and the pager (also what live updates fetch again)."""
    now = time.time()
    if not page.runs:
        rows = '<tr><td colspan="6" class="empty">No runs match.</td></tr>'
    else:
        rows = "".join(_row(record, now) for record in page.runs)
    pager = []
    if not first_page:
        pager.append(f'<a class="btn" href="{esc(url("/", **_kept(filters)))}">« Newest</a>')
    if page.exhausted and page.next_before:
        further = url("/", before=page.next_before, **_kept(filters))
        pager.append(
            f'<span class="muted">Searched {page.searched:,} runs.</span> '
            f'<a class="btn" rel="next" href="{esc(further)}">Search further »</a>'
        )
    elif page.next_before:
        older = url("/", before=page.next_before, **_kept(filters))
        pager.append(f'<a class="btn" rel="next" href="{esc(older)}">Older »</a>')
    return f"""
<div id="runs" data-fragment>{damaged_notice(page.damaged, "run", "whose record cannot be read")}
<table class="runs">
  <thead><tr><th>Run</th><th>Workflow</th><th>Status</th><th>Created</th>
  <th class="num">Duration</th><th>Info</th></tr></thead>
  <tbody>{rows}</tbody>
</table>
<div class="pager">{"".join(pager)}</div>
</div>"""


def _kept(filters: dict[str, Any]) -> dict[str, Any]:
    return {k: filters.get(k) for k in ("status", "workflow", *LIST_FILTERS, "q")}


def _row(record: RunRecord, now: float) -> str:
    status = record.status.value
    ended = record.updated_at if record.status.is_terminal else now
    # The words of `wf runs`' info column, its moments in the reader's local time, as the
    # created column's; recorded text (a name, an error) with its control characters shown.
    moments = Moments()
    info = run_info(record, at=moments.mark)
    link = f"/runs/{segment(record.id)}"
    child = ' <span class="tag">child</span>' if record.parent_id else ""
    return (
        f'<tr data-id="{esc(record.id)}">'
        f'<td class="mono"><a href="{link}">{esc(record.id)}</a>{child}</td>'
        f"<td>{line(record.workflow)}</td>"
        f"<td>{badge(status)}</td>"
        f"<td>{when(record.created_at)}</td>"
        f'<td class="num">{duration(ended - record.created_at)}</td>'
        f'<td class="info" title="{moments.title(info)}">{moments.html(info)}</td>'
        "</tr>"
    )
