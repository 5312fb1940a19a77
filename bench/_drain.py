"""Worker drain: runs started by an application, driven by separate worker processes.

The production path: an application starts ``N`` detached 3-step runs (``bench:drain3``), then
``K`` ``wf worker --concurrency 50 --until-idle`` processes drain them. The peer is DBOS: the
same workflow enqueued with ``DBOSClient`` on a queue with ``worker_concurrency=50`` and its
polling interval shortened to 0.05 s (which favours DBOS), drained by one DBOS process.

Stores: wf's local store against DBOS on SQLite; wf's PostgreSQL store against DBOS on
PostgreSQL (each in a database of its own, created for the workload, so that
``pg_stat_database`` counts only that workload's transactions and rows; wf's is named by
``WF_BENCH_DATABASE``, default ``wfbench_wf``, so that two benches on one server do not drop
each other's); wf's Redis store
(``WF_TEST_REDIS_URL``, under a key prefix of the workload's own), which DBOS has no peer of.

The wf workers start, import everything, say they are ready and wait for one signal, so that
their start-up neither counts nor slows the drain of the others (a DBOS worker starts
dequeuing as it launches; its start-up comes before its first completion). Throughput is
measured from the runs' own completion times (``updated_at`` of the finished
records, DBOS's ``workflow_status.updated_at``): ``(N - 1) / (last - first completion)``, so the
workers' start-up (imports, connections) is not counted for either system. The wall time from
spawning the workers to the last one exiting is reported beside it.

Per workload, on PostgreSQL: the database's counters over the drain (``xact_commit`` and rows
inserted / updated / deleted, from ``pg_stat_database``, read after the workers exited and
flushed their statistics), statements sent by the workers (counted in the worker processes by
wrapping the driver's ``execute``: round trips), and lock waits (``pg_stat_activity`` sampled
every 10 ms: the mean number of the workload's backends waiting on a heavyweight lock).

Also per run: CPU seconds of the wf worker processes from the go to the end of their drain
(``process_time`` in each: neither their start-up nor the interpreter's exit), of the DBOS
worker after its launch (``getrusage`` of the child, less its start-up; it ends by ``_exit``)
and, on
PostgreSQL, of the server backends serving the workload (``/proc``, the server being on this
machine), and the notifications the wf workers sent (payloads of their ``pg_notify`` batches).

Run one workload alone: ``python -m bench._drain wf --store local --runs 1000 --workers 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DSN = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("WF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CONCURRENCY = 50
POLL = 0.05
"""DBOS's queue polling interval (its default is 1 s)."""


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    for name in ("WF_RETENTION", "WF_POSTGRES_DSN", "WF_REDIS_URL", "WF_REDIS_PREFIX", "WF_DIR"):
        if name not in extra:
            env.pop(name, None)
    return env


