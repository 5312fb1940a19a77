"""The JSON bodies of the HTTP API, as types: what ``_openapi`` turns into the document.

The leaves are the admin and store dataclasses themselves (``RunRecord``, ``Operation``,
``Explanation``, ``HookRecord``, ...), whose ``to_json()`` is every field: ``_openapi`` reads
their fields, so a field added to one is in the document with no other edit. The bodies the
API composes around them are the ``TypedDict``s here, and a run's detail is the record's fields
plus ``RunDetail``'s, changed as ``_api.detail_json`` changes them (``detail_fields``).
``tests/serve/test_openapi.py`` checks real answers against the document with no key left
undescribed, so a body that grows a key this module does not name fails there.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NotRequired, TypedDict

from wf.admin._model import ControlResult, Explanation, RunDetail
from wf.engine._deployments import DeploymentSummary
from wf.store import Fault, HookRecord, RunRecord, Schedule


class ErrorBody(TypedDict):
    """What went wrong: a short ``type`` (``bad_request``, ``not_found``, ...) and words."""

    type: str
    message: str
    run_id: NotRequired[str]
    """``not_found``: the run asked for."""
    deleted_at: NotRequired[float]
    """``not_found`` of a run retention (or ``wf gc``) deleted: when (epoch seconds)."""
    reason: NotRequired[str]
    """... and why: ``retention`` or ``gc``."""
    exception: NotRequired[str]
    """``bad_request`` of a kind of ``wf.UsageError``: its class (``InputValidationError``,
    ``LoadError``, ...), which the remote client raises."""
    stream: NotRequired[str]
    """``not_found`` of a byte stream: the stream asked for ..."""
    streams: NotRequired[list[str]]
    """... and the streams the run has."""


class Error(TypedDict):
    """Every error answer."""

    error: ErrorBody


class RunPage(TypedDict):
    """A page of runs, newest first (``GET /runs``)."""

    runs: list[RunRecord]
    next_before: str | None
    """Pass as ``before`` for the next page (runs created before that run); null on the last."""
    damaged: list[Fault]
    """Runs the page passed over because their record cannot be read (``kind`` is ``run``,
    ``item`` its id, ``where`` its file or row, ``reason`` why): left out, never failing the
    page. ``wf store verify`` names every damaged item."""
    searched: NotRequired[int]
    """With ``search``: the runs read for this page (at most 5,000: no index holds substrings
    of ids and workflow names)."""
    search_further: NotRequired[str | None]
    """With ``search``: the bound stopped the search before the page filled; pass as
    ``before`` to search further (null when it did not)."""


class StartRequest(TypedDict, total=False):
    """``workflow`` (a name) or ``target`` (``module:attr``); ``input`` as ``wf run --input``
    takes it, or ``args`` / ``kwargs``; ``id`` to choose the run's id; ``options``:
    ``Workflow.with_options(...)``."""

    workflow: str
    target: str
    input: Any
    args: list[Any]
    kwargs: dict[str, Any]
    id: str
    options: dict[str, Any]


class Started(TypedDict):
    """A run that was started or queued again, and its status."""

    id: str
    status: str


class RecordedError(TypedDict, total=False):
    """A failed run's error as it was recorded, whole (``wf.engine._errors.describe_error``),
    so a client rebuilds the same ``wf.RunFailed`` a local reader gets."""

    type: str
    """The qualified type name."""
    message: str
    module: str
    qualname: str
    args: list[Any] | None
    fields: dict[str, Any]
    """Public attributes (encoded)."""
    traceback: str


class Result(TypedDict):
    """A run's result: ``output`` once completed, ``error`` once failed."""

    id: str
    status: str
    output: NotRequired[Any]
    error: NotRequired[RecordedError]


class Control(TypedDict):
    """A cancel or wake request: ``sent`` is false when the run had already ended, or (with
    ``refused`` saying why) when a wake-up would end nothing."""

    id: str
    sent: bool
    status: str
    refused: NotRequired[str]


class ControlTree(TypedDict):
    """``cancel?children=true``: one ``ControlResult`` per run of the tree, root first."""

    runs: list[ControlResult]


class LogEntry(TypedDict):
    """One line a step attempt wrote, or one log record it made (``wf.engine._steplogs``)."""

    ts: float
    """Epoch seconds."""
    op: int
    """The step's operation in the run."""
    step: str
    attempt: int
    resumes: int
    """The run's resume count then (tells a re-run attempt apart)."""
    stream: str
    """``stdout``, ``stderr``, ``log`` (a log record), ``wf`` (a note)."""
    text: str
    level: NotRequired[str]
    """Log records."""
    logger: NotRequired[str]
    """Log records."""
    trace_id: NotRequired[str]
    """When the step ran in a trace."""
    span_id: NotRequired[str]


