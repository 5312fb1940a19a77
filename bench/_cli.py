"""The command line as a user meets it: ``wf --help`` start-up, and ``wf runs`` / ``wf inspect
--json`` over a store of 100,000 runs, each a fresh subprocess (best of N wall-clock times).

The big store is generated through the store API (``LocalStore.create_run``) by one process per
CPU, with fsync turned off in those processes only: durability is not what the listing measures,
and 100,000 durable creations would take longer than the whole rest of the benchmark. The page
cache is flushed (``os.sync``) before anything is timed, so the dirty pages of the generation do
not slow the timings that follow.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env(store: Path | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("WF_DEBUG", None)
    # Start-up as users see it: with bytecode caches (the first, discarded run writes them).
    # Some sandboxes set PYTHONDONTWRITEBYTECODE, which makes every start recompile wf.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if store is not None:
        env["WF_DIR"] = str(store)
    return env


def wf_command() -> list[str]:
    """The installed ``wf`` script (what users type), else ``python -m wf``.

    The script next to this interpreter comes first: a ``wf`` found on PATH may be a version
    manager's shim (pyenv's is a shell script), which would add its own start-up.
    """
    beside = Path(sys.executable).with_name("wf")
    script = str(beside) if os.access(beside, os.X_OK) else shutil.which("wf")
    return [script] if script else [sys.executable, "-m", "wf"]


def best_of(command: list[str], times: int, *, cwd: Path, env: dict[str, str]) -> float:
    """Best wall-clock milliseconds of ``times`` runs of ``command`` (which must succeed), after
    one untimed run (it writes the bytecode caches, and warms the page cache)."""
    best = float("inf")
    for attempt in range(times + 1):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.decode()[-500:]}")
        if attempt:
            best = min(best, elapsed)
    return best * 1e3


def startup(times: int, cwd: Path) -> tuple[float, float]:
    """(``wf --help`` ms, bare ``python -c pass`` ms): the second is the interpreter's share."""
    env = _env()
    python = best_of([sys.executable, "-c", "pass"], times, cwd=cwd, env=env)
    return best_of([*wf_command(), "--help"], times, cwd=cwd, env=env), python


# -- the big store ---------------------------------------------------------------------------

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _b32(value: int, length: int) -> str:
    return "".join(_ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(length)))


async def _generate_part(store_dir: Path, part: int, parts: int, count: int) -> None:
    from wf.store import RunRecord, RunStatus
    from wf.store.local import LocalStore, _fsops

    # This process only generates test data: skip every fsync (see the module's docstring).
    _fsops.fsync = lambda fd, path: None
    _fsops.fsync_dir = lambda path: None
    _fsops.fdatasync = lambda fd, path: None
    store = LocalStore(store_dir)
    rng = random.Random(part)
    span = 30 * 86400  # a month of runs: the index spreads them over its time buckets
    start = time.time() - span
    statuses = [RunStatus.COMPLETED] * 90 + [RunStatus.FAILED] * 5
    statuses += [RunStatus.SUSPENDED] * 3 + [RunStatus.RUNNING] * 2
    for n in range(part, count, parts):
        at = start + n * span / count
        status = rng.choice(statuses)
        record = RunRecord(
            id="wrun_" + _b32(int(at * 1000), 10) + _b32(rng.getrandbits(79), 16),
            workflow=f"app.flows:flow_{n % 10}",
            status=status,
            input={"args": [n], "kwargs": {}},
            output=n if status is RunStatus.COMPLETED else None,
            error={"type": "ValueError", "message": "bad"} if status is RunStatus.FAILED else None,
            created_at=at,
            updated_at=at,
            wake_at=at + 86400 if status is RunStatus.SUSPENDED else None,
        )
        events = [
            {"type": "run_started", "ts": at, "workflow": record.workflow, "input": record.input}
        ]
        await store.create_run(record, events)
    await store.close()


def generate(store_dir: Path, count: int) -> float:
    """Create ``count`` runs in ``store_dir`` with one process per CPU; seconds taken."""
    parts = max(1, os.cpu_count() or 1)
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench._cli",
                "generate",
                str(store_dir),
                str(part),
                str(parts),
                str(count),
            ],
            env=_env(),
        )
        for part in range(parts)
    ]
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError("generating the listing store failed")
    os.sync()
    return time.perf_counter() - start


def listing(store_dir: Path, times: int, cwd: Path) -> dict[str, float]:
    """Milliseconds: ``wf runs``, ``wf runs --json``, ``wf inspect --json`` (subprocesses), and
    ``list_runs(limit=50)`` in-process (the store's own share)."""
    from wf.store.local import LocalStore

    env = _env(store_dir)
    wf = wf_command()
    out = {
        "runs": best_of([*wf, "runs"], times, cwd=cwd, env=env),
        "runs_json": best_of([*wf, "runs", "--json"], times, cwd=cwd, env=env),
        "inspect_json": best_of([*wf, "inspect", "--json"], times, cwd=cwd, env=env),
    }

    async def in_process() -> float:
        store = LocalStore(store_dir)
        best = float("inf")
        for _ in range(times):
            start = time.perf_counter()
            page = await store.list_runs(limit=50)
            best = min(best, time.perf_counter() - start)
        assert len(page) == 50
        await store.close()
        return best * 1e3

    out["list_runs"] = asyncio.run(in_process())
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["generate"])
    parser.add_argument("store", type=Path)
    parser.add_argument("part", type=int)
    parser.add_argument("parts", type=int)
    parser.add_argument("count", type=int)
    args = parser.parse_args()
    asyncio.run(_generate_part(args.store, args.part, args.parts, args.count))


if __name__ == "__main__":
    main()
