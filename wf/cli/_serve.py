"""``wf serve``: the HTTP API, webhooks and the web UI over the store; drives runs like a worker."""

from __future__ import annotations

import logging
import os
import socket
from typing import Annotated

import typer

from wf.cli._errors import guarded
from wf.cli._logformat import LogFormat, LogFormatOption, emit, logging_to_stderr
from wf.cli._stopping import GraceOption, ended_despite_threads, leave_if_stuck


def register(app: typer.Typer) -> None:
    """Add ``wf serve`` to the app."""
    app.command("serve")(serve_command)


@guarded
def serve_command(
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            metavar="ADDRESS",
            help="Address to bind; any but a loopback address needs --token [default: "
            "serve.host of [tool.wf] / WF_SERVE_HOST, else 127.0.0.1].",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            "-p",
            min=0,
            max=65535,
            metavar="PORT",
            help="TCP port [default: serve.port / WF_SERVE_PORT, else 8420].",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            metavar="T",
            help="Require this token (8+ printable ASCII characters) on every API and UI "
            "request (Authorization: Bearer T, or the login form); webhooks excepted "
            "[default: serve.token / WF_SERVE_TOKEN].",
            show_default=False,
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            metavar="URL",
            help="How the outside reaches this server, for webhook URLs; its host is a name "
            "the server answers to (default: $WF_BASE_URL, else http://HOST:PORT).",
            show_default=False,
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            metavar="IPS",
            help="Comma-separated addresses (or networks, or '*') of reverse proxies whose "
            "X-Forwarded-For and X-Forwarded-Proto headers are believed: the client's address "
            "(which the sign-in throttle counts by) and scheme are then taken from them "
            "[default: serve.forwarded_allow_ips / WF_SERVE_FORWARDED_ALLOW_IPS, else none: "
            "the connection's own address].",
            show_default=False,
        ),
    ] = None,
    no_worker: Annotated[
        bool,
        typer.Option("--no-worker", help="Only serve: leave driving runs to `wf worker`."),
    ] = False,
    grace: GraceOption = 30.0,
    log_format: LogFormatOption = LogFormat.TEXT,
) -> None:
    """Serve the JSON API (/api/v1), webhooks and the web UI (/); drive runs unless
    --no-worker. SIGTERM drains like `wf worker`."""
    from wf._config import setting
    from wf.serve import check_bind

    # [tool.wf.serve] < WF_SERVE_* < the command line, as for every setting.
    host = host if host is not None else str(setting("serve.host"))
    port = port if port is not None else _port(setting("serve.port"))
    token = token if token is not None else setting("serve.token")
    if forwarded_allow_ips is None:
        forwarded_allow_ips = setting("serve.forwarded_allow_ips")
    check_bind(host, token)  # before anything else: exit 2 and nothing is started
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        from wf._exceptions import UsageError
        from wf._extras import install_hint

        raise UsageError(f"wf serve needs its extra: {install_hint('serve')}") from None
    from wf.admin._engines import require_otel

    require_otel()  # WF_OTEL=1 without OpenTelemetry: every start and drive would fail on it
    # Bound here, before anything starts: a port that is taken (or an address not of this
    # machine) is one line and exit 2, not a start line followed by uvicorn's log of it; and
    # with port 0 the start line and the webhooks' URLs name the port the OS picked.
    from wf.serve._run import bind_port

    shown = f"[{host}]" if ":" in host else host
    try:
        sock = bind_port(host, port)
    except OSError as exc:
        from wf._exceptions import UsageError

        raise UsageError(f"cannot listen on {shown}:{port}: {exc.strerror or exc}") from None
    port = int(sock.getsockname()[1])
    with sock:  # closed however the command ends (a bad --base-url below, too)
        os.environ["WF_BASE_URL"] = (
            base_url or os.environ.get("WF_BASE_URL") or f"http://{shown}:{port}"
        ).rstrip("/")
        _check_base_url(os.environ["WF_BASE_URL"])
        _run(host, port, token, sock, no_worker, grace, forwarded_allow_ips, log_format)


def _run(
    host: str,
    port: int,
    token: str | None,
    sock: socket.socket,
    no_worker: bool,
    grace: float,
    forwarded_allow_ips: str | None,
    log_format: str,
) -> None:
    # The server's own lines, its worker's run outcomes and uvicorn's errors, all one way.
    from wf.admin._engines import run_contained

    with logging_to_stderr(log_format, loggers=("uvicorn",)):
        # Code in a run cannot end the server (a SystemExit left to the loop): as `wf worker`.
        # Threads a step started run on after the loop closed: never wait for them past the
        # grace, however the loop ended (as ``wf worker``).
        code = ended_despite_threads(
            lambda: run_contained(
                _serve(
                    host,
                    port,
                    token,
                    drive=not no_worker,
                    grace=grace,
                    sock=sock,
                    forwarded_allow_ips=forwarded_allow_ips,
                    log_format=LogFormat(log_format),
                ),
                lambda line: emit(line, level=logging.ERROR),
                who="the server",
            ),
            grace,
            lambda line: emit(line, level=logging.WARNING),
        )
    if code:
        raise typer.Exit(code)


def _port(value: int) -> int:
    if not 0 <= value <= 65535:
        from wf._exceptions import UsageError

        raise UsageError(f"serve.port must be a TCP port (0-65535), not {value}")
    return value


def _check_base_url(url: str) -> None:
    """A base URL is an http(s) URL with a host: its host is one the server answers to."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # raises for a bad port
    except ValueError as exc:
        from wf._exceptions import UsageError

        raise UsageError(f"--base-url {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        from wf._exceptions import UsageError

        raise UsageError(f"--base-url {url!r}: expected http(s)://HOST[:PORT][/PATH]")


async def _serve(
    host: str,
    port: int,
    token: str | None,
    *,
    drive: bool,
    grace: float,
    sock: socket.socket | None = None,
    forwarded_allow_ips: str | None = None,
    log_format: LogFormat = LogFormat.TEXT,
) -> None:
    from wf.admin._engines import driving
    from wf.cli import owns_interpreter
    from wf.cli._apart import DriveApart
    from wf.cli._heap import settle_heap
    from wf.cli._store import store_path
    from wf.cli._worker import report_drive
    from wf.serve import serve

    # Like `wf worker`: one line each time a drive of a run ends here.
    async with driving(report_drive) as eng:
        if drive:
            # A run whose last driver died is driven by a child process: the API outlives it.
            eng.drive_apart = DriveApart(eng, log_format=log_format, grace=grace)
        shown = f"[{host}]" if ":" in host else host
        auth = "token required" if token else "no token: this machine only"
        worker = "driving runs" if drive else "not driving runs (--no-worker)"
        base = os.environ["WF_BASE_URL"]
        emit(
            f"wf serve on http://{shown}:{port} over {store_path()} ({auth}; {worker}); "
            f"webhooks at {base}/webhooks/…",
            url=f"http://{shown}:{port}",
            store=store_path(),
            token=bool(token),
            drive=drive,
            base_url=base,
            pid=os.getpid(),
        )
        if owns_interpreter():
            settle_heap()  # start-up is over (wf.cli._heap), as in `wf worker`
        stopped = await serve(
            eng,
            host=host,
            port=port,
            token=token,
            drive=drive,
            base_url=base,
            grace=grace,
            sock=sock,
            forwarded_allow_ips=forwarded_allow_ips,
        )
        emit("wf serve stopped")
    if stopped is not None:
        leave_if_stuck(stopped, 0)
