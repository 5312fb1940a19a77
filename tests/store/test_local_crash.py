"""``LocalStore`` after crashes and under I/O errors: torn writes, corruption, a full disk."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.store.helpers import (
    acquire,
    created,
    other_task_ready,
    record,
    save,
    started,
    write_journal_end,
)
from wf import RunNotFound, StoreCorrupted, StoreError
from wf.store import RunRecord, RunStatus
from wf.store._base import CREATOR_LEASES
from wf.store.local import LocalStore, _fsops, _pressure
from wf.store.local._commit import committer_for
from wf.store.local._layout import NOW


def journal(root: Path, run_id: str) -> Path:
    return root / "runs" / run_id / "journal.jsonl"


# -- the journal -------------------------------------------------------------------------------


async def test_a_journal_is_whole_blocks_and_appends_overwrite_its_slack(
    local: LocalStore, root: Path
) -> None:
    run = await created(local)
    path = journal(root, run.id)
    assert path.stat().st_size == 4096  # the first events, then NUL slack to the block's end
    lease = await acquire(local, run.id)
    for op in range(10):
        await lease.append([{"type": "step_completed", "ts": 2.0, "op": op}])
    assert path.stat().st_size == 4096  # every append went into the slack
    await lease.append([{"type": "step_completed", "ts": 3.0, "result": "x" * 9000}])
    content = len(path.read_bytes().rstrip(b"\0"))
    assert path.stat().st_size == 12288 > content > 8192  # past the slack: whole blocks again
    await lease.append([{"type": "step_completed", "ts": 4.0}])
    await lease.release()
    assert path.stat().st_size == 12288
    assert [e["ts"] for e in await local.read_journal(run.id)] == [1.0, *[2.0] * 10, 3.0, 4.0]


async def test_torn_last_line_is_ignored_then_zeroed_on_acquire(
    local: LocalStore, root: Path
) -> None:
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 2.0, "op": 1}])
    await lease.release()
    path = journal(root, run.id)
    whole = path.read_bytes()
    torn = b'{"type": "step_completed", "ts": 3.0, "op"'  # the crash hit mid-write
    write_journal_end(path, torn)
    assert len(await local.read_journal(run.id)) == 2
    lease = await acquire(local, run.id)
    assert path.read_bytes() == whole  # the torn bytes are slack again
    await lease.append([{"type": "step_completed", "ts": 4.0, "op": 2}])
    await lease.release()
    assert [e["ts"] for e in await local.read_journal(run.id)] == [1.0, 2.0, 4.0]


async def test_a_torn_write_whose_first_block_was_lost_is_dropped(
    local: LocalStore, root: Path
) -> None:
    """The blocks of one write may reach the disk out of order: a crash can keep the end of
    a line (newline and all) and lose its start, which then reads as NUL bytes."""
    run = await created(local)
    path = journal(root, run.id)
    whole = path.read_bytes()
    line = b'{"type": "step_completed", "ts": 2.0, "op": 1, "result": 7}\n'
    write_journal_end(path, b"\0" * 20 + line[20:])
    assert [e["ts"] for e in await local.read_journal(run.id)] == [1.0]
    write_journal_end(path, line[:10] + b"\0" * 10 + line[20:])  # or lose a block in the middle
    assert [e["ts"] for e in await local.read_journal(run.id)] == [1.0]
    lease = await acquire(local, run.id)
    assert path.read_bytes() == whole
    await lease.append([{"type": "step_completed", "ts": 3.0}])
    await lease.release()
    assert [e["ts"] for e in await local.read_journal(run.id)] == [1.0, 3.0]


async def test_journals_without_slack_and_readers_without_it_agree(
    local: LocalStore, root: Path
) -> None:
    """An older wf wrote journals without slack, and its readers stop at the last newline:
    a journal it wrote gains slack at the next append, and it reads ours as it reads its own
    (the slack is a torn last line to it, which its lease holder cuts off)."""
    run = await created(local)
    path = journal(root, run.id)
    path.write_bytes(path.read_bytes().rstrip(b"\0"))  # as an older wf created it
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 2.0, "op": 0}])
    await lease.release()
    data = path.read_bytes()
    assert len(data) == 4096 and data.endswith(b"\0")
    older = [orjson.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]
    assert older == await local.read_journal(run.id)
    assert [e["ts"] for e in older] == [1.0, 2.0]


async def test_torn_only_line_leaves_an_empty_journal(local: LocalStore, root: Path) -> None:
    run = await created(local)
    journal(root, run.id).write_bytes(b'{"type": "run_st')
    assert await local.read_journal(run.id) == []
    lease = await acquire(local, run.id)
    assert journal(root, run.id).read_bytes() == b""
    await lease.release()


@pytest.mark.parametrize("left", ["zeros", "torn", "torn, no slack"])
async def test_a_creation_a_power_cut_left_without_its_data_is_no_run(
    local: LocalStore, root: Path, left: str
) -> None:
    """Creation publishes before its flush, and names reach the disk before data: a power cut
    can leave the journal's block as zeros, or its first line torn. That run was never reported
    created: it does not exist (it is not damage), and creating its id again replaces it."""
    await created(local)  # another run, unharmed
    run = await created(local)
    path = journal(root, run.id)
    first = path.read_bytes().rstrip(b"\0")
    lost = {
        "zeros": b"\0" * 4096,
        "torn": first[:40] + b"\0" * (4096 - 40),
        "torn, no slack": first[:40],
    }[left]
    path.write_bytes(lost)
    record_file = path.with_name("run.json")
    if record_file.exists():  # its data never reached the disk either
        record_file.write_bytes(b"\0" * record_file.stat().st_size)
    after = LocalStore(root)  # the process started after the power cut
    with pytest.raises(RunNotFound):
        await after.get_run(run.id)
    assert run.id not in [r.id for r in await after.list_runs()]
    with pytest.raises(RunNotFound):
        await after.try_acquire(run.id)
    assert await after.create_run(run, [started(run)])  # the id is free again
    assert (await after.get_run(run.id)).status is RunStatus.PENDING
    assert run.id in await after.due_runs(time.time())
    await after.close()


def cut_short(root: Path, run_id: str) -> None:
    """What a power cut leaves of the run's creation: a torn first line, no readable record."""
    path = journal(root, run_id)
    path.write_bytes(path.read_bytes()[:40])
    record_file = path.with_name("run.json")
    if record_file.exists():
        record_file.write_bytes(b"\0" * record_file.stat().st_size)


async def finished(store: LocalStore, run_id: str) -> RunRecord:
    run = await created(store, id=run_id)
    await save(store, run, RunStatus.COMPLETED, output=1)
    return run


async def test_a_whole_record_with_a_damaged_field_is_no_creation_cut_short(
    local: LocalStore, root: Path
) -> None:
    """Its journal gone and its record's one field of the wrong kind: the run's only copy, its
    damage said, never discarded as a leftover (a claim or a creation of its id would)."""
    from wf.store.local import _records

    await finished(local, "r1")
    path = journal(root, "r1")
    record_file = path.with_name("run.json")
    data = orjson.loads(record_file.read_bytes())
    record_file.write_bytes(orjson.dumps({**data, "retention": "1s"}))
    path.write_bytes(path.read_bytes()[:40])
    assert not _records.cut_short(str(path.parent))
    with pytest.raises(StoreCorrupted):
        await local.get_run("r1")


