"""Retention on the fake clock: the policy, what is never deleted, ResultExpired, the worker."""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import math
import os
from pathlib import Path

import pytest

import wf
from wf import Engine, Worker
from wf._config import retention_setting
from wf.engine._retention import KEEP_FOREVER, sweep
from wf.store import Store, collect_faults, lane_key, lane_of
from wf.store.local import LocalStore, _fsops
from wf.store.local._layout import SEP
from wf.testing import MockClock

DAY = 86400.0


async def swept_by_a_worker(engine: Engine, runs: int) -> Worker:
    """A worker sweeping retention every 10 ms, stopped once it deleted ``runs`` runs (or
    after about 5 s); the worker, its ``swept`` count to check."""
    worker = Worker(engine, retention_interval=0.01, schedules=False)
    task = asyncio.ensure_future(worker.run())
    for _ in range(500):
        if worker.swept == runs:
            break
        await asyncio.sleep(0.01)
    worker.stop()
    await asyncio.wait_for(task, 10)
    return worker


@wf.workflow(retention="1d")
async def short_lived(n: int) -> int:
    return n


@wf.workflow
async def plain(n: int) -> int:
    return n


@wf.workflow
async def waits(token: str) -> str:
    hook = wf.create_hook(str, token=token)
    return await hook.next()


@wf.workflow
async def parent_of_waiting_child() -> str:
    await wf.start(waits, "child-hook", detach=True)  # not awaited: the parent ends first
    return "done"


@wf.workflow
async def parent_waiting_on_hook() -> str:
    child = await wf.start(plain, 1)
    await child.result()
    hook = wf.create_hook(str, token="parent-hook")
    return await hook.next()


