"""``LocalStore``: the conformance kit, and what only a directory of files can get wrong."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.store.helpers import (
    acquire,
    created,
    damage_local_run,
    damage_local_schedule,
    edit_record,
    record,
    save,
    started,
    write_journal_end,
)
from wf import RunNotFound, StoreCorrupted, StoreError, StoreVersionError, UsageError
from wf.store import (
    HookRecord,
    RunRecord,
    RunStatus,
    Schedule,
    Store,
    WebhookDelivery,
    collect_faults,
    lane_of,
)
from wf.store._ids import new_run_id
from wf.store.conformance import StoreConformance
from wf.store.local import (
    LocalStore,
    _atomic,
    _format,
    _fsops,
    _index,
    _journal,
    _layout,
    _upkeep,
    default_store_path,
)
from wf.store.local import _store as local_store_module
from wf.store.local._layout import BLOB_THRESHOLD, FORMAT, NOW, due_field, queue_name


class TestLocalStore(StoreConformance):
    """A peer is a second ``LocalStore`` on the same directory, as another process opens it."""

    async def make_store(self, tmp_path: Path) -> Store:
        return LocalStore(tmp_path / ".workflows")

    async def make_peer(self, store: Store, tmp_path: Path) -> Store:
        return LocalStore(tmp_path / ".workflows")

    async def damage_run(self, store: Store, run_id: str) -> None:
        damage_local_run(store, run_id)

    async def edit_record(self, store: Store, run_id: str, changes: dict[str, Any]) -> None:
        await edit_record(store, run_id, changes)

    async def damage_schedule(self, store: Store, schedule_id: str) -> None:
        damage_local_schedule(store, schedule_id)


# -- the directory ---------------------------------------------------------------------------


async def test_reads_do_not_create_the_store(local: LocalStore, root: Path) -> None:
    assert await local.list_runs() == []
    assert await local.due_runs(0.0) == []
    with pytest.raises(RunNotFound):
        await local.get_run(new_run_id())
    assert not root.exists()
    await created(local)
    assert orjson.loads((root / "wf-store.json").read_bytes()) == {"format": FORMAT}


async def test_newer_format_is_refused(root: Path) -> None:
    root.mkdir()
    (root / "wf-store.json").write_bytes(orjson.dumps({"format": FORMAT + 1}))
    store = LocalStore(root)
    with pytest.raises(StoreVersionError, match="newer version of wf"):
        await store.list_runs()
    with pytest.raises(StoreVersionError):
        await store.create_run(record())


async def test_a_lease_is_a_lock_on_the_journal(local: LocalStore, root: Path) -> None:
    """Format 2: no lock file; whoever holds a flock on the journal holds the run."""
    run = await created(local)
    run_dir = root / "runs" / run.id
    assert sorted(p.name for p in run_dir.iterdir()) == ["journal.jsonl", "run.json"]
    with open(run_dir / "journal.jsonl", "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process's driver
        assert await local.try_acquire(run.id) is None
    lease = await acquire(local, run.id)
    with open(run_dir / "journal.jsonl", "rb") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    await lease.release()


async def test_a_format_1_store_keeps_its_lock_files(root: Path) -> None:
    """A store made by the first development versions: runs keep a ``lock`` file and a lease
    takes it too, so a process of that version (which locks only that file) is excluded."""
    root.mkdir()
    for name in ("runs", "queue", "index", "children", "hooks", "tmp"):
        (root / name).mkdir()
    (root / "wf-store.json").write_bytes(b'{"format": 1}')
    local = LocalStore(root)
    run = await created(local)
    lock = root / "runs" / run.id / "lock"
    assert lock.exists()
    with open(lock, "rb") as old_version:
        fcntl.flock(old_version, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert await local.try_acquire(run.id) is None
    lease = await acquire(local, run.id)
    with open(lock, "rb") as old_version, pytest.raises(BlockingIOError):
        fcntl.flock(old_version, fcntl.LOCK_EX | fcntl.LOCK_NB)
    await lease.release()
    # Upgraded in place to the current format, still making lock files for that older one's sake.
    stamp = orjson.loads((root / "wf-store.json").read_bytes())
    assert stamp == {"format": FORMAT, "lock_files": True}
    assert (root / "lanes").is_dir() and (root / "slots").is_dir()
    await local.close()


async def test_a_format_2_store_is_upgraded_in_place(root: Path) -> None:
    """The queue directories are added, old queue entries keep working, and the format file
    says the current format, which an older wf refuses."""
    root.mkdir()
    for name in ("runs", "queue", "index", "children", "hooks", "tmp"):
        (root / name).mkdir()
    (root / "wf-store.json").write_bytes(b'{"format": 2}')
    local = LocalStore(root)
    old = await created(local)
    (root / "queue" / f"{'0' * 14}+{old.id}").touch()
    assert await local.due_runs(0.0) == [old.id]
    assert orjson.loads((root / "wf-store.json").read_bytes()) == {"format": FORMAT}
    assert not (root / "runs" / old.id / "lock").exists()
    assert await local.try_slot("cap", 1) is not None
    await local.close()


async def test_a_store_from_before_schedules_and_retention_needs_no_upgrade(root: Path) -> None:
    """A store without ``schedules/`` or ``tombstones/`` (a format-3 or -4 store written before
    they existed): they are made on first use, and the format stays as it is (a wf of that
    release still reads and writes the store; it only ignores the new directories)."""
    previous = LocalStore(root)
    done = await created(previous)
    await save(previous, done, RunStatus.COMPLETED)
    live = await created(previous)
    await previous.close()
    shutil.rmtree(root / "tombstones")  # a store made now has it (the reserve): made before
    assert sorted(p.name for p in root.iterdir()) == [
        "by-status", "by-tag", "by-workflow", "children", "counts", "hooks", "index", "lanes",
        "packed", "queue", "rates", "runs", "segments", "sequence", "slots", "tmp",
        "users.lock", "wf-store.json",
    ]  # fmt: skip
    current = LocalStore(root)
    assert await current.list_schedules() == []
    assert await current.get_tombstone(done.id) is None
    assert await current.verify() == []
    await current.save_schedule(Schedule("s", "tests:flow", "* * * * *"))
    deleted = await current.delete_runs([done.id, live.id], now=5.0, reason="retention")
    assert deleted.ids == [done.id] and deleted.bytes > 0
    info = await current.store_info()
    assert (info.format, info.schedules, info.tombstones) == (FORMAT, 1, 1)
    assert info.runs["pending"] == 1 and info.runs["completed"] == 0
    assert orjson.loads((root / "wf-store.json").read_bytes())["format"] == FORMAT
    assert await current.verify() == []
    await current.close()


async def test_retention_deletes_a_format_1_run_only_when_both_locks_are_free(root: Path) -> None:
    root.mkdir()
    for name in ("runs", "queue", "index", "children", "hooks", "tmp"):
        (root / name).mkdir()
    (root / "wf-store.json").write_bytes(b'{"format": 1}')
    local = LocalStore(root)
    run = await created(local)
    await save(local, run, RunStatus.COMPLETED)
    with open(root / "runs" / run.id / "lock", "rb") as old_version:
        fcntl.flock(old_version, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a format-1 wf drives it
        assert (await local.delete_runs([run.id], now=1.0, reason="gc")).ids == []
    assert (await local.delete_runs([run.id], now=1.0, reason="gc")).ids == [run.id]
    assert not (root / "runs" / run.id).exists()
    await local.close()


async def test_a_deleted_run_leaves_no_file_behind(local: LocalStore, root: Path) -> None:
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.write_chunk("out", 0, b"x" * 10_000)
    await lease.release()
    await local.register_hook(HookRecord("t-1", run.id, 0))
    await save(local, run, RunStatus.COMPLETED, output={"big": "y" * 100_000})
    child = await created(local, parent_id=run.id)
    await save(local, child, RunStatus.FAILED)
    done = await local.delete_runs([run.id, child.id], now=1.0, reason="retention")
    assert sorted(done.ids) == sorted([run.id, child.id]) and done.bytes > 110_000
    leftovers = [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and (run.id in str(p) or child.id in str(p))
    ]
    assert leftovers == []
    assert [p.name for p in (root / "hooks").glob("*.json")] == []
    assert list((root / "index").rglob("*+*")) == []


async def test_damaged_format_file_is_reported(root: Path) -> None:
    root.mkdir()
    (root / "wf-store.json").write_bytes(b"{not json")
    with pytest.raises(StoreCorrupted, match=r"wf-store\.json"):
        await LocalStore(root).list_runs()


@pytest.mark.parametrize(
    "content",
    [b'{"format": true}', b'{"format": -1}', b'{"format": 9.5}', b'{"format": "7"}', b"[7]"],
)
async def test_a_format_that_is_not_a_positive_integer_is_damage(
    root: Path, content: bytes
) -> None:
    # `true` was read as format 1 and the store "migrated" from there; -1 and 9.5 were taken.
    root.mkdir()
    (root / "runs").mkdir()
    (root / "wf-store.json").write_bytes(content)
    with pytest.raises(StoreCorrupted, match=r"wf-store\.json: not a wf store format file"):
        await LocalStore(root).list_runs()
    assert (root / "wf-store.json").read_bytes() == content  # left as it was
    assert sorted(p.name for p in root.iterdir()) == ["runs", "wf-store.json"]


async def test_a_store_is_not_made_among_other_files(root: Path) -> None:
    # WF_DIR=/ wrote runs/ queue/ tmp/ ... into /: a directory holding other things is refused.
    root.mkdir()
    (root / "notes.txt").write_text("mine")
    store = LocalStore(root)
    with pytest.raises(StoreError, match=r"holds other files \(notes\.txt\) and no wf store"):
        await store.create_run(record())
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]
    assert await store.list_runs() == []  # reading it is no harm


async def test_a_store_is_made_beside_what_a_store_or_a_volume_holds(root: Path) -> None:
    # A fresh volume's lost+found, hidden files, and what a store being made by another
    # process (or a crash while making it) left are no obstacle.
    root.mkdir()
    for name in ("lost+found", ".snapshot", "runs", "counts", "by-tag"):
        (root / name).mkdir()
    store = LocalStore(root)
    run = await created(store)
    assert [r.id for r in await store.list_runs()] == [run.id]


async def test_a_store_left_half_made_is_made_by_the_next_open(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Everything a store's making writes before its format file is what another process
    # finds while this one makes it (a worker started beside a program making the store),
    # or after a crash there: the next open finishes the store instead of calling it foreign.
    from wf.store.local import _format

    real_replace = _format._atomic.replace

    def crash_before_the_format_file(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "crashed before the format file")

    monkeypatch.setattr(_format._atomic, "replace", crash_before_the_format_file)
    with pytest.raises(OSError, match="crashed before the format file"):
        _format.initialize(str(root))
    left = sorted(p.name for p in root.iterdir())
    assert "wf-store.json" not in left and "tombstones" in left  # the reserve came first
    monkeypatch.setattr(_format._atomic, "replace", real_replace)
    store = LocalStore(root)
    run = await created(store)
    assert [r.id for r in await store.list_runs()] == [run.id]


def test_default_path_honours_wf_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WF_DIR", raising=False)
    assert default_store_path() == Path(".workflows")
    monkeypatch.setenv("WF_DIR", str(tmp_path / "elsewhere"))
    assert default_store_path() == tmp_path / "elsewhere"
    assert LocalStore().root == os.path.realpath(tmp_path / "elsewhere")


def test_network_file_systems_are_warned_about(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw 0 0\n"
        f"server:/export {tmp_path}/nfs nfs4 rw,relatime 0 0\n"
        f"//host/share {tmp_path}/smb cifs rw 0 0\n"
    )
    with pytest.warns(RuntimeWarning, match="network file system"):
        assert _format.warn_if_network(str(tmp_path / "nfs" / ".workflows"), str(mounts))
    with pytest.warns(RuntimeWarning, match="cifs"):
        assert _format.warn_if_network(str(tmp_path / "smb"), str(mounts))
    assert not _format.warn_if_network(str(tmp_path / "local"), str(mounts))
    assert _format.filesystem_type(str(tmp_path / "local"), str(mounts)) == "ext4"


async def test_run_ids_are_validated_before_use_as_paths(local: LocalStore) -> None:
    with pytest.raises(UsageError):
        await local.create_run(record(id="../escape"))
    with pytest.raises(UsageError):
        await local.create_run(record(parent_id="a/b"))
    for bad in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(RunNotFound):
            await local.get_run(bad)
    run = await created(local)
    assert await local.list_runs(parent_id="../runs") == []
    lease = await acquire(local, run.id)
    with pytest.raises(UsageError):
        await lease.ack_inbox(["../run"])
    await lease.release()
    assert (await local.get_run(run.id)).id == run.id


async def test_custom_ids_are_stored_and_listed(local: LocalStore) -> None:
    ids = ["order-1", "order-10", "order-2", "a", "a.b", "a-b", "Z_9"]
    for run_id in ids:
        await created(local, id=run_id)
    # Newest created first, whatever the ids' own order.
    assert [r.id for r in await local.list_runs(limit=100)] == ids[::-1]
    page = await local.list_runs(before="order-2", limit=100)
    assert [r.id for r in page] == ["order-10", "order-1"]


# -- listing -----------------------------------------------------------------------------------


async def test_listing_order_across_many_buckets(local: LocalStore) -> None:
    # Ids spread over ~40 days land in many buckets of every level; a few share a millisecond.
    base = 1_700_000_000.0
    ids = {new_run_id(base + n * 34_567.891) for n in range(120)}
    ids |= {new_run_id(base + 1_000_000.0) for _ in range(5)}
    statuses = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.SUSPENDED]
    expected: dict[str, RunStatus] = {}
    for n, run_id in enumerate(sorted(ids)):
        status = statuses[n % 3]
        await created(local, id=run_id, status=status, workflow=f"w{n % 2}")
        expected[run_id] = status
    newest = sorted(ids, reverse=True)
    assert [r.id for r in await local.list_runs(limit=1000)] == newest
    got, before = [], None
    while page := await local.list_runs(limit=7, before=before):
        got += [r.id for r in page]
        before = page[-1].id
    assert got == newest
    failed = await local.list_runs(statuses=[RunStatus.FAILED], limit=1000)
    assert [r.id for r in failed] == [i for i in newest if expected[i] is RunStatus.FAILED]
    w1 = await local.list_runs(workflow="w1", statuses=[RunStatus.COMPLETED], limit=5)
    assert all(r.workflow == "w1" and r.status is RunStatus.COMPLETED for r in w1)
    assert len(w1) == 5


async def test_listing_follows_status_changes(local: LocalStore) -> None:
    run = await created(local)
    await save(local, run, RunStatus.RUNNING)
    await save(local, run, RunStatus.SUSPENDED, wake_at=5.0)
    assert [r.id for r in await local.list_runs(statuses=[RunStatus.SUSPENDED])] == [run.id]
    assert await local.list_runs(statuses=[RunStatus.PENDING, RunStatus.RUNNING]) == []
    await save(local, run, RunStatus.COMPLETED, wake_at=None)
    assert [r.status for r in await local.list_runs()] == [RunStatus.COMPLETED]


async def test_large_values_live_in_blobs(local: LocalStore, root: Path) -> None:
    big = "x" * (BLOB_THRESHOLD + 1)
    run = await created(local, input={"text": big})
    run_dir = root / "runs" / run.id
    assert (run_dir / "run.json").stat().st_size < 4096
    assert (await local.get_run(run.id)).input == {"text": big}
    listed = await local.list_runs()
    assert listed[0].id == run.id and listed[0].input is None  # listings never load blobs
    lease = await acquire(local, run.id)
    for output in ("y" * (BLOB_THRESHOLD + 1), "z" * (BLOB_THRESHOLD + 1), "small"):
        run.output = output
        await lease.save(run)
        assert (await local.get_run(run.id)).output == output
    await lease.release()
    blobs = sorted(p.name.split("-")[0] for p in run_dir.glob("*-*.json"))
    assert blobs == ["input"]  # replaced output blobs were removed


def _started(record: RunRecord) -> dict[str, Any]:
    """The engine's first event: the record as created rides in it."""
    snapshot = {k: v for k, v in record.to_json().items() if k != "input"}
    return {"type": "run_started", "ts": record.updated_at, "record": snapshot,
            "input": record.input}  # fmt: skip


