"""The live view of a run on stderr, built by following its journal in the store.

On a terminal it is a rich table redrawn in place (one row per step or sleep: status, attempts,
duration; the run's suspension below it). Elsewhere (a pipe, CI logs) it is one plain line per
event. It reads only the store, so it shows the same whether the run is driven by this process or
by another one.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Protocol

from wf.admin._words import clock_time, describe_event, duration, error_text, visible, waiting_text

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

    from wf import RunRecord
    from wf.admin import Operation


class Sink(Protocol):
    """Where progress goes."""

    def start(self) -> None: ...

    def update(self, record: RunRecord, journal: list[dict[str, Any]], new: list[Any]) -> None: ...

    def stop(self) -> None: ...


class NullSink:
    """No progress at all (``--quiet``)."""

    def start(self) -> None:
        pass

    def update(self, record: RunRecord, journal: list[dict[str, Any]], new: list[Any]) -> None:
        pass

    def stop(self) -> None:
        pass


HISTORY_SHOWN = 6
"""Operations the one line of an existing run's past names (``PlainSink(attached=True)``)."""


class PlainSink:
    """One line per journal event on stderr, for logs and pipes.

    ``attached``: the run existed before this command (``wf run --id`` of a run that exists):
    its past (the journal before the first update's new events: ``Follower.read_past``) is
    summed up in one line, not replayed event by event as if it happened now."""

    def __init__(self, *, attached: bool = False) -> None:
        self._started: dict[int, float] = {}
        self._ops: dict[str, set[int]] = {}
        """The operations of each step name seen so far."""
        self._past = attached
        """The next update's events are the run's past (its first, when ``attached``)."""

    def start(self) -> None:
        pass

    def update(self, record: RunRecord, journal: list[dict[str, Any]], new: list[Any]) -> None:
        past, self._past = self._past, False
        for event in new:
            name, op = event.get("name"), event.get("op")
            if (
                event.get("type") == "step_started"
                and isinstance(name, str)
                and isinstance(op, int)
            ):
                self._ops.setdefault(name, set()).add(op)
        if past:
            # The events before ``new`` were read before this command drove the run on
            # (``Follower.read_past``): they are its past, ``new`` is what happens now.
            self._say_past(record, journal[: len(journal) - len(new)])
        for event in new:
            line = describe_event(event)
            if line is None:
                continue
            op = event.get("op")
            name = event.get("name")
            if (
                str(event.get("type")).startswith("step_")
                and isinstance(name, str)
                and len(self._ops.get(name, ())) > 1
            ):
                # Calls of one step (``wf.map``'s branches, a gather) read apart by operation.
                line = line.replace(f"step {name!r}", f"step {name!r} #{op}", 1)
            if event.get("type") == "step_started" and isinstance(op, int):
                self._started.setdefault(op, float(event.get("ts", 0.0)))
            elif event.get("type") == "step_completed" and op in self._started:
                line += f" in {duration(float(event.get('ts', 0.0)) - self._started[op])}"
            sys.stderr.write(f"wf: {visible(line)}\n")
        sys.stderr.flush()

    def _say_past(self, record: RunRecord, journal: list[dict[str, Any]]) -> None:
        """One line for what the run did before this command (``journal``): each operation
        and where it stands (the first ``HISTORY_SHOWN``), and the start times and step names
        a later line needs."""
        from wf.admin import operations

        for event in journal:
            name, op = event.get("name"), event.get("op")
            if event.get("type") == "step_started" and isinstance(op, int):
                self._started.setdefault(op, float(event.get("ts", 0.0)))
                if isinstance(name, str):
                    self._ops.setdefault(name, set()).add(op)
        rows = operations(journal, run_status=record.status.value, now=time.time())
        if not rows:
            return
        named = [f"{row.kind} {row.name!r} {row.status}" for row in rows[:HISTORY_SHOWN]]
        more = len(rows) - len(named)
        if more:
            named.append(f"and {more:,} more (wf inspect {record.id} lists them)")
        sys.stderr.write(f"wf: {visible('so far: ' + ', '.join(named))}\n")
        sys.stderr.flush()

    def stop(self) -> None:
        pass


_GLYPHS = {
    "completed": "[green]✓[/]",
    "done": "[green]✓[/]",
    "failed": "[red]✗[/]",
    "retrying": "[yellow]↻[/]",
    "sleeping": "[yellow]…[/]",
    "interrupted": "[magenta]![/]",
    "waiting": "[yellow]…[/]",
}


SHOWN = 40
"""Operations the live table shows, the latest ones: a long run's would fill no terminal."""