def measure(
    system: str,
    store: str,
    *,
    runs: int,
    workers: int,
    directory: Path,
    groups: int = 0,
    timeout: float = 600,
) -> dict[str, Any]:
    """One workload in a subprocess of its own; its JSON result (``{"error": ...}`` on failure)."""
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "bench._drain",
        system,
        "--store",
        store,
        "--runs",
        str(runs),
        "--workers",
        str(workers),
        "--dir",
        str(directory),
        "--groups",
        str(groups),
    ]
    try:
        done = subprocess.run(
            command, cwd=directory, env=_env({}), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{system} {store} drain did not finish within {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-3:]
        return {"error": f"{system} {store} drain failed: {' | '.join(tail)}"}
    return dict(json.loads(lines[-1]))


# -- PostgreSQL: a database per workload, its counters, lock-wait sampling --------------------


def _dsn_for(database: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(DSN, dbname=database)


def _admin() -> Any:
    import psycopg

    return psycopg.connect(_dsn_for("postgres"), autocommit=True)


def fresh_database(name: str) -> str:
    """Drop and create database ``name``; its DSN."""
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return _dsn_for(name)


def drop_database(name: str) -> None:
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "tup_fetched",
    "blks_hit",
)


def db_counters(name: str) -> dict[str, int]:
    with _admin() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            f"SELECT {', '.join(_COUNTERS)} FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
    return dict(zip(_COUNTERS, (int(v or 0) for v in row or ()), strict=False))


class LockSampler:
    """Samples ``pg_stat_activity`` of one database every 10 ms in a thread."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.samples = 0
        self.waiting = 0
        self.lwlock = 0
        self.max_waiting = 0
        self._cpu: dict[int, float] = {}
        """Backend pid -> CPU seconds last read from /proc (the server is on this machine)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with _admin() as conn:
            query = (
                "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), "
                "count(*) FILTER (WHERE wait_event_type = 'LWLock') "
                "FROM pg_stat_activity WHERE datname = %s"
            )
            pids = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            while not self._stop.wait(0.01):
                for (pid,) in conn.execute(pids, [self.database]).fetchall():
                    seconds = _cpu_seconds(int(pid))
                    if seconds is not None:
                        self._cpu[int(pid)] = seconds
                row = conn.execute(query, [self.database]).fetchone()
                waiting, lw = (int(row[0]), int(row[1])) if row else (0, 0)
                self.samples += 1
                self.waiting += waiting
                self.lwlock += lw
                self.max_waiting = max(self.max_waiting, waiting)

    def result(self) -> dict[str, float]:
        n = max(1, self.samples)
        return {
            "lock_waiting_mean": self.waiting / n,
            "lock_waiting_max": self.max_waiting,
            "lwlock_waiting_mean": self.lwlock / n,
            "server_cpu_s": sum(self._cpu.values()),
        }


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process so far (None if it is gone or not on this machine)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in _COUNTERS}


def _settle_stats(name: str, before: dict[str, int] | None = None) -> dict[str, int]:
    """Counters once the workers' statistics have reached the server (flushed at exit)."""
    found = db_counters(name)
    for _ in range(20):
        time.sleep(0.1)
        again = db_counters(name)
        if again == found:
            break
        found = again
    return found


# -- wf ---------------------------------------------------------------------------------------


async def _wf_create(runs: int, groups: int = 0) -> float:
    import wf
    from bench import _flows

    def flow(i: int) -> Any:
        # ``groups``: run i is in group i mod groups, one run at a time per group.
        return _flows.drain3.with_options(group=f"g{i % groups}") if groups else _flows.drain3

    start = time.perf_counter()
    for first in range(0, runs, 100):
        await asyncio.gather(
            *(wf.start(flow(i), i, detach=True) for i in range(first, min(runs, first + 100)))
        )
    seconds = time.perf_counter() - start
    from wf.engine._current import current_engine

    await current_engine().store.close()
    return seconds


async def _wf_outcome(store: Any, runs: int) -> tuple[list[float], dict[str, int]]:
    records = await store.list_runs(limit=runs + 10)
    await store.close()
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status.value] = counts.get(record.status.value, 0) + 1
    done = sorted(r.updated_at for r in records if r.status.value == "completed")
    return done, counts