async def test_a_record_the_journal_gives_back_is_not_written_at_creation(
    local: LocalStore, root: Path
) -> None:
    run = record(status=RunStatus.RUNNING, input={"n": 1}, updated_at=5.0)
    assert await local.create_run(run, [_started(run)])
    run_dir = root / "runs" / run.id
    assert not (run_dir / "run.json").exists()  # one file fewer to create
    assert await local.get_run(run.id) == run
    assert [r.id for r in await local.list_runs(statuses=[RunStatus.RUNNING])] == [run.id]
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 6.0, "op": 0}])
    assert (await local.get_run(run.id)).updated_at == 6.0  # rebuilt from the journal's ends
    run.status, run.output = RunStatus.COMPLETED, 2
    await lease.save(run)
    await lease.release()
    assert (run_dir / "run.json").exists() and await local.get_run(run.id) == run


@pytest.mark.parametrize(
    "change",
    [
        {"ts": 6.0},  # rebuilt, the record would be updated at the event's time
        {"input": {"n": 2}},
        {"type": "step_completed"},
    ],
)
async def test_a_creation_whose_first_event_does_not_give_the_record_back_writes_it(
    local: LocalStore, root: Path, change: dict[str, Any]
) -> None:
    run = record(status=RunStatus.RUNNING, input={"n": 1}, updated_at=5.0, priority=2)
    assert await local.create_run(run, [{**_started(run), **change}])
    assert (root / "runs" / run.id / "run.json").exists()
    assert await local.get_run(run.id) == run


async def test_a_creation_whose_snapshot_differs_from_the_record_writes_it(
    local: LocalStore, root: Path
) -> None:
    run = record(status=RunStatus.RUNNING, input={"n": 1}, updated_at=5.0, priority=2)
    event = _started(run)
    event["record"] = {**event["record"], "priority": 1}
    assert await local.create_run(run, [event])
    assert (root / "runs" / run.id / "run.json").exists()
    assert await local.get_run(run.id) == run


async def test_a_save_writes_the_record_file_only_when_the_journal_cannot_stand_for_it(
    local: LocalStore, root: Path
) -> None:
    run = record(status=RunStatus.RUNNING, input={"n": 1}, updated_at=5.0)
    assert await local.create_run(run, [_started(run)])
    record_file = root / "runs" / run.id / "run.json"
    lease = await acquire(local, run.id)
    await lease.read_run(local)
    await lease.append([{"type": "run_resumed", "ts": 6.0, "resumes": 1}])
    run.resumes, run.updated_at = 1, 6.0  # the ends do not carry ``resumes``: a file
    await lease.save(run)
    assert record_file.exists() and await local.get_run(run.id) == run
    await lease.append([{"type": "run_suspended", "ts": 7.0, "wake_at": 9.0}])
    run.status, run.wake_at, run.updated_at = RunStatus.SUSPENDED, 9.0, 7.0
    run.resumes = 0  # (a record the ends stand for again: the stale file must go)
    await lease.save(run)
    assert not record_file.exists() and await local.get_run(run.id) == run
    await lease.release()
    assert await local.due_runs(now=8.0) == [] and await local.due_runs(now=9.0) == [run.id]


async def test_a_large_input_keeps_its_record_file(local: LocalStore, root: Path) -> None:
    run = record(status=RunStatus.RUNNING, input={"text": "x" * (BLOB_THRESHOLD + 1)})
    assert await local.create_run(run, [_started(run)])
    assert (root / "runs" / run.id / "run.json").stat().st_size < 4096
    assert (await local.list_runs())[0].input is None


@pytest.mark.parametrize(
    ("lines", "torn", "expected"),
    [
        ([], b"", []),
        ([1], b"", [1]),
        ([1], b'{"n":', [1]),
        ([1, 2], b"", [1, 2]),
        ([1, 2, 3, 4], b'{"n": 5', [1, 4]),
        (list(range(3000)), b"", [0, 2999]),  # longer than a block at each end
    ],
)
def test_reading_a_journal_s_ends(
    tmp_path: Path, lines: list[int], torn: bytes, expected: list[int]
) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"n": n}) + b"\n" for n in lines) + torn)
    assert [e["n"] for e in _journal.read_ends(str(path))] == expected


def test_reading_the_ends_of_a_journal_with_long_lines(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    long = "x" * 200_000
    for events in ([{"n": 0, "v": long}], [{"n": 0, "v": long}, {"n": 1}, {"n": 2, "v": long}]):
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
        got = _journal.read_ends(str(path))
        assert [e["n"] for e in got] == [events[0]["n"], events[-1]["n"]][: len(events)]


async def test_create_race_between_instances(root: Path) -> None:
    import asyncio

    stores = [LocalStore(root) for _ in range(4)]
    run_id = new_run_id()
    results = await asyncio.gather(
        *(s.create_run(record(id=run_id, input=n)) for n, s in enumerate(stores))
    )
    assert sorted(results) == [False, False, False, True]
    assert [r.id for r in await stores[0].list_runs()] == [run_id]
    assert await stores[0].due_runs(0.0) == [run_id]
    # Nothing staged is left; ``names`` is the shared file queue and index entries link to.
    assert [p for p in (root / "tmp").iterdir() if p.name != "names"] == []
    for store in stores:
        await store.close()


async def test_a_post_from_another_process_wakes_a_run_waiter_through_file_events(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path / "wf")
    # The fallback poll is slowed to 30 s: a waiter woken within 10 s was woken by an event.
    store._interval = 30.0
    try:
        run = await created(store)
        await store.wait_for_run(run.id, 0.01)  # start watching
        waiter = asyncio.ensure_future(store.wait_for_run(run.id, 20.0))
        await asyncio.sleep(0.05)
        code = (
            "import asyncio, sys; from wf.store.local import LocalStore; "
            "asyncio.run(LocalStore(sys.argv[1]).post(sys.argv[2], 'wake', {}))"
        )
        poster = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, str(tmp_path / "wf"), run.id
        )
        assert await poster.wait() == 0
        await asyncio.wait_for(waiter, 10.0)
    finally:
        await store.close()


async def _append_seen_only_by_content(waiter: LocalStore, lease: Any, path: Path) -> None:
    """Append through ``lease`` after ``waiter`` has taken the run's fingerprint, keeping the
    journal's size (the append fills slack) and its mtime (set back, as a coarse clock may
    leave it); ``waiter``'s next wait for the run must still end."""
    run_id = lease.run_id
    await waiter.wait_for_run(run_id, 0.0)  # its fingerprint is taken now
    before = path.stat()
    await lease.append([{"type": "step_completed", "ts": 2.0, "op": 0}])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    await asyncio.wait_for(waiter.wait_for_run(run_id, 20.0), 5.0)


async def test_an_append_into_the_slack_wakes_a_polling_run_waiter_on_a_coarse_clock(
    tmp_path: Path,
) -> None:
    """An append overwrites the journal's slack, so the file keeps its length; on a kernel
    whose file times are coarse it may keep its mtime too (set back here). A waiter that
    polls (no file events, another process's append) still sees the change."""
    waiter_store, writer = LocalStore(tmp_path / "wf"), LocalStore(tmp_path / "wf")
    waiter_store._events, waiter_store._interval = False, 0.01
    try:
        run = await created(writer)
        path = tmp_path / "wf" / "runs" / run.id / "journal.jsonl"
        lease = await acquire(writer, run.id)
        await _append_seen_only_by_content(waiter_store, lease, path)
        await lease.release()
    finally:
        await waiter_store.close()
        await writer.close()


