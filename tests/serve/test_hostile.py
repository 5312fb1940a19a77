"""``wf serve`` against hostile requests: DNS rebinding (``Host``), cross-site changes
(``Origin``), targets that would import code from outside the project, slow and idle
connections, and tokens that protect nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.serve.conftest import BASE, REPO, env_for, free_port, spawn_server, stop
from wf import Engine
from wf.store import Store

MISSING = "wrun_00000000000000000000000000"
ADDER = {"target": "tests.serve.flows:adder", "input": [20, 22]}


@pytest.fixture
def store_kind() -> str:
    return "local"


@pytest_asyncio.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client on the app (not driving runs) that also answers to ``wf.example.com``."""
    from wf.serve import create_app

    app = create_app(Engine(store), drive=False, hosts=["https://wf.example.com"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as made:
        yield made


async def _runs(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = (await client.get("/api/v1/runs")).json()["runs"]
    return runs


async def test_the_rebinding_request_of_the_issue_starts_nothing(client: httpx.AsyncClient) -> None:
    import json

    response = await client.post(
        "/api/v1/runs",
        content=json.dumps(ADDER),
        headers={
            "Host": "evil.example:8420",
            "Origin": "http://evil.example:8420",
            "content-type": "text/plain",
        },
    )
    assert response.status_code == 421, response.text
    error = response.json()["error"]
    assert error["type"] == "misdirected" and "evil.example:8420" in error["message"]
    assert await _runs(client) == []


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8420",
        "evil.example",
        "127.0.0.1.evil.example:8420",
        "localhost.:8420",
        "127.0.0.1:9999",  # a loopback name, but not this server's port
        "localhost",  # port 80
        "wf.example.com:8420",  # the base URL's name on another port
        "127.0.0.1:8420@evil.example",
        "",
        # Loopback in brackets, with more around it: no name a browser sends.
        "[::1]x:8420",
        "evil.example[::1]:8420",
        "[::1]]:8420",
        "[::1%25lo]:8420",
        "localhost:" + "1" * 5000,
    ],
)
async def test_every_route_refuses_a_host_it_does_not_serve(
    client: httpx.AsyncClient, host: str
) -> None:
    for method, path in [
        ("GET", "/api/v1/runs"),
        ("GET", f"/api/v1/runs/{MISSING}"),
        ("POST", "/api/v1/runs"),
        ("POST", "/webhooks/some-token"),
        ("POST", "/api/v1/hooks/some-token"),
        ("GET", "/"),
        ("GET", "/login"),
        ("GET", "/static/app.css"),
    ]:
        response = await client.request(method, path, headers={"Host": host}, json=ADDER)
        assert response.status_code == 421, (host, method, path, response.text)
        assert len(response.content) < 300
    assert await _runs(client) == []


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:8420",
        "localhost:8420",
        "LOCALHOST:8420",
        "[::1]:8420",
        "wf.example.com",  # what a reverse proxy in front forwards
        "wf.example.com:443",
    ],
)
async def test_the_names_it_serves_are_answered(client: httpx.AsyncClient, host: str) -> None:
    response = await client.get("/api/v1/runs", headers={"Host": host})
    assert response.status_code == 200, (host, response.text)
    started = await client.post("/api/v1/runs", json=ADDER, headers={"Host": host})
    assert started.status_code == 201, (host, started.text)


async def test_every_answer_says_its_content_type_is_not_to_be_sniffed(
    client: httpx.AsyncClient,
) -> None:
    # A JSON answer that echoes a request's text must not be read as a page by a browser.
    for method, path, host in [
        ("GET", "/api/v1/runs", "127.0.0.1:8420"),
        ("GET", f"/api/v1/runs/{MISSING}", "127.0.0.1:8420"),  # an error
        ("GET", "/api/v1/nowhere", "127.0.0.1:8420"),  # Starlette's own 404
        ("POST", "/webhooks/<html>", "127.0.0.1:8420"),
        ("GET", "/api/v1/runs", "evil.example"),  # refused before any route
        ("GET", "/", "127.0.0.1:8420"),
    ]:
        response = await client.request(method, path, headers={"Host": host})
        assert response.headers.get_list("x-content-type-options") == ["nosniff"], path


