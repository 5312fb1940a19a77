"""One greppable line per event, for pipes, logs and tests: ``wf-dev KIND key=value ...``.

Values that are plain words are printed bare; anything else is a JSON string (double quotes,
escapes), so ``grep 'wf-dev reloaded'`` finds reloads and a program can split the rest with
``shlex.split``. Durations are whole milliseconds (``*_ms``). Lines are flushed one by one.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from wf.admin._words import visible_json
from wf.check import Finding
from wf.dev._events import (
    ChangeSeen,
    Checked,
    DevEvent,
    Diverged,
    Drained,
    DrainWaiting,
    ImportFailed,
    Kept,
    Loaded,
    Ready,
    Reloaded,
    ReplayTrouble,
    RunCrossed,
    RunEnded,
    RunError,
    RunRequested,
    RunStarted,
    RunSuspended,
    Started,
    StepsRestarted,
    Stopped,
    Stopping,
)

PREFIX = "wf-dev"
_BARE = re.compile(r"^[\w./:@+,-]+$")
OUTPUT_LIMIT = 200


def value(raw: Any) -> str:
    """One value as printed: bare when it is a plain word, else a JSON string."""
    if isinstance(raw, bool):
        return "yes" if raw else "no"
    if isinstance(raw, list | tuple):
        raw = ",".join(str(item) for item in raw)
    text = "" if raw is None else str(raw)
    if _BARE.match(text):
        return text
    # JSON escapes C0 controls; bidi, zero-width and C1 ones too (``\\u202e``), on any output.
    return visible_json(json.dumps(text, ensure_ascii=False))


def ms(seconds: float | None) -> int | None:
    """Seconds as whole milliseconds."""
    return None if seconds is None else round(seconds * 1000)


def line(kind: str, **fields: Any) -> str:
    """``wf-dev kind key=value ...`` (fields that are None are left out)."""
    parts = [PREFIX, kind]
    parts.extend(f"{key}={value(v)}" for key, v in fields.items() if v is not None)
    return " ".join(parts)


def inspect_command(run_id: str) -> str:
    """The command that shows a run."""
    return f"wf inspect {run_id}"


def render(event: DevEvent) -> Iterator[str]:
    """The lines of one event."""
    if isinstance(event, Started):
        yield line(
            "starting",
            watching=event.watching,
            mode="polling" if event.polling else "events",
            reason=event.polling_reason,
            store=event.store,
            modules=event.modules or None,
            config=event.config,
        )
    elif isinstance(event, Loaded):
        yield line("loaded", modules=event.modules or None, took_ms=ms(event.took), hint=event.hint)
    elif isinstance(event, ImportFailed):
        yield line("import-failed", error=event.error)
    elif isinstance(event, Ready):
        yield line("ready", generation=event.generation)
    elif isinstance(event, ChangeSeen):
        yield line("change", files=event.files, affected=event.affected or None)
    elif isinstance(event, Checked):
        yield from _checked(event)
    elif isinstance(event, Kept):
        yield line("kept", generation=event.generation, reason=event.reason)
    elif isinstance(event, DrainWaiting):
        yield line(
            "waiting",
            steps=event.steps,
            running_ms=[ms(t) for t in event.running] or None,
            waited_ms=ms(event.waited),
            grace=event.grace,
            restart=event.restart,
            stopping="yes" if event.stopping else None,
        )
    elif isinstance(event, StepsRestarted):
        if event.steps:
            yield line("restarting", steps=event.steps, stopping="yes" if event.stopping else None)
        else:
            yield line("restarting", steps="", reason="no reload is waiting for a step")
    elif isinstance(event, Drained):
        yield line(
            "drained",
            suspended=event.suspended or None,
            interrupted=event.interrupted or None,
            took_ms=ms(event.took),
            stopping="yes" if event.stopping else None,
        )
    elif isinstance(event, Diverged):
        yield line(
            "diverged",
            run=event.run_id,
            workflow=event.workflow,
            index=event.index,
            recorded=event.recorded or "nothing",
            current=event.current or "nothing",
            location=event.location,
            held="yes",
            inspect=inspect_command(event.run_id),
        )
    elif isinstance(event, ReplayTrouble):
        yield line(
            "replay-error",
            run=event.run_id,
            workflow=event.workflow,
            message=event.message,
            inspect=inspect_command(event.run_id),
        )
    elif isinstance(event, Reloaded):
        timings = {f"{k}_ms": ms(v) for k, v in event.timings.items()}
        yield line(
            "reloaded",
            generation=event.generation,
            files=event.files,
            modules=event.modules,
            latency_ms=ms(event.latency),
            replayed=event.replayed,
            dropped=event.dropped or None,
            **timings,
        )
    else:
        yield from _run_lines(event)


def _checked(event: Checked) -> Iterator[str]:
    yield line(
        "checked",
        files=event.files,
        findings=len(event.findings),
        new=len(event.new) if not event.initial else None,
        errors=len(event.errors),
        took_ms=ms(event.took),
        initial=event.initial or None,
        config_error=event.config_error,
    )
    new = {id(f) for f in event.new}
    for finding in event.findings:
        is_new = id(finding) in new and not event.initial
        if event.initial or is_new:  # known problems are listed once, at start
            yield _finding("finding", finding, new=is_new)
    for error in event.errors:
        yield _finding("syntax-error" if error.code == "syntax-error" else "check-error", error)
    for note in event.notes:
        yield _finding("check-note", note)


def _finding(kind: str, finding: Finding, *, new: bool | None = None) -> str:
    return line(
        kind,
        at=f"{finding.path}:{finding.line}:{finding.col}",
        code=finding.code if kind == "finding" else None,
        new=new,
        message=finding.message,
        hint=finding.hint or None,
    )


def _run_lines(event: DevEvent) -> Iterator[str]:
    if isinstance(event, RunStarted):
        yield line("run-started", run=event.run_id)
    elif isinstance(event, RunEnded):
        output = None
        if event.status == "completed":
            output = json.dumps(event.output, ensure_ascii=False, separators=(",", ":"))
            if len(output) > OUTPUT_LIMIT:
                output = output[:OUTPUT_LIMIT] + "..."
        error = None
        if event.error:
            error = f"{event.error.get('type', 'Error')}: {event.error.get('message', '')}"
        yield line(
            f"run-{event.status}",
            run=event.run_id,
            workflow=event.workflow,
            took_ms=ms(event.took),
            output=output,
            error=error,
            inspect=inspect_command(event.run_id),
        )
    elif isinstance(event, RunCrossed):
        yield line("run-crossed", run=event.run_id, deployment=event.deployment)
    elif isinstance(event, RunSuspended):
        yield line(
            "run-suspended",
            run=event.run_id,
            workflow=event.workflow,
            waiting_for=event.waiting_for,
        )
    elif isinstance(event, RunError):
        yield line(
            "run-error",
            run=event.run_id,
            error=event.message,
            inspect=inspect_command(event.run_id),
        )
    elif isinstance(event, RunRequested):
        yield line("run-requested", target=event.target, run=event.run_id, error=event.error)
    elif isinstance(event, Stopping):
        yield line("stopping", reason=event.reason)
    elif isinstance(event, Stopped):
        yield line("stopped", driven=event.driven)
    else:
        yield line(event.kind)


class LineRenderer:
    """Writes each event's lines to ``stream`` (stdout by default) and flushes."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def __call__(self, event: DevEvent) -> None:
        for text in render(event):
            self.stream.write(text + "\n")
        self.stream.flush()
