"""wf's own workloads: the fsync floor, sequential and concurrent runs, replay, store size.

Every workload runs on a ``LocalStore`` in a directory on the disk under test, next to the
floor's file, so the ratios compare like with like. Timings are medians (sequential, replay) or
best-of (concurrent), taken after a warm-up, because the first run of a process pays imports and
the store's creation.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import wf
from bench import _flows
from wf.engine._current import use_engine
from wf.engine._driver import drive
from wf.engine._engine import Engine
from wf.engine._replay_check import check_run
from wf.store import RunStatus
from wf.store.local import LocalStore, _commit

# A journal line of the size wf writes for a trivial step's completion, so the floor appends
# the same number of bytes as a step does.
FLOOR_LINE = (
    orjson.dumps(
        {
            "type": "step_completed",
            "ts": 1_764_000_000.123456,
            "op": 7,
            "name": "inc",
            "attempt": 1,
            "result": 8,
        }
    )
    + b"\n"
)


def floor_appends(fd: int, count: int) -> list[float]:
    """Seconds per ``os.write`` + ``os.fdatasync`` of one journal line: the raw floor."""
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        os.write(fd, FLOOR_LINE)
        os.fdatasync(fd)
        samples.append(time.perf_counter() - start)
    return samples


async def _timed_run(workflow: wf.Workflow[..., int], n: int) -> float:
    start = time.perf_counter()
    run = await wf.start(workflow, n)
    assert await run.result() == n
    return time.perf_counter() - start


@dataclass
class Sequential:
    """Seconds: floor appends, whole 10-step runs, gaps between consecutive steps of 50-step
    runs, 10-step runs of sync steps."""

    floor: list[float] = field(default_factory=list)
    run10: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    sync10: list[float] = field(default_factory=list)

    @property
    def floor_us(self) -> float:
        return statistics.median(self.floor) * 1e6

    @property
    def amortized_us(self) -> float:
        """A 10-step run's time over its 10 steps (run creation and outcome included)."""
        return statistics.median(self.run10) / 10 * 1e6

    @property
    def marginal_us(self) -> float:
        """What one more step costs inside a run: the median time from one step's start to the
        next one's (its completion appended and made durable, the workflow resumed)."""
        return statistics.median(self.gaps) * 1e6

    @property
    def run_overhead_us(self) -> float:
        """A run's fixed cost: a 10-step run minus 10 marginal steps."""
        return statistics.median(self.run10) * 1e6 - 10 * self.marginal_us

    @property
    def sync_amortized_us(self) -> float:
        return statistics.median(self.sync10) / 10 * 1e6


