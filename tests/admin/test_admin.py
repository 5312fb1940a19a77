"""``wf.admin`` over real runs: pages of runs, a run's detail, the explainer, control."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import wf
from wf import Engine, StoreCorrupted, admin
from wf.store import RunRecord, Schedule
from wf.store._ids import new_run_id
from wf.store.memory import MemoryStore


@wf.step(max_retries=2, backoff=1.0)
def flaky(n: int) -> int:
    if wf.step_id() and n < 0:
        raise ValueError("negative")
    return n * 2


@wf.workflow
async def doubling(n: int) -> int:
    return await flaky(n)


@wf.workflow
async def waits_on_hook() -> str:
    hook = wf.create_hook(dict, token="approve-me")
    payload = await hook.next()
    return str(payload["by"])


@wf.step
async def write_lines(count: int) -> None:
    async with wf.stream_writer() as writer:
        for i in range(count):
            await writer.write(f"line {i}\n".encode())


@wf.workflow
async def streaming(count: int) -> None:
    await write_lines(count)


@wf.workflow
async def parent_of_sleepers(n: int) -> None:
    children = [await wf.start(sleeper) for _ in range(n)]
    for child in children:
        await child.result()


@wf.workflow
async def sleeper() -> None:
    await wf.sleep(3600)


_RELEASE = asyncio.Event()


@wf.step
async def held() -> None:
    await _RELEASE.wait()


@wf.workflow
async def holding() -> None:
    await held()


async def _running(engine: Engine) -> str:
    """A run of ``holding`` inside its step, driven here."""
    run = await wf.start(holding)
    for _ in range(5000):
        detail = await admin.run_detail(engine.store, run.id)
        if detail.steps and detail.steps[0].status == "running":
            return run.id
        await asyncio.sleep(0.001)
    raise AssertionError("the run never entered its step")


async def test_every_front_end_sees_whether_a_running_runs_driver_is_gone(
    wf_engine: Engine,
) -> None:
    run_id = await _running(wf_engine)
    alive = await admin.run_detail(
        wf_engine.store, run_id, probe=admin.LivenessProbe(wf_engine.store)
    )
    assert alive.driver_gone is False
    assert admin.explain(alive).reasons[0].kind == "step_running"
    driver = wf_engine.drivers[run_id]
    driver.cancel()  # its process "dies": the lock goes with it
    await asyncio.wait({driver})
    gone = await admin.run_detail(
        wf_engine.store, run_id, probe=admin.LivenessProbe(wf_engine.store)
    )
    assert gone.driver_gone is True
    reasons = admin.explain(gone).reasons
    assert [(r.kind, r.tone) for r in reasons[:1]] == [("driver_gone", "error")]
    assert reasons[1].kind == "step_running" and reasons[1].stale
    # One document for wf inspect --json and the terminal UI, its layout for the HTTP API.
    document = admin.detail_json(gone)
    assert document["driver_gone"] is True
    assert document["why"].startswith("running, but its driver process is gone")
    assert document["explanation"]["reasons"][0]["kind"] == "driver_gone"
    answer = admin.http_detail_json(gone)
    assert answer["driver_gone"] is True and answer["why"] == document["explanation"]
    assert answer["id"] == run_id and answer["stream_info"] == document["streams"] == {}


async def test_list_runs_pages_newest_first_and_searches(wf_engine: Engine) -> None:
    runs = [await wf.start(doubling, i, detach=True) for i in range(5)]
    first = await admin.list_runs(wf_engine.store, limit=3)
    assert [r.id for r in first.runs] == [r.id for r in reversed(runs)][:3]
    assert first.next_before == first.runs[-1].id
    rest = await admin.list_runs(wf_engine.store, limit=3, before=first.next_before)
    assert [r.id for r in rest.runs] == [runs[1].id, runs[0].id]
    assert rest.next_before is None
    found = await admin.list_runs(wf_engine.store, search=runs[2].id[-6:].upper())
    assert [r.id for r in found.runs] == [runs[2].id]
    assert (await admin.list_runs(wf_engine.store, search="doubling")).runs
    assert not (await admin.list_runs(wf_engine.store, search="nothing-like-it")).runs
    assert not (await admin.list_runs(wf_engine.store, status=["failed"])).runs


async def test_a_page_before_a_run_that_never_existed_is_an_error(wf_engine: Engine) -> None:
    """``before`` names no run: an error naming it, never an empty page that reads as an
    empty store; the oldest run, or one deleted since (its tombstone kept), pages as ever."""
    runs = [await wf.start(doubling, i, detach=True) for i in range(2)]
    for before in ("never-created", new_run_id()):
        for query in ({}, {"status": ["failed"]}, {"search": "doubling"}, {"search": "wrun_"}):
            with pytest.raises(wf.UsageError) as error:
                await admin.list_runs(wf_engine.store, before=before, **query)
            assert str(error.value) == f"before: no run with id {before!r}", query
    oldest = await admin.list_runs(wf_engine.store, before=runs[0].id)
    assert oldest.runs == [] and oldest.next_before is None
    assert not (await admin.list_runs(wf_engine.store, before=runs[1].id, status=["failed"])).runs


async def test_a_page_before_a_run_whose_record_is_damaged_is_empty_not_an_error(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run exists, its record cannot be read (a scanning search hands such a run out as
    its ``search_further``): the stores page past it, and so does the listing."""
    oldest = (await wf.start(doubling, 0, detach=True)).id
    store = wf_engine.store
    real = store.get_run

    async def get_run(run_id: str) -> Any:
        if run_id == oldest:
            raise wf.StoreCorrupted(f"run {oldest}: its record cannot be read")
        return await real(run_id)

    monkeypatch.setattr(store, "get_run", get_run)
    page = await admin.list_runs(store, before=oldest)
    assert page.runs == [] and page.next_before is None


