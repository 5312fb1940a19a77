"""Benchmark of the local store's journal and listing, against the disk's own floor.

Run: ``python bench/bench_store.py [--dir DIR] [--runs 100000] [--quick]``

Measures, on the file system holding ``--dir`` (default: a temp dir under the current one, so
the numbers are for the disk the project lives on, not a tmpfs):

* the floor: one ``os.write`` + ``os.fdatasync`` of a journal line, in a loop;
* ``LocalStore`` sequential append latency (one run, ``await lease.append`` in a loop);
* concurrent appends from 10, 100 and 1000 runs (events/s, and flushes per event);
* listing the newest 50 of N runs (default 100,000), unfiltered and filtered, over a store
  generated once into ``--dir`` (reused on the next run with the same ``--dir``).

Prints a table with each figure's ratio to the floor. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from wf.store._base import RunRecord, RunStatus
from wf.store._ids import new_run_id
from wf.store.local import LocalStore, _commit, _fsops

EVENT = {
    "type": "step_completed",
    "ts": 1_700_000_000.123,
    "op": 7,
    "name": "charge_card",
    "result": {"t": "dict", "v": {"ok": True, "amount": "12.50", "id": "ch_3NxYz"}},
}
LINE = orjson.dumps(EVENT) + b"\n"


async def sequential_us(store: LocalStore, directory: str, count: int) -> tuple[float, float]:
    """Median microseconds of (the floor, ``await lease.append([event])`` on one run).

    The floor is one ``os.write`` + ``os.fdatasync`` of the same line to a file in the same
    directory. Samples alternate between the two, so that the disk's drift (other processes
    share it) weighs on both alike.
    """
    run = RunRecord(id=new_run_id(), workflow="bench:seq")
    await store.create_run(run)
    lease = await store.try_acquire(run.id)
    assert lease is not None
    fd = os.open(os.path.join(directory, "floor.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    floor, appends = [], []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, LINE)
            os.fdatasync(fd)
            floor.append(time.perf_counter() - start)
            start = time.perf_counter()
            await lease.append([EVENT])
            appends.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        await lease.release()
    return statistics.median(floor) * 1e6, statistics.median(appends) * 1e6


async def concurrent(store: LocalStore, runs: int, per_run: int) -> tuple[float, float]:
    """(events/s, flushes per event) with ``runs`` runs appending at once."""
    records = [RunRecord(id=new_run_id(), workflow="bench:conc") for _ in range(runs)]
    for record in records:
        await store.create_run(record)
    leases = [await store.try_acquire(r.id) for r in records]
    committer = _commit.committer_for(asyncio.get_running_loop())

    async def drive(lease: object) -> None:
        for _ in range(per_run):
            await lease.append([EVENT])  # type: ignore[attr-defined]

    flushes = committer.flushes
    start = time.perf_counter()
    await asyncio.gather(*(drive(lease) for lease in leases))
    elapsed = time.perf_counter() - start
    flushes = committer.flushes - flushes
    for lease in leases:
        await lease.release()  # type: ignore[union-attr]
    events = runs * per_run
    return events / elapsed, flushes / events


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    """Generate the listing store fast: durability is not what is measured there."""
    saved = _fsops.fsync, _fsops.fsync_dir
    _fsops.fsync = lambda fd, path: None
    _fsops.fsync_dir = lambda path: None
    try:
        yield
    finally:
        _fsops.fsync, _fsops.fsync_dir = saved


def run_id_at(at: float, rng: random.Random) -> str:
    """A run id as ``new_run_id`` makes it, for a moment in the past."""
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

    def b32(value: int, length: int) -> str:
        return "".join(alphabet[(value >> (5 * i)) & 31] for i in reversed(range(length)))

    return "wrun_" + b32(int(at * 1000), 10) + b32(rng.getrandbits(79), 16)


async def generate(path: Path, count: int) -> None:
    """``count`` runs over 30 days: 90% completed, 5% failed, 3% suspended, 2% running."""
    marker = path / f".generated-{count}"
    if marker.exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    store = LocalStore(path)
    rng = random.Random(7)
    start = time.time() - 30 * 86400
    statuses = [RunStatus.COMPLETED] * 90 + [RunStatus.FAILED] * 5
    statuses += [RunStatus.SUSPENDED] * 3 + [RunStatus.RUNNING] * 2
    begun = time.perf_counter()
    with no_fsync():
        for n in range(count):
            at = start + n * (30 * 86400 / count)
            status = rng.choice(statuses)
            record = RunRecord(
                id=run_id_at(at, rng),
                workflow=f"app.flows:flow_{rng.randrange(10)}",
                status=status,
                input={"order": n, "items": ["a", "b"]},
                output={"ok": True} if status is RunStatus.COMPLETED else None,
                created_at=at,
                updated_at=at,
                wake_at=at + 86400 if status is RunStatus.SUSPENDED else None,
            )
            await store.create_run(record, [{"type": "run_started", "ts": at}])
            if n and n % 10000 == 0:
                print(f"  generated {n} runs ({time.perf_counter() - begun:.0f} s)", flush=True)
    await store.close()
    marker.touch()


def drop_caches() -> bool:
    """Drop the page cache (root only) so a listing reads from disk."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as file:
            file.write("3\n")
        return True
    except OSError:
        return False


