"""The run page: header (status, why, actions), the timeline of operations, steps, events,
values, hooks (with a resume form), related runs, byte streams and errors."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from wf.admin import Explanation, Operation, Reason, RunDetail
from wf.admin._words import (
    SHOWN_BY_NAME,
    nothing_to_wake,
    recovery_text,
    stream_state,
    visible,
    visible_json,
)
from wf.engine._webhooks import webhook_path
from wf.serve._html import (
    SHOWN_LINE,
    Moments,
    action_button,
    badge,
    clip,
    csrf_field,
    cut,
    cut_note,
    damaged_notice,
    duration,
    error_text,
    esc,
    line,
    one_line,
    pretty,
    segment,
    when,
)
from wf.store import Fault

_EVENT_NOISE = frozenset({"type", "ts"})
_HIDDEN_STREAM = "wf:"

SHOWN_OPERATIONS = 500
"""Operations the timeline, the steps table and the step results show: the latest ones. A
run of 30,000 steps made a 48 MB page that took 1.4 s to build, while every other request to
the server waited."""

SHOWN_EVENTS = 1000
"""Journal events the events table shows: the latest ones."""


def _left_out(shown: int, total: int, noun: str, run_id: str) -> str:
    """A note above a section that shows the latest ``shown`` of ``total``."""
    if shown >= total:
        return ""
    # Events: the journal a page at a time; operations and results: the detail without it.
    api = f"/api/v1/runs/{segment(run_id)}" + ("/events" if noun == "events" else "?events=false")
    return (
        f"<p class='empty'>The latest {shown:,} of {total:,} {noun}; "
        f"<code>wf inspect {esc(run_id)} --json</code> or "
        f"<a href='{esc(api)}'><code>GET {esc(api)}</code></a> has them all.</p>"
    )


def _shown_by_name(damaged: list[Fault]) -> str:
    """A notice naming each damaged stream the page shows all the same (``Fault.shown_as``:
    its name file is damaged, it is read by the name its journal wrote): not left out."""
    if not damaged:
        return ""
    said = "".join(
        f"<p class='warn-text'>Stream <span class=\"mono\">{line(fault.shown_as)}</span>: "
        f"{SHOWN_BY_NAME} ({esc(fault.reason)}). <code>wf store verify</code> names every "
        "damaged item.</p>"
        for fault in damaged
    )
    return f'<div class="damaged" role="status">{said}</div>'


def run_body(
    detail: RunDetail,
    why: Explanation,
    csrf: str,
    *,
    message: str = "",
    error: str = "",
    logs: str = "",
) -> str:
    """The run page's content."""
    run = detail.run
    streams_out = [f for f in detail.damaged if f.kind == "stream" and not f.shown_as]
    shown_by_name = [f for f in detail.damaged if f.kind == "stream" and f.shown_as]
    others = [fault for fault in detail.damaged if fault.kind != "stream"]
    flash = ""
    if message:
        flash = f'<div class="flash ok" role="status">{esc(message)}</div>'
    if error:
        flash = f'<div class="flash bad" role="alert">{esc(error)}</div>'
    return f"""
<nav class="crumbs"><a href="/">Runs</a> / <span class="mono">{esc(run.id)}</span></nav>
{flash}
{damaged_notice(others, "hook", "whose record cannot be read")}
{damaged_notice(streams_out, "stream", "whose files cannot be read")}
{_shown_by_name(shown_by_name)}
<div id="live-header" data-fragment>{header(detail, why, csrf)}</div>
<section class="card">
  <h2>Timeline</h2>
  <div id="live-timeline" data-fragment>{timeline(detail)}</div>
</section>
<div class="grid">
  <section class="card wide">
    <h2>Steps</h2>
    <div id="live-steps" data-fragment>{steps_table(detail)}</div>
  </section>
  <section class="card">
    <h2>Hooks</h2>
    <div id="live-hooks" data-fragment data-key="{esc(_hooks_key(detail))}">
      {hooks(detail, csrf)}</div>
  </section>
  <section class="card">
    <h2>Related runs</h2>
    <div id="live-family" data-fragment>{family(detail)}</div>
  </section>
  <section class="card wide">
    <h2>Streams</h2>
    <div id="live-streams" data-fragment data-key="{esc(_streams_key(detail))}">
      {streams(detail)}</div>
  </section>
  <section class="card wide" id="logs">
    <h2>Logs</h2>
    <div id="live-logs" data-fragment>{logs or '<p class="empty">No step logs.</p>'}</div>
  </section>
  <section class="card wide">
    <h2>Values</h2>
    <div id="live-values" data-fragment>{values(detail)}</div>
  </section>
  <section class="card wide">
    <h2>Events <span class="count">{len(detail.events)}</span></h2>
    <div id="live-events" data-fragment>{events_table(detail)}</div>
  </section>
</div>
"""


