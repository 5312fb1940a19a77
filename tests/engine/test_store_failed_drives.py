"""A drive the store stopped (a full disk, an I/O error: ``wf.StoreError`` on a write) is no
death of the run: no process died. Each such drive is noted in the journal (``drive_failed``)
so that no driver, in this process or another, counts it towards ``max_recoveries``; a note
the failing store could not take is written by the process's next drive of the run. Real
deaths around them are still counted. Each engine here stands for a process of its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import wf
from tests.engine.test_stalled import _reset, die_in_step, hang, passes
from wf.store import RunStatus
from wf.store.memory import MemoryStore, _MemoryLease
from wf.testing import MockClock, TestEngine

_ = _reset  # its autouse: each test begins with no step let through


@wf.workflow(max_recoveries=2)
async def one_step() -> int:
    return await hang(5)


class Disk:
    """The memory store's journal writes, failing as a full disk fails them: ``full``, the
    writes that carry a step's result; ``broken``, every write."""

    def __init__(self) -> None:
        self.full = False
        self.broken = False
        self.breaks = False
        """A write the full disk refuses breaks it."""

    def check(self, events: Any) -> None:
        if self.broken or (self.full and any(e.get("type") == "step_completed" for e in events)):
            self.broken = self.breaks
            raise wf.StoreError("cannot write journal.jsonl: [ENOSPC] No space left on device")


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    disk = Disk()
    real = _MemoryLease.append_soon

    def append_soon(self: _MemoryLease, events: Any) -> None:
        disk.check(events)
        real(self, events)

    monkeypatch.setattr(_MemoryLease, "append_soon", append_soon)
    yield disk


async def drive_in_a_new_process(store: MemoryStore, run_id: str) -> BaseException | None:
    """Drive the run once in an engine of its own; what the drive raised."""
    async with TestEngine(store, MockClock()) as engine:
        try:
            await engine.drive_soon(run_id)
        except wf.StoreError as exc:
            return exc
    return None


async def start(store: MemoryStore, limit: int = 2) -> str:
    """A run of ``one_step`` whose ``limit``-th death in a row fails it."""
    async with TestEngine(store, MockClock()) as engine:
        with engine.installed():
            return (await wf.start(one_step.with_options(max_recoveries=limit), detach=True)).id


def types(journal: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in journal]


async def test_drives_a_full_disk_stopped_are_no_deaths_in_any_process(disk: Disk) -> None:
    store = MemoryStore()
    run_id = await start(store)
    passes.add(5)
    disk.full = True
    for _ in range(5):  # past max_recoveries=2, each in a process of its own
        assert isinstance(await drive_in_a_new_process(store, run_id), wf.StoreError)
        assert (await store.get_run(run_id)).status is RunStatus.RUNNING  # still due
    disk.full = False  # the disk has room again: the next driver completes it
    assert await drive_in_a_new_process(store, run_id) is None
    record = await store.get_run(run_id)
    assert (record.status, record.output) == (RunStatus.COMPLETED, 5), record.error
    journal = await store.read_journal(run_id)
    assert types(journal).count("drive_failed") == 5
    assert all(e.get("recoveries") is None for e in journal if e["type"] == "run_resumed")


async def test_a_failure_the_store_could_not_note_is_noted_by_the_next_drive_here(
    disk: Disk,
) -> None:
    store = MemoryStore()
    run_id = await start(store, limit=1)
    passes.add(5)
    async with TestEngine(store, MockClock()) as engine:
        # The marker and the step's start go in; the step's result breaks the disk, so that
        # the note of the failure cannot be written either.
        disk.full = disk.breaks = True
        with pytest.raises(wf.StoreError):
            await engine.drive_soon(run_id)
        assert "drive_failed" not in types(await store.read_journal(run_id))
        disk.breaks = disk.broken = False  # room for small writes; none for the result
        with pytest.raises(wf.StoreError):
            await engine.drive_soon(run_id)  # not counted here: this process saw it end
    journal = await store.read_journal(run_id)
    assert types(journal).count("drive_failed") == 2  # the first noted by the second drive
    # Another process counts neither: its limit of one death does not fail the run.
    disk.full = False
    async with TestEngine(store, MockClock()) as other:
        record = await other.drive_soon(run_id)
    assert record is not None and record.status is RunStatus.COMPLETED, record


