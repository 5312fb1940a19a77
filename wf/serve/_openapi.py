"""The OpenAPI 3.1 document of the JSON API (``GET /api/v1/openapi.json``).

The paths are written here, next to the routes; the bodies' schemas are derived from the types
that make them (``_shapes``: the admin and store dataclasses and the API's TypedDicts, through
pydantic, ``_derive``), and the runs listing's query parameters from ``wf.admin.Admin.list_runs``'s
keywords, so a field or a filter added there is in the document with no edit here.
``tests/serve/test_openapi.py`` checks that every route is described with the statuses it
answers, and that real answers fit the schemas with no key undescribed.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from wf.serve import _params


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_RUN_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "A run id (letters, digits, '_', '.', '-').",
    "schema": {"type": "string", "maxLength": 200},
}
_BAD = _error("Bad input: a malformed id, parameter or body (the message says which).")
_AUTH = _error("A token is needed (`Authorization: Bearer T`).")
_HOST = _error("The `Host` is not a name this server answers to (DNS rebinding).")
_MISSING = _error("No run with that id, or retention deleted it (`deleted_at`, `reason`).")

QUERY_NAMES = {"parent_id": "parent"}
"""``Admin.list_runs`` keywords that have another name in the query string."""

_QUERY_DOCS = {
    "status": "repeatable, or comma-separated",
    "workflow": "the workflow's exact name",
    "before": "the last page's `next_before`: runs created before that run "
    "(an id no run has is a 400)",
    "parent": "only the runs this run started",
    "search": "an id, part of a workflow's name, or part of an id (that one reads at most "
    "5,000 runs a page), any case",
    "queue": "runs of this named queue, of every status",
    "group": "runs of this group key (in any queue)",
    "deployment": "runs pinned to this deployment",
}
_QUERY_BOUNDS = {"limit": {"minimum": 1, "maximum": _params.MAX_LIMIT}}


@functools.cache
def schemas() -> dict[str, Any]:
    """``components.schemas``: every body the API answers or takes."""
    from wf.admin import EventPage, Operation, StoreInfo
    from wf.serve import _derive, _shapes
    from wf.store import HookRecord, RunRecord, Schedule, StoreStats

    found = _derive.schemas(
        {
            "Error": _shapes.Error,
            "RunRecord": RunRecord,
            "RunPage": _shapes.RunPage,
            "Operation": Operation,
            "RunDetail": _shapes.detail_fields(),
            "StartRequest": _shapes.StartRequest,
            "Started": _shapes.Started,
            "Result": _shapes.Result,
            "Control": _shapes.Control,
            "ControlTree": _shapes.ControlTree,
            "LogPage": _shapes.LogPage,
            "EventPage": EventPage,
            "HookRecord": HookRecord,
            "Hooks": _shapes.Hooks,
            "Resumed": _shapes.Resumed,
            "StoreInfo": StoreInfo,
            "ScheduleRow": _shapes.schedule_row_fields(),
            "Schedule": Schedule,
            "Removed": _shapes.Removed,
            "Switched": _shapes.Switched,
            "StoreStats": StoreStats,
            "Verified": _shapes.Verified,
            "Swept": _shapes.Swept,
            "Deployments": _shapes.Deployments,
        }
    )
    found["Schedules"] = {
        "type": "object",
        "required": ["schedules", "damaged"],
        "properties": {
            "schedules": {"type": "array", "items": _ref("ScheduleRow")},
            "damaged": {"type": "array", "items": _ref("Fault")},
        },
    }
    found["ScheduleRequest"] = schedule_request()
    found["GcRequest"] = gc_request()
    found["RunDetail"]["description"] = (
        "A run's record, then everything about it (`wf.admin.RunDetail`) and `why` "
        "(`wf.admin.explain`)."
    )
    return found


def list_parameters() -> list[dict[str, Any]]:
    """The query parameters of ``GET /runs``: ``wf.admin.Admin.list_runs``'s keywords."""
    from wf.admin import Admin
    from wf.serve._derive import keywords

    out = []
    for keyword, (schema, default) in keywords(Admin.list_runs, query=True).items():
        schema.update(_QUERY_BOUNDS.get(keyword, {}))
        if default is not None:
            schema["default"] = default
        name = QUERY_NAMES.get(keyword, keyword)
        item = {"name": name, "in": "query", "schema": schema}
        if name in _QUERY_DOCS:
            item["description"] = _QUERY_DOCS[name]
        out.append(item)
    return out


