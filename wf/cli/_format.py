"""Printing for the commands: a rich console on stdout and JSON on stdout (the words
themselves are ``wf.admin._words``, shared with the other front ends)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.store import Fault


def stdout_console() -> Any:
    """A rich console on stdout; in a pipe, wide enough that tables are never squeezed."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich's own answer is a silent exit 1; wf's is one line and exit 2 (closed_pipe).
            self.quiet = True
            raise BrokenPipeError

    return _Console(width=None if sys.stdout.isatty() else 240, highlight=False)


def print_json(data: Any) -> None:
    """Write ``data`` as JSON on stdout: indented on a terminal, one line in a pipe."""
    indent = 2 if sys.stdout.isatty() else None
    text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def say_damaged(damaged: Sequence[Fault]) -> None:
    """One warning line on stderr per damaged item a listing left out (stdout stays the
    listing, JSON included)."""
    for fault in damaged:
        # A store's error names the damaged file already; else say where the item lives.
        detail = fault.reason if fault.where in fault.reason else f"{fault.where}: {fault.reason}"
        sys.stderr.write(
            f"warning: {fault.kind} {fault.item} is damaged and not listed: {detail} "
            "(`wf store verify` names every damaged item)\n"
        )
    sys.stderr.flush()
