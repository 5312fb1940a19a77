"""The Starlette app of ``wf serve``: the API, webhooks and the web UI, behind the guard, with a
worker driving due runs for as long as the app lives (unless ``drive=False``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Mount, Route

from wf._exceptions import WFError
from wf.serve import _api, _ui
from wf.serve._errors import Answered, ApiError, on_error, on_http_exception
from wf.serve._hosts import ServedHosts
from wf.serve._security import Guard, Secrets, check_token
from wf.serve._state import BODY_TIMEOUT, MAX_BODY, ServerState
from wf.serve._webhooks import webhook

if TYPE_CHECKING:
    from wf.engine._engine import Engine

log = logging.getLogger("wf.serve")


def create_app(
    engine: Engine,
    *,
    token: str | None = None,
    drive: bool = True,
    max_body: int = MAX_BODY,
    worker_concurrency: int = 100,
    hosts: Iterable[str] = (),
    body_timeout: float = BODY_TIMEOUT,
    grace: float = 30.0,
) -> Starlette:
    """The ``wf serve`` app over ``engine``'s store.

    ``token``: every API and UI request needs it (bearer header, or the login form's cookie),
    webhooks excepted. ``drive``: run a worker in the app's lifespan (SIGTERM, through
    uvicorn, drains it); with ``drive=False`` the engine never drives a run
    (``Engine.may_drive`` is set False: a cancel, wake or hook payload it serves is left to
    the workers). ``max_body``: the largest request body accepted, in bytes;
    ``body_timeout``: the seconds it may take to arrive. ``hosts``: the names (URLs, or
    ``host[:port]``) it is reached by besides the loopback names and the address a connection
    comes in on; a request whose ``Host`` is none of them is answered 421. ``grace``: the
    seconds the worker's running steps get to finish when the app stops.
    """
    if token is not None:
        check_token(token)
    hosts = list(hosts)
    # A public https URL: the session cookie is Secure (never sent over plain http).
    https = any(str(name).lower().startswith("https://") for name in hosts)
    keys = Secrets(token, now=engine.clock.now, https=https)
    if not drive:
        # Only serving: no request may run workflow code in this process.
        engine.may_drive = False
    server = ServerState(engine=engine, keys=keys, drive=drive, max_body=max_body)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from wf.engine._current import use_engine

        with use_engine(engine):
            if not drive:
                yield
                return
            from wf.engine._worker import Worker

            worker = app.state.worker = Worker(engine, concurrency=worker_concurrency)
            task = asyncio.get_running_loop().create_task(worker.serve(grace=grace))
            try:
                yield
            finally:
                log.info("draining the worker (running steps finish first)")
                worker.stop()
                await task

    # OPTIONS too: the webhook answers it (405 with ``Allow`` naming its own method), not
    # Starlette's 405 naming every method of the route.
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    app = Starlette(
        routes=[
            Mount("/api/v1", routes=_api.routes()),
            Route("/webhooks/{token:path}", webhook, methods=methods),
            *_ui.routes(),
        ],
        middleware=[
            Middleware(
                Guard,
                keys=keys,
                max_body=max_body,
                hosts=ServedHosts(hosts),
                body_timeout=body_timeout,
            ),
            Middleware(Answered),
        ],
        exception_handlers={
            ApiError: on_error,
            WFError: on_error,
            HTTPException: on_http_exception,
        },
        lifespan=lifespan,
    )
    app.state.wf = server
    return app
