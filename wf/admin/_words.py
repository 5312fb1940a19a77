"""Words for people, below every front end: times, durations, statuses, errors, what a run
waits for, recoveries, replay checks and ``wf.admin.explain``'s reasons.

The CLI, the terminal UI, the web UI and ``wf dev`` say things alike because they all take
their words from here; none of them imports another's renderer.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, assert_never

from wf.store._limits import BEYOND, datetime_of
from wf.store._limits import iso_time as iso_time  # for the front ends: the kernel's own

if TYPE_CHECKING:
    from collections.abc import Sequence

    from wf.admin._model import Explanation, Reason
    from wf.store import Fault, RunRecord

STATUS_STYLE = {
    "pending": "cyan",
    "running": "blue",
    "suspended": "yellow",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
    # step statuses
    "retrying": "yellow",
    "sleeping": "yellow",
    "interrupted": "magenta",
    "done": "green",
}


def damaged_counts(damaged: Sequence[Fault], noun: str) -> tuple[int, int]:
    """How many of the damaged items a page left out are ``noun``s (``run``: a run whose
    record cannot be read; ``schedule``: a ``schedule file`` too), and how many are other
    items it passed over (a stray name in the store's index): counted apart, so that a
    bucket of stray names is not said as that many damaged runs."""
    own = sum(1 for fault in damaged if noun in fault.kind.split())
    return own, len(damaged) - own


SHOWN_BY_NAME = "its name file is damaged; shown by the name its journal wrote"
"""What a run's page says of a stream it shows although its name file is damaged
(``Fault.shown_as``: the name it is shown under), rather than that it was left out."""


def styled_status(status: str) -> str:
    """``status`` with rich markup for its colour (a status wf does not know, from a server
    of another version, as plain text)."""
    style = STATUS_STYLE.get(status)
    if style:
        return f"[{style}]{status}[/{style}]"
    from rich.markup import escape

    return escape(visible(status))


def timestamp(ts: float | None) -> str:
    """Epoch seconds as local wall time, ``2025-01-31 14:03:07``."""
    if ts is None:
        return "-"
    when = datetime_of(ts, None)
    return BEYOND if when is None else when.strftime("%Y-%m-%d %H:%M:%S")


def clock_time(ts: float | None) -> str:
    """Epoch seconds as local time of day, with the date only when it is not today."""
    if ts is None:
        return "-"
    when = datetime_of(ts, None)
    if when is None:
        return BEYOND
    if when.date() == _dt.date.today():
        return when.strftime("%H:%M:%S")
    return when.strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """A short human duration: ``0.12s``, ``4.5s``, ``3m07s``, ``2h05m``, ``3d04h``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def public_type(name: str) -> str:
    """``wf._exceptions.FatalError`` (older journals) -> ``wf.FatalError``."""
    return (
        "wf." + name.removeprefix("wf._exceptions.") if name.startswith("wf._exceptions.") else name
    )


def error_text(error: dict[str, Any] | None) -> str:
    """``Type: message`` of a recorded error (the type without its module for builtins; wf's
    own errors as users import them, ``wf.FatalError``, also in journals written before)."""
    if not error:
        return ""
    kind = public_type(str(error.get("type") or "Error"))
    message = str(error.get("message") or "")
    return f"{kind}: {message}" if message else kind


_UNSEEN = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f"  # C0 but tab, DEL, C1: ESC, CSI, BEL, BS, CR...
    "\u061c\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff"  # bidi, zero-width
    "\u2028\u2029\ud800-\udfff]"  # line/paragraph separators, lone surrogates
)


_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, newlines: bool = False) -> str:
    """``text`` safe to write to a terminal: every control character shown as its escape.

    Recorded text (error messages, step names, hook tokens, workflow names, values, logs) is
    anyone's: an ESC in it would set the terminal's title, clear the screen or plant a link,
    a CR or BS would overwrite what came before, a bidi override would reverse what follows.
    So C0 and C1 controls (but tab), bidi controls, zero-width characters, line separators
    and lone surrogates become ``\\x1b``, ``\\r``, ``\\u202e``..., the way Python writes them.
    ``newlines`` keeps line breaks (``\\r\\n`` read as one); else they show as ``\\n``
    too, so the text stays on one line. Rich markup is not escaped here: a front end that
    parses markup passes the text as ``rich.text.Text``.
    """
    shown = str(text)
    if newlines:
        return "\n".join(
            _UNSEEN.sub(_escaped, line) for line in shown.replace("\r\n", "\n").split("\n")
        )
    return _UNSEEN.sub(_escaped, shown)


