"""The store conformance kit: the ``Store`` contract as tests every store must pass.

Subclass ``StoreConformance`` in a test module (its name must start with ``Test`` for pytest to
collect it) and implement ``make_store``::

    class TestMyStore(StoreConformance):
        async def make_store(self, tmp_path: Path) -> Store:
            return MyStore(tmp_path / "data")

        async def make_peer(self, store: Store, tmp_path: Path) -> Store:
            return MyStore(tmp_path / "data")  # a second handle on the same data

Every test goes through the public interface only. Tests are async (pytest-asyncio) and never
sleep for real beyond tiny timeouts of the ``wait_*`` methods. Due times may be rounded up to
the millisecond by a store, so the kit uses whole-millisecond times.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from wf._events import KINDS
from wf._exceptions import RunNotFound, StoreCorrupted
from wf.store._base import (
    HookRecord,
    RunRecord,
    RunStatus,
    Schedule,
    Store,
    WebhookDelivery,
    lane_key,
    lane_of,
)
from wf.store._faults import collect_faults
from wf.store._ids import new_run_id

LANE = lane_key("tests:flow", None, "lane")
"""The lane of the kit's runs in group ``lane`` (of workflow ``tests:flow``, in no named queue)."""

FAR = 4_000_000_000.0
"""A ``now`` after every wake time the kit uses (year 2096)."""


def record(**fields: Any) -> RunRecord:
    """A fresh pending record with a new id (override any field)."""
    fields.setdefault("id", new_run_id())
    fields.setdefault("workflow", "tests:flow")
    return RunRecord(**fields)


def lane_of_run(run: RunRecord) -> str:
    """The run's lane (the run is in a group)."""
    lane = lane_of(run)
    assert lane is not None
    return lane


def log_entry(text: str, **fields: Any) -> dict[str, Any]:
    """A step log entry."""
    return {
        "ts": 1.0,
        "op": 0,
        "step": "s",
        "attempt": 1,
        "stream": "stdout",
        "text": text,
        **fields,
    }


_PLACEHOLDERS: dict[str, Any] = {
    "op": 0,
    "name": "s",
    "workflow": "tests:flow",
    "attempt": 1,
    "max_attempts": 1,
    "resumes": 1,
    "index": 0,
    "hook": 0,
    "status": "completed",
    "at": "call",
    "step": 0,
    "stream": "default",
}
"""A value of each required field ``event`` fills in that a test does not care about (else
None)."""


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """A journal event of ``kind`` with ``fields``, and every other field its kind requires
    (``wf._events.KINDS``) set to a placeholder: a journal a store keeps is one replay and
    ``verify`` can read, as the engine's are."""
    declared = KINDS.get(kind)
    required = declared.fields if declared is not None else ()
    filled = {key: _PLACEHOLDERS.get(key) for key in required if key not in fields}
    return {"type": kind, "ts": 1.0, **filled, **fields}


