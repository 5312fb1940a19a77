"""The queue across processes: real ``wf worker`` subprocesses sharing one store, on the local
store, on PostgreSQL and on Redis (issue #15's multi-process checks).

* four workers drain N queued runs exactly once: every run completed, every step ran once and
  its recorded result is that execution's;
* a workflow with ``concurrency=2`` never has more than 2 runs in flight across all workers, and
  does reach 2 (the peak is measured from the steps' own start and end times);
* a group is a FIFO lane across workers: no two runs of a group overlap, and they start in the
  order they were started;
* a worker SIGKILLed mid-drain loses nothing: the others take its runs over, every run
  completes, and each step's recorded completion is unique (a step re-runs only if the killed
  worker was running it).

Steps log their executions outside the store (``queue_flows``); ``time.monotonic`` is one
clock for every process of the machine. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import queue_flows
from tests.reliability.conftest import report
from wf import Engine
from wf.engine._current import use_engine
from wf.store import RunStatus, Store
from wf.store.local import LocalStore

REPO = Path(__file__).resolve().parents[2]
DSN = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("WF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
WORKERS = 4


@dataclasses.dataclass
class Target:
    """One store the workers share: how they find it (``env``) and how the test opens it."""

    kind: str
    root: Path
    env: dict[str, str]
    schema: str | None = None
    prefix: str | None = None

    def open(self) -> Store:
        if self.prefix is not None:
            from wf.store.redis import RedisStore

            return RedisStore(REDIS_URL, prefix=self.prefix)
        if self.schema is not None:
            from wf.store.postgres import PostgresStore

            return PostgresStore(DSN, schema=self.schema)
        return LocalStore(self.root / ".workflows")


@pytest.fixture(params=["local", "postgres", "redis"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WF_")}
    base["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    base["WF_TORTURE_LOG"] = str(tmp_path / "log")
    base["WF_SUSPEND_AFTER"] = os.environ.get("WF_SUSPEND_AFTER", "30")
    (tmp_path / "log").mkdir()
    if request.param == "local":
        base["WF_DIR"] = str(tmp_path / ".workflows")
        yield Target("local", tmp_path, base)
        return
    if request.param == "redis":
        yield from _redis_target(tmp_path, base)
        return
    psycopg = pytest.importorskip("psycopg")
    try:
        with psycopg.connect(DSN, connect_timeout=3):
            pass
    except psycopg.Error:
        if os.environ.get("WF_REQUIRE_POSTGRES"):
            raise
        pytest.skip("PostgreSQL not reachable")
    schema = f"wf_queues_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in DSN else "?"
    base["WF_POSTGRES_DSN"] = f"{DSN}{sep}options=-csearch_path%3D{schema}"
    try:
        yield Target("postgres", tmp_path, base, schema)
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _redis_target(tmp_path: Path, base: dict[str, str]) -> Iterator[Target]:
    """The Redis server of ``WF_TEST_REDIS_URL``, under a key prefix of this test's own."""
    from tests.engine.conftest import _REDIS_SKIP
    from tests.store.helpers import drop_redis_keys

    if _REDIS_SKIP is not None:
        if os.environ.get("WF_REQUIRE_REDIS"):
            pytest.fail(_REDIS_SKIP)
        pytest.skip(_REDIS_SKIP)
    prefix = f"wf_queues:{uuid.uuid4().hex[:12]}:"
    base["WF_REDIS_URL"] = REDIS_URL
    base["WF_REDIS_PREFIX"] = prefix
    try:
        yield Target("redis", tmp_path, base, prefix=prefix)
    finally:
        drop_redis_keys(REDIS_URL, prefix)


# -- helpers -------------------------------------------------------------------------------


