"""``wf store verify`` on the local store: entries of runs that do not exist (ghosts) are
removed and said, never completed; names in ``queue/`` that are no entry wf made are named."""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path

import orjson
import pytest

from tests.store.helpers import acquire, created, save
from wf import StoreError
from wf.store import HookRecord, RunRecord, RunStatus, Schedule, collect_faults
from wf.store._faults import Fault
from wf.store._ids import new_run_id
from wf.store.conformance import event
from wf.store.local import LocalStore, _compact, _ghosts, _strays
from wf.store.local._layout import NOW, damage, gather_damage, hook_file


def _entries_of(root: Path, run_id: str) -> list[str]:
    """Every entry outside the run's directory that names it (by path under the store)."""
    found = []
    for top in ("queue", "lanes", "index", "by-status", "by-workflow", "by-tag", "children"):
        for folder, _dirs, files in os.walk(root / top):
            found += [os.path.relpath(os.path.join(folder, n), root) for n in files if run_id in n]
    return sorted(found)


async def test_a_ghosts_entries_are_removed_and_said_never_completed(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose directory is gone (a creation cut short after its entries were written)
    keeps entries in every index, the queue and its lane: verify removes them all once they
    are older than a creation takes, says so in one line, and puts back none of them (it used
    to add the ``by-status/`` entry a ghost lacked). Live, finished and packed runs keep
    theirs."""
    parent = await created(local, group="g", queue="q")
    ghost = await created(local, group="g", queue="q", parent_id=parent.id)
    packed = await created(local)
    lease = await acquire(local, packed.id)
    packed.status, packed.output = RunStatus.COMPLETED, 1
    await lease.append_and_save([event("run_completed", output=1)], packed)
    await lease.release()
    assert _compact.compact(local, now=4e9, older_than=0.0, limit=10).packed == 1
    kept = {run.id: _entries_of(root, run.id) for run in (parent, packed)}
    before = _entries_of(root, ghost.id)
    assert {path.split(os.sep)[0] for path in before} == {
        "queue",
        "lanes",
        "index",
        "by-status",
        "by-workflow",
        "by-tag",
        "children",
    }
    shutil.rmtree(root / "runs" / ghost.id)
    [status_entry] = [p for p in before if p.startswith("by-status")]
    os.unlink(root / status_entry)  # lost too: verify must not put it back

    # Young: a creation may be in flight. Left alone, and not completed (the run is no
    # longer counted: that count is repaired).
    [counted] = await local.verify()
    assert counted.endswith("the count of pending was 2, a scan found 1: repaired")
    assert _entries_of(root, ghost.id) == [p for p in before if p != status_entry]

    monkeypatch.setattr(_ghosts, "ORPHAN_AGE", -1.0)  # every entry is old enough now
    [line] = await local.verify()
    assert line.startswith(f"run {ghost.id}: {len(before) - 1} entries in ")
    assert line.endswith("but no such run (a creation or a deletion cut short): removed")
    assert _entries_of(root, ghost.id) == []
    assert {run_id: _entries_of(root, run_id) for run_id in kept} == kept
    assert await local.verify() == []
    assert [r.id for r in await local.list_runs(limit=10)] == [packed.id, parent.id]


async def test_verify_names_what_in_queue_is_no_entry_wf_made(
    local: LocalStore, root: Path
) -> None:
    """A name that is no queue entry, an entry naming no run id, a symbolic link and a
    directory in ``queue/``: each is named (readers pass over them); the runs' own entries
    and hidden temporary files are not."""
    run = await created(local)
    queue = root / "queue"
    (queue / "garbage").touch()
    (queue / f"{NOW}+not a run id").touch()
    (queue / f"{NOW}+wrun_linked").symlink_to(root / "tmp")
    (queue / f"{NOW}+wrun_folder").mkdir()
    (queue / ".entry.123.tmp").touch()
    problems = await local.verify()
    assert sorted(problems) == sorted(
        [
            f"{queue / 'garbage'}: not a queue entry (a name wf never makes; remove it)",
            f"{queue / (NOW + '+not a run id')}: not a queue entry (a name wf never makes;"
            " remove it)",
            f"{queue / (NOW + '+wrun_linked')}: a symbolic link, not a queue entry wf made"
            " (remove it)",
            f"{queue / (NOW + '+wrun_folder')}: not a file, so not a queue entry wf made"
            " (remove it)",
        ]
    )
    assert await local.due_runs(now=4e9, limit=10) == [run.id]


async def test_entries_of_a_deleted_run_are_removed_without_waiting(
    local: LocalStore, root: Path
) -> None:
    """Entries naming a run that was deleted (it has a tombstone, so no creation can be in
    flight with its id), such as the ``by-status/pending`` one an older verify put back while
    a deletion removed the run: removed and said at once. They used to wait ``ORPHAN_AGE``
    by the ctime that every new entry refreshes, so on a busy store they stayed, and a
    verify said ``store ok``."""
    run = await created(local)
    [status_entry] = [p for p in _entries_of(root, run.id) if p.startswith("by-status")]
    lease = await acquire(local, run.id)
    run.status, run.output = RunStatus.COMPLETED, 1
    await lease.append_and_save([event("run_completed", output=1)], run)
    await lease.release()
    assert (await local.delete_runs([run.id], now=9.0, reason="retention")).ids == [run.id]
    assert _entries_of(root, run.id) == []
    (root / status_entry).parent.mkdir(parents=True, exist_ok=True)
    (root / status_entry).touch()
    [line] = await local.verify()
    assert line == (
        f"run {run.id}: 1 entry in by-status/ but no such run (a creation or a deletion cut "
        "short): removed"
    )
    assert _entries_of(root, run.id) == []
    assert await local.verify() == []


def _shut(monkeypatch: pytest.MonkeyPatch, run_dir: Path) -> None:
    """The run's directory refuses to be looked into (as mode 000 does for a non-root user)."""
    real = os.stat
    inside = str(run_dir) + os.sep

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if isinstance(path, str) and path.startswith(inside):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat)