async def test_an_append_after_a_long_zeroed_torn_write_wakes_a_polling_run_waiter(
    tmp_path: Path,
) -> None:
    """A torn write longer than a block leaves, once its lease zeroed it, a journal whose last
    block is all NUL bytes; an append then lands blocks before the end. A polling waiter on a
    coarse clock still sees it: how far the journal is written is looked for past that block."""
    waiter_store, writer = LocalStore(tmp_path / "wf"), LocalStore(tmp_path / "wf")
    waiter_store._events, waiter_store._interval = False, 0.01
    try:
        run = await created(writer)
        path = tmp_path / "wf" / "runs" / run.id / "journal.jsonl"
        write_journal_end(path, b'{"type":"step_completed","big":"' + b"x" * 9000)  # torn
        with open(path, "ab") as file:  # the slack the torn append had grown the file by
            file.write(b"\0" * (-path.stat().st_size % 4096))
        lease = await acquire(writer, run.id)  # zeroes the torn line
        assert path.read_bytes()[-4096:].strip(b"\0") == b""
        await _append_seen_only_by_content(waiter_store, lease, path)
        await lease.release()
    finally:
        await waiter_store.close()
        await writer.close()


# -- empty names (queue and index entries) ----------------------------------------------------


def test_entries_are_links_to_one_shared_file(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "queue").mkdir()
    names = _atomic.EmptyNames(str(tmp_path))
    assert names.touch(str(tmp_path / "queue"), "a") and names.touch(str(tmp_path / "queue"), "b")
    assert not names.touch(str(tmp_path / "queue"), "a")  # exists: not created again
    a, b = (tmp_path / "queue" / n for n in "ab")
    assert a.stat().st_ino == b.stat().st_ino and a.stat().st_size == 0


def test_a_full_shared_file_is_set_aside_and_a_swept_one_made_again(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "queue").mkdir()
    queue = tmp_path / "queue"
    names = _atomic.EmptyNames(str(tmp_path))
    assert names.touch(str(queue), "a")
    with _fsops.inject("link", errno.EMLINK, times=1):
        assert names.touch(str(queue), "b")  # full: renamed aside, a new one made
    assert (queue / "a").stat().st_ino != (queue / "b").stat().st_ino
    kept = sorted(p.name for p in (tmp_path / "tmp").iterdir())
    assert len(kept) == 2 and kept[0] == "names" and kept[1].startswith("names.full.")
    (tmp_path / "tmp" / "names").unlink()  # swept
    assert names.touch(str(queue), "c")
    assert (queue / "c").stat().st_ino not in {(queue / n).stat().st_ino for n in "ab"}


def test_processes_share_the_file_entries_link_to(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "queue").mkdir()
    first, second = _atomic.EmptyNames(str(tmp_path)), _atomic.EmptyNames(str(tmp_path))
    assert first.touch(str(tmp_path / "queue"), "a") and second.touch(str(tmp_path / "queue"), "b")
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == ["names"]
    assert (tmp_path / "queue" / "a").stat().st_nlink == 3  # names, a, b


def test_without_hard_links_entries_are_plain_files(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "queue").mkdir()
    names = _atomic.EmptyNames(str(tmp_path))
    with _fsops.inject("link", errno.EPERM):
        assert names.touch(str(tmp_path / "queue"), "a")
        assert names.touch(str(tmp_path / "queue"), "b")
    a, b = (tmp_path / "queue" / n for n in "ab")
    assert a.stat().st_ino != b.stat().st_ino and a.stat().st_nlink == b.stat().st_nlink == 1


async def test_a_new_entry_linked_to_an_old_shared_file_is_not_an_orphan(
    local: LocalStore, root: Path
) -> None:
    """A queue entry whose run is not published yet is an orphan only once it is old, and
    its age is its inode's ctime, which every link refreshes (mtime is the shared file's)."""
    await created(local)
    marker = root / "tmp" / "names"
    old = time.time() - 3600
    os.utime(marker, (old, old))
    run_id = new_run_id()
    local.queue.add(NOW, run_id)  # a creation in progress: its run is not renamed in yet
    assert await local.due_runs(now=2e9) == [r.id for r in await local.list_runs()]
    assert (root / "queue" / f"{NOW}+{run_id}").exists()  # kept: it is young
    other = LocalStore(root)
    await other.list_runs()  # opening sweeps old leftovers in tmp/, never the shared file
    assert marker.exists()
    await other.close()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": null}',
        b'{"id": "x"}',
        b'{"id": "x", "workflow": "w", "status": [1]}',
        b'{"id": "x", "workflow": "w", "status": "sleeping"}',
    ],
)
async def test_a_record_file_that_is_no_record_is_rebuilt_from_the_journal(
    local: LocalStore, root: Path, raw: bytes
) -> None:
    """Found by the long fuzz run: JSON with an ``id`` but nothing a record can be built from
    raised a raw ``TypeError``; it is a damaged cache like any other."""
    run = await created(local)
    (root / "runs" / run.id / "run.json").write_bytes(raw)
    rebuilt = await local.get_run(run.id)
    assert (rebuilt.id, rebuilt.workflow, rebuilt.status) == (run.id, run.workflow, run.status)


@pytest.mark.parametrize(
    ("field", "value"),
    [("retention", "1s"), ("max_recoveries", -1), ("workflow", None), ("created_at", "x")],
)
async def test_a_record_file_with_a_field_of_the_wrong_kind_is_rebuilt_from_the_journal(
    local: LocalStore, root: Path, field: str, value: Any
) -> None:
    """``run.json`` is a cache of the journal: a field of the wrong kind in it alone (the
    journal healthy) is a damaged cache, and the record is rebuilt from the journal (read,
    listed, leased; ``verify`` names the file). A ``retention`` or ``max_recoveries`` that
    ``RunRecord.from_json`` refuses passed the file's first look, and the run was refused
    for good instead."""
    run = await created(local, workflow="pkg:Flow", retention=60.0, max_recoveries=2)
    lease = await acquire(local, run.id)
    run.status, run.output = RunStatus.COMPLETED, 3
    await lease.append_and_save([{"type": "run_completed", "output": 3}], run)
    await lease.release()
    path = root / "runs" / run.id / "run.json"
    data = orjson.loads(path.read_bytes())
    path.write_bytes(orjson.dumps({**data, field: value}))
    with collect_faults() as met:
        got = await local.get_run(run.id)
        assert (got.id, got.workflow, got.retention, got.max_recoveries) == (
            run.id,
            "pkg:Flow",
            60.0,
            2,
        )
        assert [r.id for r in await local.list_runs()] == [run.id]
    assert met == []
    lease = await acquire(local, run.id)
    held, _events = await lease.read_run(local)
    assert (held.retention, held.max_recoveries) == (60.0, 2)
    await lease.release()
    problems = await local.verify()
    assert len(problems) == 1 and str(path) in problems[0], problems
    assert "rebuilt from the journal" in problems[0], problems


@pytest.mark.parametrize("opened", [False, True])
async def test_a_process_that_met_a_file_at_tmp_links_entries_again_once_tmp_is_back(
    root: Path, monkeypatch: pytest.MonkeyPatch, opened: bool
) -> None:
    """A long-lived store meets a file where ``tmp/`` belongs (it had linked entries to
    ``tmp/names`` already, or is opened while the file stands there): its entries are plain
    files meanwhile and a creation fails in one line. Once ``tmp/`` is back its entries are
    links to the shared file again, looked at again after a few seconds at most, not at
    every entry. They stayed plain files until the process ended."""
    clock = [1000.0]
    monkeypatch.setattr(_atomic, "monotonic", lambda: clock[0])
    tmp = root / "tmp"
    first = LocalStore(root)
    try:
        run = await created(first)
    finally:
        await first.close()
    if opened:
        shutil.rmtree(tmp)
        tmp.write_bytes(b"someone's")
    store = LocalStore(root)
    try:
        if not opened:
            await created(store)  # links entries to the shared file
            shutil.rmtree(tmp)
            tmp.write_bytes(b"someone's")
        await save(store, run, RunStatus.SUSPENDED, wake_at=2e9)  # a new queue entry
        [entry] = (root / "queue").glob(f"*+{run.id}")
        assert entry.stat().st_nlink == 1
        with pytest.raises(StoreError, match=f"{tmp}: not a directory"):
            await created(store)
        tmp.unlink()
        tmp.mkdir()
        clock[0] += 60
        made = await created(store)
        [entry] = (root / "queue").glob(f"*+{made.id}")
        assert entry.stat().st_ino == (tmp / "names").stat().st_ino
        assert await store.verify() == []
    finally:
        await store.close()


async def test_a_directory_put_at_tmp_names_leaves_entries_plain_only_while_it_stands(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link to a directory is refused as a file system without hard links refuses it
    (``EPERM``): a directory put at ``tmp/names`` after the process linked to it is damage,
    and entries are links again once it is gone. It turned links off until the process
    ended."""
    clock = [1000.0]
    monkeypatch.setattr(_atomic, "monotonic", lambda: clock[0])
    store = LocalStore(root)
    names = root / "tmp" / "names"
    try:
        await created(store)  # links entries to the shared file
        names.unlink()
        names.mkdir()
        during = await created(store)
        [entry] = (root / "queue").glob(f"*+{during.id}")
        assert entry.stat().st_nlink == 1
        names.rmdir()
        clock[0] += 60
        after = await created(store)
        [entry] = (root / "queue").glob(f"*+{after.id}")
        assert entry.stat().st_ino == names.stat().st_ino
    finally:
        await store.close()


# -- links inside the store --------------------------------------------------------------------


async def test_a_symlinked_journal_or_run_directory_is_refused(
    local: LocalStore, root: Path, tmp_path: Path
) -> None:
    """A link planted in the store must never make wf write outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_bytes(b"precious\n")

    run = await created(local)
    journal = root / "runs" / run.id / "journal.jsonl"
    journal.unlink()
    journal.symlink_to(victim)
    with pytest.raises(StoreError, match=r"journal\.jsonl is a symbolic link: wf refuses links"):
        await local.try_acquire(run.id)
    with pytest.raises(StoreError, match="is a symbolic link"):
        await local.read_journal(run.id)

    other = await created(local)
    run_dir = root / "runs" / other.id
    (run_dir / "journal.jsonl").rename(outside / "journal.jsonl")
    (run_dir / "run.json").rename(outside / "run.json")
    run_dir.rmdir()
    run_dir.symlink_to(outside, target_is_directory=True)
    for attempt in (local.try_acquire(other.id), local.post(other.id, "cancel", {})):
        with pytest.raises(StoreError, match=f"{other.id} is a symbolic link"):
            await attempt
    # Not created (something stands under the id), nothing written: a read names the link.
    assert await local.create_run(record(id=other.id)) is False
    with pytest.raises(StoreError, match="is a symbolic link"):
        await local.get_run(other.id)
    assert victim.read_bytes() == b"precious\n"
    assert sorted(p.name for p in outside.iterdir()) == ["journal.jsonl", "run.json", "victim.txt"]


async def test_a_fifo_where_a_file_belongs_is_damage_never_a_wait(
    local: LocalStore, root: Path
) -> None:
    """Opening a FIFO for reading waits for a writer: a read of one must never hang a listing,
    a page or a worker. Every open in the store never waits, and refuses what is not a file."""
    done = await created(local)
    lease = await acquire(local, done.id)
    done.status, done.output = RunStatus.COMPLETED, 7
    await lease.append_and_save([{"type": "run_completed", "ts": 2.0, "output": 7}], done)
    await lease.release()
    other = await created(local)
    record_file = root / "runs" / done.id / "run.json"
    record_file.unlink(missing_ok=True)
    os.mkfifo(record_file)
    # run.json is a cache of the journal: the record is rebuilt from it, as for a torn file.
    assert (await local.get_run(done.id)).output == 7
    assert [r.id for r in await local.list_runs()] == [other.id, done.id]
    problems = await local.verify()
    assert any(f"{record_file} is a FIFO, not a file wf wrote" in p for p in problems), problems
    await local.save_schedule(Schedule(id="tick", workflow="tests:flow", cron="0 0 * * *"))
    await local.save_schedule(Schedule(id="tock", workflow="tests:flow", cron="0 0 * * *"))
    schedule_file = Path(local.schedule_location("tick"))
    schedule_file.unlink()
    os.mkfifo(schedule_file)
    assert [s.id for s in await local.list_schedules()] == ["tock"]
    with pytest.raises(StoreCorrupted, match="is a FIFO"):
        await local.get_schedule("tick")


async def test_an_unreadable_record_names_the_file_at_fault(local: LocalStore, root: Path) -> None:
    run = await created(local)
    run_dir = root / "runs" / run.id
    (run_dir / "run.json").unlink(missing_ok=True)
    # A whole line that is no run's start: nothing to rebuild from. (No whole line at all is
    # what a power cut leaves of a creation: no run, ``test_local_crash``.)
    (run_dir / "journal.jsonl").write_bytes(b'{"type": "step_completed", "ts": 1}\n')
    with pytest.raises(StoreCorrupted, match=r"journal\.jsonl does not start with the run's"):
        await local.get_run(run.id)
    (run_dir / "run.json").write_bytes(b"{not json")
    unreadable = r"run\.json: unreadable \(.*\), and .* cannot rebuild it"
    with pytest.raises(StoreCorrupted, match=unreadable):
        await local.get_run(run.id)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("priority", 1.5, "a number"),
        ("group", 7, "a string"),
        ("limits", [1], "an object"),
        ("wake_at", "soon", "a time"),
    ],
)
async def test_a_creation_refuses_a_record_it_could_not_read(
    local: LocalStore, field: str, value: Any, words: str
) -> None:
    # The journal's first event alone gives the record back (no run.json is written): what it
    # holds is checked as a read would, or the run would be created and unreadable.
    run = record(**{field: value}, created_at=5.0, updated_at=5.0)
    first = {**started(run), "ts": run.updated_at}
    with pytest.raises(StoreCorrupted, match=f"{field} is not {words}"):
        await local.create_run(run, [first])
    with pytest.raises(RunNotFound):
        await local.get_run(run.id)


