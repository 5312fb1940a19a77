"""The queues and schedules pages of the web UI, and a run's step logs.

* ``/queues``: runs due and waiting for a driver, per workflow and group (``Store.queue_stats``,
  the numbers behind the ``wf.queue.depth`` / ``wf.queue.oldest_age`` metrics), each linking to
  the runs it counts;
* ``/schedules``: every cron schedule (``wf schedules``): its next fire (or ``ended``), its last
  fire (both in the schedule's zone, labelled) and the status of the run that fire started;
* the run page's Logs section: what the run's steps printed or logged, per step attempt
  (``wf logs``).

Like the other pages they are whole documents that work without JavaScript and follow the
store live (``static/app.js`` fetches the changed fragments again).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wf.admin._words import last_run_waiting, visible
from wf.engine._cron import zoned_time
from wf.serve._html import (
    action_button,
    badge,
    cut,
    damaged_notice,
    duration,
    esc,
    line,
    segment,
    url,
    when,
)
from wf.store import LogEntry, QueueStats

if TYPE_CHECKING:
    from wf.admin import SchedulePage

LOG_LINES = 1000
"""The newest step log entries a run page shows (``wf logs RUN_ID`` has them all)."""


def queues_body(stats: Sequence[QueueStats], now: float) -> str:
    """The queues page's content."""
    return f"""
<section class="head">
  <h1>Queues</h1>
  <p class="dim">Runs that are due and wait for a driver (a worker, <code>wf serve</code>),
  per workflow and group. A queue that grows, or whose oldest run keeps ageing, needs more
  workers or a higher concurrency.</p>
</section>
<section class="card">
  <div id="live-queues" data-fragment>{queues_table(stats, now)}</div>
</section>
"""


def queues_table(stats: Sequence[QueueStats], now: float) -> str:
    """The table of waiting runs per workflow and group."""
    if not stats:
        return (
            '<p class="empty" id="queues-empty">Nothing is waiting: every due run is being '
            "driven.</p>"
        )
    rows = []
    for found in stats:
        waited = max(0.0, now - found.oldest_due_at)
        link = url("/", workflow=found.workflow)
        group = esc(found.group) if found.group is not None else '<span class="dim">–</span>'
        rows.append(
            f'<tr data-workflow="{esc(found.workflow)}" data-group="{esc(found.group or "")}">'
            f'<td><a href="{esc(link)}">{line(found.workflow)}</a></td>'
            f"<td>{group}</td>"
            f'<td class="num depth">{found.depth}</td>'
            f'<td class="num">{duration(waited)}</td>'
            f"<td>{when(found.oldest_due_at)}</td>"
            "</tr>"
        )
    total = sum(found.depth for found in stats)
    return f"""
<table class="queues">
  <thead><tr><th>Workflow</th><th>Group</th><th class="num">Waiting</th>
  <th class="num">Oldest waited</th><th>Due since</th></tr></thead>
  <tbody>{"".join(rows)}</tbody>
  <tfoot><tr><td colspan="2">Total</td><td class="num">{total}</td><td colspan="2"></td>
  </tr></tfoot>
</table>"""


def schedules_body(page: SchedulePage, csrf: str = "") -> str:
    """The schedules page's content (``csrf``: its forms' token; none, no buttons)."""
    return f"""
<section class="head">
  <h1>Schedules</h1>
  <p class="dim">Cron schedules fired by workers (<code>wf schedule set</code>,
  <code>wf.schedule</code>): each fire starts one run, exactly once across workers.</p>
</section>
<section class="card">
  <div id="live-schedules" data-fragment>{_damaged_schedules(page)}
    {schedules_table(page.schedules, csrf)}</div>
</section>
"""


def _damaged_schedules(page: SchedulePage) -> str:
    why = "whose definition cannot be read; they do not fire, the others do"
    return damaged_notice(page.damaged, "schedule", why)


