"""Scale: every interactive read at 10,000 and 100,000 runs (1,000,000 with ``--million``), and
its ratio to the 10,000 figure, so a read that grows with the store shows.

One local store grows from size to size: runs are written through the store API
(``LocalStore.create_run``) by one process per CPU with fsync off in those processes only
(``bench._cli``'s generator: durability is not what is measured), created in a burst (the
case that made one huge directory per time bucket), 90% completed, 5% failed, 3% suspended,
2% running, 10 workflows, 40% of the runs in two named queues, a tenth in one big group
(``BIG_GROUP``, drawn at random) and a quarter of the others in 997 small ones, two thirds
pinned to two deployments. Each read is timed in-process, best of 7 (on a shared machine a
2 ms read varies tenfold from one call to the next), warm cache; the search reads are
``wf.admin.list_runs`` (what ``GET /api/v1/runs?search=`` and the web UI call). Each row
says how many runs the read returned: a read whose first size returned less than a page
(a small group: about 2 runs at 10,000; two rare filters together) says so beside its ratio,
which then counts the page's growth as well as the store's. The big group's rows and ``-s
failed -w flow_3`` fill a page at every size.

On PostgreSQL (``--postgres``; in ``python -m bench --only scale`` when the server answers,
unless ``--no-postgres``) the same mix is written through ``PostgresStore.create_run``, 200 at
once, into a database of its own (``wfbench_scale``, dropped at the end), and read the same way.

Run alone: ``python -m bench._scale [--million] [--postgres] [--sizes 10000,100000]
[--dir DIR]``; or ``python -m bench --only scale [--million] [--no-postgres]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import _cli

if TYPE_CHECKING:
    from wf.store import RunRecord, Store

SIZES = (10_000, 100_000)
MILLION = 1_000_000


def grow(store_dir: Path, start: int, count: int) -> float:
    """Add runs ``start`` .. ``count - 1`` to the store (one process per CPU); seconds."""
    parts = max(1, os.cpu_count() or 1)
    began = time.perf_counter()

    def numbers(part: int) -> list[str]:
        return [str(part), str(parts), str(start), str(count)]

    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench._scale", "generate", str(store_dir), *numbers(part)],
            env=_cli._env(),
        )
        for part in range(parts)
    ]
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError("generating the scale store failed")
    os.sync()
    return time.perf_counter() - began


async def _generate(store_dir: Path, part: int, parts: int, start: int, count: int) -> None:
    from wf.store.local import LocalStore, _fsops

    _fsops.fsync = lambda fd, path: None  # test data only (see the module's docstring)
    _fsops.fsync_dir = lambda path: None
    _fsops.fdatasync = lambda fd, path: None
    store = LocalStore(store_dir)
    rng = random.Random(part * 7919 + start)
    for n in range(start + part, count, parts):
        await store.create_run(*_run(n, rng))
    await store.close()


_NOW = time.time()
QUEUES = ("emails", "reports", None, None, None)
"""Named queues of the mix: 20% of runs in each, the rest in the default queue."""
GROUPS = 997
"""A quarter of the runs are in a group lane, one of this many (about 250 each at 1M)."""
BIG_GROUP = "customer_big"
"""One group holds a tenth of the runs (drawn at random, so its runs have every workflow):
its filters return a full page at every size, so their ratios show the store's growth, not
the page's."""
DEPLOYMENTS = ("v1", "v2", None)


def _run(n: int, rng: random.Random | None = None) -> tuple[RunRecord, list[dict[str, Any]]]:
    """The ``n``-th run of the mix: 90% completed, 5% failed, 3% suspended, 2% running; in
    named queues, group lanes and pinned to deployments as ``QUEUES``, ``GROUPS`` and
    ``DEPLOYMENTS`` say."""
    from wf.store import RunRecord, RunStatus

    rng = rng or random.Random(n)
    roll = rng.randrange(100)
    status = (
        RunStatus.COMPLETED
        if roll < 90
        else RunStatus.FAILED
        if roll < 95
        else RunStatus.SUSPENDED
        if roll < 98
        else RunStatus.RUNNING
    )
    record = RunRecord(
        id="wrun_" + _cli._b32(int(_NOW * 1000) + n, 10) + _cli._b32(rng.getrandbits(79), 16),
        workflow=f"app.flows:flow_{n % 10}",
        status=status,
        input={"args": [n], "kwargs": {}},
        output=n if status is RunStatus.COMPLETED else None,
        error={"type": "ValueError", "message": "bad"} if status is RunStatus.FAILED else None,
        created_at=_NOW,
        updated_at=_NOW,
        wake_at=_NOW + 86400 if status is RunStatus.SUSPENDED else None,
        queue=QUEUES[n % len(QUEUES)],
        group=BIG_GROUP
        if rng.randrange(10) == 0
        else f"customer_{n % GROUPS}"
        if n % 4 == 0
        else None,
        deployment=DEPLOYMENTS[n % len(DEPLOYMENTS)],
    )
    return record, [{"type": "run_started", "ts": _NOW, "workflow": record.workflow}]


