"""``wf.admin.Admin``'s conformance: the same tests against the local backend (an engine on
the store) and the HTTP backend (a ``wf serve`` app on that store, served by uvicorn), and the
same answers from both for the same runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

import wf
from tests.serve.conftest import Api
from tests.store.helpers import damage_local_run, damage_local_schedule
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


async def test_a_damaged_hook_is_left_out_and_named_by_both_backends(
    both: tuple[admin.Admin, admin.Admin], live: Api
) -> None:
    from pathlib import Path

    local, http = both
    for order in ("a", "b"):
        await local.settle(await local.start("tests.serve.flows:approval", [order]))
    hooks = await local.list_hooks()
    files = (Path(live.engine.store.root) / "hooks").glob("*.json")  # type: ignore[attr-defined]
    [found] = [p for p in files if b"approve:a" in p.read_bytes()]
    found.write_bytes(b"[1]")
    path = str(found)
    page = await local.hook_page()
    assert page == await http.hook_page()
    assert [h.token for h in page.hooks] == ["approve:b"] and len(hooks) == 2
    [fault] = page.damaged
    assert (fault.kind, fault.where) == ("hook", path) and "not a hook record" in fault.reason
    assert await http.list_hooks() == page.hooks
    # What the pages met is theirs to say: the server's worker takes none of it as its own.
    assert not live.engine.store.faults.of_kind("hook")


async def test_a_cancel_no_driver_took_in_yet_is_told_alike(
    live: Api, both: tuple[admin.Admin, admin.Admin]
) -> None:
    local = both[0]
    live.engine.may_drive = False  # nobody takes the request out of the run's inbox
    run_id = await local.start("tests.serve.flows:sleeper", [3600])
    await local.cancel(run_id)
    details = [await backend.run_detail(run_id) for backend in both]
    assert [(d.run.cancel_requested, d.cancel_requested) for d in details] == [(True, True)] * 2
    assert details[0].to_json() == details[1].to_json()
    for backend in both:
        reasons = [reason.kind for reason in (await backend.explain(run_id)).reasons]
        assert "cancel_requested" in reasons, reasons


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
    with pytest.raises(wf.UsageError, match=r"has no step 'nope' \(its steps: 'chatty'\)"):
        assert [e async for e in backend.follow_logs(talker, step="nope")] == []


async def test_the_journal_a_page_at_a_time_from_both(
    both: tuple[admin.Admin, admin.Admin], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.admin import _http

    monkeypatch.setattr(_http, "_PAGE", 3)  # over HTTP, a page longer than that is several
    local = both[0]
    run_id = await local.start("tests.serve.flows:counter", [4])
    await local.ended(run_id)
    journal = (await local.run_detail(run_id)).events
    for backend in both:
        whole = await backend.journal_page(run_id)
        assert whole == admin.EventPage(run_id, journal, len(journal), False)
        page = await backend.journal_page(run_id, start=2, limit=5)
        assert page == admin.EventPage(run_id, journal[2:7], 7, True)
        assert page.to_json() == {
            "run_id": run_id, "events": journal[2:7], "next_start": 7, "more": True,
        }  # fmt: skip
        with pytest.raises(wf.RunNotFound):
            await backend.journal_page("wrun_00000000000000000000000000")
        for bad in ({"start": -1}, {"limit": 0}):
            with pytest.raises(wf.UsageError, match="at least"):
                await backend.journal_page(run_id, **bad)


async def test_over_http_a_record_and_a_watch_never_fetch_the_whole_journal(
    both: tuple[admin.Admin, admin.Admin], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf._remote import RemoteClient

    asked: list[tuple[str, Any]] = []
    call = RemoteClient.call

    async def spy(self: RemoteClient, method: str, path: str, **kwargs: Any) -> Any:
        asked.append((path, kwargs.get("params")))
        return await call(self, method, path, **kwargs)

    monkeypatch.setattr(RemoteClient, "call", spy)
    http = both[1]
    run_id = await http.start("tests.serve.flows:counter", [3])
    assert [event.kind async for event in http.watch(run_id)][-1] == "completed"
    assert (await http.ended(run_id)).status is wf.RunStatus.COMPLETED
    assert (await http.settle(run_id)).status is wf.RunStatus.COMPLETED
    details = [params for path, params in asked if path == f"/runs/{run_id}"]
    assert details and all(params == {"events": "false"} for params in details)


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


async def test_listing_filters_pages_and_searches_alike(
    both: tuple[admin.Admin, admin.Admin],
) -> None:
    local, http = both
    started = [await local.start("tests.serve.flows:adder", [n, n]) for n in range(3)]
    parent = await http.start("tests.serve.flows:parent", [2])  # children that sleep an hour
    for run_id in started:
        await local.ended(run_id)
    await http.settle(parent)
    children = (await local.run_detail(parent)).children
    assert len(children) == 2
    queries: list[dict[str, object]] = [
        {"workflow": "tests.serve.flows:adder"},
        {"workflow": "tests.serve.flows:adder", "limit": 2},
        {"parent_id": parent},
        {"status": ["completed", "failed"], "limit": 3},
        {"search": started[1][-8:]},
        {"search": "PARENT"},
    ]
    for query in queries:
        assert await local.list_runs(**query) == await http.list_runs(**query), query  # type: ignore[arg-type]
    # Paging: each backend's next_before walks the same pages, newest first.
    for backend in (local, http):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await backend.list_runs(limit=2, before=cursor)
            seen += [r.id for r in page.runs]
            cursor = page.next_before
            if cursor is None:
                break
        assert seen == [r.id for r in (await local.list_runs(limit=50)).runs]
        assert set(seen) == {*started, parent, *(c.id for c in children)}
    assert {r.id for r in (await http.list_runs(parent_id=parent)).runs} == {c.id for c in children}


async def test_start_reads_input_as_wf_run_does(backend: admin.Admin) -> None:
    by_name = await backend.start("tests.serve.flows:adder", {"a": 2, "b": 3})
    by_position = await backend.start("tests.serve.flows:adder", [4, 5])
    single = await backend.start("tests.serve.flows:sleeper", 0)
    outputs = [(await backend.ended(r)).output for r in (by_name, by_position, single)]
    assert outputs[:2] == [5, 9]
    chosen = await backend.start("tests.serve.flows:adder", [1, 1], run_id="wrun_chosen_1")
    assert chosen == "wrun_chosen_1"
    assert (await backend.ended(chosen)).output == 2
    # The same id and input again is the same run; another input is a conflict.
    assert await backend.start("tests.serve.flows:adder", [1, 1], run_id=chosen) == chosen
    with pytest.raises((wf.RunAlreadyExists, wf.UsageError)):
        await backend.start("tests.serve.flows:adder", [2, 2], run_id=chosen)
    with pytest.raises(wf.UsageError):
        await backend.start("tests.serve.flows:add", [1, 2])  # a step, not a workflow


async def test_schedules_are_set_listed_and_removed(backend: admin.Admin) -> None:
    yearly = "0 0 1 1 *"  # never fires while the test runs
    made = await backend.set_schedule(
        "nightly-add", "tests.serve.flows:adder", input=[1, 2], cron=yearly, tz="Europe/Paris"
    )
    assert (made.id, made.cron, made.tz, made.workflow) == (
        "nightly-add",
        yearly,
        "Europe/Paris",
        "tests.serve.flows:adder",
    )
    assert made.next_run is not None
    rows = await backend.list_schedules()
    assert [(r["id"], r["cron"], r["last_run_status"]) for r in rows] == [
        ("nightly-add", yearly, None)
    ]
    with pytest.raises(wf.UsageError):
        await backend.set_schedule("bad", "tests.serve.flows:adder", input=[1, 2], cron="nope")
    with pytest.raises(wf.UsageError):
        await backend.set_schedule("bad", "tests.serve.flows:adder", input=["x"], cron=yearly)
    assert await backend.remove_schedule("nightly-add") is True
    assert await backend.remove_schedule("nightly-add") is False
    assert await backend.list_schedules() == []


async def test_schedules_are_paused_and_resumed(backend: admin.Admin) -> None:
    yearly = "0 0 1 1 *"
    await backend.set_schedule("y", "tests.serve.flows:adder", input=[1, 2], cron=yearly)
    paused = await backend.pause_schedule("y")
    assert paused is not None and (paused.paused, paused.next_run) == (True, None)
    [row] = await backend.list_schedules()
    assert (row["paused"], row["next_run"]) == (True, None)
    resumed = await backend.resume_schedule("y")
    assert resumed is not None and not resumed.paused and resumed.next_run is not None
    assert await backend.pause_schedule("none") is None
    assert await backend.resume_schedule("none") is None
    with pytest.raises(wf.UsageError, match=r"^schedule id: "):
        await backend.pause_schedule("a/b")


@pytest.mark.parametrize("schedule_id", ["", "..", "a/b", "-x"])
async def test_an_id_that_is_no_schedule_id_is_the_same_error(
    backend: admin.Admin, schedule_id: str
) -> None:
    """Over HTTP, "" or ".." named another route (a 307 read as no answer), "a/b" a 404 read
    as a missing run."""
    with pytest.raises(wf.UsageError, match=r"^schedule id: "):
        await backend.remove_schedule(schedule_id)
    with pytest.raises(wf.UsageError, match=r"^schedule id: "):
        await backend.set_schedule(
            schedule_id, "tests.serve.flows:adder", input=[1, 2], cron="0 0 1 1 *"
        )


@pytest.mark.parametrize(
    ("filters", "says"),
    [
        ({"workflow": ""}, "a workflow cannot be empty"),
        ({"group": ""}, "a group cannot be empty"),
        ({"group": "a\tb"}, "a group 'a\\tb' holds a control character"),
        ({"queue": "q" * 600}, "a queue is 600 characters long"),
    ],
)
async def test_a_filter_that_is_no_name_is_the_same_error(
    backend: admin.Admin, filters: dict[str, str], says: str
) -> None:
    """Locally "" or a group with a tab listed no run (or every run); over HTTP the server
    refused some of them: both backends now say what is wrong."""
    with pytest.raises(wf.UsageError) as raised:
        await backend.list_runs(**filters)  # type: ignore[arg-type]
    assert str(raised.value).startswith(says), raised.value


async def test_a_schedule_without_cron_or_with_an_unknown_option_is_a_usage_error(
    backend: admin.Admin,
) -> None:
    with pytest.raises(wf.UsageError, match=r"^cron: an expression is required"):
        await backend.set_schedule("s", "tests.serve.flows:adder", input=[1, 2])
    with pytest.raises(wf.UsageError, match="'bogus'"):
        await backend.set_schedule(
            "s", "tests.serve.flows:adder", input=[1, 2], cron="0 0 1 1 *", bogus=1
        )


async def test_a_target_that_does_not_load_is_a_load_error_on_both_backends(
    backend: admin.Admin,
) -> None:
    for target in ("tests.serve.flows:nope", "tests.serve.flows"):
        with pytest.raises(wf.LoadError):
            await backend.start(target, [1, 2])


async def test_an_empty_run_id_is_no_run_on_either_backend(backend: admin.Admin) -> None:
    """Not "every run" (hooks) nor a damaged record (settle) over HTTP."""
    for call in (backend.hook_page(""), backend.settle("")):
        with pytest.raises(wf.UsageError, match="invalid run id"):
            await call


async def test_store_upkeep_and_deployments(backend: admin.Admin) -> None:
    run_id = await backend.start("tests.serve.flows:adder", [1, 2])
    await backend.ended(run_id)
    stats = await backend.store_stats()
    assert (stats.runs["completed"], stats.schedules) == (1, 0)
    assert await backend.verify() == []
    found, _any, truncated = await backend.deployments()
    assert not truncated
    assert [(d.deployment, d.runs) for d in found] == [(None, {"completed": 1})]
    kept = await backend.gc(older_than="1d")
    assert (kept.deleted, kept.scanned) == ([], 1)
    dry = await backend.gc(older_than="0s", dry_run=True)
    assert (dry.deleted, dry.dry_run) == ([run_id], True)
    assert (await backend.store_stats()).runs["completed"] == 1
    done = await backend.gc(older_than="0s", statuses=["completed"])
    assert done.deleted == [run_id]
    with pytest.raises(wf.ResultExpired):
        await backend.run_detail(run_id)
    with pytest.raises(wf.UsageError):
        await backend.gc(older_than="soon")


async def test_upkeep_answers_are_the_same_from_both(
    both: tuple[admin.Admin, admin.Admin],
) -> None:
    local, http = both
    await local.set_schedule("yearly", "tests.serve.flows:adder", input=[1, 2], cron="0 0 1 1 *")
    await local.ended(await http.start("tests.serve.flows:failing", ["x"]))
    assert await local.list_schedules() == await http.list_schedules()
    assert await local.store_stats() == await http.store_stats()
    assert await local.deployments() == await http.deployments()
    assert await local.verify() == await http.verify()
    assert await local.gc(older_than="0s", dry_run=True) == await http.gc(
        older_than="0s", dry_run=True
    )


async def test_cancelling_a_tree_gives_every_run_root_first(backend: admin.Admin) -> None:
    parent = await backend.start("tests.serve.flows:parent", [2])
    await backend.settle(parent)
    children = [c.id for c in (await backend.run_detail(parent)).children]
    assert len(children) == 2
    for child in children:
        await backend.settle(child)
    results = await backend.cancel(parent, wait=True, children=True)
    assert results[0].run_id == parent
    assert {r.run_id for r in results[1:]} == set(children)
    assert {(r.sent, r.status, r.undriven) for r in results} == {(True, "cancelled", None)}
    for run_id in (parent, *children):
        assert (await backend.ended(run_id)).status is wf.RunStatus.CANCELLED
    again = await backend.cancel(parent, children=True)
    assert {(r.sent, r.status) for r in again} == {(False, "cancelled")}


def test_both_backends_have_every_method_of_the_protocol() -> None:
    """A method added to ``wf.admin.Admin`` is one both backends answer (the tests above call
    each of them on both)."""
    import inspect

    methods = {
        name
        for name, member in vars(admin.Admin).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    assert {"list_runs", "set_schedule", "gc", "verify", "deployments"} <= methods
    for backend in (admin.LocalAdmin, admin.HttpAdmin):
        for name in methods:
            mine = inspect.signature(getattr(backend, name))
            theirs = inspect.signature(getattr(admin.Admin, name))
            assert list(mine.parameters) == list(theirs.parameters), (backend, name)


async def test_every_kind_of_run_reads_the_same_from_both(
    both: tuple[admin.Admin, admin.Admin],
) -> None:
    local, http = both
    waiting = await http.start("tests.serve.flows:approval", ["same"])
    parent = await http.start("tests.serve.flows:parent", [1])
    sleeping = await http.start("tests.serve.flows:sleeper", [3600])
    streamed = await http.start("tests.serve.flows:streaming", [2])
    talked = await http.start("tests.serve.flows:talker", ["same"])
    for run_id in (waiting, parent, sleeping):
        await http.settle(run_id)
    for run_id in (streamed, talked):
        await http.ended(run_id)
    (child,) = (await http.run_detail(parent)).children
    await http.settle(child.id)
    for run_id in (waiting, parent, child.id, sleeping, streamed, talked):
        here, there = await local.run_detail(run_id), await http.run_detail(run_id)
        assert here.to_json(spans=True) == there.to_json(spans=True), run_id
        assert explain_json(here) == explain_json(there), run_id
        here_logs = [e async for e in local.follow_logs(run_id)]
        assert here_logs == [e async for e in http.follow_logs(run_id)], run_id


def explain_json(detail: admin.RunDetail) -> object:
    """The explanation of a detail, as JSON."""
    return admin.explain(detail).to_json()


async def test_a_missing_stream_is_the_same_error_from_both(backend: admin.Admin) -> None:
    run_id = await backend.start("tests.serve.flows:streaming", [1])
    await backend.ended(run_id)
    with pytest.raises(wf.StreamNotFound) as missing:
        [chunk async for chunk in backend.follow_stream(run_id, "nope", follow=False)]
    assert (missing.value.run_id, missing.value.name, missing.value.streams) == (
        run_id,
        "nope",
        ["default"],
    )
    assert str(missing.value) == f"run {run_id} has no stream 'nope' (its streams: 'default')"


async def test_errors_say_the_same_from_both(both: tuple[admin.Admin, admin.Admin]) -> None:
    local, http = both
    done = await local.start("tests.serve.flows:adder", [1, 2])
    waiting = await local.start("tests.serve.flows:approval", ["errs"])
    await local.ended(done)
    await http.settle(waiting)
    missing = "wrun_00000000000000000000000000"
    calls: list[Callable[[admin.Admin], Awaitable[object]]] = [
        lambda b: b.run_detail(missing),
        lambda b: b.explain(missing),
        lambda b: b.cancel(missing),
        lambda b: b.wake(missing),
        lambda b: b.retry(done),
        lambda b: b.list_hooks(missing),
        lambda b: b.resume_hook("no-such-token", None),
        lambda b: b.resume_hook("approve:errs", {"approved": "?"}),
        lambda b: b.set_schedule("s", "tests.serve.flows:adder", input=[1, 2], cron="nope"),
        lambda b: b.set_schedule(
            "s", "tests.serve.flows:adder", input=[1, 2], cron="0 0 1 1 *", tz="Mars/Base"
        ),
        lambda b: b.remove_schedule("not a schedule id!"),
        lambda b: b.gc(older_than="soon"),
        lambda b: b.gc(statuses=["running"]),
        lambda b: b.start("tests.serve.flows:add", [1, 2]),
    ]
    for number, call in enumerate(calls):
        raised = []
        for backend in (local, http):
            with pytest.raises(wf.WFError) as error:
                await call(backend)
            raised.append((type(error.value).__name__, str(error.value)))
        assert raised[0] == raised[1], number


async def test_a_listing_is_checked_alike_and_pages_past_the_servers_bound(
    both: tuple[admin.Admin, admin.Admin],
) -> None:
    local, http = both
    await local.ended(await local.start("tests.serve.flows:adder", [1, 2]))
    bad: list[dict[str, Any]] = [
        {"status": ["sleepy"]},
        {"limit": 0},
        {"before": "../etc"},
        {"parent_id": "../x"},
        {"before": "never-created"},
        {"before": "wrun_00000000000000000000000000", "search": "adder"},
    ]
    for query in bad:
        raised = []
        for backend in (local, http):
            with pytest.raises(wf.UsageError) as error:
                await backend.list_runs(**query)
            raised.append(str(error.value))
        assert raised[0] == raised[1], query
    # More than the server answers at once (500 runs a request): the same page.
    assert await local.list_runs(limit=100_000) == await http.list_runs(limit=100_000)
    assert await local.list_runs(status=[wf.RunStatus.COMPLETED]) == await http.list_runs(
        status=["completed"]
    )


async def test_a_long_page_over_http_is_several_requests(
    both: tuple[admin.Admin, admin.Admin], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.admin import _http

    local, http = both
    for n in range(5):
        await local.ended(await local.start("tests.serve.flows:adder", [n, n]))
    monkeypatch.setattr(_http, "_PAGE", 2)  # the server's bound, made small
    for limit in (1, 2, 3, 4, 5, 6):
        assert await local.list_runs(limit=limit) == await http.list_runs(limit=limit), limit
        for search in ("adder", "wrun_"):  # by workflow name, by a part of the ids
            here = await local.list_runs(search=search, limit=limit)
            assert here == await http.list_runs(search=search, limit=limit), (search, limit)
            assert len(here.runs) == min(limit, 5)


async def test_a_kind_of_usage_error_is_the_same_class_from_both(
    both: tuple[admin.Admin, admin.Admin],
) -> None:
    local, http = both
    raised = []
    for backend in (local, http):
        with pytest.raises(wf.UsageError) as error:
            await backend.start("tests.serve.flows:adder", {"z": 1})
        raised.append((type(error.value), str(error.value)))
    assert raised[0] == raised[1]
    assert raised[0][0] is wf.InputValidationError


async def test_a_damaged_run_is_left_out_of_a_page_and_named(
    backend: admin.Admin, live: Api
) -> None:
    ids = [await backend.start("tests.serve.flows:adder", [n, 1]) for n in range(3)]
    for run_id in ids:
        await backend.ended(run_id)
    damage_local_run(live.engine.store, ids[1])
    page = await backend.list_runs(limit=10)
    assert [r.id for r in page.runs] == [ids[2], ids[0]]
    [fault] = page.damaged
    assert (fault.kind, fault.item) == ("run", ids[1])
    assert ids[1] in fault.where and "not valid JSON" in fault.reason
    searched = await backend.list_runs(search="adder", limit=10)
    assert ([r.id for r in searched.runs], [f.item for f in searched.damaged]) == (
        [ids[2], ids[0]],
        [ids[1]],
    )
    healthy = await backend.list_runs(status=["failed"], limit=10)
    assert (healthy.runs, healthy.damaged) == ([], [])


async def test_a_damaged_schedule_is_left_out_and_named_by_both_backends(
    both: tuple[admin.Admin, admin.Admin], live: Api
) -> None:
    local, http = both
    for schedule_id in ("a", "b"):
        await local.set_schedule(
            schedule_id, "tests.serve.flows:adder", input=[1, 2], cron="0 0 1 1 *"
        )
    # The server's worker hears of a schedule file written elsewhere and would meet the damage
    # itself (and rightly note it): stopped first, so that only the pages meet it here.
    live.app.state.worker.stop()
    await asyncio.sleep(0.2)  # its loop ends at its next turn
    damage_local_schedule(live.engine.store, "a")
    page = await local.schedule_page()
    assert page == await http.schedule_page()
    assert [row["id"] for row in page.schedules] == ["b"]
    [fault] = page.damaged
    assert fault.kind == "schedule file" and fault.where == live.engine.store.schedule_location("a")
    assert "not a schedule" in fault.reason
    assert await http.list_schedules() == page.schedules
    # What the pages met is theirs to say: the server's worker takes none of it as its own.
    assert not live.engine.store.faults.of_kind("schedule file")


async def test_a_damaged_runs_detail_is_the_same_error_from_both_backends(
    backend: admin.Admin, live: Api
) -> None:
    run_id = await backend.start("tests.serve.flows:adder", [1, 1])
    await backend.ended(run_id)
    damage_local_run(live.engine.store, run_id)
    with pytest.raises(wf.StoreCorrupted, match=r"journal\.jsonl"):
        await backend.run_detail(run_id)


async def test_start_applies_run_options_on_both_backends(
    both: tuple[admin.Admin, admin.Admin],
) -> None:
    import datetime as dt

    local, http = both
    at = dt.datetime(2099, 1, 1, 9, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    given: list[dict[str, Any]] = [
        {"delay": 7200, "priority": 9, "group": "g", "max_attempts": 3},
        {"at": at, "priority": 2},
        {"at": at.isoformat()},
    ]
    for options in given:
        queued = []
        for backend in (local, http):
            run_id = await backend.start("tests.serve.flows:adder", [1, 2], options=options)
            detail = await backend.run_detail(run_id)
            queued.append(
                (
                    detail.run.status,
                    detail.run.wake_at is not None,
                    detail.run.priority,
                    detail.run.group,
                    detail.run.max_attempts,
                )
            )
        assert queued[0] == queued[1], options
        assert queued[0][:2] == (wf.RunStatus.PENDING, True), options
    # An id that exists already, started with unique: the same error from both.
    await local.start("tests.serve.flows:sleeper", [3600], run_id="u1")
    raised = []
    for backend in (local, http):
        with pytest.raises(wf.RunAlreadyExists) as error:
            await backend.start(
                "tests.serve.flows:sleeper", [3600], run_id="u1", options={"unique": True}
            )
        raised.append(str(error.value))
    assert raised[0] == raised[1] == "run 'u1' exists already (unique start)"
    for backend in (local, http):
        with pytest.raises(wf.UsageError) as bad:
            await backend.start("tests.serve.flows:adder", [1, 2], options={"speed": 1})
        raised.append(str(bad.value))
    assert raised[2] == raised[3]


@pytest_asyncio.fixture
async def undriven(store: wf.store.Store) -> AsyncIterator[tuple[admin.Admin, admin.Admin]]:
    """Both backends over an engine that must not drive: a local one switched off, and a
    ``wf serve --no-worker`` app (``create_app(drive=False)``) served by uvicorn."""
    from tests.serve.conftest import served
    from wf._remote import RemoteClient
    from wf.serve import create_app

    here = wf.Engine(store)
    here.may_drive = False
    serving = wf.Engine(store)
    async with served(create_app(serving, drive=False)) as url:
        yield admin.LocalAdmin(here), admin.HttpAdmin(RemoteClient(url))
        assert not here.drivers and not serving.drivers  # nothing was ever driven


async def test_a_backend_that_must_not_drive_never_drives_a_run(
    undriven: tuple[admin.Admin, admin.Admin], store: wf.store.Store
) -> None:
    import asyncio

    for backend in undriven:
        assert (await backend.store_info()).drives is False
        pending = await backend.start("tests.serve.flows:adder", [1, 2])
        woken = await backend.wake(pending)
        assert (woken.sent, woken.status) == (True, "pending")
        [cancelled] = await backend.cancel(pending)
        assert (cancelled.sent, cancelled.status) == (True, "pending")
        # A run waiting on a hook, driven up to it by an engine that drives (a worker).
        waiting = await backend.start("tests.serve.flows:approval", [f"nd-{id(backend)}"])
        async with admin.local(store) as worker:
            assert (await worker.settle(waiting)).status is wf.RunStatus.SUSPENDED
            await backend.resume_hook(f"approve:nd-{id(backend)}", {"approved": True, "by": "x"})
            # The payload waits in the inbox: the run has not settled until a worker takes it.
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await backend.settle(waiting)
            settling = asyncio.ensure_future(backend.settle(waiting))
            assert (await worker.ended(waiting)).status is wf.RunStatus.COMPLETED
            async with asyncio.timeout(10):
                assert (await settling).status is wf.RunStatus.COMPLETED
        assert (await backend.run_detail(pending)).run.status is wf.RunStatus.PENDING


async def test_a_deleted_run_is_result_expired_to_every_reader_on_both_backends(
    backend: admin.Admin,
) -> None:
    run_id = await backend.start("tests.serve.flows:adder", [1, 2], run_id="gone-1")
    await backend.ended(run_id)
    assert (await backend.gc(older_than="0s", statuses=["completed"])).deleted == [run_id]

    async def drained(items: AsyncIterator[Any]) -> list[Any]:
        return [item async for item in items]

    readers: list[Callable[[], Awaitable[Any]]] = [
        lambda: backend.run_detail(run_id),
        lambda: backend.journal_page(run_id),
        lambda: drained(backend.follow_logs(run_id)),
        lambda: drained(backend.follow_stream(run_id, follow=False)),
        lambda: drained(backend.watch(run_id)),
        lambda: backend.list_hooks(run_id),
        # The id stays the deleted run's while its tombstone is kept: never run again.
        lambda: backend.start("tests.serve.flows:adder", [1, 2], run_id=run_id),
    ]
    for read in readers:
        with pytest.raises(wf.ResultExpired) as caught:
            await read()
        assert caught.value.run_id == run_id and caught.value.deleted_at is not None


async def test_what_upkeep_and_a_detail_leave_out_as_damaged_is_named_by_both_backends(
    both: tuple[admin.Admin, admin.Admin], live: Api
) -> None:
    from pathlib import Path

    local, http = both
    ids = [await local.start("tests.serve.flows:adder", [n, 1]) for n in range(2)]
    for run_id in ids:
        await local.ended(run_id)
    waiting = await local.start("tests.serve.flows:approval", ["d"])
    await local.settle(waiting)
    live.app.state.worker.stop()  # only the calls below meet the damage (as in the tests above)
    await asyncio.sleep(0.2)
    damage_local_run(live.engine.store, ids[1])
    hooks = (Path(live.engine.store.root) / "hooks").glob("*.json")  # type: ignore[attr-defined]
    [hook] = [p for p in hooks if b"approve:d" in p.read_bytes()]
    hook.write_bytes(b"[1]")

    await local.set_schedule("s", "tests.serve.flows:adder", input=[1, 2], cron="0 0 1 1 *")
    damage_local_schedule(live.engine.store, "s")
    # With a progress bar (wf gc on a terminal) the sweep counts the runs first: a damaged
    # schedule met there is verify's to name, not a log line of gc's.
    swept = await local.gc(older_than="0s", dry_run=True, on_progress=lambda *_: None)
    assert not live.engine.store.faults.of_kind("schedule file")
    assert swept == await http.gc(older_than="0s", dry_run=True)
    assert swept.deleted == [ids[0]] and [f.item for f in swept.damaged] == [ids[1]]
    assert swept.to_json()["damaged"] == [swept.damaged[0].to_json()]
    page = await local.deployment_page()
    assert page == await http.deployment_page()
    assert [f.item for f in page.damaged] == [ids[1]]
    assert (page.deployments, page.workers_of_any_deployment, page.truncated) == tuple(
        await http.deployments()
    )
    detail = await local.run_detail(waiting)
    remote = await http.run_detail(waiting)
    assert (detail.hooks, remote.hooks) == ([], [])
    [fault] = detail.damaged
    assert (fault.kind, fault.where) == ("hook", str(hook)) and remote.damaged == [fault]
    assert admin.detail_json(detail)["damaged"] == [fault.to_json()]
    # Named to the caller, not taken by the store (or a server's log) as its own find.
    assert not live.engine.store.faults.of_kind("hook")
    assert ids[1] not in live.engine.store.faults.of_kind("run")


async def test_step_logs_a_page_at_a_time_from_both(
    both: tuple[admin.Admin, admin.Admin], monkeypatch: pytest.MonkeyPatch
) -> None:
    local, http = both
    talker = await local.start("tests.serve.flows:talker", ["ada"])
    await local.ended(talker)
    whole = await local.log_page(talker)
    assert whole == await http.log_page(talker)
    assert whole.entries and (whole.status, whole.more) == ("completed", False)
    assert whole.next_start == len(whole.entries)
    first = await local.log_page(talker, limit=1)
    assert first == await http.log_page(talker, limit=1)
    assert (first.entries, first.next_start) == (whole.entries[:1], 1)
    assert first.more == (len(whole.entries) > 1)
    assert await local.log_page(talker, step="chatty") == await http.log_page(talker, step="chatty")
    # Over HTTP a page longer than the server answers at once is several requests.
    monkeypatch.setattr("wf.admin._http._PAGE", 1)
    assert await http.log_page(talker) == whole
    for backend in both:
        with pytest.raises(wf.UsageError, match="limit must be a whole number"):
            await backend.log_page(talker, limit=0)
        with pytest.raises(wf.RunNotFound):
            await backend.log_page("no-such-run")


async def test_changes_tell_of_new_runs_and_of_a_runs_change(backend: admin.Admin) -> None:
    # The store's feed: starting runs is a change (started until the feed says so, since
    # a start before the feed is listening is not news to it).
    feed = backend.changes()
    async with contextlib.aclosing(feed):
        told = asyncio.ensure_future(anext(feed))
        for _ in range(50):
            await backend.start("tests.serve.flows:adder", [1, 2])
            done, _ = await asyncio.wait({told}, timeout=0.2)
            if done:
                break
        assert told.done(), "no change told of 50 new runs"
    # A run's feed: cancelling it is a change (its first yield may be where it is now).
    run_id = await backend.start("tests.serve.flows:approval", ["feed"])
    await backend.settle(run_id)
    feed = backend.changes(run_id)
    async with contextlib.aclosing(feed):
        told = asyncio.ensure_future(anext(feed))
        await asyncio.wait({told}, timeout=0.2)  # listening by now
        await backend.cancel(run_id)
        async with asyncio.timeout(10):
            while True:
                await told
                if (await backend.run_detail(run_id)).run.status is wf.RunStatus.CANCELLED:
                    break
                told = asyncio.ensure_future(anext(feed))
    with pytest.raises(wf.RunNotFound):
        await anext(backend.changes("wrun_nosuchrun0000000000000000"))


async def test_a_fault_tried_again_later_says_so_from_both_backends(
    both: tuple[admin.Admin, admin.Admin], live: Api
) -> None:
    """``Fault.again`` (a run whose file refused a read, skipped for now) comes over HTTP."""
    local, http = both
    ids = [await local.start("tests.serve.flows:adder", [n, 1]) for n in range(2)]
    for run_id in ids:
        await local.ended(run_id)
    live.app.state.worker.stop()
    store = live.engine.store
    # As a worker's claim notes a run one of whose files refused (EACCES): tried again later.
    store.faults.note("run", ids[1], store.run_location(ids[1]), "Permission denied", again=True)
    damage_local_run(store, ids[1])
    page = await local.list_runs(limit=10)
    [fault] = page.damaged
    assert (fault.item, fault.again) == (ids[1], True)
    assert await http.list_runs(limit=10) == page


async def test_the_listing_tells_a_cancel_no_driver_took_in_yet_as_the_detail_does(
    live: Api, both: tuple[admin.Admin, admin.Admin]
) -> None:
    local = both[0]
    live.engine.may_drive = False  # the request stays in the run's inbox
    asked = await local.start("tests.serve.flows:sleeper", [3600])
    other = await local.start("tests.serve.flows:sleeper", [3600])
    await local.cancel(asked)
    for backend in both:
        listed = {r.id: r.cancel_requested for r in (await backend.list_runs()).runs}
        assert listed == {asked: True, other: False}
        assert (await backend.run_detail(asked)).cancel_requested
        assert not (await backend.run_detail(other)).cancel_requested