async def test_compaction_passes_over_a_creation_cut_short_and_packs_the_rest(
    local: LocalStore, root: Path
) -> None:
    """The leftover is no run: compaction used to stop on it (``RunNotFound``), packing
    nothing else of its bucket, and ``wf gc`` exited 2 without its report."""
    from wf.store.local import _compact

    await finished(local, "r1")
    await finished(local, "r2")
    cut_short(root, "r1")
    done = _compact.compact(local, now=4e9, older_than=0.0, limit=1_000)
    assert done.packed == 1
    assert [r.id for r in await local.list_runs()] == ["r2"]
    assert not (root / "runs" / "r2").exists()  # packed
    assert (root / "runs" / "r1").exists()  # left for its id's next creation, or verify


async def test_a_run_created_again_over_a_creation_cut_short_is_listed_once_per_page(
    local: LocalStore, root: Path
) -> None:
    """The first creation's index entries (an older creation number) stay beside the new
    ones: a page before the run listed the run itself, and a pager on ``before=`` (the
    retention sweep of ``wf gc``) asked for the same page forever."""
    await finished(local, "r1")
    await finished(local, "r2")
    cut_short(root, "r1")
    run = await finished(local, "r1")
    assert [r.id for r in await local.list_runs()] == ["r1", "r2"]
    assert await local.list_runs(before="r1") != []  # r2 is older
    assert "r1" not in [r.id for r in await local.list_runs(before="r1")]
    assert [r.id for r in await local.list_runs(before="r2")] == []
    pages, before = [], None
    while page := await local.list_runs(limit=1, before=before):
        pages.append(page[0].id)
        before = page[-1].id
        assert len(pages) < 5
    assert pages == ["r1", "r2"]
    found, _cursor, _looked = await local.search_runs("r", limit=10, budget=10, before="r2")
    assert found == []
    assert (await local.get_run("r1")).seq == run.seq


async def test_a_search_never_continues_from_a_stale_index_entry(
    local: LocalStore, root: Path
) -> None:
    """The stale entry of a creation cut short sits below the run's own: as a search's
    cursor it sent "search further" back to the run's own number, and round again forever."""
    for run_id in ["a0", "r1", "a2"]:
        await finished(local, run_id)
    cut_short(root, "r1")
    await finished(local, "r1")
    await finished(local, "a5")
    for text in ["zzz", "a0"]:
        cursors: list[str] = []
        found: list[str] = []
        before: str | None = "a2"
        while before is not None:
            page, before, _looked = await local.search_runs(text, limit=9, budget=1, before=before)
            found += [r.id for r in page]
            assert before is None or before not in cursors  # no page is asked for twice
            cursors.append(str(before))
            assert len(cursors) < 5
        assert found == ([] if text == "zzz" else ["a0"])


async def search_pages(store: LocalStore, text: str, limit: int, budget: int) -> list[str]:
    """Every page of a search, on its cursor, until it says there is no more."""
    found: list[str] = []
    cursors: list[str] = []
    before: str | None = None
    while True:
        page, before, _looked = await store.search_runs(
            text, limit=limit, budget=budget, before=before
        )
        found += [r.id for r in page]
        if before is None:
            return found
        assert before not in cursors  # no page is asked for twice
        cursors.append(before)
        assert len(cursors) < 20


@pytest.mark.parametrize(("limit", "budget"), [(2, 100), (1, 100), (3, 100), (9, 1), (9, 2)])
async def test_a_search_pages_on_past_a_record_without_its_creation_number(
    local: LocalStore, root: Path, limit: int, budget: int
) -> None:
    """A record without ``seq`` (written by an older wf) is at another number than its
    entry's: a page it filled went on to the next entry as its cursor without listing it,
    and the next page started below that one, so it was never listed."""
    for n in range(5):
        await finished(local, f"a{n}")
    path = root / "runs" / "a3" / "run.json"
    data = orjson.loads(path.read_bytes())
    del data["seq"]
    path.write_bytes(orjson.dumps(data))
    every = [r.id for r in await local.list_runs()]
    assert every == ["a4", "a3", "a2", "a1", "a0"]
    assert await search_pages(local, "a", limit, budget) == every
    assert [r.id for r in await local.list_runs(before="a3")] == ["a2", "a1", "a0"]


async def test_verify_says_a_creation_cut_short_left_a_stale_index_entry(
    local: LocalStore, root: Path
) -> None:
    await finished(local, "r1")
    cut_short(root, "r1")
    await finished(local, "r1")
    problems = await local.verify()
    assert not any("says completed but its record says completed" in p for p in problems)
    assert any("r1" in p and "stale" in p for p in problems), problems
    assert [p for p in await local.verify() if "r1" in p] == []  # repaired
    by_workflow = [p.name for p in (root / "by-workflow").rglob("*+r1")]
    assert len(by_workflow) == 1  # the stale one's listing by workflow went too


@pytest.mark.parametrize("writable", [True, False])
async def test_verify_names_a_creation_cut_short_with_its_remedy_and_leaves_it(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, writable: bool
) -> None:
    """Its directory is no run (never reported created) and harmless: verify never removes
    or moves it (a retrying creator, a claim or a creation's recovery may be replacing it
    that very moment), on a writable store or a read-only one; it names it, and the remedy."""
    from wf.store.local import _ghosts, _upkeep

    await finished(local, "r1")
    await finished(local, "r2")
    cut_short(root, "r1")
    monkeypatch.setattr(_ghosts, "ORPHAN_AGE", -1.0)  # every entry is old enough now
    if not writable:
        monkeypatch.setattr(_upkeep, "read_only", lambda _path: True)
    for _ in range(2):  # a second verify says it again: nothing changed it
        problems = [p for p in await local.verify() if "runs/r1" in p]
        assert len(problems) == 1, problems
        assert "no run" in problems[0] and "cut short" in problems[0]
        assert "remove runs/r1 by hand" in problems[0]
        assert "replaced when the id is created again" in problems[0]
        assert (root / "runs" / "r1" / "journal.jsonl").exists()
    assert [r.id for r in await local.list_runs()] == ["r2"]
    assert not [p for p in (root / "tmp").iterdir() if p.name.startswith("leftover")]
    assert list((root / "index").rglob("*+r1+*")) != []  # a ghost's once it is removed
    monkeypatch.undo()
    await finished(local, "r1")  # its remedy: created again, it is replaced
    assert [p for p in await local.verify() if "runs/r1" in p] == []
    assert [r.id for r in await local.list_runs()] == ["r1", "r2"]


