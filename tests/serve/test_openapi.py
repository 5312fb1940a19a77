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


def _fits(spec: dict[str, Any], name: str, value: Any) -> None:
    schema = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    jsonschema.Draft202012Validator(schema).validate(value)


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