def spawn(target: Target, *args: str) -> subprocess.Popen[bytes]:
    """``wf worker ARGS`` over the target's store; stderr to ``worker-<n>.err`` in the log."""
    log = Path(target.env["WF_TORTURE_LOG"])
    errors = open(log / f"worker-{os.urandom(4).hex()}.err", "wb")  # noqa: SIM115 - kept by Popen
    try:
        worker = subprocess.Popen(
            [sys.executable, "-m", "wf", "worker", "--poll", "0.2", *args],
            cwd=target.root,
            env=target.env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    finally:
        errors.close()
    worker.args = [*worker.args, errors.name]  # type: ignore[misc] # where it says it is up
    return worker


def serving(target: Target, concurrency: int) -> list[subprocess.Popen[bytes]]:
    """``WORKERS`` serving workers (no ``--until-idle``), once every one of them is up: runs
    queued afterwards are shared by all of them."""
    workers = [spawn(target, "--concurrency", str(concurrency)) for _ in range(WORKERS)]
    deadline = time.monotonic() + 30
    for worker in workers:
        path = Path(worker.args[-1])  # type: ignore[index]
        while "worker started" not in path.read_text(errors="replace"):
            if time.monotonic() > deadline or worker.poll() is not None:
                stop_all(workers)
                raise AssertionError(f"a worker did not start: {worker_errors(target)}")
            time.sleep(0.05)
    return workers


def wait_completed(target: Target, ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (done := completed_count(target, ids)) < len(ids):
        assert time.monotonic() < deadline, f"{done} of {len(ids)} runs completed"
        time.sleep(0.2)


def worker_errors(target: Target) -> str:
    log = Path(target.env["WF_TORTURE_LOG"])
    return "".join(p.read_text(errors="replace") for p in sorted(log.glob("worker-*.err")))


def check_exits(target: Target, workers: list[subprocess.Popen[bytes]]) -> None:
    """The workers stopped by SIGTERM exited 0 and wrote no traceback."""
    assert [w.returncode for w in workers] == [0] * len(workers), worker_errors(target)
    errors = worker_errors(target)
    assert "Traceback" not in errors, errors


def stop_all(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@dataclasses.dataclass(frozen=True)
class Execution:
    kind: str
    key: str
    index: int
    pid: int
    exec: str
    start: float
    end: float


def executions(target: Target, kind: str) -> list[Execution]:
    path = Path(target.env["WF_TORTURE_LOG"]) / "steps.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        k, key, index, pid, exec_id, start, end = line.split()
        if k == kind:
            out.append(Execution(k, key, int(index), int(pid), exec_id, float(start), float(end)))
    return out


def start_runs(target: Target, starts: list[tuple[Any, tuple[Any, ...]]]) -> list[str]:
    """Queue the runs (detached: only the workers drive them), in this order; their ids."""

    async def go() -> list[str]:
        import wf

        store = target.open()
        try:
            with use_engine(Engine(store)):
                return [(await wf.start(flow, *args, detach=True)).id for flow, args in starts]
        finally:
            await store.close()

    return asyncio.run(go())


def finished(target: Target, ids: list[str]) -> dict[str, Any]:
    """Records and journals of the runs, read through the store."""

    async def go() -> dict[str, Any]:
        store = target.open()
        try:
            return {
                run_id: (await store.get_run(run_id), await store.read_journal(run_id))
                for run_id in ids
            }
        finally:
            await store.close()

    return asyncio.run(go())


def completed_count(target: Target, ids: list[str]) -> int:
    async def go() -> int:
        store = target.open()
        try:
            records = [await store.get_run(run_id) for run_id in ids]
        finally:
            await store.close()
        return sum(r.status is RunStatus.COMPLETED for r in records)

    return asyncio.run(go())


def recorded_steps(journal: list[dict[str, Any]]) -> list[str]:
    """The exec ids of the journal's step completions, in op order; each op completed once."""
    import wf

    done: dict[int, str] = {}
    for event in journal:
        if event["type"] == "step_completed":
            assert event["op"] not in done, f"op {event['op']} completed twice"
            done[event["op"]] = wf.decode(event["result"])
    assert sum(e["type"] == "run_completed" for e in journal) == 1
    return [done[op] for op in sorted(done)]


def peak_overlap(spans: list[Execution]) -> int:
    points = sorted([(e.start, 1) for e in spans] + [(e.end, -1) for e in spans])
    peak = level = 0
    for _, delta in points:  # an end sorts before a start at the same instant
        level += delta
        peak = max(peak, level)
    return peak


# -- the tests -----------------------------------------------------------------------------


def test_four_workers_drain_every_run_exactly_once(target: Target, long_form: bool) -> None:
    runs, steps = (3000, 3) if long_form else (1000, 3)
    workers = serving(target, 50)
    try:
        began = time.monotonic()
        ids = start_runs(target, [(queue_flows.drain, (f"r{n}", steps)) for n in range(runs)])
        wait_completed(target, ids, timeout=600 if long_form else 60)
        elapsed = time.monotonic() - began
    finally:
        stop_all(workers)
    check_exits(target, workers)

    done = executions(target, "drain")
    by_step = collections.Counter((e.key, e.index) for e in done)
    assert len(done) == runs * steps, "a step ran twice, or never"
    assert set(by_step.values()) == {1}
    logged = {(e.key, e.index): e.exec for e in done}
    for n, (record, journal) in enumerate(finished(target, ids).values()):
        assert record.status is RunStatus.COMPLETED, record
        assert recorded_steps(journal) == [logged[(f"r{n}", i)] for i in range(steps)]
    pids = {e.pid for e in done}
    report(
        f"queue drain ({target.kind}): {WORKERS} workers, {runs} runs x {steps} steps in "
        f"{elapsed:.1f} s (from the first enqueue): every run completed, every step ran exactly "
        f"once; {len(pids)} processes did work"
    )


def test_a_concurrency_cap_of_two_holds_across_workers(target: Target) -> None:
    runs = 16
    workers = serving(target, 10)
    try:
        ids = start_runs(target, [(queue_flows.capped, (f"c{n}", 0.1)) for n in range(runs)])
        wait_completed(target, ids, timeout=60)
    finally:
        stop_all(workers)
    check_exits(target, workers)
    spans = executions(target, "capped")
    assert len(spans) == runs
    assert all(r.status is RunStatus.COMPLETED for r, _ in finished(target, ids).values())
    peak = peak_overlap(spans)
    assert peak == 2, f"peak of runs in flight: {peak}"
    report(
        f"queue cap ({target.kind}): concurrency=2 over {WORKERS} workers, {runs} runs: "
        f"measured peak in flight {peak}; {len({e.pid for e in spans})} processes did work"
    )


def test_a_group_is_a_fifo_lane_across_workers(target: Target) -> None:
    groups, per_group = 3, 6
    order = [(f"g{g}", f"g{g}-{n}") for n in range(per_group) for g in range(groups)]
    workers = serving(target, 10)
    try:
        ids = start_runs(target, [(queue_flows.laned, (k, group, 0.05)) for group, k in order])
        wait_completed(target, ids, timeout=60)
    finally:
        stop_all(workers)
    check_exits(target, workers)
    assert all(r.status is RunStatus.COMPLETED for r, _ in finished(target, ids).values())
    spans = executions(target, "laned")
    assert len(spans) == groups * per_group
    for g in range(groups):
        lane = sorted((e for e in spans if e.key.startswith(f"g{g}-")), key=lambda e: e.start)
        assert [e.key for e in lane] == [f"g{g}-{n}" for n in range(per_group)]  # FIFO
        assert peak_overlap(lane) == 1, f"two runs of group g{g} overlapped"
    # Groups do not wait for each other: some runs of different groups did overlap.
    assert peak_overlap(spans) > 1
    report(
        f"queue lanes ({target.kind}): {groups} groups x {per_group} runs over {WORKERS} "
        f"workers: each lane FIFO with no overlap; {len({e.pid for e in spans})} processes "
        f"did work"
    )


def test_a_worker_killed_mid_drain_loses_nothing(target: Target) -> None:
    runs, steps = 60, 3
    workers = serving(target, 5)
    ids = start_runs(target, [(queue_flows.drain, (f"k{n}", steps, 0.05)) for n in range(runs)])
    killed: int | None = None
    killed_at = 0.0
    try:
        deadline = time.monotonic() + 60
        while killed is None:
            assert time.monotonic() < deadline, "no worker did any work"
            busy = collections.Counter(e.pid for e in executions(target, "drain"))
            working = [w for w in workers if busy[w.pid] >= 3]
            if working and sum(busy.values()) >= 20:
                victim = working[0]
                victim.send_signal(signal.SIGKILL)  # mid-drain: it has runs in flight
                victim.wait(timeout=10)
                killed, killed_at = victim.pid, time.monotonic()
            else:
                time.sleep(0.05)
        wait_completed(target, ids, timeout=60)  # the killed worker's runs were taken over
    finally:
        stop_all(workers)
    check_exits(target, [w for w in workers if w.pid != killed])

    done = executions(target, "drain")
    by_step: dict[tuple[str, int], list[Execution]] = collections.defaultdict(list)
    for e in done:
        by_step[(e.key, e.index)].append(e)
    rerun = 0
    for n, (record, journal) in enumerate(finished(target, ids).values()):
        assert record.status is RunStatus.COMPLETED, record
        recorded = recorded_steps(journal)
        for i in range(steps):
            found = by_step[(f"k{n}", i)]
            # The recorded execution is one that ran; any other was the killed worker's.
            assert recorded[i] in {e.exec for e in found}
            others = [e for e in found if e.exec != recorded[i]]
            assert all(e.pid == killed for e in others), (n, i, found)
            rerun += len(others)
    survivors = {e.pid for e in done if e.start > killed_at}
    by_run = collections.defaultdict(set)
    for e in done:
        by_run[e.key].add(e.pid)
    taken_over = sum(killed in pids and len(pids) > 1 for pids in by_run.values())
    report(
        f"queue kill ({target.kind}): one of {WORKERS} workers SIGKILLed mid-drain of {runs} "
        f"runs x {steps} steps: all completed, each recorded step unique; {rerun} steps the "
        f"killed worker had run re-ran elsewhere; {taken_over} runs it had begun were "
        f"finished by others; {len(survivors)} survivors did work"
    )
