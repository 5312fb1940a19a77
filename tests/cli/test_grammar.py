"""One grammar for every command: a short flag means the same option everywhere, usage errors
are one line, old spellings still work with a note."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest
import typer

from tests.cli.conftest import Project
from wf.cli._app import build_app


def walk(command: Any, path: str = "wf") -> list[tuple[str, Any]]:
    """Every (command path, command) of the app, groups and their subcommands included."""
    found = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += walk(sub, f"{path} {name}")
    return found


def visible_options(command: Any) -> list[Any]:
    return [
        p
        for p in command.params
        if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False)
    ]


def test_every_short_flag_means_one_long_option_everywhere() -> None:
    meanings: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path, command in walk(typer.main.get_command(build_app())):
        for option in visible_options(command):
            names = [*option.opts, *option.secondary_opts]
            longs = sorted(n for n in names if n.startswith("--"))
            for short in (n for n in names if len(n) == 2 and n[0] == "-" and n[1] != "-"):
                meanings[short][longs[0] if longs else short].append(path)
    clashes = {short: dict(longs) for short, longs in meanings.items() if len(longs) > 1}
    assert clashes == {}, f"short flags with several meanings: {clashes}"


def test_the_same_long_option_has_the_same_short_flag_everywhere() -> None:
    shorts: dict[str, set[str | None]] = defaultdict(set)
    for _path, command in walk(typer.main.get_command(build_app())):
        for option in visible_options(command):
            longs = [n for n in option.opts if n.startswith("--")]
            short = next((n for n in option.opts if len(n) == 2 and n[1] != "-"), None)
            for name in longs:
                shorts[name].add(short)
    # A long option may lack its short flag somewhere, but never has two different ones.
    mixed = {name: s for name, s in shorts.items() if len(s - {None}) > 1}
    assert mixed == {}, f"options whose short flag differs between commands: {mixed}"


def test_every_command_takes_dash_h(project: Project) -> None:
    for path, _command in walk(typer.main.get_command(build_app())):
        result = project.cli(*path.split()[1:], "-h")
        assert result.exit_code == 0 and result.stdout.startswith("Usage: "), path


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["run"], re.escape("Missing argument 'TARGET' (see `wf run --help`)")),
        (["runs", "--limit", "x"], re.escape("Invalid value for '--limit'")),
        (["nosuch"], re.escape("No such command 'nosuch'")),
        (["hook", "resume"], re.escape("Missing argument 'TOKEN' (see `wf hook resume --help`)")),
        # Click's own wording, which differs across the pinned Typer range (its copy of Click,
        # or Click 8.2 and later): "No such option: --bogus" or "No such option '--bogus'".
        (["runs", "--bogus"], "No such option:? '?--bogus'?"),
        # A group without its command: the commands it takes, not its whole help in one line.
        (["store"], re.escape("wf store needs a command: info, verify (see `wf store --help`)")),
        (["schedule"], re.escape("wf schedule needs a command: pause, resume, rm, set")),
        # Only the commands its help lists, not the hidden aliases (`wf hook list`).
        (["hook"], re.escape("wf hook needs a command: resume (see `wf hook --help`)")),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    project: Project, args: list[str], fragment: str
) -> None:
    result = project.cli(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and re.search(fragment, lines[0]), lines[0]


def test_one_spelling_each_for_hooks_and_the_others_are_hidden_aliases(project: Project) -> None:
    hook_help = project.cli("hook", "--help").stdout
    assert "resume" in hook_help and "list" not in hook_help.split("Commands:")[1]
    hooks_help = project.cli("hooks", "--help").stdout
    assert hooks_help.startswith("Usage: wf hooks [OPTIONS]\n")
    assert "Commands:" not in hooks_help
    assert "`wf hook resume TOKEN` delivers" in " ".join(hooks_help.split())
    # Older scripts keep working.
    for args in (["hooks"], ["hooks", "list"], ["hook", "list"], ["hooks", "--json"]):
        result = project.cli(*args)
        assert result.exit_code == 0, (args, result.stderr)
    for group in ("hook", "hooks"):
        result = project.cli(group, "resume", "nope", "--data", "1")
        assert result.exit_code == 2
        assert "no live hook with token 'nope'" in result.stderr


def test_old_short_flags_still_work_with_a_note(project: Project) -> None:
    result = project.cli("hook", "resume", "nope", "-d", "1")
    assert result.exit_code == 2  # the token is unknown; the flag itself was understood
    assert "note: `wf hook resume -d` is deprecated; use `wf hook resume --data`" in result.stderr
    run_id = project.cli("run", "tests.cli.flows:adder", "-i", "[1, 2]", "-q").stdout
    assert run_id.strip() == "3"
    listed = project.cli("runs", "-n", "1", "--json")
    newest = listed.stdout.split('"id": "')[1].split('"')[0]
    old = project.cli("stream", newest, "-n", "logs", "-s", "0")
    assert "has no stream 'logs'" in old.stderr  # -n was taken as the stream's name
    assert "`wf stream -n` is deprecated; use `wf stream --name`" in old.stderr
    assert "`wf stream -s` is deprecated; use `wf stream --start`" in old.stderr


def test_commands_that_act_on_a_run_wait_for_the_effect_by_default() -> None:
    waiting: dict[str, Any] = {}
    for path, command in walk(typer.main.get_command(build_app())):
        for option in visible_options(command):
            if "--wait" in option.opts:
                waiting[path] = option
    assert {"wf cancel", "wf wake", "wf hook resume", "wf hooks resume"} <= set(waiting)
    # `wf run` waits for the run by default (`--detach` is its no-wait); its `--wait` only
    # extends that wait past a suspension on hooks, which it otherwise returns on.
    run_wait = waiting.pop("wf run")
    assert run_wait.default is False and not run_wait.secondary_opts
    for path, option in waiting.items():
        assert option.default is True, f"{path} does not wait by default"
        assert option.secondary_opts == ["--no-wait"], path


def test_hook_resume_waits_for_the_run_unless_told_not_to(project: Project) -> None:
    # --no-wait: the payload is stored, nothing more (the run is still due, not driven).
    run_id = project.cli("run", "tests.cli.flows:approval", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert project.status(run_id) == "suspended"
    sent = project.cli("hook", "resume", "approve-me", "--data", '"yes"', "--no-wait")
    assert sent.exit_code == 0, sent.stderr
    assert sent.stdout.strip() == run_id and sent.stderr == ""
    assert project.status(run_id) != "completed"
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert project.status(run_id) == "completed"

    # By default, as wf cancel and wf wake: the run is driven here and its state reported.
    run_id = project.cli("run", "tests.cli.flows:approval", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    sent = project.cli("hook", "resume", "approve-me", "--data", '"yes"')
    assert sent.exit_code == 0, sent.stderr
    assert sent.stdout.strip() == run_id
    assert f"run {run_id}: completed" in sent.stderr
    assert project.status(run_id) == "completed"


def test_usage_lines_name_arguments_without_braces(project: Project) -> None:
    for path, command in walk(typer.main.get_command(build_app())):
        if getattr(command, "hidden", False):
            continue
        words = path.split()[1:]
        usage = project.cli(*words, "--help").stdout.splitlines()[0]
        assert usage.startswith(f"Usage: {path}"), (path, usage)
        assert "{" not in usage and "}" not in usage, usage
    assert project.cli("cancel", "--help").stdout.startswith("Usage: wf cancel [OPTIONS] RUN_ID\n")


def test_help_input_shows_every_form_wf_run_takes(project: Project) -> None:
    topic = project.cli("help", "input").stdout
    assert "--input @input.json" in topic and "--input -" in topic
    run_help = project.cli("run", "--help").stdout
    assert "'@path' reads a file, '-' stdin" in " ".join(run_help.split())