async def test_a_failed_run_is_explained_with_its_step_and_attempts(wf_engine: Engine) -> None:
    run = await wf.start(doubling, -1)
    with pytest.raises(wf.RunFailed):
        await run.result()
    detail = await admin.run_detail(wf_engine.store, run.id)
    [step] = detail.steps
    assert (step.name, step.status, step.attempts) == ("flaky", "failed", 3)
    assert [a.status for a in step.spans] == ["retried", "retried", "failed"]
    assert all(a.finished_at is not None for a in step.spans)
    assert [f.attempt for f in detail.errors if f.op == 0] == [1, 2, 3]
    [reason] = admin.explain(detail).reasons
    assert (reason.kind, reason.name, reason.attempt) == ("failed", "flaky", 3)
    assert reason.error is not None and reason.error["message"] == "negative"
    assert detail.to_json(spans=True)["steps"][0]["spans"][0]["status"] == "retried"


async def test_a_run_on_a_hook_is_explained_and_resumed(wf_engine: Engine) -> None:
    run = await wf.start(waits_on_hook)
    await run.settle()
    detail = await admin.run_detail(wf_engine.store, run.id)
    why = admin.explain(detail)
    assert why.status == "suspended"
    assert [(r.kind, r.name) for r in why.reasons] == [("hook", "approve-me"), ("no_timer", None)]
    assert why.to_json()["reasons"][0] == {"kind": "hook", "tone": "wait", "name": "approve-me"}
    assert await admin.resume_hook(wf_engine, "approve-me", {"by": "ada"}) == run.id
    assert await run.result() == "ada"


async def test_cancel_tree_cancels_the_parent_and_every_child(wf_engine: Engine) -> None:
    parent = await wf.start(parent_of_sleepers, 2)
    await parent.settle()
    results = await admin.cancel_tree(wf_engine, parent.id, wait=True)
    assert results[0].run_id == parent.id
    assert len(results) == 3
    assert {(r.sent, r.status) for r in results} == {(True, "cancelled")}
    again = await admin.cancel(wf_engine, parent.id)
    assert (again.sent, again.status) == (False, "cancelled")


UNDONE: list[str] = []


@wf.step
def undo(name: str) -> None:
    UNDONE.append(name)


@wf.step
def done(name: str) -> str:
    return name


@wf.workflow
async def nested(name: str, depth: int) -> str:
    """A run that did a step (compensated by ``undo``), then waits on a child, or a hook."""
    await done(name)
    wf.rollback(undo, name)
    if depth == 0:
        return await wf.create_hook(str, token=f"nested-{name}").next()
    child = await wf.start(nested, name + ".child", depth - 1)
    return await child.result()


async def test_cancel_tree_winds_down_each_run_of_a_deep_tree_with_its_compensations(
    wf_engine: Engine,
) -> None:
    """cli.md's order: requests top-down (the results root first, then down the tree); each
    run ends cancelled, not failed by a cancelled child, and runs its own compensations
    once, without waiting for its children's."""
    from wf.admin._control import descendants

    UNDONE.clear()
    root = await wf.start(nested, "root", 2)
    tree: list[str] = []
    for _ in range(20):  # until the whole tree waits: the hook at the bottom
        tree = [root.id, *await descendants(wf_engine.store, root.id)]
        for run_id in tree:
            await wf.get_run(run_id).settle(timeout=5)
        statuses = [(await wf.get_run(run_id).status()).value for run_id in tree]
        if len(tree) == 3 and set(statuses) == {"suspended"}:
            break
    results = await admin.cancel_tree(wf_engine, root.id, wait=True)
    assert [r.run_id for r in results] == tree  # root first, then top-down
    assert [(r.sent, r.status) for r in results] == [(True, "cancelled")] * 3
    assert sorted(UNDONE) == ["root", "root.child", "root.child.child"]


