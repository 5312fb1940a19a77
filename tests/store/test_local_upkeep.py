"""Deleting runs (gc, retention) on the local store, cut short at every step, and damage in
the files its upkeep writes: ``wf store verify`` makes the store sound in one pass, and one
damaged file stops nothing else."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tests.store.helpers import acquire, created
from wf import RunNotFound, StoreCorrupted, StoreError
from wf.store import RunStatus, collect_faults
from wf.store.conformance import event
from wf.store.local import LocalStore, _compact, _fsops, _ghosts, _upkeep
from wf.store.local._segments import Segments


async def finished(store: LocalStore, **fields: Any) -> Any:
    run = await created(store, **fields)
    lease = await acquire(store, run.id)
    run.status, run.output = RunStatus.COMPLETED, 3
    await lease.append_and_save([event("run_completed", output=3)], run)
    await lease.release()
    return run


def pack_all(store: LocalStore) -> int:
    return _compact.compact(store, now=4e9, older_than=0.0, limit=1000).packed


async def readable(store: LocalStore, run_id: str) -> bool:
    try:
        await store.get_run(run_id)
    except RunNotFound:
        return False
    return True


# -- a deletion cut short ----------------------------------------------------------------------


@pytest.mark.parametrize("packed", [False, True], ids=["directories", "packed"])
async def test_a_gc_cut_short_at_any_step_leaves_no_run_unlisted_and_verify_converges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    """A crash at each change a deletion of three runs makes: every run is either gone or
    readable *and* listed (so the next gc finds it again); one verify makes the store sound
    (the tombstones of runs that still exist removed, the counts right); the next gc deletes
    the rest. It used to remove a run's entries before the run, so a crash in between left a
    run no listing, gc or retention ever found again, and verify only named it, forever."""
    monkeypatch.setattr(_ghosts, "ORPHAN_AGE", -1.0)  # entries of a run gone: removed at once
    cuts = 0
    for after in range(200):
        local = LocalStore(str(tmp_path / str(after)))
        runs = [await finished(local) for _ in range(3)]
        if packed:
            assert pack_all(local) == 3
        ids = [run.id for run in runs]
        with _fsops.inject("*", errno.EIO, after=after) as cut, contextlib.suppress(StoreError):
            await local.delete_runs(ids, now=9.0, reason="gc")
        if not cut.hits:
            break  # every step passed: the deletion was whole
        cuts += 1
        listed = {run.id for run in await local.list_runs(limit=10)}
        alive = {run_id for run_id in ids if await readable(local, run_id)}
        assert listed == alive, after
        await local.verify()
        assert await local.verify() == [], after
        info = await local.store_info()
        assert (info.runs["completed"], info.tombstones) == (len(alive), 3 - len(alive)), after
        await local.delete_runs(sorted(alive), now=10.0, reason="gc")
        assert await local.list_runs(limit=10) == []
        assert await local.verify() == [], after
        info = await local.store_info()
        assert (info.runs["completed"], info.tombstones) == (0, 3), after
    assert cuts > 5


async def test_verify_gives_back_the_index_entry_a_deletion_cut_short_removed(
    local: LocalStore, root: Path
) -> None:
    """A store left by a wf that removed a run's entries before the run: verify lists the
    run again (and says so), so gc deletes it."""
    kept, packed = await finished(local, group="g"), await finished(local)
    assert pack_all(local) == 2
    loose = await finished(local)
    for folder, _dirs, files in os.walk(root / "index"):
        for name in files:
            if kept.id in name or loose.id in name:
                os.unlink(os.path.join(folder, name))
    assert [r.id for r in await local.list_runs(limit=9)] == [packed.id]
    problems = await local.verify()
    assert sorted(problems) == sorted(
        f"run {run_id}: no index entry (a deletion cut short: wf runs, gc and retention did "
        "not find it): added"
        for run_id in (kept.id, loose.id)
    )
    assert await local.verify() == []
    assert [r.id for r in await local.list_runs(limit=9)] == [loose.id, packed.id, kept.id]
    assert [r.id for r in await local.list_runs(statuses=[RunStatus.COMPLETED])] == [
        loose.id,
        packed.id,
        kept.id,
    ]
    assert [r.id for r in await local.list_runs(group="g")] == [kept.id]
    done = await local.delete_runs([kept.id, loose.id], now=9.0, reason="gc")
    assert sorted(done.ids) == sorted([kept.id, loose.id])
    assert await local.verify() == []


@pytest.mark.parametrize("packed", [False, True], ids=["directories", "packed"])
async def test_verify_beside_a_deletion_in_progress_keeps_its_tombstone_and_adds_no_entry(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    """A verify that runs while a deletion has written its tombstones but not yet removed
    the runs (their tombstone beside the run, as after a deletion cut short) and their
    entries (the run's ``by-status/`` entry lost meanwhile) leaves the tombstone and puts no
    entry back. It used to remove the tombstone as a leftover, then the deletion finished:
    the run gone without one (``wf inspect``: no such run, not deleted by retention); and to
    give a run being deleted its ``by-status/`` entry back, which stayed for good."""
    run = await finished(local)
    if packed:
        assert pack_all(local) == 1
    [status_entry] = [p for p in (root / "by-status").rglob("*") if run.id in p.name]
    os.unlink(status_entry)
    said: list[list[str]] = []
    add = local.tombstones.add

    def add_then_verify(stones: Any) -> set[str]:
        written = add(stones)
        if stones:
            said.append(_upkeep.verify(local))  # the deletion holds the run (or the segments)
        return written

    monkeypatch.setattr(local.tombstones, "add", add_then_verify)
    assert (await local.delete_runs([run.id], now=9.0, reason="retention")).ids == [run.id]
    # The counts (a cache) it read mid-deletion are off, and put right by the next verify.
    assert [[line for line in lines if "/counts: " not in line] for lines in said] == [[]]
    stone = await local.get_tombstone(run.id)
    assert stone is not None and stone.reason == "retention"
    assert [p for p in (root / "by-status").rglob("*") if run.id in p.name] == []
    await local.verify()
    assert await local.verify() == []
    assert (await local.store_info()).tombstones == 1


async def test_tombstones_of_a_deletion_said_twice_are_counted_once(
    local: LocalStore, root: Path
) -> None:
    """A gc cut short after its tombstones, then a gc that finishes the deletion: two
    tombstones of one deleted run; verify keeps the later one, so the count is right."""
    run = await finished(local)
    with _fsops.inject("rename", errno.EIO, match="deleted."), pytest.raises(StoreError):
        await local.delete_runs([run.id], now=9.0, reason="gc")
    assert (await local.get_run(run.id)).status is RunStatus.COMPLETED
    await local.delete_runs([run.id], now=10.0, reason="retention")
    [line] = await local.verify()
    assert line.endswith(
        "1 tombstone(s) of deletions said twice (a deletion cut short, then done again): removed"
    )
    stone = await local.get_tombstone(run.id)
    assert stone is not None and (stone.deleted_at, stone.reason) == (10.0, "retention")
    assert (await local.store_info()).tombstones == 1
    assert await local.verify() == []


# -- damage in upkeep's files ------------------------------------------------------------------


async def test_a_tombstone_file_that_is_a_directory_stops_only_its_runs(
    local: LocalStore, root: Path
) -> None:
    """Its runs are not deleted (not without a tombstone), and that file is named; every
    other run goes, and verify goes on and names it."""
    blocked = await finished(local, id="blocked-run-1")
    free = await finished(local, id="freely-run-1")
    (root / "tombstones").mkdir(exist_ok=True)
    damaged = root / "tombstones" / "blocked-ru.jsonl"
    damaged.mkdir()
    with collect_faults() as met:
        done = await local.delete_runs([blocked.id, free.id], now=9.0, reason="gc")
    assert done.ids == [free.id]
    assert [(f.kind, f.item) for f in met] == [("tombstone file", damaged.name)]
    assert (await local.get_run(blocked.id)).id == blocked.id
    assert await local.get_tombstone(blocked.id) is None
    assert await local.get_tombstone(free.id) is not None
    problems = await local.verify()
    assert problems == [
        f"{damaged} is a directory where a file belongs: remove it (its runs' tombstones are"
        " lost; gc skips them)"
    ]
    assert (await local.store_info()).tombstones == 1


async def test_a_newest_segment_that_is_a_directory_is_named_and_packing_goes_on(
    local: LocalStore, root: Path
) -> None:
    first = await finished(local)
    assert pack_all(local) == 1
    segments = Segments(str(root))
    newest = Path(segments.path(2))
    newest.mkdir()
    later = [await finished(local), await finished(local)]
    assert pack_all(local) == 2
    assert segments.numbers() == [1, 2, 3]
    for run in [first, *later]:
        assert (await local.get_run(run.id)).output == 3
    assert await local.verify() == [
        f"{newest} is a directory where a file belongs: remove it (no run is packed in it;"
        " packing goes on in a new one)"
    ]


async def test_a_locator_of_a_huge_length_is_that_runs_damage(
    local: LocalStore, root: Path
) -> None:
    """Reading what it says would take all memory (it was a bare MemoryError)."""
    good, bad = await finished(local), await finished(local)
    assert pack_all(local) == 2
    path = root / "packed" / bad.id
    os.remove(path)
    os.symlink("1.0.100000000000000000", path)
    with pytest.raises(StoreCorrupted, match="over 4194304"):
        await local.get_run(bad.id)
    problems = await local.verify()
    assert any(bad.id in p for p in problems)
    with collect_faults() as met:
        assert [r.id for r in await local.list_runs()] == [good.id]
    assert {f.item for f in met} == {bad.id}


async def test_lines_that_are_not_tombstones_are_named_and_not_counted(
    local: LocalStore, root: Path
) -> None:
    run = await finished(local)
    await local.delete_runs([run.id], now=9.0, reason="gc")
    [path] = (root / "tombstones").glob("*.jsonl")
    with path.open("ab") as file:
        file.write(b'{"id": 5}\n{"id": "wrun_x", "deleted_at": "soon"}\n[1]\n')
    problems = await local.verify()
    assert [p.rsplit(": ", 1)[-1] for p in problems[:3]] == ["not a tombstone"] * 3, problems
    assert (await local.store_info()).tombstones == 1
    stone = await local.get_tombstone(run.id)
    assert stone is not None and stone.deleted_at == 9.0
