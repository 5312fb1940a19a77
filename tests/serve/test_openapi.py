"""The OpenAPI document describes the API as it is: every route, and responses that fit."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest

from tests.serve.conftest import Api


def _routes() -> set[tuple[str, str]]:
    from wf.serve._api import routes

    found = set()
    for route in routes():
        path = re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", route.path)  # type: ignore[attr-defined]
        for method in route.methods or ():  # type: ignore[attr-defined]
            if method != "HEAD":
                found.add((path, method.lower()))
    return found


def test_every_route_is_described_and_nothing_else() -> None:
    from wf.serve._openapi import document

    spec = document()
    described = {(path, method) for path, item in spec["paths"].items() for method in item}
    assert described == _routes()
    jsonschema.Draft202012Validator.check_schema(spec["components"]["schemas"]["RunDetail"])
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            assert operation["summary"], (path, method)
            assert "401" in operation["responses"], (path, method)
            assert "421" in operation["responses"], (path, method)


def _closed(node: Any) -> Any:
    """The schema with no undescribed key allowed: every object that names its properties
    forbids others, so an answer that grew a key its type does not name fails."""
    if isinstance(node, dict):
        closed = {key: _closed(value) for key, value in node.items()}
        if "properties" in node and "additionalProperties" not in node:
            closed["additionalProperties"] = False
        return closed
    if isinstance(node, list):
        return [_closed(value) for value in node]
    return node


def _fits(spec: dict[str, Any], name: str, value: Any) -> None:
    schema = {"$ref": f"#/components/schemas/{name}", "components": _closed(spec["components"])}
    jsonschema.Draft202012Validator(schema).validate(value)


def _answers(spec: dict[str, Any], response: Any, path: str, method: str = "get") -> None:
    """The response fits what the document says ``method path`` answers with its status."""
    documented = spec["paths"][path][method]["responses"]
    assert str(response.status_code) in documented, (path, response.status_code)
    content = documented[str(response.status_code)].get("content", {})
    schema = content["application/json"]["schema"]
    closed = {**_closed(schema), "components": _closed(spec["components"])}
    jsonschema.Draft202012Validator(closed).validate(response.json())


@pytest.mark.parametrize("store_kind", ["local"], indirect=True)
async def test_responses_fit_the_documented_schemas(api: Api) -> None:
    spec = (await api.client.get("/api/v1/openapi.json")).json()
    run_id = await api.start("failing", "no")
    _fits(spec, "Result", await api.result(run_id))
    _fits(spec, "RunDetail", (await api.client.get(f"/api/v1/runs/{run_id}")).json())
    _fits(spec, "RunPage", (await api.client.get("/api/v1/runs")).json())
    _fits(spec, "Control", (await api.client.post(f"/api/v1/runs/{run_id}/wake")).json())
    retried = await api.client.post(f"/api/v1/runs/{run_id}/retry")
    _fits(spec, "Started", retried.json())
    _fits(spec, "Error", (await api.client.get("/api/v1/runs/x!")).json())
    talked = await api.start("talker", "spec")
    await api.result(talked)
    logs = (await api.client.get(f"/api/v1/runs/{talked}/logs", params={"limit": 2})).json()
    assert len(logs["entries"]) == 2
    _fits(spec, "LogPage", logs)
    documented = spec["paths"]["/runs/{id}/result"]["get"]["responses"]
    assert {"200", "202", "400", "404"} <= set(documented)


@pytest.mark.parametrize("store_kind", ["local"], indirect=True)
async def test_every_answer_fits_with_no_key_undescribed(api: Api) -> None:
    spec = (await api.client.get("/api/v1/openapi.json")).json()
    get, post = api.client.get, api.client.post
    done = await api.start("adder", [1, 2])
    failed = await api.start("failing", ["no"])
    waiting = await api.start("approval", ["spec"])
    parent = await api.start("parent", [2])
    streamed = await api.start("streaming", [2])
    talked = await api.start("talker", ["spec"])
    sleeping = await api.start("sleeper", [3600])
    for run_id in (done, failed, streamed, talked):
        _answers(
            spec,
            await get(f"/api/v1/runs/{run_id}/result", params={"wait": 20}),
            "/runs/{id}/result",
        )
    # The parent waits on children that sleep an hour: its result is a wait that runs out
    # (202), which a short wait shows as well as 20 s of it did.
    await api.until(parent, lambda d: d["status"] == "suspended" and len(d["children"]) == 2)
    unfinished = await get(f"/api/v1/runs/{parent}/result", params={"wait": 0.2})
    assert unfinished.status_code == 202, unfinished.text
    _answers(spec, unfinished, "/runs/{id}/result")
    await api.until(waiting, lambda d: d["status"] == "suspended" and d["hooks"])
    await api.until(sleeping, lambda d: d["status"] == "suspended")
    _answers(spec, await get(f"/api/v1/runs/{sleeping}/result"), "/runs/{id}/result")

    for run_id in (done, failed, waiting, parent, streamed, talked, sleeping):
        detail = await get(f"/api/v1/runs/{run_id}")
        _answers(spec, detail, "/runs/{id}")
        assert detail.json()["why"]["reasons"], run_id
    child = (await get(f"/api/v1/runs/{parent}")).json()["children"][0]["id"]
    _answers(spec, await get(f"/api/v1/runs/{child}"), "/runs/{id}")
    for params in ({}, {"status": "failed"}, {"search": "add"}, {"parent": parent}, {"limit": 1}):
        _answers(spec, await get("/api/v1/runs", params=params), "/runs")
    _answers(spec, await get(f"/api/v1/runs/{talked}/logs"), "/runs/{id}/logs")
    _answers(spec, await get(f"/api/v1/runs/{talked}/events"), "/runs/{id}/events")
    paged = await get(f"/api/v1/runs/{talked}/events", params={"limit": 0})
    _answers(spec, paged, "/runs/{id}/events")
    bare = await get(f"/api/v1/runs/{talked}", params={"events": "false"})
    _answers(spec, bare, "/runs/{id}")
    _answers(spec, await get("/api/v1/hooks"), "/hooks")
    _answers(spec, await get("/api/v1/hooks", params={"run": waiting}), "/hooks")
    _answers(spec, await get("/api/v1/store"), "/store")
    resumed = await post("/api/v1/hooks/approve:spec", json={"approved": True, "by": "spec"})
    _answers(spec, resumed, "/hooks/{token}", "post")
    _answers(spec, await post("/api/v1/hooks/approve:spec", json={}), "/hooks/{token}", "post")

    _answers(spec, await post(f"/api/v1/runs/{sleeping}/wake"), "/runs/{id}/wake", "post")
    again = await api.start("sleeper", [3600])
    await api.until(again, lambda d: d["status"] == "suspended")
    cancelled = await post(f"/api/v1/runs/{again}/cancel", params={"wait": "true"})
    _answers(spec, cancelled, "/runs/{id}/cancel", "post")
    tree = await post(f"/api/v1/runs/{parent}/cancel", params={"children": "true"})
    assert "runs" in tree.json()
    _answers(spec, tree, "/runs/{id}/cancel", "post")
    _answers(spec, await post(f"/api/v1/runs/{failed}/retry"), "/runs/{id}/retry", "post")
    _answers(spec, await post(f"/api/v1/runs/{done}/retry"), "/runs/{id}/retry", "post")

    body = {"target": "tests.serve.flows:adder", "input": [2, 2], "id": "wrun_spec"}
    _answers(spec, await post("/api/v1/runs", json=body), "/runs", "post")
    _answers(spec, await post("/api/v1/runs", json=body), "/runs", "post")
    conflict = await post("/api/v1/runs", json={**body, "input": [3, 3]})
    assert conflict.status_code == 409
    _answers(spec, conflict, "/runs", "post")
    _answers(spec, await post("/api/v1/runs", json={"nope": 1}), "/runs", "post")
    missing = "wrun_00000000000000000000000000"
    _answers(spec, await get(f"/api/v1/runs/{missing}"), "/runs/{id}")
    _answers(spec, await get("/api/v1/runs", params={"limit": 0}), "/runs")
    nope = await get(f"/api/v1/runs/{streamed}/streams/nope")
    assert nope.json()["error"]["streams"] == ["default"]
    _answers(spec, nope, "/runs/{id}/streams/{name}")
    _answers(spec, await get("/api/v1/openapi.json"), "/openapi.json")

    put, delete = api.client.put, api.client.delete
    schedule = {"target": "tests.serve.flows:adder", "cron": "0 0 1 1 *", "input": [1, 2]}
    _answers(spec, await put("/api/v1/schedules/yearly", json=schedule), "/schedules/{id}", "put")
    bad = await put("/api/v1/schedules/yearly", json={**schedule, "cron": "nope"})
    assert bad.status_code == 400
    _answers(spec, bad, "/schedules/{id}", "put")
    _answers(spec, await get("/api/v1/schedules"), "/schedules")
    _answers(spec, await delete("/api/v1/schedules/yearly"), "/schedules/{id}", "delete")
    _answers(spec, await get("/api/v1/store/stats"), "/store/stats")
    _answers(spec, await get("/api/v1/store/verify"), "/store/verify")
    _answers(spec, await get("/api/v1/deployments"), "/deployments")
    dry = await post("/api/v1/store/gc", json={"older_than": "0s", "dry_run": True})
    assert done in dry.json()["runs"]
    _answers(spec, dry, "/store/gc", "post")
    _answers(spec, await post("/api/v1/store/gc", json={"nope": 1}), "/store/gc", "post")
    swept = await post("/api/v1/store/gc", json={"older_than": "0s", "statuses": ["completed"]})
    _answers(spec, swept, "/store/gc", "post")
    expired = await get(f"/api/v1/runs/{done}")
    assert expired.json()["error"]["deleted_at"] > 0
    _answers(spec, expired, "/runs/{id}")


def test_request_bodies_are_described_by_the_functions_that_take_them() -> None:
    """``PUT /schedules/{id}`` takes ``wf.schedule``'s keywords, ``POST /store/gc``
    ``Admin.gc``'s: the document and the server read the same signatures."""
    import inspect

    from wf.admin import Admin
    from wf.engine._schedules import register
    from wf.serve._openapi import document

    def keywords(fn: Any) -> set[str]:
        # ``on_progress`` takes a callback in the caller's process: never a request's key.
        found = inspect.signature(fn).parameters.values()
        return {p.name for p in found if p.kind is p.KEYWORD_ONLY} - {"on_progress"}

    found = document()["components"]["schemas"]
    assert set(found["ScheduleRequest"]["properties"]) == keywords(register)
    assert set(found["ScheduleRequest"]["required"]) == {"target", "cron"}
    assert set(found["GcRequest"]["properties"]) == keywords(Admin.gc)


