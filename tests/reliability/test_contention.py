"""Contention: 4 worker processes over one store and many runs whose naps suspend them, so that
runs hop between processes. Nothing is killed, so every step must run exactly once, and:

* no run is driven by two processes at once: within a run, no two step executions overlap in
  time (``time.monotonic`` is one clock for all processes of the machine);
* no journal entry is lost or duplicated: op ids contiguous, each step completed exactly once;
* no run is stuck: all of them complete before the workers go idle.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from pathlib import Path

from tests.reliability import _check
from tests.reliability.conftest import report
from tests.reliability.test_crash import create_runs

WORKERS = 4


def test_four_workers_share_one_store(tmp_path: Path, long_form: bool) -> None:
    runs, steps = (1000, 9) if long_form else (200, 9)
    store, log = tmp_path / ".workflows", tmp_path / "log"
    log.mkdir()
    ids = asyncio.run(create_runs(store, runs, steps, pause=0.002, nap=0.05))
    keys = {run_id: f"r{n}" for n, run_id in enumerate(ids)}

    started = time.monotonic()
    extra = {"WF_SUSPEND_AFTER": "0"}
    workers = [
        _check.spawn_worker(store, log, "--until-idle", "--concurrency", "50", **extra)
        for _ in range(WORKERS)
    ]
    try:
        for worker in workers:
            assert worker.wait(timeout=600 if long_form else 150) == 0, _check.worker_errors(log)
    except subprocess.TimeoutExpired:
        for worker in workers:
            worker.kill()
        raise
    elapsed = time.monotonic() - started
    errors = _check.worker_errors(log)
    assert "Traceback" not in errors, errors

    journals = _check.journals(store)
    hops = 0
    pids: set[int] = set()
    for run_id in ids:
        recorded = _check.check_steps(journals[run_id], steps)  # also: the run completed
        done = _check.executions(log, keys[run_id])
        # No failure injected: each step ran exactly once, and that is the recorded execution.
        assert sorted(e.index for e in done) == list(range(steps)), (run_id, done)
        assert {e.index: e.exec for e in done} == recorded, run_id
        ordered = sorted(done, key=lambda e: e.start)
        for before, after in itertools.pairwise(ordered):
            assert before.end is not None and before.end <= after.start, (
                f"{run_id}: steps {before.index} (pid {before.pid}) and {after.index} "
                f"(pid {after.pid}) overlap: two drivers at once"
            )
        drivers = {e.pid for e in done}
        pids |= drivers
        hops += len(drivers) > 1
    report(
        f"contention: {WORKERS} worker processes, {runs} runs x {steps} steps with suspensions "
        f"in {elapsed:.1f} s: all completed, every step ran exactly once, no overlapping "
        f"drivers; {hops} runs were driven by more than one process; {len(pids)} processes "
        f"did work; journals contiguous, no lost or duplicated entries"
    )
