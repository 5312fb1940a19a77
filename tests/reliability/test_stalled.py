"""Stalled runs, with real processes on every store: a step that ends its process
(``os._exit``) takes its ``wf worker`` down with it, and the next worker recovers the run (on
Redis too: a lease ends with its holder's connection, not its time to live). After
``max_recoveries`` deaths in a row without progress the run fails with
``wf.RunStalled`` naming the step, and the worker that says so drives the other runs; a run
that records progress between its crashes is never counted as stalled.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

import wf
from tests.reliability import stall_flows
from tests.reliability.test_queue_procs import (
    Target,
    finished,
    spawn,
    start_runs,
    target,  # noqa: F401  (the fixture)
    worker_errors,
)
from wf import Engine
from wf.engine._current import use_engine
from wf.store import RunStatus


def one_worker(where: Target) -> int:
    """A ``wf worker --until-idle`` driving one run at a time; its exit code."""
    worker = spawn(where, "--until-idle", "--concurrency", "1")
    try:
        return worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
        raise


def crashes(where: Target) -> list[str]:
    path = Path(where.env["WF_TORTURE_LOG"]) / "stall.log"
    return path.read_text().splitlines() if path.exists() else []


def result_error(where: Target, run_id: str) -> BaseException:
    async def go() -> BaseException:
        store = where.open()
        try:
            with use_engine(Engine(store)):
                with pytest.raises(wf.RunFailed) as caught:
                    await wf.get_run(run_id).result(timeout=5)
                return caught.value
        finally:
            await store.close()

    return asyncio.run(go())


def test_a_run_dying_in_a_step_fails_stalled_after_max_recoveries(target: Target) -> None:  # noqa: F811
    stalled, *others = start_runs(
        target, [(stall_flows.stalls, ()), *((stall_flows.healthy, (n,)) for n in range(3))]
    )
    # The first worker dies in ``crash`` after ``prepare`` completed (progress: not counted),
    # two more die in it without progress (max_recoveries=2); the fourth fails the run, then
    # drives the healthy runs and ends idle.
    exits = [one_worker(target) for _ in range(4)]
    assert exits == [1, 1, 1, 0], worker_errors(target)
    assert len(crashes(target)) == 3

    runs = finished(target, [stalled, *others])
    record, journal = runs[stalled]
    assert record.status is RunStatus.FAILED
    assert record.error is not None and record.error["type"] == "wf.RunStalled"
    message = record.error["message"]
    assert f"run {stalled} stalled: its driving process died 2 times in a row" in message
    assert "in step 'crash' (op 1)" in message
    assert [e["type"] for e in journal].count("run_failed") == 1
    resumed = [e for e in journal if e["type"] == "run_resumed"]
    # Where a drive's first step start is not written on its own (PostgreSQL, Redis: the
    # drive's marker is), the first death is counted without its step; the next, of a run
    # already died in, names it.
    first = [{"op": 1, "name": "crash"}] if target.kind == "local" else []
    assert [(e.get("recoveries"), e.get("steps")) for e in resumed] == [
        (None, None),
        (1, first),
    ]
    for run_id in others:
        assert runs[run_id][0].status is RunStatus.COMPLETED, run_id

    error = result_error(target, stalled)
    assert isinstance(error.__cause__, wf.RunStalled)
    assert error.__cause__.recoveries == 2
    assert "stalled" in worker_errors(target)

    # Failed, not retried: later workers leave it alone.
    assert one_worker(target) == 0
    assert len(crashes(target)) == 3


def test_a_run_that_progresses_between_crashes_is_never_stalled(target: Target) -> None:  # noqa: F811
    (run_id,) = start_runs(target, [(stall_flows.crashes_forward, (4,))])
    exits = [one_worker(target) for _ in range(5)]
    # Four deaths, each in a later step than the one before (max_recoveries=2).
    assert exits == [1, 1, 1, 1, 0], worker_errors(target)
    assert [line.split()[:2] for line in crashes(target)] == [
        ["crash_once", str(i)] for i in range(4)
    ]
    record, journal = finished(target, [run_id])[run_id]
    assert record.status is RunStatus.COMPLETED, record.error
    assert wf.decode(record.output) == [0, 1, 2, 3]
    counted = [e.get("recoveries") for e in journal if e["type"] == "run_resumed"]
    assert counted and set(counted) <= {1, None}


def workers_until_idle(where: Target, most: int, *args: str) -> list[int]:
    """``wf worker --until-idle`` again and again, as a supervisor would, until one exits 0."""
    exits: list[int] = []
    while len(exits) < most and (not exits or exits[-1] != 0):
        worker = spawn(where, "--until-idle", *args)
        try:
            exits.append(worker.wait(timeout=60))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
            raise
    return exits


def test_a_run_dying_in_its_own_code_fails_stalled_too(target: Target) -> None:  # noqa: F811
    stalled, healthy = start_runs(
        target, [(stall_flows.dies_in_its_code, ()), (stall_flows.healthy, (1,))]
    )
    exits = workers_until_idle(target, 8, "--concurrency", "1")
    assert exits[-1] == 0 and len(exits) <= 5, (exits, worker_errors(target))
    runs = finished(target, [stalled, healthy])
    record = runs[stalled][0]
    assert record.status is RunStatus.FAILED
    assert record.error is not None and record.error["type"] == "wf.RunStalled"
    assert "died 3 times in a row without recording progress" in record.error["message"]
    assert runs[healthy][0].status is RunStatus.COMPLETED


def test_a_run_that_kills_its_worker_does_not_stall_the_runs_beside_it(
    target: Target,  # noqa: F811
) -> None:
    """The runs claimed with it die with it; once they have died twice in a row, each is
    driven alone: the deaths that fail the poison are its own, and the others complete."""
    *others, bad = start_runs(
        target, [*((stall_flows.bystander, (n,)) for n in range(3)), (stall_flows.poison, ())]
    )
    exits = workers_until_idle(target, 16, "--concurrency", "8")
    assert exits[-1] == 0, (exits, worker_errors(target))
    runs = finished(target, [bad, *others])
    assert runs[bad][0].status is RunStatus.FAILED
    assert "died 4 times in a row" in (runs[bad][0].error or {}).get("message", "")
    for run_id in others:
        assert runs[run_id][0].status is RunStatus.COMPLETED, (run_id, runs[run_id][0].error)
