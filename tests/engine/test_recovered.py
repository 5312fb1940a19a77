"""A run whose last driver died: every driver says so before it drives it again, and a process
that drives such runs apart (``Engine.drive_apart``, set by ``wf serve``) hands them over
instead of running their code itself. Deaths are simulated as in ``test_stalled``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

import wf
from tests.engine.test_stalled import _reset, die_in_step, passes, plain, stuck
from tests.engine.test_store_outage import _cut_steps
from wf import Engine
from wf.engine._alone import START_GRACE
from wf.store import RunStatus, Store
from wf.testing import MockClock, TestEngine

_ = _reset  # its autouse: each test begins with no step let through


def recovered_lines(caplog: pytest.LogCaptureFixture, run_id: str) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == "wf"]
    return [line for line in lines if line.startswith(f"run {run_id} (")]


async def test_a_driver_names_the_run_its_step_and_deaths_before_driving_it_again(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wf")
    run = await wf.start(stuck.with_options(max_recoveries=3), detach=True)
    assert await die_in_step(wf_engine, run.id, 1) is None
    assert recovered_lines(caplog, run.id) == []  # its first drive: nobody died before it
    # That death came after progress (``prepare``): the journal does not count it, the record
    # (running, nobody driving) still tells of it.
    assert await die_in_step(wf_engine, run.id, 1) is None
    assert await die_in_step(wf_engine, run.id, 1) is None
    passes.add(1)
    assert (await wf_engine.drive_soon(run.id)) is not None
    assert await run.result() == 1
    name = stuck.name
    assert recovered_lines(caplog, run.id) == [
        f"run {run.id} ({name}): its last driver died; driving it again (death limit 3)",
        f"run {run.id} ({name}): its last driver died during step 'hang'; driving it again "
        "(death limit 3)",
        f"run {run.id} ({name}): its last 2 drivers died during step 'hang'; driving it again "
        "(death limit 3)",
    ]


async def test_runs_whose_drivers_never_died_are_driven_without_a_word(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wf")
    passes.add(7)
    queued = await wf.start(plain, detach=True)
    assert (await wf_engine.drive_soon(queued.id)) is not None
    here = await wf.start(plain)
    assert (await queued.result(), await here.result()) == (7, 7)
    assert recovered_lines(caplog, queued.id) == recovered_lines(caplog, here.id) == []


async def test_a_process_that_drives_apart_hands_such_runs_over_with_their_lease(
    wf_engine: Engine,
) -> None:
    handed: list[str] = []
    said: list[str] = []

    async def apart(run_id: str, saying: Callable[[str], str]) -> None:
        # The other process takes the lease itself: it is free by now.
        lease = await wf_engine.store.try_acquire(run_id)
        assert lease is not None
        await lease.release()
        handed.append(run_id)
        said.append(saying("in a process of its own, pid 4242"))

    passes.add(7)
    healthy = await wf.start(plain, detach=True)
    wf_engine.drive_apart = apart
    assert (await wf_engine.drive_soon(healthy.id)) is not None
    assert await healthy.result() == 7
    passes.clear()

    run = await wf.start(plain.with_options(max_recoveries=2), detach=True)
    assert await die_in_step(wf_engine, run.id, 7) is None  # its first drive, here
    record = await wf_engine.drive_soon(run.id)
    assert handed == [run.id]  # its code did not run here
    assert record is not None and record.status is RunStatus.RUNNING
    # Said once, by what drives it apart, with where: not here as well.
    assert said == [
        f"run {run.id} ({plain.name}): its last driver died during step 'hang'; driving it in "
        "a process of its own, pid 4242 (death limit 2)"
    ]

    # The other process's deaths are the run's: at the limit it fails stalled, here (no code
    # of it runs to fail it).
    wf_engine.drive_apart = None
    assert await die_in_step(wf_engine, run.id, 7) is None
    wf_engine.drive_apart = apart
    ended = await wf_engine.drive_soon(run.id)
    assert ended is not None and ended.status is RunStatus.FAILED
    assert handed == [run.id]
    with pytest.raises(wf.RunFailed) as caught:
        await run.result()
    assert isinstance(caught.value.original, wf.RunStalled)


async def test_a_run_taken_before_its_creator_drove_it_is_no_death(
    wf_engine: Engine,
    engine_store: Store,
    mock_clock: MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Created to be driven at once by another process (here, another engine that drives
    nothing), and claimed here before its creator took its lease: no driver died."""
    caplog.set_level(logging.WARNING, logger="wf")
    passes.add(7)
    async with TestEngine(engine_store, mock_clock) as creator:
        creator.may_drive = False  # as if this engine's claim came first
        run = await creator.start(plain, (), {})
        assert (await run.record()).status is RunStatus.RUNNING
    assert (await wf_engine.drive_soon(run.id)) is not None
    assert await wf.get_run(run.id).result() == 7
    assert recovered_lines(caplog, run.id) == []
    # Nor does the drive look like a recovery in the journal: no death is named there.
    journal = await wf_engine.store.read_journal(run.id)
    assert not any(e.get("recoveries") for e in journal)


