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


_SAY_EACH = 5
"""Damaged items of one kind and reason in one directory (stray names in an index bucket) said
one line each up to this many; more are one line: their count, the first three named."""


def say_damaged(damaged: Sequence[Fault], done: str = "not listed") -> None:
    """One warning line on stderr per damaged item a listing left out, or per place several
    of them share (a damaged segment file: its runs' count, the first three named; stdout
    stays the listing, JSON included); ``done`` says what became of it (``not listed``, ``left
    alone``...). Many items of one kind in one directory for one reason (thousands of stray
    names in an index bucket) are one line too: their count, the first three named. Every
    backend's answer names them (``damaged``): the lines are the same from a store and from
    ``WF_URL``."""
    import os

    from wf.admin._words import visible

    # Items that live in one place (the runs of one damaged segment file) are one line: a
    # lost segment would otherwise say the same thing hundreds of times.
    together: dict[tuple[str, str], list[Fault]] = {}
    for fault in damaged:
        together.setdefault((fault.kind, fault.where), []).append(fault)
    # Items each in a place of their own, of one kind and reason, in one directory: one line
    # when there are many (a listing passing 60,000 stray names said 60,000 lines).
    alike: dict[tuple[str, str, str], list[Fault]] = {}
    for (kind, where), faults in together.items():
        if len(faults) == 1:
            alike.setdefault((kind, os.path.dirname(where), faults[0].reason), []).append(faults[0])
    lines: list[str] = []
    grouped: set[tuple[str, str, str]] = set()
    for (kind, where), faults in together.items():
        fault = faults[0]
        if len(faults) == 1:
            key = (kind, os.path.dirname(where), fault.reason)
            if len(alike[key]) > _SAY_EACH:
                if key not in grouped:
                    grouped.add(key)
                    lines.append(_many(alike[key], key[1], done, True))
                continue
        if len(faults) == 1:
            # A store's error names the damaged file already; else say where the item lives.
            detail = fault.reason if where in fault.reason else f"{where}: {fault.reason}"
            lines.append(f"{kind} {fault.item} is damaged and {done}: {detail}")
        else:
            lines.append(_many(faults, where, done, False))
    for line in lines:
        sys.stderr.write(f"warning: {visible(line)} (`wf store verify` names every damaged item)\n")
    sys.stderr.flush()


def say_shown_by_name(damaged: Sequence[Fault]) -> None:
    """One warning line on stderr per damaged stream shown all the same (``Fault.shown_as``:
    its name file is damaged, its chunk files read by the name its run's journal wrote)."""
    from wf.admin._words import SHOWN_BY_NAME, visible

    for fault in damaged:
        line = f"stream {fault.shown_as!r}: {SHOWN_BY_NAME}: {fault.reason}"
        sys.stderr.write(f"warning: {visible(line)} (`wf store verify` names every damaged item)\n")
    sys.stderr.flush()


def _many(faults: Sequence[Fault], where: str, done: str, apart: bool) -> str:
    """One line for many damaged items in ``where`` (each a file of its own there: ``apart``)."""
    fault = faults[0]
    kind = fault.kind[:-1] + "ies" if fault.kind.endswith("y") else fault.kind + "s"
    names = sorted(f.item for f in faults) if apart else [f.item for f in faults]
    items = ", ".join(names[:3]) + (", ..." if len(faults) > 3 else "")
    if apart:
        detail = fault.reason
    else:
        detail = fault.reason if where in fault.reason else f"{where}: {fault.reason}"
    return f"{len(faults)} {kind} in {where} are damaged and {done} ({items}): {detail}"