async def test_a_run_directory_that_shuts_us_out_is_named_and_the_rest_verified(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify names the run whose directory cannot be looked into and goes on; reading that
    run is a store error saying ``[EACCES]`` (the CLI's exit 3), not a raw PermissionError."""
    shut = await created(local)
    await created(local)
    _shut(monkeypatch, root / "runs" / shut.id)
    problems = await local.verify()
    assert [p for p in problems if p.startswith(f"run {shut.id}")] == [
        f"run {shut.id}: cannot read {root / 'runs' / shut.id}: [EACCES] Permission denied"
    ], problems
    # Its count is left as it is (the run is pending still, for all verify can tell).
    assert [p.rpartition(": ")[2] for p in problems if "count of" in p] == ["left as it is"]
    with pytest.raises(StoreError, match=r"\[EACCES\]"):
        await local.get_run(shut.id)
    with collect_faults() as faults:
        listed = await local.list_runs(limit=10)
    assert shut.id not in {r.id for r in listed} and len(listed) == 1
    assert [f.item for f in faults] == [shut.id] and "[EACCES]" in faults[0].reason


@pytest.mark.parametrize("replaced", ["deleted", "fifo"])
async def test_a_run_whose_journal_is_gone_is_named_by_verify_and_listings(
    local: LocalStore, root: Path, replaced: str
) -> None:
    """A run's journal deleted (as fsck might) or replaced by a FIFO leaves a run that cannot
    be read: verify names it rather than taking the directory for no run (and only repairing
    the counts), and a listing leaves it out saying why, as for other damaged runs."""
    run = await created(local)
    other = await created(local)
    journal = root / "runs" / run.id / "journal.jsonl"
    os.unlink(journal)
    if replaced == "fifo":
        os.mkfifo(journal)
    (root / "runs" / run.id / "run.json").write_bytes(orjson.dumps(run.to_json()))
    problems = await local.verify()
    said = [p for p in problems if run.id in p]
    if replaced == "deleted":
        assert said == [
            f"run {run.id}: {journal} is missing (deleted?): the run cannot be read or driven "
            "until it is restored (from a backup)"
        ], problems
    else:
        assert said == [f"{journal} is a FIFO, not a file wf wrote: replace or remove it"]
    assert not any("count" in p for p in problems), problems
    with collect_faults() as faults:
        listed = await local.list_runs(limit=10)
    assert [r.id for r in listed] == [other.id]
    assert [f.item for f in faults] == [run.id] and str(journal) in faults[0].reason


async def test_entries_an_older_wf_left_after_the_upgrade_are_repaired(
    local: LocalStore, root: Path
) -> None:
    """A format-3 wf still running after the upgrade completes a run: it rewrites the
    record, writes the index entry as format 3 named it and a lane counter, and leaves the
    run's current ``index/`` and ``by-status/`` entries saying pending. Verify removes the
    older wf's names, makes the entries agree with the record (so the run is listed by its
    status again), says so once, and finds nothing the next time."""
    run = await created(local, group="g")
    other = await created(local)
    lost = await created(local)  # its record rewritten without its creation number
    for done, keep_seq in ((run, True), (lost, False)):
        raw = done.to_json()
        raw["status"] = "completed"
        if not keep_seq:
            del raw["seq"]
        (root / "runs" / done.id / "run.json").write_bytes(orjson.dumps(raw))
    old_leaf = root / "index" / run.id[:10] / ("b" + run.id[10:11])
    old_leaf.mkdir(parents=True)
    (old_leaf / f"{run.id}+completed+0123abcd+-").touch()
    (root / "lanes" / "0123456789abcdef0123456789abcdef.seq").write_text("1\n")
    assert [r.id for r in await local.list_runs(statuses=[RunStatus.COMPLETED])] == []
    problems = await local.verify()
    assert f"run {run.id}: its index entries say pending but its record says completed " in (
        "\n".join(problems)
    )
    assert (
        f"run {lost.id}: its record has no creation number (an older wf rewrote it), its "
        f"index entry says {lost.seq}: repaired"
    ) in problems
    assert any("1 entry named as an older wf (format 3)" in p for p in problems)
    assert any("a lane counter of an older wf (format 3): removed" in p for p in problems)
    # The counts it did not keep either (``repair_counts``): completed 0 -> 2, pending 3 -> 1.
    assert len([p for p in problems if "/counts: the count of " in p]) == 2, problems
    assert len(problems) == 6, problems
    assert not (root / "index" / run.id[:10]).exists()
    completed = await local.list_runs(statuses=[RunStatus.COMPLETED])
    assert [(r.id, r.seq) for r in completed] == [(lost.id, lost.seq), (run.id, run.seq)]
    assert [r.id for r in await local.list_runs(statuses=[RunStatus.PENDING])] == [other.id]
    assert await local.verify() == []


async def test_verify_names_a_symbolic_link_loop_where_a_lane_belongs(
    local: LocalStore, root: Path
) -> None:
    """A symbolic link leading back to itself, named like a lane: verify names it and checks
    the rest (listing it raised ``ELOOP``, a plain ``StoreError``: verify stopped, exit 3);
    a claim that meets it at a run's lane holds back that lane alone."""
    run = await created(local, group="g")
    lanes = root / "lanes"
    lane = next(lanes.iterdir())
    loop = lanes / ("f" * 32)
    loop.symlink_to(loop)
    problems = await local.verify()
    assert problems == [f"{loop}: not a lane (Too many levels of symbolic links)"]
    shutil.rmtree(lane)
    lane.symlink_to(lane)
    alone = await created(local)
    other = LocalStore(root)  # another worker: it lists the lane afresh
    try:
        leases = await other.claim(4e9, 10)
        assert [lease.run_id for lease in leases] == [alone.id]
        for lease in leases:
            await lease.release()
        assert other.faults.of_kind("lane") == {lane.name}
        assert run.id not in {lease.run_id for lease in leases}
    finally:
        await other.close()


async def test_a_file_where_an_index_directory_belongs_is_named_and_the_rest_checked(
    local: LocalStore, root: Path
) -> None:
    """A file where a bucket directory of ``index/`` or a status's tree belongs (a fuzzer's,
    a user's): verify names it with what to do and checks the rest (it used to stop on
    ``by-status/completed``, a file, naming nothing else). The files stay: they may be
    someone's data. Listings skip them, as they did."""
    run = await created(local)
    strays = [
        root / "by-status" / "completed",  # the tree of a status no run has yet
        root / "index" / "0000000099",
        root / "by-status" / "pending" / "0000000000" / "b999",
    ]
    for path in strays:
        path.write_bytes(b"someone's")
    (root / "queue" / "garbage").touch()  # checked after the index trees
    problems = await local.verify()
    assert sorted(problems) == sorted(
        [
            f"{path}: not a wf index directory; skipped (not made by wf: move it out of the store)"
            for path in strays
        ]
        + [f"{root / 'queue' / 'garbage'}: not a queue entry (a name wf never makes; remove it)"]
    )
    assert all(path.read_bytes() == b"someone's" for path in strays)
    assert [r.id for r in await local.list_runs(statuses=["pending", "completed"])] == [run.id]


async def test_a_run_is_re_pinned_after_a_file_where_its_tag_directory_belongs_is_removed(
    local: LocalStore, root: Path
) -> None:
    """A file stood where a deployment's ``by-tag/`` directory belongs, verify named it and it
    was removed: a run re-pinned to that deployment (``wf deployments upgrade``) then gets its
    entry there, in the process that knew the directory before (its re-pin failed with
    ``StoreError`` ENOENT, the directory known to exist, never looked for again)."""
    pinned = await created(local, deployment="v2")  # makes v2's tag directory, known here
    run = await created(local, deployment="v1")
    [tag] = {
        Path(folder).relative_to(root).parts[1]
        for folder, _dirs, files in os.walk(root / "by-tag")
        if any(pinned.id in name for name in files)
    }
    shutil.rmtree(root / "by-tag" / tag)
    (root / "by-tag" / tag).write_bytes(b"someone's")
    assert any(str(root / "by-tag" / tag) in line for line in await local.verify())
    (root / "by-tag" / tag).unlink()

    await save(local, run, RunStatus.PENDING, deployment="v2")
    tagged = [e for e in _entries_of(root, run.id) if e.startswith("by-tag")]
    assert len(tagged) == 1 and tagged[0].startswith(os.path.join("by-tag", tag, "")), tagged
    assert run.id in [r.id for r in await local.list_runs(deployment="v2")]


async def test_verify_names_stray_names_in_the_runs_and_index_directories(
    local: LocalStore, root: Path
) -> None:
    """Names wf never makes in ``runs/``, ``children/``, ``hooks/runs/``, ``index/`` and the
    ``by-*`` directories: readers skip them, verify names each (it said ``store ok``) and
    removes none. Hidden temporary names and the run's own entries are not named."""
    parent = await created(local, group="g", queue="q")
    await created(local, group="g", queue="q", parent_id=parent.id)
    strays = [
        root / "runs" / "a-file",
        root / "children" / "a-file",
        root / "hooks" / "runs" / "a-file",
        root / "by-status" / "a-file",
        root / "by-tag" / "a-file",
        root / "by-workflow" / "a-file",
    ]
    for path in strays:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    entry = root / "index" / "a-dir" / "b000" / "an entry"  # kept by verify's sweep
    entry.parent.mkdir(parents=True)
    entry.touch()
    (root / "by-tag" / ".tag.123.tmp").touch()
    problems = await local.verify()
    said = [
        f"{path}: not an entry wf makes in {path.parent.name}/ (readers skip it; move it out "
        "of the store)"
        for path in [*strays, root / "index" / "a-dir"]
    ]
    said.append(
        f"{entry}: not a wf index entry; skipped (not made by wf: move it out of the store)"
    )
    assert sorted(problems) == sorted(said)
    assert all(path.exists() for path in [*strays, entry])
    assert len(await local.list_runs(limit=10)) == 2


async def _finish(local: LocalStore, run: RunRecord) -> None:
    """Complete the run (as its driver would)."""
    lease = await acquire(local, run.id)
    run.status, run.output = RunStatus.COMPLETED, 1
    await lease.append_and_save([event("run_completed", output=1)], run)
    await lease.release()


async def test_verify_names_stray_names_at_the_top_and_in_slots_and_rates(
    local: LocalStore, root: Path
) -> None:
    """A name the format does not define at the store's top level, or in ``slots/`` and
    ``rates/`` (a directory where a place of a concurrency cap belongs too: that place is
    never taken): verify names each (it said ``store ok``) and removes none. The files the
    format defines (a creation log, an upgrade's lock), hidden temporary names and a
    volume's ``lost+found`` are not named."""
    await created(local)
    cap, limit = "a" * 32, "c" * 32
    strays = [root / "notes.txt", root / "backup", root / "slots" / "junk"]
    strays += [root / "slots" / f"{cap}.x", root / "rates" / "junk", root / "rates" / "x.json"]
    for path in strays:
        path.write_bytes(b"someone's")
    (root / "backup").unlink()
    (root / "backup").mkdir()
    place = root / "slots" / f"{cap}.0"
    place.mkdir()
    for path in (root / "creations.jsonl", root / "migrate.lock", root / ".x.tmp"):
        path.touch()
    (root / "lost+found").mkdir()
    (root / "slots" / f"{cap}.1").touch()
    (root / "rates" / f"{limit}.json").write_bytes(b"[]")
    (root / "rates" / f"{limit}.lock").touch()
    problems = await local.verify()
    assert sorted(problems) == sorted(
        [
            f"{root / 'notes.txt'}: not a name the store's format defines (wf never reads it; "
            "move it out of the store)",
            f"{root / 'backup'}: not a name the store's format defines (wf never reads it; "
            "move it out of the store)",
        ]
        + [
            f"{path}: not an entry wf makes in {path.parent.name}/ (readers skip it; move it "
            "out of the store)"
            for path in [*strays[2:], place]
        ]
    )
    assert all(os.path.lexists(path) for path in strays)


async def test_verify_names_stray_names_in_the_directories_of_upkeep(
    local: LocalStore, root: Path
) -> None:
    """``tombstones/``, ``counts/``, ``schedules/``, ``hooks/`` and ``segments/``: a name none
    of them holds is named (verify said ``store ok``), none removed; their own files (read and
    checked by verify apart) are not."""
    await created(local)
    await local.save_schedule(Schedule(id="s", workflow="tests:flow", cron="* * * * *"))
    strays = [
        root / "tombstones" / "notes.txt",
        root / "counts" / "completed.x",
        root / "counts" / "notes",
        root / "schedules" / "notes",
        root / "schedules" / "x.lock",
        root / "hooks" / "notes",
        root / "segments" / "notes",
        root / "segments" / "1.dead",
    ]
    for path in strays:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"someone's")
    (root / "hooks" / "runs").mkdir(exist_ok=True)
    problems = await local.verify()
    assert sorted(problems) == sorted(
        f"{path}: not an entry wf makes in {path.parent.name}/ (readers skip it; move it out "
        "of the store)"
        for path in strays
    )
    assert all(path.read_bytes() == b"someone's" for path in strays)


async def test_verify_names_stray_names_inside_the_index_trees_and_children(
    local: LocalStore, root: Path
) -> None:
    """One level deeper: inside ``by-tag/<key>/``, ``by-workflow/<hash>/`` and
    ``children/<parent>/`` (and their buckets) a name that is no bucket or entry, a file
    where a bucket belongs, a directory where an entry belongs: each named once (verify said
    ``store ok``), none removed. A stray ``x+<run_id>`` in a tag's bucket made the listing by
    that tag fail (``ValueError`` on its creation number); it is skipped, and said."""
    parent = await created(local, group="g", queue="q")
    child = await created(local, group="g", queue="q", parent_id=parent.id)
    tags = root / "by-tag"
    [group_tree] = [p for p in tags.iterdir() if p.name.startswith("g")]
    [queue_tree] = [p for p in tags.iterdir() if p.name.startswith("q")]
    [workflow_tree] = [p for p in (root / "by-workflow").iterdir() if p.is_dir()]
    [b1] = [p.name for p in workflow_tree.iterdir()]
    [b2] = [p.name for p in (workflow_tree / b1).iterdir()]
    kids = root / "children" / parent.id
    files = {
        "directory": [
            group_tree / "a-file",  # where a bucket belongs
            group_tree / b1 / "b999",  # where a split bucket's sub-bucket belongs
            root / "by-workflow" / ("0" * 8),  # where a workflow's tree belongs
            tags / ("q" + "0" * 12),  # where a queue's tree belongs
        ],
        "entry": [
            queue_tree / b1 / b2 / "x+wrun_stray",
            workflow_tree / b1 / b2 / "a-file",
            kids / "a-file",
        ],
    }
    dirs = {
        "bucket": [workflow_tree / "a-dir", queue_tree / b1 / "a-dir"],
        "entry": [kids / "0000000000000099+wrun_stray"],
        "group": [group_tree / b1 / "a-dir"],
        "name file": [root / "by-workflow" / ("1" * 8 + ".name")],
    }
    for path in [*files["directory"], *files["entry"]]:
        path.write_bytes(b"someone's")
    for path in [*dirs["bucket"], *dirs["entry"], *dirs["group"], *dirs["name file"]]:
        path.mkdir()
    problems = await local.verify()
    skipped = "; skipped (not made by wf: move it out of the store)"
    assert sorted(problems) == sorted(
        [f"{path}: not a wf index directory{skipped}" for path in files["directory"]]
        + [f"{path}: not a wf index entry{skipped}" for path in files["entry"]]
        + [
            f"{path}: not a bucket directory wf makes in {path.parent.name}/ (what it holds "
            "may be listed; move it out of the store)"
            for path in dirs["bucket"]
        ]
        + [
            f"{path}: not a file, so not an entry wf made (a run is listed by the name of an "
            "empty file; move it out of the store)"
            for path in dirs["entry"]
        ]
        + [f"{path}: not a wf index directory{skipped}" for path in dirs["group"]]
        + [
            f"{path}: not an entry wf makes in by-workflow/ (readers skip it; move it out of "
            "the store)"
            for path in dirs["name file"]
        ]
    )
    assert all(path.exists() for paths in [*files.values(), *dirs.values()] for path in paths)
    with collect_faults() as met:
        assert [r.id for r in await local.list_runs(queue="q")] == [child.id, parent.id]
    assert [fault.where for fault in met] == [str(files["entry"][0])]
    assert [r.id for r in await local.list_runs(parent_id=parent.id)] == [child.id]
    assert [r.id for r in await local.list_runs(group="g")] == [child.id, parent.id]


async def test_a_run_is_deleted_past_damage_where_its_entries_are(
    local: LocalStore, root: Path
) -> None:
    """Deleting a child whose parent's ``children/<parent>`` is a file (and whose hook
    markers' directory is one too): the run is deleted and counted, each damaged place is
    noted once, for the caller to say (``wf gc``), and left for verify to name. The deletion
    used to fail once the run was renamed away: ``wf gc`` stopped (exit 3), the run's
    directory stayed in ``tmp/`` and its count was never moved to the tombstones."""
    parent = await created(local)
    child = await created(local, parent_id=parent.id)
    await _finish(local, child)
    kids = root / "children" / parent.id
    shutil.rmtree(kids)
    kids.write_bytes(b"someone's")
    marks = root / "hooks" / "runs" / child.id
    marks.parent.mkdir(parents=True, exist_ok=True)
    marks.write_bytes(b"someone's")
    with collect_faults() as met:
        done = await local.delete_runs([child.id], now=4e9, reason="gc")
    assert done.ids == [child.id]
    assert sorted(fault.where for fault in met) == sorted([str(kids), str(marks)])
    assert not (root / "runs" / child.id).exists()
    assert [n for n in os.listdir(root / "tmp") if n.startswith("deleted.")] == []
    assert kids.read_bytes() == marks.read_bytes() == b"someone's"
    info = await local.store_info()
    assert (info.runs["completed"], info.runs["pending"], info.tombstones) == (0, 1, 1)
    assert [r.id for r in await local.list_runs()] == [parent.id]


@pytest.mark.parametrize("name", [*sorted(_strays.KNOWN_DIRS), "sequence"])
async def test_a_file_where_a_store_directory_belongs_is_named_once_and_the_rest_checked(
    local: LocalStore, root: Path, name: str
) -> None:
    """One of the store's own directories replaced by a file (``by-workflow``: verify
    stopped at once, exit 3, naming only the error of its first read there), or its
    sequence by a directory: verify names it in one line, says nothing more of what it
    cannot read there, and checks the rest of the store (a stray name elsewhere is still
    named). Nothing is removed."""
    parent = await created(local, group="g", queue="q")
    child = await created(local, group="g", queue="q", parent_id=parent.id)
    await _finish(local, child)
    assert _compact.compact(local, now=4e9, older_than=0.0, limit=10).packed == 1
    await local.save_schedule(Schedule(id="s", workflow="tests:flow", cron="* * * * *"))
    assert await local.verify() == []
    path = root / name
    if path.is_dir():
        shutil.rmtree(path)
        path.write_bytes(b"someone's")
        said = (
            f"{path}: not a directory, where the store keeps its {name}/ (nothing there can be "
            "read or checked: move it out of the store and put the directory back)"
        )
    else:
        path.unlink()
        path.mkdir()
        said = f"{path}: not a file, where the store keeps its {name} (move it out of the store)"
    markers = {
        "queue": f"{root / 'queue' / 'garbage'}: not a queue entry (a name wf never makes; "
        "remove it)",
        "by-tag": f"{root / 'by-tag' / 'a-file'}: not an entry wf makes in by-tag/ (readers "
        "skip it; move it out of the store)",
    }
    for where in markers:
        if where != name:
            (root / where / ("garbage" if where == "queue" else "a-file")).touch()
    problems = await local.verify()
    assert problems[0] == said
    assert sorted(problems[1:]) == sorted(line for where, line in markers.items() if where != name)
    assert (path.read_bytes() == b"someone's") if path.is_file() else path.is_dir()


async def test_a_directory_where_a_workflows_name_file_belongs(
    local: LocalStore, root: Path
) -> None:
    """``by-workflow/<hash>.name`` (a cache of the names of a workflow hash) a directory: a
    search by name and a creation of that workflow failed (exit 3, "… is a directory where
    a file belongs"). The names are found in the runs' records instead, the creation goes
    on, the directory is said, and verify names it once."""
    first = await created(local)
    [names] = (root / "by-workflow").glob("*.name")
    names.unlink()
    names.mkdir()
    other = LocalStore(root)  # another process: it has not seen the name file
    try:
        second = await created(other)
        with collect_faults() as met:
            found, _cursor, _scanned = await other.search_runs("flow", limit=10, budget=100)
        assert [r.id for r in found] == [second.id, first.id]
        assert [fault.where for fault in met] == [str(names)]
    finally:
        await other.close()
    assert await local.verify() == [
        f"{names}: not an entry wf makes in by-workflow/ (readers skip it; move it out of the "
        "store)"
    ]


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
@pytest.mark.parametrize("index", ["by-status", "by-workflow", "by-tag"])
async def test_a_run_is_deleted_past_a_directory_where_its_index_entry_belongs(
    local: LocalStore, root: Path, index: str, packed: bool
) -> None:
    """A directory where one of a finished run's ``by-status/``, ``by-workflow/`` or
    ``by-tag/`` entries belongs: the run and the rest of its batch are deleted and counted,
    the directory is noted once and left for verify. Unlinking it (EISDIR) used to stop the
    deletion after the tombstone and the move to ``tmp/``: ``wf gc`` exit 3, counts not
    moved, the batch's other entries left as ghosts (a packed run: locators and the burial of
    its segment's bytes skipped)."""
    runs = [await created(local, queue="q", group="g") for _ in range(2)]
    for run in runs:
        await _finish(local, run)
    if packed:
        assert _compact.compact(local, now=4e9, older_than=0.0, limit=10).packed == 2
    [entry, *_] = [p for p in _entries_of(root, runs[0].id) if p.startswith(index + os.sep)]
    os.unlink(root / entry)
    (root / entry).mkdir()
    with collect_faults() as met:
        done = await local.delete_runs([run.id for run in runs], now=4e9, reason="gc")
    assert sorted(done.ids) == sorted(run.id for run in runs)
    assert [fault.where for fault in met] == [str(root / entry)]
    assert (root / entry).is_dir()
    assert [n for n in os.listdir(root / "tmp") if n.startswith("deleted.")] == []
    assert _entries_of(root, runs[1].id) == []
    info = await local.store_info()
    assert (info.runs["completed"], info.tombstones) == (0, 2)
    assert await local.list_runs() == []


@pytest.mark.timeout(20)
def test_tens_of_thousands_of_stray_names_are_collected_without_a_scan_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50,000 stray names met by a listing (``wf runs``: ``collect_faults``) or by verify's
    walk (``gather_damage``): each kept once, in order, none compared with those kept before
    it. Each was looked for in a list: with 60,000 in one bucket ``wf runs -w X`` took six
    minutes (one second without them), verify twenty seconds."""
    compared = 0
    equal = Fault.__eq__

    def counting(self: Fault, other: object) -> bool:
        nonlocal compared
        compared += 1
        return equal(self, other)

    monkeypatch.setattr(Fault, "__eq__", counting)
    paths = [f"/s/by-workflow/h/0000000000/stray{i:06d}" for i in range(50_000)]
    with collect_faults() as met:
        for path in [*paths, *paths[:10]]:
            damage(f"{path}: not a wf index entry; skipped", path)
    assert [fault.where for fault in met] == paths
    assert compared <= 10
    with gather_damage() as found:
        for path in [*paths, *paths[:10]]:
            damage(f"{path}: not a wf index entry; skipped", path)
    assert found == [f"{path}: not a wf index entry; skipped" for path in paths]


async def test_a_deleted_runs_hooks_go_though_its_markers_cannot_be_listed(
    local: LocalStore, root: Path
) -> None:
    """``hooks/runs/<run>`` a file: deleting the run still removes its hook files (found by
    reading each hook file, only then), so its token is free again; another run's hook stays.
    The deletion went on but left the hook: ``wf hooks`` listed it, and a new run taking the
    token failed, "already used by" the deleted run."""
    run, other = await created(local), await created(local)
    await _finish(local, run)
    assert await local.register_hook(HookRecord("tok-1", run.id, 1)) is None
    assert await local.register_hook(HookRecord("tok-2", other.id, 1)) is None
    marks = root / "hooks" / "runs" / run.id
    shutil.rmtree(marks)
    marks.write_bytes(b"someone's")
    with collect_faults() as met:
        done = await local.delete_runs([run.id], now=4e9, reason="gc")
    assert done.ids == [run.id]
    assert [fault.where for fault in met] == [str(marks)]
    assert await local.get_hook("tok-1") is None
    assert [hook.token for hook in await local.list_hooks()] == ["tok-2"]
    assert await local.register_hook(HookRecord("tok-1", other.id, 2)) is None
    assert marks.read_bytes() == b"someone's"


async def test_verify_names_a_hook_whose_run_does_not_exist(local: LocalStore, root: Path) -> None:
    """A hook file naming a run that does not exist (left by a deletion cut short): verify
    names it, once, and leaves it; a hook of a live run, loose or packed, is no problem. It
    was said by nothing while its token stayed taken."""
    live = await created(local)
    gone = new_run_id()
    assert await local.register_hook(HookRecord("tok-live", live.id, 1)) is None
    assert await local.register_hook(HookRecord("tok-gone", gone, 1)) is None
    path = root / "hooks" / hook_file("tok-gone")
    assert await local.verify() == [
        f"{path}: a hook of run {gone}, which does not exist (its token stays taken: move the "
        "file out of the store to free it)"
    ]
    assert path.exists()


@pytest.mark.parametrize(
    "where", ["counts/ready", f"rates/{'ab' * 16}.json", "segments/lock", "segments/00000001.dead"]
)
async def test_a_directory_where_a_file_verify_reads_belongs_is_one_line(
    local: LocalStore, root: Path, where: str
) -> None:
    """A directory at a file verify reads (``counts/ready``, a rate window, the segments'
    lock, a segment's dead count): one line, the read's. It was said twice, as unreadable and
    as a stray name."""
    run = await created(local)
    await _finish(local, run)
    assert _compact.compact(local, now=4e9, older_than=0.0, limit=10).packed == 1
    path = root / where
    path.parent.mkdir(exist_ok=True)
    if path.exists():
        path.unlink()
    path.mkdir()
    assert [line for line in await local.verify() if str(path) in line] == [
        f"{path} is a directory where a file belongs: remove it"
    ]


async def test_a_child_entry_as_format_3_named_it_is_no_stray(
    local: LocalStore, root: Path
) -> None:
    """``children/<parent>/<run_id>`` of a run that exists, as an older wf (format 3) still
    running after the upgrade names a child: no line (listings pass it over); a name that is
    no entry, or the id of no run, still is one. verify named the first as a stray."""
    parent = await created(local)
    child = await created(local, parent_id=parent.id)
    kids = root / "children" / parent.id
    (kids / child.id).write_bytes(b"")
    nobody = kids / new_run_id()
    for path in (nobody, kids / "x+y"):
        path.write_bytes(b"")
    assert sorted(await local.verify()) == sorted(
        f"{path}: not a wf index entry; skipped (not made by wf: move it out of the store)"
        for path in (nobody, kids / "x+y")
    )


def _stray(path: Path, *, directory: bool = False, age: float = 0.0) -> Path:
    """Put someone's file (or directory) at ``path``, last changed ``age`` seconds ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        path.mkdir()
    else:
        path.write_bytes(b"someone's")
    if age:
        then = time.time() - age
        os.utime(path, (then, then))
    return path


async def test_verify_names_stray_names_in_hook_markers_deliveries_lanes_and_tmp(
    local: LocalStore, root: Path
) -> None:
    """``hooks/runs/<run_id>/``, ``hooks/delivered/``, ``lanes/`` and ``lanes/<hash>/``, and
    ``tmp/`` (names older than an hour: a younger one may be a write in flight): a name wf
    never makes there, or one of another kind, is named once and removed by no one (verify
    said ``store ok``; the store's opening removed an old stray directory in ``tmp/``, and
    left an old ``names.full.*`` file, which is its own). What wf made is not named: a hook's
    marker, a kept delivery, a lane's entries, what a deletion stages (old ones the next
    opening sweeps)."""
    run = await created(local, group="g")
    await local.register_hook(HookRecord(token="t", run_id=run.id, op=1))
    [lane] = (root / "lanes").iterdir()
    marks = root / "hooks" / "runs" / run.id
    old = 2 * 3600.0
    strays = {
        _stray(marks / "notes"): f"hooks/runs/{run.id}/",
        _stray(marks / (hook_file("u")), directory=True): f"hooks/runs/{run.id}/",
        _stray(root / "hooks" / "delivered" / "notes"): "hooks/delivered/",
        _stray(root / "lanes" / "notes", directory=True): "lanes/",
        _stray(root / "tmp" / "notes", age=old): "tmp/",
        _stray(root / "tmp" / "aside", directory=True, age=old): "tmp/",
        _stray(root / "tmp" / f"deleted.{run.id}.0123abcd", age=old): "tmp/",  # not a directory
    }
    _stray(root / "hooks" / "delivered" / hook_file("d"))  # a delivery (prune reads it)
    _stray(root / "tmp" / "young")  # maybe a write in flight
    deleting = _stray(root / "tmp" / f"deleted.{run.id}.fedcba98", directory=True, age=old)
    # A creation's, cut short, of an explicit id that begins like a deletion's staging name.
    creating = _stray(root / "tmp" / "deleted.-x.4242.0a1b2c3d", directory=True, age=old)
    wrong_kind = _stray(lane / f"{'9' * 20}+{new_run_id()}", directory=True)
    problems = await local.verify()
    tail = {where: "readers skip it" for where in strays.values()} | {"tmp/": "wf never reads it"}
    assert sorted(problems) == sorted(
        [
            f"{wrong_kind}: not a file, so not a lane entry wf made (readers skip it; move it out "
            "of the store)",
            *(
                f"{path}: not an entry wf makes in {where} ({tail[where]}; move it out of the "
                "store)"
                for path, where in strays.items()
            ),
        ]
    )
    assert all(path.exists() for path in strays)
    full = _stray(root / "tmp" / "names.full.89abcdef", age=old)
    again = LocalStore(root)  # its opening sweeps tmp/
    try:
        assert sorted(await again.verify()) == sorted(problems)
    finally:
        await again.close()
    assert not full.exists() and not deleting.exists() and not creating.exists()  # swept
    assert (root / "tmp" / "aside").is_dir()


async def test_a_journal_that_lost_its_outcome_is_named_not_rewritten(
    local: LocalStore, root: Path
) -> None:
    """A completed run (no run.json: its journal gives its record back) whose journal lost
    everything after its first line (cut mid-line 2): its index entries, renamed only once
    the outcome was durable, still say completed. Verify names the loss and leaves the
    entries and the counts as they are, as a worker leaves the run (not queued, never driven
    again). It set them back to pending toward the cut journal and reported "pending but not
    in the queue"."""
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.append([event("step_completed", name="s", op=1, result=1)])
    run.status, run.output = RunStatus.COMPLETED, 1
    await lease.append_and_save([event("run_completed", output=1)], run)
    await lease.release()
    run_dir = root / "runs" / run.id
    (run_dir / "run.json").unlink(missing_ok=True)  # as a driver leaves a completed run
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().split(b"\x00")[0].split(b"\n")
    journal.write_bytes(lines[0] + b"\n" + lines[1][: len(lines[1]) // 2])
    before = sorted(_entries_of(root, run.id))
    problems = await local.verify()
    assert len(problems) == 1, problems
    [problem] = problems
    assert problem.startswith(f"run {run.id}: ") and str(journal) in problem
    assert "holds no outcome" in problem and "index entries say completed" in problem
    assert "restore the run from a backup" in problem
    assert sorted(_entries_of(root, run.id)) == before  # completed, as they were
    assert await local.verify() == [problem]  # said again, never "repaired"


async def test_a_run_whose_journal_lost_its_outcome_is_not_driven_after_a_post(
    local: LocalStore, root: Path
) -> None:
    """A post puts such a run in the queue (due now): its claim read it as pending from the
    cut journal, set its index back and a worker replayed its steps. The claim names it
    damaged and leaves it (entries as they were, noted once); a lease asked for it raises."""
    from wf._exceptions import StoreCorrupted

    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.append([event("step_completed", name="s", op=1, result=1)])
    run.status, run.output = RunStatus.COMPLETED, 1
    await lease.append_and_save([event("run_completed", output=1)], run)
    await lease.release()
    run_dir = root / "runs" / run.id
    (run_dir / "run.json").unlink(missing_ok=True)
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().split(b"\x00")[0].split(b"\n")
    journal.write_bytes(lines[0] + b"\n" + lines[1][: len(lines[1]) // 2])
    before = sorted(_entries_of(root, run.id))
    await local.post(run.id, "message", {"x": 1})
    assert run.id in await local.due_runs(time.time())
    with collect_faults() as faults:
        assert await local.claim(time.time(), 5) == []
    assert [f.item for f in faults] == [run.id]
    with pytest.raises(StoreCorrupted, match="holds no outcome"):
        await local.try_acquire(run.id)
    assert [e for e in sorted(_entries_of(root, run.id)) if "queue" not in e] == [
        e for e in before if "queue" not in e
    ]


async def test_a_run_failed_as_damaged_whose_record_was_lost_is_not_a_lost_outcome(
    local: LocalStore, root: Path
) -> None:
    """A driver fails a run whose journal it cannot replay by saving a failed record, with no
    ``run_failed`` event (``_mark_corrupt``), and ``run.json`` is written without an fsync:
    after a power cut its index says failed and its journal holds no outcome, which verify
    took for a journal that lost its outcome. It names the journal's own damage instead."""
    run = await created(local)
    lease = await acquire(local, run.id)
    await lease.append([{"type": "step_completed", "ts": 1.0}])  # fields replay needs: none
    run.status, run.error = RunStatus.FAILED, {"type": "StoreCorrupted", "message": "x"}
    await lease.save(run)
    await lease.release()
    (root / "runs" / run.id / "run.json").unlink()  # the power cut
    problems = await local.verify()
    assert not any("holds no outcome" in p for p in problems), problems
    assert any("cannot be replayed" in p for p in problems), problems
