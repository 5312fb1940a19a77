"""What the dev loop tells its console: one small dataclass per kind of news.

The loop never prints. It hands events to a sink (``Callable[[DevEvent], None]``); the
renderers in ``_lines`` (one greppable line per event, for pipes and tests) and ``_live`` (a
rich console) decide how they look. Every event has a ``kind``, the first word of its line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from wf.check import Finding


@dataclasses.dataclass(frozen=True)
class DevEvent:
    """Base of the events; ``kind`` names it in the line output."""

    kind: ClassVar[str] = "event"


@dataclasses.dataclass(frozen=True)
class Started(DevEvent):
    """The loop is starting: where it watches, how, and what it will import."""

    kind: ClassVar[str] = "starting"
    watching: list[str]
    polling: bool
    polling_reason: str
    store: str
    modules: list[str]
    config: str | None


@dataclasses.dataclass(frozen=True)
class Loaded(DevEvent):
    """The runner modules were imported (at start)."""

    kind: ClassVar[str] = "loaded"
    modules: list[str]
    took: float
    hint: str | None = None
    """What to do when there is nothing to import (no runner modules configured)."""


@dataclasses.dataclass(frozen=True)
class ImportFailed(DevEvent):
    """Importing the new code failed: the previous code (if any) keeps serving."""

    kind: ClassVar[str] = "import-failed"
    error: str
    initial: bool


@dataclasses.dataclass(frozen=True)
class Ready(DevEvent):
    """A worker serves the code of this generation (1 at start, +1 per reload)."""

    kind: ClassVar[str] = "ready"
    generation: int


@dataclasses.dataclass(frozen=True)
class ChangeSeen(DevEvent):
    """Files changed; ``affected`` are those the running code is made of."""

    kind: ClassVar[str] = "change"
    files: list[str]
    affected: list[str]


@dataclasses.dataclass(frozen=True)
class Checked(DevEvent):
    """``wf check`` ran: all findings, those new since the serving code, unparsable files, and
    notes on code too deeply nested to analyse (which never block)."""

    kind: ClassVar[str] = "checked"
    files: int
    findings: list[Finding]
    new: list[Finding]
    errors: list[Finding]
    took: float
    initial: bool = False
    config_error: str | None = None
    notes: list[Finding] = dataclasses.field(default_factory=list)

    @property
    def blocking(self) -> bool:
        """Whether this check refuses the reload."""
        return bool(self.errors or self.new) and not self.initial


@dataclasses.dataclass(frozen=True)
class Kept(DevEvent):
    """The reload was refused: the previous code keeps serving, and why."""

    kind: ClassVar[str] = "kept"
    generation: int
    reason: str


@dataclasses.dataclass(frozen=True)
class DrainWaiting(DevEvent):
    """A reload waits for running steps to finish: which ones, how long they have run, how
    long the reload has waited, for how long at most, and how to restart them now."""

    kind: ClassVar[str] = "waiting"
    steps: list[str]
    """``step 'charge' of wrun_…``, one per step still running."""
    grace: float
    running: list[float] = dataclasses.field(default_factory=list)
    """Seconds each of ``steps`` has been running (same order)."""
    waited: float | None = None
    """Seconds the reload has waited so far."""
    restart: str | None = None
    """How to restart the steps now (``press r``, ``kill -USR1 PID``); None: no way."""
    stopping: bool = False
    """The wait is ``wf dev`` stopping (Ctrl-C), not a reload: cutting the steps short ends it."""


@dataclasses.dataclass(frozen=True)
class StepsRestarted(DevEvent):
    """The user asked to restart the steps a reload waits for: they are abandoned (their runs
    stop now and run them again on the new code)."""

    kind: ClassVar[str] = "restarting"
    steps: list[str]
    """The abandoned steps (empty: no reload was waiting for any)."""
    stopping: bool = False
    """Cut short for ``wf dev`` to stop (they run again when their runs resume, elsewhere)."""


@dataclasses.dataclass(frozen=True)
class Drained(DevEvent):
    """The worker stopped: runs in flight were suspended at their next durable operation."""

    kind: ClassVar[str] = "drained"
    suspended: list[str]
    interrupted: list[str]
    """Runs whose step outlived the grace period (the step runs again on resume)."""
    took: float
    stopping: bool = False
    """Drained for ``wf dev`` to stop: the runs resume in the next worker, not here."""


@dataclasses.dataclass(frozen=True)
class Diverged(DevEvent):
    """A run in flight no longer replays on the new code."""

    kind: ClassVar[str] = "diverged"
    run_id: str
    workflow: str
    index: int
    recorded: str | None
    current: str | None
    location: str | None


@dataclasses.dataclass(frozen=True)
class ReplayTrouble(DevEvent):
    """A run in flight could not be replay-checked (its workflow is gone, replay raises)."""

    kind: ClassVar[str] = "replay-error"
    run_id: str
    workflow: str
    message: str


@dataclasses.dataclass(frozen=True)
class Reloaded(DevEvent):
    """The new code serves. ``latency``: last save -> serving; ``timings``: its parts."""

    kind: ClassVar[str] = "reloaded"
    generation: int
    files: list[str]
    modules: list[str]
    latency: float
    timings: dict[str, float]
    replayed: int
    dropped: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class RunStarted(DevEvent):
    """This process began driving a run (a new run, or one resuming on the new code)."""

    kind: ClassVar[str] = "run-started"
    run_id: str


@dataclasses.dataclass(frozen=True)
class RunCrossed(DevEvent):
    """This process began driving a run pinned to another deployment (``wf dev`` drives every
    run on the current code, whatever its pin)."""

    kind: ClassVar[str] = "run-crossed"
    run_id: str
    deployment: str


@dataclasses.dataclass(frozen=True)
class RunEnded(DevEvent):
    """A run driven here ended (completed, failed or cancelled)."""

    kind: ClassVar[str] = "run-ended"
    run_id: str
    workflow: str
    status: str
    output: Any
    error: dict[str, Any] | None
    took: float | None


@dataclasses.dataclass(frozen=True)
class RunSuspended(DevEvent):
    """A run driven here suspended (a long sleep, a hook, a child run)."""

    kind: ClassVar[str] = "run-suspended"
    run_id: str
    workflow: str
    waiting_for: str | None
    wake_at: float | None


@dataclasses.dataclass(frozen=True)
class RunError(DevEvent):
    """Driving a run failed outside the workflow (its module does not load, a store error)."""

    kind: ClassVar[str] = "run-error"
    run_id: str
    message: str


@dataclasses.dataclass(frozen=True)
class RunRequested(DevEvent):
    """``--run``: a run of the target was started after a (re)load, or could not be."""

    kind: ClassVar[str] = "run-requested"
    target: str
    run_id: str | None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Stopping(DevEvent):
    """The loop was asked to stop; it drains first."""

    kind: ClassVar[str] = "stopping"
    reason: str


@dataclasses.dataclass(frozen=True)
class Stopped(DevEvent):
    """The loop ended."""

    kind: ClassVar[str] = "stopped"
    driven: int


Sink = Callable[[DevEvent], None]
