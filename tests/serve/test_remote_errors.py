"""How the remote client (``wf.admin.HttpAdmin``, ``wf`` with ``WF_URL``) reports a server
that is not a wf server, one of another API version, one that answers JSON of another shape,
one that fails, times out or refuses the token: each one line and a documented exit code
(``docs/cli.md``), never a ``KeyError`` nor another server's JSON taken for an answer.

The servers here are ``httpx.MockTransport`` handlers in place of the network: the client
under test is the real one, from its requests to its errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import wf
from wf._exceptions import ServerRefused, ServerUnavailable
from wf._remote import API_HEADER, API_VERSION, RemoteClient
from wf.admin import HttpAdmin
from wf.cli._app import build_app

URL = "http://wf.test"
WF = {API_HEADER: API_VERSION}
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[[Handler], None]]:
    """``serve(handler)``: the remote client's requests go to ``handler``; ``WF_URL`` names it
    (and the store here is an empty one of the temporary directory, never used)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WF_DIR", str(tmp_path / ".workflows"))
    monkeypatch.setenv("WF_URL", URL)
    monkeypatch.delenv("WF_TOKEN", raising=False)
    monkeypatch.delenv("WF_TIMEOUT", raising=False)
    monkeypatch.delenv("WF_DEBUG", raising=False)
    handlers: list[Handler] = []

    def client(self: RemoteClient) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.AsyncClient(
            base_url=self.url + "/api/v1",
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            transport=httpx.MockTransport(lambda request: handlers[-1](request)),
        )

    monkeypatch.setattr(RemoteClient, "_make", client)
    yield handlers.append


def answering(status: int, body: Any, headers: dict[str, str] | None = None) -> Handler:
    """A server that answers every request with ``status`` and ``body`` (JSON, or text)."""
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    kind = "text/html" if isinstance(body, str) else "application/json"

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status, content=content, headers={"content-type": kind, **(headers or {})}
        )

    return handle


def wf_cli(*args: str) -> Any:
    return CliRunner().invoke(build_app(), list(args), catch_exceptions=False)


def one_error(result: Any) -> str:
    """The command's one line on stderr (no traceback, no "unexpected")."""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "error: unexpected" not in result.stderr and "KeyError" not in result.stderr
    return str(result.stderr)


OTHER_SHAPE = {
    "runs": [{"id": "x", "state": "done"}],
    "next_before": None,
    "id": "x",
    "status": "weird",
    "hooks": [{"t": 1}],
    "schedules": [{"x": 1}],
    "kind": "v2",
    "problems": ["p"],
}

COMMANDS = [
    ["runs", "--json"],
    ["inspect", "done-1", "--json"],
    ["logs", "done-1"],
    ["stream", "str-1"],
    ["hooks", "--json"],
    ["schedules", "--json"],
    ["store", "info", "--json"],
    ["store", "verify"],
    ["deployments", "--json"],
    ["gc", "--dry-run", "--json"],
    ["cancel", "done-1"],
    ["wake", "done-1"],
    ["retry", "fail-1", "--detach"],
    ["hook", "resume", "tok-x", "--data", "{}"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args[:2]))
def test_another_server_answering_200_is_not_taken_for_a_wf_server(
    serve: Callable[[Handler], None], args: list[str]
) -> None:
    serve(answering(200, OTHER_SHAPE))
    result = wf_cli(*args)
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    line = one_error(result)
    assert f"error: {URL}: not a wf server (or one of an incompatible version): " in line
    assert f"without the {API_HEADER} header" in line


# A retry's answer is a run's id, which OTHER_SHAPE has; a stream's bytes are any bytes.
SHAPED = [args for args in COMMANDS if args[0] not in ("retry", "stream")]


@pytest.mark.parametrize("args", SHAPED, ids=lambda args: " ".join(args[:2]))
def test_a_wf_answer_of_another_shape_is_one_line_not_a_key_error(
    serve: Callable[[Handler], None], args: list[str]
) -> None:
    serve(answering(200, OTHER_SHAPE, WF))
    result = wf_cli(*args)
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    line = one_error(result)
    assert "not a wf server (or one of an incompatible version): its answer to " in line
    assert "is not of the shape expected" in line


def test_a_server_of_another_api_version_is_refused(serve: Callable[[Handler], None]) -> None:
    serve(answering(200, {"runs": [], "next_before": None}, {API_HEADER: "2"}))
    result = wf_cli("runs", "--json")
    assert result.exit_code == 3
    assert "it speaks API version '2'; this client speaks 1" in one_error(result)


