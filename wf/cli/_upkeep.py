"""``wf gc`` (delete finished runs past their retention) and ``wf store verify|info``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from wf._exceptions import UsageError
from wf.cli._errors import EXIT_FAILED, guarded

if TYPE_CHECKING:
    from wf.engine._retention import Sweep
    from wf.store import StoreStats

_FINISHED = ("completed", "failed", "cancelled")


def _summary(name: str) -> str:
    from wf.cli._registry import COMMANDS

    return next(c.summary for c in COMMANDS if c.name == name)


def register(app: typer.Typer) -> None:
    """Add ``wf gc`` and the ``wf store`` group (``verify``, ``info``) to the app."""
    app.command("gc")(gc_command)
    group = typer.Typer(
        name="store",
        help="Check a store, or say what it holds.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["--help", "-h"]},
    )
    group.command("verify")(verify_command)
    group.command("info")(info_command)
    app.add_typer(group, name="store", short_help=_summary("store"))


@guarded
def gc_command(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Delete finished runs that ended longer ago than this (90s, 5m, 2h, 30d), "
            "instead of applying their retention.",
            show_default=False,
        ),
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            "-w",
            metavar="NAME",
            help="Only runs of this workflow.",
            show_default=False,
        ),
    ] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            metavar="STATUS",
            help=f"Only runs with this status (repeatable): {', '.join(_FINISHED)}.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what would be deleted.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print {"deleted", "bytes", "scanned", "tombstones_pruned", "runs", ...}.',
        ),
    ] = False,
) -> None:
    """Delete finished runs past their retention (never pending, running or suspended ones)."""
    from wf.cli._format import say_damaged

    done = asyncio.run(_gc(older_than, workflow, status, dry_run))
    say_damaged(done.damaged, "left alone")  # stderr, from either backend's answer
    if done.compact_failed is not None:
        import sys

        from wf.admin._words import visible

        # The deletions stand and are reported below: a failed packing is not the sweep's.
        line = f"compacting the finished runs failed: {done.compact_failed}"
        sys.stderr.write(f"warning: {visible(line)} (the next gc or worker tries again)\n")
    if as_json:
        from wf.cli._format import print_json

        print_json(done.to_json())
        return
    verb = "would delete" if dry_run else "deleted"
    line = f"{verb} {len(done.deleted)} run(s) of {done.scanned} finished"
    if not dry_run:
        line += f", {_size(done.bytes)} reclaimed"
    if done.kept_for_family:
        line += f"; kept {done.kept_for_family} whose parent or child is still live"
    if done.tombstones_pruned:
        line += f"; {done.tombstones_pruned} tombstone(s) over 30 days old pruned"
    if done.compacted:
        line += f"; {done.compacted} finished run(s) compacted"
    if done.damaged:
        # The same items as the warnings above (and ``damaged`` in --json): one each.
        line += f"; {len(done.damaged)} damaged item(s) left alone (named on stderr)"
    typer.echo(line)
    if dry_run:
        for run_id in done.deleted:
            typer.echo(run_id)


async def _gc(
    older_than: str | None, workflow: str | None, statuses: list[str] | None, dry_run: bool
) -> Sweep:
    from wf.admin import connect
    from wf.cli._latebar import LateBar

    async with connect() as client:
        with LateBar("gc") as bar:
            try:
                return await client.gc(
                    older_than=older_than,
                    workflow=workflow,
                    statuses=statuses,
                    dry_run=dry_run,
                    on_progress=bar,
                )
            except UsageError as exc:
                # wf.admin names its parameter (older_than); here it is this command's flag.
                said = str(exc)
                if not said.startswith("older_than:"):
                    raise
                raise UsageError("--older-than:" + said.removeprefix("older_than:")) from None


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - the loop returns


@guarded
def verify_command(
    as_json: Annotated[bool, typer.Option("--json", help='Print {"ok", "problems"}.')] = False,
) -> None:
    """Check every run's files against the store format, and every schedule, hook, lane
    entry and rate window; report each damaged item with its path. Runs and schedules are
    never removed or moved, and a directory a power cut left of a run's creation (no run) is
    named with its remedy and left; what the store keeps beside them is put right and said:
    run counts, index entries, entries of runs that do not exist, tombstones of runs that
    do, a record's lost creation number. Exit 1 on problems."""
    problems, absent, read_only = asyncio.run(_verify())
    if read_only is not None:
        from wf.cli._errors import hint

        hint(
            f"the store at {read_only} is read-only: verify checked what it reads and repaired "
            "nothing (run counts, index entries, ghosts and tombstones are put right on a "
            "writable store)"
        )
    if absent is not None and not as_json:
        from wf.admin._words import visible

        # Nothing was checked: "store ok" would vouch for a path that may not even be makeable.
        typer.echo(
            f"no store at {visible(absent)}: nothing to verify (a store is made with its "
            "first run or schedule)"
        )
        return
    if as_json:
        from wf.cli._format import print_json

        print_json({"ok": not problems, "problems": problems})
    else:
        from wf.admin._words import visible

        for line in problems:
            typer.echo(visible(line))  # a damaged file's text: controls shown
        typer.echo("store ok" if not problems else f"{len(problems)} problem(s)")
    if problems:
        raise typer.Exit(EXIT_FAILED)


@guarded
def info_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the facts as JSON.")] = False,
) -> None:
    """Which store, its format version, run counts by status, schedules, size (where cheap)."""
    found: StoreStats = asyncio.run(_stats())
    if as_json:
        from wf.cli._format import print_json

        print_json(found.to_json())
        return
    typer.echo(f"store:      {found.kind} {found.location}")
    typer.echo(f"format:     {found.format if found.format is not None else '-'}")
    counts = ", ".join(f"{n} {status}" for status, n in found.runs.items() if n)
    typer.echo(f"runs:       {sum(found.runs.values())}" + (f" ({counts})" if counts else ""))
    typer.echo(f"schedules:  {found.schedules}")
    typer.echo(f"deleted:    {found.tombstones} (tombstones of runs deleted by retention)")
    if found.size_bytes is not None:
        # Only where the store knows it cheaply (PostgreSQL): a local store would walk every
        # file, and Redis tells only its whole server's memory.
        typer.echo(f"size:       {_size(found.size_bytes)}")


async def _verify() -> tuple[list[str], str | None, str | None]:
    """The store's problems, its location when there is no store there (no format yet), and
    its location when it is a local store that cannot be written (nothing was repaired)."""
    from wf._files import read_only
    from wf.admin import connect
    from wf.cli._latebar import LateBar

    async with connect() as client:
        with LateBar("verify: runs checked") as bar:
            problems = await client.verify(on_progress=bar)
        stats = await client.store_stats()
        absent = stats.location if stats.format is None and not problems else None
        local = stats.kind == "local" and stats.format is not None
        return problems, absent, (stats.location if local and read_only(stats.location) else None)


async def _stats() -> StoreStats:
    from wf.admin import connect

    async with connect() as client:
        return await client.store_stats()