def header(detail: RunDetail, why: Explanation, csrf: str) -> str:
    """Id, workflow, status, why it is there, times, parent, and the actions."""
    run = detail.run
    status = run.status.value
    lines = "".join(
        f'<li class="why {reason.tone}">{text}</li>'
        for reason in why.reasons
        if (text := reason_words(reason, detail.now)) is not None
    ) + "".join(
        f'<li class="why recovery {"error" if entry["stalled"] else "warn"}">'
        f"{when(entry.get('ts'))}: {line(recovery_text(entry))}</li>"
        for entry in detail.recoveries[-_RECOVERIES_SHOWN:]
    )
    actions = []
    base = f"/runs/{segment(run.id)}"
    if not run.status.is_terminal:
        actions.append(
            action_button(
                base + "/cancel", "Cancel", csrf, tone="danger", confirm="Cancel this run?"
            )
        )
    sleeping = any(r.kind == "sleep" and r.status == "sleeping" for r in detail.steps)
    # A wake-up time alone is no sleep to end (a hook under ``wf.timeout``, a step's retry):
    # the button is shown only where the admin API would send the wake-up.
    if sleeping or (
        status == "suspended" and run.wake_at is not None and nothing_to_wake(run) is None
    ):
        actions.append(action_button(base + "/wake", "Wake", csrf))
    if status == "failed":
        actions.append(action_button(base + "/retry", "Retry", csrf, tone="primary"))
    parent = ""
    if detail.parent is not None:
        pid = detail.parent.id
        parent = f' · parent <a class="mono" href="/runs/{segment(pid)}">{esc(pid)}</a>'
    if run.deployment is not None:
        parent += f' · deployment <span class="mono">{line(run.deployment)}</span>'
    took = (run.updated_at if run.status.is_terminal else detail.now) - run.created_at
    resumed = f" · resumed {run.resumes}×" if run.resumes else ""
    if detail.recoveries:
        resumed += f" · recovered {len(detail.recoveries)}× from a dead driver"
    return f"""
<section class="runhead">
  <div class="title">
    <h1 class="mono">{esc(run.id)}</h1>
    <span class="workflow">{line(run.workflow)}</span>
    <span id="run-status" data-status="{esc(status)}"
      data-updated="{run.updated_at!r}">{badge(status)}</span>
    <div class="actions">{"".join(actions)}</div>
  </div>
  <ul class="whys">{lines}</ul>
  <p class="meta">created {when(run.created_at)} · {"took" if run.status.is_terminal else "for"}
  {duration(took)} · updated {when(run.updated_at)}{resumed}{parent}</p>
</section>"""


_RECOVERIES_SHOWN = 5
"""Recoveries from dead drivers the page lists (the latest)."""


_HINTS = {"hook": "send it a payload below", "child": "open it below"}


def reason_words(reason: Reason, now: float) -> str | None:
    """One fact of the explanation in words (shared with the terminal UI), as HTML: its
    recorded text escaped (``line``), a moment it says "until" or "at" of a ``<time>`` shown in
    the reader's local time, with its distance from now (as the terminal UI says it):
    ``Sleeping until <time …>…</time> (in 50m51s).``, never "until in 50m51s"."""
    from wf.admin._words import sentence

    moments = Moments()

    def moment(ts: float | None, now: float) -> str:
        if ts is None:
            return "–"
        delta = ts - now
        if abs(delta) < 0.5:
            relative = "now"
        else:
            relative = f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"
        return f"{moments.mark(ts)} ({relative})"

    text = sentence(reason, now, at=moment, hints=_HINTS)
    return None if text is None else moments.html(text)