def test_a_non_wf_404_is_no_unknown_run(serve: Callable[[Handler], None]) -> None:
    html = "<html><title>Error response</title><p>File not found</p></html>"
    serve(answering(404, html))
    result = wf_cli("inspect", "done-1", "--json")
    assert result.exit_code == 3
    line = one_error(result)
    assert "no run with id" not in line
    assert "not a wf server" in line and "HTTP 404 (text/html)" in line
    serve(answering(501, html))  # another server's "no such method": no failure to wait out
    assert "not a wf server" in one_error(wf_cli("retry", "fail-1", "--detach"))
    # A wf server's 404 without the run's id is another version's route, not "no run".
    serve(answering(404, {"error": {"type": "not_found", "message": "Not Found"}}, WF))
    with pytest.raises(ServerUnavailable, match="not a wf server"):
        asyncio.run(HttpAdmin(RemoteClient(URL)).run_detail("done-1"))
    # One that names the run is the unknown run, exit 2.
    body = {"error": {"type": "not_found", "message": "no run with id 'r'", "run_id": "r"}}
    serve(answering(404, body, WF))
    assert wf_cli("inspect", "r", "--json").exit_code == 2


@pytest.mark.parametrize(
    ("status", "headers", "words"),
    [
        (502, {}, "failed: HTTP 502 Bad Gateway; try again later"),
        (503, {"retry-after": "7"}, "failed: HTTP 503 Service Unavailable; try again in 7 s"),
        (429, {}, "is busy: HTTP 429 Too Many Requests; try again later"),
    ],
)
def test_a_server_that_fails_or_is_busy_is_exit_3_not_a_failed_run(
    serve: Callable[[Handler], None], status: int, headers: dict[str, str], words: str
) -> None:
    serve(answering(status, "<html>down</html>", headers))
    result = wf_cli("runs")
    assert result.exit_code == 3
    assert f"the wf server at {URL} {words}" in one_error(result)


def test_a_wf_servers_own_500_and_429_are_exit_3(serve: Callable[[Handler], None]) -> None:
    serve(answering(500, {"error": {"type": "internal", "message": "internal error"}}, WF))
    failed = wf_cli("runs")
    assert failed.exit_code == 3
    assert "failed: internal error (HTTP 500 internal); try again later" in one_error(failed)
    busy = {"error": {"type": "too_many_requests", "message": "too many: try again in 4 s"}}
    serve(answering(429, busy, {**WF, "retry-after": "4"}))
    refused = wf_cli("runs")
    assert refused.exit_code == 3
    assert "is busy: too many: try again in 4 s (HTTP 429" in one_error(refused)


def test_an_unreachable_server_is_exit_3(serve: Callable[[Handler], None]) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("All connection attempts failed", request=request)

    serve(refuse)
    result = wf_cli("retry", "fail-1", "--detach")
    assert result.exit_code == 3
    line = one_error(result)
    assert f"cannot reach the wf server at {URL}: All connection attempts failed" in line
    with pytest.raises(wf.StoreError):
        asyncio.run(HttpAdmin(RemoteClient(URL)).store_info())


