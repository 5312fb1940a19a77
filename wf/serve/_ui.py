"""The web UI's routes: the runs page, a run's page, their actions (CSRF-checked forms), the
login form, and the static files."""

from __future__ import annotations

import time
import urllib.parse
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from wf import admin
from wf._exceptions import HookError, RunNotFound, StoreCorrupted, WFError
from wf._tasks import in_thread_alone
from wf.admin import _read
from wf.admin._logs import log_page
from wf.serve import _params as params
from wf.serve._errors import ApiError
from wf.serve._html import csrf_field, esc, html_response, page, segment, url
from wf.serve._pages import LOG_LINES, logs_section, now, queues_body, schedules_body
from wf.serve._security import SESSION_COOKIE, SESSION_MAX_AGE, client_address, too_many
from wf.serve._state import ServerState, state
from wf.store._ids import validate_run_id

_STATIC = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}
_PAGE = 50


def _store_label(server: ServerState) -> str:
    info = admin.store_info(server.store)
    return f"{info.kind} · {info.location}"


async def runs_page(request: Request) -> Response:
    """``/``: the runs, newest first, filtered by status, workflow and search."""
    from wf.serve._runs_page import runs_body

    server = state(request)
    query = request.query_params
    try:
        # As the API and the CLI: a repeated status and a comma list both count (the form's
        # empty fields are no filter here, unlike the API's).
        chosen = params.statuses([v for v in query.getlist("status") if v])
        before = params.before(request, form=True)
        named = params.list_filters(request, form=True)
        workflow = params.list_name(request, "workflow", form=True)
        # The form's box is ``q``; ``search`` (the API's name) is taken too. Empty: none.
        said = "q" if query.get("q") else "search"
        search = params.search(request, (said,)) if query.get(said) else None
    except ApiError as exc:
        body = f'<div class="flash bad">{esc(exc.message)}</div>'
        return html_response(page("Runs", body, signout=_signout(request)), 400)
    status = ",".join(dict.fromkeys(chosen))
    filters = {"status": status, "workflow": workflow or "", "q": search or ""}
    listing = await admin.list_runs(
        server.store,
        status=chosen or None,
        workflow=filters["workflow"] or None,
        limit=_PAGE,
        before=before,
        search=filters["q"] or None,
        **named,
    )
    body = runs_body(listing, {**filters, **named}, first_page=before is None)
    return html_response(
        page(
            "Runs",
            body,
            store=_store_label(server),
            live="/api/v1/events",
            signout=_signout(request),
        )
    )


async def run_page(request: Request) -> Response:
    """``/runs/{id}``: everything about one run, live."""
    from wf.serve._run_page import run_body

    server = state(request)
    try:
        run_id = params.run_id(request)
        detail = await admin.run_detail(server.store, run_id, now=time.time())
    except (ApiError, RunNotFound) as exc:
        text = exc.message if isinstance(exc, ApiError) else str(exc)
        body = f'<div class="flash bad">{esc(text)}</div><p><a href="/">All runs</a></p>'
        return html_response(
            page("Not found", body, store=_store_label(server), signout=_signout(request)), 404
        )
    except StoreCorrupted as exc:
        body = (
            f'<div class="flash bad">This run cannot be read: {esc(str(exc))}</div>'
            "<p><code>wf store verify</code> names every damaged item; every other run is "
            'served as usual. <a href="/">All runs</a></p>'
        )
        return html_response(
            page("Damaged run", body, store=_store_label(server), signout=_signout(request)), 500
        )
    query = request.query_params
    try:
        entries = (await log_page(server.store, run_id, limit=None)).entries
    except StoreCorrupted:
        entries = []  # its step logs cannot be read: the rest of the run's page still shows
    logs = logs_section(run_id, entries[-LOG_LINES:], len(entries))
    csrf = server.keys.csrf(request.cookies)
    message, error = _flash(server, run_id, "msg", query), _flash(server, run_id, "err", query)

    def build() -> str:
        why = admin.explain(detail)
        return run_body(detail, why, csrf, message=message, error=error, logs=logs)

    # A page costs about 50 µs a journal event to lay out (75 ms for 1,500), and more for big
    # values (each cut, but encoded first): past a few ms' worth, in a thread, so that the
    # server answers other requests and drives runs meanwhile.
    body = await in_thread_alone(build) if _read.heavy(detail) else build()
    live = url("/api/v1/events", run=run_id)
    return html_response(
        page(run_id, body, store=_store_label(server), live=live, signout=_signout(request))
    )