async def test_a_creation_cut_short_removed_by_hand_leaves_ghosts_verify_removes(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remedy verify names: once its directory is removed by hand, its entries are a
    ghost's, and verify removes them."""
    import shutil

    from wf.store.local import _ghosts

    await finished(local, "r1")
    cut_short(root, "r1")
    shutil.rmtree(root / "runs" / "r1")
    monkeypatch.setattr(_ghosts, "ORPHAN_AGE", -1.0)
    assert any("r1" in p and "no such run" in p for p in await local.verify())
    assert list((root / "index").rglob("*+r1+*")) == []
    assert [p for p in await local.verify() if "r1" in p] == []


@pytest.mark.parametrize("extra", ["logs.jsonl", "inbox/m1.json"])
async def test_verify_names_a_run_whose_journal_lost_its_first_block_and_keeps_it(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, extra: str
) -> None:
    """A directory holding more than a creation writes (messages, logs, streams) was a run
    that got going: its journal's lost first block is damage, never a creation cut short."""
    from wf.store.local import _ghosts

    await finished(local, "r1")
    cut_short(root, "r1")
    path = root / "runs" / "r1" / extra
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"{}\n")
    monkeypatch.setattr(_ghosts, "ORPHAN_AGE", -1.0)
    problems = [p for p in await local.verify() if "r1" in p]
    assert path.exists()
    assert any("runs/r1" in p and "damage" in p for p in problems), problems
    assert not any("removed" in p or "no run:" in p for p in problems), problems


async def test_corrupt_middle_line_names_file_and_line(local: LocalStore, root: Path) -> None:
    run = await created(local)
    path = journal(root, run.id)
    write_journal_end(path, b'this is not json\n{"type": "step_completed", "ts": 3.0}\n')
    with pytest.raises(StoreCorrupted, match=r"journal\.jsonl: line 2 is not valid JSON"):
        await local.read_journal(run.id)
    path.write_bytes(b'{"type": "a", "ts": 1}\n[1, 2]\n')
    with pytest.raises(StoreCorrupted, match="line 2 is not a JSON object"):
        await local.read_journal(run.id)


async def test_nul_damage_before_a_complete_line_is_corruption_and_is_kept(
    local: LocalStore, root: Path
) -> None:
    """A torn write is the last one: NUL bytes with a complete line after them are damage,
    reported, and the lease cuts off only a torn last line (appends must not continue it)."""
    run = await created(local)
    path = journal(root, run.id)
    write_journal_end(path, b'{"type": "x\0\0\0"}\n{"type": "step_completed", "ts": 3.0}\n')
    damaged = path.read_bytes()
    write_journal_end(path, b'{"type": "step_comp')  # and a torn last line after it
    with pytest.raises(StoreCorrupted, match=r"journal\.jsonl: line 2 is damaged"):
        await local.read_journal(run.id)
    lease = await acquire(local, run.id)
    await lease.release()
    assert path.read_bytes() == damaged  # only the torn last line was cut


async def test_a_claim_reads_the_journal_once_and_a_damaged_one_is_said_by_its_reader(
    local: LocalStore, root: Path
) -> None:
    """A claim's lease reads the journal as it is taken and hands those events to the driver,
    until a write makes them stale; one damaged before its end is leased all the same, and the
    driver's read says what is wrong, as ``try_acquire``'s lease does."""
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 2.0, "op": 1}])
    await lease.release()
    [claimed] = await local.claim(time.time(), 10)
    _, events = await claimed.read_run(local)
    assert [e["ts"] for e in events] == [1.0, 2.0]
    await claimed.append([{"type": "step_completed", "ts": 3.0, "op": 2}])
    _, events = await claimed.read_run(local)
    assert [e["ts"] for e in events] == [1.0, 2.0, 3.0]
    await claimed.release()

    damaged = await created(local)
    write_journal_end(journal(root, damaged.id), b'{"type": "x\0\0"}\n{"type": "y", "ts": 3}\n')
    [claimed] = await local.claim(time.time(), 10, exclude={run.id})
    with pytest.raises(StoreCorrupted, match=r"journal\.jsonl: line 2 is damaged"):
        await claimed.read_run(local)
    await claimed.release()


# -- injected I/O errors -----------------------------------------------------------------------


async def test_enospc_during_append_names_the_file(local: LocalStore, root: Path) -> None:
    run = await created(local)
    lease = await acquire(local, run.id)
    with (
        _fsops.inject("write", errno.ENOSPC, match="journal.jsonl"),
        pytest.raises(StoreError, match=r"journal\.jsonl.*ENOSPC"),
    ):
        await lease.append([{"type": "step_completed", "ts": 2.0}])
    await lease.append([{"type": "step_completed", "ts": 3.0}])  # space again: still whole lines
    await lease.release()
    assert [e["ts"] for e in await local.read_journal(run.id)] == [1.0, 3.0]


async def test_failed_flush_poisons_the_lease(local: LocalStore) -> None:
    run = await created(local)
    lease = await acquire(local, run.id)
    with _fsops.inject("fdatasync", errno.EIO), pytest.raises(StoreError, match="EIO"):
        await lease.append([{"type": "step_completed", "ts": 2.0}])
    # A later fsync might "succeed" without the data: the holder must re-acquire instead.
    with pytest.raises(StoreError, match="unusable"):
        await lease.append([{"type": "step_completed", "ts": 3.0}])
    await lease.release()
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 4.0}])
    await lease.release()


async def test_failed_syncfs_fails_every_appender_of_the_batch(local: LocalStore) -> None:
    runs = [await created(local) for _ in range(3)]
    leases = [await acquire(local, r.id) for r in runs]
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform")
    with _fsops.inject("syncfs", errno.EIO):
        results = await asyncio.gather(
            *(lease.append([{"type": "e", "ts": 2.0}]) for lease in leases),
            return_exceptions=True,
        )
    assert all(isinstance(r, StoreError) and "syncfs" in str(r) for r in results)
    for lease in leases:
        await lease.release()


# A save replaces the record without fsyncs (it is a cache of the journal), so the failures it
# can meet are in write and rename; the journal's own fsync failures are tested with appends.
@pytest.mark.parametrize(("op", "err"), [("write", errno.ENOSPC), ("write", errno.EIO),
                                         ("rename", errno.EROFS)])  # fmt: skip
async def test_failed_save_keeps_the_previous_record(
    local: LocalStore, root: Path, op: str, err: int
) -> None:
    run = await created(local, input={"v": 1})
    before = await local.get_run(run.id)
    lease = await acquire(local, run.id)
    run.status, run.output = RunStatus.COMPLETED, {"done": True}
    with (
        _fsops.inject(op, err, match="run.json"),
        pytest.raises(StoreError, match=rf"run\.json.*{errno.errorcode[err]}"),
    ):
        await lease.save(run)
    assert await local.get_run(run.id) == before
    assert not [p for p in (root / "runs" / run.id).iterdir() if p.name.endswith(".tmp")]
    await lease.save(run)  # the disk is back: the save goes through
    await lease.release()
    assert (await local.get_run(run.id)).status is RunStatus.COMPLETED


async def test_failed_post_leaves_no_message(local: LocalStore, root: Path) -> None:
    run = await created(local)
    with _fsops.inject("write", errno.ENOSPC, match="inbox"), pytest.raises(StoreError):
        await local.post(run.id, "wake", {})
    assert await local.read_inbox(run.id) == []
    assert list((root / "runs" / run.id / "inbox").iterdir()) == []