def visible_json(text: str) -> str:
    """JSON text (``json.dumps``) with the characters ``visible`` shows written as ``\\uXXXX``
    escapes: the same JSON value, safe on a terminal. Its line breaks are layout, kept."""
    return _UNSEEN.sub(
        lambda m: m.group() if m.group() == "\n" else f"\\u{ord(m.group()):04x}", text
    )


SHOWN_TOKEN = 8
"""Characters of a long hook token a log line shows."""


def short_token(token: str) -> str:
    """A hook token as a log line shows it: a long one (a generated token, and a webhook's
    token is all that authorises its URL) by its first ``SHOWN_TOKEN`` characters; a short
    name (``approval``) whole."""
    return token if len(token) < 2 * SHOWN_TOKEN else token[:SHOWN_TOKEN] + "…"


_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with each lone surrogate written as
    its ``\\uXXXX`` escape: the same JSON value, which UTF-8 can carry (a step's output or a
    payload may hold one; writing it raw fails)."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


REPLAY_STYLE = {"ok": "green", "diverged": "red", "error": "red"}
"""Colour of each replay-check status (``wf inspect --replay``, the TUI's replay check)."""


def replay_detail(replays: dict[str, Any]) -> str:
    """What a replay check found beyond its status: where it diverged, or why it failed."""
    divergence = replays.get("divergence")
    if divergence:
        return (
            f"operation #{divergence['index']} recorded {divergence['recorded']}, "
            f"current code calls {divergence['current']} at {divergence['location']}"
        )
    if replays["status"] == "error":
        return str(replays.get("message", ""))
    return ""


def recovery_text(entry: dict[str, Any]) -> str:
    """One recovery from a dead driver (an entry of ``wf inspect --json``'s ``recoveries``)
    in words."""
    steps = ", ".join(
        f"{step.get('name')!r} (op {step.get('op')})" for step in entry.get("steps") or []
    )
    where = f" in step {steps}" if steps else ""
    then = "the run failed stalled" if entry.get("stalled") else "recovered"
    return (
        f"its driving process died{where}, {entry.get('in_a_row')} time(s) in a row without "
        f"progress; {then}"
    )


WAITS_SHOWN = 3
"""Waits ``waiting_text`` names before ``and N more``: 300 hooks still make one short line."""


_NO_SLEEP = frozenset({"hook", "child", "timeout", "retry"})
"""Waits a wake-up does not end (it ends sleeps)."""


def outside_only(record: RunRecord) -> bool:
    """True when the suspended run waits for nothing but hooks: no timer, child or retry that
    would end the wait by itself (``wf run`` then returns, unless ``--wait``)."""
    from wf.store import RunStatus

    waits = record.waiting_for or []
    return (
        record.status is RunStatus.SUSPENDED
        and record.wake_at is None
        and bool(waits)
        and all(item["kind"] == "hook" for item in waits)
    )


def nothing_to_wake(record: RunRecord) -> str | None:
    """Why a wake-up of this run would end nothing (a suspended run that waits on no sleep),
    with what does end its wait; None when it may."""
    from wf._events import read_waiting
    from wf.store import RunStatus

    waits = read_waiting(record.waiting_for) or []
    if record.status is not RunStatus.SUSPENDED or not waits:
        return None
    if not all(item["kind"] in _NO_SLEEP for item in waits):
        return None
    hooks = [str(item["target"]) for item in waits if item["kind"] == "hook"]
    then = f": `wf hook resume {hooks[0]} --data JSON` delivers its payload" if hooks else ""
    return (
        f"run {record.id} has no sleep to end: it waits for {waiting_text(waits)}{then}; "
        "nothing sent"
    )


