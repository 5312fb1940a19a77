"""The replay check's report as JSON, with the source line of a divergence."""

from __future__ import annotations

import linecache
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.engine._replay_check import ReplayReport


def source_of(location: str | None) -> tuple[str | None, str | None]:
    """``(path:line as shown, the code on that line)`` for a ``file:line`` location.

    The path is made relative to the current directory when it lies below it, which is how a
    user (and an editor's "go to file" in a CI log) knows it.
    """
    if not location:
        return None, None
    path, sep, line = location.rpartition(":")
    if not sep or not line.isdigit():
        return location, None
    try:
        shown = os.path.relpath(path)
        if shown.startswith(".."):
            shown = path
    except ValueError:  # another drive on Windows
        shown = path
    code = linecache.getline(path, int(line)).strip() or None
    return f"{shown}:{line}", code


def report_json(report: ReplayReport) -> dict[str, Any]:
    """The kernel's report as JSON, plus the source text of a divergence's line."""
    data = report.to_json()
    divergence = data.get("divergence")
    if divergence is not None:
        divergence["source"] = source_of(divergence.get("location"))[1]
    return data
