"""The commands of ``wf``, named without importing them.

``wf --help`` is rendered from this table alone so that it starts fast; the Typer app is built
from the same table (one module per command group, each with ``register(app)``), and a test keeps
the two in agreement. A new command group (``wf hook``, ``wf stream``, ``wf dev``) is one module
and one line here.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    """One entry of ``wf --help``: the command's name, the module registering it, a summary."""

    name: str
    module: str
    summary: str


COMMANDS: tuple[Command, ...] = (
    Command("run", "wf.cli._run", "Start a run, drive it here with a live view, print its result."),
    Command("runs", "wf.cli._runs", "List runs, newest first."),
    Command("inspect", "wf.cli._inspect", "Show one run: status, steps, events, hooks, streams."),
    Command("cancel", "wf.cli._control", "Cancel a run (it stops at its next durable operation)."),
    Command("wake", "wf.cli._control", "End a run's current sleeps now."),
    Command("retry", "wf.cli._queue", "Queue another attempt of a failed run (steps replay)."),
    Command("watch", "wf.cli._queue", "Print a run's events (started, progress, outcome) live."),
    Command("stream", "wf.cli._stream", "Write a run's byte stream to stdout (--follow: live)."),
    Command("logs", "wf.cli._logs", "Show what a run's steps printed or logged (--follow: live)."),
    Command("worker", "wf.cli._worker", "Deliver all due work until stopped (SIGTERM drains)."),
    Command("schedules", "wf.cli._schedules", "List cron schedules: next run, last fire, skips."),
    Command("gc", "wf.cli._upkeep", "Delete finished runs past their retention."),
    Command("check", "wf.cli._check", "Check workflow code, or replay stored runs (--replay)."),
    Command("dev", "wf.cli._dev", "Serve runs on the current code; check and reload on change."),
    Command("init", "wf.cli._dev", "Write a starter [tool.wf] table into pyproject.toml."),
    Command("info", "wf.cli._info", "Say which project, configuration and store are used here."),
    Command("help", "wf.cli._info", "Explain a topic (config, await, WF101, ...) or a command."),
    Command("serve", "wf.cli._serve", "HTTP API, webhooks and web UI over the store; drives runs."),
    # Typer lists command groups after plain commands, so groups go last to keep `wf --help`
    # (rendered from this table) identical to Typer's.
    # (Groups are listed in the order their modules register: wf.cli._schedules and
    # wf.cli._upkeep come before wf.cli._hooks in this table.)
    Command(
        "schedule",
        "wf.cli._schedules",
        "Cron schedules: set (create or replace), rm, pause, resume.",
    ),
    Command("store", "wf.cli._upkeep", "Check a store (verify), or say what it holds (info)."),
    Command("hook", "wf.cli._hooks", "Deliver a payload to a hook a run waits on: hook resume."),
    Command("hooks", "wf.cli._hooks", "List live hooks: token, run, payload type."),
    Command(
        "deployments",
        "wf.cli._deployments",
        "Runs and live workers per deployment; upgrade an old one's runs.",
    ),
)

MODULES: tuple[str, ...] = tuple(dict.fromkeys(c.module for c in COMMANDS))
"""Each command module once, in ``COMMANDS`` order."""

APP_HELP = """Durable workflows for Python.

Runs are kept in the project's store; `wf info` says which one."""
