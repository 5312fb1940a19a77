"""Running the app under uvicorn: where it binds, and what it refuses."""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING

from wf._exceptions import UsageError

if TYPE_CHECKING:
    from wf.engine._engine import Engine

LOOPBACK = "127.0.0.1"


def check_bind(host: str, token: str | None) -> None:
    """Refuse to bind anything but a loopback address without a token (``UsageError``)."""
    if token is not None:
        if len(token) < 8:
            raise UsageError("--token must be at least 8 characters")
        return
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UsageError(
            f"binding {host} would let other machines reach this store: give --token T "
            "(clients then send Authorization: Bearer T), or bind 127.0.0.1"
        )


async def serve(
    engine: Engine,
    *,
    host: str = LOOPBACK,
    port: int = 8420,
    token: str | None = None,
    drive: bool = True,
    graceful: int = 5,
) -> None:
    """Serve the app until SIGTERM / SIGINT (which drain the worker, like ``wf worker``)."""
    import uvicorn

    from wf.serve._app import create_app

    check_bind(host, token)
    app = create_app(engine, token=token, drive=drive)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=graceful,
        server_header=False,
    )
    logging.getLogger("wf.serve").setLevel(logging.INFO)
    await uvicorn.Server(config).serve()
