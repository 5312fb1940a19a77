"""Redis only, with real ``wf worker`` processes: ``CLIENT KILL`` of a worker's connections
mid-drain (the twin of PostgreSQL's ``pg_terminate_backend`` of a lock connection).

A lease ends with its holder's connection, so killing a worker's connections hands its runs to
the other workers at once while the worker itself goes on (it reconnects). Fencing must then
keep the worker whose connection was killed from writing any run it drove: every run
completes, each step's completion is recorded once, and the recorded execution is one that
ran (a step re-runs only where its first driver was cut off).
"""

from __future__ import annotations

import collections
import time

import pytest

from tests.reliability import queue_flows
from tests.reliability.conftest import report
from tests.reliability.test_queue_procs import (
    REDIS_URL,
    WORKERS,
    Execution,
    Target,
    check_exits,
    executions,
    finished,
    recorded_steps,
    serving,
    start_runs,
    stop_all,
    target,  # noqa: F401  (the fixture)
    wait_completed,
)
from wf.store import RunStatus

redis = pytest.importorskip("redis")


def kill_a_holder(prefix: str, ids: list[str]) -> int | None:
    """``CLIENT KILL`` every connection of one worker that holds leases under ``prefix``: how
    many were killed; None if no connected worker holds a lease at the moment."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        holders = collections.Counter(
            bytes(token).decode().rpartition(":")[2]
            for token in client.mget([f"{prefix}lease:{run_id}" for run_id in ids])
            if token is not None
        )
        clients = client.client_list()
        by_id = {str(c["id"]): c["name"] for c in clients}
        # A killed holder's leases stay until taken over: pick a connected one.
        alive = [h for h, _ in holders.most_common() if h in by_id]
        if not alive:
            return None  # between two claims: try again
        name = by_id[alive[0]].removesuffix("-lease")
        victims = [str(c["id"]) for c in clients if c["name"] in (name, name + "-lease")]
        return sum(int(client.execute_command("CLIENT", "KILL", "ID", i)) for i in victims)
    finally:
        client.close()


@pytest.mark.parametrize("target", ["redis"], indirect=True)
def test_client_kill_of_a_workers_connections_never_lets_two_drivers_write_one_run(
    target: Target,  # noqa: F811
) -> None:
    on_redis = target
    runs, steps, kills = 100, 3, 2
    assert on_redis.prefix is not None
    workers = serving(on_redis, 5)
    ids = start_runs(on_redis, [(queue_flows.drain, (f"k{n}", steps, 0.05)) for n in range(runs)])
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(killed) < kills:
            assert time.monotonic() < deadline, "the workers did no work"
            found = None
            if len(executions(on_redis, "drain")) >= 20 * (len(killed) + 1):
                found = kill_a_holder(on_redis.prefix, ids)
            if found is not None:
                killed.append(found)
            else:
                time.sleep(0.01)
        wait_completed(on_redis, ids, timeout=60)
    finally:
        stop_all(workers)
    check_exits(on_redis, workers)  # every worker lived on through its connections' death
    assert all(n >= 2 for n in killed), killed  # the holder connection and others

    done = executions(on_redis, "drain")
    by_step: dict[tuple[str, int], list[Execution]] = collections.defaultdict(list)
    for e in done:
        by_step[(e.key, e.index)].append(e)
    rerun = redriven = 0
    for n, (record, journal) in enumerate(finished(on_redis, ids).values()):
        assert record.status is RunStatus.COMPLETED, record
        # A driver that took the run over wrote an attempt of its own.
        kinds = [e["type"] for e in journal]
        redriven += kinds.count("run_attempt") + kinds.count("run_resumed") > 1
        recorded = recorded_steps(journal)  # each op's completion once, one run_completed
        for i in range(steps):
            found = by_step[(f"k{n}", i)]
            assert recorded[i] in {e.exec for e in found}
            rerun += len(found) - 1
    by_run: dict[str, set[int]] = collections.defaultdict(set)
    for e in done:
        by_run[e.key].add(e.pid)
    taken_over = sum(len(pids) > 1 for pids in by_run.values())
    assert redriven >= 1, "no run changed drivers: the kills cut off no driver"
    report(
        f"redis client kill: {kills} times every connection of a worker holding leases, over "
        f"{WORKERS} workers draining {runs} runs x {steps} steps: all completed, each recorded "
        f"step unique; {redriven} runs changed drivers ({taken_over} with steps run by both); "
        f"{rerun} steps ran again elsewhere; "
        f"every worker went on"
    )