def waiting_text(
    waiting_for: Any, *, limit: int | None = WAITS_SHOWN, at: Callable[[float], str] | None = None
) -> str:
    """What a suspended run waits for, in words: ``hook 'k1'; sleep until 2026-12-06 10:10:17``.

    Takes the record's or the ``run_suspended`` event's ``waiting_for`` (structured, or an older
    wf's sentence, shown as it is). Empty when there is nothing to say. Names the first ``limit``
    waits, then ``and N more`` (``limit=None``: all of them; ``wf inspect`` lists every hook).
    A moment is shown by ``at``: local wall time (``timestamp``) unless a front end shows its
    times otherwise (the web UI: in the reader's zone; a log line for shippers: ISO 8601, UTC).
    """
    from wf._events import read_waiting

    shown = at or timestamp
    parts = []
    for item in read_waiting(waiting_for) or ():
        kind, target, until = item["kind"], item["target"], item["until"]
        when = shown(until) if until is not None else None
        if kind == "text":
            parts.append(str(target))
        elif kind == "hook":
            parts.append(f"hook {target!r}")
        elif kind == "child":
            parts.append(f"child run {target}")
        elif kind == "sleep":
            parts.append(f"sleep until {when}" if when else "sleep")
        elif kind == "retry":
            parts.append(f"retry of step {target!r}")  # when: the run's wake-up time
        elif kind == "timeout":
            parts.append(f"timeout at {when}" if when else "timeout")
        elif kind == "resume":
            parts.append("resume (the driver stopped)")
        else:
            parts.append(str(kind))
    unique = list(dict.fromkeys(parts))
    if limit is not None and len(unique) > limit:
        return "; ".join(unique[:limit]) + f"; and {len(unique) - limit} more"
    return "; ".join(unique)


def run_info(record: RunRecord, *, at: Callable[[float], str] | None = None) -> str:
    """A runs list's info about one run, in words: what it waits for, when a delayed run is
    due (``due 2026-01-01 09:00:00``), its attempt (``attempt 2/3, retry of step 'charge'``),
    why it failed (``after 3 attempts: ValueError: boom``). Empty when there is nothing to
    say. Anyone's text (an error, a hook token): a front end escapes it as it shows it.
    Moments as ``waiting_text`` shows them (``at``)."""
    status = record.status.value
    if status == "failed":
        info = error_text(record.error)
        return f"after {record.attempt} attempts: {info}" if record.attempt > 1 else info
    info = waiting_text(record.waiting_for, at=at)
    if status == "pending" and record.wake_at is not None:
        info = f"due {(at or timestamp)(record.wake_at)}"
    if record.attempt > 1 and not record.status.is_terminal:
        info = f"attempt {record.attempt}/{record.max_attempts}" + (f", {info}" if info else "")
    return info


# -- the reasons of wf.admin.explain, one sentence each -----------------------------------
#
# A front end passes how it shows a moment (``at``) and its own hints for the reasons it can
# act on (the TUI: "press r to send it a payload"; the web UI: "send it a payload below").

Moment = Callable[[float | None, float], str]
"""How a front end shows a moment relative to now: ``at(ts, now)``."""


def _error(error: dict[str, object] | None) -> str:
    text = error_text(error)
    return "wf." + text.removeprefix("wf._exceptions.") if text.startswith("wf._exc") else text


def sentence(
    fact: Reason, now: float, *, at: Moment, hints: Mapping[str, str] | None = None
) -> str | None:
    """One reason in words (None for ``wakes``: the run's times say it already)."""
    hint = (hints or {}).get(fact.kind)
    kind = fact.kind
    if kind == "queued":
        return "Queued, not started yet: the next `wf worker` starts it."
    if kind == "held":
        ahead = f" ({fact.count} run(s) ahead of it)" if fact.count else ""
        return f"Pending: {fact.detail}{ahead}."
    if kind == "completed":
        return f"Completed in {duration(fact.took or 0.0)}."
    if kind == "cancelled":
        return f"Cancelled after {duration(fact.took or 0.0)}."
    if kind == "failed":
        where = ""
        if fact.name is not None:
            where = f" in step {fact.name!r} after {fact.attempt} attempt(s)"
        return f"Failed{where} with error {_error(fact.error)}"
    if kind == "driver_gone":
        return (
            "Driver process gone: nobody holds this run's lock. A worker will recover it, "
            f"replaying its journal ({fact.count} operation(s) done) without repeating them."
        )
    if kind == "step_running":
        attempt = f" (attempt {fact.attempt})" if (fact.attempt or 0) > 1 else ""
        verb = "Was running" if fact.stale else "Running"
        since = duration(now - (fact.since or now))
        return f"{verb} step {fact.name!r}{attempt} for {since}."
    if kind == "retrying":
        failed = fact.attempt or 0
        of = f" of {fact.max_attempts}" if fact.max_attempts else ""
        when = f" at {at(fact.at, now)}" if fact.at is not None else ""
        return (
            f"Retrying step {fact.name!r}: attempt {failed + 1}{of}{when}; "
            f"attempt {failed} failed with {_error(fact.error)}"
        )
    if kind == "sleeping":
        return f"Sleeping until {at(fact.at, now)}."
    if kind == "between":
        return "Running, between operations."
    if kind == "hook":
        return f"Waiting on hook `{fact.name}`" + (f": {hint}." if hint else ".")
    if kind == "child":
        state = f" (it is {fact.status})" if fact.status else ""
        return f"Waiting on child run {fact.name}{state}" + (f": {hint}." if hint else ".")
    if kind == "resume":
        return "The driver stopped (drain or reload): the next worker resumes it."
    if kind == "waiting":
        return f"Waiting for {fact.detail}."
    if kind == "suspended":
        return "Suspended."
    if kind == "due":
        return "Due now: the next worker resumes it."
    if kind == "no_timer":
        return "No timer: only a message (payload, result, wake) wakes it."
    if kind == "cancel_requested":
        return "Cancellation requested: applied when the run is next driven."
    if kind == "undelivered":
        return (
            f"{fact.count} message(s) not yet delivered ({', '.join(fact.kinds)}):"
            " the run is due, the next worker delivers them."
        )
    if kind == "unserved":
        return (
            f"No live worker serves deployment {fact.name}: the run waits for one "
            "(`wf deployments` lists them)."
        )
    if kind == "wakes":
        return None
    assert_never(kind)  # a kind added to ReasonKind needs its words here


