"""HTML of the web UI: the page frame and the small pieces pages are made of.

Plain functions returning strings; every value from a run goes through ``esc``. The pages are
whole documents that work without JavaScript; ``static/app.js`` makes them live (server-sent
events, then the changed parts fetched again) and streams byte streams as they grow.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wf.admin import _words as _format
from wf.store._limits import BEYOND, datetime_of

if TYPE_CHECKING:
    from starlette.responses import HTMLResponse

    from wf.store import Fault

STATUS_TONE = {
    "pending": "info",
    "running": "run",
    "suspended": "wait",
    "completed": "ok",
    "failed": "bad",
    "cancelled": "mute",
    "retrying": "wait",
    "sleeping": "wait",
    "waiting": "wait",
    "received": "ok",
    "disposed": "mute",
    "interrupted": "mute",
    "done": "ok",
}


_SURROGATE = re.compile("[\ud800-\udfff]")


def esc(value: Any) -> str:
    """Text made safe for HTML content and attribute values. A lone surrogate (text a run
    recorded, a request sent), which no page can carry as UTF-8, is shown as its JSON escape
    (``\\ud800``), as the CLI shows it."""
    text = html.escape("" if value is None else str(value), quote=True)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def line(value: Any) -> str:
    """Recorded text for a one-line place (a table cell, a title, a sentence): its control
    characters shown as escapes (``\\n``, ``\\x1b``), as the CLI and the terminal UI show
    them (``wf.admin._words.visible``), then escaped for HTML (``esc``)."""
    return esc(_format.visible("" if value is None else value))


class Moments:
    """Moments in words from ``wf.admin._words`` (a sentence, a runs list's info), put in as
    ``<time>`` elements, so that the script shows them in the reader's local time as every
    other time on a page. The words take a marker for each moment (``mark``, passed as their
    ``at``); ``html`` escapes the text (``line``) and puts each moment's element in. A marker is
    private-use characters around a key drawn per instance: recorded text cannot forge one."""

    def __init__(self) -> None:
        import secrets

        self._key = secrets.token_hex(8)
        self._moments: list[float] = []

    def mark(self, ts: float) -> str:
        """The marker of ``ts`` in the words."""
        self._moments.append(ts)
        return f"\ue000{self._key}:{len(self._moments) - 1}\ue000"

    def html(self, text: str) -> str:
        """``text`` as HTML (``line``), each marker replaced by its moment's ``<time>``."""
        marker = re.compile(f"\ue000{self._key}:(\\d+)\ue000")
        return marker.sub(lambda m: when(self._moments[int(m.group(1))]), line(text))

    def title(self, text: str) -> str:
        """``text`` for an attribute value (a ``title``): each moment in ISO 8601, UTC."""
        marker = re.compile(f"\ue000{self._key}:(\\d+)\ue000")
        return marker.sub(lambda m: _format.iso_time(self._moments[int(m.group(1))]), line(text))


def url(path: str, **query: Any) -> str:
    """A path with a query string of the non-empty values."""
    pairs = [(k, str(v)) for k, v in query.items() if v not in (None, "", False)]
    return path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")


def segment(name: Any) -> str:
    """A recorded name (hook token, stream name, run id) as one URL path segment: every
    character but the unreserved ones percent-encoded, ``/`` ``?`` ``#`` ``%`` included, so the
    name can neither end the path early nor climb out of it (``../``). The routes decode it."""
    return urllib.parse.quote(str(name), safe="")


def badge(status: str) -> str:
    """A status as a coloured pill."""
    return f'<span class="badge {STATUS_TONE.get(status, "info")}">{esc(status)}</span>'


def when(ts: float | None) -> str:
    """A moment: UTC in the markup (labelled, for a page read without the script), shown in
    the reader's local time (and relative) by the script."""
    if ts is None:
        return '<span class="dim">–</span>'
    moment = datetime_of(ts)
    if moment is None:
        return f"<time>{BEYOND}</time>"
    iso = moment.isoformat(timespec="milliseconds")
    return f'<time datetime="{iso}" title="{iso}">{moment:%Y-%m-%d %H:%M:%S} UTC</time>'


def duration(seconds: float | None) -> str:
    """``12ms`` below a second, else as the command line says it (``4.5s``, ``3m07s``…)."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{max(0.0, seconds) * 1000:.0f}ms"
    return _format.duration(seconds)


def error_text(error: dict[str, Any] | None) -> str:
    """``Type: message`` of a recorded error, wf's own named as users import them."""
    text = _format.error_text(error)
    return "wf." + text.removeprefix("wf._exceptions.") if text.startswith("wf._exc") else text


SHOWN_VALUE = 64 * 1024
"""Characters of a value's text (its indented JSON, an error's message or traceback) a page
shows; past it the page says how big the whole is and where to read it (``cut_note``). A step
returning 20 MB made a 40 MB run page (the output and the step's result) that took 5.7 s to
build."""

SHOWN_LINE = 2000
"""Characters of recorded text a one-line place (a table cell, a tooltip) shows."""


def cut(text: str, limit: int = SHOWN_VALUE) -> tuple[str, int]:
    """``text``'s first ``limit`` characters, and the size in bytes (UTF-8) of the whole if
    it was cut (else 0)."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text.encode("utf-8", "surrogatepass"))


def cut_note(size: int, link: str) -> str:
    """The note under a value ``cut`` left ``size`` bytes of: where the whole value is."""
    if not size:
        return ""
    return (
        f'<p class="cut warn-text">cut: {size:,} bytes, full value at '
        f'<a href="{esc(link)}"><code>GET {esc(link)}</code></a></p>'
    )


def pretty(value: Any, *, full: str = "") -> str:
    """A JSON value, indented, escaped, in a ``pre`` block. Its control and bidi characters
    (and lone surrogates, which no page can carry as UTF-8) show as their JSON escapes
    (``\\u202e``, ``\\ud800``), as the CLI shows them: the same JSON value. Past
    ``SHOWN_VALUE`` characters it is cut, with a note linking to ``full``, the API's
    endpoint that has it whole."""
    text, size = cut(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    shown = _format.visible_json(text) + ("…" if size else "")
    return f'<pre class="json">{esc(shown)}</pre>' + cut_note(size, full)


def clip(text: str, limit: int = SHOWN_LINE) -> str:
    """``text``'s first ``limit`` characters, then ``…`` if it was longer."""
    return text if len(text) <= limit else text[:limit] + "…"


def one_line(value: Any, limit: int = SHOWN_LINE) -> str:
    """Recorded text for a one-line place, as ``line`` shows it, its first ``limit``
    characters (then ``…``)."""
    return line(clip("" if value is None else str(value), limit))


def csrf_field(token: str) -> str:
    """The hidden CSRF field every state-changing form carries."""
    return f'<input type="hidden" name="csrf" value="{esc(token)}">'


def action_button(path: str, label: str, csrf: str, *, tone: str = "", confirm: str = "") -> str:
    """A one-button form posting to ``path``."""
    ask = f' data-confirm="{esc(confirm)}"' if confirm else ""
    return (
        f'<form method="post" action="{esc(path)}" class="inline"{ask}>{csrf_field(csrf)}'
        f'<button type="submit" class="btn {tone}">{esc(label)}</button></form>'
    )


def page(
    title: str,
    body: str,
    *,
    store: str = "",
    live: str = "",
    nav: str = "runs",
    signout: str = "",
) -> str:
    """A whole document: the bar (``signout``: its sign-out form), the content, the script."""
    live_attr = f' data-live="{esc(live)}"' if live else ""
    links = "".join(
        f'<a class="{"on" if nav == key else ""}" href="{href}">{label}</a>'
        for key, href, label in (
            ("runs", "/", "Runs"),
            ("queues", "/queues", "Queues"),
            ("schedules", "/schedules", "Schedules"),
        )
    )
    links = links if nav else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} · wf</title>