async def test_posts_in_flight_share_their_flushes(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of posts (a server's wakes, cancels, hook deliveries) costs a few flushes,
    shared and made off the event loop: not three fsyncs a message on it."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: posts fsync file by file")
    from wf.store.local._offloop import flusher_for

    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: True)  # a quiet disk
    runs = [await created(local) for _ in range(3)]
    committer = committer_for(asyncio.get_running_loop())
    flusher = flusher_for(asyncio.get_running_loop())
    before = committer.flushes, flusher.flushes
    with (
        _fsops.inject("fsync", errno.EIO, after=10**6) as fsyncs,
        _fsops.inject("syncfs", errno.EIO, after=10**6) as syncfses,
    ):
        await asyncio.gather(*(local.post(runs[i % 3].id, "wake", {"i": i}) for i in range(30)))
    assert fsyncs.passed + syncfses.passed <= 6  # one by one on the loop, it was 90
    assert committer.flushes == before[0]  # none on the event loop
    assert flusher.flushes - before[1] <= 6  # a message's three steps, each shared by all
    for i, run in enumerate(runs):
        inbox = await local.read_inbox(run.id)
        assert sorted(m.data["i"] for m in inbox) == list(range(i, 30, 3))
    assert set(await local.due_runs(time.time())) >= {run.id for run in runs}


async def suspended_with_an_inbox(local: LocalStore) -> RunRecord:
    """A new run, suspended and not due, whose inbox directory exists (a first post, acked)."""
    run = await created(local)
    await save(local, run, RunStatus.SUSPENDED)
    await local.post(run.id, "wake", {"first": True})  # makes inbox/
    lease = await acquire(local, run.id)
    await lease.ack_inbox([m.id for m in await local.read_inbox(run.id)])
    await lease.save(run)  # suspended again: not due
    await lease.release()
    return run