class LiveSink:
    """A rich table of the run's latest operations on stderr, redrawn in place.

    The table is made from the whole journal, so for a long run it is made again only after
    ``wf.admin._follow.rest_after`` (it redraws 8 times a second, and the run it shows may be
    driven by this process), and at once when the run ends."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self._record: RunRecord | None = None
        self._journal: list[dict[str, Any]] = []
        self._rows: list[Operation] = []
        self._progress: str | None = None
        self._next_rows = 0.0
        """When (``time.monotonic``) the rows may be made again."""
        self._spinners: dict[int, Any] = {}
        self._live = Live(
            console=Console(stderr=True, highlight=False),
            get_renderable=self._render,
            refresh_per_second=8,
            transient=False,
        )

    def start(self) -> None:
        self._live.start()

    def update(self, record: RunRecord, journal: list[dict[str, Any]], new: list[Any]) -> None:
        self._record, self._journal = record, journal
        if record.status.is_terminal:
            self._next_rows = 0.0  # the last frame shows how the run ended, never a stale one
        self._live.refresh()

    def stop(self) -> None:
        self._live.stop()

    def _spinner(self, op: int) -> Any:
        from rich.spinner import Spinner

        if op not in self._spinners:
            self._spinners[op] = Spinner("dots", style="blue")
        return self._spinners[op]

    def _render(self) -> RenderableType:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        from wf.cli._format import plain

        record = self._record
        if record is None:
            return Text("starting…", style="dim")
        now = time.time()
        if time.monotonic() >= self._next_rows:
            from wf.admin import operations
            from wf.admin._follow import rest_after

            began = time.perf_counter()
            self._rows = operations(self._journal, run_status=record.status.value, now=now)
            self._progress = _latest_progress(self._journal)
            self._next_rows = time.monotonic() + rest_after(time.perf_counter() - began)
        rows = self._rows[-SHOWN:]
        lines: list[RenderableType] = []
        earlier = len(self._rows) - len(rows)
        if earlier:
            lines.append(
                Text(f"… {earlier:,} earlier operations (wf inspect lists them)", style="dim")
            )
        table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1))
        table.add_column(width=1)
        table.add_column(style="bold")
        table.add_column()
        table.add_column(justify="right")
        table.add_column(style="dim", overflow="fold")
        for row in rows:
            status = row.status
            glyph: Any = (
                self._spinner(row.op)
                if status == "running"
                else Text.from_markup(_GLYPHS.get(status, " "))
            )
            bare = row.kind in ("step", row.name)
            label = row.name if bare else f"{row.kind} {row.name}"
            took = row.duration
            if took is None and status in ("running", "sleeping", "retrying", "waiting"):
                took = now - row.started_at
            # A step's name and error are anyone's text: never markup, controls shown.
            table.add_row(
                glyph,
                plain(label),
                _status_text(row, now),
                duration(took),
                plain(_detail(row, now)),
            )
        lines.append(table)
        if self._progress is not None:
            lines.append(plain(f"progress: {self._progress}", "cyan"))
        lines.append(_run_line(record, now))
        return Group(*lines)


def _latest_progress(journal: list[dict[str, Any]]) -> str | None:
    """The latest progress report of the run, on one line (None if none yet)."""
    import orjson

    for event in reversed(journal):
        if event.get("type") == "progress":
            text = orjson.dumps(event.get("data")).decode()
            return text if len(text) <= 100 else text[:99] + "…"
    return None


def _status_text(row: Operation, now: float) -> str:
    status = row.status
    if status == "retrying":
        return f"[yellow]retrying (attempt {row.attempts + 1})[/]"
    if status == "running" and row.attempts > 1:
        return f"[blue]running (attempt {row.attempts})[/]"
    style = {"completed": "green", "failed": "red", "running": "blue"}.get(status, "yellow")
    return f"[{style}]{status}[/]"


DETAIL_LIMIT = 300
"""Characters of a step's error the live table shows: the table is redrawn many times a
second, and an error may be megabytes (``wf inspect`` shows it whole)."""


def _detail(row: Operation, now: float) -> str:
    if row.status == "retrying" and row.retry_at is not None:
        wait = f" — next attempt in {duration(row.retry_at - now)}"
        return _cut(error_text(row.error)) + wait
    if row.status == "failed":
        return _cut(error_text(row.error))
    if row.status == "sleeping" and row.until is not None:
        return f"until {clock_time(row.until)} (in {duration(row.until - now)})"
    return ""


def _cut(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


def _run_line(record: RunRecord, now: float) -> Text:
    from rich.text import Text

    from wf.cli._format import plain

    status = record.status.value
    if status == "suspended":
        when = ""
        if record.wake_at is not None:
            when = f" until {clock_time(record.wake_at)} (in {duration(record.wake_at - now)})"
        # What it waits for names hook tokens: text, not markup.
        line = Text(f"suspended{when}", style="yellow")
        return line.append(": ").append_text(plain(waiting_text(record.waiting_for) or "waiting"))
    if status in ("pending", "running"):
        return Text(f"{record.id} {status} for {duration(now - record.created_at)}", style="dim")
    took = duration(record.updated_at - record.created_at)
    return Text(f"{record.id} {status} in {took}", style="dim")


def make_sink(quiet: bool, *, attached: bool = False) -> Sink:
    """The live view when stderr is a terminal, plain lines otherwise, nothing when ``quiet``.
    ``attached``: the run existed before (its past is shown once, in one line, by the plain
    view; the live table shows each operation once whatever its age)."""
    if quiet:
        return NullSink()
    if sys.stderr.isatty():
        return LiveSink()
    return PlainSink(attached=attached)
