"""Sequential 10-step runs on today's layout and on the creation-log prototype, side by side.

Run: ``python bench/bench_creation_log.py [--rounds 6] [--runs 10] [--no-dbos] [--dir DIR]``

Both stores live in one process under ``--dir`` (default: a temporary directory in the current
one, on the disk under test), next to the floor's file. Each round runs, for every layout in
turn (the order alternates between rounds), ``--runs`` whole 10-step runs each preceded by ten
floor samples, then one 50-step run whose step-to-step gaps give the marginal step; then DBOS's
sequential workload (a subprocess, ``--runs`` runs). The machine is shared, so everything is
interleaved and reported as medians over all rounds. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import os

import wf
from bench import _dbos, _flows
from bench._wf import _timed_run, floor_appends
from wf.engine._current import use_engine
from wf.engine._engine import Engine
from wf.store.local import LocalStore, _commit

LAYOUTS = {"today's layout": False, "creation log": True}


async def measure(base: Path, rounds: int, runs: int, with_dbos: bool) -> dict[str, list[float]]:
    """Samples in seconds: ``floor``, and per layout ``<name>`` (10-step runs), ``<name> start``
    (their ``wf.start``), ``<name> gap`` (step-to-step gaps), ``<name> flushes`` (flushes per
    run); ``dbos`` (per-step, µs)."""
    samples: dict[str, list[float]] = {"floor": [], "dbos": []}
    engines = {}
    for name, log in LAYOUTS.items():
        directory = base / name.replace(" ", "-").replace("'", "")
        directory.mkdir()
        engines[name] = Engine(LocalStore(directory / ".workflows", creation_log=log))
        for key in (name, f"{name} gap", f"{name} start", f"{name} flushes"):
            samples[key] = []
    fd = os.open(base / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    committer = _commit.committer_for(asyncio.get_running_loop())
    try:
        for engine in engines.values():  # warm-up: imports, store creation
            with use_engine(engine):
                await _timed_run(_flows.steps, 10)
        for round_ in range(rounds):
            order = list(engines.items())
            if round_ % 2:
                order.reverse()
            for _ in range(runs):
                for name, engine in order:
                    samples["floor"] += floor_appends(fd, 10)
                    with use_engine(engine):
                        before = committer.flushes
                        start = time.perf_counter()
                        run = await wf.start(_flows.steps, 10)
                        started = time.perf_counter()
                        assert await run.result() == 10
                        samples[name].append(time.perf_counter() - start)
                        samples[f"{name} start"].append(started - start)
                        samples[f"{name} flushes"].append(committer.flushes - before)
            for name, engine in order:
                samples["floor"] += floor_appends(fd, 50)
                stamps: list[float] = []
                _flows.STAMPS = stamps
                try:
                    with use_engine(engine):
                        await _timed_run(_flows.steps, 50)
                finally:
                    _flows.STAMPS = None
                samples[f"{name} gap"] += [b - a for a, b in itertools.pairwise(stamps)]
            if with_dbos:
                directory = base / f"dbos-{round_}"
                directory.mkdir()
                found = _dbos.measure("sequential", directory, runs=runs, cap=120.0)
                if "error" in found:
                    print(found["error"], file=sys.stderr)
                    with_dbos = False
                else:
                    samples["dbos"].append(found["per_step_us"])
            print(f"round {round_ + 1}/{rounds} done", file=sys.stderr)
    finally:
        os.close(fd)
        for engine in engines.values():
            await engine.store.close()
    return samples


def report(samples: dict[str, list[float]]) -> None:
    """Print the side-by-side table."""
    floor = statistics.median(samples["floor"]) * 1e6
    dbos = statistics.median(samples["dbos"]) if samples["dbos"] else None
    print(f"| measure | {' | '.join(LAYOUTS)} |")
    print(f"|---|{'--:|' * len(LAYOUTS)}")
    print(f"| floor: write + fdatasync of one journal line | {floor:.0f} µs (both) |  |")
    rows: dict[str, list[str]] = {}
    for name in LAYOUTS:
        run = statistics.median(samples[name]) * 1e6
        gap = statistics.median(samples[f"{name} gap"]) * 1e6
        fixed = run - 10 * gap
        flushes = statistics.median(samples[f"{name} flushes"])
        begin = statistics.median(samples[f"{name} start"]) * 1e6
        cells = {
            "10-step run: per step": f"{run / 10:.0f} µs = {run / 10 / floor:.2f}× floor",
            "one more step (median gap)": f"{gap:.0f} µs = {gap / floor:.2f}× floor",
            "a run's fixed cost (run − 10 gaps)": f"{fixed:.0f} µs = {fixed / floor:.1f}× floor",
            "↳ `await wf.start` (creation durable)": f"{begin:.0f} µs = {begin / floor:.1f}×",
            "flushes per 10-step run": f"{flushes:.0f}",
        }
        if dbos is not None:
            cells["vs DBOS sequential (per step)"] = f"{dbos / (run / 10):.1f}× faster"
        for label, cell in cells.items():
            rows.setdefault(label, []).append(cell)
    for label, row in rows.items():
        print(f"| {label} | {' | '.join(row)} |")
    if dbos is not None:
        dbos_cell = f"{dbos:.0f} µs = {dbos / floor:.1f}× floor"
        print(f"| DBOS sequential 10-step runs: per step | {dbos_cell} |  |")
    names = list(LAYOUTS)
    ratio = statistics.median(samples[names[0]]) / statistics.median(samples[names[1]])
    print(f"\nwhole 10-step run, {names[0]} ÷ {names[1]}: {ratio:.2f}")
    floor_n, dbos_n = len(samples["floor"]), len(samples["dbos"])
    print(
        f"samples: {len(samples[names[0]])} runs of each layout, {floor_n} floor appends, ", end=""
    )
    print(f"{dbos_n} DBOS rounds")


def main() -> None:
    """Parse options, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=10, help="10-step runs per layout per round")
    parser.add_argument("--no-dbos", action="store_true", help="skip DBOS")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with_dbos = not args.no_dbos and _dbos.available() is not None
    base = Path(tempfile.mkdtemp(prefix="wf-clog-", dir=args.dir or Path.cwd()))
    start = time.perf_counter()
    try:
        report(asyncio.run(measure(base, args.rounds, args.runs, with_dbos)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