<link rel="stylesheet" href="/static/app.css">
<link rel="icon" href="data:,">
</head>
<body{live_attr}>
<header class="bar">
  <a class="brand" href="/"><span class="logo">wf</span> durable workflows</a>
  <nav>{links}</nav>
  <span class="store" title="the store this server serves">{esc(store)}</span>
  <span class="live-dot" title="live updates"></span>{signout}
</header>
<main>
{body}
</main>
<script src="/static/app.js" defer></script>
</body>
</html>
"""


PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; script-src 'self'; frame-ancestors 'none'",
}
"""The headers every page goes out with."""


def html_response(
    text: str, status: int = 200, headers: Mapping[str, str] | None = None
) -> HTMLResponse:
    """A page as the answer, with ``PAGE_HEADERS`` (and ``headers``: a 405's ``Allow``)."""
    from starlette.responses import HTMLResponse

    return HTMLResponse(text, status_code=status, headers={**PAGE_HEADERS, **(headers or {})})


def error_page(status: int, message: str, headers: Mapping[str, str] | None = None) -> HTMLResponse:
    """The web UI's answer to a request it refuses: a page saying why (``message``), with a
    way back to the runs."""
    title = f"{status} {_reason(status)}"
    body = (
        f'<section class="card"><h1>{esc(title)}</h1>'
        f'<div class="flash bad" role="alert">{esc(message or _reason(status))}</div>'
        '<p><a href="/">All runs</a></p></section>'
    )
    return html_response(page(title, body, nav=""), status, headers)


def _reason(status: int) -> str:
    import http

    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


_NOTICE_ITEMS = 20
"""Damaged items a notice names one by one; the rest are counted (thousands of stray names)."""


def damaged_notice(damaged: Sequence[Fault], noun: str, why: str) -> str:
    """A notice naming each damaged item a page left out (none: nothing): ``noun`` is what
    they are (``run``), ``why`` what that means (``whose record cannot be read``). Other items
    the page passed over (a stray name in the store's index) are counted apart; past
    ``_NOTICE_ITEMS``, the rest are counted, not named."""
    if not damaged:
        return ""
    from wf.admin._words import damaged_counts

    items = "".join(
        f'<li><span class="mono">{esc(fault.item)}</span>: {esc(fault.reason)}</li>'
        for fault in damaged[:_NOTICE_ITEMS]
    )
    if len(damaged) > _NOTICE_ITEMS:
        items += f"<li>and {len(damaged) - _NOTICE_ITEMS:,} more</li>"
    own, others = damaged_counts(damaged, noun)
    said = []
    if own:
        said.append(f"{own} damaged {noun}{'s' if own > 1 else ''}, {why}")
    if others:
        said.append(f"{others} other damaged item{'s' if others > 1 else ''} passed over")
    return f"""
<div class="damaged" role="status">
  <p class="warn-text">Left out of this page: {"; ".join(said)}. <code>wf store verify</code>
  names every damaged item.</p>
  <ul>{items}</ul>
</div>"""
