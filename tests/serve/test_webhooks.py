"""Webhooks: a request resumes its run; static and manual replies; retries; slow replies."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.serve.conftest import BASE, Api
from wf.testing import MockClock


async def _webhook_ready(api: Api, run_id: str) -> None:
    await api.until(run_id, lambda d: d["hooks"])


async def test_a_static_reply_and_the_body_validated_against_the_type(api: Api) -> None:
    run_id = await api.start("static_webhook", "wh-static")
    await _webhook_ready(api, run_id)
    wrong_method = await api.client.get("/webhooks/wh-static")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    invalid = await api.client.post("/webhooks/wh-static", json={"approved": "perhaps"})
    assert invalid.status_code == 400
    assert "approved" in invalid.json()["error"]["message"]
    not_json = await api.client.post("/webhooks/wh-static", content=b"{nope")
    assert not_json.status_code == 400
    reply = await api.client.post("/webhooks/wh-static", json={"approved": True, "by": "stripe"})
    assert (reply.status_code, reply.json()) == (200, {"ok": True})
    assert (await api.result(run_id))["output"] == {"by": "stripe"}
    gone = await api.client.post("/webhooks/wh-static", json={"approved": True, "by": "x"})
    assert gone.status_code == 404  # the run ended: its token is released


async def test_the_run_decides_the_reply_and_a_retry_is_delivered_once(api: Api) -> None:
    run_id = await api.start("manual_webhook", "wh-manual")
    await _webhook_ready(api, run_id)
    headers = {"Idempotency-Key": "delivery-1"}
    first = await api.client.put("/webhooks/wh-manual?x=6&x=7", json={"n": 1}, headers=headers)
    assert first.status_code == 201
    assert first.json() == {"echo": 1, "q": "7", "all": ["6", "7"]}
    assert first.headers["x-wf"] == "PUT"
    # The provider did not see the reply and sends the same delivery again: the workflow does
    # not see it twice, and the retry gets the first reply.
    retry = await api.client.put("/webhooks/wh-manual?x=6&x=7", json={"n": 1}, headers=headers)
    assert (retry.status_code, retry.json()) == (201, {"echo": 1, "q": "7", "all": ["6", "7"]})
    second = await api.client.put("/webhooks/wh-manual", json={"n": 2})
    assert (second.status_code, second.json()) == (201, {"echo": 2, "q": None, "all": []})
    assert (await api.result(run_id))["output"] == ["1", "2"]


async def test_a_payload_delivered_without_a_request_is_answered_to_nobody(api: Api) -> None:
    """A payload posted to the webhook's token through the API (as ``wf hook resume`` does)
    has no caller: the run's ``respond`` goes nowhere, and the run goes on."""
    run_id = await api.start("manual_webhook", "wh-api")
    await _webhook_ready(api, run_id)
    for n in (1, 2):
        posted = await api.client.post("/api/v1/hooks/wh-api", json={"n": n})
        assert posted.status_code == 200, posted.text
    result = await api.result(run_id)
    assert (result["status"], result["output"]) == ("completed", ["1", "2"]), result


async def test_a_slow_reply_times_out_with_202_and_the_run_still_gets_the_payload(
    api: Api,
) -> None:
    run_id = await api.start("slow_webhook", {"token": "wh-slow", "delay": 1.5})
    await _webhook_ready(api, run_id)
    began = time.monotonic()
    reply = await api.client.post("/webhooks/wh-slow", json={"n": 5})
    took = time.monotonic() - began
    assert reply.status_code == 202
    assert reply.json() == {"run_id": run_id, "status": "accepted"}
    assert 0.4 < took < 1.4
    assert (await api.result(run_id))["output"] == "5"


async def test_unknown_webhooks_and_hooks_that_are_not_webhooks(api: Api) -> None:
    assert (await api.client.post("/webhooks/nobody", json={})).status_code == 404
    run_id = await api.start("approval", "plain")
    await _webhook_ready(api, run_id)
    # A plain hook has no URL: only the API (with its token) resumes it.
    assert (await api.client.post("/webhooks/approve:plain", json={})).status_code == 404
    too_long = await api.client.post("/webhooks/" + "x" * 600, json={})
    assert too_long.status_code == 400