async def test_deaths_around_store_failures_still_fail_the_run_stalled(disk: Disk) -> None:
    store = MemoryStore()
    run_id = await start(store)
    async with TestEngine(store, MockClock()) as engine:
        assert await die_in_step(engine, run_id, 5) is None  # death 1
    passes.add(5)
    disk.full = True
    for _ in range(3):
        assert isinstance(await drive_in_a_new_process(store, run_id), wf.StoreError)
    disk.full = False
    passes.discard(5)
    async with TestEngine(store, MockClock()) as engine:
        assert await die_in_step(engine, run_id, 5) is None  # death 2: the limit
    async with TestEngine(store, MockClock()) as engine:
        ended = await die_in_step(engine, run_id, 5)
    assert ended is not None and ended.status is RunStatus.FAILED
    assert (ended.error or {}).get("type") == "wf.RunStalled"
    assert "died 2 times in a row in step 'hang'" in (ended.error or {})["message"]


async def test_a_store_failure_is_said_as_no_death(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    """The driver after a noted failure does not say the run's last driver died."""
    store = MemoryStore()
    run_id = await start(store)
    passes.add(5)
    disk.full = True
    assert isinstance(await drive_in_a_new_process(store, run_id), wf.StoreError)
    disk.full = False
    with caplog.at_level("WARNING", logger="wf"):
        assert await drive_in_a_new_process(store, run_id) is None
    assert not [r for r in caplog.records if "died" in r.getMessage()]


_STARTED = {"type": "run_started", "ts": 0, "workflow": "w", "input": None}


def test_a_late_note_excuses_only_its_own_drive_not_another_process_s_at_that_position() -> None:
    """Process A's first drive (no marker: it began after ``run_started``) was stopped by the
    store, which took no note; process B's marker then took that position, and B died. A's
    late note names the position: it excused B's death (1 death counted, not 2)."""
    from wf.engine._recovery import recoveries

    b_died = [
        {"type": "run_resumed", "ts": 2, "resumes": 1, "drive": "b0b0b0b0"},
        {"type": "step_started", "ts": 2, "op": 1, "name": "s"},
    ]
    a_died = [
        {"type": "run_resumed", "ts": 4, "resumes": 2, "recoveries": 1, "drive": "a1a1a1a1"},
        {"type": "step_started", "ts": 4, "op": 1, "name": "s"},
    ]
    late = {"type": "drive_failed", "ts": 4, "began": 1, "error": "ENOSPC"}
    assert recoveries([_STARTED, *b_died, *a_died]).count == 2
    assert recoveries([_STARTED, *b_died, late, *a_died]).count == 2
    # A's drive had a marker of its own (a token), buffered and never written: the same.
    named = {**late, "drive": "a0a0a0a0"}
    assert recoveries([_STARTED, *b_died, named, *a_died]).count == 2
    # The note of B's own drive excuses it; an old journal's (no tokens) as before.
    own = {**late, "drive": "b0b0b0b0"}
    assert recoveries([_STARTED, *b_died, own, *a_died]).count == 1
    old = [{k: v for k, v in e.items() if k != "drive"} for e in (*b_died, late, *a_died)]
    assert recoveries([_STARTED, *old]).count == 1


async def test_a_drive_s_note_names_the_drive_its_markers_name(disk: Disk) -> None:
    store = MemoryStore()
    run_id = await start(store, limit=1)
    passes.add(5)
    async with TestEngine(store, MockClock()) as engine:
        disk.full = disk.breaks = True  # the note cannot be written then: a late one
        with pytest.raises(wf.StoreError):
            await engine.drive_soon(run_id)
        disk.breaks = disk.broken = False
        with pytest.raises(wf.StoreError):
            await engine.drive_soon(run_id)
    journal = await store.read_journal(run_id)
    notes = [e for e in journal if e["type"] == "drive_failed"]
    assert len(notes) == 2
    drives = [journal[note["began"]].get("drive") for note in notes]
    assert [note.get("drive") for note in notes] == drives
    assert len(set(drives)) == 2 and all(isinstance(d, str) and d for d in drives), journal
