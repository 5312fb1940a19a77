"""The OpenAPI 3.1 document of the JSON API (``GET /api/v1/openapi.json``).

Written by hand next to the routes; ``tests/serve/test_openapi.py`` checks that every route is
described with the statuses it answers, and that responses match the schemas.
"""

from __future__ import annotations

from typing import Any

from wf.store import RunStatus


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
_MISSING = _error("No run with that id.")

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    },
    "RunRecord": {
        "type": "object",
        "required": ["id", "workflow", "status", "created_at", "updated_at"],
        "properties": {
            "id": {"type": "string"},
            "workflow": {"type": "string"},
            "status": {"type": "string", "enum": [s.value for s in RunStatus]},
            "target": {"type": ["string", "null"]},
            "input": {"description": "wf's tagged JSON of the arguments"},
            "output": {"description": "wf's tagged JSON of the result (plain values are plain)"},
            "error": {"type": ["object", "null"]},
            "created_at": {"type": "number", "description": "epoch seconds"},
            "updated_at": {"type": "number"},
            "wake_at": {"type": ["number", "null"]},
            "waiting_for": {
                "type": ["array", "null"],
                "description": "what a suspended run waits on: [{kind, target, due}]",
            },
            "parent_id": {"type": ["string", "null"]},
            "root_id": {"type": ["string", "null"]},
            "deployment": {
                "type": ["string", "null"],
                "description": "the deployment the run is pinned to (null: unpinned)",
            },
            "code_hash": {"type": ["string", "null"]},
            "resumes": {"type": "integer"},
            "cancel_requested": {"type": "boolean"},
            "seq": {
                "type": "integer",
                "description": "the run's place in the store's creation sequence (listings are "
                "newest-created first, by it)",
            },
        },
    },
    "RunPage": {
        "type": "object",
        "required": ["runs", "next_before"],
        "properties": {
            "runs": {"type": "array", "items": _ref("RunRecord")},
            "next_before": {
                "type": ["string", "null"],
                "description": "pass as `before` for the next page (runs created before "
                "that run); null on the last",
            },
            "searched": {
                "type": "integer",
                "description": "with `search`: the runs read for this page (at most 5,000: "
                "no index holds substrings of ids and workflow names)",
            },
            "search_further": {
                "type": ["string", "null"],
                "description": "with `search`: the bound stopped the search before the page "
                "filled; pass as `before` to search further (null when it did not)",
            },
        },
    },
    "Operation": {
        "type": "object",
        "required": ["op", "kind", "name", "status", "attempts", "started_at", "spans"],
        "properties": {
            "op": {"type": "integer"},
            "kind": {"type": "string", "enum": ["step", "sleep", "hook", "child"]},
            "name": {"type": "string"},
            "status": {"type": "string"},
            "attempts": {"type": "integer"},
            "started_at": {"type": "number"},
            "finished_at": {"type": ["number", "null"]},
            "duration": {"type": ["number", "null"]},
            "error": {"type": ["object", "null"]},
            "retry_at": {"type": ["number", "null"]},
            "until": {"type": ["number", "null"]},
            "spans": {
                "type": "array",
                "description": "a step's attempts",
                "items": {
                    "type": "object",
                    "required": ["number", "started_at", "status"],
                    "properties": {
                        "number": {"type": "integer"},
                        "started_at": {"type": "number"},
                        "finished_at": {"type": ["number", "null"]},
                        "status": {"type": "string"},
                        "error": {"type": ["object", "null"]},
                        "retry_at": {"type": ["number", "null"]},
                    },
                },
            },
        },
    },
    "RunDetail": {
        "allOf": [
            _ref("RunRecord"),
            {
                "type": "object",
                "required": ["why", "steps", "events", "hooks", "streams", "children"],
                "properties": {
                    "why": {
                        "type": "object",
                        "description": "why the run is where it is (wf.admin.explain)",
                        "required": ["status", "reasons"],
                        "properties": {
                            "status": {"type": "string"},
                            "reasons": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["kind", "tone"],
                                    "properties": {
                                        "kind": {"type": "string"},
                                        "tone": {"type": "string"},
                                    },
                                },
                            },
                        },
                    },
                    "steps": {"type": "array", "items": _ref("Operation")},
                    "events": {"type": "array", "items": {"type": "object"}},
                    "errors": {"type": "array", "items": {"type": "object"}},
                    "hooks": {"type": "array", "items": _ref("Hook")},
                    "streams": {"type": "array", "items": {"type": "string"}},
                    "stream_info": {"type": "object"},
                    "children": {"type": "array", "items": {"type": "object"}},
                    "parent": {"type": ["object", "null"]},
                    "inbox": {"type": "array", "items": {"type": "string"}},
                },
            },
        ]
    },
    "StartRequest": {
        "type": "object",
        "description": "`workflow` (a name) or `target` (`module:attr`); `input` as `wf run "
        "--input` takes it, or `args` / `kwargs`.",
        "properties": {
            "workflow": {"type": "string"},
            "target": {"type": "string"},
            "input": {},
            "args": {"type": "array"},
            "kwargs": {"type": "object"},
            "id": {"type": "string"},
            "options": {"type": "object", "description": "Workflow.with_options(...)"},
        },
    },
    "Started": {
        "type": "object",
        "required": ["id", "status"],
        "properties": {"id": {"type": "string"}, "status": {"type": "string"}},
    },
    "Result": {
        "type": "object",
        "required": ["id", "status"],
        "properties": {
            "id": {"type": "string"},
            "status": {"type": "string"},
            "output": {"description": "present once completed"},
            "error": {
                "type": "object",
                "description": "present once failed: the recorded error whole",
                "properties": {
                    "type": {"type": "string", "description": "qualified type name"},
                    "message": {"type": "string"},
                    "module": {"type": "string"},
                    "qualname": {"type": "string"},
                    "fields": {"type": "object", "description": "public attributes (encoded)"},
                    "traceback": {"type": "string"},
                },
            },
        },
    },
    "Control": {
        "type": "object",
        "required": ["id", "sent", "status"],
        "properties": {
            "id": {"type": "string"},
            "sent": {"type": "boolean", "description": "false: the run had already ended"},
            "status": {"type": "string"},
        },
    },
    "LogEntry": {
        "type": "object",
        "description": "One line a step attempt wrote, or one log record it made",
        "required": ["ts", "op", "step", "attempt", "stream", "text"],
        "properties": {
            "ts": {"type": "number", "description": "epoch seconds"},
            "op": {"type": "integer", "description": "the step's operation in the run"},
            "step": {"type": "string"},
            "attempt": {"type": "integer"},
            "resumes": {
                "type": "integer",
                "description": "the run's resume count then (tells a re-run attempt apart)",
            },
            "stream": {
                "type": "string",
                "description": "`stdout`, `stderr`, `log` (a log record), `wf` (a note)",
            },
            "text": {"type": "string"},
            "level": {"type": "string", "description": "log records"},
            "logger": {"type": "string", "description": "log records"},
            "trace_id": {"type": "string", "description": "when the step ran in a trace"},
            "span_id": {"type": "string"},
        },
    },
    "LogPage": {
        "type": "object",
        "required": ["run_id", "status", "entries", "next_start", "more"],
        "properties": {
            "run_id": {"type": "string"},
            "status": {"type": "string", "enum": [s.value for s in RunStatus]},
            "entries": {"type": "array", "items": _ref("LogEntry")},
            "next_start": {
                "type": "integer",
                "description": "pass as `start` for the next page (or to follow the logs)",
            },
            "more": {
                "type": "boolean",
                "description": "entries past this page are stored already",
            },
        },
    },
    "Hook": {
        "type": "object",
        "required": ["token", "run_id", "op"],
        "properties": {
            "token": {"type": "string"},
            "run_id": {"type": "string"},
            "op": {"type": "integer"},
            "schema": {"type": ["object", "null"]},
            "created_at": {"type": "number"},
        },
    },
}