async def test_a_creator_that_died_in_its_first_drive_is_still_said(
    wf_engine: Engine,
    engine_store: Store,
    mock_clock: MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="wf")
    async with TestEngine(engine_store, mock_clock) as creator:
        run = await creator.start(plain.with_options(max_recoveries=3), (), {})
        assert await die_in_step(creator, run.id, 7) is None  # its first drive, in its creator
    # Past the grace a creator has to take its run, a run left running is a death.
    mock_clock.jump(START_GRACE)
    passes.add(7)
    assert (await wf_engine.drive_soon(run.id)) is not None
    assert await wf.get_run(run.id).result() == 7
    assert len(recovered_lines(caplog, run.id)) == 1
    assert "died" in recovered_lines(caplog, run.id)[0]


gates: dict[str, asyncio.Event] = {}


@wf.step
async def waits_for_gate() -> int:
    await gates["lane"].wait()
    return 1


@wf.workflow(group="lane")
async def in_lane(i: int) -> int:
    return await waits_for_gate()


async def test_a_run_held_before_its_first_drive_began_is_pending_not_dead(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wf")
    gates["lane"] = asyncio.Event()
    first = await wf.start(in_lane, 1)
    second = await wf.start(in_lane, 2)  # created running, to be driven here at once
    async with asyncio.timeout(10):
        while second.id not in wf_engine.holds:
            await asyncio.sleep(0.01)
    # Held by its lane: pending (and ``wf inspect`` says why), not a run its driver left.
    assert (await second.record()).status is RunStatus.PENDING
    gates["lane"].set()
    assert (await first.result(), await second.result()) == (1, 1)
    assert recovered_lines(caplog, second.id) == []


@wf.step
async def add_one(x: int) -> int:
    return x + 1


@wf.workflow
async def counts(x: int) -> int:
    return await add_one(await add_one(x))


@pytest.mark.stores("memory")
async def test_a_run_whose_drive_was_cut_is_driven_here_not_apart(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A drive that lost its store connection leaves the run running, as a dead driver does,
    but this process saw it end: its next drive is no recovery, and a process that drives
    recovered runs apart (``wf serve``) drives it itself rather than start a process for it."""
    caplog.set_level(logging.WARNING, logger="wf")
    handed: list[str] = []

    async def apart(run_id: str, saying: Callable[[str], str]) -> None:
        handed.append(run_id)

    wf_engine.drive_apart = apart
    run = await wf.start(counts, 1, detach=True)
    failed = _cut_steps(monkeypatch, 1)
    with pytest.raises(wf.StoreUnavailable):
        await wf_engine.drive_soon(run.id)
    assert failed == [1]
    assert (await run.record()).status is RunStatus.RUNNING
    record = await wf_engine.drive_soon(run.id)
    assert record is not None and record.status is RunStatus.COMPLETED
    assert await run.result() == 3
    assert handed == []
    assert recovered_lines(caplog, run.id) == []


async def test_a_run_started_here_is_leased_before_start_returns(wf_engine: Engine) -> None:
    """A worker elsewhere finds the run taken: the start took its lease before it returned,
    not when the loop first ran its drive."""
    run = await wf.start(plain)
    assert await wf_engine.store.try_acquire(run.id) is None
    passes.add(7)
    assert await run.result() == 7


async def test_a_start_cancelled_while_it_takes_the_lease_still_drives_its_run(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run exists once created: a start cancelled while it takes the run's first lease
    leaves the run driven here, as a start cancelled after it returned does."""
    taking = asyncio.Event()
    real = wf_engine.store.try_acquire

    async def slow_first(run_id: str) -> object:
        monkeypatch.setattr(wf_engine.store, "try_acquire", real)
        taking.set()
        await asyncio.sleep(3600)
        raise AssertionError("not cancelled")

    monkeypatch.setattr(wf_engine.store, "try_acquire", slow_first)
    passes.add(7)
    start = asyncio.create_task(wf.start(plain, run_id="cancelled-start"))
    await asyncio.wait_for(taking.wait(), 5.0)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    run = wf.get_run("cancelled-start")
    for _ in range(200):  # driven with nobody asking for its result
        if (await run.record()).status is RunStatus.COMPLETED:
            break
        await asyncio.sleep(0.01)
    assert (await run.record()).status is RunStatus.COMPLETED
    assert await run.result() == 7


async def test_a_run_held_before_any_drive_began_here_or_in_its_creator_is_pending(
    wf_engine: Engine,
    engine_store: Store,
    mock_clock: MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Taken before its creator took it, and held by its lane: pending, so that the claims
    that find it held again and again never read it as a run its driver left."""
    caplog.set_level(logging.WARNING, logger="wf")
    gates["lane"] = asyncio.Event()
    first = await wf.start(in_lane, 1)
    async with TestEngine(engine_store, mock_clock) as creator:
        creator.may_drive = False  # as if this engine's claim came first
        second = await creator.start(in_lane, (2,), {})
    assert (await wf_engine.drive_soon(second.id)) is None
    assert second.id in wf_engine.holds
    assert (await wf.get_run(second.id).record()).status is RunStatus.PENDING
    gates["lane"].set()
    assert (await first.result(), await wf.get_run(second.id).result()) == (1, 1)
    assert recovered_lines(caplog, second.id) == []