async def test_a_change_from_a_page_on_another_name_is_refused(
    client: httpx.AsyncClient,
) -> None:
    # The Host is this server's; the page that sends the request is elsewhere.
    for origin in [
        "http://evil.example:8420",
        "http://localhost:3000",
        "http://127.0.0.1",
        "https://wf.example.com:8443",
        # The --base-url's host on another scheme or port is another origin.
        "http://wf.example.com",
        "http://wf.example.com:443",
        "https://wf.example.com:80",
        "null",
        "file://",
        # This server's name with what no Origin header carries after it.
        "http://127.0.0.1:8420?x",
        "http://127.0.0.1:8420#x",
        "http://127.0.0.1:8420?",
        "http://[::1]x:8420",
    ]:
        refused = await client.post(f"/api/v1/runs/{MISSING}/cancel", headers={"Origin": origin})
        assert refused.status_code == 403, (origin, refused.text)
    for origin in [
        "http://127.0.0.1:8420",
        "http://localhost:8420",
        "https://wf.example.com",
        "https://wf.example.com:443",
        "https://WF.example.com",
    ]:
        allowed = await client.post(f"/api/v1/runs/{MISSING}/cancel", headers={"Origin": origin})
        assert allowed.status_code == 404, (origin, allowed.text)


# --------------------------------------------------------------------------------------------
# Targets: nothing outside the project is imported.


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A module outside the project, importable (on ``sys.path``), whose import leaves a
    marker file: its name and the marker."""
    name = f"outside_{uuid.uuid4().hex[:12]}"
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    marker = tmp_path / "imported"
    (folder / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "import wf\n\n\n@wf.workflow\nasync def flow() -> int:\n    return 7\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delenv("WF_MODULES", raising=False)
    yield name, marker
    sys.modules.pop(name, None)


async def test_a_request_never_imports_code_outside_the_project(
    client: httpx.AsyncClient, outside: tuple[str, Path], tmp_path: Path
) -> None:
    name, marker = outside
    path = tmp_path / "elsewhere" / f"{name}.py"
    for body in [
        {"target": f"{path}:flow"},
        {"target": f"elsewhere/{name}.py:flow"},
        {"target": f"{name}.py:flow"},
        {"target": f"{name}:flow"},
        {"workflow": f"{name}:flow"},
        {"target": "os:system", "input": "touch /tmp/pwned"},
        {"target": "json:loads", "input": "1"},
        {"target": "httpx:get"},  # an installed package
        {"target": "tests.serve.flows:adder:x"},
        {"target": "tests.serve.flows.adder:adder"},
        {"target": "..tests:x"},
    ]:
        response = await client.post("/api/v1/runs", json=body)
        assert response.status_code == 400, (body, response.text)
        message = response.json()["error"]["message"]
        assert "\n" not in message, message
        assert not marker.exists(), body
    assert name not in sys.modules
    assert await _runs(client) == []


async def test_a_target_does_not_reach_through_its_module(client: httpx.AsyncClient) -> None:
    # ``tests.serve.flows`` imports ``wf``, whose lazy attributes (``wf.ai``) import packages.
    for target, says in [
        ("tests.serve.flows:wf.ai", "reaches into module 'wf'"),
        ("tests.serve.flows:adder.__class__", "'__class__' is not a name a target may use"),
    ]:
        response = await client.post("/api/v1/runs", json={"target": target})
        assert response.status_code == 400, response.text
        assert says in response.json()["error"]["message"]
    assert await _runs(client) == []


@pytest.mark.parametrize(
    ("method", "path", "body", "says"),
    [
        ("PUT", "/api/v1/schedules/s", {"allow_overlap": "no thanks"}, "allow_overlap: expected"),
        ("PUT", "/api/v1/schedules/s", {"skip_if_running": {"a": 1}}, "skip_if_running: expected"),
        ("PUT", "/api/v1/schedules/s", {"allow_overlap": 10**30}, "allow_overlap: expected"),
        ("PUT", "/api/v1/schedules/s", {"priority": -1}, "priority must be an integer from 0"),
        ("PUT", "/api/v1/schedules/s", {"priority": 10**26}, "priority must be an integer from 0"),
        ("PUT", "/api/v1/schedules/s", {"tz": "A" * 300}, "tz: unknown time zone"),
        ("POST", "/api/v1/runs", {"options": {"max_attempts": 10**20}}, "max_attempts must be"),
        ("POST", "/api/v1/runs", {"options": {"max_recoveries": 10**20}}, "max_recoveries must"),
        ("POST", "/api/v1/store/gc", {"workflow": "\ud800", "dry_run": True}, "lone surrogate"),
        ("POST", "/api/v1/store/gc", [], "the body must be a JSON object, not an array"),
        ("POST", "/api/v1/store/gc", False, "the body must be a JSON object, not false"),
        ("POST", "/api/v1/store/gc", {"older_than": "soon"}, "older_than: 'soon' is not a"),
    ],
)
async def test_a_value_the_store_could_not_keep_is_a_400_and_nothing_is_written(
    client: httpx.AsyncClient, method: str, path: str, body: object, says: str
) -> None:
    import json

    if isinstance(body, dict) and path.startswith("/api/v1/schedules/"):
        body = {"target": ADDER["target"], "cron": "0 0 * * *", "input": [1, 2], **body}
    elif isinstance(body, dict) and path == "/api/v1/runs":
        body = {**ADDER, **body}
    # As a client sends it: a lone surrogate as its JSON escape.
    content = json.dumps(body).replace("\\\\ud800", "\\ud800")
    response = await client.request(
        method, path, content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "bad_request" and says in error["message"], error
    assert await _runs(client) == []
    assert (await client.get("/api/v1/schedules")).json()["schedules"] == []


async def test_a_body_python_will_not_read_is_said_in_one_clear_line(
    client: httpx.AsyncClient,
) -> None:
    """Valid JSON with an integer beyond Python's digit limit: not Python's advice to raise
    the limit (``sys.set_int_max_str_digits``), and the API's field names, not the CLI's."""
    huge = b'{"target": "tests.serve.flows:adder", "input": [' + b"9" * 5000 + b", 1]}"
    json_type = {"Content-Type": "application/json"}
    response = await client.post("/api/v1/runs", content=huge, headers=json_type)
    assert response.status_code == 400, response.text
    said = response.json()["error"]["message"]
    assert said == "the body cannot be read: an integer in it has more than 4300 digits"
    response = await client.post("/api/v1/store/gc", json={"older_than": "-5d"})
    assert response.status_code == 400, response.text
    assert "--older-than" not in response.json()["error"]["message"]
    assert await _runs(client) == []


async def test_an_unexpected_error_is_answered_and_logged_once(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from wf.serve import _api

    def broken(store: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(_api.admin, "store_info", broken)
    with caplog.at_level("ERROR"):
        response = await client.get("/api/v1/store")  # raised into the client before
    assert response.status_code == 500
    assert response.json()["error"] == {"type": "internal", "message": "RuntimeError: a bug"}
    logged = [r for r in caplog.records if r.exc_info is not None]
    assert len(logged) == 1 and "GET /api/v1/store" in logged[0].getMessage()


async def test_a_stream_whose_announced_body_never_comes_ends_quietly(store: Store) -> None:
    """A stream answers at once and never reads the body its request announced: when that
    body's time is up, the stream ends (as if the client left), with no error after the
    answer started."""
    from wf.serve import create_app

    app = create_app(Engine(store), drive=False, body_timeout=0.3)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the five bytes never come
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/v1/events",
        "raw_path": b"/api/v1/events",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8420"), (b"content-length", b"5")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8420),
    }
    async with asyncio.timeout(10):
        await app(scope, receive, send)  # returns: the stream ended, nothing raised
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """An HTTP request's ASGI scope, for what no HTTP client sends (the host is this server's)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8420"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8420),
    }


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/api/v1/runs", "application/json"),
        ("/api/v1/hooks/some-token", "application/json"),
        ("/login", "application/x-www-form-urlencoded"),
    ],
)
async def test_a_client_that_leaves_before_its_body_arrived_is_no_error(
    store: Store, caplog: pytest.LogCaptureFixture, path: str, content_type: str
) -> None:
    """A client that goes away halfway through its body (or whose body the HTTP parser
    rejects halfway, uvicorn then ends the request) has nobody to answer: no 500, and no
    error with a traceback in the server's log for each such request."""
    from wf.serve import create_app

    app = create_app(Engine(store), drive=False)
    sent: list[dict[str, Any]] = []
    parts = [
        {"type": "http.request", "body": b'{"target": ', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        return parts.pop(0) if parts else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", content_type.encode()), (b"content-length", b"100")]
    scope = _scope("POST", path, headers)
    with caplog.at_level("WARNING"):
        async with asyncio.timeout(10):
            await app(scope, receive, send)
    assert [m for m in sent if m["type"] == "http.response.start"] == [], sent
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


async def test_a_request_target_without_its_slash_is_answered_as_its_path_reads(
    store: Store,
) -> None:
    """``GET api/v1/runs HTTP/1.1`` (no leading slash; uvicorn passes it on): answered by the
    path as the guard reads it (not under ``/api/``: a page), not by Starlette's URL of it."""
    from wf.serve import create_app

    app = create_app(Engine(store), drive=False)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with asyncio.timeout(10):
        await app(_scope("GET", "api/v1/runs", []), receive, send)
    assert sent[0]["status"] == 404
    assert (b"content-type", b"text/html; charset=utf-8") in sent[0]["headers"], sent[0]


@pytest.mark.parametrize(
    ("length", "status"),
    [(b"9" * 5000, 413), (b"1" * 25, 413), (b"0" * 5000 + b"2", 400)],
    ids=["5000 nines", "25 digits", "2 after 5000 zeros"],
)
async def test_a_content_length_of_thousands_of_digits_is_read_not_a_500(
    store: Store, length: bytes, status: int
) -> None:
    """``int()`` refuses a string of more than 4,300 digits: the guard's size check must not
    (uvicorn's h11 refuses such a head first; another server, or the ASGI transport, does
    not). Past the limit: 413; two bytes with leading zeros: the body is read (``{}``: 400)."""
    from wf.serve import create_app

    app = create_app(Engine(store), drive=False)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", length)]
    async with asyncio.timeout(10):
        await app(_scope("POST", "/api/v1/runs", headers), receive, send)
    assert sent[0]["status"] == status, sent


async def test_a_wrong_method_is_told_every_method_the_path_takes(
    client: httpx.AsyncClient,
) -> None:
    for path, allowed in [
        ("/api/v1/runs", {"GET", "HEAD", "POST"}),
        ("/api/v1/schedules/s", {"PUT", "DELETE"}),
    ]:
        response = await client.patch(path, json={})
        assert response.status_code == 405
        assert set(response.headers["allow"].split(", ")) == allowed, response.headers
        assert response.json()["error"]["type"] == "method_not_allowed"


async def test_a_request_head_past_16_kib_sent_whole_is_refused(
    client: httpx.AsyncClient,
) -> None:
    big = await client.get("/api/v1/store", headers={"x-pad": "x" * (20 << 10)})
    assert big.status_code == 431, big.text
    assert big.json()["error"]["type"] == "too_large"
    assert (await client.get("/api/v1/store", headers={"x-pad": "x" * 8000})).status_code == 200


async def test_a_module_named_in_the_configuration_may_be_started(
    client: httpx.AsyncClient, outside: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, marker = outside
    monkeypatch.setenv("WF_MODULES", f"some.other,{name}")
    started = await client.post("/api/v1/runs", json={"target": f"{name}:flow"})
    assert started.status_code == 201, started.text
    assert marker.exists()


# --------------------------------------------------------------------------------------------
# Slow and idle connections.


@pytest_asyncio.fixture
async def served(store: Store) -> AsyncIterator[int]:
    """The app under uvicorn as ``wf serve`` configures it, with short deadlines: its port."""
    import uvicorn

    from wf.serve import create_app
    from wf.serve._run import uvicorn_config

    app = create_app(Engine(store), drive=False, body_timeout=0.5)
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, header_timeout=0.5))
    task = asyncio.ensure_future(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        server.force_exit = True
        await asyncio.wait_for(task, 30)


async def _closed_after(port: int, sent: bytes) -> tuple[float, bytes]:
    """Send ``sent`` and stall: how long until the server closes, and what it answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    began = time.monotonic()
    writer.write(sent)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)  # until the server closes
    writer.close()
    return time.monotonic() - began, answer


async def test_a_connection_that_stalls_is_closed(served: int) -> None:
    host = f"127.0.0.1:{served}"
    # Half a request's head, then nothing.
    half = f"GET /api/v1/runs HTTP/1.1\r\nHost: {host}\r\n"
    took, answer = await _closed_after(served, half.encode())
    assert answer == b"" and took < 3
    # A connection that says nothing at all.
    took, answer = await _closed_after(served, b"")
    assert answer == b"" and took < 3
    # A body that never arrives: 408.
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{"
    )
    took, answer = await _closed_after(served, head.encode())
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert took < 3
    # An idle keep-alive connection after a response: closed too.
    request = f"GET /api/v1/store HTTP/1.1\r\nHost: {host}\r\n\r\n"
    took, answer = await _closed_after(served, request.encode())
    assert answer.startswith(b"HTTP/1.1 200") and took < 10


async def test_a_malformed_request_under_the_api_is_answered_as_the_api_answers(
    served: int,
) -> None:
    """A head no HTTP parser takes (uvicorn answers it itself, in plain text): under /api/ the
    answer is the API's (JSON, the WF-API header), so the remote client reads it as a wf
    server's refusal; elsewhere it is uvicorn's own."""
    host = f"127.0.0.1:{served}"
    bad = f"GET /api/v1/runs HTTP/1.1\r\nHost: {host}\r\nBad Header\r\n\r\n"
    _took, answer = await _closed_after(served, bad.encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer
    assert b"\r\nWF-API: 1\r\n" in head and b"content-type: application/json" in head
    assert json.loads(body)["error"] == {
        "type": "bad_request",
        "message": "malformed HTTP request: Invalid HTTP request received.",
    }
    # Not under the API: uvicorn's answer, also after an API request on the same connection.
    page = f"GET /runs HTTP/1.1\r\nHost: {host}\r\nBad Header\r\n\r\n"
    _took, answer = await _closed_after(served, page.encode())
    assert answer.startswith(b"HTTP/1.1 400") and b"WF-API" not in answer, answer
    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    try:
        writer.write(f"GET /api/v1/store HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert first.startswith(b"HTTP/1.1 200"), first
        length = int(first.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await asyncio.wait_for(reader.readexactly(length), 10)
        writer.write(page.encode())
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 400") and b"WF-API" not in answer, answer


async def test_a_request_that_takes_its_time_within_the_deadline_is_answered(served: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    for part in (b"GET /api/v1/store HTTP/1.1\r\n", f"Host: 127.0.0.1:{served}\r\n".encode()):
        writer.write(part)
        await writer.drain()
        await asyncio.sleep(0.1)
    writer.write(b"Connection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer


def test_the_server_process_refuses_another_host(tmp_path: Path) -> None:
    served = spawn_server(env_for(tmp_path), "--base-url", "https://wf.example.com")
    try:
        port = served.url.rsplit(":", 1)[1]
        evil = httpx.post(
            served.url + "/api/v1/runs",
            content=b'{"target": "tests.serve.flows:adder", "input": [1, 2]}',
            headers={
                "Host": f"evil.example:{port}",
                "Origin": f"http://evil.example:{port}",
                "content-type": "text/plain",
            },
            timeout=30,
        )
        assert evil.status_code == 421, evil.text
        proxied = httpx.get(served.url + "/api/v1/runs", headers={"Host": "wf.example.com"})
        assert proxied.status_code == 200 and proxied.json()["runs"] == []
    finally:
        code, err = stop(served)
    assert code == 0, err


# --------------------------------------------------------------------------------------------
# Tokens.


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("        ", "blank"),
        ("\t\t\t\t\t\t\t\t", "blank"),
        (" padded-token ", "whitespace"),
        ("short", "at least 8"),
        ("tökén-with-accents", "printable ASCII"),
    ],
)
def test_a_token_that_protects_nothing_is_refused(tmp_path: Path, token: str, says: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wf", "serve", "--token", token],
        cwd=REPO,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert not (tmp_path / ".workflows").exists()


def test_create_app_refuses_a_blank_token(tmp_path: Path) -> None:
    from wf import UsageError
    from wf.serve import create_app
    from wf.store.local import LocalStore

    with pytest.raises(UsageError, match="blank"):
        create_app(Engine(LocalStore(tmp_path / ".workflows")), token="         ")


async def _throttled_after_invented_addresses(store: Store, **config: Any) -> bool:
    """Whether 11 wrong tokens, each claiming another X-Forwarded-For, get a 429."""
    import uvicorn

    from wf.serve import create_app
    from wf.serve._run import uvicorn_config

    app = create_app(Engine(store), drive=False, token="t0ken-t0ken")
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, **config))
    task = asyncio.ensure_future(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for n in range(11):
                answer = await client.get(
                    "/api/v1/runs",
                    headers={
                        "Authorization": "Bearer wrong-wrong",
                        "X-Forwarded-For": f"10.0.0.{n}",
                    },
                )
            return answer.status_code == 429
    finally:
        server.should_exit = True
        server.force_exit = True
        await asyncio.wait_for(task, 30)


async def test_forwarded_addresses_are_believed_only_from_a_named_proxy(store: Store) -> None:
    # By default nobody's: a client on this machine cannot invent an address per request to
    # get past the sign-in throttle.
    throttled = await _throttled_after_invented_addresses(store)
    assert throttled
    # A reverse proxy named: the client's address is its X-Forwarded-For.
    throttled = await _throttled_after_invented_addresses(store, forwarded_allow_ips="127.0.0.1")
    assert not throttled


def test_requests_no_parser_reads_are_logged_once_a_minute_with_their_count() -> None:
    """Anyone may send heads uvicorn's parser refuses; its warning for each would be a line a
    request. wf serve's uvicorn lets one through a minute, saying how many there were."""
    from wf.serve._run import MALFORMED, _Malformed, uvicorn_config

    uvicorn_config(object(), host="127.0.0.1", port=0)  # installs the filter, once
    uvicorn_config(object(), host="127.0.0.1", port=0)
    installed = logging.getLogger("uvicorn.error").filters
    assert len([f for f in installed if isinstance(f, _Malformed)]) == 1
    throttle = _Malformed()
    now = [1000.0]
    throttle.clock = lambda: now[0]

    def said(message: str = MALFORMED) -> str | None:
        record = logging.LogRecord("uvicorn.error", logging.WARNING, "x", 1, message, (), None)
        return record.getMessage() if throttle.filter(record) else None

    assert said() == MALFORMED
    assert [said() for _ in range(50)] == [None] * 50
    assert said("something else") == "something else"  # other lines untouched
    now[0] += 61
    assert said() == f"{MALFORMED} (51 in the last 61 s)"
    now[0] += 120
    assert said() == MALFORMED  # alone in its minute
