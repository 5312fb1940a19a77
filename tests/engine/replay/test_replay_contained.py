"""One run's replay check never stops or spoils the check of the others: a damaged journal, a
workflow that blocks its thread or spins on the CPU, are that run's ``error`` alone."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import wf
from tests.engine.replay.test_replay_check import load
from wf.engine import _replay_check
from wf.engine._replay_check import check_run, check_runs
from wf.store import Event, RunRecord
from wf.store.memory import MemoryStore

HEALTHY = ("unchanged-suspended", "unchanged-completed", "patched-old-suspended")


class _DamagedJournal(MemoryStore):
    """A store one of whose journals cannot be read (as a local store's bad JSON line)."""

    def __init__(self, damaged: str) -> None:
        super().__init__()
        self.damaged = damaged

    async def read_journal(self, run_id: str, start: int = 0) -> list[Event]:
        if run_id == self.damaged:
            raise wf.StoreCorrupted(f"runs/{run_id}/journal.jsonl: line 5 is not valid JSON")
        return await super().read_journal(run_id, start)


async def test_a_damaged_journal_is_that_runs_error_and_the_others_are_checked() -> None:
    store = _DamagedJournal("wrun_unchanged_completed")
    for name in HEALTHY:
        await load(store, name)
    reports = {r.run_id: r for r in await check_runs(store)}
    damaged = reports.pop("wrun_unchanged_completed")
    assert damaged.status == "error"
    assert damaged.workflow == "replay:unchanged"
    assert "line 5 is not valid JSON" in damaged.message
    assert {r.status for r in reports.values()} == {"ok"}


def _record(run_id: str, workflow: str) -> tuple[RunRecord, list[Event]]:
    ts, started = 1800000000.0, {"args": [], "kwargs": {}}
    record = RunRecord(id=run_id, workflow=workflow, input=started, status=wf.RunStatus.PENDING)
    return record, [{"type": "run_started", "workflow": workflow, "input": started, "ts": ts}]


@wf.workflow(name="replay:blocks-its-thread")
async def blocks_its_thread() -> None:
    time.sleep(1.5)  # a blocking call in new workflow code: no other replay may wait for it


SPINNING = [True]


@wf.workflow(name="replay:spins")
async def spins() -> None:
    while SPINNING[0]:  # a CPU loop holding the GIL: asyncio cannot cancel it
        pass


@wf.workflow(name="replay:never-settles")
async def never_settles() -> None:
    await asyncio.Event().wait()


async def _with_healthy(run_id: str, workflow: str) -> MemoryStore:
    store = MemoryStore()
    for name in HEALTHY:
        await load(store, name)
    assert await store.create_run(*_record(run_id, workflow))
    return store


async def test_a_replay_blocking_its_thread_does_not_spend_the_others_time() -> None:
    store = await _with_healthy("wrun_blocks", "replay:blocks-its-thread")
    reports = {r.run_id: r for r in await check_runs(store, timeout=1.0)}
    blocked = reports.pop("wrun_blocks")
    assert (blocked.status, blocked.message) == ("error", "replay did not settle within 1.0 s")
    assert {r.status for r in reports.values()} == {"ok"}, [r.message for r in reports.values()]


async def test_a_replay_spinning_on_the_cpu_is_an_error_within_its_bound() -> None:
    SPINNING[0] = True
    store = await _with_healthy("wrun_spins", "replay:spins")
    try:
        async with asyncio.timeout(30):  # without a bound of its own the check never ends
            started = time.monotonic()
            reports = {r.run_id: r for r in await check_runs(store, timeout=1.0)}
            elapsed = time.monotonic() - started
    finally:
        SPINNING[0] = False  # ends the loop if the check left it running
    spun = reports.pop("wrun_spins")
    assert (spun.status, spun.message) == ("error", "replay did not settle within 1.0 s")
    assert {r.status for r in reports.values()} == {"ok"}, [r.message for r in reports.values()]
    assert elapsed < 10


async def test_a_replay_waiting_for_ever_is_an_error_within_its_bound() -> None:
    store = MemoryStore()
    assert await store.create_run(*_record("wrun_waits", "replay:never-settles"))
    report = await check_run(store, "wrun_waits", timeout=0.5)
    assert (report.status, report.message) == ("error", "replay did not settle within 0.5 s")


@wf.workflow(name="replay:gather-same-step-twice")
async def gather_same_step_twice() -> list[str]:
    from tests.engine.replay import flows

    return list(await asyncio.gather(flows.reserve("book"), flows.reserve("book")))


async def test_a_divergence_inside_a_gather_warns_of_no_forgotten_await() -> None:
    """The journal recorded ``reserve`` then ``charge``; the code now gathers ``reserve``
    twice: the second call diverges as it is made, which drops the first before ``gather``
    could await it. That is the divergence, not a forgotten ``await``."""
    record, journal = _record("wrun_gather", "replay:gather-same-step-twice")
    ts = 1800000000.0
    for op, name in enumerate(("reserve", "charge")):
        journal.append({"type": "step_started", "op": op, "name": name, "attempt": 1, "ts": ts})
    for op, name in enumerate(("reserve", "charge")):
        journal.append({"type": "step_completed", "op": op, "name": name, "result": "r", "ts": ts})
    store = MemoryStore()
    assert await store.create_run(record, journal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = await check_run(store, record.id)
        gc.collect()
    assert report.status == "diverged", report.message
    assert report.divergence is not None and report.divergence.index == 1
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []


class _DamagedRecord(MemoryStore):
    """A store one of whose run records cannot be read."""

    async def get_run(self, run_id: str) -> RunRecord:
        if run_id == "wrun_unchanged_completed":
            raise wf.StoreCorrupted(f"runs/{run_id}/run.json is not valid JSON")
        return await super().get_run(run_id)


async def test_a_named_run_whose_record_is_damaged_is_that_runs_error() -> None:
    from wf.admin._replay import replay_runs

    store = _DamagedRecord()
    for name in HEALTHY:
        await load(store, name)
    ids = ["wrun_unchanged_completed", "wrun_unchanged_suspended"]
    reports, _ = await replay_runs(store, ids, unfinished=True)
    statuses = {r.run_id: (r.status, r.message) for r in reports}
    assert statuses == {
        "wrun_unchanged_completed": (
            "error",
            "runs/wrun_unchanged_completed/run.json is not valid JSON",
        ),
        "wrun_unchanged_suspended": ("ok", ""),
    }


class _ListingSkipsADamagedRecord(_DamagedRecord):
    """A store whose listing skips the run it cannot read, noting it (as every store does)."""

    async def list_runs(self, **filters: Any) -> list[RunRecord]:
        page = await super().list_runs(**filters)
        if any(r.id == "wrun_unchanged_completed" for r in page):
            error = wf.StoreCorrupted("runs/wrun_unchanged_completed/run.json is not valid JSON")
            self.faults.note(
                "run", "wrun_unchanged_completed", "runs/wrun_unchanged_completed", error
            )
        return [r for r in page if r.id != "wrun_unchanged_completed"]


async def test_a_run_the_listing_skipped_as_damaged_is_that_runs_error_in_a_whole_check() -> None:
    """Without run ids the runs come from the listing, which skips a run it cannot read: the
    check says it (an error, so CI fails) rather than "2 ok" and exit 0."""
    from wf.admin._replay import replay_runs

    store = _ListingSkipsADamagedRecord()
    for name in HEALTHY:
        await load(store, name)
    reports, _ = await replay_runs(store, None)
    statuses = {r.run_id: r.status for r in reports}
    assert statuses == {
        "wrun_unchanged_completed": "error",
        "wrun_unchanged_suspended": "ok",
        "wrun_patched_old_suspended": "ok",
    }, statuses


def _replay_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "wf-replay-check"]


async def _until_no_replay_thread() -> None:
    async with asyncio.timeout(5):
        while _replay_threads():
            await asyncio.sleep(0.01)


async def test_a_spinning_replay_given_up_ends_its_thread() -> None:
    """The stop: a CPU loop of workflow code given up ends (``_Abandoned``), and so does its
    thread; without the stop it would spin for ever, slowing everything else down."""
    SPINNING[0] = True
    store = MemoryStore()
    assert await store.create_run(*_record("wrun_spins", "replay:spins"))
    try:
        report = await check_run(store, "wrun_spins", timeout=0.2)
        assert report.status == "error"
        await _until_no_replay_thread()
    finally:
        SPINNING[0] = False


async def test_a_cancelled_check_gives_its_replay_thread_up() -> None:
    SPINNING[0] = True
    store = MemoryStore()
    assert await store.create_run(*_record("wrun_spins", "replay:spins"))
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.3):  # the caller gives up (wf dev reloads, Ctrl-C)
                await check_run(store, "wrun_spins", timeout=5.0)
        await _until_no_replay_thread()
    finally:
        SPINNING[0] = False


