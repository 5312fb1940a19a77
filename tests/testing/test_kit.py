"""The public test kit: ``TestEngine`` with ``crash`` and ``settle``, and the pytest fixtures."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import wf
from wf.store.local import LocalStore
from wf.testing import TestEngine

calls: list[str] = []
gate: asyncio.Event | None = None
reached: asyncio.Event | None = None


@pytest.fixture(autouse=True)
def _reset() -> None:
    global gate, reached
    calls.clear()
    gate = reached = None


@wf.step
async def record(name: str) -> str:
    calls.append(name)
    if name == "blocked" and gate is not None and reached is not None:
        reached.set()
        await gate.wait()
    return name


@wf.workflow
async def three_steps() -> list[str]:
    return [await record("first"), await record("blocked"), await record("last")]


@wf.workflow
async def sleeper() -> str:
    await wf.sleep(7 * 86400)
    return await record("after a week")


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LocalStore | None:
    return None if request.param == "memory" else LocalStore(tmp_path / ".workflows")


async def test_a_crashed_driver_writes_nothing_more_and_settle_recovers_the_run(
    store: LocalStore | None,
) -> None:
    global gate, reached
    gate, reached = asyncio.Event(), asyncio.Event()
    async with TestEngine(store) as eng:
        run = await wf.start(three_steps)
        await asyncio.wait_for(reached.wait(), 10)
        journal_at_crash = await eng.real_store.read_journal(run.id)
        await eng.crash(run)
        gate.set()  # the step "returns" after the crash: nothing may be recorded of it
        await asyncio.sleep(0.01)
        assert await eng.real_store.read_journal(run.id) == journal_at_crash
        assert await run.status() == wf.RunStatus.RUNNING  # as a SIGKILL leaves it

        await eng.settle()
        assert await run.result() == ["first", "blocked", "last"]
        # The completed step replayed; the interrupted one ran again (at least once).
        assert calls == ["first", "blocked", "blocked", "last"]
    if store is not None:
        await store.close()


async def test_a_crashed_worker_driven_run_writes_nothing_more(store: LocalStore | None) -> None:
    """The same crash of a run a worker claimed (``settle`` drives runs as ``wf worker`` does,
    through ``Store.claim``): its driver is fenced as well, and the run is recovered."""
    global gate, reached
    gate, reached = asyncio.Event(), asyncio.Event()
    async with TestEngine(store) as eng:
        run = await wf.start(three_steps, detach=True)
        settling = asyncio.ensure_future(eng.settle())
        await asyncio.wait_for(reached.wait(), 10)
        await eng.crash(run)
        gate.set()  # the crashed attempt's step "returns": nothing may be recorded of it
        await asyncio.wait_for(settling, 20)
        assert await run.result() == ["first", "blocked", "last"]
        assert calls == ["first", "blocked", "blocked", "last"]
        completed = [
            e["op"]
            for e in await eng.real_store.read_journal(run.id)
            if e["type"] == "step_completed"
        ]
        assert completed == [0, 1, 2]  # the crashed attempt's end was never recorded
    if store is not None:
        await store.close()


@wf.workflow(name="kit:hook_waiter")
async def hook_waiter() -> str:
    return await wf.create_hook(str, token="kit-waiter").next()


@pytest.mark.timeout(60)
async def test_a_worker_driven_run_crashed_while_it_suspends_is_driven_again(
    store: LocalStore | None,
) -> None:
    """A crash that lands while a worker's drive suspends the run (the drive, cancelled then,
    goes on to record the suspension and meets the fence) leaves the run for the next driver:
    the worker saw its drive end with the crash and noted the run as damage, so every worker
    of the store skipped it for good (the wake-up model's 'no rest within 20 s: m0 due').
    The crash is tried at every point of the drive, one event-loop turn after another from its
    start."""
    crashed_drives = 0
    for turns in range(30):
        async with TestEngine(
            store, wf.testing.MockClock(autojump=False), suspend_after=0.0
        ) as eng:
            run = await wf.start(hook_waiter, run_id=f"waiter-{turns}", detach=True)
            worker = wf.Worker(eng, poll=0.01)
            working = asyncio.ensure_future(worker.run())
            # From the drive's start: the local store's claim and posts make their flushes in
            # threads, so how many loop turns the worker takes to get there is no constant.
            async with asyncio.timeout(10):
                while run.id not in eng.drivers:
                    await asyncio.sleep(0)
            for _ in range(turns):
                await asyncio.sleep(0)
            crashed_drives += run.id in eng.drivers
            await eng.crash(run)
            worker.stop()  # the process died: a new worker (``settle``'s) takes over
            await asyncio.wait_for(working, 10)

            await eng.settle(timeout=10)
            await wf.resume_hook("kit-waiter", "paid")
            await eng.settle(timeout=10)
            assert await run.status() == wf.RunStatus.COMPLETED, (
                turns,
                eng.store.faults.of_kind("run"),
            )
            assert await run.result() == "paid"
            assert not eng.store.faults.of_kind("run")
    assert crashed_drives >= 5  # the crash met the drive all along the way
    if store is not None:
        await store.close()


async def test_settle_delivers_timers_on_the_fake_clock(store: LocalStore | None) -> None:
    async with TestEngine(store) as eng:
        start = eng.mock_clock.now()
        run = await wf.start(sleeper, detach=True)
        assert await run.status() == wf.RunStatus.PENDING
        await eng.settle()
        assert await run.status() == wf.RunStatus.COMPLETED
        assert eng.mock_clock.now() - start >= 7 * 86400
    if store is not None:
        await store.close()


def test_the_fixtures_need_no_pytest_asyncio_configuration(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import wf

        @wf.step
        def double(x: int) -> int:
            return 2 * x

        @wf.workflow
        async def flow(x: int) -> int:
            await wf.sleep(3600)
            return await double(x)

        async def test_flow(wf_engine, mock_clock):
            start = mock_clock.now()
            run = await wf.start(flow, 21)
            assert await run.result() == 42
            assert mock_clock.now() - start >= 3600
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:asyncio", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


async def test_leaving_an_engine_abandons_its_drivers_and_frees_their_runs() -> None:
    global gate, reached
    gate, reached = asyncio.Event(), asyncio.Event()
    store = wf.testing.MemoryStore()
    async with TestEngine(store) as eng:
        run = await wf.start(three_steps)
        await asyncio.wait_for(reached.wait(), 10)
    assert not [t for t in eng.drivers.values() if not t.done()]
    assert await store.try_acquire(run.id) is not None  # released: any process may resume it


@wf.workflow
async def approval(expense_id: str) -> str:
    await record("before the hook")
    hook = wf.create_hook(bool, token=f"approve:{expense_id}")
    return "approved" if await hook.next() else "rejected"


async def test_resume_hook_right_after_start_waits_for_the_run_to_create_its_hook() -> None:
    """The first hook test a user writes: the run has not reached ``create_hook`` when the test
    resumes it; on a test engine ``wf.resume_hook`` lets the runs go quiet before it looks."""
    async with TestEngine():
        run = await wf.start(approval, "e-1")
        await wf.resume_hook("approve:e-1", True)
        assert await run.result() == "approved"


async def test_a_token_no_run_creates_is_still_refused_saying_why_it_may_be_missing() -> None:
    async with TestEngine():
        with pytest.raises(wf.HookError, match="or not created yet: a run registers its hook"):
            await wf.resume_hook("nobody", True)


async def test_quiet_gives_up_on_a_loop_that_never_goes_quiet() -> None:
    """A run that sleeps forever on a jumping clock never lets the loop go quiet: resuming an
    unknown token still ends (refused) instead of waiting for it."""
    async with TestEngine():
        await wf.start(forever)
        with pytest.raises(wf.HookError):
            await asyncio.wait_for(wf.resume_hook("nobody", True), 30)


@wf.workflow
async def forever() -> None:
    while True:
        await wf.sleep(1)


step_gate = threading.Event()


@wf.step
def blocked_step() -> str:
    step_gate.wait(10)
    return "done"


@wf.workflow
async def held() -> str:
    return await blocked_step()


async def test_quiet_waits_for_a_blocked_sync_step_only_a_second() -> None:
    """A sync step blocked until after the test's next move keeps the loop busy: resuming an
    unknown token meanwhile is refused within a bounded time, not once the step ends."""
    step_gate.clear()
    async with TestEngine():
        run = await wf.start(held)
        await asyncio.sleep(0.05)  # the step's thread started
        began = time.monotonic()
        with pytest.raises(wf.HookError):
            await wf.resume_hook("nobody", True)
        assert time.monotonic() - began < 3
        step_gate.set()
        assert await run.result() == "done"


def test_the_kits_docstring_examples_await_every_coroutine_method() -> None:
    """An example's un-awaited ``eng.crash(run)`` crashes nothing, and the test copied from it
    passes without testing what it says."""
    import inspect
    import re

    texts = [wf.testing.__doc__ or "", TestEngine.__doc__ or ""]
    calls = [
        (line, match.group(1))
        for text in texts
        for line in text.splitlines()
        for match in re.finditer(r"\beng\.(\w+)\(", line)
    ]
    assert calls
    for line, name in calls:
        if inspect.iscoroutinefunction(getattr(TestEngine, name)):
            assert f"await eng.{name}(" in line, line


def test_an_async_test_marked_wf_runs_without_the_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import wf

        @wf.workflow
        async def flow() -> str:
            await wf.sleep(3600)
            return "done"

        @pytest.mark.wf
        async def test_own_engine():
            async with wf.testing.TestEngine():
                assert await (await wf.start(flow)).result() == "done"
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:asyncio", "-p", "no:cacheprovider", "--strict-markers"
    )
    result.assert_outcomes(passed=1)
