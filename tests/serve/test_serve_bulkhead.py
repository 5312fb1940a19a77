"""``wf serve``'s built-in worker is a bulkhead too: a damaged schedule file is logged once and
skipped, and the worker goes on driving runs (it used to die silently while the server stayed
up)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.serve.conftest import env_for, spawn_server, stop
from tests.serve.flows import adder
from wf import Engine
from wf.engine._current import use_engine
from wf.engine._schedules import register
from wf.store.local import LocalStore


async def test_a_null_schedule_file_leaves_the_built_in_worker_driving(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / ".workflows")
    engine = Engine(store)
    try:
        with use_engine(engine):
            await register(engine, "tick", adder, cron="* * * * *", input=[1, 2])
        path = store.schedule_location("tick")
        Path(path).write_bytes(b"null")
    finally:
        await store.close()
    served = spawn_server(env_for(tmp_path))
    try:
        client = httpx.Client(base_url=served.url, timeout=30)
        for n in range(2):  # the second after the worker has met the damaged file
            started = client.post(
                "/api/v1/runs", json={"target": "tests.serve.flows:adder", "input": [n, 40]}
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["id"]
            result = client.get(f"/api/v1/runs/{run_id}/result", params={"wait": 20})
            assert result.json() == {"id": run_id, "status": "completed", "output": n + 40}
    finally:
        code, err = stop(served)
    assert code == 0, err
    assert err.count(f"skipped schedule file {Path(path).name} ({path})") == 1, err
