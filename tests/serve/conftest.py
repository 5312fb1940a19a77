"""Fixtures for ``wf serve``: the app over httpx (local store and PostgreSQL), real processes."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from wf import Engine  # noqa: E402
from wf.store import Store  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DSN = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BASE = "http://127.0.0.1:8420"


def postgres_or_skip() -> str:
    """The test server's DSN; skips (fails under ``WF_REQUIRE_POSTGRES=1``) without one."""
    try:
        import psycopg

        with psycopg.connect(DSN, connect_timeout=3):
            pass
    except Exception as error:
        message = f"PostgreSQL not reachable (set WF_TEST_POSTGRES_DSN): {error}"
        if os.environ.get("WF_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return DSN


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema (created), dropped afterwards."""
    import psycopg

    dsn = postgres_or_skip()
    name = f"wf_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture(params=["local", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which store a test runs on."""
    kind: str = request.param
    return kind


@pytest_asyncio.fixture
async def store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Store]:
    """A fresh store of ``store_kind``."""
    made: Store
    if store_kind == "local":
        from wf.store.local import LocalStore

        made = LocalStore(tmp_path / ".workflows")
    else:
        from wf.store.postgres import PostgresStore

        schema = request.getfixturevalue("pg_schema")
        made = PostgresStore(DSN, schema=schema)
    try:
        yield made
    finally:
        await made.close()


class Api:
    """An httpx client on the app (through ASGI), with the engine behind it."""

    def __init__(self, client: Any, engine: Engine, app: Any) -> None:
        self.client = client
        self.engine = engine
        self.app = app

    async def start(self, flow: str, input_: Any = None, **body: Any) -> str:
        """Start ``tests.serve.flows:FLOW``; the new run's id."""
        payload = {"target": f"tests.serve.flows:{flow}", **body}
        if input_ is not None:
            payload["input"] = input_
        response = await self.client.post("/api/v1/runs", json=payload)
        assert response.status_code == 201, response.text
        run_id: str = response.json()["id"]
        return run_id

    async def result(self, run_id: str, wait: float = 20) -> Any:
        """The run's result JSON once it ended."""
        response = await self.client.get(f"/api/v1/runs/{run_id}/result", params={"wait": wait})
        assert response.status_code == 200, response.text
        return response.json()

    async def until(self, run_id: str, predicate: Any, timeout: float = 20) -> dict[str, Any]:
        """Read the run until ``predicate(detail)``; its detail."""
        deadline = time.monotonic() + timeout
        while True:
            detail: dict[str, Any] = (await self.client.get(f"/api/v1/runs/{run_id}")).json()
            if predicate(detail):
                return detail
            assert time.monotonic() < deadline, f"run {run_id} never got there: {detail}"
            await self.engine.store.wait_for_run(run_id, 0.2)


@pytest_asyncio.fixture
async def api(store: Store) -> AsyncIterator[Api]:
    """The app over ``store`` (driving runs), and a client on it."""
    from wf.serve import create_app

    engine = Engine(store)
    app = create_app(engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            yield Api(client, engine, app)


@pytest_asyncio.fixture
async def live(store: Store) -> AsyncIterator[Api]:
    """The app served by uvicorn on a free port in this event loop (for responses that never
    end, like server-sent events, which the ASGI transport would buffer), and a client on it."""
    from wf.serve import create_app

    engine = Engine(store)
    app = create_app(engine)
    async with served(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield Api(client, engine, app)


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """``app`` served by uvicorn on a free port in this event loop, for the block; its URL."""
    import asyncio

    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                assert not task.done(), "uvicorn did not start"
                await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = server.force_exit = True
        await asyncio.wait_for(task, 30)


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``wf`` subprocess working on a store in ``tmp_path``."""
    env = {
        **os.environ,
        "WF_DIR": str(tmp_path / ".workflows"),
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        **extra,
    }
    env.pop("WF_URL", None)
    env.pop("WF_TOKEN", None)
    return env


def postgres_env(tmp_path: Path, schema: str) -> dict[str, str]:
    """The environment of a ``wf`` subprocess working on PostgreSQL, in ``schema``."""
    options = urllib.parse.quote(f"-csearch_path={schema}")
    separator = "&" if "?" in DSN else "?"
    return env_for(tmp_path, WF_POSTGRES_DSN=f"{DSN}{separator}options={options}")


class Served:
    """A real ``wf serve`` process."""

    def __init__(self, proc: subprocess.Popen[str], url: str, env: dict[str, str]) -> None:
        self.proc = proc
        self.url = url
        self.env = env

    def wf(self, *args: str, timeout: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
        """Another ``wf`` command in the same environment."""
        return subprocess.run(
            [sys.executable, "-m", "wf", *args],
            cwd=REPO,
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def spawn_server(
    env: dict[str, str], *args: str, port: int | None = None, module: str = "wf"
) -> Served:
    """Start ``wf serve`` (``python -m MODULE serve``) and wait until it answers."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "serve", "--port", str(port), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"wf serve exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
        try:
            httpx.get(url + "/static/app.css", timeout=1)
            return Served(proc, url, env)
        except httpx.TransportError:
            assert time.monotonic() < deadline, "wf serve never answered"
            time.sleep(0.1)


def stop(served: Served, timeout: float = 30) -> tuple[int, str]:
    """SIGTERM the server; its exit code and stderr."""
    served.proc.terminate()
    try:
        _out, err = served.proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        _out, err = served.proc.communicate()
    return served.proc.returncode, err
