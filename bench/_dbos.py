"""The same workloads on DBOS with its SQLite store (``pip install -e '.[bench]'``).

Each workload runs in a subprocess of its own (``python -m bench._dbos MODE DIR ...``), on a
fresh SQLite file, so that DBOS's process-wide state and background threads never touch wf's
measurements, and a workload that hits the time cap can simply be abandoned. The subprocess
prints one JSON object.

DBOS is used as it ships: ``system_database_url`` pointing at a SQLite file, default pragmas
(rollback journal, ``synchronous=FULL``), async workflows and async steps like wf's.

Concurrent workloads are capped in time (a slow one would otherwise take minutes): the figure is
the number of step completions *committed to the database* (rows of ``operation_outputs``)
divided by the time elapsed, so a capped run is measured just as exactly as a finished one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def available() -> str | None:
    """DBOS's version if it is installed, else None."""
    try:
        from importlib.metadata import version

        return version("dbos")
    except Exception:
        return None


def measure(mode: str, directory: Path, *, runs: int, cap: float) -> dict[str, Any]:
    """Run one DBOS workload in a subprocess; its JSON result (``{"error": ...}`` on failure)."""
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "bench._dbos",
        mode,
        str(directory),
        "--runs",
        str(runs),
        "--cap",
        str(cap),
    ]
    try:
        done = subprocess.run(
            command, cwd=directory, env=env, capture_output=True, text=True, timeout=cap + 120
        )
    except subprocess.TimeoutExpired:
        return {"error": f"DBOS {mode} did not finish within {cap + 120:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"DBOS {mode} failed: {tail}"}
    return dict(json.loads(lines[-1]))


def _committed_steps(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        return int(conn.execute("SELECT count(*) FROM operation_outputs").fetchone()[0])


async def _workload(mode: str, directory: Path, runs: int, cap: float) -> dict[str, Any]:
    from dbos import DBOS, DBOSConfig

    db = directory / "dbos.sqlite"
    config: DBOSConfig = {
        "name": "wfbench",
        "system_database_url": f"sqlite:///{db}",
        "log_level": "ERROR",
    }
    DBOS(config=config)

    @DBOS.step()
    async def inc(i: int) -> int:
        return i + 1

    @DBOS.workflow()
    async def steps(n: int) -> int:
        x = 0
        for _ in range(n):
            x = await inc(x)
        return x

    DBOS.launch()
    for _ in range(3):  # warm-up, like wf's
        assert await steps(10) == 10
    before = _committed_steps(db)

    if mode == "sequential":
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            assert await steps(10) == 10
            samples.append(time.perf_counter() - start)
        samples.sort()
        median = samples[len(samples) // 2]
        return {
            "mode": mode,
            "runs": runs,
            "per_step_us": median / 10 * 1e6,
            "steps_per_s": 10 / median,
            "db_bytes_per_run": os.path.getsize(db) / (runs + 3),
        }

    pattern, _, count = mode.partition("-")
    concurrency = int(count)

    async def everything() -> None:
        if pattern == "together":  # started at once: asyncio.gather over the starts
            starts = (DBOS.start_workflow_async(steps, 10) for _ in range(concurrency))
            handles = list(await asyncio.gather(*starts))
        else:  # "concurrent": started one by one, each awaited before the next
            handles = [await DBOS.start_workflow_async(steps, 10) for _ in range(concurrency)]
        await asyncio.gather(*(h.get_result() for h in handles))

    start = time.perf_counter()
    finished = True
    try:
        async with asyncio.timeout(cap):
            await asyncio.shield(asyncio.ensure_future(everything()))
    except TimeoutError:
        finished = False
    seconds = time.perf_counter() - start
    committed = _committed_steps(db) - before
    return {
        "mode": mode,
        "runs": concurrency,
        "finished": finished,
        "seconds": seconds,
        "committed_steps": committed,
        "steps_per_s": committed / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", help="sequential | concurrent-N | together-N")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cap", type=float, default=20.0)
    args = parser.parse_args()
    # Not asyncio.run: at exit it would cancel and wait for the workflows still in flight of a
    # capped workload. They are abandoned instead, with the whole process.
    loop = asyncio.new_event_loop()
    result = loop.run_until_complete(_workload(args.mode, args.directory, args.runs, args.cap))
    print(json.dumps(result), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
