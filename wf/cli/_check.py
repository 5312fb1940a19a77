"""``wf check``: the static analyzer for workflow code (``wf.check``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wf.cli._errors import EXIT_USAGE, error, exit_with, guarded


def register(app: typer.Typer) -> None:
    """Add ``wf check`` to the app."""
    app.command("check")(check_command)


@guarded
def check_command(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PATHS",
            help="Files or directories to check (default: .); with --replay, run ids "
            "(default: every run).",
            show_default=False,
        ),
    ] = None,
    select: Annotated[
        str | None,
        typer.Option(
            "--select",
            metavar="CODES",
            help="Only these rule codes or prefixes, comma-separated (WF1,WF301).",
        ),
    ] = None,
    ignore: Annotated[
        str | None,
        typer.Option(
            "--ignore", metavar="CODES", help="Skip these rule codes or prefixes, comma-separated."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print findings as JSON.")] = False,
    replay: Annotated[
        bool,
        typer.Option(
            "--replay",
            help="Replay stored runs against the current code instead (imports it); exit 1 "
            "if any would diverge or cannot be replayed.",
        ),
    ] = False,
    unfinished: Annotated[
        bool,
        typer.Option(
            "--unfinished",
            help="With --replay: only runs that can still resume (pending, running, suspended).",
        ),
    ] = False,
    deployment: Annotated[
        str | None,
        typer.Option(
            "--deployment",
            metavar="ID",
            help="With --replay: only runs a worker of deployment ID drives (pinned to ID, or "
            "unpinned); runs pinned elsewhere stay on their own code.",
        ),
    ] = None,
) -> None:
    """Check workflow code for what would break replay. Exit 0 clean, 1 findings, 2 bad usage.

    Settings come from [tool.wf.check] in the nearest pyproject.toml (select, ignore, exclude);
    --select and --ignore override them. With --replay, stored runs are replayed through the
    current code instead (nothing is executed or written): the check to run before a deploy.
    """
    if replay:
        if select is not None or ignore is not None:
            error("--select and --ignore choose static rules; they do not apply to --replay")
            exit_with(EXIT_USAGE)
        from wf.admin._deployments import check_deployment
        from wf.cli._replay import replay_command
        from wf.cli._store import remote_url, store_path

        if remote_url() is not None:
            # Replaying imports the code, which a server is never asked to do; and a clean
            # report of the store here, taken for the server's, would bless a deploy.
            error(
                f"wf check --replay replays the runs of the store here ({store_path()}), not "
                "those of the server at WF_URL: run it where that server's store is (WF_URL= "
                "wf check --replay checks the store here)"
            )
            exit_with(EXIT_USAGE)

        if deployment is not None:
            check_deployment(deployment)
        exit_with(
            replay_command(
                paths or [], as_json=as_json, unfinished=unfinished, deployment=deployment
            )
        )
    if unfinished or deployment is not None:
        error("--unfinished and --deployment only apply to --replay")
        exit_with(EXIT_USAGE)
    from wf.check import (
        CheckUsageError,
        check_paths,
        format_json,
        format_text,
        load_settings,
    )

    targets = [Path(p) for p in paths] if paths else [Path(".")]
    try:
        # One precedence for every setting: [tool.wf.check] < WF_CHECK_* < the command line.
        config = load_settings(Path.cwd(), select=select, ignore=ignore)
        result = check_paths(targets, config)
    except CheckUsageError as exc:
        error(str(exc))
        exit_with(EXIT_USAGE)
    if as_json:
        typer.echo(format_json(result))
    else:
        from wf.admin._words import visible

        # File names and the source they quote are anyone's text: controls shown.
        typer.echo(visible(format_text(result), newlines=True))
    exit_with(result.exit_code)