async def test_the_url_comes_from_wf_base_url(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WF_BASE_URL", "https://hooks.example.com/")
    run_id = await api.start("webhook_url", "tok/1")
    output = (await api.result(run_id))["output"]
    assert output == "https://hooks.example.com/webhooks/tok%2F1"
    assert os.environ["WF_BASE_URL"].startswith("https://")


def test_respond_and_method_are_checked_when_the_webhook_is_made() -> None:
    from wf import UsageError
    from wf.engine._webhooks import reply_of

    assert reply_of(204) == {"status": 204, "body": None, "headers": {}}
    assert reply_of((200, "ok", {"X": "1"})) == {"status": 200, "body": "ok", "headers": {"X": "1"}}
    for bad in (99, (700, None), (200, None, {"X": 1}), "200"):
        with pytest.raises(UsageError):
            reply_of(bad)
    # A webhook's URL is on the web UI's origin: its reply sets no cookie there.
    for header in ("Set-Cookie", "set-cookie", "SET-COOKIE2"):
        with pytest.raises(UsageError, match="cannot set cookies"):
            reply_of((200, None, {header: "wf_session=x; Path=/"}))


async def test_two_deliveries_at_once_both_reach_the_run(api: Api) -> None:
    run_id = await api.start("manual_webhook", "wh-both")
    await _webhook_ready(api, run_id)
    replies = await asyncio.gather(
        api.client.put("/webhooks/wh-both", json={"n": 1}),
        api.client.put("/webhooks/wh-both", json={"n": 2}),
    )
    assert sorted(r.json()["echo"] for r in replies) == [1, 2]
    assert sorted((await api.result(run_id))["output"]) == ["1", "2"]


async def test_a_page_a_run_replies_with_cannot_script_the_servers_origin(api: Api) -> None:
    """A webhook's URL shares its origin with the web UI: an HTML reply is sandboxed (no
    script, an origin of its own) unless the workflow sets its own policy, and never sniffed."""
    run_id = await api.start("page_webhook", {"token": "wh-page", "headers": {}})
    await _webhook_ready(api, run_id)
    reply = await api.client.post("/webhooks/wh-page", json={})
    assert reply.status_code == 200 and reply.text == "<script>alert(1)</script>"
    assert reply.headers["content-type"] == "text/html"
    assert reply.headers["content-security-policy"] == "sandbox"
    assert reply.headers["x-content-type-options"] == "nosniff"
    own = {"Content-Security-Policy": "default-src 'none'", "X-Content-Type-Options": "off"}
    run_id = await api.start("page_webhook", {"token": "wh-own", "headers": own})
    await _webhook_ready(api, run_id)
    reply = await api.client.post("/webhooks/wh-own", json={})
    assert reply.headers.get_list("content-security-policy") == ["default-src 'none'"]
    assert reply.headers.get_list("x-content-type-options") == ["nosniff"]
    assert reply.headers.get_list("content-type") == ["text/html"]


async def test_a_run_that_replies_with_a_cookie_fails_and_the_caller_is_told_accepted(
    api: Api,
) -> None:
    run_id = await api.start(
        "page_webhook", {"token": "wh-cookie", "headers": {"Set-Cookie": "a=b"}}
    )
    await _webhook_ready(api, run_id)
    reply = await api.client.post("/webhooks/wh-cookie", json={})
    assert reply.status_code == 202 and "set-cookie" not in reply.headers
    result = await api.result(run_id)
    assert result["status"] == "failed" and "cannot set cookies" in result["error"]["message"]


def test_a_recorded_reply_with_a_cookie_is_sent_without_it() -> None:
    """A static reply recorded before cookies were refused: sent, without the cookie."""
    from wf.serve._webhooks import reply_response

    response = reply_response(
        {"status": 200, "body": {"ok": True}, "headers": {"Set-Cookie": "a=b"}}
    )
    assert response.status_code == 200 and "set-cookie" not in response.headers
    assert response.headers["content-security-policy"] == "sandbox"


def test_a_reply_http_cannot_carry_is_refused_when_it_is_made() -> None:
    """A reply the server could not send (the caller would get a broken answer, the run would
    say it replied) is a ``UsageError`` at ``respond=`` and ``request.respond``."""
    from wf import UsageError
    from wf.engine._webhooks import reply_of

    bad = [
        101,  # a 1xx is not a final reply
        199,
        600,
        (200, "hi", {"X-A": "a\r\nSet-Cookie: evil=1"}),
        (200, "hi", {"X-A": "a\nb"}),
        (200, "hi", {"X-A": "a\x00"}),
        (200, "hi", {"X-A": " padded"}),
        (200, "hi", {"X-A": "snow \u2603"}),
        (200, "hi", {"bad header": "x"}),
        (200, "hi", {"": "x"}),
        (200, "hi", {"Content-Length": "5000"}),
        (200, "hi", {"Transfer-Encoding": "chunked"}),
        (200, "hi", {"connection": "close"}),
        (200, "hi", {"Upgrade": "websocket"}),
        (204, "not empty"),
        (304, {"a": 1}),
    ]
    for reply in bad:
        with pytest.raises(UsageError, match="webhook reply"):
            reply_of(reply)
    assert reply_of((204, None, {"X-Ok": "caf\u00e9\tok"})) == {
        "status": 204,
        "body": None,
        "headers": {"X-Ok": "caf\u00e9\tok"},
    }
    assert reply_of((599, "x")) == {"status": 599, "body": "x", "headers": {}}


async def test_a_run_that_replies_with_a_broken_header_fails_and_the_caller_is_told_accepted(
    api: Api,
) -> None:
    run_id = await api.start(
        "page_webhook", {"token": "wh-crlf", "headers": {"X-A": "a\r\nSet-Cookie: evil=1"}}
    )
    await _webhook_ready(api, run_id)
    reply = await api.client.post("/webhooks/wh-crlf", json={})
    assert reply.status_code == 202 and "set-cookie" not in reply.headers
    result = await api.result(run_id)
    assert result["status"] == "failed" and "cannot carry" in result["error"]["message"]


async def test_a_second_reply_to_one_request_is_refused(api: Api) -> None:
    run_id = await api.start("twice_webhook", "wh-twice")
    await _webhook_ready(api, run_id)
    reply = await api.client.post("/webhooks/wh-twice", json={})
    assert (reply.status_code, reply.text) == (200, "first")
    output = (await api.result(run_id))["output"]
    assert output.startswith("UsageError:") and "once" in output


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"idempotency_header": ""}, "idempotency_header"),
        ({"idempotency_header": "Idempotency-Key\n"}, "idempotency_header"),
        ({"idempotency_header": "Idem Key"}, "idempotency_header"),
        ({"timeout": 1e12}, "at most 3600"),
        ({"timeout": 0}, "more than 0"),
        ({"timeout": "10"}, "timeout"),
    ],
)
async def test_webhook_options_that_would_not_work_are_refused(
    api: Api, options: dict[str, object], says: str
) -> None:
    run_id = await api.start("webhook_made_with", options)
    output = (await api.result(run_id))["output"]
    assert output.startswith("UsageError:") and says in output, output


