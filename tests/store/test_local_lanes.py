"""The local store's group lanes: a lane's heads read from the listing a process keeps."""

from __future__ import annotations

import itertools
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.store.helpers import created
from wf.store import RunRecord, RunStatus, lane_of
from wf.store.local import LocalStore, _fsops, _lanes, _layout, _queue
from wf.store.local._layout import NOW, entry_seq, entry_tags, lane_hash, queue_name, queue_tag


async def _lane(store: LocalStore, n: int) -> tuple[str, list[RunRecord]]:
    runs = [await created(store, group="g") for _ in range(n)]
    lane = lane_of(runs[0])
    assert lane is not None
    return lane, runs


def _count_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed: list[str] = []
    listdir = _fsops.listdir

    def counted(path: str, **how: Any) -> list[str]:
        listed.append(path)
        found: list[str] = listdir(path, **how)
        return found

    monkeypatch.setattr(_fsops, "listdir", counted)
    return listed


async def test_heads_that_end_here_are_followed_without_listing_the_lane_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path / ".workflows")
    try:
        lane, runs = await _lane(store, 4)
        lanes, key = store.lanes, lane_hash(lane)
        assert lanes.heads(key, 1, set()) == ({runs[0].id}, False)
        listed = _count_listings(monkeypatch)
        for ahead, head in itertools.pairwise(runs):
            lanes.leave(lane, ahead.id)  # its run ended here
            assert lanes.heads(key, 1, set()) == ({head.id}, False)
        assert listed == []
        lanes.leave(lane, runs[-1].id)
        assert lanes.heads(key, 1, set()) == (set(), True)  # ran out: listed again
        assert len(listed) == 1
    finally:
        await store.close()


async def test_a_grouped_runs_claim_and_end_hash_its_lane_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane's directory name is a hash of the group (``lane_hash``), asked by each grouped
    run's entries and by its end's removal from the lane: remembered, a drain of a few
    groups hashes each once, not twice a run."""
    hashed: list[str] = []
    digest = _layout.digest

    def counted(text: str, size: int = 64) -> str:
        hashed.append(text)
        return digest(text, size)

    monkeypatch.setattr(_layout, "digest", counted)
    store = LocalStore(tmp_path / ".workflows")
    try:
        group = f"g-{time.time_ns()}"  # a group no other test hashed
        runs = [await created(store, group=group) for _ in range(3)]
        lane = lane_of(runs[0])
        assert lane is not None
        for run in runs:
            leases = await store.claim(time.time() + 1, 10)
            assert [lease.run_id for lease in leases] == [run.id]
            done = run.copy()
            done.status = RunStatus.COMPLETED
            await leases[0].save(done)
            await leases[0].release()
        assert hashed.count(lane) == 1
    finally:
        await store.close()


async def test_a_run_retried_elsewhere_is_not_taken_from_a_kept_listing(tmp_path: Path) -> None:
    store, other = LocalStore(tmp_path / ".workflows"), LocalStore(tmp_path / ".workflows")
    try:
        lane, runs = await _lane(store, 3)
        key = lane_hash(lane)
        due = {run.id for run in runs}
        assert store.lanes.heads(key, 1, due) == ({runs[0].id}, False)
        # Another process retries the head: it goes to the back of the lane.
        other.lanes.join(lane, runs[0].id, other.sequence.take, attempt=2)
        assert store.lanes.heads(key, 1, due) == ({runs[1].id}, False)
    finally:
        await store.close()
        await other.close()


async def test_a_run_created_elsewhere_ahead_of_the_kept_listing_is_seen_once_it_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other = LocalStore(tmp_path / ".workflows"), LocalStore(tmp_path / ".workflows")
    try:
        lane, runs = await _lane(store, 2)
        key = lane_hash(lane)
        assert store.lanes.heads(key, 1, set()) == ({runs[0].id}, False)
        # Another process's creation, numbered before the listing but published after it.
        late = await created(other, group="g")
        entries = sorted((tmp_path / ".workflows" / "lanes" / key).iterdir())
        first = entries[0].name.partition("+")[0]
        entries[-1].rename(entries[-1].with_name(f"{int(first) - 1:020d}+{late.id}"))
        monkeypatch.setattr(_lanes, "RELIST", 0.0)
        assert store.lanes.heads(key, 1, set()) == ({late.id}, False)
    finally:
        await store.close()
        await other.close()


async def test_a_claim_reports_a_long_lanes_first_waiting_runs_and_leases_its_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of a lane's waiting runs, a claim that leases nothing reports the first
    ``WAITING_REPORTED`` in claim order (all a worker looks at), not the whole lane; one that
    leases the head, found through its own entries rather than a look at every entry of the
    lane, reports none (each claim of a drain would pay for the lane's length)."""
    monkeypatch.setattr(_queue, "WAITING_REPORTED", 3)
    store = LocalStore(tmp_path / ".workflows")
    try:
        _, runs = await _lane(store, 8)
        waiting: set[str] = set()
        leases = await store.claim(time.time(), 5, waiting=waiting)
        try:
            assert [lease.run_id for lease in leases] == [runs[0].id]
            assert waiting == set()
            again = await store.claim(time.time(), 5, exclude={runs[0].id}, waiting=waiting)
            assert again == []
            assert waiting == {run.id for run in runs[1:4]}
        finally:
            for lease in leases:
                await lease.release()
    finally:
        await store.close()