async def sequential(
    directory: Path,
    rounds: int,
    runs_per_round: int,
    between: Callable[[], object] | None = None,
) -> Sequential:
    """Runs one after another, interleaved with floor samples so that both see the same disk
    (other processes share it, and its speed drifts): floor samples are taken right before each
    run, as many as the run has steps. ``between`` is called after each round (the peer's own
    round: DBOS then runs under the same conditions as wf, not minutes later)."""
    out = Sequential()
    fd = os.open(directory / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(rounds):
            for _ in range(runs_per_round):
                out.floor += floor_appends(fd, 10)
                out.run10.append(await _timed_run(_flows.steps, 10))
            out.floor += floor_appends(fd, 50)
            stamps: list[float] = []
            _flows.STAMPS = stamps
            try:
                await _timed_run(_flows.steps, 50)
            finally:
                _flows.STAMPS = None
            out.gaps += [b - a for a, b in itertools.pairwise(stamps)]
            out.floor += floor_appends(fd, 10)
            out.sync10.append(await _timed_run(_flows.sync_steps, 10))
            if between is not None:
                between()
    finally:
        os.close(fd)
    return out


@dataclass
class Concurrent:
    runs: int
    seconds: float
    flushes: int
    together: bool
    """Started at once (``asyncio.gather`` over the starts), or one by one."""

    @property
    def steps_per_s(self) -> float:
        return self.runs * 10 / self.seconds

    @property
    def flushes_per_step(self) -> float:
        return self.flushes / (self.runs * 10)


async def concurrent(runs: int, repeat: int, *, together: bool) -> Concurrent:
    """``runs`` 10-step runs started and driven together in this process (best of ``repeat``):
    creation, driving and outcomes, end to end, as a user's ``gather`` sees it. ``together``:
    the starts are gathered too (their creations share flushes); else each start is awaited
    before the next (each creation's flush is shared only with the steps of runs in flight)."""
    committer = _commit.committer_for(asyncio.get_running_loop())
    best: Concurrent | None = None
    for _ in range(repeat):
        flushes = committer.flushes
        start = time.perf_counter()
        if together:
            handles = list(await asyncio.gather(*(wf.start(_flows.steps, 10) for _ in range(runs))))
        else:
            handles = [await wf.start(_flows.steps, 10) for _ in range(runs)]
        results = await asyncio.gather(*(h.result() for h in handles))
        seconds = time.perf_counter() - start
        assert results == [10] * runs
        sample = Concurrent(runs, seconds, committer.flushes - flushes, together)
        if best is None or sample.seconds < best.seconds:
            best = sample
    assert best is not None
    return best


@dataclass
class Replay:
    steps: int
    read_us: float
    """Reading and parsing the journal."""
    check_us: float
    """``check_run``: read the journal and replay every step, executing nothing."""
    resume_us: float
    """A real resume in a fresh driver: lease, journal, replay, re-suspend (two records)."""
    resume_median_us: float
    """The median of the resumes: what the garbage collector adds to most of them shows here
    (the best is one it left alone; the first, cold, is the slowest)."""
    journal_bytes: int


async def replay(engine: Engine, steps: int, repeat: int) -> Replay:
    """Record a run of ``steps`` steps that then suspends, and time its replay."""
    store = engine.store
    run = await wf.start(_flows.steps_then_sleep, steps)
    task = engine.drivers.get(run.id)
    if task is not None:
        await task
    assert (await run.status()) is RunStatus.SUSPENDED

    def best(samples: list[float]) -> float:
        return min(samples) * 1e6

    reads, checks, resumes = [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        journal = await store.read_journal(run.id)
        reads.append(time.perf_counter() - start)

        start = time.perf_counter()
        report = await check_run(store, run.id, timeout=120)
        checks.append(time.perf_counter() - start)
        assert report.status == "ok" and report.ops_replayed >= steps, report

        start = time.perf_counter()
        record = await drive(engine, run.id)
        resumes.append(time.perf_counter() - start)
        assert record is not None and record.status is RunStatus.SUSPENDED
    assert isinstance(store, LocalStore)
    size = os.path.getsize(os.path.join(store.run_dir(run.id), "journal.jsonl"))
    assert len(journal) >= steps
    median = statistics.median(resumes) * 1e6
    return Replay(steps, best(reads), best(checks), best(resumes), median, size)


def disk_usage(root: Path) -> tuple[int, int, int]:
    """(bytes allocated on disk, bytes of content, files) under ``root``, directories included."""
    allocated = content = files = 0
    for path, dirs, names in os.walk(root):
        for name in [*names, *dirs]:
            info = os.lstat(os.path.join(path, name))
            allocated += info.st_blocks * 512
            if name in names:
                content += info.st_size
                files += 1
    return allocated, content, files


@dataclass
class BusyDisk:
    """``wf.start`` times (seconds) on a quiet disk and while another program writes to it."""

    quiet: list[float]
    busy: list[float]


_WRITER = """
import os, sys, time
directory, until = sys.argv[1], time.monotonic() + float(sys.argv[2])
block = b"w" * (1 << 20)
n = 0
while time.monotonic() < until:  # rewrite 256 MB files in turn, never synced: dirty data
    with open(os.path.join(directory, f"file-{n % 4}"), "wb") as out:
        for _ in range(256):
            out.write(block)
    n += 1
"""


async def busy_disk(directory: Path, starts: int) -> BusyDisk:
    """Start 1-step runs one after another (each run awaited to its end) on a quiet disk, then
    while another program rewrites 256 MB files on the same file system, as a database, a copy
    or a build would: what the start (its creation made durable) takes."""
    samples = BusyDisk([], [])
    writer_dir = directory / "writer"
    writer_dir.mkdir()

    async def sample(into: list[float]) -> None:
        for _ in range(starts):
            start = time.perf_counter()
            run = await wf.start(_flows.steps, 1)
            into.append(time.perf_counter() - start)
            await run.result()

    await sample(samples.quiet)
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, str(writer_dir), "60"
    )
    try:
        await asyncio.sleep(0.5)  # the writer's dirty data builds up
        await sample(samples.busy)
    finally:
        if writer.returncode is None:
            writer.kill()
        await writer.wait()
        for path in writer_dir.iterdir():
            path.unlink()
    return samples


@dataclass
class Results:
    sequential: Sequential
    concurrent: list[Concurrent]
    replays: list[Replay]
    size_runs: int
    size_allocated: int
    size_content: int
    size_files: int
    size_packed: int
    """Runs of the size store packed (``Store.compact``)."""
    size_packed_allocated: int
    busy: BusyDisk


@contextlib.asynccontextmanager
async def _fresh(directory: Path, **options: Any) -> AsyncIterator[tuple[Path, Engine]]:
    """A new directory with a local store in it, and an engine on the store as the current one
    (``options`` are the engine's), for one workload; the store is closed afterwards."""
    directory.mkdir()
    store = LocalStore(directory / ".workflows")
    engine = Engine(store, **options)
    try:
        with use_engine(engine):
            yield directory, engine
    finally:
        await store.close()


async def run_all(
    base: Path,
    *,
    quick: bool,
    progress: Callable[[str], None],
    between_sequential: Callable[[], object] | None = None,
) -> Results:
    """Every wf workload, each on its own fresh store under ``base``; ``between_sequential``
    runs after each round of sequential runs (``sequential``'s ``between``)."""
    # Size per run: a store holding only completed 10-step runs (they double as the warm-up).
    size_dir = base / "size"
    size_dir.mkdir()
    store = LocalStore(size_dir / ".workflows")
    size_runs = 100
    with use_engine(Engine(store)):
        for _ in range(size_runs):
            await _timed_run(_flows.steps, 10)
    allocated, content, files = disk_usage(size_dir / ".workflows")
    # As a worker leaves them once they have ended a while: packed into segment files.
    packed = await store.compact(now=time.time(), older_than=0.0, limit=size_runs)
    await store.close()
    packed_allocated = disk_usage(size_dir / ".workflows")[0]

    progress("sequential runs vs the floor")
    async with _fresh(base / "sequential") as (seq_dir, _):
        await _timed_run(_flows.steps, 10)
        await _timed_run(_flows.sync_steps, 10)
        seq = await sequential(
            seq_dir,
            rounds=4 if quick else 8,
            runs_per_round=6 if quick else 12,
            between=between_sequential,
        )

    conc = []
    for runs in (10, 100, 1000):
        progress(f"{runs} concurrent runs")
        async with _fresh(base / f"concurrent-{runs}"):
            await _timed_run(_flows.steps, 10)
            repeat = (2 if runs < 1000 else 1) if quick else (2 if runs == 1000 else 3)
            conc.append(await concurrent(runs, repeat, together=True))
            conc.append(await concurrent(runs, repeat, together=False))

    replays = []
    for steps in (1000, 10000):
        progress(f"replay of a {steps}-step run")
        async with _fresh(base / f"replay-{steps}", suspend_after=0) as (_, engine):
            replays.append(await replay(engine, steps, repeat=3 if quick else 5))

    progress("starts on a busy disk")
    async with _fresh(base / "busy-disk") as (busy_dir, _):
        await _timed_run(_flows.steps, 1)
        busy = await busy_disk(busy_dir, 20 if quick else 50)

    return Results(
        seq, conc, replays, size_runs, allocated, content, files, packed, packed_allocated, busy
    )
