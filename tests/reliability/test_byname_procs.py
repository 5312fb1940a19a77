"""Producers that never import the workflow's module start runs by name (``wf.start("module:
attr")``) into a store that two ``wf worker`` processes drain, on the local store and on
PostgreSQL: every run completes once, with its input validated by the worker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from tests.reliability.test_queue_procs import (  # noqa: F401 - `target` is a fixture
    Target,
    check_exits,
    spawn,
    target,
    worker_errors,
)
from wf.store import RunStatus

RUNS_PER_PRODUCER = 15

PRODUCER = f"""
import asyncio, json, sys
import wf

async def main(prefix):
    ids = []
    for i in range({RUNS_PER_PRODUCER}):
        order = {{"id": f"{{prefix}}-{{i}}", "cents": str(i)}}  # a string: the worker coerces it
        run = await wf.start("tests.engine.byname_flows:charge", order, detach=True)
        ids.append(run.id)
    assert "tests.engine.byname_flows" not in sys.modules, "the producer imported the workflow"
    print(json.dumps(ids))

asyncio.run(main(sys.argv[1]))
"""


def test_producers_by_name_and_two_workers_drain_every_run(target: Target) -> None:  # noqa: F811
    producers = [
        subprocess.run(
            [sys.executable, "-c", PRODUCER, f"p{k}"],
            cwd=target.root,
            env=target.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        for k in range(2)
    ]
    for producer in producers:
        assert producer.returncode == 0, producer.stderr
    ids = [run_id for p in producers for run_id in json.loads(p.stdout)]
    assert len(set(ids)) == 2 * RUNS_PER_PRODUCER

    workers = [spawn(target, "--until-idle", "--concurrency", "4") for _ in range(2)]
    for worker in workers:
        worker.wait(timeout=90)
    check_exits(target, workers)

    async def outcomes() -> dict[str, tuple[RunStatus, object, int]]:
        from wf import decode

        store = target.open()
        try:
            records = [await store.get_run(run_id) for run_id in ids]
            return {r.id: (r.status, decode(r.output), r.attempt) for r in records}
        finally:
            await store.close()

    found = asyncio.run(outcomes())
    expected = {
        run_id: (RunStatus.COMPLETED, f"receipt-p{k}-{i}-{i}", 1)
        for k in range(2)
        for i, run_id in enumerate(ids[k * RUNS_PER_PRODUCER : (k + 1) * RUNS_PER_PRODUCER])
    }
    assert found == expected, worker_errors(target)
