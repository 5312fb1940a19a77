"""Crashes: N runs × M steps, worker processes SIGKILLed at random moments K times.

After each kill the journals on disk are checked as a new process would find them (every line
JSON, a torn line only at the very end); then new workers are started. At the end a last worker
finishes everything, and for every run:

* it completed, with the right output;
* its journal is valid: op ids contiguous, each step completed exactly once, one outcome;
* the execution whose completion the journal recorded is the *last* execution of that step: once
  a completion is durable the step never runs again;
* every other execution of the step was cut short by a kill (its process was SIGKILLed) and each
  kill caused at most one extra execution of it: an interrupted step ran at most once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.reliability import _check, flows
from tests.reliability.conftest import report
from wf import Engine
from wf.engine._current import use_engine
from wf.store.local import LocalStore


async def create_runs(store: Path, runs: int, steps: int, pause: float, nap: float) -> list[str]:
    """Queue the runs (detached: only workers drive them); returns their ids (``r<n>`` keys)."""
    import wf

    local = LocalStore(store)
    ids = []
    try:
        with use_engine(Engine(local)):
            for n in range(runs):
                run = await wf.start(flows.counted, f"r{n}", steps, pause, nap, detach=True)
                ids.append(run.id)
    finally:
        await local.close()
    return ids


def test_sigkill_workers_at_random_moments(tmp_path: Path, long_form: bool) -> None:
    runs, steps, kills = (60, 100, 30) if long_form else (12, 20, 6)
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    store, log = tmp_path / ".workflows", tmp_path / "log"
    log.mkdir()
    # Steps take up to 0.2 s and runs nap (suspend) every third step, so a run lasts a few
    # seconds and the kills land at every stage of it: in steps, between them, while suspending.
    ids = asyncio.run(create_runs(store, runs, steps, pause=0.2, nap=0.2))
    keys = {run_id: f"r{n}" for n, run_id in enumerate(ids)}

    killed: set[int] = set()
    torn_seen = 0
    extra = {"WF_SUSPEND_AFTER": "0"}  # naps suspend: runs hop between worker processes
    for _ in range(kills):
        workers = [_check.spawn_worker(store, log, **extra) for _ in range(rng.choice((1, 2)))]
        time.sleep(rng.uniform(0.5, 1.5))  # start-up takes ~0.4 s: most kills land mid-work
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
        for worker in workers:
            worker.wait()
            killed.add(worker.pid)
        # What a restarting process finds: only whole lines, except perhaps a torn last one.
        torn_seen += sum(j.torn_tail for j in _check.journals(store).values())

    before_final = sum(
        e["type"] == "step_completed" for j in _check.journals(store).values() for e in j.events
    )
    final = _check.spawn_worker(store, log, "--until-idle", **extra)
    try:
        assert final.wait(timeout=300 if long_form else 120) == 0, _check.worker_errors(log)
    except subprocess.TimeoutExpired:
        final.kill()
        raise
    assert "Traceback" not in _check.worker_errors(log), _check.worker_errors(log)

    journals = _check.journals(store)
    extra_runs = 0
    for run_id in ids:
        journal = journals[run_id]
        recorded = _check.check_steps(journal, steps)
        record = _check.read_journal(journal.path).events[-1]
        assert _check._plain(record["output"]) == flows.expected_total(steps), run_id
        by_index: dict[int, list[_check.Execution]] = {}
        for execution in _check.executions(log, keys[run_id]):
            by_index.setdefault(execution.index, []).append(execution)
        for index in range(steps):
            runs_of_step = sorted(by_index.get(index, []), key=lambda e: e.start)
            assert runs_of_step, f"{run_id}: step {index} never ran"
            # The recorded execution is the last one: after it, the step never ran again.
            assert runs_of_step[-1].exec == recorded[index], (run_id, index, runs_of_step)
            earlier = runs_of_step[:-1]
            # Each earlier execution was cut short by a kill, at most one per killed process.
            assert all(e.pid in killed for e in earlier), (run_id, index, earlier)
            assert len({e.pid for e in earlier}) == len(earlier), (run_id, index, earlier)
            extra_runs += len(earlier)
    report(
        f"crash: N={runs} runs x M={steps} steps, K={kills} kill rounds "
        f"({len(killed)} worker processes SIGKILLed, seed {seed}; {before_final} of {runs * steps} "
        f"steps were done when the kills stopped): all {runs} runs completed; "
        f"every recorded step ran exactly once after its completion was durable; "
        f"{extra_runs} interrupted step executions re-ran (each at most once per kill); "
        f"torn journal tails seen after kills: {torn_seen}, all repaired; journals valid"
    )


def test_a_helper_forked_by_a_step_does_not_keep_a_killed_workers_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step forks a helper that sleeps a minute, inheriting the worker's descriptors (the
    run's journal, locked with ``flock``: the lock belongs to the open file description). The
    worker SIGKILLed mid-run, the next worker takes the run over at once, as for any orphan,
    not when the helper exits."""
    import wf

    store, log = tmp_path / ".workflows", tmp_path / "log"
    log.mkdir()
    monkeypatch.setenv("WF_TORTURE_LOG", str(log))

    async def start() -> str:
        local = LocalStore(store)
        try:
            with use_engine(Engine(local)):
                run = await wf.start(flows.forks, "f", 60.0, detach=True)
                return run.id
        finally:
            await local.close()

    run_id = asyncio.run(start())
    trace = flows.log_path("f")
    worker = _check.spawn_worker(store, log)
    helper = 0
    try:
        deadline = time.monotonic() + 30
        while "start" not in (trace.read_text() if trace.exists() else ""):
            assert time.monotonic() < deadline, _check.worker_errors(log)
            assert worker.poll() is None, _check.worker_errors(log)
            time.sleep(0.05)
        helper = int(trace.read_text().split("helper ")[1].split()[0])
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        os.kill(helper, 0)  # the helper lives on, and would for a minute
        began = time.monotonic()
        final = _check.spawn_worker(store, log, "--until-idle")
        try:
            assert final.wait(timeout=30) == 0, _check.worker_errors(log)
        except subprocess.TimeoutExpired:
            final.kill()
            final.wait()
            raise
        took = time.monotonic() - began
        assert took < 20, f"the run waited {took:.1f} s for the helper"

        async def outcome() -> list[int]:
            local = LocalStore(store)
            try:
                with use_engine(Engine(local)):
                    return await wf.get_run(run_id).result(timeout=5)
            finally:
                await local.close()

        assert asyncio.run(outcome()) == [helper, final.pid]
    finally:
        worker.kill()
        worker.wait()
        if helper:
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper, signal.SIGKILL)