def test_a_recorded_reply_http_cannot_carry_is_answered_502_in_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A reply recorded before such replies were refused: 502, said in one line."""
    from wf.serve._webhooks import reply_response

    with caplog.at_level("WARNING", logger="wf.serve"):
        response = reply_response(
            {"status": 200, "kind": "text", "body": "hi", "headers": {"Content-Length": "5000"}}
        )
    assert response.status_code == 502
    assert [r.exc_info for r in caplog.records] == [None]
    # A run's ``respond(204)`` (its body recorded as JSON ``null``) is sent without a body.
    empty = reply_response({"status": 204, "kind": "json", "body": "null", "headers": {}})
    assert (empty.status_code, empty.body) == (204, b"")


async def test_a_reply_that_fails_as_it_is_sent_is_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from wf.serve._webhooks import reply_response

    async def send(message: object) -> None:
        raise ConnectionResetError("the caller left")

    async def receive() -> dict[str, object]:
        return {"type": "http.disconnect"}

    response = reply_response({"status": 200, "body": {"ok": True}})
    scope = {"type": "http", "method": "POST", "path": "/webhooks/x", "headers": []}
    with caplog.at_level("WARNING", logger="wf.serve"):
        await response(scope, receive, send)
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
    assert "the caller left" in caplog.records[0].getMessage()


async def test_a_retry_after_the_run_ended_gets_the_first_reply(api: Api) -> None:
    """A one-shot webhook's run ends right after its delivery: the provider's retry (the
    same idempotency key) still gets the first reply, not 404; another key gets 404."""
    run_id = await api.start("static_webhook", "wh-once")
    await _webhook_ready(api, run_id)
    key = {"Idempotency-Key": "evt-1"}
    body = {"approved": True, "by": "stripe"}
    first = await api.client.post("/webhooks/wh-once", json=body, headers=key)
    assert (first.status_code, first.json()) == (200, {"ok": True})
    await api.result(run_id)
    retry = await api.client.post("/webhooks/wh-once", json=body, headers=key)
    assert (retry.status_code, retry.json()) == (200, {"ok": True})
    other = await api.client.post("/webhooks/wh-once", json=body, headers={"X-Other": "evt-1"})
    assert other.status_code == 404

    run_id = await api.start("page_webhook", {"token": "wh-once-run", "headers": {}})
    await _webhook_ready(api, run_id)
    first = await api.client.post("/webhooks/wh-once-run", json={}, headers=key)
    assert first.status_code == 200 and first.text == "<script>alert(1)</script>"
    await api.result(run_id)
    retry = await api.client.post("/webhooks/wh-once-run", json={}, headers=key)
    assert (retry.status_code, retry.text) == (200, first.text)
    assert (await api.client.post("/webhooks/wh-once-run", json={})).status_code == 404


@contextlib.asynccontextmanager
async def _restarted(api: Api, clock: MockClock | None = None) -> AsyncIterator[Any]:
    """A client on a new app over the same store (``wf serve`` restarted, or another server
    process behind the load balancer), which drives nothing."""
    from wf import Engine
    from wf.serve import create_app

    app = create_app(Engine(api.engine.store, clock=clock), drive=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            yield client


async def test_a_retry_after_the_run_ended_gets_the_first_reply_from_any_server(
    api: Api,
) -> None:
    """The delivery is kept by the store: a server restarted since the first delivery (or
    another one) answers the retry with the first reply, for a day; then 404."""
    run_id = await api.start("static_webhook", "wh-kept")
    await _webhook_ready(api, run_id)
    key = {"Idempotency-Key": "evt-1"}
    body = {"approved": True, "by": "stripe"}
    first = await api.client.post("/webhooks/wh-kept", json=body, headers=key)
    assert (first.status_code, first.json()) == (200, {"ok": True})
    await api.result(run_id)
    run_id = await api.start("page_webhook", {"token": "wh-kept-run", "headers": {}})
    await _webhook_ready(api, run_id)
    page = await api.client.post("/webhooks/wh-kept-run", json={}, headers=key)
    assert page.status_code == 200 and page.text == "<script>alert(1)</script>"
    await api.result(run_id)

    async with _restarted(api) as client:
        retry = await client.post("/webhooks/wh-kept", json=body, headers=key)
        assert (retry.status_code, retry.json()) == (200, {"ok": True})
        retry = await client.post("/webhooks/wh-kept-run", json={}, headers=key)
        assert (retry.status_code, retry.text) == (200, page.text)
        assert retry.headers["content-security-policy"] == "sandbox"
        other = await client.post("/webhooks/wh-kept", json=body, headers={"X-Other": "evt-1"})
        assert other.status_code == 404
        fresh = await client.post("/webhooks/wh-kept", json=body, headers={**key, "X": "y"})
        assert fresh.status_code == 200  # the key's header is found among others
        unknown = await client.post(
            "/webhooks/wh-kept", json=body, headers={"Idempotency-Key": "2"}
        )
        assert unknown.status_code == 404

    later = MockClock(time.time() + 24 * 3600 + 60, autojump=False)  # the documented day
    async with _restarted(api, later) as client:
        late = await client.post("/webhooks/wh-kept", json=body, headers=key)
        assert late.status_code == 404


async def test_a_delivery_the_store_cannot_keep_is_answered_and_said_in_one_line(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Keeping a delivery for late retries is not the delivery: a store that fails it costs
    the late retry its reply (404), never this one's."""
    from wf._exceptions import StoreError

    async def refuse(delivery: Any) -> None:
        raise StoreError("the disk is full")

    monkeypatch.setattr(api.engine.store, "save_delivery", refuse)
    token = "wh-unkept-4f9c2a7e1b"  # long, as a generated one: all that authorises its URL
    run_id = await api.start("static_webhook", token)
    await _webhook_ready(api, run_id)
    key = {"Idempotency-Key": "evt-1"}
    body = {"approved": True, "by": "stripe"}
    with caplog.at_level("WARNING", logger="wf.serve"):
        first = await api.client.post(f"/webhooks/{token}", json=body, headers=key)
    assert (first.status_code, first.json()) == (200, {"ok": True})
    said = [r for r in caplog.records if "could not be kept" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None and "disk is full" in said[0].getMessage()
    assert token not in said[0].getMessage() and token[:8] in said[0].getMessage()
    await api.result(run_id)
    retry = await api.client.post(f"/webhooks/{token}", json=body, headers=key)
    assert retry.status_code == 404


async def test_a_post_to_an_unknown_token_reads_few_kept_deliveries(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone may post to any URL: a request carrying many headers to an unknown token makes
    the server try a bounded few of them as the key of a retry, whatever it carries — and a
    retry's key among its first headers still gets the first reply."""
    from wf.serve._webhooks import RETRY_HEADERS

    run_id = await api.start("static_webhook", "wh-many")
    await _webhook_ready(api, run_id)
    body = {"approved": True, "by": "stripe"}
    key = {"Idempotency-Key": "evt-9"}
    assert (await api.client.post("/webhooks/wh-many", json=body, headers=key)).status_code == 200
    await api.result(run_id)
    asked: list[int] = []
    get_deliveries = api.engine.store.get_deliveries

    async def counted(ids: Any) -> Any:
        asked.append(len(ids))
        return await get_deliveries(ids)

    monkeypatch.setattr(api.engine.store, "get_deliveries", counted)
    many = {f"x-{n}": str(n) for n in range(1500)}
    assert (await api.client.post("/webhooks/nobody", headers=many)).status_code == 404
    assert asked and max(asked) <= RETRY_HEADERS
    others = {f"x-{n}": str(n) for n in range(RETRY_HEADERS - 1)}
    retry = await api.client.post("/webhooks/wh-many", json=body, headers={**others, **key})
    assert (retry.status_code, retry.json()) == (200, {"ok": True})


async def test_a_lone_surrogate_in_a_payload_shows_as_text_not_as_a_codec_tag(api: Api) -> None:
    """Stored under the codec's ``str`` tag (no JSON store takes it raw); the result, the read
    model and the run page show the text (as a ``\\ud800`` escape), never the tag."""
    from wf import admin

    run_id = await api.start("static_webhook", "wh-surrogate")
    await _webhook_ready(api, run_id)
    sent = b'{"approved": true, "by": "x\\ud800y"}'
    reply = await api.client.post("/webhooks/wh-surrogate", content=sent)
    assert reply.status_code == 200, reply.text
    result = await api.result(run_id)
    assert result["output"] == {"by": "x\ud800y"}
    detail = await admin.run_detail(api.engine.store, run_id)
    assert detail.run.output == {"by": "x\ud800y"}
    assert "'$t': 'str'" not in str(detail.events)
    assert detail.events[-1]["output"] == {"by": "x\ud800y"}
    page = (await api.client.get(f"/runs/{run_id}")).text
    assert "x\\ud800y" in page and "&quot;str&quot;" not in page and '"str"' not in page