def schedules_table(rows: Sequence[dict[str, Any]], csrf: str = "") -> str:
    """The table of schedules, each with a Pause or Resume button when ``csrf`` is given."""
    if not rows:
        return (
            '<p class="empty" id="schedules-empty">No schedules. Add one with '
            "<code>wf schedule set ID TARGET --cron EXPR</code>.</p>"
        )
    out = []
    for row in rows:
        last = '<span class="dim">–</span>'
        if row.get("last_run_id"):
            run_id = esc(row["last_run_id"])
            status = row.get("last_run_status") or ""
            shown = badge(status) if status else ""
            if status in ("deleted", "missing"):
                last = f'<span class="mono">{run_id}</span> {shown}'
            else:
                link = f"/runs/{segment(row['last_run_id'])}"
                last = f'<a class="mono" href="{link}">{run_id}</a> {shown}'
            if waiting := last_run_waiting(row):
                last += f' <div class="warn-text">{line(waiting)}</div>'
        skipped = str(row.get("skipped") or 0)
        if row.get("skipped") and row.get("last_skip_reason"):
            skipped += f' <span class="dim">(last: {line(row["last_skip_reason"])})</span>'
        error = ""
        if row.get("last_error"):
            error = f'<div class="bad-text">error: {line(row["last_error"])}</div>'
        runs = url("/", workflow=row.get("workflow"))
        out.append(
            f'<tr data-id="{esc(row["id"])}">'
            f'<td class="mono">{esc(row["id"])}</td>'
            f'<td><a href="{esc(runs)}">{line(row.get("workflow"))}</a></td>'
            f'<td class="mono">{esc(row.get("cron"))}</td>'
            f"<td>{esc(row.get('tz') or 'UTC')}</td>"
            f"<td>{next_fire_cell(row)}</td>"
            f"<td>{zoned_when(row.get('last_fire_at'), row.get('tz'))}</td>"
            f"<td>{last}</td>"
            f"<td>{skipped}{error}</td>"
            f"{_switch(row, csrf)}"
            "</tr>"
        )
    return f"""
<table class="schedules">
  <thead><tr><th>Id</th><th>Workflow</th><th>Cron</th><th>Zone</th><th>Next fire</th>
  <th>Last fire</th><th>Last run</th><th>Skipped</th>{"<th></th>" if csrf else ""}</tr></thead>
  <tbody>{"".join(out)}</tbody>
</table>"""


def _switch(row: dict[str, Any], csrf: str) -> str:
    """The Pause (or Resume) button of a schedule's row."""
    if not csrf:
        return ""
    action = "resume" if row.get("paused") else "pause"
    path = f"/schedules/{segment(row['id'])}/{action}"
    return f"<td>{action_button(path, action.capitalize(), csrf)}</td>"


def next_fire_cell(row: dict[str, Any]) -> str:
    """A schedule's next fire in its zone, ``ended`` once its series has ended, ``paused``
    while it is paused."""
    if row.get("ended"):
        return '<span class="dim ended">ended</span>'
    if row.get("paused"):
        return '<span class="dim paused">paused</span>'
    return zoned_when(row.get("next_run"), row.get("tz"))


def zoned_when(ts: float | None, tz: str | None) -> str:
    """A schedule's time in the schedule's zone, labelled (``2026-12-04 02:30 CET``): the script
    leaves the text as it is (``data-zoned``) and only adds how long ago or ahead it is."""
    if ts is None:
        return '<span class="dim">–</span>'
    iso = dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")
    return f'<time datetime="{iso}" data-zoned title="{iso}">{esc(zoned_time(ts, tz))}</time>'


def logs_section(run_id: str, entries: Sequence[LogEntry], total: int) -> str:
    """A run's step logs, grouped per step attempt (the newest ``LOG_LINES`` entries)."""
    if not entries:
        return '<p class="empty">Its steps have printed and logged nothing (yet).</p>'
    parts: list[str] = []
    if total > len(entries):
        parts.append(
            f'<p class="dim">The last {len(entries)} of {total} entries; all of them: '
            f"<code>wf logs {esc(run_id)}</code>.</p>"
        )
    current: tuple[Any, ...] | None = None
    lines: list[str] = []

    def flush() -> None:
        if lines:
            parts.append(f'<pre class="log">{"".join(lines)}</pre>')
            lines.clear()

    for entry in entries:
        attempt = (entry.get("op"), entry.get("attempt"), entry.get("resumes"))
        if attempt != current:
            flush()
            current = attempt
            parts.append(
                f'<h3 class="log-head">{line(entry.get("step"))} '
                f'<span class="dim">· attempt {esc(entry.get("attempt"))} · '
                f"{when(entry.get('ts'))}</span></h3>"
            )
        lines.append(_log_line(entry))
    flush()
    return f'<div class="logs">{"".join(parts)}</div>'


SHOWN_LOG_TEXT = 4096
"""Characters of one log entry's text the run page shows (of ``LOG_LINES`` entries)."""


def _log_line(entry: LogEntry) -> str:
    # Recorded text: its control and bidi characters shown as escapes, its line breaks kept;
    # a huge entry (a step printed megabytes) cut, as the run page cuts a value.
    whole = str(entry.get("text", "")).rstrip("\n")
    shown, size = cut(whole, SHOWN_LOG_TEXT)
    text = esc(visible(shown, newlines=True))
    if size:
        text += esc(f"… (cut: {size:,} bytes; wf logs has it whole)")
    stream = entry.get("stream")
    if stream == "log":
        level = str(entry.get("level", "LOG"))
        tone = "bad-text" if level in ("ERROR", "CRITICAL") else "warn-text"
        tone = tone if level not in ("DEBUG", "INFO") else "dim"
        mark = f'<span class="{tone}">[{line(level)} {line(entry.get("logger", ""))}]</span> '
        return f'<span class="line log">{mark}{text}</span>\n'
    if stream == "stderr":
        return f'<span class="line stderr"><span class="warn-text">[stderr]</span> {text}</span>\n'
    return f'<span class="line">{text}</span>\n'


def now() -> float:
    """The wall clock (a function, so the pages are easy to render at a given time)."""
    return time.time()