# -- the timeline ---------------------------------------------------------------------------


def _bounds(detail: RunDetail) -> tuple[float, float]:
    run = detail.run
    start = run.created_at
    ends = [run.updated_at]
    for row in detail.steps:
        ends.append(row.finished_at or row.started_at)
        ends.extend(a.finished_at or a.started_at for a in row.spans)
    end = max(ends) if run.status.is_terminal else max([*ends, detail.now])
    return start, max(end, start + 0.001)


def timeline(detail: RunDetail) -> str:
    """A waterfall: one row per operation, a bar per step attempt, backoffs and sleeps."""
    if not detail.steps:
        return '<p class="empty">No operations yet.</p>'
    start, end = _bounds(detail)
    span = end - start
    live_end = detail.now if not detail.run.status.is_terminal else end

    def bar(a: float, b: float | None, tone: str, title: str, extra: str = "") -> str:
        b = live_end if b is None else b
        left = max(0.0, (a - start) / span * 100)
        width = max(0.35, (min(b, end) - a) / span * 100)
        width = min(width, 100 - left) if left < 100 else 0.35
        return (
            f'<span class="bar {tone}{extra}" style="left:{left:.3f}%;width:{width:.3f}%"'
            f' title="{one_line(title)}"></span>'
        )

    rows = []
    shown = detail.steps[-SHOWN_OPERATIONS:]
    for row in shown:
        bars = _bars(row, bar, live_end)
        label = f'<span class="kind {row.kind}">{row.kind}</span> {line(_label(row))}'
        took = duration(row.duration) if row.duration is not None else ""
        rows.append(
            f'<div class="tl-row" data-op="{row.op}">'
            f'<div class="tl-label" title="{line(row.name)}">'
            f'{label}</div><div class="tl-track">{bars}</div>'
            f'<div class="tl-took">{took}</div></div>'
        )
    ticks = "".join(
        f'<span class="tick" style="left:{p}%">{duration(span * p / 100)}</span>'
        for p in (0, 25, 50, 75, 100)
    )
    legend = (
        '<div class="legend"><span class="bar ok"></span>completed'
        '<span class="bar warn"></span>failed, retried<span class="bar gap"></span>backoff'
        '<span class="bar bad"></span>failed<span class="bar run"></span>running'
        '<span class="bar wait"></span>sleep / waiting'
        '<span class="bar mute"></span>cancelled / interrupted</div>'
    )
    return (
        _left_out(len(shown), len(detail.steps), "operations", detail.run.id)
        + f'<div class="timeline"><div class="tl-axis"><div></div><div class="tl-ticks">{ticks}'
        f"</div><div></div></div>{''.join(rows)}</div>{legend}"
    )


def _label(row: Operation) -> str:
    if row.kind == "step" and row.attempts > 1:
        return f"{row.name} ×{row.attempts}"
    return row.name


