"""The JSON API through httpx on the ASGI app, on the local store and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.conftest import Api

MISSING = "wrun_00000000000000000000000000"


async def test_start_list_read_and_long_poll_a_run(api: Api) -> None:
    run_id = await api.start("adder", [2, 3])
    assert (await api.result(run_id)) == {"id": run_id, "status": "completed", "output": 5}
    detail = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    assert detail["status"] == "completed"
    assert detail["why"]["reasons"][0]["kind"] == "completed"
    [step] = detail["steps"]
    assert (step["name"], step["status"], step["spans"][0]["status"]) == (
        "add", "completed", "completed",
    )  # fmt: skip
    assert detail["streams"] == [] and detail["children"] == [] and detail["hooks"] == []
    page = (await api.client.get("/api/v1/runs", params={"limit": 1})).json()
    assert [r["id"] for r in page["runs"]] == [run_id]
    by_status = await api.client.get("/api/v1/runs", params={"status": "failed"})
    assert by_status.json()["runs"] == []
    found = await api.client.get("/api/v1/runs", params={"search": "adder"})
    assert [r["id"] for r in found.json()["runs"]] == [run_id]


async def test_paging_by_before(api: Api) -> None:
    ids = [await api.start("adder", {"a": i, "b": 0}) for i in range(3)]
    first = (await api.client.get("/api/v1/runs", params={"limit": 2})).json()
    assert [r["id"] for r in first["runs"]] == ids[:0:-1]
    rest = await api.client.get("/api/v1/runs", params={"limit": 2, "before": first["next_before"]})
    assert [r["id"] for r in rest.json()["runs"]] == [ids[0]]
    assert rest.json()["next_before"] is None
    # A cursor that names no run is a 400 saying so, as wf.admin and `wf runs` say it: an
    # empty page would read as an empty store.
    for before in ("never-created", MISSING):
        for query in ({}, {"search": "adder"}):
            unknown = await api.client.get("/api/v1/runs", params={"before": before, **query})
            assert unknown.status_code == 400, query
            assert unknown.json()["error"] == {
                "type": "bad_request",
                "message": f"before: no run with id {before!r}",
            }


async def test_runs_are_listed_newest_created_first_whatever_their_ids(api: Api) -> None:
    ids = [await api.start("adder", {"a": i, "b": 0}, id=f"p{3 - i}") for i in range(4)]
    assert ids == ["p3", "p2", "p1", "p0"]  # created against their sort order
    first = (await api.client.get("/api/v1/runs", params={"limit": 3})).json()
    assert [r["id"] for r in first["runs"]] == ["p0", "p1", "p2"]
    rest = await api.client.get("/api/v1/runs", params={"limit": 3, "before": first["next_before"]})
    assert [r["id"] for r in rest.json()["runs"]] == ["p3"]


async def test_start_by_name_with_args_and_an_id_is_idempotent(api: Api) -> None:
    body = {"workflow": "tests.serve.flows:adder", "args": [1], "kwargs": {"b": 1}, "id": "sum-1"}
    first = await api.client.post("/api/v1/runs", json=body)
    assert (first.status_code, first.json()["id"]) == (201, "sum-1")
    again = await api.client.post("/api/v1/runs", json=body)
    assert again.status_code == 200
    assert (await api.result("sum-1"))["output"] == 2
    other = await api.client.post(
        "/api/v1/runs", json={"workflow": "tests.serve.flows:failing", "input": "x", "id": "sum-1"}
    )
    assert other.status_code == 409
    assert other.json()["error"]["type"] == "conflict"


async def test_result_is_202_while_the_run_goes_on_and_wake_ends_its_sleep(api: Api) -> None:
    run_id = await api.start("sleeper", 3600)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    pending = await api.client.get(f"/api/v1/runs/{run_id}/result", params={"wait": 0.2})
    assert (pending.status_code, pending.json()) == (202, {"id": run_id, "status": "suspended"})
    detail = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    assert [r["kind"] for r in detail["why"]["reasons"]] == ["sleeping", "wakes"]
    woken = await api.client.post(f"/api/v1/runs/{run_id}/wake")
    assert woken.json()["sent"] is True
    assert (await api.result(run_id))["output"] == "rested"
    ended = await api.client.post(f"/api/v1/runs/{run_id}/wake")
    assert ended.json() == {"id": run_id, "sent": False, "status": "completed"}


async def test_a_failed_run_gives_its_error_and_can_be_retried(api: Api) -> None:
    run_id = await api.start("failing", "boom")
    result = await api.result(run_id)
    assert result["status"] == "failed"
    error = result["error"]  # the recorded error whole, as a local reader gets it
    assert (error["type"], error["message"], error["module"]) == ("ValueError", "boom", "builtins")
    assert "Traceback" in error["traceback"]
    retried = await api.client.post(f"/api/v1/runs/{run_id}/retry")
    assert retried.status_code == 200, retried.text
    assert retried.json()["id"] == run_id
    await api.until(run_id, lambda d: d["status"] == "failed" and len(d["errors"]) > 2)
    done = await api.start("adder", [1, 1])
    await api.result(done)
    refused = await api.client.post(f"/api/v1/runs/{done}/retry")
    assert refused.status_code == 409


async def test_cancel_a_tree(api: Api) -> None:
    run_id = await api.start("parent", 1)
    detail = await api.until(run_id, lambda d: d["status"] == "suspended" and d["children"])
    for child in detail["children"]:  # a cancel that meets a run as it suspends is #12's
        await api.until(child["id"], lambda d: d["status"] == "suspended")
    response = await api.client.post(f"/api/v1/runs/{run_id}/cancel", params={"children": "1"})
    runs = response.json()["runs"]
    assert runs[0]["run_id"] == run_id
    assert len(runs) == 2 and all(r["sent"] for r in runs)
    for child in runs:
        await api.until(child["run_id"], lambda d: d["status"] == "cancelled")
    single = await api.client.post(f"/api/v1/runs/{run_id}/cancel")
    assert single.json() == {"id": run_id, "sent": False, "status": "cancelled"}


async def test_resume_a_hook_by_token(api: Api) -> None:
    run_id = await api.start("approval", "o1")
    await api.until(run_id, lambda d: d["hooks"])
    hooks = (await api.client.get("/api/v1/hooks", params={"run": run_id})).json()["hooks"]
    assert [h["token"] for h in hooks] == ["approve:o1"]
    bad = await api.client.post("/api/v1/hooks/approve:o1", json={"approved": "maybe"})
    assert bad.status_code == 400
    assert "approved" in bad.json()["error"]["message"]
    unknown = await api.client.post("/api/v1/hooks/nobody", json={})
    assert unknown.status_code == 404
    ok = await api.client.post("/api/v1/hooks/approve:o1", json={"approved": True, "by": "ada"})
    assert ok.json()["run_id"] == run_id
    assert (await api.result(run_id))["output"] == "approved by ada"
    # The message that carried it, which the run journals with the payload.
    journal = await api.engine.store.read_journal(run_id)
    carried = [e.get("message") for e in journal if e["type"] == "hook_payload"]
    assert carried == [ok.json()["message"]] and isinstance(carried[0], str)


async def test_a_resume_with_an_idempotency_key_delivers_once(api: Api) -> None:
    run_id = await api.start("approval", "k1")
    await api.until(run_id, lambda d: d["hooks"])
    url, payload = "/api/v1/hooks/approve:k1", {"approved": True, "by": "ada"}
    key = {"Idempotency-Key": "order-k1"}
    for _ in range(2):  # the retry of a caller whose answer was lost
        response = await api.client.post(url, json=payload, headers=key)
        assert response.status_code == 200
        assert response.json() == {"run_id": run_id, "message": None}  # keyed: not said
    assert (await api.result(run_id))["output"] == "approved by ada"
    # Its hook is released with the run: a repeat still answers the run, without a key 404.
    again = await api.client.post(url, json=payload, headers=key)
    assert again.status_code == 200 and again.json() == {"run_id": run_id, "message": None}
    assert (await api.client.post(url, json=payload)).status_code == 404
    journal = await api.engine.store.read_journal(run_id)
    assert [e["type"] for e in journal].count("hook_payload") == 1
    bad = await api.client.post(url, json=payload, headers={"Idempotency-Key": " x"})
    assert bad.status_code == 400 and "idempotency key" in bad.json()["error"]["message"]


async def test_read_a_stream_from_the_end_and_following_it(api: Api) -> None:
    run_id = await api.start("streaming", {"count": 5, "pause": 0.05})
    chunks = []
    url = f"/api/v1/runs/{run_id}/streams/default"
    async with api.client.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/octet-stream"
        async for chunk in response.aiter_raw():
            chunks.append(chunk)
    assert b"".join(chunks) == b"".join(f"line {i}\n".encode() for i in range(5))
    await api.result(run_id)
    tail = await api.client.get(url, params={"start": -2})
    assert tail.content == b"line 3\nline 4\n"
    missing = await api.client.get(f"/api/v1/runs/{run_id}/streams/typo")
    assert missing.status_code == 404
    assert "default" in missing.json()["error"]["message"]


async def test_following_a_stream_waits_while_its_run_is_suspended(api: Api) -> None:
    run_id = await api.start("streams_once_approved", "o2")
    await api.until(run_id, lambda d: d["status"] == "suspended")
    url = f"/api/v1/runs/{run_id}/streams/default"
    not_following = await api.client.get(url, params={"follow": "false"})
    assert not_following.status_code == 404  # not open yet, and not asked to wait
    assert "no stream 'default'" in not_following.json()["error"]["message"]
    reading = asyncio.ensure_future(api.client.get(url))
    await asyncio.sleep(0.1)
    assert not reading.done()  # following: it waits for the run to open the stream
    approve = {"approved": True, "by": "ada"}
    assert (await api.client.post("/api/v1/hooks/stream-approve:o2", json=approve)).is_success
    response = await asyncio.wait_for(reading, 30)
    assert response.status_code == 200
    assert response.content == b"approved by ada\n"


async def test_server_sent_events_tell_run_changes(live: Api) -> None:
    api = live
    run_id = await api.start("sleeper", 3600)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    seen: list[dict[str, object]] = []

    async def listen() -> None:
        async with api.client.stream("GET", "/api/v1/events", params={"run": run_id}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["status"] == "completed":
                        return

    listener = asyncio.ensure_future(listen())
    while not seen:
        await asyncio.sleep(0.02)
    assert seen[0]["status"] == "suspended"
    await api.client.post(f"/api/v1/runs/{run_id}/wake")
    await asyncio.wait_for(listener, 20)
    assert seen[-1]["id"] == run_id


async def test_store_wide_events_announce_new_runs(live: Api) -> None:
    api = live
    got: list[dict[str, object]] = []

    async def listen() -> None:
        async with api.client.stream("GET", "/api/v1/events") as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    got.append(json.loads(line[6:]))
                    return

    listener = asyncio.ensure_future(listen())
    await asyncio.sleep(0.3)
    run_id = await api.start("adder", [1, 2])
    await asyncio.wait_for(listener, 20)
    assert got[0]["id"] == run_id


async def test_open_event_streams_share_one_listing_per_change(
    live: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every stream hears of a new run, and the store is listed once for all of them, not once
    per stream (50 pages open made a small request wait a second)."""
    api, streams = live, 12
    store = api.engine.store
    listings = 0
    list_runs = store.list_runs

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal listings
        if kwargs.get("limit") == 100:  # the streams' listing
            listings += 1
        return await list_runs(*args, **kwargs)

    monkeypatch.setattr(store, "list_runs", counted)
    opened = 0
    heard: list[str] = []

    async def listen() -> None:
        nonlocal opened
        async with api.client.stream("GET", "/api/v1/events") as response:
            opened += 1
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    heard.append(json.loads(line[6:])["id"])
                    return

    listeners = [asyncio.ensure_future(listen()) for _ in range(streams)]
    async with asyncio.timeout(20):
        while opened < streams or listings < 1:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # every stream is past its first look
        run_id = await api.start("adder", [1, 2])
        await asyncio.gather(*listeners)
    assert heard == [run_id] * streams
    # The first look, and one (or a few, as the run moves on) per change: not one per stream
    # (12). A loaded machine lets the run move through more changes before every stream heard.
    assert listings <= 8, listings


