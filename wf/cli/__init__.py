"""The ``wf`` command line: a thin Typer app over the library.

Each command parses its arguments, calls library functions and renders the outcome with rich;
no engine logic lives here. Startup is kept fast: this module imports nothing heavy, ``wf --help``
is answered from the command table in ``_registry`` without importing Typer, and each command
imports the engine, the store and rich only when it runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["main", "top_level_help"]

_HELP_FLAGS: tuple[list[str], ...] = (["--help"], ["-h"], [])

_owns_interpreter = False
"""True once ``main`` runs: the process is the ``wf`` command's own, so a long-running command
may tune the process (``wf.cli._heap``). An application or a test that calls the Typer app
itself keeps its interpreter as it is."""


def owns_interpreter() -> bool:
    """Whether this process is the ``wf`` command's own (see ``_owns_interpreter``)."""
    return _owns_interpreter


def top_level_help() -> str:
    """``wf --help``, rendered from the command table (the same text Typer would print)."""
    from wf.cli._registry import APP_HELP, COMMANDS

    width = max(len(c.name) for c in COMMANDS)
    paragraphs = "\n\n".join("  " + p.replace("\n", "\n  ") for p in APP_HELP.split("\n\n"))
    commands = "\n".join(f"  {c.name.ljust(width)}  {c.summary}" for c in COMMANDS)
    return (
        "Usage: wf [OPTIONS] COMMAND [ARGS]...\n\n"
        f"{paragraphs}\n\n"
        "Options:\n"
        "  --version   Show the version and exit.\n"
        "  -h, --help  Show this message and exit.\n\n"
        f"Commands:\n{commands}\n"
    )


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the ``wf`` command (and ``python -m wf``); exits with the command's code."""
    global _owns_interpreter
    _owns_interpreter = True
    _fill_closed_streams()
    try:
        code = _run(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # here, not at exit, where a closed pipe could not be answered
    except BrokenPipeError:  # `wf --help | head -c0`; the commands answer their own
        from wf.cli._errors import closed_pipe

        code = closed_pipe()
    sys.exit(code)


def _fill_closed_streams() -> None:
    """Give a standard stream the shell closed (``>&-``, ``2>&-``, ``<&-``) a stand-in.

    Python leaves ``sys.stdout`` & co. None then, so every write was an AttributeError, and the
    next file wf opened took the free descriptor: output meant for the terminal would go into
    a store file. Now a closed stdout is a pipe nobody reads, so writing to it is the broken
    pipe every command answers already (one line, exit 2); a closed stderr is /dev/null, so
    progress and messages are dropped and the result and exit code stay as they are; a closed
    stdin reads as nothing, and ``sys.stdin`` stays None for ``--input -`` to refuse.
    """
    import os

    for fd in (0, 1, 2):  # in order: each stand-in must land on the lowest free descriptor
        if _usable(fd):
            continue
        if fd == 1:
            read, write = os.pipe()
            if read != fd:
                os.close(read)
            os.dup2(write, fd)  # closes `read` if it took the descriptor
            os.close(write)
        else:
            null = os.open(os.devnull, os.O_WRONLY if fd == 2 else os.O_RDONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            else:
                os.set_inheritable(fd, True)
        if fd == 1 and sys.stdout is None:
            sys.stdout = open(fd, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        elif fd == 2 and sys.stderr is None:
            sys.stderr = open(  # noqa: SIM115
                fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False
            )


def _usable(fd: int) -> bool:
    """Whether standard descriptor ``fd`` is open the way round it is used.

    Open is not enough: a launcher script (pyenv's shim is one) that runs with stderr closed
    hands the interpreter its own script, open for reading, as descriptor 2.
    """
    import os

    try:
        os.fstat(fd)
    except OSError:
        return False
    if fd == 0:
        return True
    try:
        import fcntl
    except ImportError:  # not POSIX: no way to ask, and no shims that do this
        return True
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY


def _run(args: list[str]) -> int:
    if args in _HELP_FLAGS:
        # The common first contact with the tool: answer without importing Typer (~40 ms).
        sys.stdout.write(top_level_help())
        return 0
    if args == ["--version"]:
        from wf import __version__

        sys.stdout.write(f"wf {__version__}\n")
        return 0
    from wf.cli._app import run_app

    return run_app(args)
