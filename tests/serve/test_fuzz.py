"""Every HTTP endpoint against hostile bodies, paths and parameters (hypothesis).

Each answer is a 2xx or a 4xx with the API's one-line error, never a 500; and a run that a 2xx
created is driven to where it waits or ends, never left due (retried for ever) behind.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

BASE = "http://127.0.0.1:8420"
FLOWS = ["adder", "failing", "sleeper", "approval", "static_webhook", "talker", "nothing"]
TARGETS = [f"tests.serve.flows:{name}" for name in FLOWS] + [
    "os:system",
    "json:loads",
    "/tmp/evil.py:x",
    "tests.serve.flows",
    "tests.serve.flows:pid",
]
HUGE = [10**400, -(10**400), 1e308, -1e308, 2**63, -(2**63) - 1, 0.1]
FAR = ["9999-12-31T23:59:59-14:00", "10000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "1e308"]

# Text that JSON carries as \ud800-style escapes (lone surrogates), NUL, controls, and long runs.
text = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec=None, categories=["Cs", "Cc"]), min_size=1, max_size=8),
    st.sampled_from(["\ud800", "a\x00b", "..", "/", "%2F", " ", "x" * 5000, *FAR]),
)
numbers = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.sampled_from(HUGE), st.integers(-5, 5)
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
options = st.dictionaries(
    st.sampled_from(["delay", "at", "priority", "group", "max_attempts", "unique", "queue", "x"]),
    json_values,
    max_size=3,
)
start_bodies = st.fixed_dictionaries(
    {},
    optional={
        "target": st.one_of(st.sampled_from(TARGETS), text),
        "workflow": st.one_of(st.sampled_from(TARGETS), text),
        "input": json_values,
        "args": json_values,
        "kwargs": json_values,
        "id": st.one_of(text, numbers),
        "options": st.one_of(options, json_values),
    },
)


def list_of(value: Any) -> list[Any]:
    return [value]


# Bodies that pass the shape checks, so that runs are created with hostile values inside.
well_formed = st.fixed_dictionaries(
    {
        "target": st.sampled_from(TARGETS[:6]),
        "input": st.one_of(
            st.tuples(numbers, numbers).map(list), numbers.map(lambda n: [n]), text.map(list_of)
        ),
    },
    optional={"id": text, "options": options},
)
raw_bodies = st.one_of(
    well_formed.map(json.dumps),
    start_bodies.map(json.dumps),
    json_values.map(json.dumps),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
    st.sampled_from(["", "{", '{"target": "\\ud800"}', '{"id": "\\udfff"}', "[" * 5000, "1e999"]),
)
# Waits and follows never block long: a live run would hold a long poll (up to 300 s).
waits = st.sampled_from(["", "0", "-1", "nan", "inf", "1e308", "x", "0.01", "301", "1" * 400])
follows = st.sampled_from(["0", "false", "no", "maybe", "\ud800"])
ints = st.one_of(st.sampled_from(["", "-1", "0", "1e3", "9" * 400, "x"]), st.integers().map(str))


def _quote(value: str) -> str:
    return urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="")


def _query(**params: str) -> str:
    """A query string that carries any text (lone surrogates as their UTF-8-like bytes)."""
    return "?" + "&".join(f"{name}={_quote(value)}" for name, value in params.items())


class Server:
    """The app (driving runs) over a local store, in one event loop across examples."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.created: set[str] = set()
        self.runner = asyncio.Runner()

    async def open(self) -> None:
        from wf import Engine
        from wf.serve import create_app
        from wf.store.local import LocalStore

        self.store = LocalStore(self.tmp_path / ".workflows")
        self.engine = Engine(self.store)
        self.app = create_app(self.engine)
        self.lifespan = self.app.router.lifespan_context(self.app)
        await self.lifespan.__aenter__()
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(transport=transport, base_url=BASE, timeout=30)
        done = await self.client.post(
            "/api/v1/runs", json={"target": "tests.serve.flows:adder", "input": [1, 2]}
        )
        self.done = done.json()["id"]
        await self.client.get(f"/api/v1/runs/{self.done}/result", params={"wait": 20})

    async def close(self) -> None:
        await self.client.aclose()
        await self.lifespan.__aexit__(None, None, None)
        await self.store.close()

    async def ask(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = await self.client.request(method, path, **kwargs)
        assert response.status_code < 500, ascii((method, path, kwargs, response.text))
        if 300 <= response.status_code < 400:  # the router's "/x/" -> "/x" (a '..' or an
            assert response.status_code == 307, path  # empty id makes such a path), no other
            assert "location" in response.headers, path
            return response
        if response.status_code >= 400 and not response.request.url.path.startswith(
            ("/api/", "/webhooks/")
        ):  # a path that '..' took out of the API (the client resolves it): the UI's page
            assert response.headers["content-type"].startswith("text/html"), path
            assert "Traceback" not in response.text, path
        elif response.status_code >= 400:
            message = response.json()["error"]["message"]
            assert "\n" not in message and "Traceback" not in message, message
        elif method == "POST" and path == "/api/v1/runs":
            self.created.add(response.json()["id"])
        return response

    async def settled(self, timeout: float = 30) -> None:
        """Every run a 2xx created ends or waits (a hook, a sleep, a later start); none is
        left due, driven again and again."""
        from wf.store import RunStatus

        deadline = time.monotonic() + timeout
        for run_id in sorted(self.created):
            while True:
                record = await self.store.get_run(run_id)
                waits = record.status is RunStatus.SUSPENDED or (
                    record.status is RunStatus.PENDING
                    and record.wake_at is not None
                    and record.wake_at > time.time() + 1
                )
                if record.status.is_terminal or waits:
                    # ascii(): a record may hold lone surrogates, which pytest-xdist cannot
                    # send back to its controller (a crash instead of the failure's report)
                    assert record.resumes <= 1, ascii(record)
                    break
                assert time.monotonic() < deadline, f"run left due: {record!a}"
                await self.store.wait_for_run(run_id, 0.2)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    made = Server(tmp_path)
    with made.runner:
        made.runner.run(made.open())
        try:
            yield made
            made.runner.run(made.settled())
        finally:
            made.runner.run(made.close())


FUZZ = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _hostile(flow: str, input_: Any, **body: Any) -> Any:
    """An explicit example: a run of ``flow`` whose input or options carry a hostile value."""
    text = json.dumps({"target": f"tests.serve.flows:{flow}", "input": input_, **body})
    return example(body=text, content_type="application/json")


@pytest.mark.timeout(240)
def test_starting_runs_from_any_body(server: Server) -> None:
    @FUZZ
    @given(body=raw_bodies, content_type=st.sampled_from(["application/json", "text/plain"]))
    @_hostile("adder", [1, 2], options={"delay": 1e308})
    @_hostile("adder", [1, 2], options={"delay": 10**400})
    @_hostile("adder", [1, 2], options={"group": "\ud800"})
    @_hostile("adder", [10**400, 1])
    @_hostile("sleeper", [1e308])
    @_hostile("sleeper", [1e16])
    @_hostile("approval", ["\ud800"])
    @_hostile("static_webhook", ["a\x00b"])
    def one(body: str, content_type: str) -> None:
        data = body.encode("utf-8", "surrogatepass")
        headers = {"content-type": content_type}
        server.runner.run(server.ask("POST", "/api/v1/runs", content=data, headers=headers))

    one()
    assert server.created, "no run was started: the bodies never got past the checks"


@pytest.mark.timeout(240)
def test_reading_and_controlling_runs_by_any_path(server: Server) -> None:
    ids = st.one_of(text, st.just(server.done), st.just("wrun_00000000000000000000000000"))

    @FUZZ
    @given(
        run_id=ids,
        action=st.sampled_from(["", "/result", "/cancel", "/wake", "/retry", "/logs", "/events"]),
        wait=waits,
        number=ints,
        flag=follows,
        name=text,
    )
    def one(run_id: str, action: str, wait: str, number: str, flag: str, name: str) -> None:
        path = f"/api/v1/runs/{_quote(run_id)}{action}"
        if action in ("/cancel", "/wake", "/retry"):
            request = server.ask("POST", path + _query(wait=flag, children=flag))
        elif action == "/events":
            if not run_id or run_id == server.done:
                return  # a live event stream (of one run, or of all) never ends by itself
            request = server.ask("GET", "/api/v1/events" + _query(run=run_id))
        else:
            query = _query(wait=wait, start=number, limit=number, step=name)
            request = server.ask("GET", path + query)
        server.runner.run(request)
        stream = f"/api/v1/runs/{_quote(run_id)}/streams/{_quote(name)}"
        server.runner.run(server.ask("GET", stream + _query(start=number, follow=flag)))

    one()


@pytest.mark.timeout(240)
def test_listing_runs_and_hooks_with_any_query(server: Server) -> None:
    @FUZZ
    @given(
        status=st.one_of(text, st.sampled_from(["failed", "completed,pending", ","])),
        value=text,
        number=ints,
    )
    def one(status: str, value: str, number: str) -> None:
        query = _query(
            status=status, workflow=value, limit=number, before=value, parent=value, search=value
        )
        server.runner.run(server.ask("GET", "/api/v1/runs" + query))
        server.runner.run(server.ask("GET", "/api/v1/hooks" + _query(run=value)))

    one()


@pytest.mark.timeout(240)
def test_resuming_hooks_and_webhooks_with_any_token_and_body(server: Server) -> None:
    @FUZZ
    @given(token=text, body=raw_bodies, method=st.sampled_from(["POST", "PUT", "GET"]))
    def one(token: str, body: str, method: str) -> None:
        data = body.encode("utf-8", "surrogatepass")
        server.runner.run(server.ask("POST", f"/api/v1/hooks/{_quote(token)}", content=data))
        server.runner.run(server.ask(method, f"/webhooks/{_quote(token)}", content=data))

    one()
