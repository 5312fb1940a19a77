"""``wf inspect``: the terminal UI over runs (on a terminal); otherwise everything about one run,
as JSON for scripts or rendered for people."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from wf.cli._errors import EXIT_USAGE, error, exit_with, guarded

_EVENTS_SHOWN = 12


def register(app: typer.Typer) -> None:
    """Add ``wf inspect`` to the app."""
    app.command("inspect")(inspect_command)


@guarded
def inspect_command(
    run_id: Annotated[
        str | None,
        typer.Argument(
            metavar="RUN_ID", help="The run to show (default: the newest run).", show_default=False
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print run, steps, events, errors, hooks, streams as JSON."),
    ] = False,
    replay: Annotated[
        bool,
        typer.Option(
            "--replay",
            help="Print the run with a replay check of its journal against the current code "
            "(imports the workflow's module).",
        ),
    ] = False,
    journal: Annotated[
        bool,
        typer.Option(
            "--journal",
            help="Print the run's record and whole journal as JSON lines, to check in and "
            "replay in a test (wf.testing.replay).",
        ),
    ] = False,
) -> None:
    """Browse runs in a terminal UI; in a pipe, print one run: status and why, steps, events."""
    import os

    if journal:
        lines = asyncio.run(_export(run_id))
        if lines is None:
            error("no runs in the store")
            exit_with(EXIT_USAGE)
        _print_lines(lines)
        return
    remote = bool(os.environ.get("WF_URL"))
    if not as_json and not replay and _interactive():
        _launch(run_id)
        return
    if replay and remote:
        from wf.cli._errors import hint

        hint(
            "--replay is not done over WF_URL (a server never imports the workflow's code): "
            "replays and the current deployment are null; run wf inspect --replay where the "
            "store is"
        )
    data = asyncio.run(_gather(run_id, replay))
    if data is None:
        error("no runs in the store")
        exit_with(EXIT_USAGE)
    if as_json:
        from wf.cli._format import print_json

        print_json(data)
        return
    _render(data)


def _interactive() -> bool:
    """The app needs a terminal on both ends; in a pipe or a file, print instead."""
    import sys

    # A stream the shell closed is None (`<&-`): no terminal there either.
    return sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()


def _launch(run_id: str | None) -> None:
    # Check first, so that a bad id is the usual one-line error (exit 2), and so that pointing
    # the app at a directory without a store never creates one. Textual loads only past here.
    if asyncio.run(_check_target(run_id)) is None:
        error("no runs in the store")
        exit_with(EXIT_USAGE)
    from wf.cli.tui import launch

    launch(run_id)


async def _check_target(run_id: str | None) -> str | None:
    """The run id to open (validated, existing), ``""`` for the runs table, None if no runs."""
    from wf.admin._client import reading

    async with reading() as client:  # the app's own client drives; this one only looks
        if run_id is not None:
            return (await client.run_detail(run_id)).run.id
        return "" if await client.newest_run() is not None else None


async def _gather(run_id: str | None, replay: bool = False) -> dict[str, Any] | None:
    from wf.admin import connect, detail_json
    from wf.admin._client import reading
    from wf.cli._format import say_damaged, say_shown_by_name

    # A replay imports the run's code, which may ask for the current engine: as with connect.
    async with connect() if replay else reading() as client:
        if run_id is None:
            run_id = await client.newest_run()
            if run_id is None:
                return None
        detail = await client.run_detail(run_id, replay=replay)
    # stderr: stdout stays the document. A stream read by its name is shown, not left out.
    say_damaged([fault for fault in detail.damaged if not fault.shown_as], "not shown")
    say_shown_by_name([fault for fault in detail.damaged if fault.shown_as])
    return detail_json(detail)


async def _export(run_id: str | None) -> list[dict[str, Any]] | None:
    """The run's record (``{"record": ...}``), then every event of its journal, oldest first."""
    from wf.admin._client import reading

    async with reading() as client:
        if run_id is None:
            run_id = await client.newest_run()
            if run_id is None:
                return None
        record = (await client.run_detail(run_id)).run
        lines: list[dict[str, Any]] = [{"record": record.to_json()}]
        start = 0
        while True:
            page = await client.journal_page(record.id, start=start)
            lines.extend(page.events)
            start = page.next_start
            if not page.more:
                return lines


