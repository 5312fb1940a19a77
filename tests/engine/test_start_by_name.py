"""``wf.start`` by name (``wf.ref`` / ``"module:attr"``): a producer that never imports the
workflow's module creates the run; the worker that drives it imports the workflow, validates
the input, adopts its declared caps and attempts, and fails (once, clearly) a run whose queue
placement does not match the declaration."""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from collections.abc import Iterator

import pytest

import wf
from wf import Engine
from wf.engine._workflow import _registry

FLOWS = "tests.engine.byname_flows"


async def _drain(engine: Engine) -> None:
    await wf.Worker(engine, concurrency=4).run(until_idle=True)


async def test_a_run_started_by_name_is_validated_and_driven_by_the_worker(
    wf_engine: Engine,
) -> None:
    run = await wf.start(f"{FLOWS}:charge", {"id": "o-1", "cents": "1299"}, detach=True)
    record = await run.record()
    assert record.by_name == []
    assert (record.workflow, record.target, record.limits) == (
        f"{FLOWS}:charge",
        f"{FLOWS}:charge",
        None,
    )
    await _drain(wf_engine)
    assert await run.result() == "receipt-o-1-1299"  # "1299" validated into an int
    done = await run.record()
    # The declaration's caps and attempts were adopted by the driver.
    assert (done.by_name, done.limits, done.max_attempts) == (None, {"concurrency": 2}, 3)


async def test_an_invalid_input_fails_the_run_once_with_the_input_error(wf_engine: Engine) -> None:
    run = await wf.start(wf.ref(f"{FLOWS}:charge"), {"id": "o-2"}, detach=True)
    await _drain(wf_engine)
    with pytest.raises(wf.RunFailed) as failed:
        await run.result()
    assert failed.value.error_type.endswith("InputValidationError")
    assert "cents" in failed.value.message
    assert (await run.record()).attempt == 1  # not retried, though the workflow allows 3


async def test_options_by_name_and_the_producers_attempts_win(wf_engine: Engine) -> None:
    ref = wf.ref(f"{FLOWS}:charge", returns=str).with_options(priority=5, max_attempts=1)
    run = await wf.start(ref, {"id": "o-3", "cents": 1}, detach=True)
    record = await run.record()
    assert (record.priority, record.max_attempts, record.by_name) == (
        5,
        1,
        ["max_attempts", "priority"],
    )
    await _drain(wf_engine)
    result: str = await run.result()
    assert result == "receipt-o-3-1"
    assert (await run.record()).max_attempts == 1


async def test_a_placement_the_declaration_contradicts_fails_once_saying_what_to_pass(
    wf_engine: Engine,
) -> None:
    unqueued = await wf.start(f"{FLOWS}:queued", 1, detach=True)
    ungrouped = await wf.start(f"{FLOWS}:per_user", "bob", 1, detach=True)
    await _drain(wf_engine)
    with pytest.raises(wf.RunFailed, match=r"with_options\(queue='billing'\)"):
        await unqueued.result()
    with pytest.raises(wf.RunFailed, match=r"with_options\(group='bob'\)"):
        await ungrouped.result()

    queued = await wf.start(wf.ref(f"{FLOWS}:queued").with_options(queue="billing"), 1)
    grouped = await wf.start(wf.ref(f"{FLOWS}:per_user").with_options(group="bob"), "bob", 2)
    await _drain(wf_engine)
    assert await queued.result() == 2
    assert await grouped.result() == "bob:2"


async def test_a_group_function_that_places_the_run_in_no_lane_needs_no_group_by_name(
    wf_engine: Engine,
) -> None:
    loose = await wf.start(f"{FLOWS}:maybe_per_user", "", 1, detach=True)
    placed = await wf.start(f"{FLOWS}:maybe_per_user", "ann", 2, detach=True)
    await _drain(wf_engine)
    assert await loose.result() == "nobody:1"
    with pytest.raises(wf.RunFailed, match=r"with_options\(group='ann'\)"):
        await placed.result()


