"""``wf.admin.Admin``'s conformance: the same tests against the local backend (an engine on
the store) and the HTTP backend (a ``wf serve`` app on that store, served by uvicorn), and the
same answers from both for the same runs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import wf
from tests.serve.conftest import Api
from wf import admin


@pytest.fixture(params=["local"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """One store is enough here: the stores have a conformance kit of their own."""
    kind: str = request.param
    return kind


@pytest_asyncio.fixture
async def both(live: Api) -> AsyncIterator[tuple[admin.Admin, admin.Admin]]:
    """The local backend and the HTTP backend over the same runs."""
    from wf._remote import RemoteClient

    yield admin.LocalAdmin(live.engine), admin.HttpAdmin(RemoteClient(str(live.client.base_url)))


@pytest.fixture(params=["local", "http"])
def backend(request: pytest.FixtureRequest, both: tuple[admin.Admin, admin.Admin]) -> admin.Admin:
    """Each backend in turn."""
    return both[0] if request.param == "local" else both[1]


async def test_start_list_detail_and_explain(backend: admin.Admin) -> None:
    run_id = await backend.start("tests.serve.flows:adder", [40, 2])
    record = await backend.ended(run_id)
    assert (record.id, record.status, record.output) == (run_id, wf.RunStatus.COMPLETED, 42)
    page = await backend.list_runs(status=["completed"], limit=10)
    assert [r.id for r in page.runs] == [run_id]
    assert await backend.newest_run() == run_id
    detail = await backend.run_detail(run_id)
    assert [(s.kind, s.name, s.status) for s in detail.steps] == [("step", "add", "completed")]
    why = await backend.explain(run_id)
    assert (why.status, why.reasons[0].kind) == ("completed", "completed")


async def test_both_backends_give_the_same_shapes(both: tuple[admin.Admin, admin.Admin]) -> None:
    local, http = both
    done = await local.start("tests.serve.flows:adder", {"a": 1, "b": 2})
    failed = await http.start("tests.serve.flows:failing", ["boom"])
    for run_id in (done, failed):
        await local.ended(run_id)
        assert (await local.run_detail(run_id)).to_json(spans=True) == (
            await http.run_detail(run_id)
        ).to_json(spans=True)
        assert (await local.explain(run_id)).to_json() == (await http.explain(run_id)).to_json()
    for query in ({}, {"status": ["failed"]}, {"search": "ADD"}, {"limit": 1}):
        assert await local.list_runs(**query) == await http.list_runs(**query)
    assert await local.store_info() == await http.store_info()


async def test_hooks_are_listed_and_resumed(backend: admin.Admin) -> None:
    run_id = await backend.start("tests.serve.flows:approval", ["conf"])
    settled = await backend.settle(run_id)
    assert settled.status is wf.RunStatus.SUSPENDED
    hooks = await backend.list_hooks(run_id)
    assert [(h.token, h.run_id) for h in hooks] == [("approve:conf", run_id)]
    assert await backend.list_hooks() == hooks
    with pytest.raises(wf.HookError):
        await backend.resume_hook("approve:conf", {"approved": "?"})
    assert await backend.resume_hook("approve:conf", {"approved": True, "by": "kit"}) == run_id
    record = await backend.ended(run_id)
    assert (record.status, record.output) == (wf.RunStatus.COMPLETED, "approved by kit")
    assert await backend.list_hooks(run_id) == []


async def test_cancel_wake_and_retry(backend: admin.Admin) -> None:
    sleeping = await backend.start("tests.serve.flows:sleeper", [3600])
    await backend.settle(sleeping)
    (woken,) = [await backend.wake(sleeping, wait=True)]
    assert (woken.run_id, woken.sent, woken.status) == (sleeping, True, "completed")
    again = await backend.start("tests.serve.flows:sleeper", [3600])
    await backend.settle(again)
    results = await backend.cancel(again, wait=True)
    assert [(r.run_id, r.sent, r.status) for r in results] == [(again, True, "cancelled")]
    ended = await backend.cancel(again)
    assert [(r.sent, r.status) for r in ended] == [(False, "cancelled")]

    failing = await backend.start("tests.serve.flows:failing", ["once"])
    assert (await backend.ended(failing)).status is wf.RunStatus.FAILED
    assert await backend.retry(failing) == failing
    record = await backend.ended(failing)
    assert (record.status, record.attempt) == (wf.RunStatus.FAILED, 2)
    with pytest.raises(wf.UsageError):
        await backend.retry(sleeping)  # completed, not failed


async def test_streams_logs_and_watch(backend: admin.Admin) -> None:
    run_id = await backend.start("tests.serve.flows:streaming", [3])
    chunks = [chunk async for chunk in backend.follow_stream(run_id, follow=True)]
    assert chunks == [b"line 0\n", b"line 1\n", b"line 2\n"]
    assert [c async for c in backend.follow_stream(run_id, start=-1, follow=False)] == [b"line 2\n"]
    events = [event.kind async for event in backend.watch(run_id)]
    assert events[-1] == "completed"

    talker = await backend.start("tests.serve.flows:talker", ["ada"])
    entries = [entry async for entry in backend.follow_logs(talker, follow=True)]
    assert entries and all(entry["step"] == "chatty" for entry in entries)
    assert [e async for e in backend.follow_logs(talker, step="nope")] == []


async def test_errors_are_the_librarys(backend: admin.Admin) -> None:
    missing = "wrun_00000000000000000000000000"
    with pytest.raises(wf.RunNotFound):
        await backend.run_detail(missing)
    with pytest.raises(wf.RunNotFound):
        await backend.cancel(missing)
    with pytest.raises(wf.RunNotFound):
        await backend.list_hooks(missing)
    with pytest.raises(wf.UsageError):
        await backend.run_detail("../etc")
    with pytest.raises(wf.HookError):
        await backend.resume_hook("no-such-token", None)