def schedule_request() -> dict[str, Any]:
    """The body of ``PUT /schedules/{id}``: ``wf.schedule``'s keywords (``register``'s)."""
    from wf.engine._schedules import register
    from wf.serve._derive import keywords

    found = keywords(register)
    properties = {name: schema for name, (schema, _default) in found.items()}
    properties["target"] = {"type": "string", "description": "`module:attr` of the workflow"}
    required = [
        name for name, (_schema, default) in found.items() if default is inspect.Parameter.empty
    ]
    return {
        "type": "object",
        "description": "The schedule's workflow (`target`, a module of the project), its "
        "cron expression and `wf.schedule`'s options.",
        "properties": properties,
        "required": ["target", *required],
        "additionalProperties": False,
    }


def gc_request() -> dict[str, Any]:
    """The body of ``POST /store/gc``: ``wf.admin.Admin.gc``'s keywords."""
    from wf.admin import Admin
    from wf.serve._derive import keywords

    return {
        "type": "object",
        "description": "`older_than` (a duration, `30d`) overrides the retention; "
        "`statuses` of finished runs; `dry_run`: only say what would be deleted.",
        "properties": {name: schema for name, (schema, _) in keywords(Admin.gc).items()},
        "additionalProperties": False,
    }


def _paths() -> dict[str, Any]:
    control: dict[str, Any] = {
        "parameters": [
            _RUN_ID,
            {"name": "wait", "in": "query", "schema": {"type": "boolean", "default": False}},
        ],
        "responses": {
            "200": _json(_ref("Control"), "The request is stored (or the run had ended)."),
            "400": _BAD,
            "401": _AUTH,
            "421": _HOST,
            "404": _MISSING,
        },
    }
    return {
        "/runs": {
            "get": {
                "summary": "List runs, newest first",
                "parameters": list_parameters(),
                "responses": {
                    "200": _json(_ref("RunPage"), "A page of runs."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                },
            },
            "post": {
                "summary": "Start a run",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("StartRequest")}},
                },
                "responses": {
                    "201": _json(_ref("Started"), "Started."),
                    "200": _json(_ref("Started"), "A run with that id and input exists."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "409": _error("A run with that id exists with another workflow or input."),
                },
            },
        },
        "/runs/{id}": {
            "get": {
                "summary": "Everything about a run",
                "parameters": [
                    _RUN_ID,
                    {
                        "name": "events",
                        "in": "query",
                        "description": "false: leave the journal out (`events` is null; "
                        "`/runs/{id}/events` pages it)",
                        "schema": {"type": "boolean", "default": True},
                    },
                ],
                "responses": {
                    "200": _json(_ref("RunDetail"), "The run."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _MISSING,
                },
            }
        },
        "/runs/{id}/result": {
            "get": {
                "summary": "The run's result, waiting up to `wait` seconds for it",
                "parameters": [
                    _RUN_ID,
                    {
                        "name": "wait",
                        "in": "query",
                        "schema": {"type": "number", "minimum": 0, "maximum": 300},
                    },
                ],
                "responses": {
                    "200": _json(_ref("Result"), "The run has ended."),
                    "202": _json(_ref("Result"), "The run goes on."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _MISSING,
                },
            }
        },
        "/runs/{id}/cancel": {
            "post": {
                "summary": "Cancel a run (`children=true`: and every run below it)",
                **control,
                "parameters": [
                    *control["parameters"],
                    {"name": "children", "in": "query", "schema": {"type": "boolean"}},
                ],
                "responses": {
                    **control["responses"],
                    "200": _json(
                        {"oneOf": [_ref("Control"), _ref("ControlTree")]},
                        "The request is stored (or the run had ended); with `children`, "
                        "one result per run of the tree.",
                    ),
                },
            }
        },
        "/runs/{id}/wake": {"post": {"summary": "End a run's current sleeps now", **control}},
        "/runs/{id}/retry": {
            "post": {
                "summary": "Queue another attempt of a failed run (completed steps replay)",
                "parameters": [_RUN_ID],
                "responses": {
                    "200": _json(_ref("Started"), "The attempt is queued."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _MISSING,
                    "409": _error("The run has not failed."),
                },
            }
        },
        "/runs/{id}/events": {
            "get": {
                "summary": "The run's journal, oldest event first, a page at a time",
                "parameters": [
                    _RUN_ID,
                    {
                        "name": "start",
                        "in": "query",
                        "description": "index of the first event (the last page's `next_start`)",
                        "schema": {"type": "integer", "minimum": 0, "default": 0},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": _params.MAX_LIMIT,
                            "default": _params.MAX_LIMIT,
                        },
                    },
                ],
                "responses": {
                    "200": _json(_ref("EventPage"), "A page of events (maybe none)."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _MISSING,
                },
            }
        },
        "/runs/{id}/logs": {
            "get": {
                "summary": "The run's step logs, oldest first, a page at a time",
                "parameters": [
                    _RUN_ID,
                    {
                        "name": "start",
                        "in": "query",
                        "description": "index of the first entry (the last page's `next_start`)",
                        "schema": {"type": "integer", "minimum": 0, "default": 0},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                    },
                    {
                        "name": "step",
                        "in": "query",
                        "description": "only this step's entries",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "wait",
                        "in": "query",
                        "description": "with no entries from `start` yet, wait up to this "
                        "many seconds for some (or for the run's end)",
                        "schema": {"type": "number", "minimum": 0, "maximum": 300},
                    },
                ],
                "responses": {
                    "200": _json(_ref("LogPage"), "A page of entries (maybe none)."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _MISSING,
                },
            }
        },
        "/runs/{id}/streams/{name}": {
            "get": {
                "summary": "A byte stream, chunked, following it until it closes",
                "parameters": [
                    _RUN_ID,
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                    {
                        "name": "start",
                        "in": "query",
                        "description": "first chunk; negative counts from the end, as it is "
                        "when asked (none yet: every chunk written after); the response says "
                        "the number of the first chunk sent in WF-Stream-Start, from which a "
                        "reader cut off asks again",
                        "schema": {"type": "integer"},
                    },
                    {
                        "name": "follow",
                        "in": "query",
                        "description": "wait for new chunks (default), and for a stream not "
                        "open yet while the run is not finished",
                        "schema": {"type": "boolean"},
                    },
                    {
                        "name": "abort_cut_off",
                        "in": "query",
                        "description": "a stream whose writer was cut off ends without the "
                        "body's last chunk (default); false: it ends as any body does, and the "
                        "run's stream_info says it is incomplete",
                        "schema": {"type": "boolean"},
                    },
                    {
                        "name": "framed",
                        "in": "query",
                        "description": "each chunk's length (8 bytes, big-endian) before its "
                        "bytes, so the stream's chunks are kept apart (the response says "
                        "WF-Stream-Framing: length); default false: the bytes alone",
                        "schema": {"type": "boolean"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The stream's bytes, as they are written.",
                        "headers": {
                            "WF-Stream-Framing": {
                                "description": "`length` when the body is framed (each "
                                "chunk's length, 8 bytes big-endian, before its bytes); absent "
                                "otherwise",
                                "schema": {"type": "string", "enum": ["length"]},
                            },
                            "WF-Stream-Start": {
                                "description": "the number of the first chunk sent, for a "
                                "negative start (0 on a stream not written yet)",
                                "schema": {"type": "integer", "minimum": 0},
                            },
                        },
                        "content": {"application/octet-stream": {}},
                    },
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _error("No such run, or an ended run without that stream."),
                },
            }
        },
        "/hooks": {
            "get": {
                "summary": "Live hooks",
                "parameters": [{"name": "run", "in": "query", "schema": {"type": "string"}}],
                "responses": {
                    "200": _json(_ref("Hooks"), "The hooks."),
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _MISSING,
                },
            }
        },
        "/hooks/{token}": {
            "post": {
                "summary": "Deliver the JSON body to a hook",
                "parameters": [
                    {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}},
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "description": "A repeat with the same key (for at least a day) "
                        "delivers nothing new and answers the same run.",
                        "schema": {"type": "string", "maxLength": 255},
                    },
                ],
                "requestBody": {"content": {"application/json": {"schema": {}}}},
                "responses": {
                    "200": _json(_ref("Resumed"), "Delivered (or delivered before, by its key)."),
                    "400": _error("The payload does not fit the hook's type."),
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _error("No live hook with that token."),
                },
            }
        },
        "/events": {
            "get": {
                "summary": "Server-sent events: `run` events of run changes (`run=ID`: one run)",
                "parameters": [{"name": "run", "in": "query", "schema": {"type": "string"}}],
                "responses": {
                    "200": {
                        "description": "`event: run` / `data: {id, workflow, status, "
                        "updated_at[, events]}`",
                        "content": {"text/event-stream": {}},
                    },
                    "400": _BAD,
                    "401": _AUTH,
                    "421": _HOST,
                    "404": _MISSING,
                },
            }
        },
        "/store": {
            "get": {
                "summary": "Which store this server serves",
                "responses": {
                    "200": _json(_ref("StoreInfo"), "The store."),
                    "401": _AUTH,
                    "421": _HOST,
                },
            }
        },
        **_upkeep_paths(),
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {
                    "200": _json({"type": "object"}, "The OpenAPI document."),
                    "401": _AUTH,
                    "421": _HOST,
                },
            }
        },
    }


