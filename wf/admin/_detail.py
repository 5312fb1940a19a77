"""A run's detail as JSON: one document for every front end.

``detail_json`` is what ``wf inspect --json`` prints and the terminal UI reads (locally or
through a ``wf serve``: the same document). ``GET /api/v1/runs/{id}`` answers with the same
document laid out as the HTTP API has always documented it (``http_detail_json``): the
record's fields at the top level instead of under ``run``, ``why`` as the structured
explanation, ``streams`` as names with ``stream_info`` beside them, and without ``deployment``
(the record's ``deployment`` and ``code_hash`` are there) and ``replays`` (a server never
imports a run's code to replay it). ``wf.admin.HttpAdmin`` reads that layout back into a
``RunDetail``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wf.admin._explain import explain
from wf.admin._read import tagged
from wf.admin._words import why_line

if TYPE_CHECKING:
    from wf.admin._model import RunDetail


def detail_json(detail: RunDetail) -> dict[str, Any]:
    """Everything about the run as one JSON object (``docs/cli.md``, ``wf inspect --json``):
    ``run`` (the record), ``why`` (one line of words), ``explanation`` (the reasons as data,
    ``wf.admin.explain``), ``driver_gone``, the steps with their attempts (``spans``), the
    journal, failures, hooks, streams, relatives, races, compensations, deployment, replay
    check, queue state, schedule, recoveries and the undelivered inbox."""
    data = detail.to_json(spans=True)
    # The record as it is stored (as a listing gives it): its values in wf's tagged JSON, text
    # UTF-8 cannot carry too, which the detail shows as text.
    for field in ("input", "output"):
        data["run"][field] = tagged(data["run"][field])
    explanation = explain(detail)
    why = why_line(explanation, detail.now)
    if detail.cancel_requested and not detail.run.status.is_terminal:
        why += "; cancellation requested"
    return {
        "run": data.pop("run"),
        "why": why,
        "explanation": explanation.to_json(),
        **data,
        "inbox": list(detail.inbox),
    }


def http_detail_json(detail: RunDetail, *, events: bool = True) -> dict[str, Any]:
    """``detail_json`` as ``GET /api/v1/runs/{id}`` lays it out (``docs/http.md``);
    ``events=False`` leaves the journal out (``"events": null``: ``?events=false``, for a
    client that needs the rest, which is a fraction of a long run's document; the journal
    is paged by ``wf.admin.journal_page``)."""
    data = detail_json(detail)
    if not events:
        data["events"] = None
    run = data.pop("run")
    streams = data.pop("streams")
    explanation = data.pop("explanation")
    for dropped in ("why", "deployment", "replays"):
        del data[dropped]
    return {
        **run,
        "why": explanation,
        "streams": list(streams),
        "stream_info": streams,
        **data,
    }
