"""The standard library's modules wf needs, kept from a project's files of the same names.

A project's directory goes first on ``sys.path`` (``wf._loader``; ``python -m wf`` puts the
current one there before wf starts), so ``json.py`` or ``queue.py`` beside the workflows is what
a later ``import json`` anywhere in the process gets: wf's own (orjson failed with a
SystemError), or the thread pool of a sync step's (every such step failed). So, before a
directory goes first (for ``python -m wf``, as ``import wf`` starts:
``shield_current_directory``), the modules of ``NEEDED`` that one of its files would hide are
imported from the standard library. Nothing else is: the project's own ``import test`` still
gets its ``test.py``, as in plain Python, and a directory hiding none of them costs one
``listdir``.

This module imports nothing of wf: ``wf/__init__.py`` uses it before anything else.
"""

from __future__ import annotations

import importlib
import os
import sys

NEEDED = frozenset(
    # What wf's own code imports, and what the packages it uses import (typer: gettext, rich:
    # colorsys, uvicorn: ssl ...), as its commands were seen to.
    """
    abc array ast asyncio base64 binascii bisect calendar collections colorsys concurrent
    configparser contextlib contextvars copy csv ctypes dataclasses datetime decimal
    difflib dis email enum errno fcntl fnmatch fractions functools gc gettext hashlib heapq
    hmac html http importlib inspect ipaddress itertools json linecache locale logging math
    mimetypes msvcrt multiprocessing numbers opcode operator os pathlib pickle platform
    queue quopri random re resource secrets select selectors shlex shutil signal site
    socket socketserver ssl stat string subprocess sysconfig termios textwrap threading
    time token tokenize tomllib traceback tty types typing urllib uuid warnings weakref
    winreg zlib zoneinfo
    """.split()  # noqa: SIM905 (ninety names on nine lines, not on ninety)
)
"""The top-level standard modules that wf, and the packages it uses, import: as a command starts
(``python -m wf``), or later, once the project is on the path (``concurrent.futures.thread``
imports ``queue`` at a sync step's first attempt). A test runs a workflow beside a file named
like every standard module: one missing here fails it."""


def shield(directory: str) -> None:
    """Import the modules of ``NEEDED`` that a file or package in ``directory`` would hide,
    from where they are found without it; call it before ``directory`` goes first on
    ``sys.path``."""
    try:
        entries = os.listdir(directory or os.curdir)
    except OSError:
        return  # a directory that cannot be listed hides nothing that can be known
    # json.py, json.pyc, json.cpython-311-x86_64-linux-gnu.so and a json/ package alike.
    hidden = {entry.partition(".")[0] for entry in entries} & NEEDED
    for name in sorted(hidden.difference(sys.modules)):
        try:
            importlib.import_module(name)
        except Exception:
            # Not importable here (a module of another platform): nothing to keep.
            continue


def shield_current_directory() -> None:
    """``shield`` the current directory that ``python -m`` put first on ``sys.path``, taken
    off the path meanwhile (nothing else runs yet: ``python -m wf`` is starting)."""
    try:
        cwd = os.getcwd()
    except OSError:
        return  # removed meanwhile: it holds no file to hide anything
    if not sys.path or sys.path[0] not in ("", cwd):
        return  # -P or PYTHONSAFEPATH: nothing was put first
    first = sys.path.pop(0)
    try:
        shield(first)
    finally:
        sys.path.insert(0, first)