async def test_queue_stats_count_the_due_runs_they_can_read(local: LocalStore) -> None:
    runs = [await created(local) for _ in range(3)]
    damage_local_run(local, runs[1].id)
    with collect_faults() as met:
        [stats] = await local.queue_stats(time.time() + 1)
    assert stats.depth == 2
    assert [f.item for f in met] == [runs[1].id]


async def test_a_format_4_store_is_upgraded_with_its_runs_unpinned(root: Path) -> None:
    """A format-4 store's runs recorded the code's hash as ``deployment``: opened by this wf
    the format file says the current format (a format-4 wf would ignore pins), and the runs
    are unpinned, due to workers of every deployment, with the hash kept as ``code_hash``."""
    older = LocalStore(root)
    run = await created(older)
    await older.close()
    (root / "wf-store.json").write_bytes(b'{"format": 4}')
    # As a format-4 wf wrote the record: ``deployment`` held the hash; no ``code_hash``.
    old = {k: v for k, v in run.to_json().items() if k != "code_hash"}
    old["deployment"] = "0123456789ab"
    (root / "runs" / run.id / "run.json").write_bytes(orjson.dumps(old))
    current = LocalStore(root)
    record = await current.get_run(run.id)
    assert (record.deployment, record.code_hash) == (None, "0123456789ab")
    assert await current.due_runs(1e12, deployments={"v1", None}) == [run.id]
    assert orjson.loads((root / "wf-store.json").read_bytes())["format"] == FORMAT
    await current.close()


# -- the creation sequence (format 4) ----------------------------------------------------------


async def test_a_creation_number_rides_in_the_journal_so_no_record_file_is_needed(
    local: LocalStore, root: Path
) -> None:
    run = await created(local, id="z-first", updated_at=1.0)
    second = await created(local, id="a-second", updated_at=1.0)  # as its journal says
    assert 0 < run.seq < second.seq
    journal = _journal.read(str(root / "runs" / second.id / "journal.jsonl"))
    assert journal[0]["record"]["seq"] == second.seq
    assert not (root / "runs" / second.id / "run.json").exists()  # the journal gives it back
    assert (await local.get_run(second.id)).seq == second.seq
    assert int((root / "sequence").read_text()) == second.seq


def _format_3_run(
    root: Path,
    run_id: str,
    *,
    group: str | None = None,
    workflow: str = "app:flow",
    status: RunStatus = RunStatus.PENDING,
) -> None:
    """A run as a format-3 wf wrote it: journal, untagged (or group-tagged) queue entry (a
    post's due-now mark, for a suspended run), id-bucketed index entry, lane entry."""
    run = RunRecord(
        id=run_id, workflow=workflow, group=group, status=status, created_at=1.0, updated_at=1.0
    )
    snapshot = {k: v for k, v in run.to_json().items() if k not in ("input", "seq")}
    event = {
        "type": "run_started",
        "ts": 1.0,
        "workflow": workflow,
        "input": None,
        "record": snapshot,
    }
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "journal.jsonl").write_bytes(orjson.dumps(event) + b"\n")
    tag = "" if group is None else f"+g{_layout.digest(group, 32)}"
    (root / "queue" / f"{NOW}{tag}+{run_id}").touch()
    leaf = root / "index" / run_id[:10] / ("b" + run_id[10:11])
    leaf.mkdir(parents=True, exist_ok=True)
    (leaf / f"{run_id}+{status}+{_layout.digest(workflow, 8)}+-").touch()
    if group is not None:
        lane = root / "lanes" / _layout.digest(group, 32)
        lane.mkdir(parents=True, exist_ok=True)
        number = len(list(lane.iterdir())) + 1
        (lane / f"{number:020d}+{run_id}").touch()
        (root / "lanes" / f"{_layout.digest(group, 32)}.seq").write_text(f"{number:020d}\n")


