"""Running the app under uvicorn: where it binds, and what it refuses."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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
        # No logging set-up of uvicorn's own: its records go where the program's (wf serve's
        # --log-format) logging sends them.
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=graceful,
        server_header=False,
    )
    logging.getLogger("wf.serve").setLevel(logging.INFO)
    server = _Server(config)
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, server.on_signal, sig)
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread
            continue
        installed.append(sig)
    try:
        await server.serve()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


class _Server:
    """uvicorn's server, stopped by wf's signal handling: the first SIGTERM / Ctrl-C stops
    taking requests and drains the worker (like ``wf worker``); a second exits at once.
    (uvicorn's own handling re-raises the signal after shutting down: exit -15, not 0.)"""

    def __init__(self, config: Any) -> None:
        import uvicorn

        class Quiet(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        self._server = Quiet(config)
        self._stopping = False

    def on_signal(self, sig: signal.Signals) -> None:
        log = logging.getLogger("wf.serve")
        if self._stopping:
            log.warning("%s again: exiting now (runs resume from their journals)", sig.name)
            os._exit(130)
        self._stopping = True
        log.info("%s: draining (running steps finish first); repeat to exit", sig.name)
        self._server.should_exit = True

    async def serve(self) -> None:
        await self._server.serve()
