"""How fast ``wf inspect`` opens on a store of 100,000 runs (a measurement, not a test).

Run: ``python -m tests.cli.tui.bench_open [--dir DIR] [--runs 100000]``

Generates a local store of ``--runs`` runs once into ``--dir`` (reused afterwards; fsync is
skipped while generating, durability is not what is measured), then, in a fresh Python process
each time (so imports count), measures from process start to:

* the runs table's first page drawn (what ``wf inspect`` shows first);
* the next page drawn (``]``), a status filter applied (``s``), an id search;
* a run screen drawn (``wf inspect RUN_ID``);

and, for the first screen, the CPU time the process used to get there (``cpu``), which is what
the wall-clock figure comes down to on an idle machine.

The app runs headless (Textual's test driver) at 130x36; a real terminal adds its own drawing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def _no_fsync() -> Iterator[None]:
    from wf.store.local import _fsops

    saved = _fsops.fsync, _fsops.fsync_dir
    _fsops.fsync = lambda fd, path: None
    _fsops.fsync_dir = lambda path: None
    try:
        yield
    finally:
        _fsops.fsync, _fsops.fsync_dir = saved


async def generate(path: Path, count: int) -> None:
    """``count`` runs over 30 days: 90% completed, 5% failed, 3% suspended, 2% running."""
    from tests.cli.tui.flows import fixed_id
    from wf.store import RunRecord, RunStatus
    from wf.store.local import LocalStore

    marker = path / f".generated-{count}"
    if marker.exists():
        return
    store = LocalStore(path)
    rng = random.Random(7)
    start = time.time() - 30 * 86400
    statuses = [RunStatus.COMPLETED] * 90 + [RunStatus.FAILED] * 5
    statuses += [RunStatus.SUSPENDED] * 3 + [RunStatus.RUNNING] * 2
    began = time.perf_counter()
    with _no_fsync():
        for n in range(count):
            at = start + n * (30 * 86400 / count)
            status = rng.choice(statuses)
            record = RunRecord(
                id=fixed_id(at, rng.getrandbits(64)),
                workflow=f"app.flows:flow_{rng.randrange(10)}",
                status=status,
                input={"args": [n], "kwargs": {}},
                output={"ok": True} if status is RunStatus.COMPLETED else None,
                error={"type": "ValueError", "message": "bad"}
                if status.value == "failed"
                else None,
                created_at=at,
                updated_at=at + rng.random() * 5,
                wake_at=at + 86400 * 40 if status is RunStatus.SUSPENDED else None,
                waiting_for=[{"kind": "sleep", "target": None, "until": at + 86400 * 40}]
                if status is RunStatus.SUSPENDED
                else None,
            )
            events = [{"type": "run_started", "ts": at, "workflow": record.workflow}]
            await store.create_run(record, events)
            if n and n % 10000 == 0:
                print(f"  generated {n} runs ({time.perf_counter() - began:.0f} s)", flush=True)
    await store.close()
    marker.touch()


async def _measure(started: float, run_id: str | None) -> dict[str, float]:
    """In the measured process: open the app and time each screen from ``started``."""
    from textual.widgets import DataTable, Input

    from wf import Engine
    from wf.cli._store import open_store
    from wf.cli.tui._app import InspectApp
    from wf.cli.tui._run import RunScreen

    times: dict[str, float] = {}
    app = InspectApp(Engine(open_store()), run_id=run_id, owns_engine=True)
    async with app.run_test(size=(130, 36)) as pilot:
        if run_id is None:
            table = app.screen.query_one("#runs", DataTable)
            while table.row_count == 0:
                await pilot.pause(0.005)
            times["first page"] = time.time() - started
            times["first page cpu"] = _cpu()
            for label, keys in (("next page", ["]"]), ("status filter", ["s"]), ("id search", [])):
                begin = time.time()
                if label == "id search":  # one query: the prefix pasted, not typed
                    prefix = str(table.get_row_at(3)[2])[:14]
                    await pilot.press("x")
                    begin = time.time()
                    app.screen.query_one("#search", Input).value = prefix
                else:
                    await pilot.press(*keys)
                await pilot.pause()
                times[label] = time.time() - begin
        else:
            while not (isinstance(app.screen, RunScreen) and app.screen.view):
                await pilot.pause(0.005)
            times["run screen"] = time.time() - started
            times["run screen cpu"] = _cpu()
    return times


def _cpu() -> float:
    """CPU seconds this process has used: what the figure would be on an otherwise idle machine
    (the wall-clock figure also counts waiting for a CPU when other processes are busy)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(started: float, run_id: str | None) -> None:
    print(json.dumps(asyncio.run(_measure(started, run_id))))


def main() -> None:
    """Generate (once) and measure; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wf-bench-inspect")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    if args.child is not None:
        started, run_id = args.child.split(",")
        _child(float(started), run_id or None)
        return
    path = Path(args.dir)
    asyncio.run(generate(path, args.runs))
    newest = sorted(os.listdir(path / "runs"))[-1]
    env = {**os.environ, "WF_DIR": str(path), "PYTHONPATH": str(REPO)}
    print(f"store: {path} ({args.runs} runs)")
    for target in (None, newest):
        for _ in range(args.repeat):
            started = time.time()
            out = subprocess.run(
                [sys.executable, "-m", "tests.cli.tui.bench_open", "--child",
                 f"{started},{target or ''}"],
                env=env, cwd=REPO, capture_output=True, text=True, check=True,
            )  # fmt: skip
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            print("  " + ", ".join(f"{k}: {v * 1000:.0f} ms" for k, v in figures.items()))


if __name__ == "__main__":
    main()