async def queues_page(request: Request) -> Response:
    """``/queues``: runs due and waiting for a driver, per workflow and group."""
    server = state(request)
    moment = now()
    stats = await admin.queue_stats(server.store, moment)  # a damaged due run: not counted
    body = queues_body(stats, moment)
    return html_response(
        page(
            "Queues",
            body,
            store=_store_label(server),
            live="/api/v1/events",
            nav="queues",
            signout=_signout(request),
        )
    )


async def schedules_page(request: Request) -> Response:
    """``/schedules``: every cron schedule, its next and last fire."""
    server = state(request)
    csrf = server.keys.csrf(request.cookies)
    body = schedules_body(await admin.schedule_page(server.store), csrf)
    return html_response(
        page(
            "Schedules",
            body,
            store=_store_label(server),
            live="/api/v1/events",
            nav="schedules",
            signout=_signout(request),
        )
    )


async def _checked_form(request: Request) -> dict[str, str]:
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not state(request).keys.csrf_ok(fields.get("csrf"), request.cookies):
        raise ApiError(403, "forbidden", "this form is stale or not from this site: reload")
    return fields


def _back(request: Request, run_id: str, *, msg: str = "", err: str = "") -> RedirectResponse:
    """The answer to a run page's form: back to the page (post-redirect-get), with a message
    and its MAC (``Secrets.flash_mac``), so the page shows only messages a form gave it."""
    kind, text = ("err", err) if err else ("msg", msg)
    # Said as UTF-8 can carry it (a lone surrogate from a payload would not go in a URL).
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    query = {kind: text, "mac": state(request).keys.flash_mac(run_id, kind, text)}
    suffix = "?" + urllib.parse.urlencode(query) if text else ""
    return RedirectResponse(f"/runs/{segment(run_id)}{suffix}", status_code=303)


def _flash(server: ServerState, run_id: str, kind: str, query: Any) -> str:
    """The run page's ``msg`` or ``err`` query parameter if a form's answer put it there
    (its MAC says so), else nothing."""
    text, mac = query.get(kind, ""), query.get("mac", "")
    return text if text and server.keys.flash_ok(run_id, kind, text, mac) else ""


async def run_action(request: Request) -> Response:
    """``POST /runs/{id}/cancel|wake|retry`` from the run page's buttons."""
    from wf.serve._start import retry

    action = request.path_params["action"]
    if action not in ("cancel", "wake", "retry"):
        raise ApiError(404, "not_found", f"no action {action!r}")
    await _checked_form(request)
    run_id = params.run_id(request)
    engine = state(request).engine
    try:
        if action == "cancel":
            result = await admin.cancel(engine, run_id)
            return _back(
                request, run_id, msg="Cancellation requested." if result.sent else "Already ended."
            )
        if action == "wake":
            result = await admin.wake(engine, run_id)
            if result.refused is not None:  # suspended on what no wake-up ends
                return _back(request, run_id, err=result.refused)
            return _back(
                request, run_id, msg="Wake-up requested." if result.sent else "Already ended."
            )
        await retry(state(request), run_id)
        return _back(request, run_id, msg="Another attempt is queued.")
    except ApiError as exc:
        return _back(request, run_id, err=exc.message)
    except WFError as exc:
        return _back(request, run_id, err=str(exc))


async def schedule_action(request: Request) -> Response:
    """``POST /schedules/{id}/pause|resume`` from the schedules page's buttons; back to it."""
    action = request.path_params["action"]
    if action not in ("pause", "resume"):
        raise ApiError(404, "not_found", f"no action {action!r}")
    await _checked_form(request)
    client = admin.LocalAdmin(state(request).engine)
    schedule_id = str(request.path_params["id"])
    try:
        if action == "pause":
            await client.pause_schedule(schedule_id)
        else:
            await client.resume_schedule(schedule_id)
    except WFError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    return RedirectResponse("/schedules", status_code=303)


