"""``wf serve`` over a store of 100,000 runs: requests per second and p50/p99 latency of
``GET /api/v1/runs/{id}`` and of starting a run (``POST /api/v1/runs``) against a real ``wf
serve --no-worker`` process, and the runs page's server time (the app in-process, through its
ASGI interface: what the server spends, without the client's or the network's share).

Run alone (a fresh store is generated, like the listing rows' one)::

    python -m bench._serve [--runs 100000] [--seconds 3] [--store DIR/.workflows]

(``--store``: measure an existing store instead, such as one kept from an earlier run.)
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _cli

CLIENTS = 8
"""Concurrent clients: enough to keep the server busy on a 2-core machine."""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _load(url: str, seconds: float, request: Any) -> dict[str, float]:
    """``CLIENTS`` clients sending ``request(client, i)`` for ``seconds``: req/s, p50, p99."""
    import httpx

    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def one(worker: int) -> None:
            i = worker
            while time.perf_counter() < stop:
                began = time.perf_counter()
                response = await request(client, i)
                latencies.append(time.perf_counter() - began)
                if response.status_code >= 400:
                    raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
                i += CLIENTS
                # Let the other clients run: a response already buffered is read without the
                # task ever suspending, so one client could send request after request while
                # the others' answers wait unread, and their waits would count as the
                # server's latency (p99s of 30-85 ms against 4 ms here before this line).
                await asyncio.sleep(0)

        began = time.perf_counter()
        await asyncio.gather(*(one(w) for w in range(CLIENTS)))
        took = time.perf_counter() - began
    return {
        "rps": len(latencies) / took,
        "p50": _percentile(latencies, 0.50) * 1e3,
        "p99": _percentile(latencies, 0.99) * 1e3,
    }


async def _page_time(store_dir: Path, times: int) -> dict[str, float]:
    """Server time of ``GET /`` (the runs page) and ``GET /runs/{id}``, in-process."""
    import httpx

    from wf.engine._engine import Engine
    from wf.serve import create_app
    from wf.store.local import LocalStore

    store = LocalStore(store_dir)
    app = create_app(Engine(store), drive=False)
    out: dict[str, float] = {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        newest = (await client.get("/api/v1/runs", params={"limit": 1})).json()["runs"][0]["id"]
        for name, path in (("page", "/"), ("run_page", f"/runs/{newest}")):
            samples = []
            for _ in range(times + 1):
                began = time.perf_counter()
                response = await client.get(path)
                samples.append(time.perf_counter() - began)
                assert response.status_code == 200, response.text[:200]
            samples = samples[1:]  # the first warms caches
            out[name] = statistics.median(samples) * 1e3
            out[name + "_p99"] = _percentile(samples, 0.99) * 1e3
        filtered = []
        for _ in range(times):
            began = time.perf_counter()
            await client.get("/", params={"status": "failed"})
            filtered.append(time.perf_counter() - began)
        out["page_failed"] = statistics.median(filtered) * 1e3
    await store.close()
    return out


def measure(store_dir: Path, seconds: float = 3.0) -> dict[str, dict[str, float]]:
    """Every serve figure over the store in ``store_dir`` (which gains the runs started)."""
    import httpx

    page = asyncio.run(_page_time(store_dir, 30))
    port = _port()
    env = _cli._env(store_dir)
    # The runs it starts are bench's workflows, outside the server's project (the listing
    # store's directory): a server starts only what its project holds or its modules name.
    env["WF_MODULES"] = "bench._flows"
    server = subprocess.Popen(
        [sys.executable, "-m", "wf", "serve", "--no-worker", "--port", str(port)],
        env=env,
        cwd=store_dir.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ids = [
                    r["id"]
                    for r in httpx.get(url + "/api/v1/runs", params={"limit": 500}).json()["runs"]
                ]
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("wf serve did not start") from None
                time.sleep(0.1)

        async def read(client: Any, i: int) -> Any:
            return await client.get(f"/api/v1/runs/{ids[i % len(ids)]}")

        async def start(client: Any, i: int) -> Any:
            body = {"target": "bench._flows:steps", "input": 10}
            return await client.post("/api/v1/runs", json=body)

        reads = asyncio.run(_load(url, seconds, read))
        starts = asyncio.run(_load(url, seconds, start))
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {"page": page, "read": reads, "start": starts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--store", type=Path, help="an existing store to measure (kept)")
    args = parser.parse_args()
    if args.store is not None:
        for line in rows_text(measure(args.store.resolve(), args.seconds), args.runs):
            print(line)
        return
    base = Path(tempfile.mkdtemp(prefix=".wf-bench-serve-", dir=Path.cwd()))
    try:
        store_dir = base / ".workflows"
        took = _cli.generate(store_dir, args.runs)
        print(f"generated {args.runs:,} runs in {took:.0f} s", file=sys.stderr)
        found = measure(store_dir, args.seconds)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for line in rows_text(found, args.runs):
        print(line)


def rows_text(found: dict[str, dict[str, float]], runs: int) -> list[str]:
    """The figures as lines (``run.py`` makes table rows of the same)."""
    page, read, start = found["page"], found["read"], found["start"]
    return [
        f"runs page server time ({runs:,} runs): median {page['page']:.1f} ms, p99 "
        f"{page['page_p99']:.1f} ms (budget < 100 ms); filtered by status: "
        f"{page['page_failed']:.1f} ms; a run's page: {page['run_page']:.1f} ms",
        f"GET /api/v1/runs/{{id}}: {read['rps']:.0f} req/s, p50 {read['p50']:.1f} ms, "
        f"p99 {read['p99']:.1f} ms ({CLIENTS} clients)",
        f"POST /api/v1/runs (start): {start['rps']:.0f} req/s, p50 {start['p50']:.1f} ms, "
        f"p99 {start['p99']:.1f} ms ({CLIENTS} clients)",
    ]


if __name__ == "__main__":
    main()