async def test_follow_stream_reads_to_the_end_and_from_the_end(wf_engine: Engine) -> None:
    run = await wf.start(streaming, 4)
    await run.result()
    chunks = [c async for c in admin.follow_stream(wf_engine.store, run.id)]
    assert chunks == [f"line {i}\n".encode() for i in range(4)]
    last = [c async for c in admin.follow_stream(wf_engine.store, run.id, start=-1)]
    assert last == [b"line 3\n"]
    # A stream the run never opened is an error naming its streams, not an endless wait.
    with pytest.raises(wf.StreamNotFound, match=r"no stream 'typo' \(its streams: 'default'\)"):
        [c async for c in admin.follow_stream(wf_engine.store, run.id, "typo")]
    with pytest.raises(wf.RunNotFound):
        [c async for c in admin.follow_stream(wf_engine.store, "wrun_00000000000000000000000000")]


LATE = asyncio.Event()
"""What ``write_late`` waits for before it opens its stream."""


@wf.step
async def write_late(count: int) -> None:
    await LATE.wait()
    async with wf.stream_writer() as writer:
        for i in range(count):
            await writer.write(f"late {i}\n".encode())


@wf.workflow
async def streaming_late(count: int) -> None:
    await write_late(count)


class _OpensWhileWaited(MemoryStore):
    """A store whose first ``wait_for_run`` (a reader waiting for a stream not open yet)
    lets the run open its stream and write three chunks before the reader looks again."""

    async def wait_for_run(self, run_id: str, timeout: float) -> None:
        if not LATE.is_set():
            LATE.set()
            while (await self.stream_info(run_id, "default"))[0] < 3:
                await asyncio.sleep(0.01)
        await super().wait_for_run(run_id, timeout)


@pytest.mark.parametrize("reader", ["follow_stream", "read_stream"])
async def test_a_start_from_the_end_of_a_stream_not_open_yet_is_its_first_chunk(
    reader: str,
) -> None:
    """cli.md: ``--start -1`` is the last chunk there is when the follow starts: none, for a
    stream not open yet, so every chunk written after (it was the last of those the stream had
    once it was open); ``run.read_stream(start=-1)`` likewise."""
    from wf.engine._current import use_engine

    LATE.clear()
    async with wf.Engine(_OpensWhileWaited()) as engine:
        with use_engine(engine):
            run = await wf.start(streaming_late, 3)
            if reader == "follow_stream":
                chunks = [c async for c in admin.follow_stream(engine.store, run.id, start=-1)]
            else:
                chunks = [c async for c in run.read_stream(start=-1)]
            await run.result()
    assert chunks == [f"late {i}\n".encode() for i in range(3)]


def test_store_info_names_the_kind_and_hides_passwords() -> None:
    from wf.store.memory import MemoryStore

    assert admin.store_info(MemoryStore()).kind == "memory"

    class PostgresStore(MemoryStore):
        dsn = "postgresql://ada:secret@db:5432/wf"

    info = admin.store_info(PostgresStore())
    assert info.to_json() == {
        "kind": "postgres",
        "location": "postgresql://ada@db:5432/wf",
        "drives": True,  # a local backend drives what its caller waits for
        "deployment": None,  # the deployment it drives runs of (none configured here)
    }


class _Damaged(MemoryStore):
    """A store in which some items cannot be read, as damaged files would be."""

    def __init__(self) -> None:
        super().__init__()
        self.damaged: set[str] = set()

    async def get_run(self, run_id: str) -> RunRecord:
        if run_id in self.damaged:
            raise StoreCorrupted(f"run {run_id}: its record is not valid JSON")
        return await super().get_run(run_id)

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        if schedule_id in self.damaged:
            raise StoreCorrupted(f"schedule {schedule_id}: not a schedule")
        return await super().get_schedule(schedule_id)


