"""Names and due times over HTTP, on the local store and on PostgreSQL: a bad one is a 400
where it is given (a body, a URL), one computed in a run fails that run once, and a run whose
stored due time is past year 9999 (written by an older wf) is listed and shown, never a 500."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from tests.serve.conftest import Api
from wf import encode
from wf.store import RunRecord
from wf.store._ids import new_run_id
from wf.store._limits import LATEST

ADDER = "tests.serve.flows:adder"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param('{"id": "\\ud800"}', id="id-surrogate"),
        pytest.param('{"id": "order-1\\n"}', id="id-newline"),
        pytest.param('{"options": {"group": "\\ud800"}}', id="group-surrogate"),
        pytest.param('{"options": {"group": "a\\u0000b"}}', id="group-nul"),
        pytest.param('{"options": {"group": ""}}', id="group-empty"),
        pytest.param(json.dumps({"options": {"group": "g" * 513}}), id="group-over-long"),
        pytest.param('{"options": {"delay": 1e308}}', id="delay-1e308"),
        pytest.param('{"options": {"delay": Infinity}}', id="delay-infinity"),
        pytest.param('{"options": {"delay": NaN}}', id="delay-nan"),
        pytest.param('{"options": {"delay": 315569520000000}}', id="delay-past-9999"),
        pytest.param('{"options": {"at": "9999-12-31T23:59:59-14:00"}}', id="at-past-9999"),
    ],
)
async def test_a_bad_name_or_due_time_in_a_start_is_400(api: Api, body: str) -> None:
    fields = json.loads(body)
    fields.update(target=ADDER, input=[1, 2])
    raw = json.dumps(fields, allow_nan=True)
    response = await api.client.post(
        "/api/v1/runs", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"]
    assert (await api.client.get("/api/v1/runs")).json()["runs"] == []


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\x1bb", id="escape"),
        pytest.param("t" * 513, id="over-long"),
        pytest.param("a\x7fb", id="del"),
    ],
)
async def test_a_bad_token_or_stream_name_in_a_url_is_400(api: Api, bad: str) -> None:
    quoted = urllib.parse.quote(bad, safe="")
    run_id = await api.start("adder", [1, 2])
    assert (await api.result(run_id))["output"] == 3
    for method, path in (
        ("POST", f"/api/v1/hooks/{quoted}"),
        ("POST", f"/webhooks/{quoted}"),
        ("GET", f"/api/v1/runs/{run_id}/streams/{quoted}"),
    ):
        response = await api.client.request(method, path, json={})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["type"] == "bad_request"


@pytest.mark.parametrize("bad", ["\ud800", "a\x00b", "w" * 600])
async def test_a_bad_webhook_token_computed_in_a_run_fails_it_once(api: Api, bad: str) -> None:
    raw = json.dumps({"target": "tests.serve.flows:static_webhook", "input": [bad]})  # ASCII
    started = await api.client.post(
        "/api/v1/runs", content=raw, headers={"content-type": "application/json"}
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    result = await api.result(run_id)
    assert result["status"] == "failed"
    assert result["error"]["type"].endswith("UsageError"), result
    assert "hook token" in result["error"]["message"]
    detail = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    assert detail["attempt"] == 1


async def test_a_stored_due_time_past_9999_is_listed_and_shown(api: Api) -> None:
    record = RunRecord(
        id=new_run_id(),
        workflow=ADDER,
        target=ADDER,
        input=encode({"args": [1, 2], "kwargs": {}}, where="input"),
        wake_at=LATEST + 30 * 86400,
    )
    assert await api.engine.store.create_run(record)  # as an older wf wrote it
    listing = await api.client.get("/api/v1/runs")
    assert listing.status_code == 200, listing.text
    assert [r["id"] for r in listing.json()["runs"]] == [record.id]
    detail = await api.client.get(f"/api/v1/runs/{record.id}")
    assert detail.status_code == 200, detail.text
    assert detail.json()["wake_at"] == record.wake_at
    assert (await api.client.get("/")).status_code == 200
    page = await api.client.get(f"/runs/{record.id}")
    assert page.status_code == 200, page.text
    assert "after 9999-12-31" in page.text


async def test_a_sleep_past_9999_fails_its_run_saying_so(api: Api) -> None:
    run_id = await api.start("sleeper", [1e300])
    result = await api.result(run_id)
    assert result["status"] == "failed"
    assert result["error"]["type"].endswith("UsageError"), result
    assert "9999-12-31" in result["error"]["message"]
    page = await api.client.get(f"/runs/{run_id}")
    assert page.status_code == 200, page.text
    assert "9999-12-31" in page.text


async def test_a_past_at_is_due_now(api: Api) -> None:
    run_id = await api.start("adder", [1, 2], options={"at": "2001-01-01T00:00:00+00:00"})
    assert (await api.result(run_id))["output"] == 3