def test_a_lanes_due_runs_are_its_first_due_in_claim_order_whatever_its_entries() -> None:
    """What a claim reports of a full lane (``due_runs_of_lane``) against a reading of every
    entry: lanes of one priority or several, entries not due yet, runs with two entries."""
    rng = random.Random(7)
    for _ in range(500):
        view = _queue._View()
        priorities = [0] if rng.random() < 0.5 else [0, -1, -5]
        keys = [
            (rng.choice(priorities), rng.choice([0, 500, 1000, 2000]), seq, f"r{seq}", "due")
            for seq in range(rng.randint(0, 40))
            for _copy in range(1 if rng.random() < 0.9 else 2)
        ]
        keys.sort()
        if keys:
            view.lanes["lane"] = keys
        now, limit = rng.choice([0, 999, 1000, 5000]), rng.randint(0, 45)
        expected: set[str] = set()
        for key in keys:
            if len(expected) >= limit:
                break
            if key[1] <= now:
                expected.add(key[3])
        assert view.due_runs_of_lane("lane", now, limit) == expected


async def test_verify_names_a_file_where_a_lane_belongs_and_goes_on(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / ".workflows")
    try:
        await _lane(store, 2)
        stray = tmp_path / ".workflows" / "lanes" / "stray"
        stray.write_bytes(b"x")
        bad_entry = next(p for p in (tmp_path / ".workflows" / "lanes").iterdir() if p.is_dir())
        (bad_entry / "garbage+").touch()
        problems = await store.verify()
        assert f"{stray}: not a lane (a file where lanes are directories)" in problems
        assert f"{bad_entry / 'garbage+'}: not a lane entry" in problems  # the lanes after it too
    finally:
        await store.close()


@pytest.mark.parametrize(
    "tags",
    [
        queue_tag(0, None, seq=7),  # the common entry: its creation number alone
        queue_tag(0, None, seq=1_234_567_890_123),
        queue_tag(5, None, seq=7),
        queue_tag(0, "mail", seq=7),
        queue_tag(0, None, "bob", 2, 7),
        queue_tag(0, None, seq=7, deployment="v2"),
        "+s",
        "+s7x",
        "+s07",
        queue_tag(0, None, "bob", 1, 7),
        queue_tag(3, "mail", "bob", 2, 7, deployment="v2"),
        queue_tag(0, None, "bob") + "+s7+x1",
        queue_tag(0, None, "bob") + "+s",
    ],
)
def test_a_view_places_an_entry_by_what_its_tags_say(tags: str) -> None:
    """An entry that carries only its creation number is read without parsing its tags one by
    one (every worker reads every entry of a backlog when it first lists it): it is placed
    exactly as the tags' own readers (``entry_tags``, ``entry_seq``) place it, as is every
    other entry."""
    due = f"{1234:014d}" + tags
    priority, _queue_hash, lane = entry_tags(due)
    view = _queue._View()
    view.update([queue_name(due, "run_1")])
    entry = view.parsed[queue_name(due, "run_1")]
    assert entry == (
        due,
        "run_1",
        1234,
        (-priority, 1234, entry_seq(due), "run_1", due),
        lane,
        True,
    )
    assert view.tags(due) == entry_tags(due)[1:]


def test_a_lanes_entries_have_their_tags_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs of a lane carry the same tags but for their creation numbers: a view reads
    those tags once, not for each run's entry as it places it and again as a claim meets it."""
    read: list[str] = []

    def counted(due: str) -> tuple[int, str | None, tuple[str, int] | None]:
        read.append(due)
        return entry_tags(due)

    monkeypatch.setattr(_queue, "entry_tags", counted)
    view = _queue._View()
    names = [queue_name(NOW + queue_tag(0, None, "bob", seq=n), f"run_{n}") for n in (1, 2, 3)]
    view.update(names)
    for name in names:
        assert view.tags(view.parsed[name].due) == (None, (lane_hash("bob"), 1))
    assert [entry.key[2] for entry in map(view.parsed.__getitem__, names)] == [1, 2, 3]
    assert len(read) == 1