def test_the_listing_takes_every_filter_of_the_admin_api() -> None:
    """A filter added to ``wf.admin.Admin.list_runs`` is a documented query parameter, and
    the local backend's function takes the same ones."""
    import inspect

    from wf.admin import Admin, list_runs
    from wf.serve._openapi import QUERY_NAMES, document

    def keywords(fn: Any) -> set[str]:
        found = inspect.signature(fn).parameters.values()
        return {p.name for p in found if p.kind is p.KEYWORD_ONLY}

    assert keywords(Admin.list_runs) == keywords(list_runs)
    documented = {p["name"] for p in document()["paths"]["/runs"]["get"]["parameters"]}
    assert documented == {QUERY_NAMES.get(name, name) for name in keywords(Admin.list_runs)}


def test_a_field_added_to_an_admin_type_is_in_the_document() -> None:
    """The schemas come from the types: a dataclass's fields are its schema's properties."""
    import dataclasses

    from wf.admin import Explanation, Operation, Reason
    from wf.serve._derive import schemas
    from wf.store import RunRecord

    @dataclasses.dataclass
    class Grown(Operation):
        weight: int = 0
        """How heavy the operation is."""

    found = schemas({"Grown": Grown, "RunRecord": RunRecord, "Explanation": Explanation})
    assert found["Grown"]["properties"]["weight"] == {
        "type": "integer",
        "description": "How heavy the operation is.",
    }
    assert "weight" in found["Grown"]["required"]
    assert "spans" not in found["Grown"]["required"]  # given only where asked for
    for cls in (RunRecord, Explanation):
        fields = {f.name for f in dataclasses.fields(cls)}
        assert set(found[cls.__name__]["properties"]) == fields
    reason = found["Reason"]
    assert reason["required"] == ["kind", "tone"]
    assert reason["properties"]["kind"]["enum"] == list(typing_args(Reason))


