"""Run counts kept as runs change (``store_info``) always equal a count of the runs, and the
status, workflow, queue, group and deployment filters list exactly the runs a scan finds,
across random creations, status changes, deletions, crashes and group buckets splitting
between them; ``verify`` repairs a drift and says so."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.store.helpers import created, save
from wf.store import RunRecord, RunStatus, Store
from wf.store.local import LocalStore, _index
from wf.store.local._layout import FORMAT
from wf.store.memory import MemoryStore

ENDS = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]
SPLIT = _index.SPLIT_BYTES

step = st.one_of(
    st.just(("create", 0)),
    st.tuples(st.just("run"), st.integers(0, 20)),
    st.tuples(st.just("end"), st.integers(0, 60)),
    st.tuples(st.just("delete"), st.integers(0, 20)),
    st.just(("crash", 0)),
    st.just(("split", 0)),
)


async def scanned(store: Store) -> dict[str, int]:
    """Runs by status, from a listing of every run (every status present)."""
    found = Counter(r.status.value for r in await store.list_runs(limit=1_000_000))
    return {status.value: found.get(status.value, 0) for status in RunStatus}


async def same_as_a_scan(store: Store) -> None:
    """Each status and workflow filter lists what filtering every run finds, in order."""
    every = await store.list_runs(limit=1_000_000)
    for status in RunStatus:
        listed = await store.list_runs(statuses=[status], limit=1000)
        assert [r.id for r in listed] == [r.id for r in every if r.status is status]
    pair = [RunStatus.FAILED, RunStatus.RUNNING]
    listed = await store.list_runs(statuses=pair, limit=1000)
    assert [r.id for r in listed] == [r.id for r in every if r.status in pair]
    for n in range(3):
        name = f"tests:flow{n}"
        listed = await store.list_runs(workflow=name, limit=1000)
        assert [r.id for r in listed] == [r.id for r in every if r.workflow == name]
        listed = await store.list_runs(workflow=name, statuses=[RunStatus.RUNNING], limit=2)
        want = [r.id for r in every if r.workflow == name and r.status is RunStatus.RUNNING]
        assert [r.id for r in listed] == want[:2]
    for tag in TAGS:
        listed = await store.list_runs(limit=1000, **tag)
        assert [r.id for r in listed] == [r.id for r in every if tagged(r, tag)]
        for status in (RunStatus.PENDING, RunStatus.COMPLETED):
            listed = await store.list_runs(statuses=[status], limit=2, **tag)
            want = [r.id for r in every if r.status is status and tagged(r, tag)]
            assert [r.id for r in listed] == want[:2]
    listed = await store.list_runs(queue="mail", workflow="tests:flow1", limit=1000)
    want = [r.id for r in every if r.queue == "mail" and r.workflow == "tests:flow1"]
    assert [r.id for r in listed] == want


TAGS: list[dict[str, str]] = [
    {"queue": "mail"},
    {"group": "g0"},
    {"group": "g1", "queue": "mail"},
    {"deployment": "v1"},
    {"deployment": "v1", "group": "g0"},
]


def tagged(run: RunRecord, tag: dict[str, str]) -> bool:
    """Whether the run has every field ``tag`` names."""
    return all(getattr(run, name) == value for name, value in tag.items())


def mix(n: int) -> dict[str, str | None]:
    """The workflow, queue, group and deployment of the ``n``-th run created."""
    return {
        "workflow": f"tests:flow{n % 3}",
        "queue": "mail" if n % 2 else None,
        "group": f"g{n % 3}" if n % 3 != 2 else None,
        "deployment": ("v1", None, "v2", "v1")[n % 4],
    }


async def play(make: type[Store], root: Path, steps: list[tuple[str, int]]) -> None:
    store: Store = LocalStore(root) if make is LocalStore else MemoryStore()
    runs: list[RunRecord] = []
    deleted = 0
    for op, n in steps:
        live = [r for r in runs if not r.status.is_terminal]
        if op == "create":
            runs.append(await created(store, **mix(len(runs) + deleted)))
        elif op == "run" and live:
            await save(store, live[n % len(live)], RunStatus.RUNNING)
        elif op == "end" and live:
            await save(store, live[n % len(live)], ENDS[n % len(ENDS)])
        elif op == "delete" and runs:
            target = runs[n % len(runs)]
            done = await store.delete_runs([target.id], now=1.0, reason="test")
            if done.ids:
                runs.remove(target)
                deleted += 1
        elif op == "crash" and make is LocalStore:
            store = LocalStore(root)  # the old objects are dropped, never closed
        elif op == "split" and make is LocalStore:
            # Group buckets count as big from here on (or no longer): later runs of a group
            # go to its sub-buckets (or back), and every read must find them in both places.
            _index.SPLIT_BYTES = 1 if _index.SPLIT_BYTES > 1 else SPLIT
        info = await store.store_info()
        assert info.runs == await scanned(store)
        await same_as_a_scan(store)
        if make is LocalStore:
            assert info.tombstones == deleted
    assert await store.verify() == []


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, max_size=25))
def test_local_counts_always_equal_a_scan(steps: list[tuple[str, int]]) -> None:
    root = Path(tempfile.mkdtemp(prefix="wf-counts-"))
    try:
        asyncio.run(play(LocalStore, root / ".workflows", steps))
    finally:
        _index.SPLIT_BYTES = SPLIT
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(step, max_size=25))
def test_memory_counts_always_equal_a_scan(steps: list[tuple[str, int]]) -> None:
    asyncio.run(play(MemoryStore, Path("unused"), steps))


async def test_verify_repairs_a_drift_and_says_so(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / ".workflows")
    done = await created(store)
    await save(store, done, RunStatus.COMPLETED)
    await created(store)
    # A process killed between a status change and its count: two completed too many, one
    # pending too few.
    counts = tmp_path / ".workflows" / "counts"
    with open(counts / "completed.in", "ab") as file:
        file.write(b"..")
    with open(counts / "pending.out", "ab") as file:
        file.write(b".")
    drifted = await store.store_info()
    assert drifted.runs["completed"] == 3 and drifted.runs["pending"] == 0
    problems = await store.verify()
    assert problems == [
        f"{counts}: the count of completed was 3, a scan found 1: repaired",
        f"{counts}: the count of pending was 0, a scan found 1: repaired",
    ]
    info = await store.store_info()
    assert info.runs == await scanned(store)
    assert await store.verify() == []


async def test_a_count_that_drifted_below_zero_is_never_shown_negative(tmp_path: Path) -> None:
    """Processes killed between a change and its count can leave one below zero: store info
    says 0, verify says it repaired a drift without showing a negative number (it said
    ``pending was -1``)."""
    store = LocalStore(tmp_path / ".workflows")
    await created(store)
    counts = tmp_path / ".workflows" / "counts"
    with open(counts / "pending.out", "ab") as file:
        file.write(b"...")
    assert (await store.store_info()).runs["pending"] == 0
    assert await store.verify() == [
        f"{counts}: the count of pending was below 0, a scan found 1: repaired"
    ]
    assert (await store.store_info()).runs["pending"] == 1
    assert await store.verify() == []


async def test_a_store_without_counts_is_counted_by_a_scan_until_verify(tmp_path: Path) -> None:
    """A store made before counts existed: ``store_info`` scans; ``verify`` sets the counts
    (quietly: nothing was wrong), and ``store_info`` reads them from then on."""
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    done = await created(store)
    await save(store, done, RunStatus.FAILED)
    await created(store)
    shutil.rmtree(root / "counts")
    store = LocalStore(root)
    await created(store)  # counted, but the counts do not cover the store yet
    assert (await store.store_info()).runs == await scanned(store)
    assert await store.verify() == []
    assert (root / "counts" / "ready").exists()
    info = await store.store_info()
    assert info.runs["pending"] == 2 and info.runs["failed"] == 1


async def test_a_store_without_status_indexes_lists_from_the_index_until_verify(
    tmp_path: Path,
) -> None:
    """A store made before ``by-status/`` and ``by-workflow/``: filters read ``index/`` (and
    stay right while new runs arrive); ``verify`` builds them, and filters read them since."""
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    old = [await created(store, workflow=f"tests:flow{n % 3}") for n in range(4)]
    await save(store, old[1], RunStatus.FAILED)
    shutil.rmtree(root / "by-status")
    shutil.rmtree(root / "by-workflow")
    store = LocalStore(root)
    new = await created(store, workflow="tests:flow1")
    await save(store, new, RunStatus.FAILED)
    await same_as_a_scan(store)
    assert await store.verify() == []
    assert (root / "by-status" / "ready").exists()
    store = LocalStore(root)
    await same_as_a_scan(store)
    failed = await store.list_runs(statuses=[RunStatus.FAILED])
    assert [r.id for r in failed] == [new.id, old[1].id]


async def test_an_older_store_is_upgraded_with_counts_and_status_indexes(tmp_path: Path) -> None:
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    runs = [await created(store, workflow=f"tests:flow{n % 3}") for n in range(5)]
    await save(store, runs[2], RunStatus.COMPLETED)
    await save(store, runs[3], RunStatus.SUSPENDED)
    assert (await store.delete_runs([runs[2].id], now=1.0, reason="test")).ids == [runs[2].id]
    await store.close()
    for made in ("by-status", "by-workflow", "counts"):
        shutil.rmtree(root / made)
    (root / "wf-store.json").write_bytes(b'{"format": 4}\n')
    upgraded = LocalStore(root)
    info = await upgraded.store_info()
    assert info.format == FORMAT and info.tombstones == 1
    assert info.runs == await scanned(upgraded) and info.runs["suspended"] == 1
    await same_as_a_scan(upgraded)
    assert await upgraded.verify() == []


async def test_verify_puts_back_a_lost_status_entry_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    done = await created(store)
    await save(store, done, RunStatus.COMPLETED)
    [entry] = list((root / "by-status" / "completed").rglob("*+*"))
    entry.unlink()  # what a power cut before the directory reached the disk leaves
    assert await store.list_runs(statuses=[RunStatus.COMPLETED]) == []
    [problem] = await store.verify()
    assert "1 run(s) had no entry in by-status/ or by-workflow/" in problem
    assert [r.id for r in await store.list_runs(statuses=[RunStatus.COMPLETED])] == [done.id]
    assert await store.verify() == []


async def test_a_format_6_store_is_upgraded_with_the_tag_index(tmp_path: Path) -> None:
    """A store of format 6 has no ``by-tag/``: opening it builds the index from the records,
    so queue, group and deployment filters list every run from then on."""
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    runs = [await created(store, **mix(n)) for n in range(6)]
    await save(store, runs[1], RunStatus.COMPLETED)
    await store.close()
    shutil.rmtree(root / "by-tag")
    (root / "wf-store.json").write_bytes(b'{"format": 6}\n')
    upgraded = LocalStore(root)
    assert (await upgraded.store_info()).format == FORMAT
    assert (root / "by-tag" / "ready").exists()
    await same_as_a_scan(upgraded)
    assert await upgraded.verify() == []


async def test_verify_puts_back_a_lost_tag_entry_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    run = await created(store, queue="mail")
    [entry] = list((root / "by-tag").rglob("*+*"))
    entry.unlink()  # what a power cut before the directory reached the disk leaves
    assert await store.list_runs(queue="mail") == []
    [problem] = await store.verify()
    assert "1 run(s) had no entry in by-tag/" in problem
    assert [r.id for r in await store.list_runs(queue="mail")] == [run.id]
    assert await store.verify() == []


async def test_verify_leaves_alone_a_count_a_damaged_run_is_in(tmp_path: Path) -> None:
    """A run whose record cannot be read keeps its place in its status's count: verify
    ``repaired`` completed from 3 to 2 by leaving it out, and once the run was repaired (and
    read again) the count drifted the other way."""
    from tests.store.helpers import damage_local_run

    store = LocalStore(tmp_path / ".workflows")
    runs = [await created(store) for _ in range(3)]
    for run in runs:
        await save(store, run, RunStatus.COMPLETED)
    assert await store.verify() == []
    run_dir = Path(store.run_location(runs[1].id))
    whole = {path: path.read_bytes() for path in run_dir.iterdir() if path.is_file()}
    damage_local_run(store, runs[1].id)
    problems = await store.verify()
    counts = tmp_path / ".workflows" / "counts"
    said = "\n".join(problems)
    assert (
        f"{counts}: the count of completed is 3, a scan found 2 and 1 run(s) it cannot read" in said
    )
    assert not any(line.endswith(": repaired") for line in problems), problems
    assert (await store.store_info()).runs["completed"] == 3
    for path, data in whole.items():  # the run repaired (from a backup)
        path.write_bytes(data)
    assert (await store.get_run(runs[1].id)).status is RunStatus.COMPLETED
    assert (await store.store_info()).runs == await scanned(store)
    assert await store.verify() == []
