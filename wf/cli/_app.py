"""Building the Typer app from the command table, and running it with wf's exit codes."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from wf.cli._errors import report
from wf.cli._registry import APP_HELP, COMMANDS, MODULES


def _version(value: bool) -> None:
    if value:
        from wf import __version__

        typer.echo(f"wf {__version__}")
        raise typer.Exit()


def _click_exceptions() -> Any:
    # Typer >= 0.25 carries its own copy of click; older versions use click itself.
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


class OneLineErrors(TyperGroup):
    """The root command group: a usage error is one ``error:`` line and exit 2.

    Click prints a usage error as the usage, a "Try --help" line and the message; docs/cli.md
    promises one line, which scripts can read and people can scan. The help is one flag away and
    the line says which.
    """

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
        errors = _click_exceptions()
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except errors.UsageError as exc:
            from wf.cli._errors import EXIT_USAGE, one_line

            where = exc.ctx.command_path if exc.ctx is not None else (prog_name or "wf")
            message = one_line(exc.format_message()).rstrip(".")
            sys.stderr.write(f"error: {message} (see `{where} --help`)\n")
            sys.stderr.flush()
            sys.exit(EXIT_USAGE)
        except errors.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except (errors.Abort, typer.Abort):
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
        pass

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