def typing_args(cls: Any) -> tuple[str, ...]:
    """The kinds a ``Reason`` may be (``wf.admin.ReasonKind``)."""
    import typing

    from wf.admin import ReasonKind

    assert typing.get_type_hints(cls)["kind"] == ReasonKind
    return typing.get_args(ReasonKind)


def test_the_document_is_valid_openapi() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    from wf.serve._openapi import document

    validator.validate(document())


def test_a_damaged_item_fits_the_fault_schema_with_or_without_shown_as() -> None:
    """``Fault.to_json`` leaves ``shown_as`` out unless set: the document may not require it,
    or every ``damaged`` item of a listing would break a client generated from it."""
    from wf.serve._openapi import document
    from wf.store import Fault

    spec = document()
    _fits(spec, "Fault", Fault("run", "wrun_x", "/p", "bad").to_json())
    shown = Fault("stream", "wrun_x/s-1", "/p/s-1.name", "not UTF-8", shown_as="default")
    _fits(spec, "Fault", shown.to_json())


@pytest.mark.parametrize("store_kind", ["local"], indirect=True)
async def test_the_stream_answers_wf_headers_are_described(api: Api) -> None:
    """A framed read from the end answers ``WF-Stream-Framing`` and ``WF-Stream-Start``: the
    document names both on the stream's 200, and ``start`` says the second."""
    spec = (await api.client.get("/api/v1/openapi.json")).json()
    run_id = await api.start("streaming", [2])
    await api.result(run_id)
    params = {"start": -1, "follow": "false", "framed": "true"}
    answer = await api.client.get(f"/api/v1/runs/{run_id}/streams/default", params=params)
    sent = {name.lower() for name in answer.headers if name.lower().startswith("wf-stream-")}
    assert sent == {"wf-stream-framing", "wf-stream-start"}
    stream = spec["paths"]["/runs/{id}/streams/{name}"]["get"]
    described = {name.lower() for name in stream["responses"]["200"].get("headers", {})}
    assert sent <= described
    (start,) = [p for p in stream["parameters"] if p["name"] == "start"]
    assert "WF-Stream-Start" in start["description"]
