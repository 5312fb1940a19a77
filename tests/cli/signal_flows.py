"""A workflow whose async step takes the process's stop signals, as a library may do when first
used (``tests.cli.signal_flows``)."""

from __future__ import annotations

import signal
from typing import Any

import wf


def _library_handler(signum: int, frame: Any) -> None:
    pass  # a library's own: it does not stop the worker


@wf.step
async def grab_signals() -> str:
    signal.signal(signal.SIGTERM, _library_handler)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return "grabbed"


@wf.workflow
async def grabber() -> str:
    return await grab_signals()