async def test_a_workflow_named_apart_from_its_target(wf_engine: Engine) -> None:
    wrong = await wf.start(f"{FLOWS}:renamed", detach=True)
    right = await wf.start(wf.ref("custom-name", target=f"{FLOWS}:renamed"), detach=True)
    await _drain(wf_engine)
    with pytest.raises(wf.RunFailed, match="declares the workflow 'custom-name'"):
        await wrong.result()
    assert await right.result() == "renamed"


async def test_the_same_id_by_name_returns_the_run(wf_engine: Engine) -> None:
    first = await wf.start(f"{FLOWS}:queued", 1, run_id="by-name-1", detach=True)
    again = await wf.start(f"{FLOWS}:queued", 1, run_id="by-name-1", detach=True)
    assert first.id == again.id
    with pytest.raises(wf.RunAlreadyExists):
        await wf.start(f"{FLOWS}:queued", 2, run_id="by-name-1", detach=True)


@pytest.mark.parametrize("name", ["", "no-colon", ":attr", "module:"])
def test_a_reference_needs_a_target(name: str) -> None:
    with pytest.raises(wf.UsageError):
        wf.ref(name)


def test_reference_options_are_validated() -> None:
    ref = wf.ref(f"{FLOWS}:charge")
    with pytest.raises(wf.UsageError):
        ref.with_options(priority=-1)
    with pytest.raises(wf.UsageError):
        ref.with_options(group_concurrency=0)
    with pytest.raises(wf.UsageError):
        ref.with_options(colour="red")


async def test_the_declared_cap_holds_runs_started_by_name(wf_engine: Engine) -> None:
    runs = [
        await wf.start(f"{FLOWS}:charge", {"id": f"o-{i}", "cents": i}, detach=True)
        for i in range(10)
    ]
    await _drain(wf_engine)
    assert [await run.result() for run in runs] == [f"receipt-o-{i}-{i}" for i in range(10)]


@pytest.mark.parametrize(
    "target",
    [f"{FLOWS}:no_such_flow", "tests.engine.no_such_module:flow"],
    ids=["name", "module"],
)
@pytest.mark.parametrize("by_name", [True, False], ids=["by-name", "declared"])
async def test_a_run_no_worker_can_load_ends_when_cancelled(
    wf_engine: Engine, target: str, by_name: bool
) -> None:
    """A worker leaves a run it cannot load queued for one that can; a cancel ends it there
    and then, since none of its code ever ran (else a run named by a typo never ends)."""
    if by_name:
        run = await wf.start(target, {}, detach=True)
    else:
        run = await wf.start(f"{FLOWS}:charge", {"id": "o-9", "cents": 1}, detach=True)
        record = await run.record()
        record.workflow = record.target = target  # as if its workflow were gone since
        lease = await wf_engine.store.try_acquire(run.id)
        assert lease is not None
        await lease.save(record)
        await lease.release()
    worker = wf.Worker(wf_engine, concurrency=4, on_error=lambda run_id, error: None)
    await worker.run(until_idle=True)
    assert (await run.status()) is wf.RunStatus.PENDING  # left for a worker that can load it
    await run.cancel()
    await wf.Worker(wf_engine, concurrency=4, on_error=lambda run_id, error: None).run(
        until_idle=True
    )
    with pytest.raises(wf.RunCancelled):
        await run.result()
    assert (await run.record()).cancel_requested