def test_a_server_that_never_answers_times_out_after_wf_timeout(
    serve: Callable[[Handler], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    limits: list[Any] = []

    def hang(request: httpx.Request) -> httpx.Response:
        limits.append(request.extensions["timeout"]["read"])
        raise httpx.ReadTimeout("", request=request)  # httpx's own: no text

    serve(hang)
    monkeypatch.setenv("WF_TIMEOUT", "2.5")
    result = wf_cli("store", "info")
    assert result.exit_code == 3
    line = one_error(result)
    assert f"cannot reach the wf server at {URL}: timed out after 2.5 s (ReadTimeout" in line
    assert limits == [2.5]
    # A read that is no long poll (`wf logs` without --follow) waits no longer either.
    assert wf_cli("logs", "done-1").exit_code == 3
    assert limits[-1] == 2.5
    # A sweep answers at its end, minutes later on a large store: it waits at least an hour.
    assert wf_cli("store", "verify").exit_code == 3
    assert wf_cli("gc", "--older-than", "1d").exit_code == 3
    assert limits[-2:] == [3600.0, 3600.0]
    monkeypatch.setenv("WF_TIMEOUT", "soon")
    bad = wf_cli("store", "info")
    assert bad.exit_code == 2
    assert "WF_TIMEOUT must be a number of seconds above 0, not 'soon'" in one_error(bad)


def test_a_refused_token_is_bad_usage_not_a_failed_run(
    serve: Callable[[Handler], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"error": {"type": "unauthorized", "message": "the token given is not this one's"}}
    serve(answering(401, body, {**WF, "www-authenticate": "Bearer"}))
    monkeypatch.setenv("WF_TOKEN", "wrong-token-xyz")
    result = wf_cli("runs")
    assert result.exit_code == 2
    assert "refused the request: the token given is not this one's (HTTP 401" in one_error(result)
    with pytest.raises(ServerRefused):
        asyncio.run(HttpAdmin(RemoteClient(URL, "wrong-token-xyz")).store_info())


@pytest.mark.parametrize(
    ("drives", "who"),
    [
        (True, "its worker picks it up"),
        (False, "a `wf worker` on its store picks it up (the server does not drive runs)"),
        (None, "its worker, or a `wf worker` on its store, picks it up"),
    ],
)
def test_a_detached_remote_run_says_where_it_waits(
    serve: Callable[[Handler], None], drives: bool | None, who: str
) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/store"):
            if drives is None:  # it fails: the run is queued all the same
                return httpx.Response(503, text="down")
            body = {"kind": "local", "location": "/srv", "drives": drives}
            return httpx.Response(200, json=body, headers=WF)
        return httpx.Response(201, json={"id": "wrun_1", "status": "pending"}, headers=WF)

    serve(handle)
    result = wf_cli("run", "shop:flow", "--detach")
    assert result.exit_code == 0, result.output
    assert result.stdout == "wrun_1\n"
    assert result.stderr == (
        f"hint: queued on the wf server at {URL}: {who}; follow it with `wf inspect wrun_1`\n"
    )
    quiet = wf_cli("run", "shop:flow", "--detach", "-q")
    assert quiet.stdout == "wrun_1\n" and quiet.stderr == ""


def test_wf_dev_with_wf_url_says_it_works_on_the_store_here(
    serve: Callable[[Handler], None], tmp_path: Path
) -> None:
    # --input without --run: refused before anything is served, after the note.
    result = wf_cli("dev", "--input", "1")
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith("hint: wf dev works on the store here (")
    assert f"not on the server at WF_URL ({URL})" in first


@pytest.mark.parametrize("token", ["sécret-token", "secret\nX: y", "tab\there", "del\x7f"])
def test_a_token_no_http_header_can_carry_is_bad_usage(
    serve: Callable[[Handler], None], monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    # Said before any request, in one line (it was an "unexpected UnicodeEncodeError", exit 1,
    # or httpx's "Illegal header value", exit 3).
    import wf

    serve(answering(200, {"runs": [], "next_before": None, "damaged": []}, WF))
    monkeypatch.setenv("WF_TOKEN", token)
    result = wf_cli("runs")
    assert result.exit_code == 2, result.output
    line = one_error(result)
    assert "WF_TOKEN" in line and "HTTP header" in line, line
    with pytest.raises(wf.UsageError, match="the token cannot go in an HTTP header"):
        RemoteClient(URL, token)
    with pytest.raises(wf.UsageError, match="the token cannot go in an HTTP header"):
        wf.configure(url=URL, token=token)


def test_a_run_s_feed_ended_cleanly_is_opened_again_after_a_pause_not_at_once(
    serve: Callable[[Handler], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server (or a proxy) that ends ``/events`` at once, cleanly: ``wf run`` waiting for a
    run (``ended(hooks_only=True)``) opened it again with no pause and no limit (418 requests
    in 2 s). It now waits as for a server that stops (``Outage``), as ``watch`` does."""
    from wf._remote import Outage

    opened: list[str] = []

    def feed(request: httpx.Request) -> httpx.Response:
        opened.append(request.url.path)
        if len(opened) > 10:
            raise AssertionError(f"opened again at once: {opened}")
        change = {"id": "r1", "status": "running", "updated_at": 1, "events": 3}
        return httpx.Response(
            200,
            content=f"data: {json.dumps(change)}\n\n".encode(),
            headers={"content-type": "text/event-stream", **WF},
        )

    class Gave(Exception):
        pass

    pauses: list[str] = []

    async def failed(self: Outage, error: ServerUnavailable) -> None:
        pauses.append(str(error))
        if len(pauses) == 3:
            raise Gave

    monkeypatch.setattr(Outage, "failed", failed)
    serve(feed)
    with pytest.raises(Gave):
        asyncio.run(HttpAdmin(RemoteClient(URL)).ended("r1", hooks_only=True))
    assert len(opened) == 3 and all(p.endswith("/events") for p in opened), opened
    assert all("ended the run's feed early" in p for p in pauses), pauses


def test_a_feed_the_server_always_ends_at_once_is_said_once_and_backed_off(
    serve: Callable[[Handler], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy that ends every ``/events`` response at once: ``wf run`` waiting for a run
    said two lines (ended early; answers again) and opened the feed again every 0.5 s, for
    ever. It now says it once and opens it again after growing pauses (0.5 s up to 5 s)."""
    import wf._remote

    opened: list[str] = []

    class Enough(Exception):
        pass

    def feed(request: httpx.Request) -> httpx.Response:
        opened.append(request.url.path)
        if len(opened) > 8:
            raise Enough
        change = {"id": "r1", "status": "running", "updated_at": 1, "events": 3}
        return httpx.Response(
            200,
            content=f"data: {json.dumps(change)}\n\n".encode(),
            headers={"content-type": "text/event-stream", **WF},
        )

    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:  # no real wait: only the pauses asked for
        pauses.append(seconds)
        await real_sleep(0)

    said: list[str] = []
    monkeypatch.setattr(wf._remote.asyncio, "sleep", sleep)
    monkeypatch.setattr(wf._remote, "say_outage", said.append)
    serve(feed)
    with pytest.raises(Enough):
        asyncio.run(HttpAdmin(RemoteClient(URL)).ended("r1", hooks_only=True))
    assert len(opened) == 9 and all(p.endswith("/events") for p in opened), opened
    assert said == [f"the wf server at {URL} ended the run's feed early; opening it again"]
    assert pauses == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0], pauses