@pytest.mark.parametrize("step", [0, 1])
async def test_a_post_cancelled_while_its_flush_is_made_fails_no_other(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """A post cancelled while it waits for a shared flush leaves that flush to the others of
    its batch, which succeed (a flush of file by file opens what it owes by name). Cancelled
    while its message's bytes are flushed (step 0), it removes its temporary file once the
    flush is over, without waking its run; cancelled once its message is in the inbox (step 1:
    its name is flushed), it finishes on the loop: the run is due with its message, never a
    message in the inbox of a run that is not due (the wake-up check would repair it)."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: posts fsync file by file as they go")
    from wf.store.local import _offloop

    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: False)  # file by file
    runs = [await suspended_with_an_inbox(local) for _ in range(3)]
    flushes: list[threading.Event] = []
    real = _offloop.sync_owed

    def held(whole: Any, marks: Any) -> Any:
        gate = threading.Event()
        flushes.append(gate)
        assert gate.wait(10)
        return real(whole, marks)

    monkeypatch.setattr(_offloop, "sync_owed", held)
    posts = [asyncio.ensure_future(local.post(run.id, "wake", {})) for run in runs]
    for flush in range(step + 1):  # one flush a step, shared by the three posts
        while len(flushes) <= flush:
            await asyncio.sleep(0.001)
        if flush < step:
            flushes[flush].set()
    posts[0].cancel()  # while the flush of its step ``step`` is under way
    await asyncio.sleep(0.01)
    for gate in flushes:
        gate.set()
    monkeypatch.setattr(_offloop, "sync_owed", real)
    with pytest.raises(asyncio.CancelledError):
        await posts[0]
    await asyncio.gather(*posts[1:])
    await asyncio.sleep(0.05)  # the removal, once the flush was over
    inbox = root / "runs" / runs[0].id / "inbox"
    due = set(await local.due_runs(time.time()))
    assert {runs[1].id, runs[2].id} <= due
    if step == 0:
        assert list(inbox.iterdir()) == []  # neither the message nor its temporary file
        assert runs[0].id not in due
    else:
        assert [p.name for p in inbox.iterdir()] == [
            m.id + ".json" for m in await local.read_inbox(runs[0].id)
        ]
        assert len(await local.read_inbox(runs[0].id)) == 1 and runs[0].id in due


async def test_the_wake_up_check_leaves_a_run_alone_while_a_post_to_it_is_under_way_here(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post's message is in the inbox while the post waits for the inbox's flush, before
    it makes the run due: the check in the same process knows the post is under way and does
    not take the run for stuck, however long the flush takes (it gave it 2 s, then repaired a
    healthy run when a busy disk flushed slower)."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: posts fsync file by file as they go")
    from wf import Engine
    from wf.engine._invariant import stuck_runs
    from wf.store.local import _offloop

    run = await suspended_with_an_inbox(local)
    flushes: list[threading.Event] = []
    real = _offloop.sync_owed
    over = threading.Event()

    def held(whole: Any, marks: Any) -> Any:
        gate = threading.Event()
        flushes.append(gate)
        assert over.is_set() or gate.wait(10)
        return real(whole, marks)

    monkeypatch.setattr(_offloop, "others_ready", lambda loop: True)  # flushed in the thread
    monkeypatch.setattr(_offloop, "sync_owed", held)
    post = asyncio.ensure_future(local.post(run.id, "wake", {}))
    try:
        while len(flushes) < 2:  # the message's bytes (let through), then its name (held)
            if flushes:
                flushes[0].set()
            await asyncio.sleep(0.001)
        assert len(await local.read_inbox(run.id)) == 1
        assert run.id not in await local.due_runs(time.time())
        assert await asyncio.wait_for(stuck_runs(Engine(local)), 1.0) == []
    finally:
        over.set()
        for gate in flushes:
            gate.set()
    await post
    assert run.id in await local.due_runs(time.time())
    assert not local.posting(run.id)


async def test_a_crash_among_concurrent_posts_never_wakes_a_run_without_its_message(
    local: LocalStore, root: Path
) -> None:
    """Posts to sleeping runs share their flushes; a crash at any point of the burst (every
    write from there on fails, as if the process died) leaves each run either not due, or due
    with its message whole in its inbox: never due without it."""
    queue = root / "queue"
    for after in range(60):
        runs = [await created(local) for _ in range(3)]
        for run in runs:
            await save(local, run, RunStatus.SUSPENDED)
        assert not any(run.id in name for name in os.listdir(queue) for run in runs)
        with _fsops.inject("*", errno.EIO, after=after) as crash:
            posted = await asyncio.gather(
                *(local.post(run.id, "wake", {"n": after}) for run in runs),
                return_exceptions=True,
            )
        for run, outcome in zip(runs, posted, strict=True):
            due = any(run.id in name and not name.startswith(".") for name in os.listdir(queue))
            inbox = root / "runs" / run.id / "inbox"
            messages = [p for p in inbox.glob("*.json") if not p.name.startswith(".")]
            assert not due or [orjson.loads(p.read_bytes())["data"] for p in messages] == [
                {"n": after}
            ], (after, crash.hits)
            if isinstance(outcome, BaseException):
                assert isinstance(outcome, StoreError), outcome
            else:
                assert due and len(messages) == 1
        if not crash.hits:
            break  # the burst went through before the crash point: every point was tried
    else:
        raise AssertionError("the posts never got through")


@pytest.mark.parametrize(
    ("op", "match"),
    [("write", "journal.jsonl"), ("syncfs" if _fsops.HAVE_SYNCFS else "fsync", "")],
)
async def test_failed_create_leaves_no_run(
    local: LocalStore, root: Path, op: str, match: str
) -> None:
    # Creation makes everything it wrote durable with one flush (a syncfs, shared with other
    # creations and appends) after publishing; when that flush fails it unpublishes the run.
    with _fsops.inject(op, errno.EIO, match=match), pytest.raises(StoreError):
        await created(local)
    assert await local.list_runs() == []
    assert list((root / "runs").iterdir()) == []
    # Nothing staged is left; ``names`` is the shared file queue and index entries link to.
    assert [p for p in (root / "tmp").iterdir() if p.name != "names"] == []


async def test_failed_create_on_a_busy_disk_leaves_no_run(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a busy disk the creation's flush fsyncs what it owes one by one (``_pressure``): a
    # failure there unpublishes the run just as a failed syncfs does.
    await created(local)  # the store's own directories exist
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: False)
    with _fsops.inject("fsync", errno.EIO, match="runs"), pytest.raises(StoreError, match="EIO"):
        await created(local)
    assert len(await local.list_runs()) == 1
    assert len(list((root / "runs").iterdir())) == 1
    assert [p for p in (root / "tmp").iterdir() if p.name != "names"] == []
    await created(local)  # the disk is back
    assert len(await local.list_runs()) == 2


async def test_creations_and_appends_in_flight_share_one_flush(local: LocalStore) -> None:
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    first = await created(local)
    lease = await acquire(local, first.id)
    committer = committer_for(asyncio.get_running_loop())
    before = committer.flushes
    records = [record() for _ in range(5)]
    results = await asyncio.gather(
        *(local.create_run(r, [{"type": "run_started", "ts": 1.0}]) for r in records),
        lease.append([{"type": "step_completed", "ts": 2.0}]),
    )
    assert results[:5] == [True] * 5
    assert committer.flushes - before == 1
    assert [r.id for r in await local.list_runs(limit=6)] == [r.id for r in reversed(records)] + [
        first.id
    ]
    await lease.release()


async def test_a_creation_lets_other_ready_tasks_run(local: LocalStore) -> None:
    """A loop of starts does not hold the event loop: with other tasks ready, a creation's
    flush waits one pass for them, so a server or the runs in flight in the same process go on
    between starts. (Flushing each creation at once made 100 starts one by one about a fifth
    quicker, by letting nothing else run: a task ticking every millisecond then waited 190 ms
    for a loop of 200 starts.)"""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await created(local)
    ticks = 0
    stop = False

    async def ticking() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.ensure_future(ticking())
    await asyncio.sleep(0)
    before = ticks
    for _ in range(5):
        assert await local.create_run(record(), [{"type": "run_started", "ts": 1.0}])
    during = ticks - before
    stop = True
    await ticker
    assert during >= 5


async def test_a_creations_flush_leaves_the_loop_to_the_runs_in_flight(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the disk flushes a creation (other tasks ready, so it is not flushed inline), the
    loop runs them: the ``syncfs`` is made in the flushing thread. Flushed on the loop, it
    would hold every other task for its whole length (a start's one flush a run, serial with
    the runs in flight's CPU, was most of a run started one by one)."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await created(local)
    begun, ran = threading.Event(), threading.Event()
    seen: list[bool] = []
    syncfs = _fsops.syncfs

    def waiting_syncfs(fd: int, path: str) -> None:
        begun.set()
        seen.append(ran.wait(5.0))  # bounded: on the loop thread nothing would set it
        syncfs(fd, path)

    monkeypatch.setattr(_fsops, "syncfs", waiting_syncfs)

    async def in_flight() -> None:
        while not ran.is_set():
            await asyncio.sleep(0)
            if begun.is_set():
                ran.set()  # this task ran while the creation's syncfs was under way

    other = asyncio.ensure_future(in_flight())
    await asyncio.sleep(0)
    assert await local.create_run(record(), [{"type": "run_started", "ts": 1.0}])
    ran.set()
    await other
    assert seen and seen[0]


async def test_a_creation_written_during_a_flush_waits_for_one_that_began_after_it(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durability with flushes off the loop: a creation made while a flush runs in the
    thread is not released by that flush (it began before the creation's names were
    written), only by one that begins after; and a journal in a flush under way still counts
    as dirty."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    first = await created(local)
    lease = await acquire(local, first.id)
    begun, gate = threading.Event(), threading.Event()
    log: list[str] = []
    syncfs = _fsops.syncfs

    def logged_syncfs(fd: int, path: str) -> None:
        log.append("begin")
        begun.set()
        gate.wait(5.0)
        syncfs(fd, path)
        log.append("end")

    monkeypatch.setattr(_fsops, "syncfs", logged_syncfs)
    committer = committer_for(asyncio.get_running_loop())
    stop = False

    async def in_flight() -> None:  # keeps a task ready, so the flush goes to the thread
        while not stop:
            await asyncio.sleep(0)

    other = asyncio.ensure_future(in_flight())
    lease.append_soon([{"type": "step_completed", "ts": 2.0}])
    one = asyncio.ensure_future(local.create_run(record(), [{"type": "run_started", "ts": 1.0}]))
    assert await asyncio.to_thread(begun.wait, 5.0)
    assert log == ["begin"]  # the first creation's flush is under way in the thread
    assert committer.is_dirty(lease._fd)  # its journal is in that flush, not yet durable
    log.append("second written")
    two = asyncio.ensure_future(local.create_run(record(), [{"type": "run_started", "ts": 1.0}]))
    await asyncio.sleep(0)
    assert not two.done()
    gate.set()
    assert await asyncio.wait_for(one, 10) and await asyncio.wait_for(two, 10)
    log.append("second returned")
    written = log.index("second written")
    # The flush under way ends; the second creation is released by the next one only.
    assert log[written:] == ["second written", "end", "begin", "end", "second returned"]
    stop = True
    await other
    await lease.release()


async def test_a_failed_creation_flush_off_the_loop_takes_the_run_back(local: LocalStore) -> None:
    """A ``syncfs`` that fails in the flushing thread fails the creation as one on the loop
    does: the run is taken back out of ``runs/``; the store goes on once the disk does."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await created(local)
    async with other_task_ready():  # the flush goes to the thread
        with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError, match="EIO"):
            await local.create_run(record(), [{"type": "run_started", "ts": 1.0}])
        assert len(await local.list_runs()) == 1
        assert await local.create_run(record(), [{"type": "run_started", "ts": 1.0}])
    assert len(await local.list_runs()) == 2