def _paths() -> dict[str, Any]:
    control = {
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
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "description": "repeatable, or comma-separated",
                        "schema": {"type": "string"},
                    },
                    {"name": "workflow", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                    },
                    {"name": "before", "in": "query", "schema": {"type": "string"}},
                    {"name": "parent", "in": "query", "schema": {"type": "string"}},
                    {"name": "search", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "queue",
                        "in": "query",
                        "description": "runs of this named queue, of every status",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "group",
                        "in": "query",
                        "description": "runs of this group key (in any queue)",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "deployment",
                        "in": "query",
                        "description": "runs pinned to this deployment",
                        "schema": {"type": "string"},
                    },
                ],
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
                "parameters": [_RUN_ID],
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
                        "description": "first chunk; negative counts from the end",
                        "schema": {"type": "integer"},
                    },
                    {
                        "name": "follow",
                        "in": "query",
                        "description": "wait for new chunks (default), and for a stream not "
                        "open yet while the run is not finished",
                        "schema": {"type": "boolean"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The stream's bytes, as they are written.",
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
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["hooks"],
                            "properties": {"hooks": {"type": "array", "items": _ref("Hook")}},
                        },
                        "The hooks.",
                    ),
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
                    {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "requestBody": {"content": {"application/json": {"schema": {}}}},
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["run_id"],
                            "properties": {"run_id": {"type": "string"}},
                        },
                        "Delivered.",
                    ),
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
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["kind", "location"],
                            "properties": {
                                "kind": {"type": "string"},
                                "location": {"type": "string"},
                            },
                        },
                        "The store.",
                    ),
                    "401": _AUTH,
                    "421": _HOST,
                },
            }
        },
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
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
    }
