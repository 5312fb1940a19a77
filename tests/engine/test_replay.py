"""Suspension, replay on resume, durable time and divergence."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest

import wf
from wf import Engine
from wf.engine._workflow import _registry
from wf.testing import MockClock

counts: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    counts.clear()


@wf.step
def effect(name: str) -> str:
    counts[name] = counts.get(name, 0) + 1
    return name.upper()


@wf.workflow
async def remind(days: int) -> list[str]:
    first = await effect("before")
    await wf.sleep(dt.timedelta(days=days))
    second = await effect("after")
    return [first, second]


async def test_a_long_sleep_suspends_and_replay_skips_completed_steps(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    start = mock_clock.now()
    run = await wf.start(remind, 3)
    assert await run.result() == ["BEFORE", "AFTER"]
    assert counts == {"before": 1, "after": 1}
    assert mock_clock.now() - start >= 3 * 86400
    journal = await wf_engine.store.read_journal(run.id)
    types = [e["type"] for e in journal]
    assert "run_suspended" in types and "run_resumed" in types
    record = await run.record()
    assert record.resumes == 1


async def test_a_suspended_run_holds_no_lease_and_records_its_wake_time(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    run = await wf.start(remind, 2)
    await wf_engine.wait_driven(run)
    record = await run.record()
    assert record.status == wf.RunStatus.SUSPENDED
    assert record.wake_at == pytest.approx(mock_clock.now() + 2 * 86400, abs=1)
    assert [w["kind"] for w in record.waiting_for or ()] == ["sleep"]
    assert record.waiting_for and record.waiting_for[0]["until"] == record.wake_at
    lease = await wf_engine.store.try_acquire(run.id)
    assert lease is not None
    await lease.release()
    assert run.id not in wf_engine.live


@wf.workflow
async def sleepy_values() -> tuple[dt.datetime, float, uuid.UUID, dt.datetime]:
    stamp, number, ident = wf.now(), wf.random(), wf.uuid4()
    await wf.sleep(86400)
    return stamp, number, ident, wf.now()


async def test_now_random_and_uuid4_replay_the_same_values(wf_engine: Engine) -> None:
    run = await wf.start(sleepy_values)
    stamp, number, ident, later = await run.result()
    journal = await wf_engine.store.read_journal(run.id)
    recorded = [e for e in journal if e["type"] == "value_recorded"]
    assert [e["name"] for e in recorded] == ["now", "random", "uuid4", "now"]
    assert stamp.timestamp() == recorded[0]["value"]
    assert number == recorded[1]["value"]
    assert str(ident) == recorded[2]["value"] and ident.version == 4
    assert later - stamp >= dt.timedelta(days=1)
    assert stamp.tzinfo is not None


@wf.workflow
async def until_date(when: dt.datetime) -> str:
    await wf.sleep_until(when)
    return "woke"


async def test_sleep_until_waits_for_the_date(wf_engine: Engine, mock_clock: MockClock) -> None:
    when = dt.datetime.fromtimestamp(mock_clock.now(), dt.UTC) + dt.timedelta(hours=5)
    run = await wf.start(until_date, when)
    assert await run.result() == "woke"
    assert mock_clock.now() >= when.timestamp()


async def test_wake_up_ends_a_sleep_now(wf_engine: Engine, mock_clock: MockClock) -> None:
    mock_clock.autojump = False
    run = await wf.start(remind, 30)
    await wf_engine.wait_driven(run)
    assert await run.status() == wf.RunStatus.SUSPENDED
    assert await run.wake_up()
    assert await run.result() == ["BEFORE", "AFTER"]
    assert counts == {"before": 1, "after": 1}


async def test_starting_an_existing_id_never_runs_twice(wf_engine: Engine) -> None:
    first = await wf.start(remind, 1, run_id="order-42")
    second = await wf.start(remind, 1, run_id="order-42")
    assert first == second
    assert await second.result() == ["BEFORE", "AFTER"]
    assert counts == {"before": 1, "after": 1}


async def test_input_that_does_not_fit_is_refused_and_creates_no_run(wf_engine: Engine) -> None:
    with pytest.raises(wf.InputValidationError, match="days"):
        await wf.start(remind, "many")
    assert await wf_engine.store.list_runs() == []


# -- divergence -------------------------------------------------------------------------------


@wf.step
def alpha() -> str:
    return "a"


@wf.step
def beta() -> str:
    return "b"


def make_flow(first: wf.Step[[], str]) -> wf.Workflow[[], str]:
    async def evolving() -> str:
        value = await first()
        await wf.sleep(86400)
        return value

    return wf.workflow(name="tests:evolving")(evolving)


async def test_a_changed_workflow_fails_with_nondeterminism_error(wf_engine: Engine) -> None:
    old = make_flow(alpha)
    run = await wf.start(old)
    await wf_engine.wait_driven(run)
    assert await run.status() == wf.RunStatus.SUSPENDED
    make_flow(beta)  # a deploy: the same workflow name now calls another step first
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    assert info.value.error_type == "wf.NondeterminismError"
    original = info.value.original
    assert isinstance(original, wf.NondeterminismError)
    assert original.index == 0
    assert original.recorded == "step 'alpha'"
    assert original.current == "step 'beta'"
    assert original.location and "test_replay.py" in original.location
    # Both causes are named: a code change, and choices made on state no journal holds.
    assert 'wf.patched("change-id")' in str(original)
    assert "state outside its journal (a module-level object it changes" in str(original)


@wf.workflow(name="tests:swallows")
async def swallows_divergence() -> str:
    try:
        await beta()
    except Exception:
        return "swallowed"
    return "ran"


async def test_user_code_cannot_swallow_a_divergence(wf_engine: Engine) -> None:
    run = await wf.start(make_flow(alpha))
    await wf_engine.wait_driven(run)
    # A deploy: the name is another function's now (a process declares one function a name).
    _registry.pop("tests:evolving")
    wf.workflow(name="tests:evolving")(swallows_divergence.fn)
    try:
        with pytest.raises(wf.RunFailed, match=r"NondeterminismError|operation #0"):
            await run.result()
    finally:
        _registry.pop("tests:evolving")


# -- concurrent helpers that each call more than one step ------------------------------------
#
# Live, a helper's second step takes its op id when its first one ends; a replay resolves the
# recorded first steps at once, in id order, so it reaches the second calls in another order.
# That must never hand a call another call's result: the run fails with NondeterminismError.

gates: dict[int, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _gates() -> None:
    gates.clear()


def gate(i: int) -> asyncio.Event:
    return gates.setdefault(i, asyncio.Event())


@wf.step
async def tagged(i: int, phase: int, last: bool) -> str:
    """Phase 0 of item ``i`` ends once item ``i + 1`` ran its last phase (the last item's at
    once): the first steps end in reverse order, whatever the event loop does."""
    if phase == 0:
        await gate(i).wait()
    if last and i > 0:
        gate(i - 1).set()
    return f"item{i}-{phase}"


async def helper(i: int, steps: int) -> list[str]:
    """Item ``i``'s ``steps`` calls of one step, one after the other."""
    return [await tagged(i, phase, phase == steps - 1) for phase in range(steps)]