async def test_a_creation_is_counted_while_its_flush_runs_and_uncounted_if_it_fails(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's count is bumped while its creation's flush runs in the thread (not after,
    when the disk has nothing to do); a flush that fails takes the count back with the run."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await created(local)
    before = local.counters.read()
    sync_whole = _fsops.sync_whole
    seen: list[dict[str, int]] = []

    def slow_sync(path: str, device: int, since: int) -> None:
        deadline = time.monotonic() + 5.0
        while local.counters.read() == before and time.monotonic() < deadline:
            time.sleep(0.001)  # the loop bumps the count meanwhile
        seen.append(local.counters.read())
        sync_whole(path, device, since)

    monkeypatch.setattr(_fsops, "sync_whole", slow_sync)
    async with other_task_ready():  # the flush goes to the thread
        with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError, match="EIO"):
            await local.create_run(record(), [{"type": "run_started", "ts": 1.0}])
        assert seen == [{**before, "pending": before["pending"] + 1}]  # counted as it flushed
        assert local.counters.read() == before  # and taken back with the run
        assert await local.create_run(record(), [{"type": "run_started", "ts": 1.0}])
    assert local.counters.read() == {**before, "pending": before["pending"] + 1}
    assert len(await local.list_runs()) == 2


async def create_leased(local: LocalStore, run: RunRecord) -> bool:
    """``create_run`` as ``Engine.start`` makes it for a run it drives next: its creator
    leases the run right after (``CREATOR_LEASES``)."""
    asked = CREATOR_LEASES.set(run.id)
    try:
        return await local.create_run(run, [{"type": "run_started", "ts": 1.0}])
    finally:
        CREATOR_LEASES.reset(asked)


async def test_a_lease_taken_during_a_failed_creation_flush_is_given_up(local: LocalStore) -> None:
    """A creation whose creator leases the run next (``CREATOR_LEASES``, as ``Engine.start``
    says) takes that lease while its flush runs in the thread, and hands it to the creator's
    ``try_acquire``; when the flush fails, the lease is closed before the run is taken back:
    no descriptor, no lock left of it, and the store goes on."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await created(local)
    async with other_task_ready():  # the flush goes to the thread
        first = record()
        assert await create_leased(local, first)
        assert local._leased_at_creation.keys() == {first.id}  # taken while the flush ran
        lease = await acquire(local, first.id)  # handed over
        assert not local._leased_at_creation
        await lease.release()

        def open_fds() -> int | None:
            # The counts' own descriptors aside: taking the failed run's count back opens
            # ``pending.out``, kept open as every count file is.
            if not os.path.isdir("/proc/self/fd"):
                return None
            return len(os.listdir("/proc/self/fd")) - len(local.counters._fds)

        fds = open_fds()
        with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError, match="EIO"):
            await create_leased(local, record())
        assert not local._leased_at_creation
        assert open_fds() == fds
        assert len(await local.list_runs()) == 2
        again = record()
        assert await create_leased(local, again)
        lease = await acquire(local, again.id)
        await lease.release()


async def test_a_lease_taken_for_a_creation_that_fails_after_its_flush_is_given_up(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The creation is durable, but what follows it fails (a counter the disk refuses): its
    creator is told the start failed and never takes the lease taken for it, so that lease is
    let go, and any driver can take the run (it stayed locked for the process's life)."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await created(local)

    def refused(*_args: object, **_kwargs: object) -> None:
        raise StoreError("cannot write counts/running.in: [Errno 5] EIO")

    async with other_task_ready():  # the flush goes to the thread
        run = record()
        monkeypatch.setattr(local.counters, "bump", refused)
        with pytest.raises(StoreError, match="EIO"):
            await create_leased(local, run)
        monkeypatch.undo()
        assert not local._leased_at_creation
        assert (await local.get_run(run.id)).id == run.id  # created: only what followed failed
        other_process = LocalStore(local.root)
        try:
            lease = await other_process.try_acquire(run.id)
            assert lease is not None, "the run's lease is still held by the failed creation"
            await lease.release()
        finally:
            await other_process.close()


async def test_a_creation_flushed_on_the_loop_leaves_its_lease_to_try_acquire(
    local: LocalStore,
) -> None:
    """With nothing else to run, a creation is flushed on the loop (no thread hop): there is no
    flush to take the lease during, and ``try_acquire`` takes it as before; a creation nobody
    said it leases next takes no lease either."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    await created(local)
    run = record()
    asked = CREATOR_LEASES.set(run.id)
    try:
        assert await local.create_run(run, [{"type": "run_started", "ts": 1.0}])
    finally:
        CREATOR_LEASES.reset(asked)
    assert not local._leased_at_creation
    lease = await acquire(local, run.id)
    await lease.release()


# -- crashes between the steps of a save ------------------------------------------------------


async def test_crash_before_queue_update_leaves_run_due_then_reconciled(
    local: LocalStore, root: Path
) -> None:
    run = await created(local)
    await save(local, run, RunStatus.RUNNING)
    lease = await acquire(local, run.id)
    run.status = RunStatus.COMPLETED
    # The record is written, then the index rename fails: the "process dies" here.
    with _fsops.inject("rename", errno.EIO, match="index"), pytest.raises(StoreError):
        await lease.save(run)
    await lease.release()
    assert (await local.get_run(run.id)).status is RunStatus.COMPLETED
    assert await local.due_runs(0.0) == [run.id]  # early, never late: a harmless look
    lease = await acquire(local, run.id)  # the next holder brings queue and index in line
    await lease.release()
    assert await local.due_runs(time.time()) == []
    assert [r.id for r in await local.list_runs(statuses=[RunStatus.COMPLETED])] == [run.id]


async def test_timer_change_keeps_a_due_entry_until_done(local: LocalStore, root: Path) -> None:
    run = await created(local)
    await save(local, run, RunStatus.SUSPENDED, wake_at=1_000.0)
    lease = await acquire(local, run.id)
    run.wake_at = 9_000.0
    with _fsops.inject("unlink", errno.EIO, match="1000000"), pytest.raises(StoreError):
        await lease.save(run)
    await lease.release()
    queue = sorted(p.name for p in (root / "queue").iterdir())
    assert any(name.startswith(NOW) for name in queue)
    await local.due_runs(0.0)  # what a worker does first: it learns the stale entry's name
    lease = await acquire(local, run.id)
    await lease.release()
    expected = f"00000009000000+s{run.seq}+{run.id}"  # the run's place in the sequence: s
    assert sorted(p.name for p in (root / "queue").iterdir()) == [expected]


async def test_post_racing_a_suspend_keeps_the_run_due(local: LocalStore) -> None:
    run = await created(local)
    lease = await acquire(local, run.id)
    await local.post(run.id, "hook", {"token": "t"})  # arrives after the driver's last look
    run.status = RunStatus.SUSPENDED
    await lease.save(run)
    await lease.release()
    assert await local.due_runs(0.0) == [run.id]


async def test_queue_entry_of_a_crashed_create_is_skipped(local: LocalStore, root: Path) -> None:
    await created(local)
    ghost = root / "queue" / f"{NOW}+wrun_00000000000000000000000000"
    ghost.touch()
    assert len(await local.due_runs(0.0)) == 1
    assert await local.next_due_at() == 0.0