# -- journal events, step logs and schedules -------------------------------------------------


def stream_state(info: Mapping[str, Any]) -> str:
    """How a stream stands (``{"closed", "complete"}`` of ``StreamInfo``), in the words every
    front end shows: open, closed, or incomplete (ended with its writer cut off)."""
    if info.get("closed") and info.get("complete") is False:
        step = info.get("cut_step")
        return f"incomplete: step {step!r} was cut off writing it" if step else "incomplete"
    return "closed" if info.get("closed") else "open"


def describe_event(event: dict[str, Any]) -> str | None:
    """One line for a journal event in a progress log, or None for bookkeeping events."""
    kind_of = event.get("type")
    name = event.get("name")
    attempt = event.get("attempt")
    if kind_of == "step_started":
        again = f" (attempt {attempt})" if isinstance(attempt, int) and attempt > 1 else ""
        return f"step {name!r} started{again}"
    if kind_of == "step_completed":
        return f"step {name!r} completed"
    if kind_of == "step_retrying":
        retry_at = event.get("retry_at")
        wait = ""
        if isinstance(retry_at, int | float):
            wait = f", retrying in {duration(retry_at - float(event.get('ts', 0)))}"
        return f"step {name!r} failed (attempt {attempt}): {error_text(event.get('error'))}{wait}"
    if kind_of == "step_failed":
        return f"step {name!r} failed (attempt {attempt}): {error_text(event.get('error'))}"
    if kind_of == "sleep_started":
        until = event.get("until")
        if isinstance(until, int | float):
            return f"sleeping {duration(until - float(event.get('ts', 0)))}"
        return "sleeping"
    if kind_of == "run_suspended":
        return f"run suspended: {waiting_text(event.get('waiting_for')) or 'waiting'}"
    if kind_of == "run_resumed":
        if event.get("recoveries"):
            return "run resumed: " + recovery_text(
                {"in_a_row": event["recoveries"], "steps": event.get("steps")}
            )
        return "run resumed"
    if kind_of == "drive_failed":
        if event.get("reason") == "interrupted":
            return "drive interrupted on purpose (no death)"
        return f"drive stopped by the store (no death): {event.get('error')}"
    if kind_of == "run_attempt":
        return f"run started (attempt {attempt})"
    if kind_of == "run_retrying":
        again = "queued by hand" if event.get("manual") else "retrying"
        return f"run {again}: attempt {attempt} of {event.get('max_attempts')}"
    if kind_of == "progress":
        return f"progress: {_short(event.get('data'))}"
    if kind_of == "cancel_requested":
        return "cancellation requested"
    if kind_of == "wake_requested":
        return "wake-up requested"
    if kind_of == "hook_created":
        return f"hook {event.get('token')!r} created"
    if kind_of == "hook_payload":
        return f"hook {event.get('token')!r} received a payload"
    if kind_of == "hook_payload_refused":
        return f"hook {event.get('token')!r} refused a payload: {event.get('error')}"
    if kind_of == "child_started":
        return f"child run {event.get('child')} ({name}) started"
    if kind_of == "child_finished":
        return f"child run {event.get('child')} {event.get('status')}"
    if kind_of == "child_waiter":
        return f"run {event.get('parent')} awaits its outcome too"
    if kind_of == "timeout_started":
        return "timeout started"
    if kind_of == "timeout_ended":
        return "timeout block ended in time"
    return None