def run_wf(
    store_kind: str, runs: int, workers: int, directory: Path, groups: int = 0
) -> dict[str, Any]:
    import wf

    extra: dict[str, str] = {}
    database = os.environ.get("WF_BENCH_DATABASE", "wfbench_wf")
    prefix = f"wfbench:{os.getpid()}:{time.time_ns()}:"
    if store_kind == "postgres":
        dsn = fresh_database(database)
        extra["WF_POSTGRES_DSN"] = dsn
        wf.configure(postgres_dsn=dsn)
    elif store_kind == "redis":
        # Keys under a prefix of this workload's own, deleted afterwards.
        extra["WF_REDIS_URL"], extra["WF_REDIS_PREFIX"] = REDIS_URL, prefix
        os.environ["WF_REDIS_PREFIX"] = prefix
        wf.configure(redis_url=REDIS_URL)
    else:
        root = directory / ".workflows"
        extra["WF_DIR"] = str(root)
        wf.configure(dir=root)
    create_s = asyncio.run(_wf_create(runs, groups))
    counts_dir = directory / "counts"
    counts_dir.mkdir(exist_ok=True)
    extra["WF_BENCH_COUNT_DIR"] = str(counts_dir)
    command = [
        sys.executable,
        "-m",
        "bench._drain",
        "wf-worker",
        "--concurrency",
        str(CONCURRENCY),
        "--until-idle",
        "--quiet",
    ]
    pg = store_kind == "postgres"
    before = _settle_stats(database) if pg else {}
    sampler = LockSampler(database) if pg else None
    # The workers start (imports, command line), say they are ready, and wait for one go: a
    # worker's start-up is not measured, nor slows the others' drain on a small machine.
    go = directory / "go"
    extra["WF_BENCH_GO"] = str(go)
    children = _children_cpu()
    if sampler:
        sampler.__enter__()
    try:
        procs = [
            subprocess.Popen(
                command, cwd=directory, env=_env(extra), stderr=subprocess.PIPE, text=True
            )
            for _ in range(workers)
        ]
        deadline = time.time() + 120
        while len(list(counts_dir.glob("*.ready"))) < workers and time.time() < deadline:
            if any(proc.poll() is not None for proc in procs):
                break
            time.sleep(0.01)
        began = time.time()
        go.touch()
        errors = []
        for proc in procs:
            _out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                errors.append((err or "").strip().splitlines()[-3:])
    finally:
        if sampler:
            sampler.__exit__()
    wall = time.time() - began
    worker_cpu = _children_cpu() - children
    if errors:
        raise SystemExit(f"worker failed: {errors}")
    from wf.engine._current import current_engine

    done, counts = asyncio.run(_wf_outcome(current_engine().store, runs))
    result = _result(runs, workers, done, wall, create_s)
    result["statuses"] = counts
    result.update(_counts(counts_dir))
    startup = result.pop("startup_cpu_ms", 0) / 1e3
    drain = result.pop("drain_cpu_us", None)
    # From the go to the end of each worker's drain (its exit is not drain work); the
    # children's total less their start-up if a worker could not say.
    result["worker_cpu_s"] = drain / 1e6 if drain is not None else worker_cpu - startup
    collector = result.pop("gc_us", None)
    if collector is not None:
        result["worker_gc_s"] = collector / 1e6  # wall time in the collector, during the drain
    if pg:
        result["counters"] = _delta(before, _settle_stats(database))
        assert sampler is not None
        result.update(sampler.result())
        drop_database(database)
    if store_kind == "redis":
        drop_redis_keys(prefix)
    return result


def drop_redis_keys(prefix: str, url: str | None = None) -> None:
    """Delete a Redis workload's keys (on ``url``, by default the benchmark's server)."""
    import redis

    client = redis.Redis.from_url(url or REDIS_URL)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        for first in range(0, len(keys), 500):
            client.delete(*keys[first : first + 500])
    finally:
        client.close()


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _counts(counts_dir: Path) -> dict[str, int]:
    """Statements and notifications the workers sent, summed over their files."""
    total = {"statements": 0, "notifications": 0}
    for path in counts_dir.glob("*.json"):
        for key, value in json.loads(path.read_text() or "{}").items():
            total[key] = total.get(key, 0) + int(value)
    return total


def _result(
    runs: int, workers: int, done: list[float], wall: float, create_s: float
) -> dict[str, Any]:
    window = (done[-1] - done[0]) if len(done) > 1 else 0.0
    return {
        "runs": runs,
        "workers": workers,
        "completed": len(done),
        "runs_per_s": (len(done) - 1) / window if window > 0 else 0.0,
        "wall_s": wall,
        "wall_runs_per_s": len(done) / wall if wall > 0 else 0.0,
        "create_s": create_s,
    }