async def test_stream_tail_without_index_entry_is_cut(local: LocalStore, root: Path) -> None:
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.write_chunk("out", 0, b"abc")
    await lease.release()
    run_dir = root / "runs" / run.id
    (data,) = run_dir.glob("s-*.data")
    (idx,) = run_dir.glob("s-*.idx")
    with data.open("ab") as file:
        file.write(b"half-written chunk")  # its index entry never made it
    with idx.open("ab") as file:
        file.write(b"\x00\x00\x00")  # a torn index entry
    assert await local.read_chunks(run.id, "out") == ([b"abc"], False)
    lease = await acquire(local, run.id)
    await lease.write_chunk("out", 1, b"def")
    await lease.release()
    assert await local.read_chunks(run.id, "out") == ([b"abc", b"def"], False)
    assert data.read_bytes() == b"abcdef"


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage"])
async def test_a_record_lost_in_a_power_cut_is_rebuilt_from_the_journal(
    local: LocalStore, root: Path, damage: str
) -> None:
    run = await created(local, input={"v": 1})
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "op": 0, "name": "s", "ts": 2.0}])
    await lease.append([{"type": "run_completed", "output": {"ok": True}, "ts": 3.0}])
    await lease.release()
    record_file = root / "runs" / run.id / "run.json"
    if damage == "missing":
        record_file.unlink()
    else:
        record_file.write_bytes(b"" if damage == "empty" else b"{\x00garbage")
    rebuilt = await local.get_run(run.id)
    assert rebuilt.status is RunStatus.COMPLETED
    assert rebuilt.output == {"ok": True}
    assert rebuilt.input == {"v": 1}
    assert rebuilt.workflow == run.workflow


async def test_a_large_input_created_on_a_busy_disk_is_fsynced_under_its_final_name(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A value over the blob threshold goes to its own file, written under a temporary name and
    # renamed; on a busy disk the creation's flush fsyncs what it owes by name, which must be
    # the blob's final name (the temporary one is gone by then).
    await created(local)  # the store's own directories exist
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: False)
    synced: list[str] = []
    real = _fsops.fsync_path

    def fsync_path(path: str, flags: int = os.O_RDONLY) -> None:
        synced.append(path)
        real(path, flags)

    monkeypatch.setattr(_fsops, "fsync_path", fsync_path)
    run = await created(local, input="a" * 100_000, group="g")  # a group: no creation log
    blobs = [p.name for p in (root / "runs" / run.id).iterdir() if p.name.startswith("input-")]
    assert len(blobs) == 1
    assert str(root / "runs" / run.id / blobs[0]) in synced
    assert not [p for p in synced if p.endswith(".tmp")]
    assert (await local.get_run(run.id)).input == "a" * 100_000


async def test_deleting_runs_on_a_read_only_store_is_a_store_error(local: LocalStore) -> None:
    run = await created(local)
    await save(local, run, RunStatus.COMPLETED)
    with (
        _fsops.inject("open", errno.EROFS, match="journal.jsonl"),
        pytest.raises(StoreError, match=r"cannot open .*journal\.jsonl: \[EROFS\]"),
    ):
        await local.delete_runs([run.id], now=time.time(), reason="gc")
    assert (await local.get_run(run.id)).status is RunStatus.COMPLETED


