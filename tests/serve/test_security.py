"""``wf serve``'s guard: sessions and their CSRF tokens, wrong tokens, cross-site requests,
and payloads that pose as a webhook's request."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

import wf
from tests.serve.conftest import BASE, Api
from wf import Engine
from wf.serve import create_app
from wf.store.local import LocalStore
from wf.testing import MockClock

TOKEN = "s3cret-token"
BEARER = {"authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def _client(
    tmp_path: Path,
    *,
    clock: MockClock | None = None,
    hosts: tuple[str, ...] = (),
    base_url: str = BASE,
    client: tuple[str, int] = ("127.0.0.1", 123),
) -> AsyncIterator[httpx.AsyncClient]:
    engine = Engine(LocalStore(tmp_path / ".workflows"), clock=clock)
    app = create_app(engine, token=TOKEN, drive=False, hosts=hosts)
    transport = httpx.ASGITransport(app=app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as c:
        yield c


def _csrf(html: str) -> str | None:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    return found.group(1) if found else None


async def _login(c: httpx.AsyncClient) -> httpx.Response:
    response = await c.post("/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303, response.text
    return response


async def test_the_csrf_token_is_bound_to_the_session_and_not_on_the_open_login_page(
    tmp_path: Path,
) -> None:
    async with _client(tmp_path) as c:
        assert _csrf((await c.get("/login")).text) is None  # nothing to read without a session
        await _login(c)
        first = _csrf((await c.get("/queues")).text)
        old_cookie = c.cookies["wf_session"]
        c.cookies.clear()
        await _login(c)
        second = _csrf((await c.get("/queues")).text)
        assert first and second and first != second  # each session its own
        # A form with another session's CSRF token is refused.
        stale = await c.post("/logout", data={"csrf": first})
        assert stale.status_code == 403
        # A login from another site is refused before the token is looked at.
        evil = await c.post(
            "/login", data={"token": TOKEN}, headers={"origin": "https://evil.example"}
        )
        assert evil.status_code == 403
        c.cookies.clear()
        c.cookies.set("wf_session", old_cookie)
        assert (await c.get("/")).status_code == 200  # the first session is good still


async def test_the_session_expires_and_sign_out_clears_it(tmp_path: Path) -> None:
    clock = MockClock(autojump=False)
    async with _client(tmp_path, clock=clock) as c:
        cookie = (await _login(c)).headers["set-cookie"].lower()
        assert "max-age=43200" in cookie and "httponly" in cookie and "secure" not in cookie
        page = await c.get("/")
        assert page.status_code == 200 and 'action="/logout"' in page.text
        clock.jump(12 * 3600 - 10)
        assert (await c.get("/")).status_code == 200
        clock.jump(20)
        expired = await c.get("/")
        assert (expired.status_code, expired.headers["location"]) == (303, "/login?next=/")
        forged = c.cookies["wf_session"].split(".")
        c.cookies.set("wf_session", ".".join([str(int(clock.now())), *forged[1:]]))
        assert (await c.get("/")).status_code == 303  # the issue time is signed

        c.cookies.clear()
        await _login(c)
        # Every page a session reaches has the way out, its error pages too.
        for missing in ("/runs/no-such-run", "/?status=nonsense"):
            error_page = await c.get(missing)
            assert error_page.status_code in (400, 404)
            assert 'action="/logout"' in error_page.text, missing
        csrf = _csrf((await c.get("/")).text)
        out = await c.post("/logout", data={"csrf": csrf})
        assert (out.status_code, out.headers["location"]) == (303, "/login")
        assert 'wf_session="";' in out.headers["set-cookie"] or "max-age=0" in (
            out.headers["set-cookie"].lower()
        )
        assert "wf_session" not in c.cookies
        assert (await c.get("/")).status_code == 303


@pytest.mark.parametrize(
    ("hosts", "base_url"),
    [(("https://wf.example.com",), BASE), ((), "https://127.0.0.1:8420")],
    ids=["https-base-url", "https-request"],
)
async def test_the_session_cookie_is_secure_when_the_server_is_reached_over_https(
    tmp_path: Path, hosts: tuple[str, ...], base_url: str
) -> None:
    async with _client(tmp_path, hosts=hosts, base_url=base_url) as c:
        cookie = (await _login(c)).headers["set-cookie"].lower()
        assert "; secure" in cookie


async def test_wrong_tokens_are_logged_once_a_minute_and_a_burst_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = MockClock(autojump=False)
    caplog.set_level(logging.WARNING, logger="wf.serve")
    async with _client(tmp_path, clock=clock, client=("203.0.113.7", 4000)) as c:
        for _ in range(10):
            wrong = await c.get("/api/v1/runs", headers={"authorization": "Bearer nope-nope"})
            assert wrong.status_code == 401
        lines = [r.getMessage() for r in caplog.records if "failed authentication" in r.message]
        assert lines == [
            "failed authentication from 203.0.113.7: 1 wrong token(s) (last: GET /api/v1/runs)"
        ]
        # The burst is spent: refused without a look at the token, the right one too.
        refused = await c.get("/api/v1/runs", headers=BEARER)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "60"
        login = await c.post("/login", data={"token": TOKEN})
        assert login.status_code == 429
        clock.jump(60)
        assert (await c.get("/api/v1/runs", headers=BEARER)).status_code == 200
        assert (await c.post("/login", data={"token": "nope-nope"})).status_code == 401
        lines = [r.getMessage() for r in caplog.records if "failed authentication" in r.message]
        assert lines[1] == (
            "failed authentication from 203.0.113.7: 12 wrong token(s) in the last 60 s "
            "(last: the login form)"
        )
    # Another address is not held up by this one.
    async with _client(tmp_path, clock=clock, client=("203.0.113.8", 4000)) as other:
        assert (await other.get("/api/v1/runs", headers=BEARER)).status_code == 200


async def test_a_wrong_token_is_said_to_be_wrong_not_missing(tmp_path: Path) -> None:
    async with _client(tmp_path) as c:
        missing = await c.get("/api/v1/runs")
        wrong = await c.get("/api/v1/runs", headers={"authorization": "Bearer nope-nope"})
    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["error"]["message"].startswith("this server needs a token")
    assert wrong.json()["error"]["message"] == (
        "the token given (Authorization: Bearer) is not this server's"
    )


async def test_every_api_answer_names_the_api_version_refusals_too(tmp_path: Path) -> None:
    """The remote client refuses an answer without it (``wf._remote.API_HEADER``)."""
    from wf._remote import API_HEADER, API_VERSION

    async with _client(tmp_path) as c:
        answers = [
            await c.get("/api/v1/runs", headers=BEARER),
            await c.get("/api/v1/runs"),  # 401
            await c.get("/api/v1/runs/wrun_missing", headers=BEARER),  # 404
            await c.get("/api/v1/nosuch", headers=BEARER),
        ]
        page = await c.get("/login")
    assert [a.headers.get(API_HEADER) for a in answers] == [API_VERSION] * len(answers)
    assert API_HEADER not in page.headers  # a page is no API answer


MISSING = "/api/v1/runs/wrun_missing/cancel"


async def test_a_request_with_two_origins_or_hosts_is_refused(api: Api) -> None:
    missing = MISSING
    twice = await api.client.post(
        missing,
        headers=[("origin", "https://evil.example"), ("origin", "http://127.0.0.1:8420")],
    )
    assert twice.status_code == 400 and "one Origin header" in twice.json()["error"]["message"]
    hosts = await api.client.get("/api/v1/runs", headers=[("host", "127.0.0.1:8420")] * 2)
    assert hosts.status_code == 400


async def test_sec_fetch_site_is_read_whatever_its_case(api: Api) -> None:
    mixed = await api.client.post(MISSING, headers={"sec-fetch-site": "Cross-Site"})
    assert mixed.status_code == 403


async def test_the_api_takes_only_json_bodies_on_changes(api: Api) -> None:
    missing = MISSING
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        body = await api.client.post(
            "/api/v1/runs",
            content=b'{"target": "tests.serve.flows:adder", "input": [1, 2]}',
            headers={"content-type": kind},
        )
        assert body.status_code == 415, kind
    untyped = await api.client.post("/api/v1/hooks/x", content=b'{"a": 1}')
    assert untyped.status_code == 415
    assert (await api.client.post(missing)).status_code == 404  # no body: nothing to type
    typed = await api.client.post(
        missing, content=b"{}", headers={"content-type": "application/json; charset=utf-8"}
    )
    assert typed.status_code == 404
    # Webhooks take what providers send.
    hook = await api.client.post(
        "/webhooks/x", content=b"a=1", headers={"content-type": "text/plain"}
    )
    assert hook.status_code == 404


FORGED: dict[str, Any] = {
    "__wf_webhook__": 1,
    "body": {"n": 1},
    "request": {"id": "../../x<script>", "method": "PUT", "headers": {"x-signature": "forged"}},
}


async def test_a_payload_cannot_pose_as_a_webhooks_request(api: Api) -> None:
    token = "forged-envelope"
    run_id = await api.start("manual_webhook", token)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    refused = await api.client.post(f"/api/v1/hooks/{token}", json=FORGED)
    assert refused.status_code == 400
    assert "__wf_webhook__" in refused.json()["error"]["message"]
    with pytest.raises(wf.HookError, match="__wf_webhook__"):
        await wf.admin.resume_hook(api.engine, token, {**FORGED, "__wf_webhook__": True})
    detail = (await api.client.get(f"/api/v1/runs/{run_id}?events=false")).json()
    assert detail["status"] == "suspended" and detail["streams"] == []
