"""``wf logs``: what a run's steps printed or logged, per step attempt (``--follow``: live).

Each attempt starts with a header line (``── charge · attempt 2 ──``); lines keep their text,
stderr lines and log records are marked, so ``wf logs ID | grep`` works on plain text. On a
terminal, control characters show as escapes (``\x1b``): what a step printed is anyone's
text and must not drive the terminal; in a pipe or a file the text is written as it was.
``--json`` writes the entries themselves, one JSON object per line.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any, TextIO

import typer

from wf.cli._errors import guarded


def register(app: typer.Typer) -> None:
    """Add ``wf logs`` to the app."""
    app.command("logs")(logs_command)


@guarded
def logs_command(
    run_id: Annotated[
        str, typer.Argument(metavar="RUN_ID", help="The run's id.", show_default=False)
    ],
    step: Annotated[
        str | None,
        typer.Option("--step", metavar="NAME", help="Only this step's output.", show_default=False),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow/--no-follow", "-f", help="Keep showing new output until the run ends."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per entry (ts, step, attempt...).")
    ] = False,
) -> None:
    """Show what the run's steps printed or logged, per step attempt."""
    asyncio.run(_logs(run_id, step, follow, as_json, sys.stdout))  # closed pipe: closed_pipe()


async def _logs(run_id: str, step: str | None, follow: bool, as_json: bool, out: TextIO) -> None:
    from wf.admin import connect
    from wf.admin._words import encodable_json, log_attempt, log_header, log_line, visible

    shown = _terminal(out)
    async with connect() as client:
        current: tuple[Any, ...] | None = None
        async for entry in client.follow_logs(run_id, step=step, follow=follow):
            if as_json:
                import json

                out.write(encodable_json(json.dumps(entry, ensure_ascii=False)) + "\n")
            else:
                lines = []
                if log_attempt(entry) != current:
                    current = log_attempt(entry)
                    lines.append(log_header(entry))
                lines.append(log_line(entry))
                for line in lines:
                    out.write((visible(line, newlines=True) if shown else line) + "\n")
            out.flush()


def _terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # not a file, or closed
        return False