async def test_what_is_written_during_a_failed_flush_off_the_loop_fails_too(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``syncfs`` in the flushing thread writes back what the loop wrote meanwhile too, and
    Linux reports a writeback error once per open file: a later flush through a file that
    has seen it succeeds although those bytes were lost. So an append and a creation written
    while a flush that fails runs fail with it (modelled here: the error is reported once per
    descriptor, and the first flush through one writes back the journal's new bytes)."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 2.0}])
    gate, begun = threading.Event(), threading.Event()
    errors = {"written": 0}
    seen: dict[int, int] = {}  # descriptor -> errors it reported (one report per error)

    def failing_syncfs(fd: int, path: str) -> None:
        if threading.current_thread().name == "wf-flush" and not begun.is_set():
            begun.set()
            gate.wait(5.0)  # the loop writes meanwhile; then the writeback fails
            errors["written"] += 1
        if seen.get(fd, 0) < errors["written"]:
            seen[fd] = errors["written"]
            raise StoreError(f"cannot syncfs {path}: EIO (modelled)")

    def fdatasync(fd: int, path: str) -> None:
        failing_syncfs(fd, path)

    monkeypatch.setattr(_fsops, "syncfs", failing_syncfs)
    monkeypatch.setattr(_fsops, "fdatasync", fdatasync)
    stop = False

    async def in_flight() -> None:  # keeps a task ready, so the flush goes to the thread
        while not stop:
            await asyncio.sleep(0)

    other = asyncio.ensure_future(in_flight())
    first = asyncio.ensure_future(local.create_run(record(), [{"type": "run_started", "ts": 1.0}]))
    assert await asyncio.to_thread(begun.wait, 5.0)
    appended = asyncio.ensure_future(lease.append([{"type": "step_completed", "ts": 3.0}]))
    second = asyncio.ensure_future(local.create_run(record(), [{"type": "run_started", "ts": 1.0}]))
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.wait_for(
        asyncio.gather(first, appended, second, return_exceptions=True), 10
    )
    stop = True
    await other
    assert all(isinstance(outcome, StoreError) for outcome in outcomes), outcomes
    with pytest.raises(StoreError):  # the journal is poisoned: its lease must be taken again
        await lease.append([{"type": "step_completed", "ts": 4.0}])
    await lease.release()


async def test_a_flush_off_the_loop_goes_through_the_file_systems_own_open_file(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread's ``syncfs`` is made through the one open file the process keeps on the
    file system (opened before the store wrote anything), not through a journal's, which a
    lease may close meanwhile and which was opened after the creations it would cover."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 2.0}])
    used: list[tuple[int, int]] = []
    syncfs = _fsops.syncfs

    def noted_syncfs(fd: int, path: str) -> None:
        if threading.current_thread().name == "wf-flush":
            info = os.fstat(fd)
            used.append((info.st_dev, info.st_ino))
        syncfs(fd, path)

    monkeypatch.setattr(_fsops, "syncfs", noted_syncfs)
    stop = False

    async def in_flight() -> None:
        while not stop:
            await asyncio.sleep(0)

    other = asyncio.ensure_future(in_flight())
    lease.append_soon([{"type": "step_completed", "ts": 3.0}])
    assert await asyncio.wait_for(
        local.create_run(record(), [{"type": "run_started", "ts": 1.0}]), 10
    )
    stop = True
    await other
    device = os.stat(local.root).st_dev
    own = os.fstat(_fsops.file_system(local.root, device).fd)
    assert used == [(own.st_dev, own.st_ino)]
    await lease.release()


def fail_a_flush_elsewhere(root: str) -> None:
    """What another thread's (or event loop's) flush of the file system meets: a writeback
    error, reported to it alone (``syncfs`` reports one once per open file)."""
    device = os.stat(root).st_dev
    since = _fsops.mark(root, device)
    with _fsops.inject("syncfs", errno.EIO), pytest.raises(StoreError, match="EIO"):
        _fsops.sync_whole(root, device, since)


async def test_a_creation_fails_if_a_flush_of_its_file_system_failed_after_it_wrote(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``syncfs`` that failed for someone else after the creation wrote its files may have
    lost them, and the creation's own ``syncfs`` is not told again: it fails as well, and the
    run is taken back out (it was never reported created)."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: creation fsyncs file by file")
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: True)  # one syncfs
    await created(local)  # the store exists
    publish = LocalStore._publish

    def published_then_failed(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        out = publish(self, *args, **kwargs)
        fail_a_flush_elsewhere(self.root)
        return out

    monkeypatch.setattr(LocalStore, "_publish", published_then_failed)
    run = record()
    with pytest.raises(StoreError, match="failed since it was written"):
        await local.create_run(run, [{"type": "run_started", "ts": 1.0}])
    monkeypatch.setattr(LocalStore, "_publish", publish)
    with pytest.raises(RunNotFound):
        await local.get_run(run.id)
    assert await created(local)  # a creation that writes after the failure is durable


async def test_appends_fail_if_a_flush_of_their_file_system_failed_after_they_wrote(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two journals' bytes flushed by one ``syncfs``, after another flush of the file system
    failed: both appends fail and their leases must be taken again; new leases append."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform")
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: True)  # one syncfs
    runs = [await created(local) for _ in range(2)]
    leases = [await acquire(local, r.id) for r in runs]
    for lease in leases:
        lease.append_soon([{"type": "step_completed", "ts": 2.0}])
    fail_a_flush_elsewhere(local.root)
    outcomes = await asyncio.gather(
        *(lease.append([{"type": "step_completed", "ts": 3.0}]) for lease in leases),
        return_exceptions=True,
    )
    assert all(isinstance(o, StoreError) for o in outcomes), outcomes
    for lease in leases:
        await lease.release()
    leases = [await acquire(local, r.id) for r in runs]
    await asyncio.gather(
        *(lease.append([{"type": "step_completed", "ts": 4.0}]) for lease in leases)
    )
    for lease in leases:
        await lease.release()


async def test_posts_fail_if_a_flush_of_their_file_system_failed_after_they_wrote(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Posts whose messages were written before another flush of the file system failed are
    not acknowledged (two at once share a ``syncfs``; a lone one fsyncs its own file, whose
    error no one else can have been told), and their messages are not left in the inboxes."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform: posts fsync file by file as they go")
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: True)  # one syncfs
    runs = [await suspended_with_an_inbox(local) for _ in range(2)]
    stage = LocalStore._stage_message

    async def staged_then_failed(self: LocalStore, *args: Any) -> Any:
        out = await stage(self, *args)
        fail_a_flush_elsewhere(self.root)
        return out

    monkeypatch.setattr(LocalStore, "_stage_message", staged_then_failed)
    outcomes = await asyncio.gather(
        *(local.post(run.id, "wake", {"lost": True}) for run in runs), return_exceptions=True
    )
    assert all(
        isinstance(o, StoreError) and "failed since it was written" in str(o) for o in outcomes
    ), outcomes
    monkeypatch.setattr(LocalStore, "_stage_message", stage)
    for run in runs:
        assert await local.read_inbox(run.id) == []
    await asyncio.gather(*(local.post(run.id, "wake", {"kept": True}) for run in runs))
    for run in runs:
        assert [m.data for m in await local.read_inbox(run.id)] == [{"kept": True}]


def test_a_forked_child_counts_on_from_its_parents_failures(tmp_path: Path) -> None:
    """A mark a forked child inherited (a store's, a lease's) is compared with the child's
    own count of failed whole flushes, which goes on from the parent's."""
    if not _fsops.HAVE_SYNCFS:
        pytest.skip("no syncfs on this platform")
    root = str(tmp_path)
    device = os.stat(root).st_dev
    fail_a_flush_elsewhere(root)  # the parent's count is at least one
    since = _fsops.mark(root, device)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its exit status
        code = 1
        try:
            _fsops.sync_whole(root, device, since)  # nothing failed since the mark
            fail_a_flush_elsewhere(root)
            try:
                _fsops.sync_whole(root, device, since)
            except StoreError:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _fsops.sync_whole(root, device, since)  # the child's failures are its own


def _names(root: Path) -> set[str]:
    """Every entry outside the runs' directories that names a run (the caches of workflow
    names aside: ``by-workflow/<hash>.name``)."""
    tops = ("queue", "lanes", "index", "by-status", "by-workflow", "by-tag", "children")
    return {
        str(path.relative_to(root))
        for top in tops
        for path in (root / top).rglob("*")
        if not path.is_dir() and not path.name.endswith(".name") and path.name != "ready"
    }


@pytest.mark.parametrize(
    ("op", "match"),
    [
        ("link", "/lanes/"),
        ("link", "/queue/"),
        ("link", "/index/"),
        ("link", "/by-status/"),
        ("link", "/by-workflow/"),
        ("link", "/by-tag/"),
        ("link", "/children/"),
        ("rename", "/runs/"),
        ("syncfs" if _fsops.HAVE_SYNCFS else "fsync", ""),
    ],
)
async def test_a_creation_that_fails_partway_takes_back_its_names(
    local: LocalStore, root: Path, op: str, match: str
) -> None:
    """A creation (in a lane, a named queue, a child) that fails after writing some of its
    names and before its run is published, or whose flush fails once it is, removes them:
    nothing names a run that does not exist, and verify finds nothing. Its lane, queue and
    index entries stayed (readers skip them; verify removed them five minutes later)."""
    parent = await created(local)
    await created(local, group="g", queue="q")  # every directory the child's names go in
    before = _names(root)
    runs = sorted(p.name for p in (root / "runs").iterdir())
    child = record(group="g", queue="q", parent_id=parent.id)
    with _fsops.inject(op, errno.EIO, match=match) as fault, pytest.raises(StoreError):
        assert await local.create_run(child, [started(child)])
    assert fault.hits
    assert _names(root) == before
    assert sorted(p.name for p in (root / "runs").iterdir()) == runs
    assert [p for p in (root / "tmp").iterdir() if p.name != "names"] == []
    assert await local.verify() == []
    again = record(id=child.id, group="g", queue="q", parent_id=parent.id)
    assert await local.create_run(again, [started(again)])  # the id is free
    assert [r.id for r in await local.list_runs(parent_id=parent.id)] == [child.id]


async def test_a_creation_that_loses_its_id_to_another_takes_back_its_own_names(
    local: LocalStore, root: Path
) -> None:
    """Another creator published the id first (the rename into ``runs/`` finds it there):
    ``create_run`` says the run exists, and the names this creation wrote under its own
    number are removed; the winner's stay."""
    parent = await created(local)
    child = record(group="g", queue="q", parent_id=parent.id)
    with _fsops.inject("rename", errno.ENOTEMPTY, match="/runs/") as fault:
        assert not await local.create_run(child, [started(child)])
    assert fault.hits
    assert not any(child.id in name for name in _names(root))
    winner = record(id=child.id, group="g", queue="q", parent_id=parent.id)
    assert await local.create_run(winner, [started(winner)])
    assert [r.id for r in await local.list_runs(parent_id=parent.id)] == [child.id]
    assert await local.verify() == []
