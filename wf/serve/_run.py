"""Running the app under uvicorn: where it binds, and what it refuses."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from wf._exceptions import UsageError
from wf._interrupts import StopSignals
from wf.serve._timeouts import HEADER_TIMEOUT, deadline_protocol

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.engine._worker import Worker

LOOPBACK = "127.0.0.1"


def check_bind(host: str, token: str | None) -> None:
    """Refuse a bad token (``check_token``), and binding anything but a loopback address
    without a token (``UsageError``)."""
    if token is not None:
        from wf.serve._security import check_token

        check_token(token)
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
    base_url: str | None = None,
    grace: float = 30.0,
    sock: socket.socket | None = None,
    forwarded_allow_ips: str | None = None,
) -> Worker | None:
    """Serve the app until SIGTERM / SIGINT (which drain the worker, like ``wf worker``); the
    worker that drove runs, once stopped (None with ``drive=False``).

    ``base_url``: how the outside reaches this server; its host is answered to besides the
    loopback names and the address a connection comes in on. ``grace``: the seconds running
    steps get to finish once stopping (``Worker.run``). ``sock``: a socket bound already
    (``bind_port``: ``--port 0``, whose port is known before the server starts), served
    instead of binding ``host`` and ``port``. ``forwarded_allow_ips``: the reverse proxies
    whose ``X-Forwarded-For`` / ``-Proto`` are believed (``uvicorn_config``).
    """
    from wf.serve._app import create_app

    check_bind(host, token)
    app = create_app(
        engine, token=token, drive=drive, hosts=[base_url] if base_url else (), grace=grace
    )
    config = uvicorn_config(
        app, host=host, port=port, graceful=graceful, forwarded_allow_ips=forwarded_allow_ips
    )
    logging.getLogger("wf.serve").setLevel(logging.INFO)
    server = _Server(config, on_stop=app.state.wf.stopping.set)
    # A second signal exits at once, also while a step's code blocks the event loop.
    with StopSignals(server.on_signal, say=logging.getLogger("wf.serve").warning):
        await server.serve(sock)
    worker: Worker | None = getattr(app.state, "worker", None)
    return worker


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    graceful: int = 5,
    header_timeout: float = HEADER_TIMEOUT,
    forwarded_allow_ips: str | None = None,
) -> Any:
    """The ``uvicorn.Config`` ``wf serve`` runs ``app`` with: its logging left to the program,
    and slow or idle connections closed (``_timeouts``): a request's head within
    ``header_timeout`` seconds, the next request within 5 s of a response, heads of at most
    16 KiB. ``X-Forwarded-*`` headers are believed only from ``forwarded_allow_ips`` (uvicorn's
    syntax: addresses, networks, ``*``); without it from nobody (uvicorn's own default trusts
    127.0.0.1, and a client on this machine could then invent an address per request, past
    the sign-in throttle)."""
    import uvicorn

    _quiet_cut_bodies()
    return uvicorn.Config(
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
        http=deadline_protocol(header_timeout),
        ws="none",  # no route speaks WebSocket: an upgrade is answered as plain HTTP
        timeout_keep_alive=5,
        proxy_headers=forwarded_allow_ips is not None,
        forwarded_allow_ips=forwarded_allow_ips or "",
        h11_max_incomplete_event_size=16 * 1024,
    )


MALFORMED = "Invalid HTTP request received."
"""What uvicorn logs (a warning) for each request head its HTTP parser refuses."""
MALFORMED_LOG_EVERY = 60.0
"""Seconds between two of those lines (with how many there were)."""


class _Malformed(logging.Filter):
    """uvicorn's line for a request its parser refuses, at most once a ``MALFORMED_LOG_EVERY``
    with how many there were: anyone who can connect may send such requests, and each was a
    line of the server's log (as wrong tokens are throttled, ``_security.Failures``)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock: Callable[[], float] = time.monotonic
        self._logged_at: float | None = None
        self._unlogged = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != MALFORMED:
            return True
        now = self.clock()
        self._unlogged += 1
        if self._logged_at is not None and now - self._logged_at < MALFORMED_LOG_EVERY:
            return False
        if self._logged_at is not None and self._unlogged > 1:
            record.msg = f"{MALFORMED} ({self._unlogged} in the last {now - self._logged_at:.0f} s)"
            record.args = ()
        self._logged_at, self._unlogged = now, 0
        return True


CUT_BODY = "ASGI callable returned without completing response."
"""What uvicorn logs (an error) when a response ends without its body's last chunk: the
stream endpoint does so on purpose for a stream whose writer was cut off (``_api``)."""


class _CutBodies(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != CUT_BODY


def _quiet_cut_bodies() -> None:
    """Keep uvicorn from logging an error for each read of a cut-off stream: wf's responses
    end so only there (Starlette's always send their last chunk); and its line for a request
    it cannot parse to one a minute (``_Malformed``)."""
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _CutBodies) for f in log.filters):
        log.addFilter(_CutBodies())
    if not any(isinstance(f, _Malformed) for f in log.filters):
        log.addFilter(_Malformed())


class _Server:
    """uvicorn's server, stopped by wf's signal handling (``StopSignals``): the first SIGTERM /
    Ctrl-C stops taking requests and drains the worker (like ``wf worker``); a second exits at
    once.
    (uvicorn's own handling re-raises the signal after shutting down: exit -15, not 0.)"""

    def __init__(self, config: Any, on_stop: Callable[[], object] = lambda: None) -> None:
        import uvicorn

        self._on_stop = on_stop

        class Quiet(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        self._server = Quiet(config)

    def on_signal(self, sig: signal.Signals) -> None:
        """The first SIGTERM / Ctrl-C (on the loop): stop taking requests and drain."""
        log = logging.getLogger("wf.serve")
        log.info("%s: draining (running steps finish first); repeat to exit", sig.name)
        self._on_stop()  # the long waits answer now, before uvicorn waits for them
        self._server.should_exit = True

    async def serve(self, sock: socket.socket | None = None) -> None:
        await self._server.serve(sockets=[sock] if sock is not None else None)


def bind_port(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` and ``port`` (``0``: a free port the OS picks, which the
    socket's ``getsockname()`` then says), bound as uvicorn binds one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle off only on a socket whose protocol says
    # TCP, and with it on each answer after a connection's first waited 40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        # Listening at once: a client that read the start line connects before uvicorn has
        # started, and waits in the backlog instead of being refused.
        sock.listen(2048)
        # Not inheritable (uvicorn serves it in this process): a program a step starts without
        # closing descriptors must not keep the port bound after the server exits.
    except OSError:
        sock.close()
        raise
    return sock
