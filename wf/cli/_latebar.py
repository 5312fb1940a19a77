"""A progress bar for long store operations (``wf store verify``, ``wf gc``): on stderr, only
on a terminal, and only once the operation has taken longer than a second, so quick runs and
scripts (stdout, ``--json``, a pipe) see nothing of it."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

DELAY = 1.0
"""Seconds an operation runs before its bar appears."""


class LateBar:
    """An ``on_progress(done, total)`` callback drawing a bar (callable from any thread)."""

    def __init__(self, label: str, *, stream: TextIO | None = None, delay: float = DELAY) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self._began = time.monotonic()
        self._lock = threading.Lock()
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._shown = self.stream.isatty()
        """Whether a bar may be shown at all (a terminal)."""

    def __call__(self, done: int, total: int) -> None:
        if not self._shown or time.monotonic() - self._began < self.delay:
            return
        with self._lock:
            if self._bar is None:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )

                self._bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=Console(file=self.stream),
                    transient=True,
                )
                self._bar.start()
                self._task = self._bar.add_task(self.label, total=total)
            assert self._task is not None
            self._bar.update(self._task, completed=done, total=max(total, done))

    def __enter__(self) -> LateBar:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
