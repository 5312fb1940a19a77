"""Printing for the commands: a rich console on stdout and JSON on stdout (the words
themselves are ``wf.admin._words``, shared with the other front ends)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

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


def plain(text: object, style: str = "", *, newlines: bool = False) -> Text:
    """Recorded text (an error, a name, a token) for a rich table or line: its control
    characters shown (``wf.admin._words.visible``), and never read as markup, so ``[/]`` in
    an error is text, not a crash."""
    from rich.text import Text

    from wf.admin._words import visible

    return Text(visible(text, newlines=newlines), style=style)


def escaped(text: object) -> str:
    """Recorded text to put inside a line of rich markup: controls shown, markup escaped."""
    from rich.markup import escape

    from wf.admin._words import visible

    return escape(visible(text))


def print_json(data: Any) -> None:
    """Write ``data`` as JSON on stdout: indented on a terminal, one line in a pipe.

    On a terminal, control, bidi and zero-width characters in strings are written as
    ``\\uXXXX`` escapes (the same JSON value): a value is anyone's text. Lone surrogates are
    escaped so everywhere (UTF-8 cannot carry them)."""
    terminal = sys.stdout.isatty()
    text = json.dumps(data, indent=2 if terminal else None, ensure_ascii=False, allow_nan=False)
    from wf.admin._words import encodable_json, visible_json

    text = encodable_json(text)
    if terminal:
        text = visible_json(text)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def say_damaged(damaged: Sequence[Fault], done: str = "not listed") -> None:
    """One warning line on stderr per damaged item a listing left out, or per place several
    of them share (a damaged segment file: its runs' count, the first three named; stdout
    stays the listing, JSON included); ``done`` says what became of it (``not listed``, ``left
    alone``...). Every backend's answer names them (``damaged``): the lines are the same
    from a store and from ``WF_URL``."""
    from wf.admin._words import visible

    # Items that live in one place (the runs of one damaged segment file) are one line: a
    # lost segment would otherwise say the same thing hundreds of times.
    together: dict[tuple[str, str], list[Fault]] = {}
    for fault in damaged:
        together.setdefault((fault.kind, fault.where), []).append(fault)
    for (kind, where), faults in together.items():
        fault = faults[0]
        # A store's error names the damaged file already; else say where the item lives.
        detail = fault.reason if where in fault.reason else f"{where}: {fault.reason}"
        if len(faults) == 1:
            line = f"{kind} {fault.item} is damaged and {done}: {detail}"
        else:
            items = ", ".join(f.item for f in faults[:3]) + (", ..." if len(faults) > 3 else "")
            line = f"{len(faults)} {kind}s in {where} are damaged and {done} ({items}): {detail}"
        sys.stderr.write(f"warning: {visible(line)} (`wf store verify` names every damaged item)\n")
    sys.stderr.flush()
