"""``wf check --replay``: replay stored journals against the code as it is now.

The static checker (``wf check``) finds code that *could* break replay; this finds runs that
*would*: every stored run (or the ones named) is replayed through the current workflow code by
the kernel's check mode (through ``wf.admin._replay``), which executes no step, sleeps through
no timer and writes nothing. It is meant for CI before a deploy: exit 1 means some stored run
no longer matches the code (or its workflow cannot even be loaded, which a deploy would hit
too), so shipping this code would fail those runs with ``wf.NondeterminismError``.

It imports the workflows' modules through the runs' recorded targets, so it must run where
``wf worker`` would (the project directory, with the project's packages importable).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from wf.admin._replay import replay_runs, report_json, source_of

if TYPE_CHECKING:
    from wf.engine._replay_check import ReplayReport

STATUSES = ("ok", "diverged", "error")
JSON_VERSION = 1


def summary(reports: Sequence[ReplayReport]) -> dict[str, int]:
    """Counts of runs by replay status (``runs``, ``ok``, ``diverged``, ``error``)."""
    counts = {"runs": len(reports), **{status: 0 for status in STATUSES}}
    for report in reports:
        counts[report.status] = counts.get(report.status, 0) + 1
    return counts


def exit_code(reports: Sequence[ReplayReport]) -> int:
    """1 if any run diverged or could not be replayed, else 0.

    ``error`` fails the check too: a workflow that cannot be imported or whose replay blows up
    here will do the same in the worker after the deploy.
    """
    return 1 if any(r.status != "ok" for r in reports) else 0


def render_text(reports: Sequence[ReplayReport]) -> str:
    """One line per run (two more for a divergence), then a summary line."""
    lines: list[str] = []
    for report in reports:
        head = f"{report.status:<8}  {report.run_id}  {report.workflow or '(workflow unknown)'}"
        if report.status == "ok":
            lines.append(f"{head}  ({_compared(report)})")
        elif report.status == "diverged" and report.divergence is not None:
            d = report.divergence
            lines.append(head)
            lines.append(
                f"  operation #{d.index}: recorded {d.recorded or 'nothing'}, "
                f"current code calls {d.current or 'nothing'}"
            )
            where, code = source_of(d.location)
            if where:
                lines.append(f"  at {where}" + (f": {code}" if code else ""))
        else:
            lines.append(f"{head}: {report.message}")
    counts = summary(reports)
    noun = "run" if counts["runs"] == 1 else "runs"
    lines.append(
        f"{counts['runs']} {noun} replayed: {counts['ok']} ok, {counts['diverged']} diverged, "
        f"{counts['error']} error(s)"
    )
    return "\n".join(lines)


def _compared(report: ReplayReport) -> str:
    """How many operations a run that replays had compared (replayed and matched): of a run
    in flight, only those before its journal's end, where the replay stopped."""
    done, recorded = report.ops_replayed, report.ops_recorded
    words = f"{done} of {recorded} recorded" if done < recorded else f"{done}"
    words += " operation(s) compared"
    if report.in_flight:
        words += "; in flight: stopped at the journal's end, where its next drive goes on"
    return words


def replay_command(
    run_ids: Sequence[str], *, as_json: bool, unfinished: bool, deployment: str | None = None
) -> int:
    """``wf check --replay``: print the reports; returns the exit code."""
    import asyncio

    from wf.cli._store import open_store

    async def go() -> tuple[list[ReplayReport], dict[str, int]]:
        store = open_store()
        try:
            return await replay_runs(
                store, list(run_ids) or None, unfinished=unfinished, deployment=deployment
            )
        finally:
            await store.close()

    from wf.cli._stdout import stdout_to_stderr

    # The runs' workflows are imported: what their modules print is not the report.
    with stdout_to_stderr():
        reports, skipped = asyncio.run(go())
    if skipped:
        from wf.admin._words import visible

        # Not a pass for them: they stay on their deployment's code, which `upgrade` checks.
        counts = ", ".join(f"{visible(d)}: {n}" for d, n in skipped.items())
        sys.stderr.write(
            f"note: {sum(skipped.values())} run(s) pinned to other deployments not checked "
            f"({counts}): they replay on their own deployment's code; `wf deployments upgrade "
            "FROM --dry-run` checks them against this code\n"
        )
    if not reports and not run_ids and not skipped:
        from wf.cli._store import store_path

        # An empty store passes trivially: say so, in case CI points at the wrong directory.
        sys.stderr.write(f"hint: no runs to replay in {store_path()}\n")
    if as_json:
        from wf.cli._format import print_json

        print_json(
            {
                "version": JSON_VERSION,
                "summary": summary(reports),
                "runs": [report_json(r) for r in reports],
                **({"other_deployments": skipped} if deployment is not None else {}),
            }
        )
    else:
        from wf.admin._words import visible

        # Recorded names and errors: control characters shown.
        sys.stdout.write(visible(render_text(reports), newlines=True) + "\n")
        diverged = [r.divergence for r in reports if r.status == "diverged"]
        if any(d is not None and d.reason is not None for d in diverged):
            # Not a code change: steps ran together and replay would hand calls each other's ids.
            sys.stderr.write(
                "hint: a branch of a gather or TaskGroup calls several steps one after the "
                "other, which does not resume yet; make each branch a child run (wf.start) "
                "(wf help nondeterminism)\n"
            )
        if any(d is None or d.reason is None for d in diverged):
            sys.stderr.write(
                "hint: a run in flight resumes on whatever code drives it next, unless it is "
                "pinned to its deployment (docs/deploying.md); guard the change with "
                '`if wf.patched("change-id"):` (wf help nondeterminism)\n'
            )
        sys.stdout.flush()
    return exit_code(reports)
