"""Schedules and retention: ``wf gc`` over 10,000 finished runs, and fire latency.

* ``wf gc --older-than 1h`` (the real command, in a subprocess) on a local store holding
  10,000 finished runs (each with a three-event journal and a 200-byte output): runs deleted
  per second, bytes reclaimed as reported, and the store's size on disk before and after.
* Fire latency with an idle worker: ``wf worker`` on a store with one schedule firing every
  second (``* * * * * *``); the latency of a fire is its run's creation time minus its fire
  time (the time part of the fire's run id). Budget: within one second (DESIGN.md; the worker
  sleeps until the next fire time, no polling).

Run alone: ``python -m bench._upkeep [--quick]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "WF_DIR": str(root)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    for name in ("WF_RETENTION", "WF_POSTGRES_DSN"):
        env.pop(name, None)
    return env


def _disk_usage(path: Path) -> int:
    total = 0
    for directory, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


async def _populate(root: Path, count: int) -> None:
    from wf.store import RunRecord, RunStatus
    from wf.store._ids import new_run_id
    from wf.store.local import LocalStore

    store = LocalStore(root)
    ended = time.time() - 7200

    async def one() -> None:
        record = RunRecord(
            id=new_run_id(ended),
            workflow="bench:old",
            status=RunStatus.COMPLETED,
            output={"result": "x" * 200},
            created_at=ended - 1,
            updated_at=ended,
        )
        snapshot = {k: v for k, v in record.to_json().items() if k != "input"}
        events = [
            {"type": "run_started", "ts": ended - 1, "input": None, "record": snapshot},
            {"type": "step_completed", "ts": ended - 0.5, "op": 0, "result": "y" * 300},
            {"type": "run_completed", "ts": ended, "output": record.output},
        ]
        await store.create_run(record, events)

    for start in range(0, count, 250):
        await asyncio.gather(*(one() for _ in range(min(250, count - start))))
    await store.close()


def measure_gc(base: Path, count: int) -> dict[str, float]:
    """``wf gc`` deleting ``count`` finished runs: seconds, runs/s, bytes reported and freed."""
    root = base / "gc" / ".workflows"
    asyncio.run(_populate(root, count))
    before = _disk_usage(root)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "wf", "gc", "--older-than", "1h", "--json"],
        env=_env(root), cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    took = time.perf_counter() - began
    report = json.loads(done.stdout)
    after = _disk_usage(root)
    return {
        "runs": float(report["deleted"]),
        "seconds": took,
        "runs_per_s": report["deleted"] / took,
        "bytes": float(report["bytes"]),
        "disk_before": float(before),
        "disk_after": float(after),
    }


def _fire_time(run_id: str) -> float:
    millis = 0
    for char in run_id[5:15]:
        millis = millis * 32 + _B32.index(char)
    return millis / 1000


def measure_fire_latency(base: Path, fires: int) -> dict[str, float]:
    """An idle ``wf worker`` firing a schedule every second: latency of each fire's run."""
    project = base / "fire"
    project.mkdir(parents=True)
    (project / "tick.py").write_text(
        "import wf\n\n\n@wf.workflow\nasync def tick() -> int:\n    return 1\n"
    )
    root = project / ".workflows"
    env = _env(root)
    subprocess.run(
        [sys.executable, "-m", "wf", "schedule", "set", "tick", "tick.py:tick",
         "--cron", "* * * * * *"],
        env=env, cwd=project, capture_output=True, text=True, check=True,
    )  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "wf", "worker", "--quiet"],
        env=env, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(fires + 3.0)  # start-up, then one fire a second
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    listed = subprocess.run(
        [sys.executable, "-m", "wf", "runs", "--json", "--limit", "1000"],
        env=env, cwd=project, capture_output=True, text=True, check=True,
    )  # fmt: skip
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    # The first fire may be a catch-up of a fire missed while the worker started: left out.
    late = sorted(r["created_at"] - _fire_time(r["id"]) for r in runs)[:-1] or [float("nan")]
    return {
        "fires": float(len(late)),
        "median_ms": late[len(late) // 2] * 1000,
        "max_ms": late[-1] * 1000,
    }


def run_all(base: Path, *, quick: bool) -> dict[str, dict[str, float]]:
    """Both measures, in ``base``."""
    return {
        "gc": measure_gc(base, 2_000 if quick else 10_000),
        "fire": measure_fire_latency(base, 5 if quick else 10),
    }


def rows(found: dict[str, dict[str, float]]) -> list[tuple[str, str, str, str, str]]:
    """``(measure, value, compared, budget, verdict)`` rows for the benchmark table."""
    gc, fire = found["gc"], found["fire"]
    freed = (gc["disk_before"] - gc["disk_after"]) / 1e6
    ok = fire["max_ms"] <= 1000
    return [
        (
            f"wf gc deleting {gc['runs']:,.0f} finished runs",
            f"{gc['runs_per_s']:,.0f} runs/s",
            f"{gc['seconds']:.1f} s; {gc['bytes'] / 1e6:.1f} MB reported, {freed:.1f} MB freed "
            "on disk",
            "",
            "",
        ),
        (
            "schedule fire latency, idle worker",
            f"{fire['median_ms']:.0f} ms",
            f"median of {fire['fires']:.0f} fires; max {fire['max_ms']:.0f} ms",
            "≤ 1 s",
            "PASS" if ok else "MISS",
        ),
    ]


def main() -> None:
    quick = "--quick" in sys.argv
    base = Path(tempfile.mkdtemp(prefix=".wf-bench-upkeep-", dir=Path.cwd()))
    try:
        found = run_all(base, quick=quick)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for row in rows(found):
        print("  ".join(cell for cell in row if cell))


if __name__ == "__main__":
    main()
