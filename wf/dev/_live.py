"""The live console of ``wf dev`` on a terminal (rich, imported on first use).

News scrolls (what changed, check findings, reloads, divergences, runs ending); a status panel
stays at the bottom: the generation serving, the last reload and its latency, the runs since
that reload, the recent runs with the command to inspect each, and why a change was refused.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import threading
from typing import TYPE_CHECKING, Any

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
    Reloaded,
    ReplayTrouble,
    RunCrossed,
    RunEnded,
    RunError,
    RunRequested,
    RunSuspended,
    Started,
    StepsRestarted,
    Stopped,
    Stopping,
)
from wf.dev._lines import inspect_command, ms
from wf.dev._state import DevState

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

_STYLE = {
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
    "suspended": "yellow",
    "running": "blue",
    "error": "red",
}


def _clock(ts: float | None) -> str:
    return "-" if ts is None else _dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def _escape(text: object) -> str:
    """Recorded text (errors, names, paths) inside markup: escaped, its controls shown."""
    from rich.markup import escape

    from wf.admin._words import visible

    return escape(visible(text))


class LiveRenderer:
    """A rich live view; call it with each event, ``close()`` at the end."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = console or Console(highlight=False)
        self.state = DevState()
        # rich redraws the panel from its own thread while events update the state here. The
        # state is only touched under this lock, and the lock is never held while printing
        # (printing takes rich's lock, which the redraw holds while it builds the panel).
        self._lock = threading.Lock()
        self._live: Live = Live(
            console=self.console,
            get_renderable=self._panel,
            refresh_per_second=4,
            transient=False,
        )
        self._live.start()

    def close(self) -> None:
        """Stop the live panel (leaving its last state on screen)."""
        self._live.stop()

    def __call__(self, event: DevEvent) -> None:
        with self._lock:
            self.state.apply(event)
        for text in self._news(event):
            self.console.print(text)
        if isinstance(event, Stopped):
            self.close()

    # -- scrolling news ---------------------------------------------------------------------

    def _news(self, event: DevEvent) -> list[str]:
        if isinstance(event, Started):
            mode = f"polling: {event.polling_reason}" if event.polling else "file events"
            return [
                f"[bold]wf dev[/] watching {_escape(', '.join(event.watching))} "
                f"({_escape(mode)}), store {_escape(event.store)}"
            ]
        if isinstance(event, Loaded):
            if event.hint:
                return [f"[yellow]nothing imported[/]: {_escape(event.hint)}"]
            names = ", ".join(event.modules) or "nothing yet (workflows load on first use)"
            return [f"[green]imported[/] {_escape(names)} ({ms(event.took)} ms)"]
        if isinstance(event, ImportFailed):
            return [f"[red bold]import failed[/] {_escape(event.error)}"]
        if isinstance(event, ChangeSeen):
            if not event.affected:
                return [
                    f"[dim]changed {_escape(', '.join(event.files))}: not loaded, "
                    "nothing to reload[/]"
                ]
            return [f"[cyan]changed[/] {_escape(', '.join(event.affected))}"]
        if isinstance(event, Checked):
            return self._checked(event)
        if isinstance(event, Kept):
            return [
                f"[red bold]not reloaded[/]: {_escape(event.reason)}; generation "
                f"{event.generation} (the previous code) keeps serving"
            ]
        if isinstance(event, DrainWaiting):
            return [_waiting(event)]
        if isinstance(event, StepsRestarted):
            if not event.steps:
                return ["[dim]r: no reload is waiting for a step; nothing to restart[/]"]
            if event.stopping:
                return [
                    f"[yellow]cutting short[/] {_escape(', '.join(event.steps))}: abandoned "
                    "now; it runs again when its run resumes (`wf worker`, `wf dev`)"
                ]
            again = (
                "it runs again when its run resumes"
                if len(event.steps) == 1
                else "they run again when their runs resume"
            )
            return [
                f"[yellow]restarting[/] {_escape(', '.join(event.steps))}: abandoned now, "
                f"{again} on the new code"
            ]
        if isinstance(event, Drained):
            return self._drained(event)
        if isinstance(event, Stopping):
            return [f"[yellow bold]stopping[/]: {_escape(event.reason)}"]
        if isinstance(event, Diverged):
            return [
                f"[red bold]run {event.run_id} diverges[/] ({_escape(event.workflow)}) at "
                f"operation #{event.index}: the journal recorded "
                f"{_escape(event.recorded or 'nothing')}, the code now calls "
                f"{_escape(event.current or 'nothing')}"
                + (f" at {_escape(event.location)}" if event.location else ""),
                "  held: not resumed here until the code replays it again (revert the edit, or"
                f" use wf.patched) or it is cancelled; [bold]{inspect_command(event.run_id)}[/]"
                " shows it",
            ]
        if isinstance(event, ReplayTrouble):
            return [
                f"[yellow]run {event.run_id}[/] ({_escape(event.workflow)}) cannot be "
                f"replayed: {_escape(event.message)}"
            ]
        if isinstance(event, Reloaded):
            return [
                f"[green bold]reloaded[/] {_escape(', '.join(event.modules) or '-')} "
                f"({_escape(', '.join(event.files))} changed) in {ms(event.latency)} ms; "
                f"generation {event.generation} serving"
            ]
        return self._run_news(event)

    def _checked(self, event: Checked) -> list[str]:
        lines: list[str] = []
        if event.config_error:
            lines.append(f"[yellow]check configuration[/]: {_escape(event.config_error)}")
        if not event.findings and not event.errors and not event.notes:
            return lines
        new = {id(f) for f in event.new}
        if event.initial:
            lines.append(
                f"[yellow]wf check[/]: {len(event.findings)} known problem(s), "
                "shown once (they do not block reloads)"
            )
        for finding in event.findings:
            is_new = id(finding) in new and not event.initial
            if not is_new and not event.initial:
                continue  # known problems were shown once, at start
            lines.extend(_finding(finding, "red" if is_new else "yellow", is_new))
        for error in event.errors:
            lines.append(
                f"[red]{_escape(error.path)}:{error.line}:{error.col}[/] {_escape(error.message)}"
            )
        for note in event.notes:
            lines.append(
                f"[dim]{_escape(note.path)}:{note.line}:{note.col}[/] {_escape(note.message)}"
            )
        return lines

    def _drained(self, event: Drained) -> list[str]:
        lines = []
        if event.stopping:
            if event.suspended:
                lines.append(
                    f"[dim]{len(event.suspended)} run(s) suspended at their next durable "
                    "operation: the next `wf worker` or `wf dev` resumes them[/]"
                )
            if event.interrupted:
                lines.append(
                    f"[yellow]{len(event.interrupted)} run(s) had a step cut short: it runs "
                    "again when the run resumes[/]"
                )
            return lines
        if event.suspended:
            lines.append(
                f"[dim]drained in {ms(event.took)} ms: {len(event.suspended)} run(s) "
                "suspended at their next durable operation, resuming on the new code[/]"
            )
        if event.interrupted:
            lines.append(
                f"[yellow]{len(event.interrupted)} run(s) had a step cut off (restarted, or "
                "still running after the grace period): it runs again on resume[/]"
            )
        return lines

    def _run_news(self, event: DevEvent) -> list[str]:
        if isinstance(event, RunEnded):
            style = _STYLE.get(event.status, "white")
            detail = ""
            if event.error:
                detail = f": {_escape(event.error.get('message', ''))}"
            return [
                f"run {event.run_id} {_escape(event.workflow)} [{style}]{event.status}[/]"
                f"{detail}  [dim]{inspect_command(event.run_id)}[/]"
            ]
        if isinstance(event, RunCrossed):
            return [
                f"[yellow]run {event.run_id} is pinned to deployment "
                f"{_escape(event.deployment)}[/]: driving it on the current code"
            ]
        if isinstance(event, RunSuspended):
            return [f"[dim]run {event.run_id} suspended: {_escape(event.waiting_for or '')}[/]"]
        if isinstance(event, RunError):
            return [f"[red]run {event.run_id} cannot be driven[/]: {_escape(event.message)}"]
        if isinstance(event, RunRequested):
            if event.error:
                return [f"[red]--run {_escape(event.target)}[/]: {_escape(event.error)}"]
            return [f"[dim]started {event.run_id} ({_escape(event.target)})[/]"]
        if isinstance(event, Stopped):
            return [f"wf dev stopped ({event.driven} run drive(s))"]
        return []

    # -- the status panel -------------------------------------------------------------------

    def _panel(self) -> RenderableType:
        with self._lock:
            return self._build_panel()

    def _build_panel(self) -> RenderableType:
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table

        state = self.state
        counters = state.counters
        rows: list[Any] = []
        head = f"generation {state.generation} {state.status}"
        if state.serving_since is not None:
            head += f" since {_clock(state.serving_since)}"
        rows.append(head)
        if state.last_reload:
            rows.append(
                f"last reload: {_escape(state.last_reload)} ([bold]{ms(state.last_latency)} ms[/])"
            )
        rows.append(
            f"since then: {counters.started} started · [green]{counters.completed} completed[/]"
            f" · [red]{counters.failed} failed[/] · [yellow]{counters.suspended} suspended[/]"
            + (f" · [red]{counters.errors} errors[/]" if counters.errors else "")
        )
        if state.problem:
            rows.append(f"[red]not reloaded: {_escape(state.problem)}[/]")
        if state.waiting is not None:
            how = (
                f" ({_escape(state.waiting.restart)} to restart now)"
                if state.waiting.restart
                else ""
            )
            rows.append(
                f"[yellow]reload waiting for {_escape(', '.join(state.waiting.steps))}[/]{how}"
            )
        if state.divergences:
            rows.append(
                f"[red]{len(state.divergences)} run(s) in flight diverge from the new code "
                "(held)[/]"
            )
        if state.recent:
            table = Table(box=None, show_header=False, padding=(0, 1))
            table.add_column(no_wrap=True)
            table.add_column(no_wrap=True)
            table.add_column(no_wrap=True)
            table.add_column(no_wrap=True)
            table.add_column(overflow="ellipsis", no_wrap=True)
            for row in reversed(state.recent):
                style = _STYLE.get(row.status, "white")
                table.add_row(
                    _clock(row.at),
                    row.run_id,
                    _escape(row.workflow),
                    f"[{style}]{row.status}[/]",
                    _escape(row.detail),
                )
            rows.append(table)
            newest = state.recent[-1].run_id
            rows.append(f"[dim]inspect a run:[/] {inspect_command(newest)}")
        rows.append("[dim]Ctrl-C stops (running steps finish first)[/]")
        return Panel(Group(*rows), title="wf dev", title_align="left")