def _print_lines(lines: list[dict[str, Any]]) -> None:
    """One JSON object a line, exactly as stored (a file to check in, not a view)."""
    import json
    import sys

    for line in lines:
        sys.stdout.write(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n")


_RECOVERIES_SHOWN = 5
"""Recoveries from dead drivers ``wf inspect`` lists (the latest; ``--json`` has them all)."""


def _render(data: dict[str, Any]) -> None:
    from rich.table import Table

    from wf.admin._words import (
        clock_time,
        describe_event,
        duration,
        error_text,
        recovery_text,
        styled_status,
        timestamp,
    )
    from wf.cli._format import escaped as escape
    from wf.cli._format import stdout_console

    # Every recorded text below (names, errors, tokens) goes through ``escape``: markup
    # escaped, control characters shown (``wf.admin._words.visible``).
    console = stdout_console()
    run = data["run"]
    console.print(
        f"[bold]{run['id']}[/]  {escape(run['workflow'])}  {styled_status(run['status'])}"
    )
    console.print(f"  {escape(data['why'])}")
    console.print(
        f"  created {timestamp(run['created_at'])}, updated {timestamp(run['updated_at'])}"
        + (f", resumed {run['resumes']}×" if run.get("resumes") else "")
        + (f", parent {escape(run['parent_id'])}" if run.get("parent_id") else "")
    )
    queue = data.get("queue") or {}
    facts = []
    if queue.get("max_attempts", 1) > 1 or queue.get("attempt", 1) > 1:
        facts.append(f"attempt {queue['attempt']} of {queue['max_attempts']}")
    if queue.get("priority"):
        facts.append(f"priority {queue['priority']}")
    if queue.get("group") is not None:
        facts.append(f"group {queue['group']!r}")
    if queue.get("queue") is not None:
        facts.append(f"queue {queue['queue']!r}")
    if queue.get("due_at") is not None:
        facts.append(f"due {timestamp(queue['due_at'])}")
    if queue.get("progress") is not None:
        facts.append(f"progress {queue['progress']}")  # escaped with the others below
    if facts:
        console.print("  " + escape(", ".join(facts)))
    recoveries = data.get("recoveries") or []
    if len(recoveries) > _RECOVERIES_SHOWN:
        console.print(f"  {len(recoveries) - _RECOVERIES_SHOWN} earlier recoveries, then:")
    for entry in recoveries[-_RECOVERIES_SHOWN:]:
        when = f"{timestamp(entry['ts'])}: " if entry.get("ts") is not None else ""
        style = "red" if entry.get("stalled") else "yellow"
        console.print(f"  [{style}]{escape(when + recovery_text(entry))}[/]")
    for attempt in queue.get("attempts", [])[:-1] if len(queue.get("attempts", [])) > 1 else []:
        console.print(
            f"  attempt {attempt['attempt']} failed: {escape(error_text(attempt['error']))}"
        )
    if run.get("schedule_id"):
        console.print(f"  started by schedule {escape(run['schedule_id'])}")
    _render_links(console, data)

    if data["steps"]:
        table = Table(box=None, header_style="bold", pad_edge=False, title_justify="left")
        for column in ("op", "kind", "name", "status", "attempts", "started", "duration", "error"):
            table.add_column(column, justify="right" if column in ("op", "attempts") else "left")
        for row in data["steps"]:
            table.add_row(
                str(row["op"]),
                escape(row["kind"]),
                escape(str(row["name"])),
                styled_status(row["status"]),
                str(row["attempts"] or ""),
                clock_time(row["started_at"]),
                duration(row["duration"]),
                escape(error_text(row["error"])),
            )
        console.print()
        console.print(table)

    if data["errors"]:
        console.print()
        console.print("[bold]errors[/]")
        for item in data["errors"]:
            where = (
                f"step {item['name']!r} attempt {item['attempt']}"
                if item["op"] is not None
                else "run"
            )
            retried = " (retried)" if item["retried"] else ""
            text = error_text({"type": item["type"], "message": item["message"]})
            console.print(f"  {clock_time(item['ts'])} {escape(where)}{retried}: {escape(text)}")

    if data["hooks"]:
        console.print()
        console.print("[bold]hooks[/]")
        for hook in data["hooks"]:
            console.print(f"  {escape(str(hook.get('token')))} (op {hook.get('op')})")

    if data["streams"]:
        console.print()
        console.print("[bold]streams[/]")
        for name, info in data["streams"].items():
            from wf.admin._words import stream_state

            console.print(
                f"  {escape(name)}: {info['chunks']} chunk(s), {escape(stream_state(info))}"
            )

    if data["children"]:
        console.print()
        console.print("[bold]child runs[/]")
        for child in data["children"]:
            console.print(
                f"  {child['id']} {escape(child['workflow'])} {styled_status(child['status'])}"
            )

    lines = [(e, describe_event(e)) for e in data["events"]]
    shown = [(e, line) for e, line in lines if line is not None][-_EVENTS_SHOWN:]
    if shown:
        console.print()
        console.print("[bold]latest events[/]")
        for event, line in shown:
            console.print(f"  {clock_time(event.get('ts'))} {escape(line)}")


def _render_links(console: Any, data: dict[str, Any]) -> None:
    """Header lines for the replay check, decided races and compensations (when there are)."""
    from wf.admin._words import REPLAY_STYLE, error_text, replay_detail, styled_status
    from wf.cli._format import escaped as escape

    replays = data.get("replays")
    if replays:
        status = replays["status"]
        style = REPLAY_STYLE.get(status, "")
        line = f"  replay against the current code: [{style}]{status}[/{style}]"
        detail = replay_detail(replays)
        if detail:
            line += escape(f": {detail}")
        console.print(line)
    deployment = data.get("deployment") or {}
    if deployment.get("pinned"):
        console.print(escape(f"  deployment: {deployment['pinned']} (pinned)"))
    if deployment.get("current") and deployment["current"] != deployment.get("recorded"):
        console.print(
            f"  started on code {escape(deployment.get('recorded'))}; the code here is "
            f"{escape(deployment['current'])}"
        )
    for race in data.get("races") or ():
        console.print(f"  select at op {race['op']}: won by #{race['winner']}")
    comp = data.get("compensations") or {}
    if comp.get("registered"):
        names = ", ".join(escape(str(r["name"])) for r in comp["registered"])
        console.print(f"  compensations registered: {names}")
        for row in comp.get("ran") or ():
            text = f"    ran {escape(str(row['name']))} (op {row['op']}): "
            console.print(text + styled_status(row["status"]))
        for err in comp.get("errors") or ():
            console.print(f"    [red]failed[/]: {escape(error_text(err))}")