async def test_errors_have_one_shape_and_the_right_status(api: Api) -> None:
    cases = [
        ("GET", "/api/v1/runs/no such id!", None, 400),
        ("GET", f"/api/v1/runs/{MISSING}", None, 404),
        ("GET", f"/api/v1/runs/{MISSING}/result", None, 404),
        ("POST", f"/api/v1/runs/{MISSING}/cancel", None, 404),
        ("POST", f"/api/v1/runs/{MISSING}/wake", None, 404),
        ("POST", f"/api/v1/runs/{MISSING}/retry", None, 404),
        ("GET", f"/api/v1/runs/{MISSING}/streams/default", None, 404),
        ("GET", "/api/v1/runs", {"status": "sleepy"}, 400),
        ("GET", "/api/v1/runs", {"limit": "0"}, 400),
        ("GET", "/api/v1/runs", {"before": "../etc"}, 400),
        ("GET", "/api/v1/events", {"run": MISSING}, 404),
        ("GET", "/api/v1/nothing-here", None, 404),
        ("DELETE", "/api/v1/runs", None, 405),
        ("PUT", "/api/v1/hooks/x", None, 405),
    ]
    for method, path, query, status in cases:
        response = await api.client.request(method, path, params=query)
        assert response.status_code == status, (method, path, response.text)
        error = response.json()["error"]
        # A missing run's error names it too (the remote client raises wf.RunNotFound of it).
        extra = {"run_id"} if status == 404 and MISSING in path + str(query) else set()
        assert set(error) == {"type", "message", *extra}, (path, error)
        assert error.get("run_id", MISSING) == MISSING
    bodies = [
        ("not json", 400),
        (json.dumps([1, 2]), 400),
        (json.dumps({"workflow": "nope:nothing"}), 400),
        (json.dumps({"target": "tests.serve.flows:adder", "input": "x"}), 400),
        (json.dumps({"target": "tests.serve.flows:adder", "input": [1, 2], "extra": 1}), 400),
        (json.dumps({"target": "tests.serve.flows:pid"}), 400),
        (json.dumps({"target": "tests.serve.flows:adder", "id": "bad/id"}), 400),
        (json.dumps({"target": ""}), 400),  # was a 500 (an empty target read as no target)
        (json.dumps({"workflow": ""}), 400),
    ]
    for body, status in bodies:
        response = await api.client.post(
            "/api/v1/runs", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == status, (body, response.text)
        assert response.json()["error"]["message"]


async def test_bodies_are_limited_and_cross_site_changes_refused(api: Api) -> None:
    big = b"[" + b"1," * 600_000 + b"1]"
    response = await api.client.post(
        "/api/v1/runs", content=big, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "too_large"

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b" " * 65536

    chunked = await api.client.post(
        "/api/v1/hooks/x", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 413
    evil = await api.client.post(
        f"/api/v1/runs/{MISSING}/cancel", headers={"origin": "https://evil.example"}
    )
    assert evil.status_code == 403
    same = await api.client.post(
        f"/api/v1/runs/{MISSING}/cancel", headers={"origin": "http://127.0.0.1:8420"}
    )
    assert same.status_code == 404


async def test_a_token_is_needed_for_the_api_and_the_ui(store: object) -> None:
    import httpx

    from wf import Engine
    from wf.serve import create_app

    app = create_app(Engine(store), token="s3cret-token", drive=False)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8420") as c:
        denied = await c.get("/api/v1/runs")
        assert denied.status_code == 401
        assert denied.headers["www-authenticate"] == "Bearer"
        wrong = await c.get("/api/v1/runs", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = await c.get("/api/v1/runs", headers={"authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200
        page = await c.get("/runs/x")
        assert (page.status_code, page.headers["location"]) == (303, "/login?next=/runs/x")
        bad_login = await c.post("/login", data={"token": "nope", "next": "/"})
        assert bad_login.status_code == 401
        login = await c.post("/login", data={"token": "s3cret-token", "next": "//evil"})
        assert (login.status_code, login.headers["location"]) == (303, "/")
        assert "samesite=strict" in login.headers["set-cookie"].lower()
        assert (await c.get("/")).status_code == 200  # the cookie is sent from now on
        assert (await c.get("/api/v1/store")).json()["kind"] in ("local", "postgres")
        webhook = await c.post("/webhooks/unknown", json={})
        assert webhook.status_code == 404  # no token needed, and none there


async def test_step_logs_a_page_at_a_time_and_followed(api: Api) -> None:
    token = "logs-follow"
    run_id = await api.start("talks_twice", token)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    url = f"/api/v1/runs/{run_id}/logs"
    page = (await api.client.get(url)).json()
    assert (page["run_id"], page["status"], page["next_start"], page["more"]) == (
        run_id, "suspended", 3, False,
    )  # fmt: skip
    entries = page["entries"]
    assert [(e["op"], e["step"], e["attempt"], e["stream"], e["text"]) for e in entries] == [
        (0, "chatty", 1, "stdout", "hello first from a step"),
        (0, "chatty", 1, "stderr", "<b>not markup</b>"),
        (0, "chatty", 1, "log", "careful, first"),
    ]
    assert entries[2]["level"] == "WARNING"
    first = (await api.client.get(url, params={"limit": 2})).json()
    assert [e["stream"] for e in first["entries"]] == ["stdout", "stderr"]
    assert (first["next_start"], first["more"]) == (2, True)
    rest = (await api.client.get(url, params={"start": 2, "limit": 2})).json()
    assert [e["stream"] for e in rest["entries"]] == ["log"]
    assert (rest["next_start"], rest["more"]) == (3, False)

    # Following: a request from next_start waits for what the run prints next.
    follow = asyncio.ensure_future(api.client.get(url, params={"start": 3, "wait": 20}))
    await asyncio.sleep(0.2)
    assert not follow.done()  # nothing new yet: it waits
    resumed = await api.client.post(f"/api/v1/hooks/{token}", json={"ok": True})
    assert resumed.status_code == 200, resumed.text
    later = (await asyncio.wait_for(follow, 30)).json()
    assert [(e["step"], e["text"]) for e in later["entries"]] == [("say", "after the hook")]
    assert later["next_start"] == 4
    await api.result(run_id)
    ended = (await api.client.get(url, params={"start": 4, "wait": 20})).json()
    assert (ended["status"], ended["entries"], ended["next_start"]) == ("completed", [], 4)

    only = (await api.client.get(url, params={"step": "say"})).json()
    assert [e["text"] for e in only["entries"]] == ["after the hook"]
    assert only["next_start"] == 4  # the indices count every entry


async def test_step_logs_errors(api: Api) -> None:
    assert (await api.client.get(f"/api/v1/runs/{MISSING}/logs")).status_code == 404
    run_id = await api.start("adder", [1, 1])
    for bad in ({"start": -1}, {"limit": 0}, {"limit": 501}, {"wait": "soon"}):
        response = await api.client.get(f"/api/v1/runs/{run_id}/logs", params=bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]["type"] == "bad_request"
    assert (await api.client.get("/api/v1/runs/x!/logs")).status_code == 400


async def test_the_journal_a_page_at_a_time(api: Api) -> None:
    run_id = await api.start("counter", 5)
    await api.result(run_id)
    detail = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    journal = detail["events"]
    url = f"/api/v1/runs/{run_id}/events"
    whole = (await api.client.get(url)).json()
    assert whole == {"run_id": run_id, "events": journal, "next_start": len(journal), "more": False}
    first = (await api.client.get(url, params={"start": 0, "limit": 4})).json()
    assert (first["events"], first["next_start"], first["more"]) == (journal[:4], 4, True)
    pages, start, more = [], 0, True
    while more:
        page = (await api.client.get(url, params={"start": start, "limit": 3})).json()
        pages += page["events"]
        start, more = page["next_start"], page["more"]
    assert pages == journal
    past = (await api.client.get(url, params={"start": len(journal) + 10})).json()
    assert (past["events"], past["next_start"], past["more"]) == ([], len(journal) + 10, False)


async def test_the_journal_pages_errors(api: Api) -> None:
    missing = await api.client.get(f"/api/v1/runs/{MISSING}/events")
    assert (missing.status_code, missing.json()["error"]["run_id"]) == (404, MISSING)
    run_id = await api.start("adder", [1, 1])
    for bad in ({"start": -1}, {"start": "x"}, {"limit": 0}, {"limit": 501}):
        response = await api.client.get(f"/api/v1/runs/{run_id}/events", params=bad)
        assert response.status_code == 400, bad
        error = response.json()["error"]
        assert error["type"] == "bad_request" and "\n" not in error["message"]
    assert (await api.client.get("/api/v1/runs/x!/events")).status_code == 400


async def test_a_run_detail_without_its_journal(api: Api) -> None:
    run_id = await api.start("counter", 3)
    await api.result(run_id)
    url = f"/api/v1/runs/{run_id}"
    full = (await api.client.get(url)).json()
    assert full["events"]  # the default is unchanged
    for no in ("false", "0", "no"):
        bare = (await api.client.get(url, params={"events": no})).json()
        assert bare["events"] is None
        assert bare == {**full, "events": None}
    assert (await api.client.get(url, params={"events": "true"})).json() == full
    bad = await api.client.get(url, params={"events": "maybe"})
    assert (bad.status_code, bad.json()["error"]["type"]) == (400, "bad_request")


async def test_a_slow_listing_never_delays_a_run_detail(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listings read the store off the event loop: while a search is stuck reading (here: a
    second per index bucket), a run's detail still answers at once."""
    from wf.store.local import LocalStore
    from wf.store.local._index import Index

    if not isinstance(api.engine.store, LocalStore):
        pytest.skip("the PostgreSQL store's reads are asynchronous already")
    run_id = await api.start("adder", [2, 3])
    await api.result(run_id)
    walk = Index.walk_numbered  # what a search walks (its entries with their numbers)

    def slow_walk(self: Index, *args: Any, **kwargs: Any) -> Any:
        time.sleep(1.0)  # a synchronous read of a huge bucket
        yield from walk(self, *args, **kwargs)

    monkeypatch.setattr(Index, "walk_numbered", slow_walk)
    search = asyncio.ensure_future(api.client.get("/api/v1/runs", params={"search": "zzzz"}))
    await asyncio.sleep(0.05)  # the search is reading now
    started = time.monotonic()
    detail = await api.client.get(f"/api/v1/runs/{run_id}")
    took = time.monotonic() - started
    assert detail.status_code == 200 and not search.done()
    assert took < 0.5, f"a run's detail waited {took:.2f} s behind a search"
    found = (await search).json()
    assert found["runs"] == [] and found["searched"] == 1 and found["search_further"] is None


async def test_a_search_reads_a_bounded_number_of_runs_and_says_where_to_go_on(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.admin import _read

    monkeypatch.setattr(_read, "SEARCH_BUDGET", 2)
    ids = [await api.start("adder", {"a": i, "b": 0}) for i in range(5)]
    first = (await api.client.get("/api/v1/runs", params={"search": "nomatch"})).json()
    assert first["runs"] == [] and first["searched"] == 2
    assert first["search_further"] == ids[3]  # the last run read: older ones come next
    rest = await api.client.get(
        "/api/v1/runs", params={"search": "nomatch", "before": first["search_further"]}
    )
    assert rest.json()["searched"] == 2 and rest.json()["search_further"] == ids[1]
    plain = (await api.client.get("/api/v1/runs")).json()
    assert "searched" not in plain


async def test_runs_are_filtered_by_queue_group_and_deployment(api: Api) -> None:
    from tests.store.helpers import created
    from wf.store import RunStatus

    store, done = api.engine.store, RunStatus.COMPLETED  # finished: no worker takes them
    mail = await created(store, queue="mail", group="cust-1", status=done)
    await created(store, queue="reports", deployment="v2", status=done)
    pinned = await created(store, deployment="v1", group="cust-1", status=done)

    async def listed(**query: str) -> list[str]:
        answer = await api.client.get("/api/v1/runs", params=query)
        assert answer.status_code == 200, answer.text
        return [r["id"] for r in answer.json()["runs"]]

    assert await listed(queue="mail") == [mail.id]
    assert await listed(group="cust-1") == [pinned.id, mail.id]
    assert await listed(group="cust-1", deployment="v1") == [pinned.id]
    assert await listed(queue="mail", status="failed") == []
    bad = await api.client.get("/api/v1/runs", params={"queue": "a\x00b"})
    assert bad.status_code == 400 and "queue" in bad.json()["error"]["message"]
    page = (await api.client.get("/", params={"group": "cust-1"})).text
    assert mail.id in page and pinned.id in page and 'value="cust-1"' in page


async def test_unknown_body_fields_are_named_on_one_line(api: Api) -> None:
    """A body's unknown fields are named as reprs, at most five, each cut short: a field name
    is whatever a client sent (a newline, a megabyte), and an error answer is one line."""
    body = {"workflow": "adder", "\n": None, "x" * 100_000: 1}
    body.update({f"extra{n}": n for n in range(6)})
    for path in ("/api/v1/runs", "/api/v1/store/gc"):
        response = await api.client.post(path, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "bad_request"
        message = error["message"]
        assert "\n" not in message and len(message) < 400, message
        assert message.startswith("unknown field(s): '\\n', 'extra0'"), message
        assert message.endswith(" and 3 more"), message


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("workflow=", "a workflow cannot be empty"),
        ("queue=", "a queue cannot be empty"),
        ("group=", "a group cannot be empty"),
        ("deployment=", "a deployment cannot be empty"),
        ("status=", "status '' is not one of"),
        ("before=", "before: invalid run id ''"),
        ("parent=", "invalid run id ''"),
        ("search=", "a search cannot be empty"),
        ("q=%20", "a q cannot be empty"),
    ],
)
async def test_an_empty_filter_of_the_runs_is_refused_as_wf_admin_does(
    api: Api, query: str, says: str
) -> None:
    """An empty filter is not "no filter" (it would list every run): 400, in the words the
    CLI and ``wf.admin`` use."""
    answer = await api.client.get(f"/api/v1/runs?{query}")
    assert answer.status_code == 400, answer.text
    assert says in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/v1/runs", '{"target": "os:system", "target": "tests.serve.flows:adder"}'),
        (
            "POST",
            "/api/v1/runs",
            '{"target": "tests.serve.flows:adder", "input": {"a": 1, "a": 2}}',
        ),
        (
            "PUT",
            "/api/v1/schedules/s",
            '{"target": "tests.serve.flows:adder", "cron": "* * * * *",'
            ' "input": [1, 2], "tz": "UTC", "tz": "Europe/Paris"}',
        ),
        ("POST", "/api/v1/store/gc", '{"dry_run": true, "dry_run": false}'),
    ],
)
async def test_a_body_that_gives_a_key_twice_is_refused(
    api: Api, method: str, path: str, body: str
) -> None:
    """JSON with a key given twice means one thing to one reader and another to the next
    (Python keeps the last, others the first): a 400 naming the key, nothing done."""
    answer = await api.client.request(
        method, path, content=body, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    said = answer.json()["error"]["message"]
    assert said.startswith("the body cannot be read: the key ") and "is given twice" in said, said
    assert (await api.client.get("/api/v1/runs")).json()["runs"] == []
    assert (await api.client.get("/api/v1/schedules")).json()["schedules"] == []


async def test_a_hook_payload_that_gives_a_key_twice_is_refused(api: Api) -> None:
    run_id = await api.start("approval", "twice")
    await api.until(run_id, lambda d: d["hooks"] and d["status"] == "suspended")
    answer = await api.client.post(
        "/api/v1/hooks/approve:twice",
        content='{"approved": false, "by": "x", "approved": true}',
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert "the key 'approved' is given twice" in answer.json()["error"]["message"]
    assert (await api.client.get(f"/api/v1/runs/{run_id}")).json()["status"] == "suspended"


@pytest.mark.parametrize("path", ["/api/v1/hooks?run=", "/api/v1/events?run="])
async def test_an_empty_run_filter_of_hooks_and_events_is_refused(api: Api, path: str) -> None:
    """``?run=`` names no run: a 400, as ``wf.admin`` (the remote client included) says it,
    not every run's hooks or every run's changes (a stream that never ends)."""
    async with asyncio.timeout(10):
        answer = await api.client.get(path)
    assert answer.status_code == 400, answer.text
    assert "invalid run id ''" in answer.json()["error"]["message"]


async def test_a_deleted_runs_result_streams_and_logs_say_when_and_why(api: Api) -> None:
    """A run ``wf gc`` deleted answers as ``GET /api/v1/runs/{id}`` does, ``deleted_at`` and
    ``reason`` included, so the remote ``run.result()`` raises ``wf.ResultExpired`` as a
    local reader does (not ``wf.RunNotFound``)."""
    run_id = await api.start("adder", [1, 2])
    await api.result(run_id)
    for _ in range(100):  # the local store's status index lags its records a little
        gc = await api.client.post("/api/v1/store/gc", json={"older_than": "0s"})
        assert gc.status_code == 200, gc.text
        if (await api.client.get(f"/api/v1/runs/{run_id}")).status_code == 404:
            break
        await asyncio.sleep(0.05)
    paths = ["", "/result", "/result?wait=1", "/streams/default", "/logs"]
    for path in [f"/api/v1/runs/{run_id}{p}" for p in paths] + [f"/api/v1/events?run={run_id}"]:
        answer = await api.client.get(path)
        assert answer.status_code == 404, (path, answer.text)
        error = answer.json()["error"]
        assert error["reason"] == "gc" and error["deleted_at"] > 0, (path, error)


async def test_a_stream_whose_writer_was_cut_off_is_not_complete(api: Api) -> None:
    run_id = await api.start("cut_off", [])
    assert (await api.result(run_id))["status"] == "failed"
    detail = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    info = detail["stream_info"]["default"]
    # ``closed`` follows the outcome (the driver closes what the run left open after it), so
    # a read right after the result may see either; the run's end decides completeness.
    assert {k: v for k, v in info.items() if k != "closed"} == {
        "chunks": 1, "complete": False, "cut_step": "answer_cut_off",
    }  # fmt: skip
    # A reader that asks the run afterwards (the web UI) may take the body ended as any other.
    whole = await api.client.get(
        f"/api/v1/runs/{run_id}/streams/default", params={"abort_cut_off": "false"}
    )
    assert (whole.status_code, whole.content) == (200, b"Half an")
    finished = await api.start("streaming", {"count": 1})
    await api.result(finished)
    detail = (await api.client.get(f"/api/v1/runs/{finished}")).json()
    assert detail["stream_info"]["default"]["complete"] is True


async def test_a_slow_target_import_stalls_no_other_request(api: Api) -> None:
    """A by-name start imports its module off the event loop: other requests are answered
    meanwhile, and a second start of the same module waits for that one import."""
    import sys

    import tests.serve.flows  # noqa: F401 - imported already: a start of it imports nothing
    from tests.serve._gate import GATE, TIMED_OUT

    sys.modules.pop("tests.serve.slow_import", None)
    GATE.clear()
    TIMED_OUT.clear()
    body = {"target": "tests.serve.slow_import:slow_one"}
    try:
        first = asyncio.ensure_future(api.client.post("/api/v1/runs", json=body))
        second = asyncio.ensure_future(api.client.post("/api/v1/runs", json=body))
        await asyncio.sleep(0)
        async with asyncio.timeout(4):
            assert (await api.client.get("/api/v1/store")).status_code == 200
            slow = [body] * 4  # as many as import at once: a start of imported code waits not
            waiting = [asyncio.ensure_future(api.client.post("/api/v1/runs", json=b)) for b in slow]
            while api.app.state.wf.imports.locked() is False:  # every import slot taken
                await asyncio.sleep(0.01)
            assert (await api.result(await api.start("adder", [1, 2])))["output"] == 3
        assert not first.done() and not second.done()
        GATE.set()
        async with asyncio.timeout(10):
            started = [await first, await second, *[await w for w in waiting]]
        assert [r.status_code for r in started] == [201] * 6
        assert TIMED_OUT == [False]  # imported once, and the gate was opened meanwhile
        for response in started:
            assert (await api.result(response.json()["id"]))["output"] == "loaded"
    finally:
        GATE.set()
        sys.modules.pop("tests.serve.slow_import", None)


async def test_a_target_whose_import_raises_keyboard_interrupt_is_a_load_error(
    api: Api,
) -> None:
    """As for SystemExit: a 400 naming the error, not a 500 (or a server that stops)."""
    body = {"target": "tests.serve.interrupting_import:anything"}
    for _ in range(2):
        response = await api.client.post("/api/v1/runs", json=body)
        assert response.status_code == 400, response.text
        message = response.json()["error"]["message"]
        assert message.startswith("error while importing 'tests.serve.interrupting_import'")
        assert message.endswith(": KeyboardInterrupt")  # it has no message of its own
    assert (await api.client.get("/api/v1/store")).status_code == 200


@pytest.mark.parametrize("store_kind", ["local"], indirect=True)
async def test_a_store_failure_is_503_store_unavailable_and_a_store_error_for_the_client(
    live: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that fails as a whole (here read-only: EROFS) is no bug of the server: 503
    ``store_unavailable``, one log line (no traceback), and the remote client raises the
    ``wf.StoreError`` a local caller gets (the CLI's exit 3)."""
    import errno

    import wf
    from wf._remote import RemoteClient
    from wf.store.local import _fsops

    with _fsops.inject("*", errno.EROFS):
        body = {"target": "tests.serve.flows:adder", "input": [1, 2]}
        answer = await live.client.post("/api/v1/runs", json=body)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["type"] == "store_unavailable"
        assert "[EROFS]" in answer.json()["error"]["message"]
        with pytest.raises(wf.StoreError, match=r"\[EROFS\]"):
            client = RemoteClient(str(live.client.base_url))
            await client.start("tests.serve.flows:adder", (1, 2), {})
    logged = [r for r in caplog.records if r.name == "wf.serve"]
    assert len(logged) == 2 and not any(r.exc_info for r in logged), logged


@pytest.mark.parametrize("action", ["wake", "cancel"])
async def test_a_control_wait_is_bounded(
    api: Api, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    # A run that sleeps again after each wake-up does not end: ``?wait=true`` answers after the
    # bound (300 s; here shortened) with where the run is, as ``result?wait`` does.
    from wf.serve import _api

    monkeypatch.setattr(_api, "_MAX_WAIT", 0.3)
    run_id = await api.start("napper", 1000)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    if action == "cancel":
        # Its cancellation is applied by the run, which is not driven meanwhile.
        api.engine.may_drive = False
    response = await asyncio.wait_for(
        api.client.post(f"/api/v1/runs/{run_id}/{action}", params={"wait": "true"}), 10
    )
    assert response.status_code == 200, response.text
    assert response.json()["sent"] is True
    assert response.json()["status"] in {"suspended", "pending", "running"}


async def test_a_control_wait_ends_when_the_server_stops(api: Api) -> None:
    run_id = await api.start("napper", 1000)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    waiting = asyncio.ensure_future(
        api.client.post(f"/api/v1/runs/{run_id}/wake", params={"wait": "true"})
    )
    result = asyncio.ensure_future(
        api.client.get(f"/api/v1/runs/{run_id}/result", params={"wait": 300})
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()
    api.app.state.wf.stopping.set()  # what SIGTERM sets first (``wf.serve._run``)
    response = await asyncio.wait_for(waiting, 10)
    assert response.status_code == 200
    # The run as the stop found it: still asleep, or (on a loaded machine) just woken.
    assert response.json()["status"] in {"suspended", "pending", "running"}
    assert (await asyncio.wait_for(result, 10)).status_code == 202


@pytest.mark.parametrize("query", ["search=a%00", "q=%00", "search=a%0Ab"])
async def test_a_search_with_a_control_character_is_refused(api: Api, query: str) -> None:
    # No id or workflow name holds one, and PostgreSQL's text cannot hold NUL: a 400 on every
    # store, not the store's failure.
    answer = await api.client.get(f"/api/v1/runs?{query}")
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "bad_request"
    page = await api.client.get(f"/?{query.replace('search=', 'q=')}")
    assert page.status_code == 400, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert "cannot be a name" in page.text or "control character" in page.text


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/runs", "limit=%D9%A5"),  # ARABIC-INDIC DIGIT FIVE
        ("/api/v1/runs", "limit=%EF%BC%95"),  # FULLWIDTH DIGIT FIVE
        ("/api/v1/runs/{id}/result", "wait=%D9%A5"),
    ],
)
async def test_numbers_in_a_query_are_ascii_digits(api: Api, path: str, query: str) -> None:
    run_id = await api.start("adder", [1, 2])
    answer = await api.client.get(f"{path.format(id=run_id)}?{query}")
    assert answer.status_code == 400, answer.text
    assert query.partition("=")[0] in answer.json()["error"]["message"]


@pytest.mark.parametrize("store_kind", ["local"], indirect=True)
async def test_a_resume_waiting_for_the_segments_lock_leaves_the_server_serving(
    api: Api, tmp_path: Path
) -> None:
    """Another process holds ``segments/lock`` (a ``wf gc`` stopped with Ctrl-Z): a hook's
    resume waits for it, and the other requests are answered meanwhile."""
    import fcntl
    import os
    import threading

    run_id = await api.start("approval", "held")
    await api.until(run_id, lambda d: d["hooks"])
    segments = tmp_path / ".workflows" / "segments"
    segments.mkdir(exist_ok=True)
    fd = os.open(segments / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    # Let go after 3 s whatever happens: a server that waits on the lock itself is stuck
    # until then (what this test catches), not for ever.
    safety = threading.Timer(3.0, fcntl.flock, (fd, fcntl.LOCK_UN))
    safety.start()
    try:
        approve = {"approved": True, "by": "ada"}
        resume = asyncio.ensure_future(api.client.post("/api/v1/hooks/approve:held", json=approve))
        deadline = time.monotonic() + 5
        while not _flock_waited_for(segments / "lock"):
            assert time.monotonic() < deadline, "no thread waited for the lock (the loop did?)"
            await asyncio.sleep(0.02)
        started = time.monotonic()
        detail = await asyncio.wait_for(api.client.get(f"/api/v1/runs/{run_id}"), 2)
        assert detail.status_code == 200 and time.monotonic() - started < 1
        assert not resume.done()  # still waiting for the lock
        fcntl.flock(fd, fcntl.LOCK_UN)
        answer = await asyncio.wait_for(resume, 10)
    finally:
        safety.cancel()
        os.close(fd)
    assert answer.status_code == 200 and answer.json()["run_id"] == run_id
    assert (await api.result(run_id))["output"] == "approved by ada"


def _flock_waited_for(path: Path) -> bool:
    """Whether a process (this one's thread, say) waits for an ``flock`` on ``path`` now."""
    import os

    info = os.stat(path)
    ident = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and ident in line.split() for line in lines)


@pytest.mark.parametrize("damage", ["name not UTF-8", "name of another stream"])
async def test_a_stream_whose_name_file_is_damaged_is_read_by_its_name(
    api: Api, damage: str
) -> None:
    """Left out of the store's listing (named in ``damaged``), the stream is still read by the
    stream endpoint: its chunk files are named by its name's key. The run's detail carries it
    by the name its journal wrote (a remote reader asks it whether the stream is complete).
    The name the damaged file holds is not a stream of the run."""
    import os

    from wf.store.local import LocalStore
    from wf.store.local._layout import stream_key

    store = api.engine.store
    if not isinstance(store, LocalStore):
        pytest.skip("damages a stream's file")
    run_id = await api.start("streaming", [2])
    await api.result(run_id)
    for _ in range(200):  # its driver closes the stream after the outcome: wait for it
        if await store.list_streams(run_id) == {"default": (2, True)}:
            break
        await asyncio.sleep(0.01)
    name_file = os.path.join(store.run_location(run_id), stream_key("default") + ".name")
    Path(name_file).write_bytes(b"\xff\xfe" if damage == "name not UTF-8" else b"other")
    detail = (await api.client.get(f"/api/v1/runs/{run_id}")).json()
    assert [(f["kind"], f["shown_as"]) for f in detail["damaged"]] == [("stream", "default")]
    assert detail["streams"] == ["default"]
    assert detail["stream_info"]["default"] == {
        "chunks": 2, "closed": True, "complete": True, "cut_step": None,
    }  # fmt: skip
    for follow in ("true", "false"):
        url = f"/api/v1/runs/{run_id}/streams/default"
        answer = await api.client.get(url, params={"follow": follow})
        assert (answer.status_code, answer.content) == (200, b"line 0\nline 1\n")
    other = await api.client.get(f"/api/v1/runs/{run_id}/streams/other")
    assert other.status_code == 404 and "no stream 'other'" in other.json()["error"]["message"]


async def test_long_bodies_and_log_waits_end_when_the_server_stops(live: Api) -> None:
    # SIGTERM sets ``stopping``: an event stream, a followed byte stream and a ``logs?wait``
    # end then, as ``result?wait`` does, instead of being cut off by uvicorn's shutdown 5 s
    # later with a CancelledError traceback and a plain-text 500.
    api = live
    run_id = await api.start("napper", 1000)
    await api.until(run_id, lambda d: d["status"] == "suspended")
    opened: list[str] = []

    async def body(path: str, **params: Any) -> tuple[int, bytes, bool]:
        async with api.client.stream("GET", path, params=params) as response:
            opened.append(path)
            got, whole = b"", True
            try:
                async for chunk in response.aiter_raw():
                    got += chunk
            except (httpx.RemoteProtocolError, httpx.ReadError):
                whole = False  # ended without its last chunk: not taken for a whole one
            return response.status_code, got, whole

    events = asyncio.ensure_future(body("/api/v1/events"))
    run_events = asyncio.ensure_future(body("/api/v1/events", run=run_id))
    logs = asyncio.ensure_future(
        api.client.get(f"/api/v1/runs/{run_id}/logs", params={"wait": 100})
    )
    async with asyncio.timeout(10):
        while len(opened) < 2:
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    assert not (events.done() or run_events.done() or logs.done())
    started = time.monotonic()
    api.app.state.wf.stopping.set()  # what SIGTERM sets first (``wf.serve._run``)
    async with asyncio.timeout(3):
        answered = await logs
        status, text, whole = await events
        run_status, run_text, run_whole = await run_events
    assert time.monotonic() - started < 2.5
    assert answered.status_code == 200, answered.text
    assert answered.json()["entries"] == []
    assert answered.headers["content-type"] == "application/json"
    assert (status, whole) == (200, True) and text.startswith(b"retry: 2000")
    assert (run_status, run_whole) == (200, True) and b"suspended" in run_text


async def test_a_followed_stream_is_cut_when_the_server_stops(live: Api) -> None:
    # A reader following a stream learns that it did not get all of it (no last chunk), not
    # that the stream ended.
    api = live
    run_id = await api.start("streams_once_approved", "stop1")
    await api.until(run_id, lambda d: d["status"] == "suspended")
    reading = asyncio.ensure_future(api.client.get(f"/api/v1/runs/{run_id}/streams/default"))
    await asyncio.sleep(0.3)
    assert not reading.done()
    api.app.state.wf.stopping.set()
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        await asyncio.wait_for(reading, 3)


async def test_a_store_failure_under_open_bodies_is_one_line_each(
    live: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The store fails (Redis went away) while event streams and a followed byte stream are
    # open: each body ends (cut short) and the server logs one line for it, no traceback.
    import logging

    from wf import StoreUnavailable

    api = live
    run_id = await api.start("streams_once_approved", "fail1")
    await api.until(run_id, lambda d: d["status"] == "suspended")
    store = api.engine.store
    opened: list[str] = []

    async def body(path: str, **params: Any) -> bool:
        async with api.client.stream("GET", path, params=params) as response:
            opened.append(path)
            try:
                async for _ in response.aiter_raw():
                    pass
            except (httpx.RemoteProtocolError, httpx.ReadError):
                return False
            return True

    bodies = [
        asyncio.ensure_future(body("/api/v1/events")),
        asyncio.ensure_future(body("/api/v1/events", run=run_id)),
        asyncio.ensure_future(body(f"/api/v1/runs/{run_id}/streams/default")),
    ]
    async with asyncio.timeout(10):
        while len(opened) < 3:
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("Redis at redis://x failed: Connection refused")

    api.engine.may_drive = False
    for name in (
        "get_run",
        "read_journal",
        "list_runs",
        "wait_for_run",
        "wait_for_change",
        "stream_info",
    ):
        monkeypatch.setattr(store, name, down)
    caplog.set_level(logging.INFO)
    async with asyncio.timeout(30):
        ended = await asyncio.gather(*bodies)
    assert ended == [False, False, False]
    await asyncio.sleep(0.2)
    # The open bodies' lines (the server's worker may say the store failed too: a retention
    # sweep of a workflow another test in this process declared).
    failed = [
        r for r in caplog.records if r.name == "wf.serve" and "Connection refused" in r.getMessage()
    ]
    assert len(failed) == 3, [r.getMessage() for r in caplog.records]
    assert all(r.exc_info is None for r in caplog.records), [
        r.getMessage() for r in caplog.records if r.exc_info
    ]
    assert not [r for r in caplog.records if "ASGI" in r.getMessage()]


async def test_a_damaged_run_searched_by_its_id_is_named_not_a_failed_page(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf import StoreCorrupted

    run_id = await api.start("adder", [1, 2])
    await api.result(run_id)
    store = api.engine.store
    real = store.get_run

    async def get_run(wanted: str) -> Any:
        if wanted == run_id:
            raise StoreCorrupted(f"run {wanted}: its record is not valid JSON")
        return await real(wanted)

    monkeypatch.setattr(store, "get_run", get_run)
    found = await api.client.get("/api/v1/runs", params={"search": run_id})
    assert found.status_code == 200, found.text
    assert found.json()["runs"] == []
    assert [f["item"] for f in found.json()["damaged"]] == [run_id]
    page = await api.client.get("/", params={"q": run_id})
    assert page.status_code == 200, page.text
    assert "not valid JSON" in page.text


@pytest.mark.parametrize(
    "extra",
    [
        {"options": "x"},
        {"options": False},
        {"options": []},
        {"options": ""},
        {"options": 0},
        {"args": 0},
        {"args": ""},
        {"args": False},
        {"kwargs": []},
        {"kwargs": False},
        {"kwargs": 0},
        {"args": [], "kwargs": []},
    ],
)
async def test_a_start_with_options_or_arguments_of_the_wrong_type_is_refused(
    api: Api, extra: dict[str, Any]
) -> None:
    # Falsy or not, a value of the wrong type is a 400: it was taken for "none" when falsy.
    body = {"target": "tests.serve.flows:wrong_output", **extra}  # takes no argument
    answer = await api.client.post("/api/v1/runs", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "bad_request"
    assert (await api.client.get("/api/v1/runs")).json()["runs"] == []


async def test_text_with_a_lone_surrogate_reads_the_same_in_a_listing_a_record_and_wf_run(
    live: Api,
) -> None:
    # The record's values are wf's tagged JSON wherever a record is read whole (docs/cli.md
    # "Values"): ``{"$t": "str", ...}`` for text UTF-8 cannot carry, in GET /runs as in
    # GET /runs/{id}, and a remote record (``wf run --json`` over WF_URL) as a local one.
    from wf import admin
    from wf._remote import RemoteClient
    from wf.admin._http import HttpAdmin

    api = live
    body = json.dumps({"target": "tests.serve.flows:echo", "input": ["Hello, \ud800!"]})
    started = await api.client.post(
        "/api/v1/runs", content=body, headers={"content-type": "application/json"}
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    await api.result(run_id)
    stored = (await api.engine.store.get_run(run_id)).to_json()
    assert stored["output"]["$t"] == "str"
    listed = (await api.client.get("/api/v1/runs")).json()["runs"][0]
    detail = (await api.client.get(f"/api/v1/runs/{run_id}", params={"events": "false"})).json()
    assert listed["output"] == detail["output"] == stored["output"]
    assert listed["input"] == detail["input"] == stored["input"]
    remote = RemoteClient(str(api.client.base_url))
    assert (await remote.run(run_id).record()).output == stored["output"]
    ended = await HttpAdmin(remote).ended(run_id)
    local = await admin.LocalAdmin(api.engine).ended(run_id)
    assert ended.output == local.output == stored["output"]
    # A run's detail shows the text itself, locally and remotely alike.
    shown = await HttpAdmin(remote).run_detail(run_id)
    assert shown.run.output == (await admin.run_detail(api.engine.store, run_id)).run.output
    assert shown.run.output == "Hello, \ud800!"


async def test_a_big_chunk_is_sent_in_pieces(api: Api) -> None:
    # A chunk of 10 MB sent as one body message held the event loop ~0.15 s (HTTP framing
    # copies it): three readers made other requests wait. The bytes are the same, in pieces.
    from tests.store.helpers import acquire, created

    store = api.engine.store
    run = await created(store)
    lease = await acquire(store, run.id)
    chunks = [b"a" * 10, bytes(range(256)) * 4096, b"z"]  # the middle one 1 MiB
    for index, chunk in enumerate(chunks):
        await lease.write_chunk("default", index, chunk)
    await lease.close_stream("default", len(chunks))
    await lease.release()
    sizes: list[int] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        async def sent(message: Any) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sizes.append(len(message["body"]))
            await send(message)

        await api.app(scope, receive, sent)

    transport = httpx.ASGITransport(app=recording)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        url = f"/api/v1/runs/{run.id}/streams/default"
        response = await client.get(url, params={"follow": "false"})
    assert response.status_code == 200
    assert response.content == b"".join(chunks)
    assert max(sizes) <= 256 * 1024, sizes
