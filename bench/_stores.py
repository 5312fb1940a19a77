"""The server stores side by side: sequential steps on the local store, PostgreSQL and Redis,
and Redis's durability settings measured (``python -m bench --only stores``).

Sequential steps: 10-step runs one after another in one process (per step, the run's start
and outcome included; median of the runs), and the step-to-step time inside 50-step runs (what
one more step costs). Each store is measured in a subprocess of its own: the local store in a
fresh directory, PostgreSQL in a database of its own, Redis under a key prefix of its own.

Durability: ``durable_server(policy)`` starts a ``redis-server`` of the benchmark's own on a
free port, in a temporary directory, with ``appendonly yes`` and ``appendfsync`` ``always`` or
``everysec`` (the shared server's settings are left alone), for the sequential steps and the
worker drain to run on.

Run one alone: ``python -m bench._stores --store redis --url redis://127.0.0.1:6379/0``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import _drain


def measure(
    store: str, directory: Path, *, url: str | None = None, runs: int = 20
) -> dict[str, Any]:
    """Sequential steps on ``store`` in a subprocess; its JSON result (``{"error": ...}``)."""
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "bench._stores", "--store", store, "--dir", str(directory)]
    command += ["--runs", str(runs)] + (["--url", url] if url else [])
    try:
        done = subprocess.run(
            command, cwd=directory, env=_drain._env({}), capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return {"error": f"sequential steps on {store} did not finish within 300 s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-3:]
        return {"error": f"sequential steps on {store} failed: {' | '.join(tail)}"}
    return dict(json.loads(lines[-1]))


async def _sequential(runs: int) -> dict[str, float]:
    import wf
    from bench import _flows

    async def timed(n: int) -> float:
        start = time.perf_counter()
        run = await wf.start(_flows.steps, n)
        assert await run.result() == n
        return time.perf_counter() - start

    for _ in range(3):  # warm-up: imports, connections, scripts loaded
        await timed(10)
    whole = [await timed(10) for _ in range(runs)]
    gaps: list[float] = []
    for _ in range(max(2, runs // 10)):
        stamps: list[float] = []
        _flows.STAMPS = stamps
        try:
            await timed(50)
        finally:
            _flows.STAMPS = None
        gaps += [b - a for a, b in itertools.pairwise(stamps)]
    from wf.engine._current import current_engine

    await current_engine().store.close()
    return {
        "per_step_us": statistics.median(whole) / 10 * 1e6,
        "marginal_us": statistics.median(gaps) * 1e6,
    }


def run_one(store: str, directory: Path, url: str | None, runs: int) -> dict[str, Any]:
    import wf

    prefix = f"wfbench-seq:{os.getpid()}:{time.time_ns()}:"
    database = "wfbench_seq"
    if store == "postgres":
        wf.configure(postgres_dsn=_drain.fresh_database(database))
    elif store == "redis":
        from wf.store.redis import RedisStore

        wf.configure(store=RedisStore(url or _drain.REDIS_URL, prefix=prefix))
    else:
        wf.configure(dir=directory / ".workflows")
    try:
        return asyncio.run(_sequential(runs))
    finally:
        if store == "postgres":
            _drain.drop_database(database)
        elif store == "redis":
            _drain.drop_redis_keys(prefix, url)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def durable_server(policy: str) -> Iterator[str]:
    """A ``redis-server`` of the benchmark's own with ``appendonly yes`` and ``appendfsync
    policy``; its URL. Its files are on the disk of the current directory (as a project's
    server's would be on its own disk), removed afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found")
    where = Path(tempfile.mkdtemp(prefix=".wf-bench-redis-", dir=Path.cwd()))
    port = _free_port()
    server = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(where),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            policy,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                client = redis.Redis.from_url(url, socket_connect_timeout=1)
                client.ping()
                client.close()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["local", "postgres", "redis"], default="local")
    parser.add_argument("--url")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(json.dumps(run_one(args.store, args.dir, args.url, args.runs)), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