def _short(value: Any, limit: int = 80) -> str:
    """Tagged JSON on one line, cut to ``limit`` characters."""
    import orjson

    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def log_attempt(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Which step attempt a step log entry belongs to: entries are grouped under one header
    per attempt (``log_header``)."""
    return (entry.get("op"), entry.get("attempt"), entry.get("resumes"))


def log_header(entry: dict[str, Any]) -> str:
    """The header line of a step attempt's log entries: ``── charge · attempt 2 ──``."""
    return f"── {entry.get('step')} · attempt {entry.get('attempt')} ──"


def log_line(entry: dict[str, Any]) -> str:
    """One step log entry as a line of text: stdout as written, the rest marked."""
    text = str(entry.get("text", ""))
    stream = entry.get("stream")
    if stream == "log":
        return f"[{entry.get('level', 'LOG')} {entry.get('logger', '')}] {text}"
    if stream == "stderr":
        return f"[stderr] {text}"
    return text


def schedule_time(ts: float | None, tz: str | None) -> str:
    """A schedule's time in the schedule's zone, labelled (``2026-12-04 02:30 CET``), or ``-``."""
    from wf.engine._cron import zoned_time

    return "-" if ts is None else zoned_time(ts, tz)


def next_run_text(row: dict[str, Any]) -> str:
    """A schedule's next fire in its zone, ``ended`` once its series has ended, ``paused``
    while it is paused."""
    if row.get("ended"):
        return "ended"
    if row.get("paused"):
        return "paused"
    return schedule_time(row.get("next_run"), row.get("tz"))


def last_run_waiting(row: dict[str, Any]) -> str | None:
    """What a schedule's last run waits for when no live worker serves its deployment
    (``waiting for a worker of deployment v1``), or None."""
    from wf.engine._deployments import waiting_for_worker

    pin = row.get("last_run_unserved")
    return waiting_for_worker(pin) if isinstance(pin, str) else None


def why_line(explanation: Explanation, now: float) -> str:
    """One line saying why the run is where it is (``wf inspect``'s ``why``); the TUI and the
    web UI say each reason in a sentence (``sentence``)."""
    reasons = explanation.reasons
    first = reasons[0]
    # Pinned to a deployment no live worker serves: no "next worker" drives it until one starts.
    unserved = next((r.name for r in reasons if r.kind == "unserved"), None)
    waiting = f"waiting for a worker of deployment {unserved}"
    if first.kind == "queued":
        return "queued: the next `wf worker` (or `wf run` of it) will start it"
    if first.kind == "held":
        ahead = f"; {first.count} run(s) ahead of it" if first.count else ""
        return f"pending: {first.detail}{ahead}"
    if first.kind == "completed":
        return f"completed in {duration(first.took)}"
    if first.kind == "cancelled":
        return f"cancelled after {duration(first.took)}"
    if first.kind == "failed":
        where = ""
        if first.name is not None:
            where = f" in step {first.name!r} after {first.attempt} attempt(s)"
        return f"failed{where}: {error_text(first.error)}"
    if first.kind == "driver_gone":
        who = "the next worker recovers it" if unserved is None else f"{waiting} to recover it"
        return (
            f"running, but its driver process is gone: {who} "
            f"({first.count} operation(s) done are not repeated)"
        )
    # Where the line does not say who drives the run next, it says that none can meanwhile.
    absent = "" if unserved is None else f"; {waiting}: no live worker serves it"
    if explanation.status == "running":
        active = [r.name for r in reasons if r.kind == "step_running"]
        retrying = [r for r in reasons if r.kind == "retrying"]
        resumer = "the next worker resumes it" if unserved is None else f"it is {waiting}"
        if active:
            names = ", ".join(repr(n) for n in active)
            return f"running step {names} (if its process died, {resumer})"
        if retrying:
            row = retrying[0]
            return f"step {row.name!r} waits to retry (attempt {(row.attempt or 0) + 1}){absent}"
        return f"running (if its process died, {resumer})"
    what = waiting_text(explanation.waiting_for) or "waiting"
    wake_at = explanation.wake_at
    if any(r.kind == "undelivered" for r in reasons):
        # Posted and not yet taken in: the run is due whatever its timer says.
        who = "the next worker takes it" if unserved is None else waiting
        return f"suspended: {what}; a message arrived, {who}"
    if wake_at is None:
        return f"suspended: {what}; wakes when a message arrives{absent}"
    if wake_at <= now:
        return f"suspended: {what}; due now, " + (
            "the next worker resumes it" if unserved is None else waiting
        )
    return (
        f"suspended: {what}; wakes at {timestamp(wake_at)} (in {duration(wake_at - now)}){absent}"
    )
