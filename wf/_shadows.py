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
import types

TAKEN: dict[str, str] = {}
"""The modules of ``NEEDED`` that a project's own file stands for too (``http.py``, an
``email/`` package), by name: the file's path. ``import http`` gets the standard library's
(wf needs it), where the project's code expected its file: the errors that follow are told so
(``taken_hint``, and the loader's "rename that file")."""

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
    for name in sorted(hidden):
        _record(name, directory or os.curdir)


def _record(name: str, directory: str) -> None:
    """Note in ``TAKEN`` that ``name`` in ``directory``, a real file of the project (not a
    ``json.txt``), is not what ``import name`` gets."""
    for candidate in (name + ".py", os.path.join(name, "__init__.py")):
        path = os.path.abspath(os.path.join(directory, candidate))
        if os.path.isfile(path):
            break
    else:
        return
    found = module_file(sys.modules.get(name))
    if found is not None and os.path.realpath(found) != os.path.realpath(path):
        TAKEN.setdefault(name, path)


def taken_hint(exc: BaseException) -> str:
    """``; http.py of the project is not what `import http` gets: wf needs the standard
    library's http; rename that file`` when ``exc`` involves a module of ``TAKEN``: it is
    about that module (``cannot import name 'fetch_json' from 'http'``, ``module 'calendar'
    has no attribute 'report'``), or raised in its code. Empty otherwise; never raises."""
    if not TAKEN:
        return ""
    try:
        return _taken_hint(exc)
    except Exception:
        return ""  # a hint is a courtesy: an odd exception or module gets none


def _taken_hint(exc: BaseException) -> str:
    names: list[str] = []
    if isinstance(exc, ImportError) and isinstance(exc.name, str):
        names.append(exc.name.partition(".")[0])
    obj = getattr(exc, "obj", None) if isinstance(exc, AttributeError) else None
    if isinstance(obj, types.ModuleType) and isinstance(obj.__name__, str):
        names.append(obj.__name__.partition(".")[0])
    # Raised in the standard module's own code, called as if it were the project's file.
    places: dict[str, str] = {}
    for name in TAKEN:
        found = module_file(sys.modules.get(name))
        if found is not None:
            found = os.path.realpath(found)
            if os.path.basename(found) == "__init__.py":
                found = os.path.dirname(found) + os.sep
            places[found] = name
    tb = exc.__traceback__
    while tb is not None:
        filename = os.path.realpath(tb.tb_frame.f_code.co_filename)
        for place, name in places.items():
            if filename == place or (place.endswith(os.sep) and filename.startswith(place)):
                names.append(name)
        tb = tb.tb_next
    for name in names:
        if name in TAKEN:
            return hint_for(name)
    return ""


def module_file(module: object) -> str | None:
    """The file a module was loaded from, read from its namespace: not ``getattr``, since a
    module's own ``__getattr__`` may import (a lazy module); None for an entry of
    ``sys.modules`` that is no module, or a module without a file."""
    found = vars(module).get("__file__") if isinstance(module, types.ModuleType) else None
    return found if isinstance(found, str) else None


def hint_for(name: str) -> str:
    """The hint of ``taken_hint`` for the module ``name`` of ``TAKEN``."""
    return (
        f"; {shown_file(TAKEN[name])} of the project is not what `import {name}` gets: wf needs "
        f"the standard library's {name}; rename that file"
    )


def shown_file(path: str) -> str:
    """``path`` of ``TAKEN`` as it is shown: relative to the current directory when it is
    below it, a package's ``email/__init__.py`` as its directory ``email/``."""
    tail = ""
    if os.path.basename(path) == "__init__.py":
        path, tail = os.path.dirname(path), os.sep
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive, or no current directory
        relative = os.pardir
    return (path if relative.startswith(os.pardir) else relative) + tail


def started_as_python_m_wf() -> bool:
    """Whether the interpreter was started as ``python -m wf`` (``-mwf``, ``-I -m wf``,
    ``-m wf.cli`` too), read from ``sys.orig_argv``, the command line as given: not
    ``sys.argv``, which is ``["-m"]`` while ``python -m app`` imports any package, and which a
    program may set to anything. Never raises."""
    try:
        return _module_of_command_line(list(sys.orig_argv[1:])) in ("wf", "wf.")
    except Exception:
        return False  # an odd command line is not `python -m wf`


def _module_of_command_line(args: list[str]) -> str:
    """The top-level name (``"wf"``, or ``"wf."`` for a submodule) of the ``-m`` module of
    Python's options ``args``; empty when they run a script or a command instead."""
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not isinstance(arg, str) or arg in ("-", "--") or not arg.startswith("-"):
            return ""  # a script, standard input, or the end of the options
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":
                index += 1  # its value
            continue
        # Short options, grouped as in ``-Im wf``; c, m, W and X take the rest or the next.
        for position, letter in enumerate(arg[1:], start=2):
            if letter not in "cmWX":
                continue
            value = arg[position:]
            if not value:
                value = args[index] if index < len(args) else ""
                index += 1
            if letter == "c":
                return ""
            if letter == "m":
                top, dot, _ = value.partition(".")
                return top + dot if top == "wf" else ""
            break  # -W / -X: their value ends this argument
    return ""


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