class StoreConformance:
    """Behaviour tests of the whole ``Store`` contract; subclasses provide the store."""

    async def make_store(self, tmp_path: Path) -> Store:
        """A new, empty store (implement in the subclass)."""
        raise NotImplementedError

    async def make_peer(self, store: Store, tmp_path: Path) -> Store:
        """Another handle on the same data, as a second process would open it.

        The default returns ``store`` itself (for stores that live in one object).
        """
        return store

    async def damage_run(self, store: Store, run_id: str) -> None:
        """Make the run's stored record unreadable, as a bad disk or a stray edit would
        (implement in the subclass; by default the damage tests skip: a store that keeps its
        runs as objects in memory cannot be damaged from outside)."""
        pytest.skip("this store's runs cannot be damaged from outside")

    async def edit_record(self, store: Store, run_id: str, changes: dict[str, Any]) -> None:
        """Set fields of the run's stored record, as its JSON, to ``changes`` (a field of the
        wrong kind, as a stray edit or a buggy writer leaves it), from outside (implement in
        the subclass, as ``damage_run``; by default the tests skip)."""
        pytest.skip("this store's runs cannot be edited from outside")

    async def damage_schedule(self, store: Store, schedule_id: str) -> None:
        """Make the schedule's stored definition unreadable (implement in the subclass, as
        ``damage_run``; by default the test skips)."""
        pytest.skip("this store's schedules cannot be damaged from outside")

    @pytest_asyncio.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        """The store under test, closed afterwards."""
        made = await self.make_store(tmp_path)
        try:
            yield made
        finally:
            await made.close()

    @pytest_asyncio.fixture
    async def peer(self, store: Store, tmp_path: Path) -> AsyncIterator[Store]:
        """A second handle on the store's data."""
        made = await self.make_peer(store, tmp_path)
        try:
            yield made
        finally:
            if made is not store:
                await made.close()

    # -- runs ------------------------------------------------------------------------------

    async def test_create_then_get(self, store: Store) -> None:
        run = record(input={"n": [1, 2.5, "x", None, True]}, target="pkg.mod:flow")
        assert await store.create_run(run) is True
        got = await store.get_run(run.id)
        assert got == run

    async def test_create_is_idempotent_and_overwrites_nothing(self, store: Store) -> None:
        run = record(input=1)
        assert await store.create_run(run, [event("run_started")]) is True
        again = record(id=run.id, workflow="other:flow", input=2)
        assert await store.create_run(again, [event("other")]) is False
        assert await store.get_run(run.id) == run
        assert [e["type"] for e in await store.read_journal(run.id)] == ["run_started"]

    async def test_get_unknown_run_raises(self, store: Store) -> None:
        with pytest.raises(RunNotFound):
            await store.get_run(new_run_id())
        with pytest.raises(RunNotFound):
            await store.read_journal(new_run_id())
        with pytest.raises(RunNotFound):
            await store.try_acquire(new_run_id())

    async def test_create_records_first_events(self, store: Store) -> None:
        run = record()
        await store.create_run(run, [event("run_started", n=1), event("note", n=2)])
        assert [e["n"] for e in await store.read_journal(run.id)] == [1, 2]

    async def test_concurrent_creates(self, store: Store) -> None:
        runs = [record() for _ in range(20)]
        results = await asyncio.gather(*(store.create_run(r) for r in runs))
        assert all(results)
        listed = await store.list_runs(limit=100)
        assert {r.id for r in listed} == {r.id for r in runs}
        numbers = [r.seq for r in listed]  # newest created first, each its own number
        assert numbers == sorted(set(numbers), reverse=True) and len(numbers) == 20

    async def test_large_values_round_trip_exactly(self, store: Store) -> None:
        big = {"blob": "x" * 200_000, "list": list(range(5000))}
        run = record(input=big)
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        run.status, run.output = RunStatus.COMPLETED, {"out": "y" * 100_000}
        await lease.save(run)
        await lease.release()
        assert await store.get_run(run.id) == run
        assert [r.id for r in await store.list_runs()] == [run.id]

    # -- listing ---------------------------------------------------------------------------

    async def test_list_newest_created_first_whatever_the_ids(self, store: Store) -> None:
        ids = [new_run_id() for _ in range(5)]
        created = [*reversed(ids), "zz-order-1", "a", "order-10", "order-9"]
        for run_id in created:  # ids against their sort order: creation order decides
            await store.create_run(record(id=run_id))
        assert [r.id for r in await store.list_runs()] == created[::-1]
        assert [r.id for r in await store.list_runs(limit=1)] == ["order-9"]

    async def test_create_gives_the_next_creation_number(self, store: Store) -> None:
        first, second = record(id="b-second-by-id"), record(id="a-first-by-id")
        await store.create_run(first)
        await store.create_run(second)
        assert 0 < first.seq < second.seq  # set on the caller's records too
        assert (await store.get_run(second.id)).seq == second.seq
        lease = await self._acquire(store, second.id)
        saved = dataclasses.replace(second, status=RunStatus.RUNNING, seq=0)
        await lease.save(saved)  # a save never moves a run in the sequence
        await lease.release()
        assert (await store.get_run(second.id)).seq == second.seq

    async def test_list_before_a_deleted_or_unknown_run(self, store: Store) -> None:
        runs = [record(id=f"r{n}") for n in (3, 1, 4, 2)]
        for run in runs:
            await store.create_run(run)
        await self._save(store, runs[2], status=RunStatus.COMPLETED)
        deleted = await store.delete_runs([runs[2].id], now=FAR, reason="gc")
        assert deleted.ids == [runs[2].id]
        # Paging past a run deleted since (a sweep deletes what it pages through).
        assert [r.id for r in await store.list_runs(before=runs[2].id)] == ["r1", "r3"]
        assert await store.list_runs(before="never-created") == []

    async def test_list_filters_by_status(self, store: Store) -> None:
        done, waiting, fresh = record(), record(), record()
        for run in (done, waiting, fresh):
            await store.create_run(run)
        await self._save(store, done, status=RunStatus.COMPLETED)
        await self._save(store, waiting, status=RunStatus.SUSPENDED)
        completed = await store.list_runs(statuses=[RunStatus.COMPLETED])
        assert [r.id for r in completed] == [done.id]
        assert completed[0].status is RunStatus.COMPLETED
        both = await store.list_runs(statuses=[RunStatus.PENDING, RunStatus.SUSPENDED])
        assert [r.id for r in both] == [fresh.id, waiting.id]

    async def test_list_filters_by_workflow(self, store: Store) -> None:
        a1, b1, a2 = record(workflow="a:flow"), record(workflow="b:flow"), record(workflow="a:flow")
        for run in (a1, b1, a2):
            await store.create_run(run)
        assert [r.id for r in await store.list_runs(workflow="a:flow")] == [a2.id, a1.id]
        assert await store.list_runs(workflow="nope:flow") == []

    async def test_list_filters_by_parent(self, store: Store) -> None:
        parent = record()
        await store.create_run(parent)
        kids = [record(parent_id=parent.id, root_id=parent.id) for _ in range(3)]
        other = record()
        for run in (*kids, other):
            await store.create_run(run)
        listed = await store.list_runs(parent_id=parent.id)
        assert [r.id for r in listed] == [k.id for k in reversed(kids)]
        assert await store.list_runs(parent_id=other.id) == []

    async def test_list_filters_by_queue_of_any_status(self, store: Store) -> None:
        mail1, plain, mail2 = record(queue="mail"), record(), record(queue="mail")
        other = record(queue="reports")
        for run in (mail1, plain, mail2, other):
            await store.create_run(run)
        await self._save(store, mail1, status=RunStatus.COMPLETED)  # finished: still listed
        assert [r.id for r in await store.list_runs(queue="mail")] == [mail2.id, mail1.id]
        assert [r.id for r in await store.list_runs(queue="reports")] == [other.id]
        assert await store.list_runs(queue="nope") == []
        done = await store.list_runs(queue="mail", statuses=[RunStatus.COMPLETED])
        assert [r.id for r in done] == [mail1.id]
        pending = await store.list_runs(queue="mail", statuses=[RunStatus.PENDING])
        assert [r.id for r in pending] == [mail2.id]

    async def test_list_filters_by_group_in_any_queue(self, store: Store) -> None:
        a1 = record(group="cust-1")
        b = record(group="cust-2")
        a2 = record(group="cust-1", queue="mail", workflow="other:flow")
        for run in (a1, b, a2):
            await store.create_run(run)
        await self._save(store, a1, status=RunStatus.FAILED)
        assert [r.id for r in await store.list_runs(group="cust-1")] == [a2.id, a1.id]
        assert [r.id for r in await store.list_runs(group="cust-1", queue="mail")] == [a2.id]
        assert [r.id for r in await store.list_runs(group="cust-1", workflow=a1.workflow)] == [
            a1.id
        ]
        failed = await store.list_runs(group="cust-1", statuses=[RunStatus.FAILED])
        assert [r.id for r in failed] == [a1.id]
        assert await store.list_runs(group="cust-2", queue="mail") == []

    async def test_list_filters_by_deployment_follows_a_repin(self, store: Store) -> None:
        v1, free, v2 = record(deployment="v1"), record(), record(deployment="v2")
        for run in (v1, free, v2):
            await store.create_run(run)
        assert [r.id for r in await store.list_runs(deployment="v1")] == [v1.id]
        await self._save(store, v1, deployment="v2")  # ``wf deployments upgrade``
        assert await store.list_runs(deployment="v1") == []
        assert [r.id for r in await store.list_runs(deployment="v2")] == [v2.id, v1.id]

    async def test_list_filters_page_through(self, store: Store) -> None:
        runs = [record(queue="mail" if n % 2 else None, group="g") for n in range(9)]
        for run in runs:
            await store.create_run(run)
        wanted = [r.id for r in reversed(runs) if r.queue == "mail"]
        pages: list[str] = []
        before = None
        while page := await store.list_runs(queue="mail", group="g", limit=2, before=before):
            pages += [r.id for r in page]
            before = page[-1].id
        assert pages == wanted

    async def test_search_looks_at_a_bounded_number_of_runs(self, store: Store) -> None:
        ids = ["Ab-1", "zz-2", "ab-3", "zz-4", "x-5"]
        for run_id in ids:
            # Finished: a store that compacts finished runs must search them too.
            done = record(id=run_id, workflow="pkg:Flow", status=RunStatus.COMPLETED)
            await store.create_run(done)
        found, cursor, looked = await store.search_runs("ab", limit=5, budget=2)
        assert (found, cursor, looked) == ([], "zz-4", 2)  # newest first, bounded
        found, cursor, looked = await store.search_runs("ab", limit=5, budget=2, before=cursor)
        assert ([r.id for r in found], cursor, looked) == (["ab-3"], "zz-2", 2)
        found, cursor, looked = await store.search_runs("ab", limit=5, budget=9, before=cursor)
        assert ([r.id for r in found], cursor, looked) == (["Ab-1"], None, 1)  # the end
        found, cursor, _ = await store.search_runs("ab", limit=1, budget=9)
        assert ([r.id for r in found], cursor) == (["ab-3"], "ab-3")  # page full: go on there
        found, _, looked = await store.search_runs("flow", limit=9, budget=9)
        assert len(found) == 5 and looked == 5  # workflow names match too (lower case)
        failed = await store.search_runs("ab", limit=9, budget=9, statuses=[RunStatus.FAILED])
        assert failed == ([], None, 0)

    async def test_a_listing_leaves_out_a_damaged_run_and_says_which(self, store: Store) -> None:
        runs = [record(workflow="pkg:Flow", queue="mail") for _ in range(5)]
        for run in runs:
            await store.create_run(run, [event("run_started")])
        victim = runs[2]
        await self.damage_run(store, victim.id)
        healthy = [r.id for r in reversed(runs) if r is not victim]
        with collect_faults() as met:
            assert [r.id for r in await store.list_runs()] == healthy
        # The caller that collects is told, and says it; the store keeps no note of its own.
        assert [(f.kind, f.item) for f in met] == [("run", victim.id)]
        assert victim.id in met[0].where and met[0].reason
        assert victim.id not in store.faults.of_kind("run")
        # Pages go on past it: none stops short of the runs created before it.
        pages: list[str] = []
        before = None
        while page := await store.list_runs(limit=2, before=before):
            pages += [r.id for r in page]
            before = page[-1].id
        assert pages == healthy
        for filters in (
            {"statuses": [RunStatus.PENDING]},
            {"workflow": "pkg:Flow"},
            {"queue": "mail"},
        ):
            assert [r.id for r in await store.list_runs(**filters)] == healthy, filters
        found, _, _ = await store.search_runs("", limit=9, budget=9)
        assert [r.id for r in found] == healthy
        found, _, _ = await store.search_runs(victim.id.lower(), limit=9, budget=9)
        assert found == []
        # Without a collecting caller (a worker's own reads), the store's faults note it.
        assert victim.id in store.faults.of_kind("run")
        with pytest.raises(StoreCorrupted):
            await store.get_run(victim.id)

    @pytest.mark.parametrize(
        ("field", "value", "said"),
        [
            ("retention", "1s", "retention is not a number ('1s')"),
            ("workflow", None, "the record has no 'workflow'"),
            ("workflow", 5, "workflow is not a string (5)"),
            ("id", None, "the record has no 'id'"),
            ("id", "wrun_other", "the record names another id 'wrun_other'"),
            ("max_recoveries", -1, "max_recoveries is not a number from 0 (-1)"),
        ],
    )
    async def test_a_record_field_of_the_wrong_kind_is_its_runs_damage_alone(
        self, store: Store, field: str, value: Any, said: str
    ) -> None:
        """One field a reader relies on, of the wrong kind or value, makes its run damaged:
        left out of listings and named (the field said), refused by ``get_run``, named by
        ``verify``; every other run is read as before."""
        runs = [record(workflow="pkg:Flow", status=RunStatus.COMPLETED) for _ in range(3)]
        for run in runs:
            await store.create_run(run, [event("run_started")])
        victim = runs[1]
        await self.edit_record(store, victim.id, {field: value})
        healthy = [r.id for r in reversed(runs) if r is not victim]
        with collect_faults() as met:
            assert [r.id for r in await store.list_runs()] == healthy
        assert [(f.kind, f.item) for f in met] == [("run", victim.id)], met
        assert said in met[0].reason, met[0].reason
        with collect_faults() as met:
            listed = await store.list_runs(statuses=[RunStatus.COMPLETED], workflow="pkg:Flow")
            assert [r.id for r in listed] == healthy
        with pytest.raises(StoreCorrupted, match=re.escape(said)):
            await store.get_run(victim.id)
        for run_id in healthy:
            assert (await store.get_run(run_id)).id == run_id
        problems = await store.verify()
        assert any(victim.id in line and said in line for line in problems), problems

    async def test_queue_stats_leave_out_a_run_whose_workflow_is_null(self, store: Store) -> None:
        """A due run whose record has ``"workflow": null`` (and one whose ``created_at`` is no
        time, which makes a store that counts in one query read each due run instead) is left
        out of the queue's depth and noted; the others are counted (it used to fail the whole
        count with a TypeError, and the web UI's queues page with it)."""
        runs = [record(workflow="pkg:Flow", created_at=1.0) for _ in range(4)]
        for run in runs:
            await store.create_run(run, [event("run_started")])
        await self.edit_record(store, runs[1].id, {"workflow": None})
        await self.edit_record(store, runs[2].id, {"created_at": "x"})
        with collect_faults() as met:
            stats = await store.queue_stats(FAR)
        assert [(s.workflow, s.depth) for s in stats] == [("pkg:Flow", 2)], stats
        named = {f.item for f in met} | set(store.faults.of_kind("run"))
        assert {runs[1].id, runs[2].id} <= named, (met, list(store.faults))

    async def test_list_limit_and_before_page_through(self, store: Store) -> None:
        ids = [f"page-{n}" for n in (5, 12, 1, 30, 2, 7, 4)]  # not in their sort order
        for run_id in ids:
            await store.create_run(record(id=run_id))
        pages: list[list[str]] = []
        before = None
        while True:
            page = await store.list_runs(limit=3, before=before)
            if not page:
                break
            pages.append([r.id for r in page])
            before = page[-1].id
        assert [len(p) for p in pages] == [3, 3, 1]
        assert [i for p in pages for i in p] == ids[::-1]

    async def test_list_empty_store(self, store: Store) -> None:
        assert await store.list_runs() == []
        assert await store.due_runs(FAR) == []
        assert await store.next_due_at() is None

    # -- journal and leases ----------------------------------------------------------------

    async def test_append_keeps_order(self, store: Store) -> None:
        run = record()
        await store.create_run(run, [event("run_started", n=0)])
        lease = await self._acquire(store, run.id)
        await lease.append([event("e", n=1), event("e", n=2)])
        lease.append_soon([event("e", n=3)])
        await lease.append([event("e", n=4)])
        await lease.release()
        assert [e["n"] for e in await store.read_journal(run.id)] == [0, 1, 2, 3, 4]

    async def test_a_follower_reads_from_where_it_left_off(self, store: Store, peer: Store) -> None:
        """``read_journal(run_id, start)`` is the journal from event ``start`` on, as a
        follower in another instance sees it grow (what ``wf run``'s live view reads)."""
        run = record()
        await store.create_run(run, [event("run_started", n=0)])
        lease = await self._acquire(store, run.id)
        seen = await peer.read_journal(run.id, 0)
        # Batches of every size, past a local journal's slack block (4 KiB) more than once.
        for size in (1, 2, 5, 40, 1, 100):
            first = len(seen)
            await lease.append([event("e", n=first + i, pad="x" * 60) for i in range(size)])
            new = await peer.read_journal(run.id, len(seen))
            assert [e["n"] for e in new] == list(range(first, first + size))
            seen += new
        assert await peer.read_journal(run.id, len(seen)) == []  # nothing new: nothing read
        await lease.release()
        whole = await peer.read_journal(run.id)
        assert seen == whole and len(whole) == 150
        for start in (0, 1, 77, 149, 150, 151, 10_000):
            assert await store.read_journal(run.id, start) == whole[start:]
        with pytest.raises(RunNotFound):
            await store.read_journal(new_run_id(), 3)

    async def test_concurrent_appends_keep_each_batch_whole(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await asyncio.gather(
            *(lease.append([event("e", n=i, part=0), event("e", n=i, part=1)]) for i in range(10))
        )
        await lease.release()
        journal = await store.read_journal(run.id)
        assert len(journal) == 20
        for first, second in zip(journal[::2], journal[1::2], strict=True):
            assert (first["n"], first["part"], second["n"], second["part"]) == (
                first["n"], 0, first["n"], 1
            )  # fmt: skip

    async def test_appends_of_many_runs_at_once(self, store: Store) -> None:
        runs = [record() for _ in range(10)]
        for run in runs:
            await store.create_run(run)
        leases = [await self._acquire(store, r.id) for r in runs]

        async def drive(lease: Any, index: int) -> None:
            for n in range(5):
                await lease.append([event("e", run=index, n=n)])

        await asyncio.gather(*(drive(lease, i) for i, lease in enumerate(leases)))
        for lease in leases:
            await lease.release()
        for index, run in enumerate(runs):
            journal = await store.read_journal(run.id)
            assert [(e["run"], e["n"]) for e in journal] == [(index, n) for n in range(5)]

    async def test_appended_events_are_visible_to_other_readers(
        self, store: Store, peer: Store
    ) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await lease.append([event("step_completed", op=1)])
        assert [e["type"] for e in await peer.read_journal(run.id)] == ["step_completed"]
        await lease.release()

    async def test_append_soon_is_kept_by_release(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        lease.append_soon([event("step_started", op=1)])
        await lease.release()
        assert [e["type"] for e in await peer.read_journal(run.id)] == ["step_started"]

    async def test_pending_events_keep_their_place_and_are_never_dropped(
        self, store: Store, peer: Store
    ) -> None:
        """A store that takes ``append_pending`` events writes them, in order with the lease's
        other appends, at once or by a write of their own soon after (no ``settle`` needed),
        and keeps them through ``settle``, ``append`` and ``release``; one that does not take
        them writes nothing (the engine then appends them)."""
        run = record()
        await store.create_run(run, [event("run_started", n=0)])
        lease = await self._acquire(store, run.id)
        taken = lease.append_pending([event("step_completed", n=1)])
        expected = [0, 1] if taken else [0]
        for _ in range(200):  # at most 2 s: a store may hold them a moment for a write to come
            seen = [e["n"] for e in await peer.read_journal(run.id)]
            if seen == expected:
                break
            await asyncio.sleep(0.01)
        assert seen == expected
        await lease.settle()
        if taken:
            assert lease.append_pending([event("step_completed", n=2)])
        await lease.append([event("e", n=3)])
        if taken:
            lease.append_pending([event("step_completed", n=4)])
        await lease.release()
        journal = [e["n"] for e in await peer.read_journal(run.id)]
        assert journal == ([0, 1, 2, 3, 4] if taken else [0, 3])

    async def test_lease_is_exclusive_until_released(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        assert await store.try_acquire(run.id) is None
        await lease.release()
        await lease.release()  # idempotent
        again = await self._acquire(store, run.id)
        await again.release()

    async def test_lease_excludes_other_store_instances(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        assert await peer.try_acquire(run.id) is None
        await lease.release()
        theirs = await peer.try_acquire(run.id)
        assert theirs is not None
        assert await store.try_acquire(run.id) is None
        await theirs.release()

    async def test_leases_of_different_runs_are_independent(self, store: Store) -> None:
        a, b = record(), record()
        await store.create_run(a)
        await store.create_run(b)
        first = await self._acquire(store, a.id)
        second = await self._acquire(store, b.id)
        await first.release()
        await second.release()

    async def test_save_replaces_the_record(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        run.status, run.resumes, run.waiting_for = RunStatus.RUNNING, 2, None
        run.error = {"type": "ValueError", "message": "boom"}
        await lease.save(run)
        assert await peer.get_run(run.id) == run
        await lease.release()
        assert await store.get_run(run.id) == run

    async def test_a_record_saved_soon_during_a_write_goes_with_the_next(
        self, store: Store, peer: Store
    ) -> None:
        """A ``save_soon`` made while a journal write is under way (a cancel taken in while a
        step's completion is being written) is not dropped when that write ends: the next
        write carries it."""
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        run.status = RunStatus.RUNNING
        await lease.save(run)
        writing = asyncio.ensure_future(lease.append([event("step_completed", op=0)]))
        for _ in range(20):
            await asyncio.sleep(0)  # the write goes out and awaits its answer
        marked = run.copy()
        marked.cancel_requested = True
        if not lease.save_soon(marked.copy()):
            await writing
            await lease.release()
            pytest.skip("this store saves no record with a journal write")
        await lease.append([event("cancel_requested", message="m")])
        await writing
        assert (await peer.get_run(run.id)).cancel_requested
        await lease.release()

    async def test_the_holder_reads_the_run_as_it_left_it(self, store: Store) -> None:
        big = {"blob": "x" * 100_000}  # a large value: stores may keep it out of the record
        run = record(input=big)
        await store.create_run(run, [event("run_started")])
        lease = await self._acquire(store, run.id)
        got, journal = await lease.read_run(store)
        assert got == await store.get_run(run.id) == run
        assert journal == await store.read_journal(run.id) == [event("run_started")]
        got.status = RunStatus.SUSPENDED  # a copy: changing it changes nothing stored
        assert (await lease.read_run(store))[0] == run
        await lease.append([event("step_completed", op=0)])
        run.status, run.output = RunStatus.COMPLETED, big
        await lease.save(run)
        got, journal = await lease.read_run(store)
        assert got == run and [e["type"] for e in journal] == ["run_started", "step_completed"]
        await lease.release()

    # -- queue -----------------------------------------------------------------------------

    async def test_new_and_running_runs_are_due_now(self, store: Store) -> None:
        pending, running = record(), record()
        await store.create_run(pending)
        await store.create_run(running)
        await self._save(store, running, status=RunStatus.RUNNING)
        assert set(await store.due_runs(0.0)) == {pending.id, running.id}
        assert await store.next_due_at() == 0.0

    async def test_suspended_run_is_due_at_its_wake_time(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        await self._save(store, run, status=RunStatus.SUSPENDED, wake_at=1_000.25)
        assert await store.due_runs(1_000.0) == []
        assert await store.due_runs(1_000.25) == [run.id]
        assert await store.next_due_at() == pytest.approx(1_000.25, abs=1e-3)

    async def test_suspended_run_without_wake_time_waits_for_a_post(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        run.status = RunStatus.SUSPENDED
        await lease.save(run)
        assert await store.due_runs(FAR) == []
        assert await store.next_due_at() is None
        message_id = await store.post(run.id, "hook", {"token": "t", "payload": 1})
        assert await store.due_runs(0.0) == [run.id]
        await lease.ack_inbox([message_id])
        await lease.save(run)  # handled: suspended again
        await lease.release()
        assert await store.due_runs(FAR) == []

    async def test_terminal_runs_leave_the_queue(self, store: Store) -> None:
        runs = [record() for _ in range(3)]
        for run, status in zip(
            runs, (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED), strict=True
        ):
            await store.create_run(run)
            await self._save(store, run, status=status)
        assert await store.due_runs(FAR) == []
        assert await store.next_due_at() is None

    async def test_due_runs_earliest_first_with_limit(self, store: Store) -> None:
        late, early, fresh = record(), record(), record()
        for run in (late, early, fresh):
            await store.create_run(run)
        await self._save(store, late, status=RunStatus.SUSPENDED, wake_at=2_000.0)
        await self._save(store, early, status=RunStatus.SUSPENDED, wake_at=1_500.0)
        assert await store.due_runs(FAR) == [fresh.id, early.id, late.id]
        assert await store.due_runs(FAR, limit=2) == [fresh.id, early.id]
        assert await store.due_runs(1_600.0) == [fresh.id, early.id]

    async def test_queue_stats_count_waiting_runs_per_workflow(self, store: Store) -> None:
        a1 = record(workflow="a", created_at=100.0, updated_at=100.0)
        a2 = record(workflow="a", created_at=50.0, updated_at=50.0)
        grouped = record(workflow="a", group="g", created_at=70.0, updated_at=70.0)
        b = record(workflow="b", created_at=10.0, updated_at=10.0)
        running = record(workflow="a", created_at=1.0, updated_at=1.0)
        later = record(workflow="b", created_at=1.0, updated_at=1.0)
        for run in (a1, a2, grouped, b, running, later):
            await store.create_run(run)
        await self._save(store, b, status=RunStatus.SUSPENDED, wake_at=1_000.0)
        await self._save(store, running, status=RunStatus.RUNNING)
        await self._save(store, later, status=RunStatus.SUSPENDED, wake_at=3_000.0)
        stats = await store.queue_stats(2_000.0)
        assert [(s.workflow, s.group, s.depth) for s in stats] == [
            ("a", None, 2),
            ("a", "g", 1),
            ("b", None, 1),
        ]
        # Due since: a pending run since its creation, a woken one since its wake time.
        assert [s.oldest_due_at for s in stats] == [50.0, 70.0, 1_000.0]
        # Before b's wake time only the pending runs wait.
        assert [(s.workflow, s.depth) for s in await store.queue_stats(500.0)] == [
            ("a", 2),
            ("a", 1),
        ]

    async def test_timer_moved_later_and_earlier(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        run.status, run.wake_at = RunStatus.SUSPENDED, 1_000.0
        await lease.save(run)
        run.wake_at = 3_000.0
        await lease.save(run)
        assert await store.due_runs(2_000.0) == []
        run.wake_at = 500.0
        await lease.save(run)
        assert await store.due_runs(600.0) == [run.id]
        assert await store.next_due_at() == pytest.approx(500.0, abs=1e-3)
        await lease.release()

    # -- queue semantics: priorities, delays, named queues, lanes, slots, rates ------------

    async def test_due_runs_order_by_priority_then_due_then_creation(self, store: Store) -> None:
        low, high, mid, high2 = (record(priority=p) for p in (0, 9, 4, 9))
        for run in (low, high, mid, high2):
            await store.create_run(run)
        assert await store.due_runs(FAR) == [high.id, high2.id, mid.id, low.id]
        assert await store.due_runs(FAR, limit=2) == [high.id, high2.id]

    async def test_equal_runs_leave_the_queue_in_creation_order_not_id_order(
        self, store: Store
    ) -> None:
        # Caller-chosen ids, created against their sort order: p3, p2, p1, p0.
        plain = [record(id=f"p{n}") for n in (3, 2, 1, 0)]
        ranked = [record(id=f"q{n}", priority=5) for n in (9, 1)]
        timed = [record(id=f"t{n}", wake_at=1_000.0) for n in (2, 1)]
        for run in (*plain, *ranked, *timed):
            await store.create_run(run)
        order = ["q9", "q1", "p3", "p2", "p1", "p0"]
        assert await store.due_runs(999.0) == order
        assert await store.due_runs(FAR) == [*order, "t2", "t1"]
        # A save keeps a run's place (a pending run saved running, then pending again).
        await self._save(store, plain[0], status=RunStatus.RUNNING)
        assert await store.due_runs(999.0) == order

    async def test_a_delayed_pending_run_is_due_at_its_time(self, store: Store) -> None:
        delayed = record(wake_at=1_000.0)
        await store.create_run(delayed)
        assert await store.due_runs(999.0) == []
        assert await store.due_runs(1_000.0) == [delayed.id]
        assert await store.next_due_at() == pytest.approx(1_000.0, abs=1e-3)
        # A retry's backoff: a saved pending record with a wake time.
        await self._save(store, delayed, status=RunStatus.PENDING, wake_at=2_000.0, attempt=2)
        assert await store.due_runs(1_500.0) == []
        assert await store.due_runs(2_000.0) == [delayed.id]
        assert (await store.get_run(delayed.id)).attempt == 2

    async def test_next_due_after_skips_what_is_due_now(self, store: Store) -> None:
        # A worker whose due runs are all held back still needs the next timer.
        now_due, later, latest = record(), record(wake_at=1_000.0), record(wake_at=2_000.0)
        for run in (now_due, later, latest):
            await store.create_run(run)
        assert await store.next_due_at() == 0.0
        assert await store.next_due_at(after=0.0) == pytest.approx(1_000.0, abs=1e-3)
        assert await store.next_due_at(after=500.0) == pytest.approx(1_000.0, abs=1e-3)
        assert await store.next_due_at(after=1_000.0) == pytest.approx(2_000.0, abs=1e-3)
        assert await store.next_due_at(after=2_000.0) is None

    async def test_next_due_of_named_queues(self, store: Store) -> None:
        # ``wf worker --queue a --until-idle`` waits only for its own queues' timers.
        mail, other, plain = (
            record(queue="mail", wake_at=3_000.0),
            record(queue="other", wake_at=1_000.0),
            record(wake_at=2_000.0),
        )
        for run in (mail, other, plain):
            await store.create_run(run)
        assert await store.next_due_at() == pytest.approx(1_000.0, abs=1e-3)
        assert await store.next_due_at(queues=["mail"]) == pytest.approx(3_000.0, abs=1e-3)
        assert await store.next_due_at(after=500.0, queues=["mail", "other"]) == pytest.approx(
            1_000.0, abs=1e-3
        )
        assert await store.next_due_at(queues=["nobody"]) is None

    async def test_due_runs_of_named_queues(self, store: Store) -> None:
        mail, other, plain = record(queue="mail"), record(queue="other"), record()
        for run in (mail, other, plain):
            await store.create_run(run)
        assert await store.due_runs(FAR, queues=["mail"]) == [mail.id]
        assert set(await store.due_runs(FAR, queues=["mail", "other"])) == {mail.id, other.id}
        assert len(await store.due_runs(FAR)) == 3
        # A post to a suspended run of a named queue keeps it in that queue.
        await self._save(store, mail, status=RunStatus.SUSPENDED, wake_at=None)
        await store.post(mail.id, "wake", {})
        assert await store.due_runs(FAR, queues=["mail"]) == [mail.id]
        assert mail.id not in await store.due_runs(FAR, queues=["other"])

    async def test_claim_leases_due_runs_in_queue_order(self, store: Store, peer: Store) -> None:
        low, high, later, held, mine = (record(priority=p) for p in (0, 9, 0, 5, 5))
        later.wake_at = 2_000.0
        for run in (low, high, later, held, mine):
            await store.create_run(run, [event("run_started")])
        await store.post(low.id, "wake", {})
        theirs = await self._acquire(peer, held.id)  # another driver has it: skipped
        leases = await store.claim(1_000.0, 10, exclude={mine.id})
        try:
            assert [lease.run_id for lease in leases] == [high.id, low.id]
            assert await store.try_acquire(high.id) is None  # each one is a real lease
            by_id = {lease.run_id: lease for lease in leases}
            got, journal = await by_id[low.id].read_run(store)
            assert got == await store.get_run(low.id)
            assert journal == [event("run_started")]
            inbox = await by_id[low.id].read_inbox(store)
            assert [m.kind for m in inbox] == ["wake"]
            assert await store.claim(1_000.0, 10, exclude={mine.id}) == []
        finally:
            for lease in [*leases, theirs]:
                await lease.release()
        again = await store.claim(FAR, 1)
        assert [lease.run_id for lease in again] == [high.id]
        await again[0].release()
        assert await store.claim(FAR, 0) == []

    async def test_an_orphan_keeps_its_place_in_claim_order(
        self, store: Store, peer: Store
    ) -> None:
        """A run whose driver died (status running, its lease gone) is taken in its place in
        the queue, priority first, then creation: not after every run created after it."""
        orphan = record()
        await store.create_run(orphan, [event("run_started")])
        driver = await self._acquire(peer, orphan.id)
        await driver.save(dataclasses.replace(orphan, status=RunStatus.RUNNING))
        await driver.release()  # the driver dies mid-run: its lease goes, its status stays
        later = [record() for _ in range(3)]
        urgent = record(priority=5)  # created last, but ahead of every other by its priority
        for run in (*later, urgent):
            await store.create_run(run, [event("run_started")])
        leases = await store.claim(FAR, 2)
        try:
            assert [lease.run_id for lease in leases] == [urgent.id, orphan.id]
        finally:
            for lease in leases:
                await lease.release()

    async def test_claim_of_named_queues(self, store: Store) -> None:
        mail, plain = record(queue="mail"), record()
        for run in (mail, plain):
            await store.create_run(run)
        leases = await store.claim(FAR, 10, queues=["mail"])
        assert [lease.run_id for lease in leases] == [mail.id]
        await leases[0].release()

    async def test_due_runs_and_claims_by_deployment(self, store: Store) -> None:
        if not store.filters_deployments:
            pytest.skip("this store serves only workers of every deployment")
        v1, v2, plain = record(deployment="v1"), record(deployment="v2"), record()
        grouped = record(deployment="v1", group="g", priority=3)
        for run in (v1, v2, plain, grouped):
            await store.create_run(run)
        assert set(await store.due_runs(FAR, deployments={"v1", None})) == {
            v1.id,
            plain.id,
            grouped.id,
        }
        assert await store.due_runs(FAR, deployments={"v2"}) == [v2.id]
        assert len(await store.due_runs(FAR)) == 4
        leases = await store.claim(FAR, 10, deployments={"v2", None})
        assert {lease.run_id for lease in leases} == {v2.id, plain.id}
        for lease in leases:
            await lease.release()
        # Re-pinned (an upgrade saves the record): the claims follow the new pin at once.
        await self._save(store, v1, deployment="v2")
        assert v1.id in await store.due_runs(FAR, deployments={"v2"})
        assert v1.id not in await store.due_runs(FAR, deployments={"v1"})
        # A post to a suspended pinned run keeps it pinned.
        await self._save(store, v2, status=RunStatus.SUSPENDED, wake_at=None)
        await store.post(v2.id, "wake", {})
        assert v2.id not in await store.due_runs(FAR, deployments={None})
        leases = await store.claim(FAR, 10, deployments={None})
        assert {lease.run_id for lease in leases} == {plain.id}
        for lease in leases:
            await lease.release()

    async def test_claim_leaves_runs_waiting_in_their_lane(self, store: Store) -> None:
        if not store.claims_lane_heads:
            pytest.skip("this store's claim leases lane runs for their admission to hold")
        a, b, c = (record(group="one") for _ in range(3))
        d, e, f = (record(group="two", limits={"group_concurrency": 2}) for _ in range(3))
        sleeper, behind = record(group="three"), record(group="three")
        plain = record()
        for run in (a, b, c, d, e, f, sleeper, behind, plain):
            await store.create_run(run, [event("run_started")])
        # The head of lane "three" sleeps: unfinished and not due, it holds its lane.
        await self._save(store, sleeper, status=RunStatus.SUSPENDED, wake_at=5_000.0)
        waiting: set[str] = set()
        leases = await store.claim(1_000.0, 20, waiting=waiting)
        try:
            assert {lease.run_id for lease in leases} == {a.id, d.id, e.id, plain.id}
            # A claim that leases runs may leave ``waiting`` short; one that leases none
            # may not (a worker that drives nothing asks whether anything is startable).
            assert waiting <= {b.id, c.id, f.id, behind.id}
        finally:
            for lease in leases:
                await lease.release()
        # A run the caller drives (``exclude``) still holds its lane.
        waiting.clear()
        heads = {a.id, d.id, e.id, plain.id}
        leases = await store.claim(1_000.0, 20, exclude=heads, waiting=waiting)
        assert leases == []
        assert waiting == {b.id, c.id, f.id, behind.id}
        leases = await store.claim(1_000.0, 20, exclude={a.id})
        try:
            assert b.id not in {x.run_id for x in leases}
        finally:
            for lease in leases:
                await lease.release()
        # When the head ends, the next run of its lane is claimed (and only that one).
        await self._save(store, a, status=RunStatus.COMPLETED)
        await self._save(store, d, status=RunStatus.FAILED)
        waiting.clear()
        leases = await store.claim(1_000.0, 20, waiting=waiting)
        try:
            assert {lease.run_id for lease in leases} == {b.id, e.id, f.id, plain.id}
            assert waiting <= {c.id, behind.id}
        finally:
            for lease in leases:
                await lease.release()
        waiting.clear()
        leases = await store.claim(
            1_000.0, 20, exclude={b.id, e.id, f.id, plain.id}, waiting=waiting
        )
        assert leases == []
        assert waiting == {c.id, behind.id}

    async def test_queue_fields_round_trip(self, store: Store) -> None:
        run = record(priority=7, group="g", queue="q", max_attempts=3, limits={"concurrency": 2})
        await store.create_run(run)
        assert await store.get_run(run.id) == run

    async def test_lanes_are_fifo_and_finished_runs_leave(self, store: Store) -> None:
        first, second, third = (record(group="lane") for _ in range(3))
        stranger = record(group="other")
        for run in (first, second, third, stranger):
            await store.create_run(run)
        assert await store.lane_ahead(LANE, first.id, 5) == []
        assert await store.lane_ahead(LANE, third.id, 5) == [first.id, second.id]
        assert await store.lane_ahead(LANE, third.id, 1) == [first.id]
        assert await store.lane_ahead(lane_key("tests:flow", None, "other"), stranger.id, 5) == []
        await self._save(store, first, status=RunStatus.COMPLETED)
        assert await store.lane_ahead(LANE, third.id, 5) == [second.id]
        assert await store.lane_ahead(LANE, second.id, 5) == []

    async def test_an_ended_run_queued_again_re_enters_its_lane_at_the_back(
        self, store: Store
    ) -> None:
        # ``wf retry``: a failed run saved pending again is a new start of its lane.
        first, second = record(group="lane"), record(group="lane")
        for run in (first, second):
            await store.create_run(run)
        await self._save(store, first, status=RunStatus.FAILED)
        assert await store.lane_ahead(LANE, second.id, 5) == []
        await self._save(store, first, status=RunStatus.PENDING, attempt=2)
        third = record(group="lane")
        await store.create_run(third)
        assert await store.lane_ahead(LANE, first.id, 5) == [second.id]
        assert await store.lane_ahead(LANE, second.id, 5) == []
        assert await store.lane_ahead(LANE, third.id, 5) == [second.id, first.id]
        # Saves that do not come from an end leave the lane as it is.
        await self._save(store, second, status=RunStatus.PENDING, wake_at=5.0, attempt=2)
        assert await store.lane_ahead(LANE, first.id, 5) == [second.id]

    async def test_a_run_created_in_a_lane_its_runs_all_left_is_claimed(self, store: Store) -> None:
        # A lane whose runs all ended and were deleted (``wf gc``, retention) is gone from the
        # store (an empty Redis sorted set is no key, an empty directory may be removed): a
        # run created in it afterwards heads it and is claimed.
        first, second = record(group="lane"), record(group="lane")
        for run in (first, second):
            await store.create_run(run, [event("run_started")])
        await self._save(store, first, status=RunStatus.COMPLETED)
        await self._save(store, second, status=RunStatus.CANCELLED)
        deleted = await store.delete_runs([first.id, second.id], now=1.0, reason="gc")
        assert set(deleted.ids) == {first.id, second.id}
        third = record(group="lane")
        await store.create_run(third, [event("run_started")])
        assert await store.lane_ahead(LANE, third.id, 5) == []
        leases = await store.claim(FAR, 10)
        try:
            assert [lease.run_id for lease in leases] == [third.id]
        finally:
            for lease in leases:
                await lease.release()

    async def test_lane_order_is_creation_order_not_id_order(self, store: Store) -> None:
        later_id, earlier_id = record(id="zz-first", group="g"), record(id="aa-second", group="g")
        await store.create_run(later_id)
        await store.create_run(earlier_id)
        assert await store.lane_ahead(lane_key("tests:flow", None, "g"), earlier_id.id, 5) == [
            later_id.id
        ]
        assert await store.lane_ahead(lane_key("tests:flow", None, "g"), later_id.id, 5) == []

    async def test_a_lane_belongs_to_a_queue(self, store: Store) -> None:
        # One group, three lanes: each workflow without a named queue is a queue of its own;
        # workflows naming one queue share its lanes.
        onboard = record(workflow="app:onboard", group="bob", wake_at=5_000.0)
        invoice = record(workflow="app:invoice", group="bob")
        mail_a = record(workflow="app:welcome", group="bob", queue="mail")
        mail_b = record(workflow="app:receipt", group="bob", queue="mail")
        for run in (onboard, invoice, mail_a, mail_b):
            await store.create_run(run)
        assert lane_of(invoice) != lane_of(onboard)
        assert await store.lane_ahead(lane_of_run(invoice), invoice.id, 5) == []
        assert await store.lane_ahead(lane_of_run(mail_b), mail_b.id, 5) == [mail_a.id]
        if store.claims_lane_heads:
            waiting: set[str] = set()
            leases = await store.claim(1_000.0, 20, waiting=waiting)
            try:
                assert {lease.run_id for lease in leases} == {invoice.id, mail_a.id}
                assert waiting <= {mail_b.id}
            finally:
                for lease in leases:
                    await lease.release()
            leases = await store.claim(
                1_000.0, 20, exclude={invoice.id, mail_a.id}, waiting=waiting
            )
            assert leases == [] and waiting == {mail_b.id}

    async def test_slots_are_exclusive_across_handles(self, store: Store, peer: Store) -> None:
        one = await store.try_slot("cap", 2)
        two = await peer.try_slot("cap", 2)
        assert one is not None and two is not None
        assert await store.try_slot("cap", 2) is None
        assert await peer.try_slot("cap", 2) is None
        assert await store.slots_taken("cap", 2) == 2
        assert await store.try_slot("another", 1) is not None
        await one.release()
        await one.release()  # idempotent
        assert await store.slots_taken("cap", 2) == 1
        three = await peer.try_slot("cap", 2)
        assert three is not None
        await two.release()
        await three.release()
        assert await store.slots_taken("cap", 2) == 0

    async def test_rate_limit_counts_starts_in_a_window(self, store: Store, peer: Store) -> None:
        assert await store.try_rate("r", 2, 60.0, 1_000.0) is None
        assert await peer.try_rate("r", 2, 60.0, 1_010.0) is None
        assert await store.try_rate("r", 2, 60.0, 1_020.0) == pytest.approx(1_060.0)
        assert await peer.try_rate("r", 2, 60.0, 1_060.5) is None
        assert await store.try_rate("other", 1, 60.0, 1_020.0) is None

    async def test_a_rate_limit_can_be_read_without_counting(
        self, store: Store, peer: Store
    ) -> None:
        assert await peer.rate_retry_at("r", 1, 60.0, 1_000.0) is None
        assert await store.try_rate("r", 1, 60.0, 1_000.0) is None
        assert await peer.rate_retry_at("r", 1, 60.0, 1_030.0) == pytest.approx(1_060.0)
        assert await peer.rate_retry_at("r", 1, 60.0, 1_030.0) == pytest.approx(1_060.0)
        assert await peer.rate_retry_at("r", 2, 60.0, 1_030.0) is None  # a larger limit
        assert await peer.rate_retry_at("r", 1, 60.0, 1_061.0) is None  # the window moved on
        assert await store.try_rate("r", 2, 60.0, 1_030.0) is None  # reading counted nothing

    # -- inbox -----------------------------------------------------------------------------

    async def test_post_read_and_ack(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        first = await peer.post(run.id, "hook", {"token": "a", "payload": [1, 2]})
        second = await peer.post(run.id, "cancel", {})
        assert first != second
        inbox = await store.read_inbox(run.id)
        assert [(m.id, m.kind, m.data) for m in inbox] == [
            (first, "hook", {"token": "a", "payload": [1, 2]}),
            (second, "cancel", {}),
        ]
        lease = await self._acquire(store, run.id)
        await lease.ack_inbox([first])
        assert [m.id for m in await store.read_inbox(run.id)] == [second]
        await lease.release()

    async def test_post_works_while_the_run_is_leased(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await peer.post(run.id, "wake", {})
        assert [m.kind for m in await store.read_inbox(run.id)] == ["wake"]
        await lease.release()

    async def test_cancels_waiting_names_the_runs_with_a_cancel_in_their_inbox(
        self, store: Store, peer: Store
    ) -> None:
        asked, woken, taken, quiet = record(), record(), record(), record()
        for run in (asked, woken, taken, quiet):
            await store.create_run(run)
        await store.post(asked.id, "wake", {})
        await store.post(asked.id, "cancel", {})
        await store.post(woken.id, "wake", {})
        lease = await self._acquire(store, taken.id)
        await lease.ack_inbox([await store.post(taken.id, "cancel", {})])  # taken in
        await lease.release()
        ids = [asked.id, woken.id, taken.id, quiet.id, new_run_id(), asked.id]
        assert await peer.cancels_waiting(ids) == {asked.id}
        assert await store.cancels_waiting([]) == set()

    async def test_a_watched_inbox_hears_a_post(self, store: Store, peer: Store) -> None:
        """``watch_inbox`` calls its callback on this loop when a post lands, from this handle
        or another: how a driven run hears a cancel at once. A store that keeps the default
        (hears nothing) is left to its runs' polls."""
        if type(store).watch_inbox is Store.watch_inbox:
            pytest.skip("this store hears no posts (Store.watch_inbox's default)")
        run = record()
        await store.create_run(run)
        await store.wait_for_activity(0.2)  # a store's first wait may only start listening
        for poster in (store, peer):
            heard = asyncio.Event()
            stop = store.watch_inbox(run.id, heard.set)
            try:
                await poster.post(run.id, "wake", {})
                async with asyncio.timeout(5.0):
                    await heard.wait()
            finally:
                stop()
        stopped = asyncio.Event()
        store.watch_inbox(run.id, stopped.set)()  # stopped at once: never called
        await store.post(run.id, "wake", {})
        await asyncio.sleep(0.1)
        assert not stopped.is_set()

    async def test_post_to_unknown_run_raises(self, store: Store) -> None:
        with pytest.raises(RunNotFound):
            await store.post(new_run_id(), "wake", {})

    async def test_post_to_finished_run_does_not_queue_it(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        await self._save(store, run, status=RunStatus.COMPLETED)
        await store.post(run.id, "wake", {})
        assert await store.due_runs(FAR) == []

    # -- waiting ---------------------------------------------------------------------------

    async def test_wait_for_activity_wakes_on_post(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        await store.due_runs(FAR)
        waiter = asyncio.ensure_future(store.wait_for_activity(10.0))
        await asyncio.sleep(0)
        await peer.post(run.id, "wake", {})
        async with asyncio.timeout(5.0):
            await waiter

    async def test_wait_for_activity_wakes_on_new_run(self, store: Store) -> None:
        await store.due_runs(FAR)
        waiter = asyncio.ensure_future(store.wait_for_activity(10.0))
        await asyncio.sleep(0)
        await store.create_run(record())
        async with asyncio.timeout(5.0):
            await waiter

    async def test_wait_for_activity_hears_of_a_change_made_before_it_began(
        self, store: Store, peer: Store
    ) -> None:
        """A change made after a claim looked at the queue and before the wait that follows
        it began (a worker's look, then its wait, with a run ending elsewhere in between) ends
        that wait at once: it is not left to the next poll."""
        await store.wait_for_activity(0.2)  # a store's first wait may only start listening
        for maker in (store, peer):
            await store.claim(FAR, 10)
            await maker.create_run(record())
            await asyncio.sleep(0.05)  # heard of, where it is heard of
            async with asyncio.timeout(5.0):
                await store.wait_for_activity(10.0)

    async def test_wait_for_activity_times_out(self, store: Store) -> None:
        await store.due_runs(FAR)
        async with asyncio.timeout(5.0):
            await store.wait_for_activity(0.05)

    async def test_wait_for_change_wakes_when_another_instances_run_ends(
        self, store: Store, peer: Store
    ) -> None:
        """Views of many runs hear of every run's end, even one that made nothing startable
        (which workers waiting in ``wait_for_activity`` may not hear of)."""
        run = record()
        await peer.create_run(run)
        lease = await self._acquire(peer, run.id)
        await lease.save(dataclasses.replace(run, status=RunStatus.RUNNING))
        await store.wait_for_change(0.2)  # a store's first wait may only start listening
        await store.list_runs()
        waiter = asyncio.ensure_future(store.wait_for_change(10.0))
        await asyncio.sleep(0.05)
        await lease.save(dataclasses.replace(run, status=RunStatus.COMPLETED, output=1))
        await lease.release()
        async with asyncio.timeout(5.0):
            await waiter
        assert [r.status for r in await store.list_runs()] == [RunStatus.COMPLETED]

    async def test_wait_for_run_wakes_on_append(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await peer.read_journal(run.id)
        waiter = asyncio.ensure_future(peer.wait_for_run(run.id, 10.0))
        await asyncio.sleep(0)
        await lease.append([event("step_completed")])
        async with asyncio.timeout(5.0):
            await waiter
        await lease.release()

    async def test_wait_for_run_wakes_on_save(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await peer.get_run(run.id)
        waiter = asyncio.ensure_future(peer.wait_for_run(run.id, 10.0))
        await asyncio.sleep(0)
        run.status = RunStatus.COMPLETED
        await lease.save(run)
        async with asyncio.timeout(5.0):
            await waiter
        await lease.release()

    async def test_wait_for_run_times_out(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        await store.read_journal(run.id)
        async with asyncio.timeout(5.0):
            await store.wait_for_run(run.id, 0.05)
        with pytest.raises(RunNotFound):
            await store.wait_for_run(new_run_id(), 0.01)

    # -- hooks -----------------------------------------------------------------------------

    async def test_register_hook_claims_the_token(self, store: Store, peer: Store) -> None:
        owner, other = new_run_id(), new_run_id()
        hook = HookRecord("tok-1", owner, op=3, schema={"type": "integer"}, created_at=5.0)
        assert await store.register_hook(hook) is None
        assert await peer.get_hook("tok-1") == hook
        assert await peer.register_hook(HookRecord("tok-1", other, op=1)) == owner
        assert await store.get_hook("tok-1") == hook

    async def test_same_run_may_register_again(self, store: Store) -> None:
        owner = new_run_id()
        assert await store.register_hook(HookRecord("tok", owner, op=1)) is None
        assert await store.register_hook(HookRecord("tok", owner, op=1)) is None
        assert [h.token for h in await store.list_hooks(owner)] == ["tok"]

    async def test_release_hook_only_by_owner(self, store: Store) -> None:
        owner, other = new_run_id(), new_run_id()
        await store.register_hook(HookRecord("tok", owner, op=1))
        await store.release_hook("tok", other)
        assert (await store.get_hook("tok")) is not None
        await store.release_hook("tok", owner)
        assert await store.get_hook("tok") is None
        assert await store.register_hook(HookRecord("tok", other, op=2)) is None
        await store.release_hook("never-registered", owner)

    async def test_list_hooks(self, store: Store) -> None:
        a, b = new_run_id(), new_run_id()
        tokens = {"a1": a, "a2": a, "b1": b, "odd token/with:chars é": b}
        for op, (token, run_id) in enumerate(tokens.items()):
            assert await store.register_hook(HookRecord(token, run_id, op=op)) is None
        assert sorted(h.token for h in await store.list_hooks(a)) == ["a1", "a2"]
        assert sorted(h.token for h in await store.list_hooks(b)) == [
            "b1",
            "odd token/with:chars é",
        ]
        assert sorted(h.token for h in await store.list_hooks()) == sorted(tokens)
        await store.release_hook("a1", a)
        assert [h.token for h in await store.list_hooks(a)] == ["a2"]

    async def test_a_webhook_delivery_is_kept_by_id_the_first_stays(
        self, store: Store, peer: Store
    ) -> None:
        run_id = new_run_id()
        first = WebhookDelivery("d1", "tok", run_id, "idempotency-key", {"status": 201}, 100.0)
        assert await store.get_deliveries(["d1"]) == {}
        await store.save_delivery(first)
        assert await peer.get_deliveries(["d1"]) == {"d1": first}
        await peer.save_delivery(dataclasses.replace(first, run_id=new_run_id(), at=150.0))
        assert await store.get_deliveries(["d1"]) == {"d1": first}
        run_replies = WebhookDelivery("d2/odd é", "tok", run_id, "x-key", None, 200.0)
        await store.save_delivery(run_replies)
        assert await peer.get_deliveries(["d2/odd é", "d3", "d1"]) == {
            "d1": first,
            "d2/odd é": run_replies,
        }
        assert await store.get_deliveries([]) == {}

    async def test_a_webhook_delivery_is_no_hook(self, store: Store) -> None:
        """Kept after its hook is released: never listed, never holding the token."""
        owner, other = new_run_id(), new_run_id()
        await store.register_hook(HookRecord("tok", owner, op=1))
        await store.save_delivery(WebhookDelivery("d1", "tok", owner, "k", None, 100.0))
        await store.release_hook("tok", owner)
        assert await store.list_hooks() == [] and await store.get_hook("tok") is None
        assert await store.register_hook(HookRecord("tok", other, op=1)) is None
        assert (await store.get_deliveries(["d1"])) != {}

    async def test_prune_deliveries_removes_those_made_before(
        self, store: Store, peer: Store
    ) -> None:
        run_id = new_run_id()
        for n, at in enumerate((100.0, 200.0, 300.0)):
            await store.save_delivery(WebhookDelivery(f"d{n}", "tok", run_id, "k", None, at))
        assert await peer.prune_deliveries(200.0) == 1
        assert await store.get_deliveries(["d0"]) == {}
        assert await store.get_deliveries(["d1"]) != {}
        assert await store.prune_deliveries(FAR) == 2
        assert await peer.get_deliveries(["d2"]) == {}
        assert await store.prune_deliveries(FAR) == 0

    async def test_post_once_posts_a_keyed_message_once(self, store: Store, peer: Store) -> None:
        """A keyed ``wf.resume_hook`` and its retry: the message is posted and the delivery
        kept in one step; a repeat of the id (from any handle) posts nothing and answers the
        delivery kept first."""
        run = record()
        await store.create_run(run)
        first = WebhookDelivery("k1", "tok", run.id, "", None, 100.0)
        assert await store.post_once(run.id, "hook", {"payload": 1}, first) is None
        again = dataclasses.replace(first, at=150.0)
        assert await peer.post_once(run.id, "hook", {"payload": 2}, again) == first
        assert await store.post_once(run.id, "hook", {"payload": 3}, again) == first
        assert [m.data for m in await store.read_inbox(run.id)] == [{"payload": 1}]
        assert await peer.get_deliveries(["k1"]) == {"k1": first}
        other = WebhookDelivery("k2", "tok", run.id, "", None, 160.0)
        assert await peer.post_once(run.id, "hook", {"payload": 4}, other) is None
        inbox = await store.read_inbox(run.id)
        assert [m.data for m in inbox] == [{"payload": 1}, {"payload": 4}]
        lease = await self._acquire(store, run.id)
        await lease.ack_inbox([m.id for m in inbox])
        await lease.release()
        # Taken in by the run: a repeat still posts nothing.
        assert await store.post_once(run.id, "hook", {"payload": 5}, first) == first
        assert await store.read_inbox(run.id) == []

    async def test_post_once_racing_posts_once(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        ours = [WebhookDelivery("k", "tok", run.id, "", None, 100.0 + n) for n in range(6)]
        answers = await asyncio.gather(
            *(
                (store if n % 2 else peer).post_once(run.id, "hook", {"n": n}, delivery)
                for n, delivery in enumerate(ours)
            )
        )
        assert sum(answer is None for answer in answers) == 1
        (message,) = await store.read_inbox(run.id)
        winner = ours[message.data["n"]]
        assert all(answer in (None, winner) for answer in answers)
        assert await peer.get_deliveries(["k"]) == {"k": winner}

    async def test_many_keyed_posts_at_once_all_post(self, store: Store, peer: Store) -> None:
        """More keyed posts at once than a default thread pool has threads (a store that
        made each wait for its lock in a thread of that pool waited for ever)."""
        run = record()
        await store.create_run(run)
        ours = [WebhookDelivery(f"k{n}", "tok", run.id, "", None, 100.0 + n) for n in range(64)]
        async with asyncio.timeout(30):
            answers = await asyncio.gather(
                *(
                    (store if n % 2 else peer).post_once(run.id, "hook", {"n": n}, delivery)
                    for n, delivery in enumerate(ours)
                )
            )
        assert answers == [None] * 64
        assert sorted(m.data["n"] for m in await store.read_inbox(run.id)) == list(range(64))

    async def test_post_once_queues_like_post(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        await self._save(store, run, status=RunStatus.COMPLETED)
        delivery = WebhookDelivery("k", "tok", run.id, "", None, 100.0)
        assert await store.post_once(run.id, "hook", {}, delivery) is None
        assert await store.due_runs(FAR) == []
        unknown = WebhookDelivery("k-unknown", "tok", new_run_id(), "", None, 100.0)
        with pytest.raises(RunNotFound):
            await store.post_once(unknown.run_id, "hook", {}, unknown)
        assert await store.get_deliveries(["k-unknown"]) == {}  # nothing kept for it

    async def test_a_pruned_key_posts_again(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        delivery = WebhookDelivery("k", "tok", run.id, "", None, 100.0)
        assert await store.post_once(run.id, "hook", {"n": 1}, delivery) is None
        assert await store.prune_deliveries(200.0) == 1
        assert await store.post_once(run.id, "hook", {"n": 2}, delivery) is None
        assert len(await store.read_inbox(run.id)) == 2

    # -- step logs --------------------------------------------------------------------------

    async def test_step_logs_append_in_order_and_read_from_an_index(
        self, store: Store, peer: Store
    ) -> None:
        run = record()
        await store.create_run(run)
        assert await store.read_logs(run.id) == []
        lease = await self._acquire(store, run.id)
        first = [log_entry("one"), log_entry("two", stream="stderr")]
        await lease.append_logs(first)
        await lease.append_logs([log_entry("three\nwith a newline ✓", level="INFO")])
        await lease.append_logs([])
        await lease.release()
        got = await peer.read_logs(run.id)
        assert [e["text"] for e in got] == ["one", "two", "three\nwith a newline ✓"]
        assert got[:2] == first and got[2]["level"] == "INFO"
        assert [e["text"] for e in await peer.read_logs(run.id, 2)] == ["three\nwith a newline ✓"]
        assert await peer.read_logs(run.id, 3) == []

    async def test_step_logs_of_runs_are_separate(self, store: Store) -> None:
        a, b = record(), record()
        for run in (a, b):
            await store.create_run(run)
            lease = await self._acquire(store, run.id)
            await lease.append_logs([log_entry(run.id)])
            await lease.release()
        assert [e["text"] for e in await store.read_logs(a.id)] == [a.id]
        assert [e["text"] for e in await store.read_logs(b.id)] == [b.id]

    async def test_step_logs_of_an_unknown_run_raise(self, store: Store) -> None:
        with pytest.raises(RunNotFound):
            await store.read_logs("wrun_missing")

    async def test_wait_for_run_wakes_on_step_logs(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await peer.read_logs(run.id)
        waiter = asyncio.ensure_future(peer.wait_for_run(run.id, 10.0))
        await asyncio.sleep(0)
        await lease.append_logs([log_entry("hello")])
        async with asyncio.timeout(5.0):
            await waiter
        await lease.release()

    # -- streams ---------------------------------------------------------------------------

    async def test_write_and_read_chunks(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        for index, chunk in enumerate([b"a", b"", b"ccc", bytes(range(256))]):
            await lease.write_chunk("out", index, chunk)
        assert await peer.read_chunks(run.id, "out") == (
            [b"a", b"", b"ccc", bytes(range(256))],
            False,
        )
        assert await peer.read_chunks(run.id, "out", 2) == ([b"ccc", bytes(range(256))], False)
        assert await peer.read_chunks(run.id, "out", 9) == ([], False)
        assert await peer.read_chunks(run.id, "missing") == ([], False)
        await lease.release()

    async def test_read_chunks_in_batches_of_max_bytes(self, store: Store, peer: Store) -> None:
        # A reader of a big stream holds a batch at a time: each a prefix of what is left,
        # never empty while chunks remain, within max_bytes unless one chunk alone exceeds it.
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        chunks = [b"aaa", b"bbb", b"", b"ccc", b"d" * 10, b"e", b"f" * 7]
        for index, chunk in enumerate(chunks):
            await lease.write_chunk("out", index, chunk)
        await lease.close_stream("out", len(chunks))
        await lease.release()
        for budget in (1, 6, 9, 10, 10**6):
            got: list[bytes] = []
            while len(got) < len(chunks):
                batch, closed = await peer.read_chunks(run.id, "out", len(got), max_bytes=budget)
                assert batch == chunks[len(got) : len(got) + len(batch)]
                assert batch, f"an empty batch at {len(got)} of {len(chunks)} (budget {budget})"
                assert len(batch) == 1 or sum(map(len, batch)) <= budget
                assert closed is True
                got += batch
            assert await peer.read_chunks(run.id, "out", len(chunks), max_bytes=budget) == (
                [],
                True,
            )
        # A budget as big as the stream may still end a batch sooner, but the first ones fit.
        first, _ = await peer.read_chunks(run.id, "out", 0, max_bytes=6)
        assert first[:1] == [b"aaa"]
        assert await peer.read_chunks(run.id, "missing", 0, max_bytes=6) == ([], False)

    async def test_read_chunks_with_max_bytes_zero_or_negative_reads_one_chunk_at_a_time(
        self, store: Store, peer: Store
    ) -> None:
        # No chunk fits such a budget, but a batch is never empty while chunks remain.
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        chunks = [b"aaa", b"b", b"cc"]
        for index, chunk in enumerate(chunks):
            await lease.write_chunk("out", index, chunk)
        await lease.close_stream("out", len(chunks))
        await lease.release()
        for budget in (0, -1, -(10**6)):
            for index, chunk in enumerate(chunks):
                assert await peer.read_chunks(run.id, "out", index, max_bytes=budget) == (
                    [chunk],
                    True,
                )
            assert await peer.read_chunks(run.id, "out", 3, max_bytes=budget) == ([], True)

    async def test_read_chunks_of_an_open_stream_in_batches_says_not_closed(
        self, store: Store, peer: Store
    ) -> None:
        # A partial batch of a stream still being written is not its end.
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        for index, chunk in enumerate([b"aaaa", b"bbbb", b"cccc"]):
            await lease.write_chunk("out", index, chunk)
        assert await peer.read_chunks(run.id, "out", 0, max_bytes=4) == ([b"aaaa"], False)
        assert await peer.read_chunks(run.id, "out", 1, max_bytes=100) == (
            [b"bbbb", b"cccc"],
            False,
        )
        assert await peer.read_chunks(run.id, "out", 3, max_bytes=100) == ([], False)
        await lease.close_stream("out", 3)
        assert await peer.read_chunks(run.id, "out", 2, max_bytes=4) == ([b"cccc"], True)
        await lease.release()

    async def test_write_chunk_is_idempotent_by_index(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await lease.write_chunk("s", 0, b"one")
        await lease.write_chunk("s", 1, b"two")
        await lease.write_chunk("s", 0, b"one-again")  # a replayed step
        await lease.write_chunk("s", 1, b"two-again")
        await lease.release()
        replay = await self._acquire(store, run.id)
        await replay.write_chunk("s", 1, b"two-replayed")
        await replay.write_chunk("s", 2, b"three")
        await replay.release()
        assert await store.read_chunks(run.id, "s") == ([b"one", b"two", b"three"], False)

    async def test_close_stream_and_list_streams(self, store: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        await lease.write_chunk("default", 0, b"x")
        await lease.write_chunk("logs/€ weird name", 0, b"y")
        await lease.write_chunk("logs/€ weird name", 1, b"z")
        await lease.close_stream("default", 1)
        await lease.close_stream("empty", 0)
        await lease.release()
        assert await store.read_chunks(run.id, "default") == ([b"x"], True)
        assert await store.list_streams(run.id) == {
            "default": (1, True),
            "logs/€ weird name": (2, False),
            "empty": (0, True),
        }
        # One stream's state, as a writer asks for it: the same, (0, False) for none yet.
        for name in ("default", "logs/€ weird name", "empty", "never written"):
            expected = (await store.list_streams(run.id)).get(name, (0, False))
            assert await store.stream_info(run.id, name) == expected

    async def test_stream_chunks_follows_until_closed(self, store: Store, peer: Store) -> None:
        run = record()
        await store.create_run(run)
        lease = await self._acquire(store, run.id)
        for index in range(3):
            await lease.write_chunk("out", index, b"%d" % index)
        got: list[bytes] = []

        async def follow() -> None:
            async for chunk in peer.stream_chunks(run.id, "out", -2, poll=1.0):
                got.append(chunk)

        follower = asyncio.ensure_future(follow())
        # A negative start counts from the end *when the reader starts*: let it start (and
        # catch up) before writing more, or a slow first read would see a later end.
        for _ in range(1000):
            if len(got) == 2:
                break
            await asyncio.sleep(0.005)
        await lease.write_chunk("out", 3, b"3")
        await lease.write_chunk("out", 4, b"4")
        await lease.close_stream("out", 5)
        async with asyncio.timeout(10.0):
            await follower
        assert got == [b"1", b"2", b"3", b"4"]
        await lease.release()

    # -- schedules and retention (#16) ---------------------------------------------------

    async def test_schedules_round_trip_and_upsert(self, store: Store, peer: Store) -> None:
        assert await store.list_schedules() == []
        assert await store.get_schedule("nightly") is None
        made = Schedule("nightly", "tests:flow", "0 3 * * *", tz="Europe/Paris", input={"a": 1})
        made.next_run = 1_800_000_000.0
        await store.save_schedule(made)
        assert await peer.get_schedule("nightly") == made
        made.cron, made.last_run_id, made.skipped = "0 4 * * *", "wrun_x", 2
        made.next_run, made.ended = None, True  # a series that ended: no next fire
        await store.save_schedule(made)  # same id: replaced, never duplicated
        other = Schedule("a-first", "tests:other", "* * * * *")
        await store.save_schedule(other)
        assert await peer.list_schedules() == [other, made]
        assert await store.delete_schedule("nightly") is True
        assert await store.delete_schedule("nightly") is False
        assert [s.id for s in await peer.list_schedules()] == ["a-first"]

    async def test_due_schedules_are_those_whose_fire_has_come(
        self, store: Store, peer: Store
    ) -> None:
        """What a worker's pass reads: the due schedules by id and the earliest later fire,
        an edit or a removal made through another instance seen at the next look."""
        times = {"b": 100.0, "a": 50.0, "c": 200.0, "paused": None, "e": 300.0}
        for schedule_id, at in times.items():
            await store.save_schedule(Schedule(schedule_id, "tests:flow", "* * * * *", next_run=at))
        due, later = await peer.due_schedules(150.0)
        assert [s.id for s in due] == ["a", "b"] and later == 200.0
        assert due[0] == Schedule("a", "tests:flow", "* * * * *", next_run=50.0)
        assert await peer.due_schedules(10.0) == ([], 50.0)
        assert [s.id for s in (await peer.due_schedules(300.0))[0]] == ["a", "b", "c", "e"]
        await store.save_schedule(Schedule("c", "tests:flow", "* * * * *", next_run=120.0))
        assert await store.delete_schedule("a") is True
        due, later = await peer.due_schedules(150.0)
        assert [s.id for s in due] == ["b", "c"] and later == 300.0
        await peer.save_schedule(Schedule("b", "tests:flow", "* * * * *", next_run=400.0))
        due, later = await peer.due_schedules(150.0)
        assert [s.id for s in due] == ["c"] and later == 300.0

    async def test_a_paused_schedule_round_trips_with_no_next_fire(
        self, store: Store, peer: Store
    ) -> None:
        """A pause is stored as ``paused`` and no ``next_run``: a wf that predates the field
        reads a schedule with no next fire, and fires nothing of it either."""
        made = Schedule("nightly", "tests:flow", "0 3 * * *", next_run=1_800_000_000.0)
        await store.save_schedule(made)
        made.paused, made.next_run, made.skipped = True, None, 3
        await store.save_schedule(made)
        found = await peer.get_schedule("nightly")
        assert found == made and found.paused and found.next_run is None
        assert await peer.list_schedules() == [made]
        made.paused, made.next_run = False, 1_800_000_060.0
        await store.save_schedule(made)
        assert await peer.get_schedule("nightly") == made

    async def test_a_damaged_schedule_is_left_out_and_named(self, store: Store) -> None:
        for schedule_id in ("a", "b", "c"):
            await store.save_schedule(Schedule(schedule_id, "tests:flow", "* * * * *"))
        await self.damage_schedule(store, "b")
        with collect_faults() as met:
            assert [s.id for s in await store.list_schedules()] == ["a", "c"]
        # The caller that collects is told where it lives; the store keeps no note of its own.
        assert len(met) == 1 and met[0].kind.startswith("schedule") and met[0].reason
        assert met[0].where == store.schedule_location("b")
        assert not store.faults.of_kind(met[0].kind)
        # Without a collecting caller (the worker's schedule firing), the store's faults note it.
        assert [s.id for s in await store.list_schedules()] == ["a", "c"]
        assert store.faults.of_kind(met[0].kind)
        with pytest.raises(StoreCorrupted):
            await store.get_schedule("b")
        assert (await store.get_schedule("c")) is not None
        assert any(store.schedule_location("b") in line for line in await store.verify())
        # Setting it again repairs it; removing it removes the damage.
        await store.save_schedule(Schedule("b", "tests:flow", "0 * * * *"))
        assert [s.id for s in await store.list_schedules()] == ["a", "b", "c"]
        await self.damage_schedule(store, "b")
        assert await store.delete_schedule("b") is True
        assert [s.id for s in await store.list_schedules()] == ["a", "c"]

    async def test_schedule_lock_is_exclusive(self, store: Store, peer: Store) -> None:
        lock = await store.lock_schedule("s1")
        assert lock is not None
        assert await peer.lock_schedule("s1", wait=False) is None
        other = await peer.lock_schedule("s2", wait=False)
        assert other is not None
        await other.release()
        waiter = asyncio.ensure_future(peer.lock_schedule("s1", wait=True))
        await asyncio.sleep(0.02)
        assert not waiter.done()
        await lock.release()
        await lock.release()  # idempotent
        async with asyncio.timeout(10.0):
            taken = await waiter
        assert taken is not None
        await taken.release()

    async def _finished(self, store: Store, **fields: Any) -> RunRecord:
        run = record(**fields)
        await store.create_run(run, [event("run_started")])
        await self._save(store, run, status=RunStatus.COMPLETED, output={"ok": True})
        return run

    async def test_delete_runs_removes_everything_and_leaves_a_tombstone(
        self, store: Store, peer: Store
    ) -> None:
        run = record()
        await store.create_run(run, [event("run_started")])
        lease = await self._acquire(store, run.id)
        await lease.append([event("step_completed", op=0, result="x" * 1000)])
        await lease.write_chunk("out", 0, b"chunk")
        await lease.close_stream("out", 1)
        await store.register_hook(HookRecord("tok-del", run.id, 1))
        run.status = RunStatus.COMPLETED
        await lease.save(run)
        await lease.release()
        await store.post(run.id, "hook", {"token": "tok-del", "payload": 1})
        keep = await self._finished(store)
        assert await store.get_tombstone(run.id) is None
        done = await store.delete_runs([run.id], now=1234.0, reason="retention")
        assert done.ids == [run.id]
        assert done.bytes > 1000
        for reader in (store, peer):
            with pytest.raises(RunNotFound):
                await reader.get_run(run.id)
            with pytest.raises(RunNotFound):
                await reader.read_journal(run.id)
            with pytest.raises(RunNotFound):
                await reader.read_chunks(run.id, "out")
            assert await reader.get_hook("tok-del") is None
            assert run.id not in [r.id for r in await reader.list_runs(limit=100)]
            stone = await reader.get_tombstone(run.id)
            assert stone is not None
            assert (stone.id, stone.workflow, stone.status) == (run.id, run.workflow, "completed")
            assert (stone.deleted_at, stone.reason) == (1234.0, "retention")
        assert (await store.get_run(keep.id)).status is RunStatus.COMPLETED
        again = await store.delete_runs([run.id], now=1235.0, reason="gc")
        assert again.ids == []

    async def test_delete_runs_spares_live_and_leased_runs(self, store: Store) -> None:
        pending = record()
        await store.create_run(pending)
        suspended = record()
        await store.create_run(suspended)
        await self._save(store, suspended, status=RunStatus.SUSPENDED, wake_at=FAR)
        held = await self._finished(store)
        lease = await self._acquire(store, held.id)
        gone = await self._finished(store)
        done = await store.delete_runs(
            [pending.id, suspended.id, held.id, gone.id, new_run_id()], now=1.0, reason="gc"
        )
        assert done.ids == [gone.id]
        await lease.release()
        for kept in (pending, suspended, held):
            assert (await store.get_run(kept.id)).id == kept.id
        assert await store.get_tombstone(pending.id) is None
        assert (await store.delete_runs([held.id], now=2.0, reason="gc")).ids == [held.id]

    async def test_an_explicit_id_of_a_deleted_run_is_taken_until_its_tombstone_goes(
        self, store: Store, peer: Store
    ) -> None:
        """An id the caller gives is an idempotency key: once its run is deleted, creating it
        again (from any process) creates nothing while the tombstone is kept, as for a run
        that exists; once the tombstone is pruned the id is free again."""
        gone = await self._finished(store)
        assert (await store.delete_runs([gone.id], now=100.0, reason="gc")).ids == [gone.id]
        for maker in (store, peer):
            again = record(id=gone.id)
            assert await maker.create_run(again, [event("run_started")], explicit=True) is False
        with pytest.raises(RunNotFound):
            await store.get_run(gone.id)
        assert gone.id not in [r.id for r in await store.list_runs(limit=100)]
        assert await store.due_runs(now=FAR, limit=100) == []
        assert (await store.store_info()).runs["pending"] == 0
        fresh = record()
        assert await store.create_run(fresh, [event("run_started")], explicit=True) is True
        if type(store).prune_tombstones is not Store.prune_tombstones:
            assert await store.prune_tombstones(before=200.0) == 1
            again = record(id=gone.id)
            assert await store.create_run(again, [event("run_started")], explicit=True) is True
            assert (await peer.get_run(gone.id)).status is RunStatus.PENDING

    async def test_store_info_counts_runs(self, store: Store) -> None:
        await store.create_run(record())
        await self._finished(store)
        await self._finished(store)
        await store.save_schedule(Schedule("s", "tests:flow", "* * * * *"))
        info = await store.store_info()
        assert info.runs["pending"] == 1
        assert info.runs["completed"] == 2
        assert info.runs["failed"] == 0
        assert info.schedules == 1
        assert info.tombstones == 0

    async def test_old_tombstones_are_pruned(self, store: Store) -> None:
        if type(store).prune_tombstones is Store.prune_tombstones:
            pytest.skip("this store keeps every tombstone (the default)")
        old, recent = await self._finished(store), await self._finished(store)
        assert (await store.delete_runs([old.id], now=100.0, reason="gc")).ids == [old.id]
        assert (await store.delete_runs([recent.id], now=500.0, reason="gc")).ids == [recent.id]
        assert await store.prune_tombstones(before=300.0) == 1
        assert await store.get_tombstone(old.id) is None
        stone = await store.get_tombstone(recent.id)
        assert stone is not None and stone.deleted_at == 500.0
        assert (await store.store_info()).tombstones == 1
        assert await store.prune_tombstones(before=300.0) == 0
        assert await store.verify() == []

    async def test_verify_finds_nothing_wrong_in_a_sound_store(self, store: Store) -> None:
        await store.create_run(record(), [event("run_started")])
        await self._finished(store)
        assert await store.verify() == []

    async def test_verify_names_each_run_whose_journal_replay_cannot_use(
        self, store: Store
    ) -> None:
        """An event without a field its kind requires, of a kind wf does not know, or an
        outcome before the journal's end: each run is named (once), the others are not; a
        failed run's retry (``run_retrying`` after ``run_failed``) is sound."""
        damaged = {
            "lacking": event("step_completed", op=0, result=1),
            "unknown": event("step_finished", op=0, name="s", result=1),
            "misplaced": event("run_completed", output=1),
        }
        del damaged["lacking"]["name"]
        runs: dict[str, RunRecord] = {}
        for label, bad in {"sound": None, **damaged}.items():
            runs[label] = run = record()
            await store.create_run(run, [event("run_started")])
            lease = await self._acquire(store, run.id)
            good = event("step_completed", op=0, name="s", result=1)
            await lease.append([bad if bad is not None else good, event("step_started", op=1)])
            await lease.release()
        retried = record()
        await store.create_run(retried, [event("run_started")])
        lease = await self._acquire(store, retried.id)
        await lease.append(
            [event("run_failed", error={"message": "x"}), event("run_retrying", retry_at=None)]
        )
        await lease.release()
        problems = await store.verify()
        for label in damaged:
            named = [line for line in problems if runs[label].id in line]
            assert len(named) == 1, (label, problems)
        assert not any(runs["sound"].id in line or retried.id in line for line in problems)

    # -- helpers ---------------------------------------------------------------------------

    async def _acquire(self, store: Store, run_id: str) -> Any:
        lease = await store.try_acquire(run_id)
        assert lease is not None, f"could not acquire {run_id}"
        return lease

    async def _save(self, store: Store, run: RunRecord, **changes: Any) -> None:
        for name, value in changes.items():
            setattr(run, name, value)
        lease = await self._acquire(store, run.id)
        await lease.save(run)
        await lease.release()
