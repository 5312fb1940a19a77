"""How the commands that drive runs (``wf worker``, ``wf serve``) stop: the ``--grace`` they give
running steps on SIGTERM, and leaving at once when a stopped worker left something running."""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from wf import Worker


def finite_seconds(value: float | None) -> float | None:
    """A seconds option's value, refused when it is NaN or infinite (Click's range lets them
    through: a drain would wait on a NaN timeout)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value!r} is not a finite number of seconds")
    return value


GraceOption = Annotated[
    float,
    typer.Option(
        "--grace",
        min=0.0,
        callback=finite_seconds,
        metavar="SECONDS",
        help="On SIGTERM, let running steps finish for this long; then they are abandoned "
        "(they run again when their run resumes) and the worker says which.",
    ),
]


def leave_if_stuck(worker: Worker, code: int) -> None:
    """Exit now with ``code`` if the stopped worker left something running that would keep the
    process from ending: a sync step's thread, which cannot be stopped and which the
    interpreter would wait for at exit, or a task that ignores its cancellation, which closing
    the event loop would wait for. The abandoned steps run again when their runs resume."""
    if worker.threads_abandoned or worker.left_running:
        sys.stderr.flush()
        os._exit(code)