async def test_a_workflow_retention_deletes_its_runs_after_they_end(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    run = await wf.start(short_lived, 1)
    keep = await wf.start(plain, 2)  # no retention anywhere: kept forever
    assert await run.result() == 1 and await keep.result() == 2
    assert (await run.record()).retention == DAY
    mock_clock.jump(DAY - 1)
    assert (await sweep(wf_engine)).deleted == []
    mock_clock.jump(1)
    done = await sweep(wf_engine)
    assert done.deleted == [run.id] and done.bytes > 0
    with pytest.raises(wf.ResultExpired, match="deleted by retention") as caught:
        await run.result()
    assert isinstance(caught.value, wf.RunNotFound)
    assert caught.value.deleted_at == mock_clock.now()
    with pytest.raises(wf.ResultExpired):
        await run.status()
    assert await keep.result() == 2
    with pytest.raises(wf.RunNotFound) as unknown:
        await wf.get_run("wrun_never").result()
    assert not isinstance(unknown.value, wf.ResultExpired)


async def test_store_wide_retention_applies_to_runs_without_their_own(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    wf_engine.retention = 3600
    run = await wf.start(plain, 1)
    own = await wf.start(short_lived, 2)
    await run.result()
    await own.result()
    mock_clock.jump(3600)
    assert (await sweep(wf_engine)).deleted == [run.id]  # its own day is not over


@wf.workflow(retention=None)
async def kept_forever(n: int) -> int:
    return n


async def test_a_workflow_with_retention_none_keeps_its_runs_whatever_the_store_wide_setting(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    wf_engine.retention = 3600
    kept = await wf.start(kept_forever, 1)
    other = await wf.start(plain, 2)
    assert await kept.result() == 1 and await other.result() == 2
    assert (await kept.record()).retention == KEEP_FOREVER  # recorded: any process honours it
    assert (await other.record()).retention is None  # not given: the store-wide setting decides
    mock_clock.jump(365 * DAY)
    done = await sweep(wf_engine)
    assert done.deleted == [other.id]
    assert not done.saw_own_retention  # kept forever: nothing of its own to sweep for
    assert await kept.result() == 1
    # An explicit ``wf gc --older-than`` still deletes it: the policy is only what it replaces.
    assert (await sweep(wf_engine, older_than=DAY)).deleted == [kept.id]


async def test_live_runs_and_live_families_are_never_deleted(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    waiting = await wf.start(waits, "waiting-hook")
    await waiting.settle()
    parent = await wf.start(parent_of_waiting_child)
    assert await parent.result() == "done"
    child = (await wf_engine.store.list_runs(parent_id=parent.id))[0]
    busy_parent = await wf.start(parent_waiting_on_hook)
    await wf_engine.settle()  # the child runs, the parent waits on its hook
    finished_child = (await wf_engine.store.list_runs(parent_id=busy_parent.id))[0]
    assert finished_child.status is wf.RunStatus.COMPLETED
    mock_clock.jump(10 * DAY)
    done = await sweep(wf_engine, older_than=0)
    assert done.deleted == []
    assert done.kept_for_family == 2  # the parent of a live child, the child of a live parent
    await wf.resume_hook("waiting-hook", "x")
    await wf.get_run(child.id).settle()  # detached: driven here, up to its hook
    await wf.resume_hook("child-hook", "x")
    await wf.resume_hook("parent-hook", "y")
    await busy_parent.result()
    await waiting.result()
    await wf.get_run(child.id).result()
    done = await sweep(wf_engine, older_than=0)
    assert set(done.deleted) == {waiting.id, parent.id, child.id, busy_parent.id, finished_child.id}


async def test_sweep_filters_and_dry_run(wf_engine: Engine, mock_clock: MockClock) -> None:
    ok = await wf.start(plain, 1)
    other = await wf.start(short_lived, 2)
    await ok.result()
    await other.result()
    mock_clock.jump(60)
    dry = await sweep(wf_engine, older_than=30, dry_run=True)
    assert set(dry.deleted) == {ok.id, other.id} and dry.dry_run
    assert len(await wf_engine.store.list_runs()) == 2
    assert (await sweep(wf_engine, older_than=120)).deleted == []
    assert (await sweep(wf_engine, older_than=30, statuses=["failed"])).deleted == []
    by_name = await sweep(wf_engine, older_than=30, workflow=plain.name)
    assert by_name.deleted == [ok.id]
    with pytest.raises(wf.UsageError, match="never deleted"):
        await sweep(wf_engine, statuses=["running"])


async def test_a_worker_applies_retention_in_the_background(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    runs = [await wf.start(short_lived, n) for n in range(5)]
    for run in runs:
        await run.result()
    mock_clock.jump(DAY)
    worker = await swept_by_a_worker(wf_engine, 5)
    assert worker.swept == 5
    assert await wf_engine.store.list_runs() == []


@pytest.mark.parametrize("swallows", ["into an error", "for good"])
async def test_a_worker_stops_when_its_sweep_does_not_end_on_cancellation(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch, swallows: str
) -> None:
    """A store call that turns its cancellation into an error (or swallows it for good) does
    not keep a stopping worker waiting: the sweep loop ends on ``stop()``, and a loop that
    still does not end is left behind after ``BACKGROUND_GRACE``."""
    from wf.engine import _worker

    monkeypatch.setattr(_worker, "BACKGROUND_GRACE", 0.2)
    sweeping, released = asyncio.Event(), asyncio.Event()

    async def stubborn_sweep(*args: object, **kwargs: object) -> object:
        sweeping.set()
        while not released.is_set():
            try:
                await released.wait()
            except asyncio.CancelledError:
                if swallows == "into an error":
                    raise wf.StoreError("the server went away mid-read") from None
        raise asyncio.CancelledError  # let the test's event loop close

    monkeypatch.setattr("wf.engine._retention.sweep", stubborn_sweep)
    worker = Worker(wf_engine, retention_interval=0.01, schedules=False)
    task = asyncio.ensure_future(worker.run())
    async with asyncio.timeout(10):
        await sweeping.wait()
    worker.stop()
    async with asyncio.timeout(10):
        await task
    released.set()


async def test_a_worker_with_no_retention_anywhere_reads_no_finished_run(
    wf_engine: Engine, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No store-wide retention and no workflow here with one: the worker never sweeps (at a
    million runs, learning that there is nothing to delete would read every finished run)."""
    from wf.engine import _workflow

    mock_clock.autojump = False
    run = await wf.start(short_lived, 1)
    await run.result()
    mock_clock.jump(DAY)
    monkeypatch.setattr(_workflow, "retained_workflows", lambda: [])
    assert wf_engine.retention is None
    listed: list[object] = []
    list_runs = wf_engine.store.list_runs

    async def counted(**kwargs: object) -> object:
        if kwargs.get("statuses") and all(s.is_terminal for s in kwargs["statuses"]):  # type: ignore[attr-defined]
            listed.append(kwargs)
        return await list_runs(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(wf_engine.store, "list_runs", counted)
    worker = Worker(wf_engine, retention_interval=0.01, schedules=False)
    task = asyncio.ensure_future(worker.run())
    await asyncio.sleep(0.3)  # thirty intervals
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert worker.swept == 0 and listed == []
    assert [r.id for r in await list_runs()] == [run.id]


async def test_a_worker_sweeps_only_the_workflows_with_a_retention_of_their_own(
    wf_engine: Engine, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No store-wide retention: the worker reads the finished runs of the workflows declared
    here with a retention (through the store's workflow filter), and no others."""
    from wf.engine import _workflow

    mock_clock.autojump = False
    short = await wf.start(short_lived, 1)
    kept = await wf.start(plain, 2)
    await short.result()
    await kept.result()
    mock_clock.jump(DAY)
    monkeypatch.setattr(_workflow, "retained_workflows", lambda: [short_lived.name])
    read: list[object] = []
    list_runs = wf_engine.store.list_runs

    async def counted(**kwargs: object) -> object:
        if kwargs.get("statuses") and all(s.is_terminal for s in kwargs["statuses"]):  # type: ignore[attr-defined]
            read.append(kwargs.get("workflow"))
        return await list_runs(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(wf_engine.store, "list_runs", counted)
    worker = await swept_by_a_worker(wf_engine, 1)
    assert worker.swept == 1 and read and set(read) == {short_lived.name}
    assert [r.id for r in await list_runs()] == [kept.id]


def test_retention_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WF_RETENTION", raising=False)
    (tmp_path / "pyproject.toml").write_text('[tool.wf]\nretention = "30d"\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert retention_setting() == 30 * DAY
    monkeypatch.setenv("WF_RETENTION", "2h")
    assert retention_setting() == 7200
    monkeypatch.setenv("WF_RETENTION", "soon")
    with pytest.raises(wf.UsageError, match="WF_RETENTION"):
        retention_setting()
    monkeypatch.delenv("WF_RETENTION")
    (tmp_path / "pyproject.toml").write_text("[tool.wf]\nretention = -5\n")
    with pytest.raises(wf.UsageError, match=r"retention \(.*pyproject.toml \[tool.wf\]\)"):
        retention_setting()
    with pytest.raises(wf.UsageError, match=r"^retention"):
        wf.workflow(retention="forever")(plain.fn)


@pytest.mark.parametrize("zero", [0, 0.0, "0", "0s", "0d", dt.timedelta(0)])
def test_a_retention_of_zero_is_refused_wherever_it_is_given(
    zero: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # It would delete every result as the run ends, before anyone read it.
    with pytest.raises(wf.UsageError, match=r"^retention: 0 would delete each run's result"):
        wf.workflow(retention=zero)(plain.fn)  # type: ignore[arg-type]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WF_RETENTION", str(zero) if not isinstance(zero, dt.timedelta) else "0")
    with pytest.raises(wf.UsageError, match=r"^retention \(WF_RETENTION.*\): 0 would delete"):
        retention_setting()
    with pytest.raises(wf.UsageError, match="0 would delete"):
        wf.configure(retention=zero)  # type: ignore[arg-type]


@pytest.mark.parametrize("short", [1e-7, "0.0000001s", "0.5s", 0.999, dt.timedelta(seconds=0.5)])
def test_a_retention_under_one_second_is_refused_as_zero_is(
    short: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It deletes runs the moment they end just as 0 would; one second is the least taken."""
    with pytest.raises(wf.UsageError, match=r"^retention: .* s would delete each run's result"):
        wf.workflow(retention=short)(plain.fn)  # type: ignore[arg-type]
    monkeypatch.chdir(tmp_path)
    text = short if isinstance(short, str) else "0.0000001s"
    monkeypatch.setenv("WF_RETENTION", text)
    with pytest.raises(wf.UsageError, match=r"^retention \(WF_RETENTION.*\): .* would delete"):
        retention_setting()
    with pytest.raises(wf.UsageError, match="one second or more"):
        wf.configure(retention=short)  # type: ignore[arg-type]
    assert wf.workflow(retention="1s")(plain.fn).retention == 1.0


@pytest.mark.parametrize(
    "endless",
    [math.nan, math.inf, -math.inf, 10**400, "9" * 400, "9" * 400 + "d"],
    ids=["nan", "inf", "-inf", "int-past-float", "digits-past-float", "days-past-float"],
)
def test_a_retention_that_is_no_finite_duration_is_refused_wherever_it_is_given(
    endless: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Not kept forever without a word (inf), nor called negative (nan): keeping forever is
    spelled by leaving retention out (a workflow's ``retention=None``)."""
    said = r".* is not a finite duration .*keep runs forever.*retention=None"
    with pytest.raises(wf.UsageError, match=r"^retention: " + said):
        wf.workflow(retention=endless)(plain.fn)  # type: ignore[arg-type]
    with pytest.raises(wf.UsageError, match=said):
        wf.configure(retention=endless)  # type: ignore[arg-type]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WF_RETENTION", raising=False)
    if isinstance(endless, float):  # TOML spells them nan, inf, -inf
        (tmp_path / "pyproject.toml").write_text(f"[tool.wf]\nretention = {endless}\n")
        with pytest.raises(wf.UsageError, match=r"^retention \(.*pyproject.toml.*\): " + said):
            retention_setting()
    if isinstance(endless, str):
        monkeypatch.setenv("WF_RETENTION", endless)
        with pytest.raises(wf.UsageError, match=r"^retention \(WF_RETENTION.*\): " + said):
            retention_setting()


def test_a_huge_but_finite_retention_and_minus_zero_read_as_they_are() -> None:
    assert wf.workflow(retention=1e308)(plain.fn).retention == 1e308
    with pytest.raises(wf.UsageError, match=r"^retention: 0 would delete"):
        wf.workflow(retention=-0.0)(plain.fn)


@wf.workflow(group="lane", retention="1d")
async def laned(n: int) -> int:
    return n


def _lane_entries(store: object) -> list[str]:
    """The local store's lane entries (one empty file per place: ``<seq>+<run_id>``)."""
    assert isinstance(store, LocalStore)
    return [
        name.partition(SEP)[2]
        for lane in os.listdir(store.lanes.dir)
        if os.path.isdir(os.path.join(store.lanes.dir, lane))
        for name in os.listdir(os.path.join(store.lanes.dir, lane))
    ]


async def test_runs_deleted_by_retention_leave_their_lane(
    wf_engine: Engine, mock_clock: MockClock, store_kind: str, engine_store: Store
) -> None:
    mock_clock.autojump = False
    first = await wf.start(laned, 1, detach=True)
    if store_kind == "local":
        # A crash between the run's last record and its leaving the lane: the entry of an
        # ended run stays until a reader of the lane (none here) or its deletion removes it.
        with _fsops.inject("unlink", errno.EIO, match="lanes", times=1) as fault:
            await wf_engine.settle()  # the worker logs the error and goes on
        assert fault.hits == 1
        assert _lane_entries(engine_store) == [first.id]
    await wf_engine.settle()
    assert await first.result() == 1
    mock_clock.jump(DAY)
    assert (await sweep(wf_engine)).deleted == [first.id]
    if store_kind == "local":
        assert _lane_entries(engine_store) == []
    # The group's next run has nobody ahead of it and starts at once.
    later = await wf.start(laned, 2, detach=True)
    lane = lane_of(await later.record())
    assert lane is not None
    assert await wf_engine.store.lane_ahead(lane, later.id, 10) == []
    await wf_engine.settle()
    assert await later.result() == 2


@pytest.mark.stores("local")
async def test_a_lane_whose_head_is_gone_moves_on(wf_engine: Engine, engine_store: Store) -> None:
    # The entry of a run that does not exist (a creation that died before publishing its run,
    # or a run deleted by an older wf) at the head of the lane holds nobody back.
    store = engine_store
    assert isinstance(store, LocalStore)
    await wf.start(plain, 0, detach=True)  # the store exists
    lane = lane_key(laned.name, None, "lane")
    store.lanes.join(lane, "wrun_gone", store.sequence.take)
    runs = [await wf.start(laned, n, detach=True) for n in range(3)]
    assert await store.lane_ahead(lane, runs[0].id, 10) == []
    assert await store.lane_ahead(lane, runs[2].id, 10) == [runs[0].id, runs[1].id]
    await wf_engine.settle()
    assert [await r.result() for r in runs] == [0, 1, 2]


@pytest.mark.stores("local")
async def test_a_damaged_finished_run_never_stops_the_sweep(
    wf_engine: Engine, engine_store: Store, mock_clock: MockClock
) -> None:
    from tests.store.helpers import damage_local_run

    runs = [await wf.start(plain, n) for n in range(3)]
    for run in runs:
        await run.result()
    damage_local_run(engine_store, runs[1].id)
    mock_clock.jump(60)
    swept = await sweep(wf_engine, older_than=30)
    assert sorted(swept.deleted) == sorted([runs[0].id, runs[2].id])
    assert runs[1].id in engine_store.faults.of_kind("run")  # left alone, and said once


async def test_a_file_where_a_status_tree_belongs_never_stops_the_sweep(
    wf_engine: Engine, engine_store: Store, mock_clock: MockClock
) -> None:
    """``by-status/failed`` a file (no run has failed yet): the sweep, a dry run too, skips
    it and deletes the completed runs; it used to stop on it."""
    if not isinstance(engine_store, LocalStore):
        pytest.skip("a local store's directories")
    runs = [await wf.start(plain, n) for n in range(2)]
    for run in runs:
        await run.result()
    stray = os.path.join(engine_store.root, "by-status", "failed")
    with open(stray, "wb") as file:
        file.write(b"someone's")
    mock_clock.jump(60)
    dry = await sweep(wf_engine, older_than=30, dry_run=True)
    assert sorted(dry.deleted) == sorted(run.id for run in runs)
    swept = await sweep(wf_engine, older_than=30)
    assert sorted(swept.deleted) == sorted(run.id for run in runs)
    assert os.path.isfile(stray)


async def test_a_sweep_stops_at_a_page_that_makes_no_progress(
    wf_engine: Engine, engine_store: Store, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index fault that gives back a page already seen (a page before a run that holds
    the run) must end the sweep, not spin it: ``wf gc`` hung on one."""
    runs = [await wf.start(plain, n) for n in range(2)]
    for run in runs:
        await run.result()
    listed = engine_store.list_runs

    async def same_page(**kwargs: object) -> object:
        kwargs.pop("before", None)
        return await listed(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_store, "list_runs", same_page)
    mock_clock.jump(60)
    swept = await asyncio.wait_for(sweep(wf_engine, older_than=30, dry_run=True), 10)
    assert sorted(swept.deleted) == sorted(run.id for run in runs)


@wf.workflow(retention="1s")
async def kept_a_second(n: int) -> int:
    return n


@pytest.mark.stores("local", "postgres", "redis")  # memory: objects, no stored data to edit
async def test_a_run_whose_retention_is_no_number_is_named_and_the_others_go(
    wf_engine: Engine, engine_store: Store, mock_clock: MockClock
) -> None:
    """One run whose recorded retention is of the wrong kind (a stray edit: ``"1s"``) is
    damaged, named and kept; the sweep deletes the others (it used to stop at it with a
    TypeError, for every run), and ``verify`` names it."""
    from tests.store.helpers import edit_record

    runs = [await wf.start(kept_a_second, n) for n in range(5)]
    for run in runs:
        await run.result()
    victim = runs[2].id
    await edit_record(engine_store, victim, {"retention": "1s"})
    mock_clock.jump(60)
    with collect_faults() as met:
        swept = await sweep(wf_engine)
    assert sorted(swept.deleted) == sorted(r.id for r in runs if r.id != victim)
    assert [(f.kind, f.item) for f in met] == [("run", victim)], met
    assert "retention is not a number ('1s')" in met[0].reason
    problems = await engine_store.verify()
    assert any(victim in line and "retention is not a number" in line for line in problems)


@pytest.mark.stores("memory")
async def test_a_workflow_whose_sweep_fails_stops_no_other_workflows_sweep(
    wf_engine: Engine,
    mock_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What fails one workflow's sweep (not a damaged run: the sweep keeps and names those) is
    said with its workflow, and the next workflow's sweep goes on in the same round."""
    from wf.engine import _retention, _workflow

    mock_clock.autojump = False
    run = await wf.start(kept_a_second, 1)
    await run.result()
    mock_clock.jump(60)
    monkeypatch.setattr(
        _workflow, "retained_workflows", lambda: [short_lived.name, kept_a_second.name]
    )
    real = _retention.sweep

    async def failing(engine: Engine, **kwargs: object) -> object:
        if kwargs.get("workflow") == short_lived.name:
            raise RuntimeError("boom")
        return await real(engine, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_retention, "sweep", failing)
    worker = await swept_by_a_worker(wf_engine, 1)
    assert worker.swept == 1
    said = [r.getMessage() for r in caplog.records if "applying retention" in r.getMessage()]
    assert said and said[0] == (
        f"applying retention to the runs of {short_lived.name}: RuntimeError('boom')"
    ), said