class LogPage(TypedDict):
    """A page of a run's step log entries, oldest first (``GET /runs/{id}/logs``)."""

    run_id: str
    status: str
    entries: list[LogEntry]
    next_start: int
    """Pass as ``start`` for the next page (or to follow the logs)."""
    more: bool
    """Entries past this page are stored already."""


class Hooks(TypedDict):
    """Live hooks, oldest first (``GET /hooks``)."""

    hooks: list[HookRecord]
    damaged: list[Fault]
    """Hooks left out because their stored record cannot be read (``kind`` is ``hook``,
    ``item`` its token, or on the local store its file's name, ``where`` its file, row or
    key, ``reason`` why); usually empty."""


class Resumed(TypedDict):
    """A payload delivered to a hook: the run that owns it, and the id of the inbox message
    that carried it (the run journals it with the payload: ``hook_payload``'s ``message``;
    a ``hook_payload_refused`` of that payload says the run refused it), null for a keyed
    delivery."""

    run_id: str
    message: str | None


class StreamState(TypedDict):
    """A byte stream of a run: its chunks so far, whether it is closed, and whether it is
    complete (ended with its writer done; closed and not complete: ``cut_step``, the step
    writing it, was cut off — its body ends without its last chunk)."""

    chunks: int
    closed: bool
    complete: bool
    cut_step: str | None


class ParentLink(TypedDict):
    """The run that started this one (``workflow``/``status`` null once it cannot be read)."""

    id: str
    workflow: str | None
    status: str | None


DETAIL_DROPPED = ("run", "now", "deployment", "replays")
"""``RunDetail`` fields the API's detail leaves out: the record is merged in instead of
``run``; ``now`` is the reading's clock; ``deployment``/``replays`` are the CLI's (the record
carries ``deployment`` and ``code_hash``)."""

DETAIL_CHANGED: dict[str, Any] = {
    "why": Explanation,
    "cancel_requested": bool,
    "streams": list[str],
    "stream_info": dict[str, StreamState],
    "parent": ParentLink | None,
    "events": list[dict[str, Any]] | None,
}
"""Fields of the API's detail that are not ``RunDetail``'s as they are: ``why``
(``wf.admin.explain``), ``streams`` as names with ``stream_info`` beside them, the parent
link without ``op``, the request to cancel seen anywhere (``RunDetail.cancel_requested``), and
``events``, null when asked for without them (``?events=false``)."""


def detail_fields() -> dict[str, Any]:
    """The fields of ``GET /runs/{id}``'s answer and their types: the record's, then
    ``RunDetail``'s as ``_api.detail_json`` gives them."""
    import typing

    record = typing.get_type_hints(RunRecord)
    detail = typing.get_type_hints(RunDetail)
    fields = {f.name: record[f.name] for f in dataclasses.fields(RunRecord)}
    for field in dataclasses.fields(RunDetail):
        if field.name not in DETAIL_DROPPED:
            fields[field.name] = detail[field.name]
    fields.update(DETAIL_CHANGED)
    return fields


def schedule_row_fields() -> dict[str, Any]:
    """The fields of a row of ``GET /schedules``: the schedule's, and its last run's status
    (``wf.admin.list_schedules``)."""
    import typing

    hints = typing.get_type_hints(Schedule)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(Schedule)}
    fields["last_run_status"] = str | None
    fields["last_run_unserved"] = str | None
    return fields


class Removed(TypedDict):
    """``DELETE /schedules/{id}``: ``removed`` is false when there was no such schedule."""

    id: str
    removed: bool


class Switched(TypedDict):
    """``POST /schedules/{id}/pause`` and ``.../resume``: the schedule after (null: there was
    none)."""

    id: str
    schedule: Schedule | None


class Verified(TypedDict):
    """``GET /store/verify``: every problem, one line each (``ok``: none)."""

    ok: bool
    problems: list[str]


class Swept(TypedDict):
    """``POST /store/gc``: what the sweep deleted (or, ``dry_run``, would)."""

    deleted: int
    """How many runs."""
    bytes: int
    scanned: int
    kept_for_family: int
    """Expired runs kept because a parent or child of theirs is still live."""
    tombstones_pruned: int
    dry_run: bool
    compacted: int
    """Finished runs packed into segment files after the sweep (the local store)."""
    compact_failed: str | None
    """Why that packing failed (the deletions stand; ``wf gc`` warns), or null."""
    runs: list[str]
    """The deleted runs' ids."""
    damaged: list[Fault]
    """Runs the sweep left alone because their record cannot be read (``kind`` is ``run``);
    ``wf gc`` names each on stderr."""


class Deployments(TypedDict):
    """``GET /deployments``: each deployment's runs and live workers."""

    deployments: list[DeploymentSummary]
    workers_of_any_deployment: int
    """Live workers that drive runs of every deployment."""
    truncated: bool
    """Whether older runs were left out: only the newest 100,000 are read."""
    damaged: list[Fault]
    """Runs not counted because their record cannot be read (``kind`` is ``run``);
    ``wf deployments`` names each on stderr."""