def _bars(row: Operation, bar: Any, live_end: float) -> str:
    out = []
    if row.kind == "step" and row.spans:
        for index, attempt in enumerate(row.spans):
            tone = {
                "completed": "ok",
                "retried": "warn",
                "failed": "bad",
                "running": "run",
                "interrupted": "mute",
                "cancelled": "mute",  # ended with its run: never drawn as still running
            }.get(attempt.status, "run")
            took = duration((attempt.finished_at or live_end) - attempt.started_at)
            title = f"attempt {attempt.number}: {attempt.status} ({took})"
            if attempt.error:
                title += f" — {error_text(attempt.error)}"
            out.append(bar(attempt.started_at, attempt.finished_at, tone, title))
            if attempt.status == "retried" and attempt.finished_at is not None:
                following = row.spans[index + 1] if index + 1 < len(row.spans) else None
                gap_end = following.started_at if following else (attempt.retry_at or live_end)
                out.append(
                    bar(attempt.finished_at, min(gap_end, live_end), "gap", "backoff before retry")
                )
        return "".join(out)
    tone = {"sleep": "wait", "hook": "wait", "child": "run"}.get(row.kind, "run")
    if row.status in ("completed", "done", "received"):
        tone = "ok" if row.kind != "sleep" else "wait"
    if row.status in ("failed",):
        tone = "bad"
    if row.status in ("cancelled", "interrupted"):
        tone = "mute"
    end = row.finished_at
    if end is None and row.kind == "sleep" and row.until is not None:
        end = min(row.until, live_end)
    title = f"{row.kind} {row.name}: {row.status}"
    striped = " striped" if row.finished_at is None else ""
    drawn: str = bar(row.started_at, end, tone, title, striped)
    return drawn


# -- tables ---------------------------------------------------------------------------------


def steps_table(detail: RunDetail) -> str:
    """Every operation: kind, name, status, attempts, start, duration, error or deadline."""
    if not detail.steps:
        return '<p class="empty">No operations yet.</p>'
    rows = []
    shown = detail.steps[-SHOWN_OPERATIONS:]
    for row in shown:
        if row.kind == "child":
            name = f'<a class="mono" href="/runs/{segment(row.name)}">{line(row.name)}</a>'
        else:
            name = line(row.name)
        detail_text = clip(error_text(row.error), SHOWN_LINE)  # the cell and its title
        if detail_text and row.status == "completed":
            detail_text = "earlier attempt: " + detail_text
        moments = Moments()  # a sleep's end: shown in the reader's local time, as every time
        if row.kind == "sleep" and row.until is not None and not detail_text:
            detail_text = "until " + moments.mark(row.until)
        rows.append(
            f"<tr><td class='num'>{row.op}</td><td>{row.kind}</td><td>{name}</td>"
            f"<td>{badge(row.status)}</td><td class='num'>{row.attempts or ''}</td>"
            f"<td>{when(row.started_at)}</td><td class='num'>{duration(row.duration)}</td>"
            f"<td class='info' title='{moments.title(detail_text)}'>"
            f"{moments.html(detail_text)}</td></tr>"
        )
    return (
        _left_out(len(shown), len(detail.steps), "operations", detail.run.id)
        + "<table><thead><tr><th class='num'>op</th><th>kind</th><th>name</th><th>status</th>"
        "<th class='num'>attempts</th><th>started</th><th class='num'>duration</th>"
        f"<th>error / until</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + _errors(detail)
    )


def _errors(detail: RunDetail) -> str:
    if not detail.errors:
        return ""
    items = []
    for failure in detail.errors:
        where = (
            f"step “{failure.name}” attempt {failure.attempt}" if failure.op is not None else "run"
        )
        retried = " (retried)" if failure.retried else ""
        full = f"/api/v1/runs/{segment(detail.run.id)}?events=false"  # its ``errors`` whole
        message, message_size = cut(failure.message or "")
        traceback, traceback_size = cut(failure.traceback or "")
        trace = (
            f"<pre class='trace'>{esc(visible(traceback, newlines=True))}</pre>"
            if traceback
            else ""
        )
        items.append(
            f"<details><summary>{when(failure.ts)} {line(where)}{retried}: "
            f"<b>{line(failure.type)}</b>: {line(message)}</summary>"
            f"{cut_note(message_size, full)}{trace}{cut_note(traceback_size, full)}</details>"
        )
    return f"<h3>Errors</h3><div class='errors'>{''.join(items)}</div>"