async def test_a_format_3_store_is_upgraded_and_keeps_its_order(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs of an older store are numbered in their id order (the order its queue and its
    listings had); lanes keep their order and move to their queue's lane; new runs come
    after all of them, right after (the upgrade warned its new sequence was damaged, kept
    an empty ``sequence.damaged`` and jumped the numbering by a million)."""
    for name in ("runs", "queue", "index", "children", "hooks", "tmp", "lanes", "slots", "rates"):
        (root / name).mkdir(parents=True)
    (root / "wf-store.json").write_bytes(b'{"format": 3}')
    for run_id in ("p3", "p2", "p1", "p0"):
        _format_3_run(root, run_id)
    # A lane whose first run has the larger id: the lane's order, not the ids, must survive.
    _format_3_run(root, "z-lane-first", group="g")
    _format_3_run(root, "a-lane-second", group="g")
    # Suspended with a message posted: its post's mark must survive; without one, it goes.
    _format_3_run(root, "m-posted", status=RunStatus.SUSPENDED)
    (root / "runs" / "m-posted" / "inbox").mkdir()
    (root / "runs" / "m-posted" / "inbox" / "msg_1.json").write_bytes(
        orjson.dumps({"id": "msg_1", "kind": "hook", "data": {}})
    )
    _format_3_run(root, "n-quiet", status=RunStatus.SUSPENDED)
    local = LocalStore(root)
    with caplog.at_level(logging.WARNING, logger="wf.store.local"):
        fresh = await created(local, id="0-new")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for m in said if not m.startswith("upgrading ")] == []  # that one is meant
    assert not (root / "sequence.damaged").exists()
    assert fresh.seq == 9  # the eight runs', then the new one's
    assert orjson.loads((root / "wf-store.json").read_bytes()) == {"format": FORMAT}
    assert await local.due_runs(time.time()) == [
        "a-lane-second", "m-posted", "p0", "p1", "p2", "p3", "z-lane-first", "0-new",
    ]  # fmt: skip
    listed = [r.id for r in await local.list_runs(limit=100)]
    assert listed == [
        "0-new", "z-lane-first", "p3", "p2", "p1", "p0", "n-quiet", "m-posted", "a-lane-second",
    ]  # fmt: skip
    second = await local.get_run("a-lane-second")
    lane = lane_of(second)
    assert lane is not None
    assert await local.lane_ahead(lane, second.id, 5) == ["z-lane-first"]
    assert fresh.seq > max(r.seq for r in await local.list_runs(limit=100) if r.id != fresh.id)
    assert not list((root / "lanes").glob("*.seq"))
    assert await local.verify() == []
    await local.close()
    # Opened again: nothing changes (the upgrade ran once).
    again = LocalStore(root)
    assert [r.id for r in await again.list_runs(limit=100)] == listed
    await again.close()


async def test_runs_of_many_groups_cost_a_directory_per_group_not_per_run(root: Path) -> None:
    """Group keys are many and sparse (a customer's runs): the tag index keeps one directory
    per group (per million runs), not one per group and thousand-run bucket, so a store of
    runs in distinct groups does not pay a directory (4 KiB) per run."""
    store = LocalStore(root)
    runs = [await created(store, group=f"customer-{n}") for n in range(40)]
    trees = [p for p in (root / "by-tag").iterdir() if p.is_dir()]
    assert len(trees) == 40
    assert all(len([d for d in tree.rglob("*") if d.is_dir()]) == 1 for tree in trees)
    listed = await store.list_runs(group="customer-7")
    assert [r.id for r in listed] == [runs[7].id]
    await store.close()


async def test_a_big_groups_bucket_splits_and_its_listings_stay_whole(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group's bucket grown past ``SPLIT_BYTES`` takes its later runs in thousand-run
    sub-buckets, so a big group's first page lists a bounded directory: listings, pages,
    filters that probe the group, deletes and ``verify`` see the runs in both places."""
    store = LocalStore(root)
    runs = [await created(store, group="big", queue="q") for _ in range(3)]
    monkeypatch.setattr(_index, "SPLIT_BYTES", 1)  # the bucket is big from here on
    for jump in (1_000, 2_000, 3_000):
        store.sequence.at_least(jump)  # the next runs fall in the next thousand
        runs += [await created(store, group="big", queue="q") for _ in range(2)]
    bucket = next((root / "by-tag" / _index.tag_key("g", "big")).iterdir())
    assert sorted(p.name for p in bucket.iterdir() if p.is_dir()) == ["b001", "b002", "b003"]
    assert len([p for p in bucket.iterdir() if p.is_file()]) == 3  # the runs before the split
    newest_first = [r.id for r in reversed(runs)]
    assert [r.id for r in await store.list_runs(group="big", limit=100)] == newest_first
    paged: list[str] = []
    while page := await store.list_runs(group="big", limit=2, before=paged[-1] if paged else None):
        paged += [r.id for r in page]
    assert paged == newest_first
    # A queue filter with a group filter walks one tag and probes the other.
    both = await store.list_runs(group="big", queue="q", limit=100)
    assert [r.id for r in both] == newest_first
    # What wf did not make there is skipped, the listing goes on.
    (bucket / "notes.txt").write_text("x")
    (bucket / "b004").write_text("not a directory")
    assert [r.id for r in await store.list_runs(group="big", limit=100)] == newest_first
    (bucket / "notes.txt").unlink()
    (bucket / "b004").unlink()
    assert await store.verify() == []
    for run in runs[2:5]:  # one before the split, two after it
        await save(store, run, RunStatus.COMPLETED)
    assert len((await store.delete_runs([r.id for r in runs[2:5]], now=9.0, reason="gc")).ids) == 3
    left = [r.id for r in reversed(runs[:2] + runs[5:])]
    assert [r.id for r in await store.list_runs(group="big", limit=100)] == left
    assert not any(p.name.endswith(runs[3].id) for p in bucket.rglob("*"))
    assert await store.verify() == []
    await store.close()


async def test_a_claim_tries_a_bounded_number_of_held_runs_again(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs found held by another driver are tried again at most ``HELD_RETRIES`` per claim,
    those tried longest ago first: with thousands driven elsewhere, trying every lock again
    each time made claims slow. A run whose driver let go (died) still comes round."""
    from wf.store.local import _store

    monkeypatch.setattr(_store, "HELD_RETRY", 0.0)  # every held run is due a new try at once
    monkeypatch.setattr(_store, "HELD_RETRIES", 2)
    runs = [await created(local) for _ in range(5)]
    locks = []
    for run in runs:  # another process's drives: a lock on each journal
        fd = os.open(os.path.join(local.run_dir(run.id), "journal.jsonl"), os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        locks.append(fd)
    held: set[str] = set()
    assert await local.claim(time.time() + 1, 10, held=held) == []
    assert held == {run.id for run in runs}
    for fd in locks:
        os.close(fd)  # that process died: its locks went with it, its entries stayed
    taken: list[list[str]] = []
    leases = []
    for _ in range(3):
        mine = {lease.run_id for lease in leases}  # driven here: a worker excludes them
        more = await local.claim(time.time() + 1, 10, exclude=mine)
        taken.append([lease.run_id for lease in more])
        leases += more
    for lease in leases:
        await lease.release()
    assert [len(t) for t in taken] == [2, 2, 1]
    assert sorted(lease.run_id for lease in leases) == sorted(run.id for run in runs)


async def _claim_beside_a_held_run(
    local: LocalStore,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    patches: dict[str, Any],
    count: int = 2,
) -> list[RunRecord]:
    """``count`` runs, the first's journal locked as another worker's drive; another store (a
    worker that created none of them) claims one with the ``os`` functions ``patches`` in
    place, finds the first held and leases the second (released again). The runs."""
    runs = [await created(local) for _ in range(count)]
    fd = os.open(os.path.join(local.run_dir(runs[0].id), "journal.jsonl"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another worker's drive
    other = LocalStore(root)  # another worker: it created none of the runs
    try:
        for name, patched in patches.items():
            monkeypatch.setattr(os, name, patched)
        held: set[str] = set()
        leases = await other.claim(time.time() + 1, 1, held=held)
        monkeypatch.undo()
        assert held == {runs[0].id}
        assert [lease.run_id for lease in leases] == [runs[1].id]
        for lease in leases:
            await lease.release()
    finally:
        os.close(fd)
        await other.close()
    return runs


def _noting_looks() -> tuple[list[str], dict[str, Callable[..., Any]]]:
    """``os.stat`` and ``os.lstat`` stand-ins (by name) that note each path they look at, and
    the list they note it in."""
    looked: list[str] = []
    real_stat, real_lstat = os.stat, os.lstat

    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        looked.append(str(path))
        return real_stat(path, *args, **kwargs)

    def lstat(path: Any, *args: Any, **kwargs: Any) -> Any:
        looked.append(str(path))
        return real_lstat(path, *args, **kwargs)

    return looked, {"stat": stat, "lstat": lstat}


async def test_a_claim_tries_a_held_run_without_looking_at_its_directory(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim tries the lock of a run another worker drives before it looks at the run's
    directory: with several workers on one store, each tries every run the others took
    since its last claim, and that look (a ``stat`` and an ``lstat``) was a third of the
    failed attempt. A run it does lock is looked at as before."""
    looked, patches = _noting_looks()
    runs = await _claim_beside_a_held_run(local, root, monkeypatch, patches, count=3)
    assert not [path for path in looked if runs[0].id in path]
    assert [path for path in looked if runs[1].id in path]  # the run it leased


async def test_a_claim_refused_a_lock_makes_no_other_call_on_the_journal(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock attempt another driver refuses is an ``open``, the ``flock`` and a ``close``:
    with four workers every run is refused about three times, so the journal is looked at
    (``fstat``: a regular file? how long?) only once its lock is held."""
    opened: dict[int, str] = {}  # what each descriptor is open on now
    looked: list[str] = []
    real_open, real_fstat = os.open, os.fstat

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        got = real_open(path, *args, **kwargs)
        opened[got] = str(path)
        looked.append("open " + str(path))
        return got

    def fstat(fd: int) -> Any:
        looked.append(opened.get(fd, "?"))
        return real_fstat(fd)

    runs = await _claim_beside_a_held_run(local, root, monkeypatch, {"open": open_, "fstat": fstat})
    journal = os.path.join(local.run_dir(runs[0].id), "journal.jsonl")
    assert "open " + journal in looked  # tried
    assert journal not in looked
    assert os.path.join(local.run_dir(runs[1].id), "journal.jsonl") in looked  # leased


async def test_a_claim_passes_over_runs_listed_running_once_another_driver_is_met(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a claim has met another driver, a run ``by-status/`` lists running is passed
    over without a lock attempt (with four workers each tried each run the others took),
    and reported held; a claim that finds too few other runs comes back to it, so a run
    whose driver died (listed running, its lock free) is still taken at once."""
    runs = [await created(local) for _ in range(4)]
    for run in runs[1:3]:
        await save(local, run, RunStatus.RUNNING)
    locks = []
    for run in runs[:3]:  # another worker's drives; the first not saved running yet
        fd = os.open(os.path.join(local.run_dir(run.id), "journal.jsonl"), os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        locks.append(fd)
    opened: list[str] = []
    real_open = os.open

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    other = LocalStore(root)  # another worker: it created none of the runs
    try:
        monkeypatch.setattr(os, "open", open_)
        held: set[str] = set()
        [lease] = await other.claim(time.time() + 1, 1, held=held)
        monkeypatch.undo()
        assert lease.run_id == runs[3].id
        assert held == {run.id for run in runs[:3]}
        tried = {run.id for run in runs if any(run.id in path for path in opened)}
        assert tried == {runs[0].id, runs[3].id}  # the refusal, then the lease
        os.close(locks.pop())  # the third run's driver died: its listing still says running
        more = await other.claim(time.time() + 1, 5, exclude={runs[3].id})
        assert [taken.run_id for taken in more] == [runs[2].id]
        for taken in [lease, *more]:
            await taken.release()
    finally:
        for fd in locks:
            os.close(fd)
        await other.close()


async def test_runs_listed_running_past_the_cap_are_still_tried_after_the_pause(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more runs listed running than ``Hub.listed_running`` holds, a run whose driver
    died is still tried once ``HELD_RETRY`` has passed, while other runs fill every claim:
    the memory forgets only runs it has held long, not all of them at each claim."""
    monkeypatch.setattr(local_store_module, "LISTED_RUNNING_MAX", 2)
    held_run = await created(local)
    await save(local, held_run, RunStatus.RUNNING)
    orphans = [await created(local) for _ in range(3)]
    for run in orphans:
        await save(local, run, RunStatus.RUNNING)  # listed running, its lock free
    pending = [await created(local) for _ in range(15)]
    fd = os.open(os.path.join(local.run_dir(held_run.id), "journal.jsonl"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another worker's live drive
    other = LocalStore(root)
    leases = []
    try:
        for _ in range(12):  # each claim is filled by a pending run if nothing else
            leases += await other.claim(time.time() + 1, 1)
            await asyncio.sleep(0.1)
        taken = {lease.run_id for lease in leases}
        assert {run.id for run in orphans} <= taken
        assert len(taken & {run.id for run in pending}) < 12
    finally:
        for lease in leases:
            await lease.release()
        os.close(fd)
        await other.close()


def _noting_journal_reads(journal: str) -> tuple[list[str], dict[str, Callable[..., Any]]]:
    """``os.open``, ``os.fstat`` and ``os.pread`` stand-ins (by name) that note each
    ``fstat`` and ``pread`` of a descriptor open on ``journal``, and the list they note in."""
    opened: dict[int, str] = {}
    noted: list[str] = []
    real_open, real_fstat, real_pread = os.open, os.fstat, os.pread

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        got = real_open(path, *args, **kwargs)
        opened[got] = str(path)
        return got

    def fstat(fd: int) -> Any:
        if opened.get(fd) == journal:
            noted.append("fstat")
        return real_fstat(fd)

    def pread(fd: int, size: int, offset: int) -> bytes:
        if opened.get(fd) == journal:
            noted.append("pread")
        return real_pread(fd, size, offset)

    return noted, {"open": open_, "fstat": fstat, "pread": pread}


@pytest.mark.parametrize("shape", ["plain", "torn last line", "longer than a tail block"])
async def test_a_claim_reads_a_run_it_leases_once(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    """A claim takes the journal's length from the ``fstat`` it took with the lock held, and
    its content from the read that looks for a torn tail (which covers a journal shorter
    than its block whole): one ``fstat`` and one ``pread`` a run, where it took two of
    each. A torn last line is still cut off (zeroed), and a journal longer than the block
    is read whole."""
    run = await created(local)
    lease = await acquire(local, run.id)
    big = "x" * (70 * 1024) if shape == "longer than a tail block" else "y"
    await lease.append([{"type": "step_completed", "ts": 2.0, "op": 1, "result": big}])
    await lease.release()
    path = os.path.join(local.run_dir(run.id), "journal.jsonl")
    whole = Path(path).read_bytes()
    if shape == "torn last line":
        write_journal_end(path, b'{"type": "step_completed", "ts": 3.0, "op"')
    other = LocalStore(root)  # another worker: it did not create the run
    try:
        noted, patches = _noting_journal_reads(path)
        for name, patched in patches.items():
            monkeypatch.setattr(os, name, patched)
        leases = await other.claim(time.time() + 1, 1)
        monkeypatch.undo()
        assert [lease.run_id for lease in leases] == [run.id]
        if shape == "plain":
            assert noted == ["fstat", "pread"]
        _record, events = await leases[0].read_run(other)
        assert [e["ts"] for e in events] == [1.0, 2.0]
        assert events[-1]["result"] == big
        assert Path(path).read_bytes() == whole  # a torn tail is slack again
        await leases[0].append([{"type": "step_completed", "ts": 4.0, "op": 2}])
        await leases[0].release()
        assert [e["ts"] for e in await other.read_journal(run.id)] == [1.0, 2.0, 4.0]
    finally:
        await other.close()


async def test_a_claim_hands_a_record_it_rebuilt_to_the_lease_as_it_is(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run without ``run.json`` (most: the journal's ends give the record back) is rebuilt
    by the claim from the journal it read; the lease takes that record as it is, with no
    JSON made of it to be parsed back. Its saves and reads are those of any lease."""
    run = await created(local)
    os.unlink(os.path.join(local.run_dir(run.id), "run.json"))  # as ``wf.start`` leaves it
    other = LocalStore(root)  # another worker: it did not create the run
    try:
        encoded: list[str] = []
        to_json = RunRecord.to_json

        def noted(self: RunRecord) -> dict[str, Any]:
            encoded.append(self.id)
            return to_json(self)

        monkeypatch.setattr(RunRecord, "to_json", noted)
        leases = await other.claim(time.time() + 1, 1)
        assert [lease.run_id for lease in leases] == [run.id]
        assert encoded == []
        monkeypatch.undo()
        record, _events = await leases[0].read_run(other)
        assert (record.id, record.status) == (run.id, RunStatus.PENDING)
        record.status = RunStatus.RUNNING
        await leases[0].save(record)
        await leases[0].release()
        assert (await other.get_run(run.id)).status is RunStatus.RUNNING
    finally:
        await other.close()


async def test_a_claim_looks_at_no_inbox_for_the_entry_a_pending_run_keeps_anyway(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease brings the run's queue entries in line with its record, and keeps the due-now
    entry for a message in the inbox. A pending run keeps that entry as its record's: its
    inbox is not listed for it (one look a claimed run fewer). A suspended run with a message
    posted stays due through the next lease's reconciliation."""
    pending = await created(local)
    suspended = await created(local)
    lease = await acquire(local, suspended.id)
    record_ = suspended.copy()
    record_.status, record_.wake_at = RunStatus.SUSPENDED, time.time() + 3600
    await lease.save(record_)
    await lease.release()
    other = LocalStore(root)  # another worker: it did not create the runs
    try:
        listed: list[str] = []
        listdir = _fsops.listdir

        def noted(path: str, **how: Any) -> list[str]:
            listed.append(path)
            return listdir(path, **how)

        monkeypatch.setattr(_fsops, "listdir", noted)
        leases = await other.claim(time.time() + 1, 2)
        assert [lease.run_id for lease in leases] == [pending.id]
        assert not [path for path in listed if path.endswith("inbox")]
        monkeypatch.undo()
        await leases[0].release()
        # A message posted to the suspended run: the due-now entry the post made is not the
        # record's; its inbox keeps the run due.
        await other.post(suspended.id, "wake", {})
        lease = await other.try_acquire(suspended.id)
        assert lease is not None
        await lease.release()
        assert suspended.id in await other.due_runs(time.time() + 1, 10)
    finally:
        await other.close()


async def test_a_claim_refused_a_lock_does_little_else(local: LocalStore, root: Path) -> None:
    """A lock attempt another driver refuses is tried before anything else is made for the
    attempt (no fault-containing block, no lease machinery): with four workers each run is
    refused about three times. Counted in Python function calls per refused attempt, the
    queue's merge included (22 before, 9 now)."""
    runs = [await created(local) for _ in range(50)]
    locks = []
    for run in runs:  # another worker's drives
        fd = os.open(os.path.join(local.run_dir(run.id), "journal.jsonl"), os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        locks.append(fd)
    other = LocalStore(root)  # another worker: it created none of the runs
    try:
        await other.claim(time.time() + 1, 1, exclude={run.id for run in runs})  # its view
        calls = 0

        def count(_frame: Any, event: str, _arg: Any) -> None:
            nonlocal calls
            calls += event == "call"

        held: set[str] = set()
        sys.setprofile(count)
        try:
            leases = await other.claim(time.time() + 1, 1, held=held)
        finally:
            sys.setprofile(None)
        assert leases == [] and held == {run.id for run in runs}
        assert calls / len(runs) <= 12
    finally:
        for fd in locks:
            os.close(fd)
        await other.close()


async def test_a_claim_interrupted_at_a_lock_attempt_gives_back_what_it_leased(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt (Ctrl-C under a plain ``asyncio.run``, MemoryError) raised while a claim
    tries a run's lock gives back the runs the claim already leased, as one raised anywhere
    else in the claim does: none stays locked by a claim that never returned them."""
    for _ in range(2):
        await created(local)
    other = LocalStore(root)  # another worker: it created none of the runs, so locks first
    tried = 0
    real = _fsops.try_lock

    def interrupted_second(path: str, flags: int, **options: Any) -> int | None:
        nonlocal tried
        tried += 1
        if tried == 2:
            raise KeyboardInterrupt
        return real(path, flags, **options)

    monkeypatch.setattr(_fsops, "try_lock", interrupted_second)
    try:
        with pytest.raises(KeyboardInterrupt):
            await other.claim(time.time() + 1, 2)
        monkeypatch.setattr(_fsops, "try_lock", real)
        third = LocalStore(root)
        try:
            assert len(await third.claim(time.time() + 1, 2)) == 2
        finally:
            await third.close()
    finally:
        await other.close()


async def test_a_claim_locking_a_fifo_for_a_journal_skips_it_as_damage(
    local: LocalStore, root: Path
) -> None:
    """The journal is locked before it is looked at: a FIFO in its place (no file wf
    wrote) is still refused before anything reads it, the run skipped and said damaged."""
    runs = [await created(local) for _ in range(2)]
    journal = os.path.join(local.run_dir(runs[0].id), "journal.jsonl")
    os.unlink(journal)
    os.mkfifo(journal)
    other = LocalStore(root)  # another worker: it created none of the runs
    try:
        with collect_faults() as faults:
            leases = await other.claim(time.time() + 1, 2)
        assert [lease.run_id for lease in leases] == [runs[1].id]
        assert [f.item for f in faults] == [runs[0].id] and "is a FIFO" in faults[0].reason
        for lease in leases:
            await lease.release()
    finally:
        await other.close()


async def test_a_wait_cancelled_as_it_is_woken_ends_cancelled(tmp_path: Path) -> None:
    """The waits of a local store (its ``Hub``) end cancelled when a cancel arrives in the
    same moment as the change that woke them: ``wf run`` hung after Ctrl-C when a run's
    suspension woke its view's wait just as the signal landed."""
    from wf.store.local._notify import Hub

    hub = Hub(str(tmp_path))
    waiter = asyncio.ensure_future(hub.wait("run", 10.0, lambda: 0, 0, 5.0))
    await asyncio.sleep(0)
    hub.touch("run")  # what a write of this process does
    assert waiter.cancel()  # not returned yet
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5.0):
            await waiter


async def _watched(tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "wf")
    await store.wait_for_activity(0.01)  # the store made, its watcher up
    if not store.hub.hearing():
        await store.close()
        pytest.skip("no file-system events here")
    return store


async def test_own_queue_changes_reported_back_by_the_watcher_wake_no_one(
    tmp_path: Path,
) -> None:
    """A process counts its own changes to ``queue/`` as it makes them: the watcher's report
    of them, about 50 ms later, is no news (a grouped drain's worker looked at the queue again
    for nothing after each round of its runs' ends). Another process's change still wakes."""
    store = await _watched(tmp_path)
    try:
        run_id = new_run_id()
        store.queue.add(NOW, run_id)
        await asyncio.sleep(0.3)  # reported back meanwhile
        waiter = asyncio.ensure_future(store.hub.wait("", 5.0, lambda: 0, 0, 5.0))
        await asyncio.sleep(0)
        store.queue.remove(NOW, run_id)
        await asyncio.sleep(0.3)
        assert not waiter.done()
        (Path(store.queue.dir) / queue_name(NOW, new_run_id())).touch()  # another process's
        async with asyncio.timeout(5.0):
            await waiter
    finally:
        await store.close()


async def test_an_own_queue_change_undone_by_another_process_is_news(tmp_path: Path) -> None:
    """An entry this process made and another removed before the watcher reported either is
    heard as a change: only an event that is exactly the process's own change is no news."""
    store = await _watched(tmp_path)
    try:
        waiter = asyncio.ensure_future(store.hub.wait("", 5.0, lambda: 0, 0, 5.0))
        await asyncio.sleep(0)
        run_id = new_run_id()
        store.queue.add(NOW, run_id)
        (Path(store.queue.dir) / queue_name(NOW, run_id)).unlink()  # another process's
        async with asyncio.timeout(5.0):
            await waiter
    finally:
        await store.close()


Report = tuple[set[str], "set[str] | None", "set[str] | None"]


class _HeldReports:
    """The hub as the watcher sees it, but for its reports: kept here instead of dispatched,
    for the test to dispatch them when it chooses."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self.reports: list[Report] = []

    def dispatch(
        self, paths: set[str], kept: set[str] | None = None, gone: set[str] | None = None
    ) -> None:
        self.reports.append((paths, kept, gone))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hub, name)


def _held_reports(store: LocalStore, monkeypatch: pytest.MonkeyPatch) -> list[Report]:
    """The watcher's reports, kept instead of dispatched (``_HeldReports``)."""
    held = _HeldReports(store.hub)
    monkeypatch.setattr(store.hub._watcher, "_hub", held)
    return held.reports


async def test_another_processs_post_reported_with_this_processs_own_is_heard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post replaces its run's due-now entry, so this process's post and another process's
    to the same run, reported by the watcher in one go, are one event: the run's driver hears
    it at once (its inbox watch is called), not a second later at its next poll."""
    store = await _watched(tmp_path)
    try:
        run = record()
        await store.create_run(run)
        heard: list[int] = []
        stop = store.watch_inbox(run.id, lambda: heard.append(1))
        dispatch = store.hub.dispatch
        reports = _held_reports(store, monkeypatch)
        store.queue.poke(run.id)  # this process's post
        entry = Path(store.queue.dir) / queue_name(NOW, run.id)
        temp = entry.with_name(".another-process.tmp")
        temp.touch()
        temp.rename(entry)  # another process's post
        async with asyncio.timeout(5.0):
            while not any(str(temp) in paths for paths, _, _ in reports):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        heard.clear()  # the reports held, nothing else called it
        paths, kept, gone = set[str](), set[str](), set[str]()
        for report in reports:  # as one report (they came within the watcher's 50 ms)
            paths |= report[0]
            kept |= report[1] or set()
            gone |= report[2] or set()
        assert str(entry) in kept and str(entry) not in gone  # a replace: made, never removed
        dispatch(paths, kept, gone)
        await asyncio.sleep(0)
        assert heard
        stop()
    finally:
        await store.close()


async def test_an_own_queue_change_reported_back_at_once_is_no_news(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub expects this process's change to ``queue/`` before it makes it: a report of it
    that comes before the change's call has returned is no news either (and no expectation is
    left behind to take another process's later change of that entry for this one's)."""
    store = await _watched(tmp_path)
    try:
        dispatch = store.hub.dispatch
        _held_reports(store, monkeypatch)  # the watcher's own report comes too late here
        names = store.queue._names
        touch = names.touch

        def reported_at_once(directory: str, name: str) -> bool:
            made = touch(directory, name)
            path = os.path.join(directory, name)
            dispatch({path}, {path}, set())
            return made

        monkeypatch.setattr(names, "touch", reported_at_once)
        waiter = asyncio.ensure_future(store.hub.wait("", 5.0, lambda: 0, 0, 5.0))
        await asyncio.sleep(0)
        assert store.queue.add(due_field(time.time() + 3600), new_run_id())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        waiter.cancel()
    finally:
        await store.close()


async def test_an_entry_heard_only_removed_leaves_the_view_without_a_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view drops an entry another process's removal was reported of without looking it
    up: with four workers draining a backlog, each hears every run the others end, and that
    ``lstat`` was most of what a view cost. An entry reported made (or removed and made
    again) is looked up, also when a report of its removal came before."""
    store = await _watched(tmp_path)
    try:
        runs = [await created(store) for _ in range(3)]
        assert len(store.queue.entries()) == 3  # the view read once: it is kept from now on
        dispatch = store.hub.dispatch
        _held_reports(store, monkeypatch)  # reports are dispatched below, as this test says
        entries = {p.name.rpartition("+")[2]: str(p) for p in Path(store.queue.dir).iterdir()}
        paths = [entries[run.id] for run in runs]
        os.unlink(paths[0])  # another process ended it
        dispatch({paths[0]}, set(), {paths[0]})
        os.unlink(paths[1])  # another process removed it and made it again
        Path(paths[1]).touch()
        dispatch({paths[1]}, {paths[1]}, {paths[1]})
        dispatch({paths[2]}, set(), {paths[2]})  # heard removed, then heard made again:
        dispatch({paths[2]}, {paths[2]}, set())  # the later report counts (it is there)
        looked: list[str] = []
        real_lexists = os.path.lexists

        def lexists(path: Any) -> bool:
            looked.append(str(path))
            return real_lexists(path)

        monkeypatch.setattr(os.path, "lexists", lexists)
        assert {run_id for _due, run_id in store.queue.entries()} == {runs[1].id, runs[2].id}
        assert sorted(looked) == sorted(paths[1:])
    finally:
        await store.close()


async def test_a_claim_that_locks_a_run_whose_entry_is_gone_looks_no_further(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run another worker ended since this worker's view last heard of it (the watcher
    reports about 50 ms late) is free to lock: once locked, its entry is looked for before
    anything else, and the run given back at once, without the looks at its directory and
    journal a run it leases gets (with four workers, a third of a run in four ended so)."""
    store = await _watched(tmp_path)
    other = LocalStore(tmp_path / "wf")  # another worker: it created none of the runs
    try:
        runs = [await created(store) for _ in range(2)]
        assert len(other.queue.entries()) == 2  # its view, kept from now on
        _held_reports(store, monkeypatch)  # the watcher's reports come too late here
        first = next(p for p in Path(store.queue.dir).iterdir() if p.name.endswith(runs[0].id))
        first.unlink()  # the other worker ended it
        looked, patches = _noting_looks()
        for name, noting in patches.items():
            monkeypatch.setattr(os, name, noting)
        leases = await other.claim(time.time() + 1, 2)
        monkeypatch.undo()
        assert [lease.run_id for lease in leases] == [runs[1].id]
        for lease in leases:
            await lease.release()
        assert [path for path in looked if runs[0].id in path] == [str(first)]
        assert [path for path in looked if store.run_dir(runs[1].id) in path]  # leased
    finally:
        await other.close()
        await store.close()


class _Looks:
    """A notifier of the watcher whose looks (``watch`` calls) are noted by their step."""

    def __init__(self, notify: Any) -> None:
        self.notify = notify
        self.steps: list[int] = []

    def watch(self, debounce: int, step: int, timeout: int, stop: Any) -> Any:
        self.steps.append(step)
        return self.notify.watch(debounce, step, timeout, stop)

    def close(self) -> None:
        self.notify.close()


async def test_the_watcher_looks_less_often_while_nobody_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher looks at its notifier every ``STEP_MS`` while someone in the process waits
    for a change (or did within ``WAITED_RECENTLY``: an idle worker woken by a report is
    between two waits), and every ``QUIET_STEP_MS`` while nobody does (a worker whose places
    are all taken): each look takes the GIL, and with four workers on two cores their
    wake-ups preempted the workers about once per run. A wait that begins during a slower
    look gets the quick ones within ``QUIET_TIMEOUT_MS``; a change is reported either way."""
    from wf.store.local import _notify

    store = await _watched(tmp_path)
    try:
        monkeypatch.setattr(_notify, "WAITED_RECENTLY", 0.0)  # the store's first wait is over
        watcher = store.hub._watcher
        assert watcher is not None
        looks = _Looks(watcher._make())
        with watcher._lock:
            watcher._notify = looks  # type: ignore[assignment]
            watcher._switch.set()
        async with asyncio.timeout(5.0):
            while not looks.steps:
                await asyncio.sleep(0.01)
        assert set(looks.steps) == {_notify.QUIET_STEP_MS}  # nobody waits
        monkeypatch.setattr(_notify, "WAITED_RECENTLY", 60.0)
        seen = store.hub.activity
        waiter = asyncio.ensure_future(store.hub.wait("", 10.0, lambda: 0, 0, 10.0))
        async with asyncio.timeout(5.0):
            while _notify.STEP_MS not in looks.steps:
                await asyncio.sleep(0.01)
            (Path(store.queue.dir) / queue_name(NOW, new_run_id())).touch()  # another process's
            await waiter
        assert store.hub.activity > seen
        after = len(looks.steps)  # nobody waits now, but someone did just before
        (Path(store.queue.dir) / queue_name(NOW, new_run_id())).touch()
        async with asyncio.timeout(5.0):
            while len(looks.steps) <= after:
                await asyncio.sleep(0.01)
        assert set(looks.steps[after:]) == {_notify.STEP_MS}
    finally:
        await store.close()


def _threads() -> dict[int, str]:
    """This process's threads: native id -> name as the system knows it (Linux)."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            found[int(tid)] = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
    return found


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's scheduling policies")
async def test_the_watchers_threads_do_not_preempt_others_as_they_wake(tmp_path: Path) -> None:
    """The watcher's thread and its notifier's (watchfiles' reader of inotify) run as
    ``SCHED_BATCH``: their wake-ups, one for every change another process makes to
    ``queue/``, wait for the core's next turn instead of preempting a worker's loop (with
    four workers on two cores, about once per run). So does the reader of a notifier that
    replaces it (a run directory watched); the thread that made them keeps its own policy."""
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        pytest.skip("this test runs under another scheduling policy")
    before = set(_threads())
    store = await _watched(tmp_path)
    try:
        watcher = store.hub._watcher
        assert watcher is not None
        assert os.sched_getscheduler(watcher._thread.native_id) == os.SCHED_BATCH
        readers = [t for t, name in _threads().items() if t not in before and "notify" in name]
        assert readers
        assert {os.sched_getscheduler(t) for t in readers} == {os.SCHED_BATCH}
        before = set(_threads())
        watched = tmp_path / "watched"
        watched.mkdir()
        watcher.add(str(watched))  # a new notifier, with a reader thread of its own
        readers = [t for t, name in _threads().items() if t not in before and "notify" in name]
        assert readers
        assert {os.sched_getscheduler(t) for t in readers} == {os.SCHED_BATCH}
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
    finally:
        await store.close()


@pytest.mark.parametrize("failure", ["made by another process", "error"])
async def test_an_own_queue_change_not_made_leaves_another_processs_heard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """A change this process expected but did not make (the entry was there, or the call
    failed) is forgotten, and another process's change of the entry the watcher reported
    meanwhile, taken for this one's, is heard after all."""
    store = await _watched(tmp_path)
    try:
        dispatch = store.hub.dispatch
        _held_reports(store, monkeypatch)
        names = store.queue._names
        touch = names.touch

        def raced(directory: str, name: str) -> bool:
            path = os.path.join(directory, name)
            Path(path).touch()  # another process's, reported before this one's call ends
            dispatch({path}, {path}, set())
            if failure == "error":
                raise StoreError("cannot link")
            return touch(directory, name)

        monkeypatch.setattr(names, "touch", raced)
        waiter = asyncio.ensure_future(store.hub.wait("", 5.0, lambda: 0, 0, 5.0))
        await asyncio.sleep(0)
        if failure == "error":
            with pytest.raises(StoreError):
                store.queue.add(due_field(time.time() + 3600), new_run_id())
        else:
            assert not store.queue.add(due_field(time.time() + 3600), new_run_id())
        async with asyncio.timeout(5.0):
            await waiter
    finally:
        await store.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_parsing_a_journal_leaves_the_collector_as_it_found_it(enabled: bool) -> None:
    # The parse pauses the cyclic collector while it makes the events (one walk of them
    # afterwards instead of many during), and gives it back in the state it found it in, on
    # success and on a corrupt journal alike.
    events = [{"type": "step_completed", "op": n, "result": n} for n in range(1000)]
    data = b"".join(orjson.dumps(e) + b"\n" for e in events)
    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        assert _journal.parse(data, "journal.jsonl") == events
        assert gc.isenabled() is enabled
        with pytest.raises(StoreCorrupted, match="line 2"):
            _journal.parse(b'{"type": "a"}\n{not json}\n', "journal.jsonl")
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()


def test_a_journals_slack_is_cut_off_as_rstrip_would() -> None:
    # Content then slack is the usual journal; NUL bytes elsewhere (a torn write zeroed, more
    # than a block of them) take the byte-by-byte way, with the same outcome.
    block = _journal._TAIL_BLOCK
    line = b'{"type":"run_started"}\n'
    for data in (
        b"",
        b"\0",
        line,
        line + bytes(3445),
        line + bytes(block),
        line + bytes(block + 1),
        bytes(block + 1),
        line + b"\0\0x\0",
        b"\0\0" + line,
        line + b"\0" + line,
    ):
        assert _journal._strip_nul(data) == data.rstrip(b"\0")


async def test_a_record_file_naming_another_run_is_no_cache_of_this_one(
    local: LocalStore,
) -> None:
    """``run.json`` is a cache of the journal: one that holds another run's record (a copy, a
    mix-up) is read past, the run's own journal says what it is, verify names the file, and
    the run's next save writes its own record there."""
    victim = await created(local)
    other = await created(local, workflow="tests:other")
    record_file = Path(local.run_location(victim.id)) / "run.json"
    record_file.write_text(json.dumps((await local.get_run(other.id)).to_json()))
    read = await local.get_run(victim.id)
    assert (read.id, read.workflow) == (victim.id, "tests:flow")
    problems = await local.verify()
    assert any(f"names run {other.id!r}" in line for line in problems), problems
    lease = await acquire(local, victim.id)
    await lease.save(await local.get_run(victim.id))
    await lease.release()
    assert json.loads(record_file.read_text())["id"] == victim.id
    assert not any("names run" in line for line in await local.verify())


async def test_a_watched_inbox_starts_the_watcher_only_for_a_run_that_lives_on(
    root: Path,
) -> None:
    """A run's driver watches its inbox (``watch_inbox``); the thread that hears other
    processes' posts costs every short run a share of CPU, so it starts only for a run still
    watched after ``HEAR_INBOXES_AFTER``, which then looks once for a post made meanwhile."""
    store = LocalStore(root)
    try:
        short, long = record(), record()
        for run in (short, long):
            await store.create_run(run)
        stop = store.watch_inbox(short.id, lambda: None)
        await asyncio.sleep(0.01)
        stop()  # the short run ended
        await asyncio.sleep(local_store_module.HEAR_INBOXES_AFTER * 2)
        assert not store.hub.hearing()

        heard = asyncio.Event()
        stop = store.watch_inbox(long.id, heard.set)
        await asyncio.sleep(0.01)
        assert not store.hub.hearing() and not heard.is_set()
        async with asyncio.timeout(5.0):
            await heard.wait()  # the watcher started, and the run looked once
        assert store.hub.hearing()
        stop()
    finally:
        await store.close()


async def test_the_watcher_starts_when_the_oldest_watched_inbox_is_old_enough(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One timer serves every watched inbox: when it comes, a run watched for less than
    ``HEAR_INBOXES_AFTER`` (the one watched before it having ended) puts it off until that run
    is watched that long. (Told from the timers' times, not from sleeps timed around them.)"""
    monkeypatch.setattr(local_store_module, "HEAR_INBOXES_AFTER", 0.05)
    loop = asyncio.get_running_loop()
    store = LocalStore(root)
    try:
        short, long = record(), record()
        for run in (short, long):
            await store.create_run(run)
        store.watch_inbox(short.id, lambda: None)()  # the short run ended at once
        first = store._hear_timer
        assert first is not None
        # However late the first timer comes, the long run will not be watched long enough.
        monkeypatch.setattr(local_store_module, "HEAR_INBOXES_AFTER", 3600.0)
        before = loop.time()
        stop = store.watch_inbox(long.id, lambda: None)
        after = loop.time()
        assert store._hear_timer is first  # no timer of its own
        async with asyncio.timeout(5.0):
            while store._hear_timer is first:  # the first timer comes
                await asyncio.sleep(0.01)
        put_off = store._hear_timer
        assert put_off is not None and not store.hub.hearing()
        assert before + 3600.0 <= put_off.when() <= after + 3600.0
        stop()
    finally:
        await store.close()


async def test_a_schedule_is_written_off_the_event_loop(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker saves each of many schedules due at once: their fsyncs must not stall its loop.
    writers: list[threading.Thread] = []
    save = _upkeep.Schedules.save

    def recorded(self: _upkeep.Schedules, schedule: Schedule) -> None:
        writers.append(threading.current_thread())
        save(self, schedule)

    monkeypatch.setattr(_upkeep.Schedules, "save", recorded)
    await local.save_schedule(Schedule(id="tick", workflow="tests:flow", cron="0 0 * * *"))
    assert writers and writers[0] is not threading.main_thread()
    found = await local.get_schedule("tick")
    assert found is not None and found.cron == "0 0 * * *"


# -- schedules -------------------------------------------------------------------------------


async def test_due_schedules_read_again_only_the_files_heard_to_change(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's pass (``due_schedules``) reads every schedule file once; after that, only
    those this process saved or file-system events named: 1,000 idle schedules cost a worker
    no reads, and a fire reads one file again, not all of them."""
    await local.open()  # the watcher of queue/ and schedules/
    for n in range(20):
        await local.save_schedule(Schedule(f"s{n}", "tests:flow", "* * * * *", next_run=1e3 + n))
    reads: list[str] = []
    read = _upkeep.Schedules._read

    def counted(self: _upkeep.Schedules, path: str) -> Schedule | None:
        reads.append(os.path.basename(path))
        return read(self, path)

    monkeypatch.setattr(_upkeep.Schedules, "_read", counted)

    async def looked(want: tuple[list[str], float | None]) -> list[str]:
        """Look until the pass finds ``want`` (events arrive after a moment) and then reads
        nothing more (the events of earlier saves all heard): the files read meanwhile."""
        reads.clear()
        async with asyncio.timeout(10):
            while True:
                due, later = await local.due_schedules(1e3 + 0.5)
                before = len(reads)
                if ([s.id for s in due], later) == want:
                    await asyncio.sleep(0.2)
                    await local.due_schedules(1e3 + 0.5)
                    if len(reads) == before:
                        return sorted(set(reads))
                await asyncio.sleep(0.01)

    await looked((["s0"], 1e3 + 1))
    assert local.hub.hearing_schedules()  # from the first pass, which watches schedules/
    assert await looked((["s0"], 1e3 + 1)) == []  # idle: nothing read
    # This process's save: that file alone is read again.
    await local.save_schedule(Schedule("s0", "tests:flow", "* * * * *", next_run=2e3))
    assert await looked(([], 1e3 + 1)) == [local.schedules.name("s0")]
    # Another process's save and removal (no signal in this one: the files alone).
    elsewhere = _upkeep.Schedules(str(root))
    elsewhere.save(Schedule("s5", "tests:flow", "* * * * *", next_run=1.0))
    assert await looked((["s5"], 1e3 + 1)) == [local.schedules.name("s5")]
    elsewhere.delete("s1")
    assert await looked((["s5"], 1e3 + 2)) == [local.schedules.name("s1")]


async def test_a_cancelled_schedule_save_ends_only_once_its_write_landed(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write runs in a thread, under the caller's flock: a cancellation that left before
    it landed would release the lock while the file is still being replaced."""
    await local.save_schedule(Schedule("s", "tests:flow", "* * * * *"))
    writing, go = threading.Event(), threading.Event()
    save = local.schedules.save

    def slow_save(schedule: Schedule) -> None:
        writing.set()
        go.wait(5)
        save(schedule)

    monkeypatch.setattr(local.schedules, "save", slow_save)
    changed = Schedule("s", "tests:flow", "* * * * *", paused=True)
    saving = asyncio.ensure_future(local.save_schedule(changed))
    assert await asyncio.to_thread(writing.wait, 5)
    saving.cancel()
    done, _ = await asyncio.wait({saving}, timeout=0.1)
    assert not done  # still waiting for the thread
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(saving, 5)
    found = await local.get_schedule("s")
    assert found is not None and found.paused


async def test_keyed_posts_behind_another_process_wait_in_one_thread(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process holds the deliveries' lock, a process's keyed posts queue behind
    one thread waiting on it (each in its own took the whole thread pool, and the holder
    needs it); waiters cancelled meanwhile, the one in the thread included, leave nothing
    held."""
    run = record()
    await local.create_run(run)
    delivered = os.path.join(local.root, "hooks", "delivered")
    os.makedirs(delivered, exist_ok=True)
    held = os.open(os.path.join(delivered, ".lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # another open file: as another process's
    waiting, threads = threading.Event(), []
    lock = local.hooks.lock_deliveries

    def counted(*, wait: bool) -> int | None:
        if wait:
            threads.append(threading.current_thread())
            waiting.set()
        return lock(wait=wait)

    monkeypatch.setattr(local.hooks, "lock_deliveries", counted)
    posts = [
        asyncio.ensure_future(
            local.post_once(
                run.id, "hook", {"n": n}, WebhookDelivery(f"k{n}", "t", run.id, "", None, 1.0)
            )
        )
        for n in range(64)
    ]
    assert await asyncio.to_thread(waiting.wait, 5)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(threads) == 1 and not any(post.done() for post in posts)
    for post in posts[:8]:  # the first waits in the thread
        post.cancel()
    await asyncio.wait(posts[:8])
    os.close(held)
    async with asyncio.timeout(10):
        assert await asyncio.gather(*posts[8:]) == [None] * 56
    assert sorted(m.data["n"] for m in await local.read_inbox(run.id)) == list(range(8, 64))
    assert len(threads) == 1


async def test_names_with_digits_int_refuses_are_damage_not_a_stopped_worker(
    local: LocalStore, root: Path
) -> None:
    """``str.isdigit`` also takes superscripts and other digits ``int`` refuses: a stray file
    whose name has them where a number belongs (in the queue, a lane, the index) is skipped
    or reported, never a ``ValueError`` that stops every claim, listing and check."""
    runs = [await created(local) for _ in range(2)]
    queue = root / "queue"
    due = sorted(os.listdir(queue))[0].partition("+")[0]
    for name in (
        "²" * 14 + "+run_a",
        f"{due}+s²+run_b",
        f"{due}+p²+run_c",
        f"{due}+g{'a' * 16}+w²+s9+run_d",
        f"{due}+s²²",
    ):
        (queue / name).touch()
    (root / "lanes" / ("a" * 16)).mkdir(parents=True)
    (root / "lanes" / ("a" * 16) / "²+run_e").touch()
    (root / "index" / ("²" * 10)).mkdir(parents=True)
    other = LocalStore(root)  # another worker: it lists the queue afresh
    try:
        leases = await other.claim(time.time() + 1, 10)
        assert sorted(lease.run_id for lease in leases) == sorted(r.id for r in runs)
        for lease in leases:
            await lease.release()
        listed = await other.list_runs(limit=10)
        assert sorted(r.id for r in listed) == sorted(r.id for r in runs)
        problems = await other.verify()
        assert any("²" in problem for problem in problems)
    finally:
        await other.close()


@pytest.mark.parametrize("stray", ["directory", "fifo"])
async def test_a_stray_non_file_at_tmp_names_makes_entries_plain_files(
    root: Path, stray: str
) -> None:
    """``tmp/names``, the empty file queue and index entries are links to, replaced by a stray
    directory or FIFO: entries are made as plain empty files instead, and runs are created
    and driven (every entry failed, so a worker skipped every run it claimed)."""
    first = LocalStore(root)
    try:
        before = await created(first)
    finally:
        await first.close()
    marker = root / "tmp" / "names"
    marker.unlink()
    if stray == "directory":
        marker.mkdir()
    else:
        os.mkfifo(marker)
    store = LocalStore(root)
    try:
        run = await created(store)
        leases = await store.claim(time.time() + 1, 10)
        assert sorted(lease.run_id for lease in leases) == sorted([before.id, run.id])
        for lease in leases:
            await lease.release()
        assert [r.id for r in await store.list_runs(limit=10)] == [run.id, before.id]
    finally:
        await store.close()


@pytest.mark.parametrize(
    "damage",
    [
        "name not UTF-8",
        "name of another stream",
        "idx a directory",
        "data a directory",
        "data a link",
    ],
)
async def test_a_damaged_stream_is_left_out_of_its_runs_streams_and_named(
    tmp_path: Path, damage: str
) -> None:
    store = LocalStore(str(tmp_path / "s"))
    run = await created(store)
    lease = await acquire(store, run.id)
    await lease.write_chunk("bad", 0, b"x")
    await lease.write_chunk("good", 0, b"y")
    await lease.close_stream("good", 1)
    await lease.release()
    base = os.path.join(store.run_location(run.id), _layout.stream_key("bad"))
    if damage == "name not UTF-8":
        Path(base + ".name").write_bytes(b"\xff\xfe")
    elif damage == "name of another stream":
        Path(base + ".name").write_bytes(b"good")
    elif damage == "idx a directory":
        os.remove(base + ".idx")
        os.mkdir(base + ".idx")
    elif damage == "data a directory":  # its index still read: a count, and no chunk to read
        os.remove(base + ".data")
        os.mkdir(base + ".data")
    else:  # a link to a file of the right size, which no open of wf goes through
        os.rename(base + ".data", str(tmp_path / "elsewhere"))
        os.symlink(tmp_path / "elsewhere", base + ".data")
    with collect_faults() as damaged:
        assert await store.list_streams(run.id) == {"good": (1, True)}
    # Named by its file, not by a name it may not hold: one fault per stream, each run's own.
    [fault] = damaged
    item = f"{run.id}/{_layout.stream_key('bad')}"
    assert (fault.kind, fault.item, fault.where) == ("stream", item, base)
    assert not store.faults.of_kind("stream")  # the caller's to say, as with a hook
    [problem] = await store.verify()
    assert (
        problem.startswith(f"run {run.id}: stream {_layout.stream_key('bad')}: ")
        and base in problem
    )


async def test_a_listing_says_a_damaged_stream_as_it_is_now_not_as_a_worker_first_met_it(
    tmp_path: Path,
) -> None:
    """A worker (no collecting caller) met the name file while it was being rewritten (empty);
    a later listing for a front end says the damage it reads now: ``wf inspect`` over
    ``wf serve`` said "names stream ''" for a name file that was not UTF-8."""
    store = LocalStore(str(tmp_path / "s"))
    run = await created(store)
    lease = await acquire(store, run.id)
    await lease.write_chunk("bad", 0, b"x")
    await lease.release()
    name_file = Path(store.run_location(run.id), _layout.stream_key("bad") + ".name")
    name_file.write_bytes(b"")
    assert await store.list_streams(run.id) == {}  # the worker's read: noted, said once
    [first] = store.faults
    assert "names stream ''" in first.reason
    name_file.write_bytes(b"\xff\xfe")
    with collect_faults() as damaged:
        assert await store.list_streams(run.id) == {}
    [fault] = damaged
    assert "the stream's name is not UTF-8" in fault.reason, fault.reason
    assert (fault.kind, fault.item, fault.where) == (first.kind, first.item, first.where)


async def _two_chunks_of(store: LocalStore, stream: str) -> str:
    run = await created(store)
    lease = await acquire(store, run.id)
    await lease.write_chunk(stream, 0, b"x")
    await lease.write_chunk(stream, 1, b"y")
    await lease.release()
    return run.id


@pytest.mark.parametrize("damage", ["name not UTF-8", "name of another stream"])
async def test_one_streams_count_is_read_from_its_chunk_files_whatever_its_name_file_holds(
    tmp_path: Path, damage: str
) -> None:
    """A writer asks for one stream's count: the listing leaves the stream out, but its chunk
    files (named by its key) still say where the next chunk goes."""
    store = LocalStore(str(tmp_path / "s"))
    run_id = await _two_chunks_of(store, "out")
    base = os.path.join(store.run_location(run_id), _layout.stream_key("out"))
    Path(base + ".name").write_bytes(b"\xff\xfe" if damage == "name not UTF-8" else b"good")
    assert await store.stream_info(run_id, "out") == (2, False)
    assert await store.stream_info(run_id, "never") == (0, False)
    # The default, built on the listing, cannot tell: it says damaged, never "0 chunks".
    with pytest.raises(StoreCorrupted, match="'out' cannot be read"):
        await Store.stream_info(store, run_id, "out")


async def test_one_stream_whose_index_is_damaged_raises_rather_than_count_nothing(
    tmp_path: Path,
) -> None:
    store = LocalStore(str(tmp_path / "s"))
    run_id = await _two_chunks_of(store, "out")
    base = os.path.join(store.run_location(run_id), _layout.stream_key("out"))
    os.remove(base + ".idx")
    os.mkdir(base + ".idx")
    with pytest.raises(StoreCorrupted, match="is a directory"):
        await store.stream_info(run_id, "out")


async def test_a_stream_file_that_fails_to_stat_this_once_is_an_error_not_damage(
    tmp_path: Path,
) -> None:
    """EIO reading a stream's data size says nothing of the stream: the listing raises it (to
    be tried again), and does not note the stream as damaged for good."""
    store = LocalStore(str(tmp_path / "s"))
    run_id = await _two_chunks_of(store, "out")
    with _fsops.inject("stat", errno.EIO, match=".data"), pytest.raises(StoreError) as raised:
        await store.list_streams(run_id)
    assert not isinstance(raised.value, StoreCorrupted)
    assert not list(store.faults)
    assert await store.list_streams(run_id) == {"out": (2, False)}


@pytest.mark.parametrize(
    "line",
    [
        b"{}",
        b'{"ts": "nope", "op": 0, "step": "s", "attempt": 1, "stream": "stdout", "text": "x"}',
        b'{"ts": 1.0, "op": "x", "step": ["s"], "attempt": 1, "stream": "stdout", "text": "x"}',
        b'{"ts": 1.0, "op": 0, "step": "s", "attempt": 1, "stream": "stdout", "text": 5}',
        b'{"ts": 1.0, "op": 0, "step": "s", "attempt": 1, "stream": "log", "text": "", "level": 1}',
    ],
)
async def test_a_step_log_line_of_the_wrong_shape_is_skipped_as_a_stray_write(
    tmp_path: Path, line: bytes
) -> None:
    """Every reader formats a log entry's fields (a time, a step's name): one of another type
    is a stray write, skipped as an undecodable line is, not an entry that fails its reader."""
    from wf.store.conformance import log_entry

    store = LocalStore(str(tmp_path / "s"))
    run = await created(store)
    lease = await acquire(store, run.id)
    await lease.append_logs([log_entry("before")])
    with open(os.path.join(store.run_location(run.id), "logs.jsonl"), "ab") as file:
        file.write(line + b"\n")
    await lease.append_logs([log_entry("after")])
    await lease.release()
    assert [entry["text"] for entry in await store.read_logs(run.id)] == ["before", "after"]
    assert [entry["text"] for entry in await store.read_logs(run.id, 1)] == ["after"]