Read = tuple[float, int | None]
"""A read's milliseconds (best of its tries) and how many runs it returned (None: not a list)."""


async def _best(call: Callable[[], Awaitable[Any]], times: int = 7) -> Read:
    best = float("inf")
    found: Any = None
    for _ in range(times):
        began = time.perf_counter()
        found = await call()
        best = min(best, time.perf_counter() - began)
    runs = getattr(found, "runs", found)  # ``admin.list_runs`` answers a page
    return best * 1e3, len(runs) if isinstance(runs, list) else None


async def reads(store: Store) -> dict[str, Read]:
    """Each interactive read on the store as it is now: milliseconds and runs returned."""
    from wf import admin
    from wf.store import RunStatus

    newest = await store.list_runs(limit=50)
    some = newest[7]
    out = {
        "store info (counts)": await _best(store.store_info),
        "runs: newest 50": await _best(lambda: store.list_runs(limit=50)),
        "runs: page 21 (before=)": await _best(
            lambda: store.list_runs(limit=50, before=newest[-1].id)
        ),
        "runs -s failed": await _best(
            lambda: store.list_runs(statuses=[RunStatus.FAILED], limit=50)
        ),
        "runs -s suspended": await _best(
            lambda: store.list_runs(statuses=[RunStatus.SUSPENDED], limit=50)
        ),
        "runs -s cancelled (none match)": await _best(
            lambda: store.list_runs(statuses=[RunStatus.CANCELLED], limit=50)
        ),
        "runs -w flow_3": await _best(
            lambda: store.list_runs(workflow="app.flows:flow_3", limit=50)
        ),
        "runs -s running -w flow_3": await _best(
            lambda: store.list_runs(
                statuses=[RunStatus.RUNNING], workflow="app.flows:flow_3", limit=50
            )
        ),
        "runs --queue emails": await _best(lambda: store.list_runs(queue="emails", limit=50)),
        "runs --group customer_5": await _best(
            lambda: store.list_runs(group="customer_5", limit=50)
        ),
        "runs --deployment v1": await _best(lambda: store.list_runs(deployment="v1", limit=50)),
        "runs -s failed --queue emails": await _best(
            lambda: store.list_runs(statuses=[RunStatus.FAILED], queue="emails", limit=50)
        ),
        "runs -w flow_4 --group customer_4": await _best(
            lambda: store.list_runs(workflow="app.flows:flow_4", group="customer_4", limit=50)
        ),
        f"runs --group {BIG_GROUP}": await _best(
            lambda: store.list_runs(group=BIG_GROUP, limit=50)
        ),
        f"runs -w flow_4 --group {BIG_GROUP}": await _best(
            lambda: store.list_runs(workflow="app.flows:flow_4", group=BIG_GROUP, limit=50)
        ),
        "runs -s failed -w flow_3": await _best(
            lambda: store.list_runs(
                statuses=[RunStatus.FAILED], workflow="app.flows:flow_3", limit=50
            )
        ),
        "search: workflow name": await _best(lambda: admin.list_runs(store, search="flow_3")),
        "search: whole id": await _best(lambda: admin.list_runs(store, search=some.id)),
        "search: id prefix": await _best(lambda: admin.list_runs(store, search=some.id[:14])),
        "search: no match (bounded)": await _best(lambda: admin.list_runs(store, search="zzzz")),
        "inspect one run": await _best(lambda: admin.run_detail(store, some.id, now=time.time())),
    }
    return out


async def _local_reads(store_dir: Path) -> dict[str, Read]:
    from wf.store.local import LocalStore

    store = LocalStore(store_dir)
    try:
        return await reads(store)
    finally:
        await store.close()


