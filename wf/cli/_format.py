"""Printing for the commands: a rich console on stdout and JSON on stdout (the words
themselves are ``wf.admin._words``, shared with the other front ends)."""

from __future__ import annotations

import json
import sys
from typing import Any


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