async def resume_form(request: Request) -> Response:
    """``POST /hooks/{token}/resume``: the run page's hook form."""
    fields = await _checked_form(request)
    token = params.token(request)
    run_id = fields.get("run", "")
    try:
        run_id = validate_run_id(run_id)
    except WFError:
        raise ApiError(400, "bad_request", "the form names no run") from None
    text = fields.get("payload", "").strip() or "null"
    try:
        payload = params.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past what it parses
        return _back(request, run_id, err=f"The payload is not JSON: {exc}")
    try:
        await admin.resume_hook(state(request).engine, token, payload)
    except HookError as exc:
        return _back(request, run_id, err=str(exc))
    return _back(request, run_id, msg=f"Payload sent to hook {token}.")


async def login(request: Request) -> Response:
    """``/login``: a form asking for the server's token; sets the session cookie.

    It carries no CSRF token (there is no session yet to bind one to): a login from another
    site is refused by the guard's ``Origin`` / ``Sec-Fetch-Site`` check, as every
    state-changing request is. A wrong token counts against the client's address."""
    server = state(request)
    target = request.query_params.get("next") or "/"
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    error = ""
    if request.method == "POST":
        address = client_address(request.scope)
        wait = server.keys.failures.blocked(address)
        if wait is not None:
            refused: Response = too_many(wait, page=True)
            return refused
        form = await request.form()
        given = form.get("token")
        target = str(form.get("next") or "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        if isinstance(given, str) and server.keys.token_ok(given):
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(
                SESSION_COOKIE,
                server.keys.new_session(),
                max_age=SESSION_MAX_AGE,
                httponly=True,
                samesite="strict",
                path="/",
                secure=_secure(request),
            )
            return response
        if server.keys.token is not None:
            server.keys.failures.failed(address, "the login form")
        error = '<p class="flash bad" role="alert">That is not this server\'s token.</p>'
    body = f"""
<section class="card login">
  <h1>Sign in</h1>
  <p class="dim">This server needs its token (<code>wf serve --token</code>).</p>
  {error}
  <form method="post" action="/login">
    <input type="hidden" name="next" value="{esc(target)}">
    <input type="password" name="token" placeholder="token" autofocus aria-label="token">
    <button class="btn primary" type="submit">Sign in</button>
  </form>
</section>"""
    return html_response(page("Sign in", body, nav=""), 401 if error else 200)


async def logout(request: Request) -> Response:
    """``POST /logout`` (the bar's "Sign out", CSRF-checked): clears the session cookie."""
    await _checked_form(request)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(
        SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=_secure(request)
    )
    return response


def _secure(request: Request) -> bool:
    """Whether cookies go out ``Secure``: the public URL (``--base-url``) is https, or this
    request came over https (directly, or through a proxy uvicorn trusts)."""
    return state(request).keys.https or request.url.scheme == "https"


def _signout(request: Request) -> str:
    """The bar's sign-out form, with a token to sign out with (else nothing)."""
    server = state(request)
    if server.keys.token is None or SESSION_COOKIE not in request.cookies:
        return ""
    return (
        '<form method="post" action="/logout" class="inline signout">'
        f"{csrf_field(server.keys.csrf(request.cookies))}"
        '<button class="btn" type="submit">Sign out</button></form>'
    )


async def static(request: Request) -> Response:
    """``/static/app.css`` and ``/static/app.js`` (shipped in the package)."""
    name = request.path_params["name"]
    media = _STATIC.get(name)
    if media is None:
        raise ApiError(404, "not_found", "no such file")
    data = resources.files("wf.serve").joinpath("static", name).read_bytes()
    return Response(data, media_type=media, headers={"Cache-Control": "max-age=300"})


def routes() -> list[BaseRoute]:
    """The UI's routes."""
    return [
        Route("/", runs_page, methods=["GET"]),
        Route("/runs/{id}", run_page, methods=["GET"]),
        Route("/queues", queues_page, methods=["GET"]),
        Route("/schedules", schedules_page, methods=["GET"]),
        Route("/runs/{id}/{action:str}", run_action, methods=["POST"]),
        Route("/schedules/{id}/{action:str}", schedule_action, methods=["POST"]),
        Route("/hooks/{token:path}/resume", resume_form, methods=["POST"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/{name}", static, methods=["GET"]),
    ]