def wf_worker(argv: list[str]) -> None:
    """``wf worker`` with the PostgreSQL driver's statements counted (written at exit)."""
    counts_dir = os.environ.get("WF_BENCH_COUNT_DIR")
    calls = {"statements": 0, "notifications": 0}

    def write() -> None:
        if counts_dir:
            Path(counts_dir, f"{os.getpid()}.json").write_text(json.dumps(calls))

    if counts_dir and os.environ.get("WF_POSTGRES_DSN"):
        import psycopg

        cursor_execute = psycopg.AsyncCursor.execute

        async def counted_cursor(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            calls["statements"] += 1
            if isinstance(query, str) and "pg_notify" in query and params:
                calls["notifications"] += len(params[1])  # payloads sent in this statement
            return await cursor_execute(self, query, params, **kw)

        # AsyncConnection.execute goes through a cursor's execute: count that one only.
        psycopg.AsyncCursor.execute = counted_cursor  # type: ignore[method-assign]
    # Start-up is not a per-run cost: imports, the command line, the workflows' module, the
    # store's connections (schema check, LISTEN; the local store's watcher) and the input
    # validators (``Worker.prepare``, which ``wf worker`` does before it says it started) all
    # happen before the worker says it is ready, and its CPU so far is measured apart. Else
    # every added worker would build its command line and connect while the others drain,
    # and count that as drain work.
    import wf.cli
    import wf.engine._worker
    from bench import _flows  # noqa: F401  (the runs' workflows: imported once, up front)

    run = wf.engine._worker.Worker.run

    async def run_when_told(self: Any, **kwargs: Any) -> None:
        await self.prepare()  # the worker's own start-up: store opened, validators built
        go = os.environ.get("WF_BENCH_GO")
        if go and counts_dir:
            Path(counts_dir, f"{os.getpid()}.ready").touch()
            deadline = time.time() + 120
            while not os.path.exists(go) and time.time() < deadline:
                await asyncio.sleep(0.005)
        # After the wait for the go: looking for it every 5 ms while slower workers start up
        # is start-up too (with 4 workers on 2 cores, about 0.1 s of CPU each).
        import resource

        collecting = _collector_time()
        started = time.process_time()
        switches = resource.getrusage(resource.RUSAGE_SELF)
        calls["startup_cpu_ms"] = round(started * 1e3)
        try:
            await run(self, **kwargs)
        finally:
            # The drain's own CPU: not the interpreter's exit (a DBOS worker ends by _exit).
            calls["drain_cpu_us"] = round((time.process_time() - started) * 1e6)
            calls["gc_us"] = round(collecting() * 1e6)
            ended = resource.getrusage(resource.RUSAGE_SELF)
            calls["switches_voluntary"] = ended.ru_nvcsw - switches.ru_nvcsw
            calls["switches_involuntary"] = ended.ru_nivcsw - switches.ru_nivcsw

    wf.engine._worker.Worker.run = run_when_told  # type: ignore[method-assign]
    if os.environ.get("WF_BENCH_NO_SETTLE"):
        # What ``wf.cli._heap`` buys: workers keep CPython's collector as it starts.
        import wf.cli._heap

        wf.cli._heap.settle_heap = lambda: False
    try:
        wf.cli.main(["worker", *argv])
    finally:
        write()


def _collector_time() -> Callable[[], float]:
    """Start timing the cyclic garbage collector; the returned function says its seconds so far."""
    import gc

    spent = [0.0]
    began = [0.0]

    def timed(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - began[0]

    gc.callbacks.append(timed)
    return lambda: spent[0]


# -- DBOS -------------------------------------------------------------------------------------


def _dbos_url(store_kind: str, directory: Path) -> str:
    if store_kind == "postgres":
        dsn = fresh_database("wfbench_dbos")
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(dsn)
        return (
            f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:"
            f"{info.get('port', 5432)}/wfbench_dbos"
        )
    return f"sqlite:///{directory / 'dbos.sqlite'}"


def run_dbos(store_kind: str, runs: int, directory: Path, groups: int = 0) -> dict[str, Any]:
    from dbos import DBOS, DBOSClient, DBOSConfig

    url = _dbos_url(store_kind, directory)
    config: DBOSConfig = {"name": "wfbench", "system_database_url": url, "log_level": "ERROR"}
    DBOS(config=config)
    DBOS.launch()  # creates the system tables
    DBOS.destroy()
    client = DBOSClient(system_database_url=url)
    # Registered (persisted) here: the worker process listens to the queues it finds.
    # ``groups``: DBOS 3.4 partitions a queue when a ``partition_*`` limit is set (there is no
    # ``partition_queue=True`` flag in 3.4); each enqueue names its partition.
    client.register_queue(
        "drain",
        worker_concurrency=CONCURRENCY,
        polling_interval_sec=POLL,
        partition_concurrency=1 if groups else None,
    )
    start = time.perf_counter()
    for i in range(runs):
        options: Any = {"queue_name": "drain", "workflow_name": "drain3"}
        if groups:
            options["queue_partition_key"] = f"g{i % groups}"
        client.enqueue(options, i)
    create_s = time.perf_counter() - start
    client.destroy()
    pg = store_kind == "postgres"
    database = "wfbench_dbos"
    before = _settle_stats(database) if pg else {}
    sampler = LockSampler(database) if pg else None
    counts_dir = directory / "counts"
    counts_dir.mkdir(exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "bench._drain",
        "dbos-worker",
        "--url",
        url,
        "--runs",
        str(runs),
        "--count-dir",
        str(counts_dir),
    ]
    began = time.time()
    children = _children_cpu()
    if sampler:
        sampler.__enter__()
    try:
        done_proc = subprocess.run(
            command, cwd=directory, env=_env({}), capture_output=True, text=True, timeout=600
        )
    finally:
        if sampler:
            sampler.__exit__()
    wall = time.time() - began
    if done_proc.returncode != 0:
        raise SystemExit(f"DBOS worker failed: {done_proc.stderr.strip().splitlines()[-3:]}")
    worker_cpu = _children_cpu() - children
    done = _dbos_completions(url, store_kind, directory)
    result = _result(runs, 1, done, wall, create_s)
    result.update(_counts(counts_dir))
    result["worker_cpu_s"] = worker_cpu - result.pop("startup_cpu_ms", 0) / 1e3
    if pg:
        result["counters"] = _delta(before, _settle_stats(database))
        assert sampler is not None
        result.update(sampler.result())
        drop_database(database)
    return result


def _dbos_completions(url: str, store_kind: str, directory: Path) -> list[float]:
    query = "SELECT updated_at FROM {t} WHERE status = 'SUCCESS' ORDER BY updated_at"
    if store_kind == "postgres":
        import psycopg

        with psycopg.connect(_dsn_for("wfbench_dbos")) as conn:
            rows = conn.execute(query.format(t="dbos.workflow_status")).fetchall()
    else:
        with sqlite3.connect(directory / "dbos.sqlite") as conn:
            rows = conn.execute(query.format(t="workflow_status")).fetchall()
    return [float(r[0]) / 1000 for r in rows]


def dbos_worker(url: str, runs: int, count_dir: Path, *, stamps: bool = False) -> None:
    """A DBOS process serving the queue until ``runs`` workflows succeeded."""
    import sqlalchemy
    from dbos import DBOS, DBOSConfig

    calls = [0]

    def count(*_args: Any) -> None:
        calls[0] += 1

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", count)
    config: DBOSConfig = {"name": "wfbench", "system_database_url": url, "log_level": "ERROR"}
    DBOS(config=config)

    @DBOS.step(name="drain_step")
    async def drain_step(i: int) -> int:
        return i + 1

    @DBOS.workflow(name="drain3")
    async def drain3(i: int) -> int:
        x = await drain_step(i)
        x = await drain_step(x)
        return await drain_step(x)

    @DBOS.step(name="stamp_step")
    async def stamp_step(i: int) -> float:
        now = time.time()
        Path(os.environ["WF_BENCH_STAMPS"], str(i)).write_text(repr(now))
        return now

    @DBOS.workflow(name="stamp")
    async def stamp(i: int) -> float:
        return await stamp_step(i)

    DBOS.launch()
    startup_ms = round(time.process_time() * 1e3)
    if stamps:
        Path(count_dir, "ready").touch()
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        conn: Any = sqlite3.connect(path, timeout=30)
        table = "workflow_status"
    else:
        import psycopg

        conn = psycopg.connect(_dsn_for("wfbench_dbos"), autocommit=True)
        table = "dbos.workflow_status"
    deadline = time.time() + 600
    while time.time() < deadline:
        n = conn.execute(f"SELECT count(*) FROM {table} WHERE status = 'SUCCESS'").fetchone()[0]
        if n >= runs:
            break
        time.sleep(0.02)
    conn.close()
    counts = {"statements": calls[0], "startup_cpu_ms": startup_ms}
    Path(count_dir, f"{os.getpid()}.json").write_text(json.dumps(counts))
    os._exit(0)


# -- enqueue cost and latency to the first step, an idle worker already running ---------------


def _wait_files(where: Path, n: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while len(list(where.iterdir())) < n and time.time() < deadline:
        time.sleep(0.01)


def _latency_result(
    costs: list[float], enqueued: list[float], stamps: Path, n: int
) -> dict[str, Any]:
    """Enqueue cost and enqueue-to-first-step latency; the first (warm-up) enqueue dropped."""
    import statistics

    lat = []
    for i in range(1, n + 1):
        path = stamps / str(i)
        if path.exists():
            lat.append(float(path.read_text()) - enqueued[i])
    lat.sort()
    cost = sorted(costs[1:])
    return {
        "runs": n,
        "reached": len(lat),
        "enqueue_us_median": statistics.median(cost) * 1e6,
        "enqueue_us_p99": cost[min(len(cost) - 1, int(len(cost) * 0.99))] * 1e6,
        "latency_ms_median": statistics.median(lat) * 1e3 if lat else 0.0,
        "latency_ms_p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3 if lat else 0.0,
    }


def latency_wf(n: int, spacing: float, directory: Path) -> dict[str, Any]:
    """``n`` + 1 runs of ``bench:stamp`` started one at a time, ``spacing`` s apart, while one
    idle ``wf worker --concurrency 50`` (no ``--until-idle``) waits on the local store."""
    import wf
    from bench import _flows

    root = directory / ".workflows"
    stamps = directory / "stamps"
    stamps.mkdir()
    counts_dir = directory / "counts"
    counts_dir.mkdir()
    go = directory / "go"
    wf.configure(dir=root)
    extra = {
        "WF_DIR": str(root),
        "WF_BENCH_STAMPS": str(stamps),
        "WF_BENCH_COUNT_DIR": str(counts_dir),
        "WF_BENCH_GO": str(go),
    }
    command = [sys.executable, "-m", "bench._drain", "wf-worker", "--concurrency", "50", "--quiet"]
    proc = subprocess.Popen(command, cwd=directory, env=_env(extra), stderr=subprocess.PIPE)
    try:
        _wait_files(counts_dir, 1, 120)
        go.touch()
        time.sleep(1.0)  # the worker is up and idle before the first enqueue

        async def enqueue() -> tuple[list[float], list[float]]:
            costs, enqueued = [], []
            for i in range(n + 1):
                enqueued.append(time.time())
                began = time.perf_counter()
                await wf.start(_flows.stamp, i, detach=True)
                costs.append(time.perf_counter() - began)
                await asyncio.sleep(spacing)
            from wf.engine._current import current_engine

            await current_engine().store.close()
            return costs, enqueued

        costs, enqueued = asyncio.run(enqueue())
        _wait_files(stamps, n + 1, 30)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return _latency_result(costs, enqueued, stamps, n)


def latency_dbos(n: int, spacing: float, directory: Path) -> dict[str, Any]:
    """The same with DBOS on SQLite: ``DBOSClient.enqueue`` while one DBOS process serves a
    queue with ``worker_concurrency=50`` and the bench's polling interval (0.05 s)."""
    from dbos import DBOS, DBOSClient, DBOSConfig

    url = _dbos_url("sqlite", directory)
    config: DBOSConfig = {"name": "wfbench", "system_database_url": url, "log_level": "ERROR"}
    DBOS(config=config)
    DBOS.launch()
    DBOS.destroy()
    client = DBOSClient(system_database_url=url)
    client.register_queue("latency", worker_concurrency=CONCURRENCY, polling_interval_sec=POLL)
    stamps = directory / "stamps"
    stamps.mkdir()
    counts_dir = directory / "counts"
    counts_dir.mkdir()
    command = [
        sys.executable,
        "-m",
        "bench._drain",
        "dbos-worker",
        "--url",
        url,
        "--runs",
        str(n + 1),
        "--count-dir",
        str(counts_dir),
        "--stamps",
    ]
    extra = {"WF_BENCH_STAMPS": str(stamps)}
    proc = subprocess.Popen(command, cwd=directory, env=_env(extra), stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while not (counts_dir / "ready").exists() and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)
        costs, enqueued = [], []
        for i in range(n + 1):
            enqueued.append(time.time())
            began = time.perf_counter()
            client.enqueue({"queue_name": "latency", "workflow_name": "stamp"}, i)
            costs.append(time.perf_counter() - began)
            time.sleep(spacing)
        _wait_files(stamps, n + 1, 30)
        client.destroy()
    finally:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return _latency_result(costs, enqueued, stamps, n)


def measure_latency(system: str, *, runs: int, directory: Path) -> dict[str, Any]:
    """One latency workload in a subprocess of its own (``system``: ``wf`` or ``dbos``)."""
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "bench._drain",
        f"{system}-latency",
        "--runs",
        str(runs),
        "--dir",
        str(directory),
    ]
    try:
        done = subprocess.run(
            command, cwd=directory, env=_env({}), capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{system} latency did not finish within 300 s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-3:]
        return {"error": f"{system} latency failed: {' | '.join(tail)}"}
    return dict(json.loads(lines[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "wf-worker":
        wf_worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "system", choices=["wf", "dbos", "dbos-worker", "wf-latency", "dbos-latency"]
    )
    parser.add_argument(
        "--store", choices=["local", "sqlite", "postgres", "redis"], default="local"
    )
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    parser.add_argument("--url")
    parser.add_argument("--count-dir", type=Path)
    parser.add_argument("--groups", type=int, default=0)
    parser.add_argument("--spacing", type=float, default=0.137)
    parser.add_argument("--stamps", action="store_true")
    args = parser.parse_args()
    if args.system == "dbos-worker":
        dbos_worker(args.url, args.runs, args.count_dir, stamps=args.stamps)
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.system == "wf":
        result = run_wf(args.store, args.runs, args.workers, args.dir, args.groups)
    elif args.system == "wf-latency":
        result = latency_wf(args.runs, args.spacing, args.dir)
    elif args.system == "dbos-latency":
        result = latency_dbos(args.runs, args.spacing, args.dir)
    else:
        result = run_dbos(args.store, args.runs, args.dir, args.groups)
    print(json.dumps(result), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
