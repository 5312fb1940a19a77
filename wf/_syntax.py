"""Parsing Python source into an ``ast`` tree, one parse of the process at a time.

CPython 3.11 counts the depth of the tree it builds in one counter per interpreter, not per
thread: two ``ast.parse`` calls in two threads at once (``wf dev`` checks in a thread while a
reload reads imports; a check abandoned by a newer change still runs) can interleave while the
tree's objects are made, and one then fails with ``SystemError: AST constructor recursion depth
mismatch`` on valid code. A lock around wf's parses keeps them apart.
"""

from __future__ import annotations

import ast
import threading

_parsing = threading.Lock()


def parse_source(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, never at the same time as another parse of wf's."""
    with _parsing:
        return ast.parse(source, filename=filename)
