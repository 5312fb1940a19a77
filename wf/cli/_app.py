"""Building the Typer app from the command table, and running it with wf's exit codes."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from wf.cli._errors import parser_errors, report
from wf.cli._registry import APP_HELP, COMMANDS, MODULES


def _version(value: bool) -> None:
    if value:
        from wf import __version__

        typer.echo(f"wf {__version__}")
        raise typer.Exit()


def undecodable(args: Sequence[str]) -> str | None:
    """The first argument that is not text: bytes that are not UTF-8 (Python keeps them as
    lone surrogates) or a lone surrogate passed in-process. None if every argument is text."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg
    return None


def _shown(arg: str) -> str:
    """``arg`` as the bytes the user typed, escaped: ``'\\xff'``."""
    try:
        return repr(os.fsencode(arg))[1:]
    except UnicodeEncodeError:  # a lone surrogate that no bytes decode to
        return ascii(arg)


@contextlib.contextmanager
def _closed_pipe_exits() -> Iterator[None]:
    """A closed output pipe ends the command with one line and exit 2 (``closed_pipe``).

    Caught here, below Click's own handler, which would exit 1 without a word.
    """
    try:
        yield
    except BrokenPipeError:
        from wf.cli._errors import closed_pipe

        sys.exit(closed_pipe())


class OneLineErrors(TyperGroup):
    """The root command group: a usage error is one ``error:`` line and exit 2.

    Click prints a usage error as the usage, a "Try --help" line and the message; docs/cli.md
    promises one line, which scripts can read and people can scan. The help is one flag away and
    the line says which.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _closed_pipe_exits():  # `wf runs --help | head -c0`: the help is written here
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _closed_pipe_exits():  # every command runs inside the root group's invoke
            return super().invoke(ctx)

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        _plain_usage(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        from wf.cli._errors import EXIT_USAGE, error, one_line

        bad = undecodable(sys.argv[1:] if args is None else args)
        if bad is not None:
            # Checked once for every command: no command sees text it cannot encode again.
            error(f"argument {_shown(bad)} is not valid UTF-8")
            sys.exit(EXIT_USAGE)
        click_error, usage_error = parser_errors()
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except usage_error as exc:
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else (prog_name or "wf")
            message = one_line(exc.format_message()).rstrip(".")  # type: ignore[attr-defined]
            commands = getattr(getattr(ctx, "command", None), "commands", None)
            if type(exc).__name__ == "NoArgsIsHelpError" and commands:
                # A group named without its command: Click's message is the whole help.
                shown = [name for name, cmd in commands.items() if not cmd.hidden]
                message = f"{where} needs a command: {', '.join(sorted(shown))}"
            error(f"{message} (see `{where} --help`)")  # one line, controls shown
            sys.stderr.flush()
            sys.exit(EXIT_USAGE)
        except click_error as exc:
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        except typer.Abort:
            sys.stderr.write("aborted\n")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


_BRACED = re.compile(r"^\{([^{}|]*)\}")


def _plain_usage(command: Any) -> None:
    """Usage lines read ``wf cancel [OPTIONS] RUN_ID``: Typer writes a required argument as
    ``{RUN_ID}``, which reads like a placeholder to type braces around (docs/cli.md has none)."""
    collect = command.collect_usage_pieces
    if getattr(collect, "wf_plain", False):
        return

    def plain(ctx: Any) -> list[str]:
        return [_BRACED.sub(r"\1", piece) for piece in collect(ctx) if piece]

    plain.wf_plain = True  # type: ignore[attr-defined]
    command.collect_usage_pieces = plain
    for sub in getattr(command, "commands", {}).values():
        _plain_usage(sub)


def build_app(command: str | None = None) -> typer.Typer:
    """The ``wf`` Typer app with every command group registered; with ``command`` (the name of
    one, as ``run_app`` reads it from the arguments), only the module that registers it.

    Building a command costs Typer a look at its parameters, and importing its module: for
    ``wf runs``, the other twenty-odd commands were a sixth of its start-up."""
    app = typer.Typer(
        name="wf",
        cls=OneLineErrors,
        help=APP_HELP,
        no_args_is_help=True,
        add_completion=False,
        # Plain click-style help: Typer's rich help imports rich.markdown & co. (~120 ms), which
        # would blow the startup budget of every `wf CMD --help`.
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["--help", "-h"]},
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ) -> None:
        if os.environ.get("WF_URL"):
            # A follow that rides out a server's restart says so on stderr, as a local one
            # says a store outage (``wf._remote.Outage``).
            from wf import _remote

            _remote.say_outage = _say_outage

    modules = MODULES
    if command is not None:
        modules = tuple(c.module for c in COMMANDS if c.name == command) or MODULES
    for module in modules:
        importlib.import_module(module).register(app)
    # One summary per command, shared with the fast `wf --help` (see wf.cli.top_level_help).
    summaries = {c.name: c.summary for c in COMMANDS}
    for info in app.registered_commands:
        if info.name in summaries:
            info.short_help = summaries[info.name]
    return app


def run_app(args: Sequence[str]) -> int:
    """Run the app on ``args`` and return the exit code.

    Commands turn their own errors into one line and an exit code (``_errors.guarded``); this is
    the safety net for anything that escapes, so a user never sees a traceback by default.
    """
    args = list(args)
    # The CLI says a ride-out on its stderr for this call only (``build_app``): a program that
    # runs a command in-process gets its ``wf.remote`` warnings back afterwards.
    remote = sys.modules.get("wf._remote")
    said_before = getattr(remote, "say_outage", None)
    try:
        return _run_app(args)
    finally:
        remote = sys.modules.get("wf._remote")
        if remote is not None:
            remote.say_outage = said_before  # type: ignore[attr-defined]


def _run_app(args: list[str]) -> int:
    # The command named first is the one that runs: build only it. Anything else (an option
    # first, a misspelt name, which gets Click's "did you mean") gets the whole app.
    try:
        build_app(args[0] if args else None)(args=args, prog_name="wf")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:
        return report(exc)
    return 0


def _say_outage(line: str) -> None:
    """One line on stderr (best effort: a closed stderr must not end the wait)."""
    from wf.admin._words import visible

    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"wf: {visible(line)}\n")
        sys.stderr.flush()