async def test_a_damaged_neighbour_never_fails_a_runs_page_or_the_schedules() -> None:
    store = _Damaged()
    parent = RunRecord(id=new_run_id(), workflow="t:parent")
    child = RunRecord(id=new_run_id(), workflow="t:child", parent_id=parent.id, schedule_id="n")
    for run in (parent, child):
        await store.create_run(run)
    await store.save_schedule(Schedule(id="n", workflow="t:child", cron="0 0 * * *"))
    await store.save_schedule(
        Schedule(id="m", workflow="t:parent", cron="0 0 * * *", last_run_id=parent.id)
    )
    store.damaged = {parent.id, "n"}
    detail = await admin.run_detail(store, child.id)
    assert detail.parent == admin.RunLink(parent.id, None, None)
    assert detail.schedule == {"id": "n", "cron": None, "tz": None, "exists": True}
    rows = await admin.list_schedules(store)
    assert {row["id"]: row["last_run_status"] for row in rows} == {"m": "damaged", "n": None}


async def test_gc_prunes_the_webhook_deliveries_kept_past_their_day(wf_engine: Engine) -> None:
    from wf.store import DELIVERY_KEPT, WebhookDelivery

    now = wf_engine.clock.now()
    old = WebhookDelivery(
        "d-old", "tok", "wrun_x", "idempotency-key", None, now - DELIVERY_KEPT - 1
    )
    new = WebhookDelivery("d-new", "tok", "wrun_x", "idempotency-key", None, now - 60)
    for delivery in (old, new):
        await wf_engine.store.save_delivery(delivery)
    await admin.LocalAdmin(wf_engine).gc()
    assert set(await wf_engine.store.get_deliveries(["d-old", "d-new"])) == {"d-new"}


async def test_a_runs_children_are_listed_in_the_order_it_started_them(wf_engine: Engine) -> None:
    parent = await wf.start(parent_of_sleepers, 3)
    await parent.settle()
    detail = await admin.run_detail(wf_engine.store, parent.id)
    assert [(c.id, c.op) for c in detail.children] == [
        (f"{parent.id}.0", 0),
        (f"{parent.id}.1", 1),
        (f"{parent.id}.2", 2),
    ]


async def test_a_run_with_more_children_than_shown_links_its_newest_in_start_order(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.admin import _read

    monkeypatch.setattr(_read, "CHILDREN_SHOWN", 2)
    parent = await wf.start(parent_of_sleepers, 3)
    await parent.settle()
    detail = await admin.run_detail(wf_engine.store, parent.id)
    assert [c.id for c in detail.children] == [f"{parent.id}.1", f"{parent.id}.2"]


_HOLD: list[asyncio.Event] = []


@wf.step
async def never_ends() -> str:
    await asyncio.Event().wait()  # loses the race below: cancelled
    return "never"


@wf.step
async def held_after_race() -> None:
    _HOLD[1].set()
    await _HOLD[0].wait()


@wf.workflow
async def select_then_hold() -> None:
    await wf.select(never_ends(), wf.sleep(1))
    await held_after_race()
    await wf.sleep(3600)


async def test_a_step_that_lost_a_select_is_shown_cancelled_not_running(
    wf_engine: Engine,
) -> None:
    _HOLD[:] = [asyncio.Event(), asyncio.Event()]
    run = await wf.start(select_then_hold)
    await asyncio.wait_for(_HOLD[1].wait(), 10)  # the select is decided, the next step runs
    detail = await admin.run_detail(wf_engine.store, run.id)
    statuses = {row.name: row.status for row in detail.steps if row.kind == "step"}
    assert statuses == {"never_ends": "cancelled", "held_after_race": "running"}
    [loser] = [row for row in detail.steps if row.name == "never_ends"]
    assert loser.spans[-1].status == "cancelled" and loser.duration is not None
    why = admin.explain(detail)
    assert [r.name for r in why.reasons if r.kind == "step_running"] == ["held_after_race"]
    _HOLD[0].set()
    assert (await run.settle()).status == wf.RunStatus.SUSPENDED
    detail = await admin.run_detail(wf_engine.store, run.id)
    assert {row.name: row.status for row in detail.steps if row.kind == "step"} == {
        "never_ends": "cancelled",  # not "interrupted": the resumed run will not run it again
        "held_after_race": "completed",
    }


async def test_ended_with_hooks_only_returns_once_only_the_outside_finishes_the_run(
    wf_engine: Engine,
) -> None:
    # What `wf run` returns on, locally as over HTTP: a run waiting for hooks alone.
    client = admin.LocalAdmin(wf_engine)
    run = await wf.start(waits_on_hook, detach=True)
    record = await asyncio.wait_for(client.ended(run.id, hooks_only=True), 20)
    assert record.status.value == "suspended"
    assert [item["kind"] for item in record.waiting_for or []] == ["hook"]
    done = await wf.start(doubling, 2, detach=True)
    ended = await asyncio.wait_for(client.ended(done.id, hooks_only=True), 20)
    assert ended.status.value == "completed"
