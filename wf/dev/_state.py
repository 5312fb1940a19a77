"""The dev loop's state as a console shows it, folded from its events.

Counters are "since the last reload": the point of the console is to show what the code that
is serving now has done.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from wf.check import Finding
from wf.dev._events import (
    Checked,
    DevEvent,
    Diverged,
    Drained,
    DrainWaiting,
    ImportFailed,
    Kept,
    Ready,
    Reloaded,
    RunEnded,
    RunError,
    RunStarted,
    RunSuspended,
    Started,
    Stopping,
)

RECENT_RUNS = 8


@dataclasses.dataclass
class RunRow:
    """One line of the recent-runs table."""

    run_id: str
    workflow: str = ""
    status: str = "running"
    detail: str = ""
    at: float = dataclasses.field(default_factory=time.time)


@dataclasses.dataclass
class Counters:
    """Runs since the last reload."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    suspended: int = 0
    errors: int = 0


@dataclasses.dataclass
class DevState:
    """Everything the live console draws."""

    watching: list[str] = dataclasses.field(default_factory=list)
    polling: bool = False
    store: str = ""
    generation: int = 0
    serving_since: float | None = None
    status: str = "starting"
    last_reload: str = ""
    last_latency: float | None = None
    problem: str = ""
    """Why the previous code is kept (a failed check or import), until the next reload."""
    findings: list[Finding] = dataclasses.field(default_factory=list)
    new_findings: list[Finding] = dataclasses.field(default_factory=list)
    check_errors: list[Finding] = dataclasses.field(default_factory=list)
    divergences: list[Diverged] = dataclasses.field(default_factory=list)
    waiting: DrainWaiting | None = None
    """What a reload waits for, while it waits (running steps)."""
    counters: Counters = dataclasses.field(default_factory=Counters)
    recent: collections.deque[RunRow] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=RECENT_RUNS)
    )

    def apply(self, event: DevEvent) -> None:
        """Fold one event into the state."""
        if isinstance(event, Started):
            self.watching, self.polling, self.store = event.watching, event.polling, event.store
        elif isinstance(event, Ready):
            self.generation, self.serving_since, self.status = (
                event.generation,
                time.time(),
                "serving",
            )
        elif isinstance(event, Checked):
            self.findings, self.new_findings = event.findings, event.new
            self.check_errors = event.errors
        elif isinstance(event, Kept):
            self.problem, self.status = event.reason, "serving"
        elif isinstance(event, ImportFailed):
            self.problem = event.error
        elif isinstance(event, DrainWaiting):
            self.waiting = event
        elif isinstance(event, Drained):
            self.waiting = None
            # A reload begins: divergences reported for the code it replaces are moot.
            self.divergences = []
            if self.status != "stopping":
                self.status = "reloading"
        elif isinstance(event, Reloaded):
            self._reloaded(event)
        elif isinstance(event, Diverged):
            self.divergences.append(event)
        elif isinstance(event, Stopping):
            self.status = "stopping"
        else:
            self._run_event(event)

    def _reloaded(self, event: Reloaded) -> None:
        self.generation, self.serving_since, self.status = event.generation, time.time(), "serving"
        files = ", ".join(event.files) or "start"
        self.last_reload = f"{files} changed -> reloaded {', '.join(event.modules) or 'nothing'}"
        self.last_latency = event.latency
        self.problem = ""
        self.counters = Counters()

    def _run_event(self, event: DevEvent) -> None:
        if isinstance(event, RunStarted):
            self.counters.started += 1
            self._row(event.run_id)
        elif isinstance(event, RunEnded):
            if event.status == "completed":
                self.counters.completed += 1
            elif event.status == "failed":
                self.counters.failed += 1
            else:
                self.counters.cancelled += 1
            row = self._row(event.run_id)
            row.workflow, row.status = event.workflow, event.status
            message = (event.error or {}).get("message", "")
            row.detail = str(message) if event.status == "failed" else ""
        elif isinstance(event, RunSuspended):
            self.counters.suspended += 1
            row = self._row(event.run_id)
            row.workflow, row.status, row.detail = (
                event.workflow,
                "suspended",
                event.waiting_for or "",
            )
        elif isinstance(event, RunError):
            self.counters.errors += 1
            row = self._row(event.run_id)
            row.status, row.detail = "error", event.message

    def _row(self, run_id: str) -> RunRow:
        for row in self.recent:
            if row.run_id == run_id:
                row.at = time.time()
                return row
        row = RunRow(run_id)
        self.recent.append(row)
        return row