def document() -> dict[str, Any]:
    """The OpenAPI document."""
    from wf import __version__

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "wf",
            "version": __version__,
            "description": "Durable workflows over HTTP: start, read, control runs; hooks; "
            'byte streams; step logs; events. Errors are {"error": {"type", "message"}}.',
        },
        "servers": [{"url": "/api/v1"}],
        "components": {
            "schemas": schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
    }


def _upkeep_paths() -> dict[str, Any]:
    """Schedules, the store's upkeep, deployments (``_upkeep``)."""
    schedule_id = {
        "name": "id",
        "in": "path",
        "required": True,
        "description": "A schedule id.",
        "schema": {"type": "string"},
    }
    guarded = {"401": _AUTH, "421": _HOST}
    return {
        "/schedules": {
            "get": {
                "summary": "Every schedule, with its last run's status",
                "responses": {"200": _json(_ref("Schedules"), "The schedules."), **guarded},
            }
        },
        "/schedules/{id}": {
            "put": {
                "summary": "Create or replace a schedule (everything is checked first)",
                "parameters": [schedule_id],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ScheduleRequest")}},
                },
                "responses": {
                    "200": _json(_ref("Schedule"), "The schedule as stored."),
                    "400": _error("A bad id, target, expression, zone, option or input."),
                    **guarded,
                },
            },
            "delete": {
                "summary": "Remove a schedule (the runs it started are kept)",
                "parameters": [schedule_id],
                "responses": {
                    "200": _json(_ref("Removed"), "Removed (or there was none)."),
                    "400": _BAD,
                    **guarded,
                },
            },
        },
        **{
            f"/schedules/{{id}}/{action}": {
                "post": {
                    "summary": summary,
                    "parameters": [schedule_id],
                    "responses": {
                        "200": _json(_ref("Switched"), "The schedule after (null: none)."),
                        "400": _BAD,
                        **guarded,
                    },
                }
            }
            for action, summary in (
                ("pause", "Pause a schedule: it fires nothing until resumed"),
                ("resume", "Resume a paused schedule from now (missed fires not caught up)"),
            )
        },
        "/store/stats": {
            "get": {
                "summary": "What the store holds: runs by status, schedules, size",
                "responses": {"200": _json(_ref("StoreStats"), "The store's facts."), **guarded},
            }
        },
        "/store/verify": {
            "get": {
                "summary": "Check the store; repair what verify repairs (wf store verify)",
                "responses": {"200": _json(_ref("Verified"), "The problems found."), **guarded},
            }
        },
        "/store/gc": {
            "post": {
                "summary": "Delete finished runs past their retention",
                "requestBody": {"content": {"application/json": {"schema": _ref("GcRequest")}}},
                "responses": {
                    "200": _json(_ref("Swept"), "What was (or would be) deleted."),
                    "400": _BAD,
                    **guarded,
                },
            }
        },
        "/deployments": {
            "get": {
                "summary": "Each deployment's runs and live workers",
                "responses": {"200": _json(_ref("Deployments"), "The deployments."), **guarded},
            }
        },
    }
