"""How a webhook reads a request: an empty body, a method it does not take."""

from __future__ import annotations

from tests.serve.conftest import Api


async def test_a_method_a_webhook_does_not_take_is_405_naming_its_own_method(api: Api) -> None:
    run_id = await api.start("manual_webhook", "wh-opts")  # a PUT webhook
    await api.until(run_id, lambda d: d["hooks"])
    for method in ("OPTIONS", "POST", "HEAD", "DELETE"):
        answer = await api.client.request(method, "/webhooks/wh-opts")
        assert answer.status_code == 405, method
        assert answer.headers["allow"] == "PUT", method
    unknown = await api.client.options("/webhooks/nobody")
    assert unknown.status_code == 404


async def test_an_empty_body_is_no_payload_and_must_fit_the_type(api: Api) -> None:
    run_id = await api.start("static_webhook", "wh-empty")
    await api.until(run_id, lambda d: d["hooks"])
    empty = await api.client.post("/webhooks/wh-empty", content=b"")
    assert empty.status_code == 400
    message = empty.json()["error"]["message"]
    assert message.startswith("the request has no body (no payload, None): payload of hook")
    not_json = await api.client.post("/webhooks/wh-empty", content=b"{nope")
    assert not_json.status_code == 400
    assert "not valid JSON" in not_json.json()["error"]["message"]
    reply = await api.client.post("/webhooks/wh-empty", json={"approved": True, "by": "x"})
    assert reply.status_code == 200  # the refused requests delivered nothing
    assert (await api.result(run_id))["output"] == {"by": "x"}
