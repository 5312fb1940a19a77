"""``LocalStore`` with finished runs packed into segment files (``_segments``, ``_compact``).

The conformance kit runs on a store that packs every run it can before and after every call,
so every read meets packed runs and every write unpacks them; then what only packing can get
wrong: crashes between its steps, damage in a segment, the room a finished run takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Awaitable, Callable
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
    save,
)
from wf import RunNotFound, StoreCorrupted, StoreError
from wf.store import HookRecord, RunStatus, Store, collect_faults
from wf.store.conformance import StoreConformance, event, log_entry
from wf.store.local import LocalStore, _compact, _fsops
from wf.store.local._layout import FORMAT, TEMP_AGE, temp_name
from wf.store.local._segments import Loc, Segments, decode

FAR = 4_000_000_000.0


def pack_all(store: LocalStore) -> int:
    """Pack every run that can be, whatever its age."""
    if not store._open(create=False):
        return 0
    return _compact.compact(store, now=FAR, older_than=0.0, limit=1_000_000).packed


class PackingStore(LocalStore):
    """Packs what it can before and after each call of the ``Store`` interface."""


def _packing(name: str) -> Callable[..., Awaitable[Any]]:
    original = getattr(LocalStore, name)

    async def method(self: PackingStore, *args: Any, **kwargs: Any) -> Any:
        pack_all(self)
        result = await original(self, *args, **kwargs)
        pack_all(self)
        return result

    method.__name__ = name
    return method


for _name in (
    "get_run",
    "list_runs",
    "search_runs",
    "read_journal",
    "try_acquire",
    "claim",
    "post",
    "read_inbox",
    "due_runs",
    "read_chunks",
    "list_streams",
    "stream_info",
    "read_logs",
    "delete_runs",
    "get_tombstone",
    "store_info",
    "verify",
    "list_hooks",
    "lane_ahead",
    "next_due_at",
):
    setattr(PackingStore, _name, _packing(_name))


class TestPackedLocalStore(StoreConformance):
    """The kit on a store whose finished runs are packed as soon as they can be."""

    async def make_store(self, tmp_path: Path) -> Store:
        return PackingStore(tmp_path / ".workflows")

    async def make_peer(self, store: Store, tmp_path: Path) -> Store:
        return PackingStore(tmp_path / ".workflows")

    async def damage_run(self, store: Store, run_id: str) -> None:
        damage_local_run(store, run_id)

    async def edit_record(self, store: Store, run_id: str, changes: dict[str, Any]) -> None:
        await edit_record(store, run_id, changes)

    async def damage_schedule(self, store: Store, schedule_id: str) -> None:
        damage_local_schedule(store, schedule_id)


async def finished(store: LocalStore, *, failed: bool = False, **fields: Any) -> Any:
    """A run that ended (completed, or ``failed``: the one outcome a journal may go on
    after, with a retry's ``run_retrying``), with a step and a log line."""
    run = await created(store, **fields)
    lease = await acquire(store, run.id)
    await lease.append([event("step_completed", op=0, result=1)])
    await lease.append_logs([log_entry("hello")])
    if failed:
        run.status, run.error = RunStatus.FAILED, {"type": "ValueError", "message": "x"}
        outcome = event("run_failed", error=run.error)
    else:
        run.status, run.output = RunStatus.COMPLETED, 3
        outcome = event("run_completed", output=3)
    await lease.append_and_save([outcome], run)
    await lease.release()
    return run


@pytest.mark.parametrize(("field", "value"), [("retention", "1s"), ("max_recoveries", -1)])
async def test_a_packed_record_file_with_a_field_of_the_wrong_kind_is_rebuilt_from_the_journal(
    local: LocalStore, root: Path, field: str, value: Any
) -> None:
    """A run packed with a ``run.json`` whose field ``RunRecord.from_json`` refuses (its
    journal healthy): the packed record is a damaged cache, rebuilt from the packed journal,
    as in a run's directory."""
    run = await finished(local, retention=60.0, max_recoveries=2)
    path = root / "runs" / run.id / "run.json"
    data = orjson.loads(path.read_bytes())
    path.write_bytes(orjson.dumps({**data, field: value}))
    assert pack_all(local) == 1
    assert not (root / "runs" / run.id).is_dir()
    with collect_faults() as met:
        got = await local.get_run(run.id)
        assert (got.status, got.retention, got.max_recoveries) == (RunStatus.COMPLETED, 60.0, 2)
        assert [r.id for r in await local.list_runs()] == [run.id]
    assert met == []


async def test_a_packed_run_reads_as_it_did_and_leaves_its_directory(
    local: LocalStore, root: Path
) -> None:
    run = await finished(local)
    before = (
        await local.get_run(run.id),
        await local.read_journal(run.id),
        await local.read_logs(run.id),
    )
    assert pack_all(local) == 1
    assert not (root / "runs" / run.id).exists() and (root / "packed" / run.id).is_symlink()
    after = (
        await local.get_run(run.id),
        await local.read_journal(run.id),
        await local.read_logs(run.id),
    )
    assert after == before
    assert [r.id for r in await local.list_runs(statuses=[RunStatus.COMPLETED])] == [run.id]
    assert await local.read_inbox(run.id) == [] and await local.list_streams(run.id) == {}
    assert await local.verify() == []
    assert (await local.store_info()).runs["completed"] == 1


async def test_only_finished_runs_with_nothing_but_record_journal_and_logs_are_packed(
    local: LocalStore, root: Path
) -> None:
    live = await created(local)
    streamed = await finished(local)
    lease = await acquire(local, streamed.id)
    await lease.write_chunk("out", 0, b"x")
    await lease.release()
    recent = await finished(local)
    assert _compact.compact(local, now=recent.updated_at + 1, older_than=60.0, limit=10).packed == 0
    assert pack_all(local) == 1  # only ``recent``, once old enough: the others never
    assert sorted(os.listdir(root / "packed")) == [recent.id]
    assert (await local.get_run(live.id)).status is RunStatus.PENDING


def cut_short_post(root: Path, run_id: str, age: float) -> Path:
    """What a crash between a post's two steps leaves: its message in a temporary file of the
    run's inbox, last written ``age`` seconds ago (no message: nothing was acknowledged)."""
    inbox = root / "runs" / run_id / "inbox"
    inbox.mkdir(exist_ok=True)
    temp = inbox / temp_name("msg_0.json")
    temp.write_bytes(b"{}")
    then = temp.stat().st_mtime - age
    os.utime(temp, (then, then))
    return temp


async def test_a_post_cut_short_by_a_crash_keeps_its_run_from_being_packed_only_for_a_while(
    local: LocalStore, root: Path
) -> None:
    """The temporary file of a post cut short by a crash keeps its ended run from being packed
    (a post under way, between its steps, must) until it is older than any post takes: then
    the packer removes it and packs the run."""
    young, old = await finished(local), await finished(local)
    left = cut_short_post(root, young.id, 60.0)
    gone = cut_short_post(root, old.id, TEMP_AGE + 60.0)
    assert pack_all(local) == 1
    assert os.listdir(root / "packed") == [old.id]
    assert left.exists() and not gone.exists()
    assert (await local.get_run(old.id)).status is RunStatus.COMPLETED


async def test_verify_removes_a_post_cut_short_by_a_crash_once_it_is_old(
    local: LocalStore, root: Path
) -> None:
    young, old = await finished(local), await finished(local)
    left = cut_short_post(root, young.id, 60.0)
    gone = cut_short_post(root, old.id, TEMP_AGE + 60.0)
    problems = await local.verify()
    assert problems == [
        f"run {old.id}: inbox/ held {gone.name}, a post cut short by a crash: removed"
    ]
    assert left.exists() and not gone.exists()
    assert await local.verify() == []
    assert await local.read_inbox(old.id) == []


async def test_a_run_whose_hooks_were_released_is_packed_and_one_with_a_live_hook_is_not(
    local: LocalStore, root: Path
) -> None:
    released, live = await created(local), await created(local)
    for run, token in ((released, "gone"), (live, "open")):
        assert await local.register_hook(HookRecord(token, run.id, 0)) is None
    await local.release_hook("gone", released.id)
    for run in (released, live):
        await save(local, run, RunStatus.COMPLETED)
    assert pack_all(local) == 1
    assert os.listdir(root / "packed") == [released.id]
    assert not (root / "hooks" / "runs" / released.id).exists()
    assert [h.token for h in await local.list_hooks(live.id)] == ["open"]


async def test_a_write_unpacks_the_run_first(local: LocalStore, root: Path) -> None:
    run = await finished(local, failed=True)
    pack_all(local)
    await local.post(run.id, "hook", {"x": 1})
    assert (root / "runs" / run.id).is_dir() and not (root / "packed" / run.id).exists()
    assert [m.data for m in await local.read_inbox(run.id)] == [{"x": 1}]
    assert len(await local.read_journal(run.id)) == 3
    lease = await acquire(local, run.id)  # a retry's way in
    await lease.append([event("run_retrying", attempt=2)])
    await lease.release()
    assert [e["type"] for e in await local.read_journal(run.id)][-1] == "run_retrying"
    assert await local.verify() == []


async def test_deleting_packed_runs_leaves_tombstones_and_reclaims_their_segment(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("wf.store.local._segments.SEGMENT_LIMIT", 1)  # a segment per batch
    first = [await finished(local) for _ in range(3)]
    pack_all(local)
    kept = await finished(local)
    pack_all(local)
    segments = Segments(str(root))
    assert len(segments.numbers()) == 2
    done = await local.delete_runs([r.id for r in first], now=9.0, reason="gc")
    assert sorted(done.ids) == sorted(r.id for r in first) and done.bytes > 0
    assert segments.numbers() == [2]  # all dead but the newest: rewritten away
    for run in first:
        assert (await local.get_tombstone(run.id)) is not None
        with pytest.raises(RunNotFound):
            await local.get_run(run.id)
    assert (await local.get_run(kept.id)).status is RunStatus.COMPLETED
    assert (await local.store_info()).runs["completed"] == 1
    assert await local.verify() == []


async def test_deleting_every_packed_run_frees_the_newest_segment_too(
    local: LocalStore, root: Path
) -> None:
    runs = [await finished(local) for _ in range(3)]
    pack_all(local)
    await local.delete_runs([r.id for r in runs], now=9.0, reason="gc")
    segments = Segments(str(root))
    assert segments.numbers() == [2] and os.path.getsize(segments.path(2)) == 0
    again = await finished(local)
    pack_all(local)
    assert segments.locate(again.id) == Loc(2, 0, os.path.getsize(segments.path(2)))
    assert await local.verify() == []


async def test_a_segment_left_dead_by_unpacks_is_reclaimed_by_the_next_pass(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("wf.store.local._segments.SEGMENT_LIMIT", 1)
    runs = [await finished(local) for _ in range(3)]
    pack_all(local)
    for run in runs:
        await local.post(run.id, "note", {})  # unpacked, and kept so by its message
    segments = Segments(str(root))
    assert segments.numbers() == [1]
    pack_all(local)
    assert segments.numbers() == [2] and os.path.getsize(segments.path(2)) == 0
    assert await local.verify() == []


async def test_rewriting_a_segment_moves_its_live_runs(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("wf.store.local._segments.SEGMENT_LIMIT", 1)
    runs = [await finished(local) for _ in range(3)]
    pack_all(local)
    await finished(local)
    pack_all(local)
    await local.delete_runs([runs[0].id, runs[1].id], now=9.0, reason="gc")
    segments = Segments(str(root))
    assert 1 not in segments.numbers()  # 2/3 dead: its last run moved to the newest
    assert (await local.get_run(runs[2].id)).output == 3
    assert await local.verify() == []


# -- crashes between the steps -------------------------------------------------------------------

PACK_STEPS = 19
"""Changes a pack of one run makes to the store (its first in a new store): each is cut in
turn, and a cut after the last is never reached (so the number is checked)."""
UNPACK_STEPS = 18


@pytest.mark.parametrize("after", range(PACK_STEPS + 1))
async def test_a_pack_cut_short_at_any_step_keeps_the_run_whole(
    local: LocalStore, root: Path, after: int
) -> None:
    """Each change a pack makes fails in turn (what a crash there leaves): the run reads the
    same, verify says at most that a locator stands beside a directory, and the next pack
    finishes the job."""
    run = await finished(local)
    journal = await local.read_journal(run.id)
    with _fsops.inject("*", errno.EIO, after=after) as cut, contextlib.suppress(StoreError):
        pack_all(local)  # fails at the ``after``-th change: what a crash there leaves
    # Every change from the cut on failed too, as after a crash; past the last, none.
    assert (cut.hits >= 1) is (after < PACK_STEPS)
    assert await local.read_journal(run.id) == journal
    assert all("both a directory and a locator" in p for p in await local.verify())
    pack_all(local)
    assert not (root / "runs" / run.id).exists()
    assert await local.read_journal(run.id) == journal
    assert await local.verify() == []


@pytest.mark.parametrize("after", range(UNPACK_STEPS + 1))
async def test_an_unpack_cut_short_at_any_step_keeps_the_run_whole(
    local: LocalStore, root: Path, after: int
) -> None:
    run = await finished(local)
    pack_all(local)
    journal = await local.read_journal(run.id)
    with _fsops.inject("*", errno.EIO, after=after) as cut, contextlib.suppress(StoreError):
        _compact.unpack(local, run.id)
    assert (cut.hits >= 1) is (after < UNPACK_STEPS)
    assert await local.read_journal(run.id) == journal
    assert all("both a directory and a locator" in p for p in await local.verify())
    lease = await acquire(local, run.id)
    await lease.release()
    assert (root / "runs" / run.id).is_dir() and not (root / "packed" / run.id).exists()
    assert await local.read_journal(run.id) == journal


async def test_a_run_left_with_a_directory_and_a_locator_reads_its_directory_verify_drops_it(
    local: LocalStore, root: Path
) -> None:
    run = await finished(local, failed=True)
    pack_all(local)
    _compact.unpack(local, run.id)
    stale = Segments(str(root))
    stale.link(run.id, _first_loc(stale))  # what an unpack cut short before its unlink left
    lease = await acquire(local, run.id)
    await lease.append([event("run_retrying", attempt=2)])
    await lease.release()
    assert [e["type"] for e in await local.read_journal(run.id)][-1] == "run_retrying"
    assert (
        f"run {run.id}: both a directory and a locator ({root / 'packed' / run.id}; a pack or an "
        "unpack was cut short): the directory is used, and the locator removed"
        in (await local.verify())
    )
    assert stale.locate(run.id) is None
    assert await local.verify() == []
    pack_all(local)  # packs the directory again
    assert [e["type"] for e in await local.read_journal(run.id)][-1] == "run_retrying"
    assert await local.verify() == []


def _decode_error(line: bytes) -> str:
    try:
        decode(line, "")
    except StoreCorrupted as error:
        return str(error).partition("(")[2].rpartition(")")[0]
    raise AssertionError("the line decodes")


def _first_loc(segments: Segments) -> Loc:
    offset, line = next(iter(segments.lines(segments.numbers()[0])))
    return Loc(segments.numbers()[0], offset, len(line))


# -- damage ----------------------------------------------------------------------------------


async def test_verify_names_a_damaged_line_and_the_run_it_holds(
    local: LocalStore, root: Path
) -> None:
    good, bad = await finished(local), await finished(local)
    pack_all(local)
    segments = Segments(str(root))
    loc = segments.locate(bad.id)
    assert loc is not None
    path = segments.path(loc.segment)
    data = bytearray(Path(path).read_bytes())
    line = orjson.loads(bytes(data[loc.offset : loc.offset + loc.length]))
    z = line["z"]
    middle = len(z) // 2
    line["z"] = z[:middle] + ("A" if z[middle] != "A" else "B") + z[middle + 1 :]
    damaged = orjson.dumps(line)
    data[loc.offset : loc.offset + loc.length - 1] = damaged
    Path(path).write_bytes(bytes(data))
    problems = await local.verify()
    assert [p for p in problems if "/segments/" in p] == [
        f"{path} at byte {loc.offset}: not a packed run ({_decode_error(damaged)}): "
        f"run {bad.id} is lost"
    ]
    assert (await local.get_run(good.id)).output == 3
    with pytest.raises(StoreCorrupted, match=f"byte {loc.offset}"):
        await local.get_run(bad.id)
    # A listing and a search leave it out and say which, as for a run in a directory.
    with collect_faults() as met:
        assert [r.id for r in await local.list_runs()] == [good.id]
        assert [r.id for r in (await local.search_runs("", limit=9, budget=9))[0]] == [good.id]
    assert {f.item for f in met} == {bad.id}


async def test_a_segment_that_is_a_directory_loses_its_runs_and_nothing_else(
    local: LocalStore, root: Path
) -> None:
    packed = [await finished(local), await finished(local)]
    pack_all(local)
    path = Segments(str(root)).path(1)
    os.remove(path)
    os.mkdir(path)
    loose = await finished(local)  # not packed: in its own directory
    problems = await local.verify()
    ids = ", ".join(sorted(run.id for run in packed))
    assert [p for p in problems if "/segments/" in p] == [
        f"{path} is a directory where a file belongs: remove it: the 2 packed run(s) ({ids}) "
        "in it cannot be read"
    ]
    with collect_faults() as met:
        assert [r.id for r in await local.list_runs()] == [loose.id]
    assert {f.item for f in met} == {run.id for run in packed}
    assert (await local.get_run(loose.id)).output == 3
    with pytest.raises(StoreCorrupted, match="is a directory"):
        await local.get_run(packed[0].id)


@pytest.mark.parametrize("damage", ["missing", "cut short"])
async def test_verify_keeps_the_counts_of_runs_in_a_segment_it_cannot_read(
    local: LocalStore, root: Path, damage: str
) -> None:
    """The runs are still there (a restore from backup brings them back): counting them out
    would make the counts drift, and go below zero once they are restored and deleted."""
    for _ in range(3):
        await finished(local)
    pack_all(local)
    path = Segments(str(root)).path(1)
    if damage == "missing":
        os.remove(path)
    else:
        os.truncate(path, os.path.getsize(path) // 2)
    problems = await local.verify()
    assert (await local.store_info()).runs["completed"] == 3
    assert not [p for p in problems if "a scan found" in p and "repaired" in p]


async def test_a_page_before_a_run_that_cannot_be_read_lists_the_runs_created_before_it(
    local: LocalStore, root: Path
) -> None:
    """A cursor names a damaged run (a search hands one out when its budget ends there):
    the index entry carries its creation number."""
    old = await created(local)  # pending: stays a directory
    damaged = await finished(local)
    pack_all(local)
    os.remove(Segments(str(root)).path(1))
    newest = await created(local)
    with collect_faults():
        assert [r.id for r in await local.list_runs(before=damaged.id)] == [old.id]
        found, cursor, _looked = await local.search_runs("", limit=9, budget=2)
        assert ([r.id for r in found], cursor) == ([newest.id], damaged.id)
        assert [
            r.id for r in (await local.search_runs("", limit=9, budget=9, before=cursor))[0]
        ] == [old.id]


@pytest.mark.parametrize(("limit", "budget"), [(1, 100), (2, 100), (9, 1), (9, 2), (9, 3)])
async def test_a_search_pages_on_past_a_run_that_cannot_be_read_where_a_page_ends(
    local: LocalStore, root: Path, limit: int, budget: int
) -> None:
    """A damaged run is left out, never the runs around it, wherever the pages end."""
    old = await created(local)  # pending: stays a directory
    damaged = await finished(local)
    pack_all(local)
    os.remove(Segments(str(root)).path(1))
    newer = [await created(local) for _ in range(3)]
    found: list[str] = []
    cursors: list[str] = []
    before: str | None = None
    with collect_faults():
        while True:
            page, before, _looked = await local.search_runs(
                "", limit=limit, budget=budget, before=before
            )
            found += [r.id for r in page]
            if before is None:
                break
            assert before not in cursors
            cursors.append(before)
            assert len(cursors) < 20
    assert found == [r.id for r in reversed(newer)] + [old.id]
    assert damaged.id not in found


async def test_packing_goes_on_in_a_new_segment_past_one_it_cannot_open(
    local: LocalStore, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """EACCES or EIO on the newest segment (a regular file): the packer says so and starts
    the next one, rather than fail every pass from then on."""
    first = await finished(local)
    pack_all(local)
    segments = Segments(str(root))
    assert segments.numbers() == [1]
    second = await finished(local)
    with _fsops.inject("open", errno.EACCES, match=segments.path(1)):
        assert pack_all(local) == 1
    assert segments.numbers() == [1, 2]
    third = await finished(local)
    assert pack_all(local) == 1  # the new segment is the newest now: appended to
    assert segments.numbers() == [1, 2]
    said = [r.getMessage() for r in caplog.records if "packing goes on" in r.getMessage()]
    assert len(said) == 1 and segments.path(1) in said[0] and "EACCES" in said[0]
    for run in (first, second, third):
        assert (await local.get_run(run.id)).output == 3
    assert await local.verify() == []


async def test_verify_says_once_per_segment_what_happened_to_it(
    local: LocalStore, root: Path
) -> None:
    """Missing, cut short (at which byte) or unreadable (its data intact): one line per
    segment with the runs it holds, and a read of one of its runs says the same."""
    runs = sorted([await finished(local) for _ in range(4)], key=lambda run: run.id)
    pack_all(local)
    segments = Segments(str(root))
    path = segments.path(1)
    whole = Path(path).read_bytes()
    ids = ", ".join(run.id for run in runs[:3]) + ", ..."

    def said() -> list[str]:
        return [p for p in problems if "/segments/" in p or "/packed/" in p]

    os.remove(path)
    problems = await local.verify()
    assert said() == [f"{path}: missing, with the 4 packed run(s) ({ids}) it held (restore it "
                      "from a backup)"]  # fmt: skip
    with pytest.raises(StoreCorrupted, match="missing"):
        await local.get_run(runs[0].id)

    cut = [segments.locate(run.id) for run in runs]
    last = max((loc for loc in cut if loc is not None), key=lambda loc: loc.offset)
    Path(path).write_bytes(whole[: last.offset + 5])
    gone = next(run.id for run in runs if segments.locate(run.id) == last)
    problems = await local.verify()
    assert said() == [
        f"{path}: cut short at byte {last.offset + 5}: the 1 packed run(s) ({gone}) past it "
        "are lost"
    ]
    with pytest.raises(StoreCorrupted, match=f"cut short at byte {last.offset + 5}"):
        await local.get_run(gone)

    Path(path).write_bytes(whole)
    with _fsops.inject("read", errno.EACCES, match=path):
        problems = await local.verify()
    assert said() == [
        f"{path}: unreadable: permission denied (its data may be intact: fix its permissions): "
        f"the 4 packed run(s) ({ids}) in it cannot be read"
    ]
    assert await local.verify() == []


@pytest.mark.parametrize("damage", ["cut short", "cut at a line's end", "a damaged line"])
async def test_a_damaged_segment_is_kept_as_it_is_not_rewritten_away(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """Its runs' locators point into it: a rewrite would leave them pointing at nothing (or
    copy the damage). It stays, marked, for a restore from a backup, after which verify
    lifts the mark and it is rewritten as any other."""
    monkeypatch.setattr("wf.store.local._segments.SEGMENT_LIMIT", 1)  # a segment per batch
    runs = [await finished(local) for _ in range(4)]
    pack_all(local)
    await finished(local)
    pack_all(local)  # segment 2: segment 1 is not the newest
    segments = Segments(str(root))
    path = segments.path(1)
    whole = Path(path).read_bytes()
    places = {run.id: segments.locate(run.id) for run in runs}
    last = max(runs, key=lambda run: places[run.id].offset)  # type: ignore[union-attr]
    loc = places[last.id]
    assert loc is not None
    if damage == "cut short":
        Path(path).write_bytes(whole[: loc.offset + 5])
    elif damage == "cut at a line's end":
        Path(path).write_bytes(whole[: loc.offset])
    else:
        line = bytearray(whole[loc.offset : loc.offset + loc.length])
        line[-10] = ord("!") if line[-10] != ord("!") else ord("?")
        Path(path).write_bytes(whole[: loc.offset] + bytes(line) + whole[loc.offset + loc.length :])
    await local.delete_runs([r.id for r in runs if r is not last], now=9.0, reason="gc")
    assert 1 in segments.numbers()  # three quarters dead, yet kept
    assert segments.locate(last.id) == loc
    assert os.path.exists(root / "segments" / "00000001.damaged")
    Path(path).write_bytes(whole)  # restored from a backup
    assert (await local.get_run(last.id)).output == 3
    assert await local.verify() == [
        f"{path}: every run packed in it reads again: no longer kept from rewriting (its "
        "damaged mark removed)"
    ]
    pack_all(local)  # a pass ends by reclaiming
    assert 1 not in segments.numbers()
    assert (await local.get_run(last.id)).output == 3
    assert await local.verify() == []


async def test_a_locator_past_any_file_offset_is_that_runs_damage(
    local: LocalStore, root: Path
) -> None:
    good, bad = await finished(local), await finished(local)
    pack_all(local)
    path = root / "packed" / bad.id
    os.remove(path)
    os.symlink("1.99999999999999999999.5", path)
    assert f"{path}: not a packed run's locator ('1.99999999999999999999.5')" in (
        await local.verify()
    )
    with pytest.raises(StoreCorrupted, match="not a packed run's locator"):
        await local.get_run(bad.id)
    with collect_faults() as met:
        assert [r.id for r in await local.list_runs()] == [good.id]
    assert {f.item for f in met} == {bad.id}


async def test_a_torn_line_no_run_points_at_is_no_problem(local: LocalStore, root: Path) -> None:
    """A pack cut short mid-write leaves a torn line; the next append cuts it away, and verify
    reads only what runs point at."""
    first = await finished(local)
    pack_all(local)
    segments = Segments(str(root))
    with open(segments.path(1), "ab") as file:
        file.write(b'{"id": "wrun_torn", "v": 1, "z": "eJzL')
    run = await finished(local)
    pack_all(local)
    assert (await local.get_run(run.id)).output == 3
    assert await local.verify() == []
    live = [segments.locate(r.id) for r in (first, run)]
    assert os.path.getsize(segments.path(1)) == sum(loc.length for loc in live if loc)


@pytest.mark.parametrize("within", [5, 0], ids=["mid-line", "at a line's end"])
async def test_a_segment_cut_short_under_packed_runs_is_kept_not_appended_over(
    local: LocalStore, root: Path, caplog: pytest.LogCaptureFixture, within: int
) -> None:
    """The newest segment ends mid-line where a run's line was (cut short once durable): the
    next append neither cuts that run's place away nor writes another run's line there. The
    segment is kept as it is (said once), packing goes on in a new one, and the run reads as
    lost (where it was cut) until a backup brings it back."""
    runs = [await finished(local) for _ in range(3)]
    pack_all(local)
    segments = Segments(str(root))
    path = segments.path(1)
    whole = Path(path).read_bytes()
    last = max(runs, key=lambda run: segments.locate(run.id).offset)  # type: ignore[union-attr]
    loc = segments.locate(last.id)
    assert loc is not None
    Path(path).write_bytes(whole[: loc.offset + within])
    later = [await finished(local) for _ in range(2)]
    pack_all(local)
    pack_all(local)
    assert segments.numbers() == [1, 2] and Path(path).read_bytes() == whole[: loc.offset + within]
    cut = (
        f"{path}: cut short at byte {loc.offset + within}: the 1 packed run(s) ({last.id}) past it "
    )
    said = [r.getMessage() for r in caplog.records if path in r.getMessage()]
    assert said == ["warning: " + cut + "are lost; packing goes on in a new segment after it: "
                    "the segment is kept as it is, not rewritten"]  # fmt: skip
    with pytest.raises(StoreCorrupted, match=f"cut short at byte {loc.offset + within}"):
        await local.get_run(last.id)
    assert [p for p in await local.verify() if "/segments/" in p] == [cut + "are lost"]
    for run in [*runs[:2], *later]:
        if run is not last:
            assert (await local.get_run(run.id)).output == 3
    Path(path).write_bytes(whole)  # restored from a backup
    assert (await local.get_run(last.id)).output == 3


@pytest.mark.parametrize("within", [5, 0], ids=["mid-line", "at a line's end"])
async def test_a_run_whose_packed_line_a_cut_took_is_a_directory_again_if_it_has_one(
    local: LocalStore, root: Path, within: int
) -> None:
    """A pack cut short before it removed the run's directory, then the segment cut short
    under the run's line: nothing is lost. The next append points the run back at its
    directory (its locator goes) and cuts the torn tail as after any crash mid-append."""
    await finished(local)
    pack_all(local)
    run = await finished(local)
    with _fsops.inject("rename", errno.EIO, match="tmp/packed."), pytest.raises(StoreError):
        pack_all(local)  # the line and the locator made, the directory left
    segments = Segments(str(root))
    loc = segments.locate(run.id)
    assert loc is not None and (root / "runs" / run.id).is_dir()
    with open(segments.path(1), "r+b") as file:
        file.truncate(loc.offset + within)
    first = _first_loc(segments)
    line = Path(segments.path(1)).read_bytes()[first.offset : first.offset + first.length]
    with segments.lock():
        assert segments.append([line]) == [Loc(1, loc.offset, len(line))]  # a line of no run
    assert segments.locate(run.id) is None and (root / "runs" / run.id).is_dir()
    assert await local.verify() == []
    other = await finished(local)
    pack_all(local)
    assert (await local.get_run(run.id)).output == 3
    assert (await local.get_run(other.id)).output == 3
    assert await local.verify() == []


# -- dead bytes nothing else counts ----------------------------------------------------------


async def test_a_repack_counts_the_line_it_replaces_dead(local: LocalStore, root: Path) -> None:
    run = await finished(local, failed=True)
    pack_all(local)
    stale = Segments(str(root))
    old = _first_loc(stale)
    _compact.unpack(local, run.id)
    stale.link(run.id, old)  # what an unpack cut short before its unlink left
    stale._recount(1, 0)
    pack_all(local)
    assert stale.locate(run.id) != old
    assert stale.dead(1) == old.length
    assert await local.verify() == []


def _torn_pwrite(real: Callable[..., int]) -> Callable[..., int]:
    """``os.pwrite`` on a disk that fills up halfway through a segment's append."""

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl") and len(data) > 2:
            real(fd, bytes(data[: len(data) // 2]), offset)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    return pwrite


async def test_an_append_cut_short_by_a_full_disk_leaves_no_byte_behind(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await finished(local)
    pack_all(local)
    segments = Segments(str(root))
    size = os.path.getsize(segments.path(1))
    run = await finished(local)
    with monkeypatch.context() as patch:
        patch.setattr(os, "pwrite", _torn_pwrite(os.pwrite))
        with pytest.raises(StoreError, match="no space left"):
            pack_all(local)
    assert os.path.getsize(segments.path(1)) == size and segments.dead(1) == 0
    assert (root / "runs" / run.id).is_dir()
    pack_all(local)
    assert (await local.get_run(run.id)).output == 3 and segments.dead(1) == 0
    assert await local.verify() == []


async def test_verify_counts_the_lines_of_a_pack_killed_after_its_append(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack killed between its append and its locators leaves lines no locator points at
    and no count knows: verify counts them, and the next pass rewrites their segment."""
    monkeypatch.setattr("wf.store.local._segments.SEGMENT_LIMIT", 1)  # a segment per batch
    runs = [await finished(local) for _ in range(2)]
    pack_all(local)
    segments = Segments(str(root))
    lines = [line for _, line in segments.lines(1)]
    segments.append(lines)  # the lines of a pack killed before its locators: segment 2
    await finished(local)
    pack_all(local)  # segment 3, the newest
    assert segments.numbers() == [1, 2, 3] and segments.dead(2) == 0
    assert await local.verify() == []
    assert segments.dead(2) == os.path.getsize(segments.path(2))
    pack_all(local)
    assert segments.numbers() == [1, 3]
    for run in runs:
        assert (await local.get_run(run.id)).output == 3
    assert await local.verify() == []


# -- footprint -------------------------------------------------------------------------------


def disk_usage(root: Path) -> int:
    """Bytes the store's tree occupies: allocated blocks of every directory and file (a
    name linked many times counted once)."""
    seen: set[int] = set()
    total = 0
    for directory, _dirs, files in os.walk(root):
        total += os.lstat(directory).st_blocks * 512
        for name in files:
            info = os.lstat(os.path.join(directory, name))
            if info.st_ino not in seen:
                seen.add(info.st_ino)
                total += info.st_blocks * 512
    return total


async def test_a_finished_small_run_takes_at_most_2_kib_once_packed(
    local: LocalStore, root: Path
) -> None:
    count = 300
    for _ in range(count):
        await finished(local)
    if local.log is not None:
        local.checkpoint()  # the creation-log prototype's log: emptied at each checkpoint
    before = disk_usage(root) / count
    assert pack_all(local) == count
    after = disk_usage(root) / count
    assert after <= 2048 < before, (before, after)


async def test_a_format_6_store_is_upgraded_and_its_finished_runs_packed(root: Path) -> None:
    old = LocalStore(root)
    run = await finished(old)
    await old.close()
    for name in ("segments", "packed"):
        (root / name).rmdir()
    (root / "wf-store.json").write_bytes(b'{"format": 6}\n')
    store = LocalStore(root)
    assert pack_all(store) == 1
    assert orjson.loads((root / "wf-store.json").read_bytes()) == {"format": FORMAT}
    assert (await store.get_run(run.id)).output == 3
    assert await store.verify() == []
    await store.close()


async def test_a_parent_is_packed_only_once_its_children_have_ended(
    local: LocalStore, root: Path
) -> None:
    parent = await finished(local)
    child = await created(local, parent_id=parent.id)
    assert pack_all(local) == 0  # the child's end will post to its parent
    await save(local, child, RunStatus.COMPLETED)
    assert pack_all(local) == 2
    assert [r.id for r in await local.list_runs(parent_id=parent.id)] == [child.id]


async def test_readers_meet_runs_being_packed_and_unpacked_meanwhile(local: LocalStore) -> None:
    """A thread packs while the loop reads and posts: every read finds the run, wherever it
    is at that moment (looked for again when it moved between the look and the read)."""
    runs = [await finished(local) for _ in range(30)]
    for _round in range(4):
        packing = asyncio.ensure_future(asyncio.to_thread(pack_all, local))
        for run in runs:
            assert (await local.get_run(run.id)).status is RunStatus.COMPLETED
            assert len(await local.read_journal(run.id)) == 3
        await packing
        for run in runs[::3]:
            await local.post(run.id, "note", {})  # unpacks; a message keeps it unpacked
        listed = await local.list_runs(limit=100)
        assert sorted(r.id for r in listed) == sorted(r.id for r in runs)
    assert await local.verify() == []


async def test_wf_inspect_shows_a_packed_run_as_it_showed_its_directory(local: LocalStore) -> None:
    from wf.admin import run_detail

    run = await finished(local)
    before = await run_detail(local, run.id, now=FAR)
    pack_all(local)
    after = await run_detail(local, run.id, now=FAR)
    assert after == before
    assert after.run.output == 3 and [e["type"] for e in after.events][-1] == "run_completed"


async def test_a_run_packed_between_the_look_and_the_lock_is_looked_for_again(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process packs the run after ``try_acquire`` found its directory and before it
    opened the journal: the lease is taken on the run unpacked again, not refused as damaged."""
    run = await finished(local)
    try_lock = _fsops.try_lock
    packed: list[str] = []

    def packed_first(path: str, *args: Any, **kwargs: Any) -> int | None:
        if path.endswith("journal.jsonl") and not packed:
            packed.append(path)
            assert pack_all(local) == 1  # as the other process would, at that instant
        return try_lock(path, *args, **kwargs)

    monkeypatch.setattr(_fsops, "try_lock", packed_first)
    lease = await local.try_acquire(run.id)
    assert lease is not None and packed
    await lease.append([event("note")])
    await lease.release()
    assert [e["type"] for e in await local.read_journal(run.id)][-1] == "note"


_PACKER = """
import time
from wf.store.local import LocalStore, _compact
store = LocalStore({root!r})
store._open(create=False)
packed = 0
deadline = time.monotonic() + 3.0
while time.monotonic() < deadline:
    packed += _compact.compact(store, now=4e9, older_than=0.0, limit=10**6).packed
print(packed, flush=True)
"""


async def test_a_packing_process_and_a_driving_process_never_lose_an_event(
    local: LocalStore, root: Path
) -> None:
    """Another process packs as fast as it can while this one takes each run's lease (which
    unpacks it), appends, and reads: every append is in the journal after, whichever process
    moved the run last."""
    from tests.store.helpers import python

    runs = [await finished(local, failed=True) for _ in range(10)]
    packer = python(_PACKER.format(root=str(root)))
    appended = dict.fromkeys((r.id for r in runs), 0)
    rounds = 0
    while packer.poll() is None and rounds < 200:
        rounds += 1
        for run in runs:
            lease = await local.try_acquire(run.id)
            if lease is None:
                continue  # the packer holds it this instant
            # Retried (each time: a journal may go on after a failure only that way).
            await lease.append([event("run_retrying", attempt=2, n=appended[run.id])])
            await lease.release()
            appended[run.id] += 1
            notes = [e for e in await local.read_journal(run.id) if "n" in e]
            assert [e["n"] for e in notes] == list(range(appended[run.id]))
        await asyncio.sleep(0.01)
    out, err = packer.communicate(timeout=30)
    assert packer.returncode == 0, err
    assert int(out) > 0 and sum(appended.values()) > 0
    for run in runs:
        notes = [e for e in await local.read_journal(run.id) if "n" in e]
        assert [e["n"] for e in notes] == list(range(appended[run.id]))
    assert await local.verify() == []


async def test_the_first_event_of_a_run_damaged_further_on_is_read_packed_or_not(
    local: LocalStore, root: Path
) -> None:
    """``wf check --replay`` names a run it cannot read by its journal's first event."""
    run = await finished(local)
    first = (await local.read_journal(run.id))[0]
    assert first["type"] == "run_started"
    assert pack_all(local) == 1
    assert await local.first_event(run.id) == first
    other = await finished(local)
    path = root / "runs" / other.id / "journal.jsonl"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], b"{garbage", *lines[1:]]))
    with pytest.raises(StoreCorrupted):
        await local.read_journal(other.id)
    head = await local.first_event(other.id)
    assert head is not None and (head["type"], head["workflow"]) == ("run_started", other.workflow)
    path.write_bytes(b"{garbage\n")
    assert await local.first_event(other.id) is None
    assert await local.first_event("wrun_missing") is None
