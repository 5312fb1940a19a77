"""docs/cli.md says what the command line has: every command in its table, every option of a
command in its synopsis."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from wf.cli._app import build_app

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
DEV_MD = CLI_MD.with_name("dev.md")


def commands() -> dict[str, Any]:
    """Every command of ``wf`` by its full name (``schedule set``), groups left out."""
    found: dict[str, Any] = {}

    def walk(prefix: str, group: Any) -> None:
        for name, command in group.commands.items():
            full = f"{prefix} {name}".strip()
            if hasattr(command, "commands"):
                walk(full, command)
                if command.invoke_without_command:
                    found[full] = command
            else:
                found[full] = command

    walk("", typer.main.get_command(build_app()))
    return found


def test_every_command_is_in_the_table() -> None:
    text = CLI_MD.read_text()
    table = text[text.index("| command | does |") : text.index("Conventions:")]
    rows = table.splitlines()[2:]
    listed = [m for row in rows for m in re.findall(r"`wf ([a-z][a-z ]*?)`", row)]
    named = set(listed)
    assert len(listed) == len(named), "a command has two rows"
    tops = {name.split()[0] for name in commands()}
    missing = sorted(t for t in tops if not any(n.split()[0] == t for n in named))
    assert missing == []


def test_every_option_is_in_the_synopsis() -> None:
    text = CLI_MD.read_text() + DEV_MD.read_text()
    lines = [
        line
        for block in re.findall(r"```\n(wf [^`]*?)```", text)
        for line in re.split(r"\n(?=wf )", block)
    ]
    wrong = []
    for name, command in commands().items():
        synopsis = [line for line in lines if re.match(rf"wf {name}(\s|$)", line)]
        if not synopsis:
            continue  # `wf help`, `wf hook`: described in prose
        shown = {flag for line in synopsis for flag in re.findall(r"--[a-z][a-z-]*", line)}
        for param in command.params:
            flags = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
            deprecated = "Deprecated" in (getattr(param, "help", None) or "")
            if flags and not deprecated and param.name != "help" and not set(flags) & shown:
                wrong.append(f"wf {name} {flags[0]}")
    assert wrong == []
