"""Exit codes, and turning any exception into one ``error: ...`` line on stderr.

The codes (documented in ``docs/cli.md``):

==  =========================================================================================
0   success (``wf run``: the run completed)
1   the run failed or was cancelled; ``wf check`` found problems; an unexpected internal error
2   bad usage or bad input: a ``wf.UsageError`` (load errors, input that does not fit the
    signature, values that cannot be encoded), an unknown run id or stream, a hook error, an
    argument that is not UTF-8, output closed early (``wf runs | head -1``), an optional
    extra that is not installed
3   the store failed or refused (``wf.StoreError``: I/O, corruption, a newer store format)
130 interrupted (Ctrl-C; SIGTERM or Ctrl-C during an upgrade of the store's format)
==  =========================================================================================
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn, ParamSpec, TypeVar

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STORE = 3
EXIT_INTERRUPTED = 130

P = ParamSpec("P")
R = TypeVar("R")


def one_line(text: str) -> str:
    """``text`` on one line: a message meant for a terminal must not spill over several."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " ".join(lines) if lines else ""


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code of an exception that ends a command."""
    from wf._exceptions import (
        HookError,
        RunAlreadyExists,
        RunNotFound,
        StoreError,
        StreamNotFound,
        UpgradeInterrupted,
        UsageError,
    )

    if isinstance(exc, UsageError | RunNotFound | RunAlreadyExists | HookError | StreamNotFound):
        return EXIT_USAGE
    if isinstance(exc, UpgradeInterrupted):
        return EXIT_INTERRUPTED
    if isinstance(exc, StoreError):
        return EXIT_STORE
    return EXIT_FAILED


def debug() -> bool:
    """True when ``WF_DEBUG`` asks for tracebacks."""
    return os.environ.get("WF_DEBUG", "") not in ("", "0", "false", "no")


def error(message: str) -> None:
    """Print ``error: message`` on stderr (one line, its control characters shown: a run's
    error is anyone's text, and must not drive the terminal). A line break in it shows as
    ``\\n``, as ``wf runs``, ``wf inspect`` and the app show it, so the message says what was
    recorded and cannot print a line that reads as another."""
    from wf.admin._words import visible

    sys.stderr.write(f"error: {visible(str(message).strip())}\n")
    sys.stderr.flush()


def hint(message: str) -> None:
    """Print a follow-up suggestion on stderr (control characters shown, as ``error``)."""
    from wf.admin._words import visible

    sys.stderr.write(f"hint: {visible(message, newlines=True)}\n")
    sys.stderr.flush()


def closed_pipe(done: str | None = None) -> int:
    """The reader of our output went away (``wf runs | head -1``, ``wf runs >&-``): one line,
    exit 2. ``done`` says what the command did all the same (``run X is queued``), so that a
    script that reads the line does not do it again.

    As Python's documentation on SIGPIPE advises, stdout is pointed at /dev/null first, so
    whatever is still buffered cannot fail again when the interpreter flushes it at exit.
    """
    _to_devnull(sys.stdout)
    suffix = f": {done}" if done else ""
    try:
        error(f"output closed before it was all written (broken pipe){suffix}")
    except OSError:  # stderr went with it (`2>&1 | head`)
        _to_devnull(sys.stderr)
    return EXIT_USAGE


def _to_devnull(stream: object) -> None:
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):
        return  # not a file (a test's capture): nothing left to flush into a closed pipe
    os.dup2(devnull, fd)
    os.close(devnull)


def report(exc: BaseException) -> int:
    """Print ``exc`` as one line on stderr (a traceback too with ``WF_DEBUG=1``); its exit code.

    Two failures are the environment's, not wf's, and read as bad usage (exit 2): output
    closed early, and an optional extra that is not installed (the line names its install).
    """
    from wf._exceptions import WFError
    from wf._extras import missing_extra_message

    if isinstance(exc, BrokenPipeError):
        return closed_pipe()
    if debug():
        traceback.print_exception(exc, file=sys.stderr)
    from wf._loader import shadowing

    shadow = shadowing(exc)
    if isinstance(exc, WFError):
        error(str(exc))
    elif shadow is not None:
        # A file of the project hides a package wf itself imports: every command fails alike.
        error(shadow)
        return EXIT_USAGE
    elif (missing := missing_extra_message(exc)) is not None:
        error(missing)
        return EXIT_USAGE
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        suffix = "" if debug() else " (run with WF_DEBUG=1 for the traceback)"
        error(f"unexpected {one_line(text)}{suffix}")
    return exit_code_for(exc)


def parser_errors() -> tuple[type[Exception], type[Exception]]:
    """Click's ``ClickException`` and ``UsageError``, as the installed Typer raises them.

    Typer up to 0.25 raises Click's own; later ones raise those of a copy of Click it carries in
    a private module, and export only ``typer.BadParameter`` of them. Both are found from that
    public class, whose bases they are in every version of the pinned range.
    """
    import typer

    bases = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
    return bases["ClickException"], bases["UsageError"]


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command: any wf error (or other exception) becomes one line and its exit code."""
    import typer

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except parser_errors()[0]:
            # Typer's own usage errors (bad option values): the root group prints them.
            raise
        except Exception as exc:
            raise typer.Exit(report(exc)) from None

    return wrapper


def exit_with(code: int) -> NoReturn:
    """End the command with ``code`` (Typer's way, so CliRunner sees it too)."""
    import typer

    raise typer.Exit(code)
