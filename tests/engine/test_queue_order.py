"""The ordering rules of the queue, as properties (hypothesis): for random mixes of priorities,
groups, delays, a workflow cap and the worker's own cap, one worker drains the runs and the
order in which they start obeys every rule:

* every run completes, none starts before it is due;
* a group runs one at a time, in the order its runs were started;
* never more runs in flight than the workflow's cap, nor than the worker's concurrency;
* priorities: an ungrouped run never starts while an ungrouped run of higher priority that was
  already due is still waiting (both are held by the same caps, so the higher goes first);
* creation order: among ungrouped runs of one priority and one due time, a run never starts
  before one created earlier. Runs get caller-chosen ids (random strings, so their sort order
  is not their creation order; one example has them sorted against it): the store's creation
  sequence orders them, never the ids.

On the memory store (the rules are the engine's; the conformance kit holds every store to the
same lane, slot and priority semantics), and with fewer examples on the local store (its
lanes, slots and queue entries are files), on a fake clock: an example takes milliseconds of real
time (the runs' ``wf.sleep`` and the delays are fake time). Hypothesis' deadline is off only
because the first example pays for imports. Each example is bounded to 10 s: these tests once
hung under pytest — a worker spun while waiting for a delayed run behind a cap (the memory
store left its activity event set after a slot's release, so every wait ended at once and the
fake clock never jumped), and every hanging example of the shrink cost the whole bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import tempfile
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import wf
from wf.store import Store
from wf.store.local import LocalStore
from wf.store.memory import MemoryStore
from wf.testing import MockClock, TestEngine

events: list[tuple[str, str, float]] = []
"""(``start`` | ``end``, key, fake time) of every run, in the order they happened."""
clocks: list[MockClock] = []


@wf.step
async def mark(kind: str, key: str) -> None:
    events.append((kind, key, clocks[-1].now()))


async def body(key: str, hold: int) -> str:
    await mark("start", key)
    await wf.sleep(hold)  # fake seconds, shorter than suspend_after: the run stays in flight
    await mark("end", key)
    return key


@wf.workflow(name="order:free")
async def uncapped(key: str, hold: int) -> str:
    return await body(key, hold)


@wf.workflow(name="order:cap1", concurrency=1)
async def cap1(key: str, hold: int) -> str:
    return await body(key, hold)


@wf.workflow(name="order:cap2", concurrency=2)
async def cap2(key: str, hold: int) -> str:
    return await body(key, hold)


FLOWS = {None: uncapped, 1: cap1, 2: cap2}


@dataclasses.dataclass(frozen=True)
class Spec:
    priority: int
    group: str | None
    delay: int
    hold: int


specs = st.builds(
    Spec,
    priority=st.sampled_from([0, 0, 1, 5]),
    group=st.sampled_from([None, None, "a", "b"]),
    delay=st.sampled_from([0, 0, 0, 7, 20]),
    hold=st.integers(1, 10),
)


# A cap's place freed by r0 while the worker looked at the queue went to r3, claimed fresh,
# over r4 (higher priority) and r1, r2 (older), which the worker held for that cap.
CAP_FREED_WHILE_LOOKING = [Spec(0, None, 0, 7), *[Spec(0, None, 7, 1)] * 3, Spec(1, None, 7, 1)]

# Created p8, p7, ..., p0 at one priority and due time: they must start p8 first (creation
# order), where an order by id would start p0 first.
AGAINST_SORT_ORDER = [f"p{n}" for n in range(8, -1, -1)]
EQUALS = [Spec(0, None, 0, 1)] * 9

run_ids = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCZ0123456789", min_size=1, max_size=6),
    min_size=9,
    max_size=9,
    unique=True,
)
"""Caller-chosen ids, one per run (the first ``len(runs)`` are used)."""


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(specs, min_size=1, max_size=9),
    cap=st.sampled_from([None, 1, 2]),
    concurrency=st.integers(1, 4),
    ids=run_ids,
)
@example(runs=CAP_FREED_WHILE_LOOKING, cap=1, concurrency=2, ids=AGAINST_SORT_ORDER)
@example(runs=EQUALS, cap=None, concurrency=1, ids=AGAINST_SORT_ORDER)
@example(runs=EQUALS, cap=1, concurrency=3, ids=AGAINST_SORT_ORDER)
def test_the_start_order_obeys_every_rule(
    runs: list[Spec], cap: int | None, concurrency: int, ids: list[str]
) -> None:
    # An example takes milliseconds: a short bound keeps a hang (and its shrinking) short.
    asyncio.run(asyncio.wait_for(drain(MemoryStore(), runs, cap, concurrency, ids), 10))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(specs, min_size=1, max_size=9),
    cap=st.sampled_from([None, 1, 2]),
    concurrency=st.integers(1, 4),
    ids=run_ids,
)
@example(runs=CAP_FREED_WHILE_LOOKING, cap=1, concurrency=2, ids=AGAINST_SORT_ORDER)
@example(runs=EQUALS, cap=None, concurrency=1, ids=AGAINST_SORT_ORDER)
@example(runs=EQUALS, cap=1, concurrency=3, ids=AGAINST_SORT_ORDER)
def test_the_start_order_obeys_every_rule_on_the_local_store(
    runs: list[Spec], cap: int | None, concurrency: int, ids: list[str]
) -> None:
    """The same on the local store: its lanes, slots and queue entries, on real files (a fresh
    store per example; fewer examples, each a few tens of milliseconds)."""
    with tempfile.TemporaryDirectory() as root:
        store = LocalStore(os.path.join(root, ".workflows"))

        async def go() -> None:
            try:
                await asyncio.wait_for(drain(store, runs, cap, concurrency, ids), 10)
            finally:
                await store.close()

        asyncio.run(go())


async def drain(
    store: Store, runs: list[Spec], cap: int | None, concurrency: int, ids: list[str]
) -> None:
    events.clear()
    clock = MockClock()
    clocks[:] = [clock]
    begin = clock.now()
    flow = FLOWS[cap]
    async with TestEngine(store, clock) as engine:
        for n, spec in enumerate(runs):
            options: dict[str, Any] = {"priority": spec.priority}
            if spec.group is not None:
                options["group"] = spec.group
            if spec.delay:
                options["delay"] = spec.delay
            flow_n = flow.with_options(**options)
            await wf.start(flow_n, f"r{n}", spec.hold, detach=True, run_id=ids[n])
        worker = wf.Worker(engine, concurrency=concurrency, poll=0.05)
        await worker.run(until_idle=True)
        records = await engine.store.list_runs(limit=100)
    assert [r.status for r in records] == [wf.RunStatus.COMPLETED] * len(runs)
    assert [r.id for r in records] == ids[: len(runs)][::-1], "listed newest-created first"
    check(runs, cap, concurrency, begin)


def check(runs: list[Spec], cap: int | None, concurrency: int, begin: float) -> None:
    start = {key: t for kind, key, t in events if kind == "start"}
    end = {key: t for kind, key, t in events if kind == "end"}
    order = [key for kind, key, _ in events if kind == "start"]
    spec = {f"r{n}": s for n, s in enumerate(runs)}
    assert sorted(start) == sorted(spec), "every run started once"
    for key, s in spec.items():
        assert start[key] >= begin + s.delay, f"{key} started before it was due"

    # In flight at once: never more than the caps allow (an end at t frees its place at t).
    level = peak = 0
    for kind, _key, _t in events:
        level += 1 if kind == "start" else -1
        peak = max(peak, level)
    assert peak <= concurrency
    if cap is not None:
        assert peak <= cap

    for group in ("a", "b"):
        lane = [k for k in sorted(spec, key=lambda k: int(k[1:])) if spec[k].group == group]
        assert [k for k in order if k in lane] == lane, f"group {group} out of order"
        for before, after in itertools.pairwise(lane):
            assert end[before] <= start[after], f"group {group}: {before} and {after} overlap"

    # Priorities among ungrouped runs: when one starts, none of higher priority that was due
    # is still waiting.
    free = [k for k in spec if spec[k].group is None]
    # Creation order among ungrouped equals (one priority, one due time), whatever the ids.
    for earlier, later in itertools.combinations(sorted(free, key=lambda k: int(k[1:])), 2):
        if (spec[earlier].priority, spec[earlier].delay) == (
            spec[later].priority,
            spec[later].delay,
        ):
            assert start[earlier] <= start[later], f"{later} started before {earlier}"
    for low in free:
        for high in free:
            if spec[high].priority <= spec[low].priority:
                continue
            due = begin + spec[high].delay
            if due <= start[low]:
                assert start[high] <= start[low], (
                    f"{low} (priority {spec[low].priority}) started before {high} "
                    f"(priority {spec[high].priority}), due since {due - begin:g} s"
                )