@pytest.mark.parametrize(
    "target",
    [f"{FLOWS}:no_such_flow", "tests.engine.no_such_module:flow"],
    ids=["name", "module"],
)
async def test_a_run_started_by_name_here_that_cannot_load_stays_pending(
    wf_engine: Engine, target: str
) -> None:
    # Was: left `running` for ever (its creator's drive marked it so, then gave up), which
    # `wf runs` showed with a growing duration and `wf inspect` as a run whose driver died.
    run = await wf.start(target, {})  # driven here at once: this process cannot load it
    with pytest.raises(wf.LoadError):
        await run.result()
    assert (await run.status()) is wf.RunStatus.PENDING  # left for a worker that can load it
    await wf.Worker(wf_engine, concurrency=4, on_error=lambda run_id, error: None).run(
        until_idle=True
    )
    assert (await run.status()) is wf.RunStatus.PENDING
    await run.cancel()
    await wf.Worker(wf_engine, concurrency=4, on_error=lambda run_id, error: None).run(
        until_idle=True
    )
    with pytest.raises(wf.RunCancelled):
        await run.result()


@wf.workflow
async def quick() -> str:
    return "quick"


@pytest.fixture
def slow_module() -> Iterator[str]:
    """``tests.engine.slow_byname``, not imported yet (each test imports it afresh)."""
    from tests.serve._gate import GATE, TIMED_OUT

    name = "tests.engine.slow_byname"
    GATE.clear()
    TIMED_OUT.clear()
    yield name
    GATE.set()
    sys.modules.pop(name, None)
    _registry.pop(f"{name}:slow_one", None)


@pytest.mark.stores("memory", "local")
async def test_a_slow_import_stalls_no_other_run_the_worker_drives(
    wf_engine: Engine, slow_module: str
) -> None:
    from tests.serve._gate import GATE, TIMED_OUT

    slow = await wf.start(f"{slow_module}:slow_one", detach=True)
    fast = await wf.start(quick, detach=True)
    worker = asyncio.ensure_future(_drain(wf_engine))
    began = time.monotonic()
    try:
        async with asyncio.timeout(10):
            assert await fast.result() == "quick"
        took = time.monotonic() - began
    finally:
        GATE.set()
    async with asyncio.timeout(10):
        await worker
    assert took < 2.5  # the import waits up to 5 s, for the gate this test opens only now
    assert await slow.result() == "loaded"
    assert TIMED_OUT == [False]


@pytest.mark.stores("memory", "local")
async def test_a_module_raising_keyboard_interrupt_is_its_runs_fault_not_the_workers(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # Imported off the main thread, the module's own KeyboardInterrupt is a load error of
    # its run (which waits for a worker that loads it), not a Ctrl-C ending the worker.
    name = "tests.engine.interrupting_byname"
    broken = await wf.start(f"{name}:flow", detach=True)
    fine = await wf.start(quick, detach=True)
    try:
        async with asyncio.timeout(10):
            await _drain(wf_engine)
    finally:
        sys.modules.pop(name, None)
    assert await fine.result() == "quick"
    assert (await broken.status()) is wf.RunStatus.PENDING
    assert f"run {broken.id}: error while importing {name!r}" in caplog.text
    assert "KeyboardInterrupt: raised by the module" in caplog.text


@pytest.mark.stores("memory", "local")
async def test_a_workflow_its_module_declared_before_failing_to_import_is_not_run(
    wf_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    name = "tests.engine.half_imported_byname"
    try:
        for _ in range(2):  # the second start once the first import failed
            run = await wf.start(f"{name}:flow", detach=True)
            async with asyncio.timeout(10):
                await _drain(wf_engine)
            assert (await run.status()) is wf.RunStatus.PENDING  # waits for a loadable module
    finally:
        sys.modules.pop(name, None)
        _registry.pop(f"{name}:flow", None)
    assert "the module fails below its workflow" in caplog.text


async def test_a_module_may_start_and_await_its_own_workflow_as_it_is_imported() -> None:
    # The importing thread is handed its own partial module; only another thread waits for
    # the import to end (which here would be for ever: it waits for the run).
    name = "tests.engine.self_starting_byname"
    try:
        module = await asyncio.to_thread(importlib.import_module, name)
        assert module.RESULT == 2
    finally:
        sys.modules.pop(name, None)
        _registry.pop(f"{name}:plus_one", None)
