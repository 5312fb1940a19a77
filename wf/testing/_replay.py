"""``wf.testing.replay``: replay one exported run against the code here, in a test.

A run exported with ``wf inspect RUN_ID --journal > tests/journals/order-1.jsonl`` (its record,
then its journal, one JSON object a line) is checked in beside the tests; replaying it in a test
says whether changed workflow code still resumes runs like it, as ``wf check --replay`` says of
the runs in a store. The replay is ``wf check --replay``'s: recorded steps return their recorded
results, nothing runs, and nothing is written anywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wf._exceptions import UsageError, WFError
from wf.engine._workflow import Workflow
from wf.store import RunRecord

JournalSource = str | os.PathLike[str] | Sequence[dict[str, Any]]


def load_export(source: JournalSource) -> tuple[RunRecord, list[dict[str, Any]]]:
    """The record and journal of an export: a path to the JSON lines ``wf inspect --journal``
    prints, or those lines already parsed (a list of objects, the record's first)."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read the exported journal {str(path)!r}: {exc}") from None
    else:
        lines = list(source)
    if not lines or not isinstance(lines[0], dict) or not isinstance(lines[0].get("record"), dict):
        raise UsageError(
            'an exported journal begins with the run\'s record ({"record": {...}}), as '
            "`wf inspect RUN_ID --journal` writes it"
        )
    events = [dict(event) if isinstance(event, dict) else event for event in lines[1:]]
    if not all(isinstance(event, dict) and "type" in event for event in events):
        raise UsageError("every line of an exported journal after the first is one event object")
    return RunRecord.from_json(lines[0]["record"]), events


async def replay(
    journal: JournalSource,
    workflow: Workflow[..., Any] | None = None,
    *,
    timeout: float = 10.0,
) -> None:
    """Replay an exported run against the code loaded here; return if it replays.

    ``journal``: a path to what ``wf inspect RUN_ID --journal`` wrote, or its lines parsed.
    ``workflow``: the workflow to replay it with (default: the one the run names, imported as
    ``wf check --replay`` imports it). Raises ``wf.NondeterminismError`` where the code no
    longer does what the journal recorded, and ``wf.WFError`` when the run cannot be replayed
    here (its workflow not found, the replay raising what the run never did, no end within
    ``timeout`` seconds). A run still in flight is replayed as far as its journal goes.
    """
    from wf.engine._replay_check import check_run
    from wf.store.memory import MemoryStore

    record, events = load_export(journal)
    if workflow is not None:
        record.workflow, record.target = workflow.name, None
        for event in events:
            if event.get("type") == "run_started":
                event["workflow"] = workflow.name
    store = MemoryStore()
    await store.create_run(record, events)
    report = await check_run(store, record.id, timeout=timeout)
    if report.divergence is not None:
        raise report.divergence
    if report.status != "ok":
        raise WFError(f"run {record.id!r} cannot be replayed here: {report.message}")
