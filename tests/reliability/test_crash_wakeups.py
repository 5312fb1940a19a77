"""Crashes meet the wake-up patterns of issue #12: ``select`` with timers (a hook against a
timer, a child against a timer, each way round), parents gathering several children, and hooks
resumed by a step of another run — while ``wf worker`` processes are SIGKILLed at random moments
and new ones take over. Then a last ``wf worker --until-idle`` finishes everything, and:

* every run (children too) completed, with the result its pattern makes certain: a select picks
  the event that came first by the durable clock, whoever drove it and however often it was
  killed; a payload sent by another run's step is the one its waiter returns;
* every journal is valid (one outcome, each operation id one operation, each step completed
  once), and each traced step's recorded execution is its last one, earlier ones all cut short
  by kills (at most one per killed process);
* no worker's wake-up invariant check repaired a run (each worker checks at start, so every
  restart looks at what the kills left), and the same check run by the test after each round of
  kills, with no worker alive, finds nothing either.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.reliability import _check, flows
from tests.reliability.conftest import report
from wf import Engine
from wf.engine._current import use_engine
from wf.engine._invariant import stuck_runs
from wf.store.local import LocalStore

PAUSE = 0.2


async def create_runs(store: Path, copies: int, lead: int) -> dict[str, tuple[str, Any]]:
    """Queue ``copies`` of each pattern (detached: only workers drive them).

    Returns run id -> (trace key, what its result must be; a callable checks it)."""
    import wf

    local = LocalStore(store)
    expected: dict[str, tuple[str, Any]] = {}

    async def add(key: str, flow: Any, *args: Any, must: Any) -> None:
        run = await wf.start(flow, key, *args, lead=lead, run_id=key, detach=True)
        expected[run.id] = (key, must)

    try:
        with use_engine(Engine(local)):
            for n in range(copies):
                # A hook against an hour, resumed by another run's step: the hook wins.
                await add(f"ap{n}", flows.approval, f"tok-ap{n}", 3600.0, PAUSE, must="hook")
                await add(f"ar{n}", flows.resumer, f"tok-ap{n}", PAUSE, must="resumer")
                # A hook nobody resumes against a 1 s timer: the timer wins.
                await add(f"at{n}", flows.approval, f"tok-at{n}", 1.0, PAUSE, must=[1, None])
                # A plain cross-run hook.
                await add(f"w{n}", flows.waiter, f"tok-w{n}", PAUSE, must="hook")
                await add(f"wr{n}", flows.resumer, f"tok-w{n}", PAUSE, must="resumer")
                # A child of three steps against an hour: the child wins.
                await add(f"cw{n}", flows.child_or_timer, True, PAUSE, must=[0, 3])
                # A child waiting on a hook against 1 s: the timer wins, then a step of the
                # parent resumes the child's hook and the parent takes its result too.
                await add(f"ct{n}", flows.child_or_timer, False, PAUSE, must="late")
                # A parent gathering three children of four steps each (with naps).
                await add(f"g{n}", flows.gather_children, 3, 6, PAUSE, must=[15, 15, 15])
    finally:
        await local.close()
    return expected


async def invariant_violations(store: Path) -> list[str]:
    """The wake-up invariant check, as a worker starting now would run it (nothing repaired)."""
    local = LocalStore(store)
    try:
        return [f"{s.run_id}: {s.reason}" for s in await stuck_runs(Engine(local))]
    finally:
        await local.close()


def _sent(log: Path, key: str) -> set[str]:
    """Exec ids of run ``key``'s ``resume_other`` executions that tried to deliver."""
    path = log / f"{key}.sent.log"
    return set(path.read_text().split()) if path.exists() else set()


def test_sigkill_workers_amid_selects_children_and_cross_run_hooks(
    tmp_path: Path, long_form: bool
) -> None:
    copies, kills, lead = (8, 24, 60) if long_form else (3, 8, 24)
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    store, log = tmp_path / ".workflows", tmp_path / "log"
    log.mkdir()
    expected = asyncio.run(create_runs(store, copies, lead))

    killed: set[int] = set()
    violations: list[str] = []
    workers_started = 0
    extra = {"WF_SUSPEND_AFTER": "0"}  # every wait suspends: runs hop between processes
    for _ in range(kills):
        workers = [_check.spawn_worker(store, log, **extra) for _ in range(rng.choice((1, 2)))]
        workers_started += len(workers)
        time.sleep(rng.uniform(0.5, 1.5))
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
        for worker in workers:
            worker.wait()
            killed.add(worker.pid)
        violations += asyncio.run(invariant_violations(store))

    unfinished = sum(
        j.events[-1]["type"] != "run_completed" for j in _check.journals(store).values()
    )
    final = _check.spawn_worker(store, log, "--until-idle", **extra)
    workers_started += 1
    try:
        assert final.wait(timeout=300 if long_form else 90) == 0, _check.worker_errors(log)
    except subprocess.TimeoutExpired:
        final.kill()
        raise AssertionError(f"runs left unfinished: {_check.worker_errors(log)[-3000:]}") from None
    errors = _check.worker_errors(log)
    assert "Traceback" not in errors, errors
    repairs = _check.repairs_logged(log)
    assert repairs == 0, errors
    assert violations == [], violations

    journals = _check.journals(store)
    outputs: dict[str, Any] = {}
    extra_runs = 0
    for run_id, journal in journals.items():
        output, recorded = _check.check_run(journal)  # the run id is its trace key
        extra_runs += _check.check_executions(log, run_id, recorded, killed)
        outputs[run_id] = (output, recorded)
    children = sorted(set(journals) - set(expected))
    for run_id, (_, must) in expected.items():
        output, recorded = outputs[run_id]
        if must == "hook":
            # A waiter or an approval: the hook won, with the payload of its resumer's step
            # (of some execution of it: a kill between a delivery and its record re-sends).
            prefix = run_id.rstrip("0123456789")
            sender = {"ap": "ar", "w": "wr"}[prefix] + run_id[len(prefix) :]
            if prefix == "ap":
                assert output[0] == 0, (run_id, output)
                output = output[1]
            assert output.split(":")[0] == sender, (run_id, output)
            assert output.split(":")[1] in _sent(log, sender), (run_id, output)
        elif must == "resumer":
            assert output == f"{run_id}:{recorded[lead]}", (run_id, output)
        elif must == "late":
            assert output[:2] == [1, None], (run_id, output)
            assert output[2].split(":")[1] in _sent(log, run_id), (run_id, output)
        else:
            assert output == must, (run_id, output, must)
    assert len(children) == copies * (1 + 1 + 3), children
    report(
        f"crash with wake-up patterns: {len(expected)} runs + {len(children)} children (select "
        f"hook/child vs timer, gathering parents, cross-run hooks), {kills} kill rounds "
        f"({len(killed)} worker processes SIGKILLed, seed {seed}; {unfinished} runs unfinished "
        f"when the kills stopped): all completed with the "
        f"right results; journals valid; every recorded step ran last, {extra_runs} interrupted "
        f"executions re-ran; invariant repairs by {workers_started} workers: {repairs}; "
        f"stuck runs found by the check after each kill round: {len(violations)}"
    )