@wf.workflow(name="tests:gather_helpers")
async def gather_helpers(uneven: bool) -> list[list[str]]:
    gate(2).set()
    results = await asyncio.gather(*(helper(i, i + 2 if uneven else 2) for i in range(3)))
    await wf.sleep(86400)  # suspends: the resume replays the gather
    return list(results)


@wf.workflow(name="tests:taskgroup_helpers")
async def taskgroup_helpers() -> list[list[str]]:
    gate(2).set()
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(helper(i, 2)) for i in range(3)]
    await wf.sleep(86400)
    return [task.result() for task in tasks]


def _assert_argument_divergence(info: pytest.ExceptionInfo[wf.RunFailed]) -> None:
    assert info.value.error_type == "wf.NondeterminismError"
    original = info.value.original
    assert isinstance(original, wf.NondeterminismError)
    assert original.recorded is not None and original.current is not None
    assert original.recorded.startswith("step ") and "arguments" in original.recorded
    assert original.recorded != original.current
    assert "another call's operation id" in str(original)


@pytest.mark.parametrize("uneven", [False, True])
async def test_gather_of_multi_step_helpers_never_replays_another_calls_result(
    wf_engine: Engine, uneven: bool
) -> None:
    run = await wf.start(gather_helpers, uneven)
    await wf_engine.wait_driven(run)
    assert await run.status() == wf.RunStatus.SUSPENDED
    gates.clear()  # the replay must not depend on them: every step of the gather is recorded
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    _assert_argument_divergence(info)


async def test_taskgroup_of_multi_step_helpers_never_replays_another_calls_result(
    wf_engine: Engine,
) -> None:
    run = await wf.start(taskgroup_helpers)
    await wf_engine.wait_driven(run)
    assert await run.status() == wf.RunStatus.SUSPENDED
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    _assert_argument_divergence(info)


@wf.step
async def parked() -> str:
    await gate(99).wait()
    return "parked"


@wf.workflow(name="tests:gather_then_crash")
async def gather_then_crash() -> list[list[str]]:
    gate(2).set()
    results = await asyncio.gather(*(helper(i, i + 2) for i in range(3)))
    await parked()  # the driver is killed here
    return list(results)


async def test_a_crash_after_a_gather_of_helpers_is_caught_on_resume(wf_engine: Engine) -> None:
    run = await wf.start(gather_then_crash)
    async with asyncio.timeout(30):
        while not any(
            e["type"] == "step_started" and e["name"].endswith("parked")
            for e in await wf_engine.store.read_journal(run.id)
        ):
            await asyncio.sleep(0.01)
    await wf_engine.crash(run)
    gate(99).set()
    await wf_engine.settle()
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    _assert_argument_divergence(info)


@wf.step
async def double(x: int) -> int:
    return 2 * x


@wf.workflow(name="tests:concurrent_single_steps")
async def concurrent_single_steps() -> list[int]:
    first = list(await asyncio.gather(*(double(i) for i in range(3))))
    mapped = await wf.map(double, [5, 6])
    await wf.sleep(86400)
    return first + mapped + [await double(7)]


async def test_concurrent_steps_whose_ids_do_not_depend_on_timing_replay(
    wf_engine: Engine,
) -> None:
    run = await wf.start(concurrent_single_steps)
    assert await run.result() == [0, 2, 4, 10, 12, 14]
    assert (await run.record()).resumes == 1