BLOCKED = threading.Event()


@wf.workflow(name="replay:blocks-for-ever")
async def blocks_for_ever() -> None:
    BLOCKED.wait(30)  # a socket read without a timeout


async def test_a_run_stuck_in_a_blocking_call_holds_one_thread_however_often_checked() -> None:
    store = MemoryStore()
    assert await store.create_run(*_record("wrun_blocked", "replay:blocks-for-ever"))
    try:
        for _ in range(3):  # wf dev checks again on each reload
            report = await check_run(store, "wrun_blocked", timeout=0.2)
            assert report.status == "error"
        assert len(_replay_threads()) == 1
    finally:
        BLOCKED.set()
    await _until_no_replay_thread()


async def test_importing_the_module_does_not_count_against_the_replays_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "slow_import_flow.py").write_text(
        "import time\nimport wf\ntime.sleep(0.6)\n\n"
        "@wf.workflow(name='replay:slow-import')\nasync def quick() -> None:\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    record, journal = _record("wrun_slow_import", "replay:slow-import")
    record.target = "slow_import_flow:quick"
    store = MemoryStore()
    assert await store.create_run(record, journal)
    report = await check_run(store, "wrun_slow_import", timeout=0.3)
    assert (report.status, report.message) == ("ok", "")


async def test_a_module_importing_past_its_bound_is_that_runs_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hung_import_flow.py").write_text(
        "import time\nimport wf\ntime.sleep(3)\n\n"
        "@wf.workflow(name='replay:hung-import')\nasync def quick() -> None:\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_replay_check, "IMPORT_BOUND", 0.3)
    record, journal = _record("wrun_hung_import", "replay:hung-import")
    record.target = "hung_import_flow:quick"
    store = MemoryStore()
    assert await store.create_run(record, journal)
    report = await check_run(store, "wrun_hung_import", timeout=5.0)
    assert (report.status, report.message) == (
        "error",
        "importing the workflow did not finish within 0.3 s",
    )