def test_a_listing_a_few_hundred_changes_from_a_long_view_places_them_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A view of 3,000 entries listed again with 300 names come and gone (the events still on
    their way when a busy store's view is listed every ``RELIST``) places those changes rather
    than sorting the whole view again, and ends as a view built from that listing would."""
    rng = random.Random(11)

    def entry(seq: int) -> str:
        run_id = f"run_{seq:08d}"
        kind = rng.random()
        if kind < 0.4:
            return queue_name(NOW, run_id)  # untagged
        lane = f"lane{rng.randint(0, 4)}" if kind < 0.7 else None
        due = f"{rng.choice([0, 1000, 2000]):014d}"
        return queue_name(due + queue_tag(rng.choice([0, 5]), None, lane, 2, seq), run_id)

    names = [entry(seq) for seq in range(3000)]
    view = _queue._View()
    view.update(names)
    rebuilt: list[int] = []
    real = _queue._View._rebuild
    monkeypatch.setattr(
        _queue._View, "_rebuild", lambda self, listed: (rebuilt.append(1), real(self, listed))
    )
    gone = set(rng.sample(names, 150))
    listing = [n for n in names if n not in gone] + [entry(seq) for seq in range(3000, 3150)]
    view.update(listing)
    assert rebuilt == []
    fresh = _queue._View()
    fresh.update(listing)
    assert rebuilt == [1]  # a first listing is sorted whole
    assert view.names == fresh.names
    assert (view.free, view.loose, view.lanes) == (fresh.free, fresh.loose, fresh.lanes)
    assert view.by_run == fresh.by_run
    assert view.lane_of == fresh.lane_of


def test_a_listing_thousands_of_changes_from_a_long_view_sorts_it_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Placing a change moves the tail of the view's sorted lists, a cost that grows with the
    view: thousands of changes, even fewer than half a long view, are not placed one by one
    (149,000 in a view of 300,000 took 57 s) but sorted with the rest (7 s)."""
    names = [queue_name(f"{seq % 977:014d}", f"run_{seq:08d}") for seq in range(10_000)]
    view = _queue._View()
    view.update(names)
    placed: list[str] = []
    real = _queue._View.add
    monkeypatch.setattr(
        _queue._View, "add", lambda self, name: (placed.append(name), real(self, name))[1]
    )
    more = [queue_name(f"{seq % 977:014d}", f"run_{seq:08d}") for seq in range(10_000, 13_000)]
    view.update(names[1000:] + more)  # 4,000 changes: fewer than half the view
    assert len(placed) <= _queue._View.PLACE_MAX
    fresh = _queue._View()
    fresh.update(names[1000:] + more)
    assert (view.names, view.loose) == (fresh.names, fresh.loose)


async def test_a_file_where_a_lanes_directory_belongs_holds_back_that_lane_alone(
    tmp_path: Path,
) -> None:
    """A stray file named like a lane (where its directory belongs) is that lane's damage: its
    runs wait, said once as a skipped lane; every other run is claimed (it stopped every
    claim, hence every worker, with a ``StoreError``)."""
    root = tmp_path / ".workflows"
    store = LocalStore(root)
    try:
        lane, _ = await _lane(store, 2)
        alone = await created(store)
        path = root / "lanes" / lane_hash(lane)
        for name in list(path.iterdir()):
            name.unlink()
        path.rmdir()
        path.touch()
        other = LocalStore(root)  # another worker: it lists the lane afresh
        try:
            leases = await other.claim(time.time() + 1, 10)
            assert [lease.run_id for lease in leases] == [alone.id]
            for lease in leases:
                await lease.release()
            assert other.faults.of_kind("lane") == {lane_hash(lane)}
        finally:
            await other.close()
    finally:
        await store.close()


async def test_a_directory_where_a_slots_place_belongs_is_skipped_not_a_stopped_worker(
    tmp_path: Path,
) -> None:
    """A stray directory named like a place of a cap (``slots/<hash>.<i>``) can hold no lock:
    that place is skipped and said, the next one taken, and counting the taken places reads
    past it (the first place is a worker's own: taking it raised, and stopped the worker)."""
    store = LocalStore(tmp_path / ".workflows")
    try:
        first = store.slots._paths("cap", 2)[0]
        os.makedirs(first)
        slot = await store.try_slot("cap", 2)
        assert slot is not None
        assert store.faults.of_kind("slot") == {os.path.basename(first)}
        assert await store.slots_taken("cap", 2) == 1
        await slot.release()
        assert await store.slots_taken("cap", 2) == 0
    finally:
        await store.close()
