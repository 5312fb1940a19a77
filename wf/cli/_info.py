"""``wf info`` (which project, configuration and store a command uses) and ``wf help TOPIC``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from wf.cli._errors import EXIT_USAGE, error, exit_with, guarded


def register(app: typer.Typer) -> None:
    """Add ``wf info`` and ``wf help`` to the app."""
    app.command("info")(info_command)
    app.command("help")(help_command)


@guarded
def info_command(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the same as a JSON object.")
    ] = False,
) -> None:
    """Say which project, configuration file and store commands run here use."""
    from wf import __version__
    from wf._config import (
        ExtraMissing,
        describe_store,
        find_project,
        overridden_deployment,
        project_settings,
    )

    project = find_project()
    settings = project_settings(project)
    missing: ExtraMissing | None = None
    try:
        store = describe_store(project)
    except ExtraMissing as error:  # the rest is printed all the same: this is where one looks
        missing = error
        store = {"postgres": "PostgreSQL", "redis": "Redis"}[error.kind] + f" ({error})"
    shown_settings: dict[str, dict[str, Any]] = {
        name: {"value": value.value, "origin": value.origin} for name, value in settings.items()
    }
    overridden = overridden_deployment(project)
    if overridden is not None and "deployment" in shown_settings:
        shown_settings["deployment"]["overrides"] = overridden
    data = {
        "version": __version__,
        "project": str(project.root),
        "found_by": project.found_by,
        "config": None if project.source is None else str(project.source),
        "store": store,
        "settings": shown_settings,
        "deprecated": project.deprecated,
    }
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
        _fail_if_missing(missing)
        return
    typer.echo(f"wf       {__version__}")
    typer.echo(f"project  {project.root}  (found by {project.found_by})")
    typer.echo(f"config   {project.source or 'none (defaults; wf init writes [tool.wf])'}")
    typer.echo(f"store    {data['store']}")
    changed = {name: v for name, v in settings.items() if v.origin != "default"}
    if changed:
        typer.echo("settings (set in the configuration or the environment):")
        width = max(len(name) for name in changed)
        for name, value in changed.items():
            secret = name in ("postgres_dsn", "redis_url", "serve.token")
            shown = "***" if secret else json.dumps(value.value)
            over = ""
            if name == "deployment" and overridden is not None:
                over = f"; overrides [tool.wf] deployment {json.dumps(overridden)}"
            typer.echo(f"  {name.ljust(width)}  {shown}  (from {value.origin}{over})")
    if project.deprecated:
        typer.echo(f"warning: {project.deprecated}", err=True)
    _fail_if_missing(missing)


def _fail_if_missing(missing: Exception | None) -> None:
    """Exit 2 with the missing extra's line, as every command that opens the store does."""
    if missing is not None:
        error(str(missing))
        exit_with(EXIT_USAGE)


@guarded
def help_command(
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[TOPIC]...",
            help="A topic, a command or a check rule code (wf help check WF101 works too).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Explain a topic (wf help config, wf help await, wf help WF101) or a command."""
    from wf.cli._registry import COMMANDS
    from wf.cli._topics import TOPICS, find_topic, topic_names

    topic = None
    if words:
        # ``wf help check WF504``: the topic's own wording leads there; the last word is
        # the subject when the words before it name a topic.
        if len(words) > 1 and all(find_topic(w) is not None for w in words[:-1]):
            topic = words[-1]
        else:
            topic = " ".join(words)
    if topic is None:
        typer.echo("Topics (wf help TOPIC):")
        for name in topic_names():
            title = TOPICS[name][0] if name in TOPICS else "wf check rules (and each code)"
            typer.echo(f"  {name.ljust(16)}{title}")
        typer.echo("\nCommands: wf COMMAND --help (wf --help lists them).")
        return
    found = find_topic(topic)
    if found is not None:
        title, text = found
        typer.echo(f"{title}\n\n{text}")
        return
    if topic in {c.name for c in COMMANDS}:
        from wf.cli._app import run_app

        exit_with(run_app([topic, "--help"]))
    import difflib

    choices = [*topic_names(), *(c.name for c in COMMANDS)]
    close = difflib.get_close_matches(topic.lower(), choices, n=1)
    suggestion = f"; did you mean {close[0]!r}?" if close else ""
    error(f"no help topic {topic!r}{suggestion} (topics: {', '.join(topic_names())})")
    exit_with(EXIT_USAGE)