async def _postgres_grow_and_read(
    dsn: str, start: int, count: int
) -> tuple[float, dict[str, Read]]:
    """Add runs ``start`` .. ``count - 1`` through ``create_run`` (200 at once); the seconds
    that took and the reads."""
    from wf.store.postgres import PostgresStore

    store = PostgresStore(dsn)
    try:
        began = time.perf_counter()
        for first in range(start, count, 200):
            await asyncio.gather(
                *(store.create_run(*_run(n)) for n in range(first, min(first + 200, count)))
            )
        took = time.perf_counter() - began
        async with store._query("vacuum", None, False) as conn:
            await conn.execute("ANALYZE wf_runs")
        return took, await reads(store)
    finally:
        await store.close()


def run(
    base: Path,
    million: bool,
    progress: Callable[[str], None],
    *,
    postgres: str | None = None,
    sizes: tuple[int, ...] | None = None,
) -> list[tuple[str, ...]]:
    """Rows ``(store: measure, size, ms, ratio to the first size)``; on PostgreSQL too when
    ``postgres`` (a DSN of a database the benchmark may fill) is given."""
    sizes = sizes or ((*SIZES, MILLION) if million else SIZES)
    rows: list[tuple[str, ...]] = []
    store_dir = base / "scale" / ".workflows"
    first: dict[str, Read] = {}
    made = 0
    for size in sizes:
        progress(f"scale (local): growing the store to {size:,} runs")
        took = grow(store_dir, made, size)
        progress(f"scale (local): {size - made:,} runs written in {took:.0f} s; reading")
        made = size
        found = asyncio.run(_local_reads(store_dir))
        first = first or found
        rows.extend(_rows("local", size, found, first))
        disk = _disk(store_dir)
        rows.append(
            ("local: disk per run (95% finished)", f"{size:,}", f"{disk / size / 1024:.1f} KiB", "")
        )
    if postgres is None:
        return rows
    first, made = {}, 0  # (a fresh ``first``: PostgreSQL's ratios are to its own 10k)
    for size in sizes:
        progress(f"scale (PostgreSQL): growing the store to {size:,} runs")
        took, found = asyncio.run(_postgres_grow_and_read(postgres, made, size))
        progress(f"scale (PostgreSQL): {size - made:,} runs written in {took:.0f} s")
        made = size
        first = first or found
        rows.extend(_rows("PostgreSQL", size, found, first))
    return rows


PAGE = 50


def _rows(
    kind: str, size: int, found: dict[str, Read], first: dict[str, Read]
) -> list[tuple[str, ...]]:
    """One row per read; a list says how many runs it returned, and a ratio whose first
    read returned fewer runs than this one (less than a page) says so: that ratio counts the
    page's growth too."""
    rows: list[tuple[str, ...]] = []
    for name, (ms, runs) in found.items():
        first_ms, first_runs = first[name]
        value = f"{ms:.1f} ms" if runs is None else f"{ms:.1f} ms, {runs} runs"
        ratio = f"{ms / first_ms:.2f}×"
        if first_runs is not None and runs is not None and first_runs < min(runs, PAGE):
            ratio += f" (its first page: {first_runs} runs)"
        rows.append((f"{kind}: {name}", f"{size:,}", value, ratio))
    return rows


def _disk(path: Path) -> int:
    """Bytes allocated to the store: files and directories (a run's directory is a block)."""
    total = 0
    for directory, _dirs, files in os.walk(path):
        for name in (".", *files):
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


def render(rows: list[tuple[str, ...]]) -> str:
    head = ("read", "runs", "time", "vs 10k")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        for row in [head, *rows]
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "generate":
        store, part, parts, start, count = sys.argv[2:7]
        asyncio.run(_generate(Path(store), int(part), int(parts), int(start), int(count)))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--million", action="store_true", help="also at 1,000,000 runs")
    parser.add_argument("--dir", type=Path, help="work here (default: the current directory)")
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL")
    parser.add_argument("--sizes", help="comma-separated sizes instead of 10,000 and 100,000")
    args = parser.parse_args()
    sizes = tuple(int(n) for n in args.sizes.split(",")) if args.sizes else None
    dsn = None
    if args.postgres:
        from bench import _drain

        dsn = _drain.fresh_database("wfbench_scale")
    directory = args.dir or Path.cwd()
    base = Path(tempfile.mkdtemp(prefix=".wf-scale-", dir=directory))
    began = time.perf_counter()
    try:
        rows = run(
            base,
            args.million,
            lambda m: print(f"[{time.perf_counter() - began:5.0f} s] {m}", file=sys.stderr),
            postgres=dsn,
            sizes=sizes,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if dsn is not None:
            from bench import _drain

            _drain.drop_database("wfbench_scale")
    print(render(rows))


if __name__ == "__main__":
    main()
