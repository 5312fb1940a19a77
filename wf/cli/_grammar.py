"""Old spellings of options and commands, kept working with a deprecation note.

A renamed option keeps its old flag as a hidden option; when it is used the command prints one
``note:`` line on stderr naming the new spelling, then behaves as if the new one was given.
``tests/cli/test_grammar.py`` checks that visible short flags mean one thing in every command.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar

T = TypeVar("T")


def deprecated(old: str, new: str) -> None:
    """Print the note for ``old`` (a flag or a command) now spelled ``new``."""
    sys.stderr.write(f"note: `{old}` is deprecated; use `{new}`\n")
    sys.stderr.flush()


def merged(value: T, old_value: Any, old: str, new: str) -> T:
    """``old_value`` if the deprecated flag was given (with the note), else ``value``."""
    if old_value is None:
        return value
    deprecated(old, new)
    result: T = old_value
    return result