def _seconds(value: float) -> str:
    """A duration for people: ``850ms``, ``12s``, ``3m05s``."""
    if value < 1:
        return f"{round(value * 1000)}ms"
    if value < 60:
        return f"{value:.0f}s"
    minutes, seconds = divmod(round(value), 60)
    return f"{minutes}m{seconds:02d}s"


def _waiting(event: DrainWaiting) -> str:
    steps = [
        f"{_escape(step)} (running {_seconds(ran)})" if ran is not None else _escape(step)
        for step, ran in itertools.zip_longest(event.steps, event.running)
        if step is not None
    ]
    waited = f" (waited {_seconds(event.waited)} so far" if event.waited is not None else " ("
    waited += (", " if event.waited is not None else "") + f"at most {event.grace:g}s)"
    them = "it" if len(steps) == 1 else "them"
    if event.stopping:
        cut = f"{event.restart} or Ctrl-C again" if event.restart else "Ctrl-C again"
        again = "it runs" if them == "it" else "they run"
        return (
            f"[yellow]stopping[/]: waiting for {', '.join(steps)} to finish{waited}; "
            f"[bold]{_escape(cut)}[/] to cut {them} short now ({again} again on resume)"
        )
    restart = (
        f"; [bold]{_escape(event.restart)}[/] to restart {them} now on the new code"
        if event.restart
        else "; `wf dev --grace 0` restarts running steps at once"
    )
    return (
        f"[yellow]waiting[/] for {', '.join(steps)} to finish before reloading{waited}; "
        f"after that it is cut off and runs again when its run resumes{restart}"
    )


def _finding(finding: Finding, style: str, new: bool) -> list[str]:
    mark = " [bold](new)[/]" if new else ""
    return [
        f"[{style}]{_escape(finding.path)}:{finding.line}:{finding.col}[/] "
        f"[bold]{finding.code}[/] {_escape(finding.message)}{mark}",
        f"  [dim]hint: {_escape(finding.hint)}[/]",
    ]
