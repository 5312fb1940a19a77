"""``wf deployments`` (each deployment's runs and live workers) and ``wf deployments upgrade``."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from wf.cli._errors import EXIT_FAILED, guarded

if TYPE_CHECKING:
    from wf.admin._deployments import DeploymentPage


def register(app: typer.Typer) -> None:
    """Add the ``wf deployments`` group (listing, and ``upgrade``) to the app."""
    from wf.cli._registry import COMMANDS

    group = typer.Typer(
        name="deployments",
        help="List deployments (runs by status, live workers), or upgrade one's runs.",
        invoke_without_command=True,
        add_completion=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["--help", "-h"]},
    )
    group.callback()(deployments_command)
    group.command("upgrade")(upgrade_command)
    summary = next(c.summary for c in COMMANDS if c.name == "deployments")
    app.add_typer(group, name="deployments", short_help=summary)


@guarded
def deployments_command(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    """Each deployment id with its runs by status, first and last start, and live workers."""
    if ctx.invoked_subcommand is not None:
        return
    from wf._config import deployment_setting
    from wf.admin import connect
    from wf.admin._words import timestamp, visible
    from wf.cli._format import print_json

    current = deployment_setting()

    from wf.cli._format import say_damaged

    async def go() -> DeploymentPage:
        async with connect() as client:
            return await client.deployment_page()

    page = asyncio.run(go())
    found, any_workers, truncated = page.deployments, page.workers_of_any_deployment, page.truncated
    say_damaged(page.damaged, "not counted")
    if as_json:
        print_json(
            {
                "current": current,
                "deployments": [s.to_json() for s in found],
                "workers_of_any_deployment": any_workers,
                "truncated": truncated,
            }
        )
        return
    if not found:
        sys.stdout.write("no runs\n")
    for summary in found:
        name = visible(summary.deployment) if summary.deployment else "(unpinned)"
        here = "  (this project's)" if current is not None and summary.deployment == current else ""
        runs = ", ".join(f"{n} {s}" for s, n in sorted(summary.runs.items())) or "no runs"
        sys.stdout.write(f"{name}{here}\n  runs: {runs}\n")
        if summary.first_start is not None:
            sys.stdout.write(
                f"  started: {timestamp(summary.first_start)} .. {timestamp(summary.last_start)}\n"
            )
        if summary.deployment is not None:
            sys.stdout.write(f"  live workers: {summary.workers}\n")
    if any_workers:
        sys.stdout.write(f"workers of every deployment: {any_workers}\n")
    if truncated:
        from wf.admin._deployments import SCAN_LIMIT

        sys.stdout.write(
            f"truncated: only the newest {SCAN_LIMIT} runs are counted; older ones are left out\n"
        )


@guarded
def upgrade_command(
    source: Annotated[str, typer.Argument(metavar="FROM", help="The deployment to move from.")],
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="ID",
            help="Re-pin to this deployment (default: [tool.wf] deployment / WF_DEPLOYMENT).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would move; change nothing.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Re-pin to --to although this project is not deployment --to (you vouch that "
            "the code here is --to's).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    """Replay FROM's unfinished runs on the code here (as `wf check --replay`); re-pin those
    that replay cleanly to --to, and list the others with their divergence.

    The replay runs on this project's code, so --to must be this project's deployment id
    (the default) unless --force says the code here is --to's."""
    from wf._config import deployment_setting
    from wf._exceptions import UsageError
    from wf._loader import ensure_project_on_path
    from wf.admin._deployments import Upgrade, check_deployment, upgrade
    from wf.admin._words import visible
    from wf.cli._format import print_json
    from wf.cli._replay import render_text
    from wf.cli._store import open_store

    check_deployment(source, new=False)  # runs may be pinned to it from before the rule
    here = deployment_setting()
    target = to if to is not None else here
    if target is None:
        raise UsageError(
            "no deployment to upgrade to: give --to ID, or set [tool.wf] deployment / WF_DEPLOYMENT"
        )
    check_deployment(target)
    if target == source:
        raise UsageError(f"FROM and --to are both deployment {visible(source)}: nothing to move")
    if target != here and not force:
        # The replay proves the runs replay on the code here, not on --to's: moving them to
        # another deployment would hand them to code nobody checked.
        mine = (
            f"has no deployment id, so it is not deployment {visible(target)}"
            if here is None
            else f"is deployment {visible(here)}, not {visible(target)}"
        )
        raise UsageError(
            f"this project {mine}: runs replay on the code here, so run the upgrade from "
            f"deployment {visible(target)}'s project (or give --force)"
        )
    ensure_project_on_path()

    async def go() -> Upgrade:
        store = open_store()
        try:
            return await upgrade(store, source, target, dry_run=dry_run)
        finally:
            await store.close()

    from wf.cli._stdout import stdout_to_stderr

    # The runs' workflows are imported to replay them: what their modules print is not the
    # result.
    with stdout_to_stderr():
        done = asyncio.run(go())
    if done.warning is not None:
        sys.stderr.write(f"warning: {done.warning}\n")
    if as_json:
        print_json(done.to_json())
    elif not (done.moved or done.busy or done.kept):
        sys.stdout.write(f"no unfinished run is pinned to deployment {visible(source)}\n")
    else:
        verb = "would move" if dry_run else "moved"
        sys.stdout.write(
            f"{verb} {len(done.moved)} run(s) from {source} to {target}"
            + (f": {', '.join(done.moved)}" if done.moved else "")
            + "\n"
        )
        if done.busy:
            sys.stdout.write(
                f"{len(done.busy)} run(s) replay but were being driven (still on {source}; run "
                f"the upgrade again): {', '.join(done.busy)}\n"
            )
        if done.kept:
            sys.stdout.write(f"{len(done.kept)} run(s) stay on {source}:\n")
            body = visible(render_text(done.kept), newlines=True).splitlines()[:-1]  # no summary
            sys.stdout.write("".join(f"  {line}\n" for line in body))
    if done.kept or done.busy:
        raise typer.Exit(EXIT_FAILED)
