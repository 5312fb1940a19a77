"""The JSON API's routes for what is not one run: schedules, the store's upkeep, deployments.

Each is ``wf.admin.LocalAdmin``'s method over the server's engine, so ``wf.admin.HttpAdmin``
(and every CLI command with ``WF_URL``) gets what the same command gets on the store here.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from wf.admin import LocalAdmin
from wf.serve import _params as params
from wf.serve._errors import ApiError, ApiJSON
from wf.serve._routing import by_method
from wf.serve._state import state


def _admin(request: Request) -> LocalAdmin:
    return LocalAdmin(state(request).engine)


async def list_schedules(request: Request) -> Response:
    """``GET /api/v1/schedules``: every schedule, with its last run's status, and the
    schedules that cannot be read."""
    return ApiJSON((await _admin(request).schedule_page()).to_json())


async def set_schedule(request: Request) -> Response:
    """``PUT /api/v1/schedules/{id}``: create or replace a schedule of the workflow at
    ``target`` (a module of the project, as ``POST /runs`` imports)."""
    from wf.engine._cron import check_cron
    from wf.serve._targets import check_target

    schedule_id = str(request.path_params["id"])  # checked where it is used (400 if bad)
    body = params.body_object(await params.json_body(request), _schedule_keys())
    target, cron = body.pop("target", None), check_cron(body.pop("cron", None))
    if not isinstance(target, str):
        raise ApiError(400, "bad_request", '"target" is a string (module:attribute)')
    check_target(target)
    made = await _admin(request).set_schedule(schedule_id, target, cron=cron, **body)
    return ApiJSON(made.to_json())


async def remove_schedule(request: Request) -> Response:
    """``DELETE /api/v1/schedules/{id}``: ``{"id", "removed"}`` (false: there was none)."""
    schedule_id = str(request.path_params["id"])
    removed = await _admin(request).remove_schedule(schedule_id)
    return ApiJSON({"id": schedule_id, "removed": removed})


async def pause_schedule(request: Request) -> Response:
    """``POST /api/v1/schedules/{id}/pause``: ``{"id", "schedule"}`` (the schedule after;
    null: there was none)."""
    schedule_id = str(request.path_params["id"])
    found = await _admin(request).pause_schedule(schedule_id)
    return ApiJSON({"id": schedule_id, "schedule": None if found is None else found.to_json()})


async def resume_schedule(request: Request) -> Response:
    """``POST /api/v1/schedules/{id}/resume``: ``{"id", "schedule"}`` (the schedule after;
    null: there was none)."""
    schedule_id = str(request.path_params["id"])
    found = await _admin(request).resume_schedule(schedule_id)
    return ApiJSON({"id": schedule_id, "schedule": None if found is None else found.to_json()})


async def store_stats(request: Request) -> Response:
    """``GET /api/v1/store/stats``: what the store is and holds (``wf store info``)."""
    return ApiJSON((await _admin(request).store_stats()).to_json())


async def verify(request: Request) -> Response:
    """``GET /api/v1/store/verify``: every problem of the store (``wf store verify``, whose
    remote form this is): what the store's ``verify`` puts right is put right, as on the
    command line (a local store's counts, index entries, a damaged creation sequence, the
    last under the lock its creations take, so a repair beside ``POST /runs`` gives no
    number twice); nothing else is changed."""
    problems = await _admin(request).verify()
    return ApiJSON({"ok": not problems, "problems": problems})


async def gc(request: Request) -> Response:
    """``POST /api/v1/store/gc``: delete finished runs past their retention (``wf gc``)."""
    raw = await params.json_body(request, required=False)
    # No body is the defaults; any other body is an object, not ``[]`` or ``false`` read as
    # one (a deletion is not started on a body that did not ask for one).
    body = params.body_object({} if raw is None else raw, _keywords(LocalAdmin.gc))
    older_than, workflow = body.get("older_than"), body.get("workflow")
    statuses, dry_run = body.get("statuses"), body.get("dry_run", False)
    if not all(isinstance(v, str | None) for v in (older_than, workflow)):
        raise ApiError(400, "bad_request", '"older_than" and "workflow" are strings')
    if statuses is not None and not (
        isinstance(statuses, list) and all(isinstance(s, str) for s in statuses)
    ):
        raise ApiError(400, "bad_request", '"statuses" is an array of strings')
    if not isinstance(dry_run, bool):
        raise ApiError(400, "bad_request", '"dry_run" is true or false')
    done = await _admin(request).gc(
        older_than=older_than, workflow=workflow, statuses=statuses, dry_run=dry_run
    )
    return ApiJSON(done.to_json())


async def deployments(request: Request) -> Response:
    """``GET /api/v1/deployments``: each deployment's runs and live workers."""
    return ApiJSON((await _admin(request).deployment_page()).to_json())


def _schedule_keys() -> frozenset[str]:
    """What a schedule's body may hold: ``wf.schedule``'s keywords (``register``'s)."""
    from wf.engine._schedules import register

    return _keywords(register)


def _keywords(fn: Any) -> frozenset[str]:
    """A function's keyword-only parameters: what a body for it may hold (the document
    describes the same, ``_openapi``)."""
    import inspect

    from wf.serve._derive import IN_PROCESS

    found = inspect.signature(fn).parameters.values()
    return frozenset(p.name for p in found if p.kind is p.KEYWORD_ONLY) - IN_PROCESS


def routes() -> list[BaseRoute]:
    """The routes, mounted under ``/api/v1`` with the others."""
    return [
        Route("/schedules", list_schedules, methods=["GET"]),
        by_method("/schedules/{id}", PUT=set_schedule, DELETE=remove_schedule),
        Route("/schedules/{id}/pause", pause_schedule, methods=["POST"]),
        Route("/schedules/{id}/resume", resume_schedule, methods=["POST"]),
        Route("/store/stats", store_stats, methods=["GET"]),
        Route("/store/verify", verify, methods=["GET"]),
        Route("/store/gc", gc, methods=["POST"]),
        Route("/deployments", deployments, methods=["GET"]),
    ]