def events_table(detail: RunDetail) -> str:
    """The journal (its latest ``SHOWN_EVENTS``), newest last."""
    rows = []
    first = max(0, len(detail.events) - SHOWN_EVENTS)
    for index, event in enumerate(detail.events[first:], start=first):
        rest = {k: v for k, v in event.items() if k not in _EVENT_NOISE}
        # Its JSON text, control and bidi characters as JSON escapes (``\\u202e``): the cell
        # its start, the tooltip more (never a big value whole: ``values`` links to it).
        text = json.dumps(_start_of(rest), ensure_ascii=False, default=str)
        short = visible_json(clip(text, 160))
        title = visible_json(clip(text, SHOWN_LINE))
        rows.append(
            f"<tr><td class='num'>{index}</td><td>{when(event.get('ts'))}</td>"
            f"<td class='mono'>{one_line(event.get('type'))}</td>"
            f"<td class='mono info' title='{esc(title)}'>{esc(short)}</td></tr>"
        )
    return (
        _left_out(len(detail.events) - first, len(detail.events), "events", detail.run.id)
        + "<div class='scroll'><table class='events'><thead><tr><th class='num'>#</th>"
        "<th>time</th><th>type</th><th>details</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _start_of(value: Any, keep: int = SHOWN_LINE + 1) -> Any:
    """``value`` cut to about its JSON's first ``keep`` characters (a journal row shows no
    more), without encoding or copying megabytes it would not show: one budget of ``keep``
    for the whole walk, each text (a key too) charged its length and quotes, each item at
    least one character, so its cost is bounded by ``keep`` however wide or deep the value.
    Its JSON starts as the whole value's does; cut, it is longer than ``keep - 1``
    characters."""
    left = keep

    def walk(item: Any) -> Any:
        nonlocal left
        if isinstance(item, str):
            text = item[: max(left, 0)]
            left -= len(text) + 2
            return text
        if isinstance(item, list | tuple):
            left -= 2
            kept = []
            for each in item:
                if left <= 0:
                    break
                left -= 1
                kept.append(walk(each))
            return kept
        if isinstance(item, dict):
            left -= 2
            shown: dict[Any, Any] = {}
            for key, each in item.items():
                if left <= 0:
                    break
                left -= 1
                key = walk(key)
                if key in shown:  # a key cut to one shown already: the rest is left out
                    break
                shown[key] = walk(each) if left > 0 else None
            return shown
        left -= 1
        return item

    return walk(value)


def values(detail: RunDetail) -> str:
    """The run's input and output (or error), and each step's recorded result."""
    run = detail.run
    api = f"/api/v1/runs/{segment(run.id)}"
    # Each value once, cut past ``SHOWN_VALUE`` characters with a link to the API's endpoint
    # that has it whole: the detail (input, error: the record's, whatever the run's end), the
    # result (output), the journal's event.
    parts = [f"<h3>Input</h3>{pretty(run.input, full=api + '?events=false')}"]
    if run.status.value == "completed":
        parts.append(f"<h3>Output</h3>{pretty(run.output, full=api + '/result')}")
    elif run.error:
        error = {k: run.error.get(k) for k in ("type", "message")}
        parts.append(f"<h3>Error</h3>{pretty(error, full=api + '?events=false')}")
    results = [
        (index, e.get("op"), e.get("name"), e.get("result"))
        for index, e in enumerate(detail.events)
        if e.get("type") == "step_completed"
    ]
    if results:
        shown = results[-SHOWN_OPERATIONS:]
        items = "".join(
            f"<details><summary>op {op} · {line(name)}</summary>"
            f"{pretty(result, full=f'{api}/events?start={index}&limit=1')}</details>"
            for index, op, name, result in shown
        )
        left_out = _left_out(len(shown), len(results), "step results", run.id)
        parts.append(f"<h3>Step results</h3>{left_out}{items}")
    return "".join(parts)


def _hooks_key(detail: RunDetail) -> str:
    return ",".join(sorted(h.token for h in detail.hooks))


def hooks(detail: RunDetail, csrf: str) -> str:
    """Live hooks, each with a form that sends it a payload (checked against its schema)."""
    if not detail.hooks:
        done = [r for r in detail.steps if r.kind == "hook"]
        if not done:
            return '<p class="empty">No hooks.</p>'
        return "".join(
            f'<p class="hook-done"><span class="mono">{line(r.name)}</span> {badge(r.status)}</p>'
            for r in done
        )
    out = []
    rows = {r.name: r for r in detail.steps if r.kind == "hook"}
    for hook in detail.hooks:
        schema = (hook.schema or {}).get("json") or {}
        kind = (hook.schema or {}).get("type") or "any"
        webhook = (hook.schema or {}).get("webhook")
        row = rows.get(hook.token)
        state = badge(row.status) if row else ""
        hint = ""
        # Its schema, cut if big, links to the hooks API, which has it whole.
        shown_schema = pretty(schema, full=f"/api/v1/hooks?run={segment(detail.run.id)}")
        if isinstance(webhook, dict):
            method = esc(webhook.get("method"))
            hint = f'<p class="dim">webhook · {method} {esc(webhook_path(hook.token))}</p>'
        out.append(
            f"""<form class="hook" method="post" action="/hooks/{segment(hook.token)}/resume"
      data-schema="{esc(json.dumps(schema))}">
  {csrf_field(csrf)}
  <input type="hidden" name="run" value="{esc(detail.run.id)}">
  <div class="hook-head"><span class="mono">{line(hook.token)}</span> {state}
    <span class="dim">payload: {esc(kind)}</span></div>
  {hint}
  <details class="schema"><summary>payload schema</summary>{shown_schema}</details>
  <textarea name="payload" rows="4" spellcheck="false" aria-label="payload for {esc(hook.token)}"
    placeholder='{esc(_example(schema))}'></textarea>
  <div class="hook-foot"><span class="hook-error" aria-live="polite"></span>
  <button class="btn primary" type="submit">Send payload</button></div>
</form>"""
        )
    return "".join(out)


def _example(schema: dict[str, Any]) -> str:
    props = schema.get("properties")
    if not isinstance(props, dict):
        return "null"
    sample = {}
    for name, spec in props.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        sample[name] = {"boolean": True, "integer": 1, "number": 1.5, "string": "…"}.get(str(kind))
    return json.dumps(sample, ensure_ascii=False)


def family(detail: RunDetail) -> str:
    """The parent and the child runs, as links."""
    items = []
    if detail.parent is not None:
        p = detail.parent
        items.append(
            f'<li><span class="rel">parent</span> <a class="mono" href="/runs/{segment(p.id)}">'
            f"{esc(p.id)}</a> {line(p.workflow or '')} {badge(p.status) if p.status else ''}</li>"
        )
    for child in detail.children:
        items.append(
            f'<li><span class="rel">child</span> <a class="mono" href="/runs/{segment(child.id)}">'
            f"{esc(child.id)}</a> {line(child.workflow or '')} "
            f"{badge(child.status) if child.status else ''}</li>"
        )
    if not items:
        return '<p class="empty">No parent or child runs.</p>'
    return f'<ul class="family">{"".join(items)}</ul>'


def _streams_key(detail: RunDetail) -> str:
    return ",".join(s.name for s in detail.streams if not s.name.startswith(_HIDDEN_STREAM))


def streams(detail: RunDetail) -> str:
    """A live viewer per byte stream (text or hex), filled by the script."""
    shown = [s for s in detail.streams if not s.name.startswith(_HIDDEN_STREAM)]
    if not shown:
        return '<p class="empty">No byte streams.</p>'
    out = []
    for stream in shown:
        src = f"/api/v1/runs/{segment(detail.run.id)}/streams/{segment(stream.name)}"
        state = line(stream_state(dataclasses.asdict(stream)))  # names a step: anyone's text
        out.append(
            f"""<div class="stream" data-src="{src}" data-name="{esc(stream.name)}">
  <div class="stream-head"><span class="mono">{line(stream.name)}</span>
    <span class="dim stream-state">{stream.chunks} chunk(s), {state}</span>
    <span class="stream-size dim"></span>
    <div class="seg"><button type="button" class="on" data-view="text">text</button>
    <button type="button" data-view="hex">hex</button></div></div>
  <pre class="stream-text" tabindex="0"></pre>
  <pre class="stream-hex" hidden tabindex="0"></pre>
</div>"""
        )
    return "".join(out)