async def listing(path: Path) -> list[tuple[str, float]]:
    """Milliseconds (median of 5, warm cache; plus one cold) of typical listings."""
    store = LocalStore(path)
    page = await store.list_runs(limit=1000)
    middle = page[-1].id
    queries: list[tuple[str, dict[str, object]]] = [
        ("newest 50", {}),
        ("newest 50 failed", {"statuses": [RunStatus.FAILED]}),
        ("newest 50 of one workflow", {"workflow": "app.flows:flow_3"}),
        ("newest 50 suspended, one workflow", {
            "statuses": [RunStatus.SUSPENDED], "workflow": "app.flows:flow_3"}),
        ("page 21 (before= 1000th)", {"before": middle}),
        ("no match (full index scan)", {"workflow": "no.such:flow"}),
    ]  # fmt: skip
    out = []
    if drop_caches():
        start = time.perf_counter()
        await store.list_runs(limit=50)
        out.append(("newest 50, cold cache", (time.perf_counter() - start) * 1e3))
    for name, kwargs in queries:
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            await store.list_runs(limit=50, **kwargs)  # type: ignore[arg-type]
            samples.append((time.perf_counter() - start) * 1e3)
        out.append((name, statistics.median(samples)))
    await store.close()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="where to work (default: a temp dir here)")
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the listing store")
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="wf-bench-", dir="."))
    base.mkdir(parents=True, exist_ok=True)
    scale = 1 if args.quick else 4

    journal_dir = base / "journal"
    shutil.rmtree(journal_dir, ignore_errors=True)
    journal_dir.mkdir()
    store = LocalStore(journal_dir / ".workflows")
    floor, sequential = await sequential_us(store, str(journal_dir), 500 * scale)
    rows = [
        ("floor: write + fdatasync", f"{floor:8.0f} us", "1.00x"),
        ("LocalStore sequential append", f"{sequential:8.0f} us", f"{sequential / floor:.2f}x"),
    ]
    for runs, per_run in ((10, 100 * scale), (100, 20 * scale), (1000, 5 * scale)):
        rate, flushes = await concurrent(store, runs, per_run)
        floor_rate = 1e6 / floor
        rows.append(
            (
                f"{runs} runs appending at once",
                f"{rate:8.0f} ev/s",
                f"{rate / floor_rate:.1f}x floor rate, {flushes:.3f} flushes/event",
            )
        )
    await store.close()

    print(f"generating {args.runs} runs in {base / 'listing'} (once) ...", flush=True)
    await generate(base / "listing", args.runs)
    for name, ms in await listing(base / "listing"):
        rows.append((f"list_runs: {name}", f"{ms:8.1f} ms", f"of {args.runs} runs"))

    width = max(len(r[0]) for r in rows)
    print()
    print(f"{'measure':<{width}}  {'value':>14}  ratio")
    for name, value, ratio in rows:
        print(f"{name:<{width}}  {value:>14}  {ratio}")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
