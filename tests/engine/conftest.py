"""The engine's tests run on every store: the memory store, the local store (real files, real
encoding), PostgreSQL when ``WF_TEST_POSTGRES_DSN`` reaches a server, and Redis when
``WF_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) does.

A test that uses ``wf_engine`` runs once per store; the store is named in the test id.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from wf.store import Store
from wf.store.local import LocalStore
from wf.store.memory import MemoryStore
from wf.testing import MockClock, TestEngine

CREATION_LOG = os.environ.get("WF_TEST_CREATION_LOG") == "1"
"""Run the local store's tests on the creation-log prototype (``LocalStore(creation_log=True)``)."""

POSTGRES_DSN = os.environ.get("WF_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("WF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

STORES = [s.strip() for s in os.environ.get("WF_TEST_STORES", "").split(",") if s.strip()]
"""The stores to run the engine's tests on (``WF_TEST_STORES=memory,local``; default: all).
``.ci/other-pythons`` runs the kernel on the other Pythons on the memory and local stores: what
differs between Pythons is asyncio and the coroutine protocol, which both exercise."""


NEVER_AWAITED = pytest.mark.filterwarnings(
    "error:.*was never awaited:RuntimeWarning",
    # Said by a coroutine's or an operation's finalizer, where an error cannot be raised: it
    # reaches pytest as an "Exception ignored in" (on whichever test was running when it was
    # collected: ``PYTHONTRACEMALLOC=20`` shows where it was made).
    "error:(?s).*was never awaited:pytest.PytestUnraisableExceptionWarning",
)
"""An engine test fails when a coroutine or an operation of a run is dropped never awaited:
wf's own drops must not name the user's code in a warning (a test that drops one on purpose
records it: ``pytest.warns``, ``recwarn``)."""

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(NEVER_AWAITED)


def _postgres_reachable() -> str | None:
    """None if the test server answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(POSTGRES_DSN, connect_timeout=3):
            return None
    except Exception as exc:  # any failure to connect means: skip with the reason
        return f"PostgreSQL not reachable at WF_TEST_POSTGRES_DSN: {exc}"


_POSTGRES_SKIP = _postgres_reachable()


def _redis_reachable() -> str | None:
    """None if the test server answers, else why not."""
    try:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        client.ping()
        client.close()
        return None
    except Exception as exc:  # any failure to connect (or no redis-py) means: skip with the reason
        return f"Redis not reachable at WF_TEST_REDIS_URL={REDIS_URL}: {exc}"


_REDIS_SKIP = _redis_reachable()


def require_server(kind: str) -> None:
    """Skip the test when ``WF_TEST_STORES`` leaves out the ``kind`` store, and when the
    ``postgres`` or ``redis`` test server cannot be reached (fail it then under
    ``WF_REQUIRE_POSTGRES`` / ``WF_REQUIRE_REDIS``, as ``.ci/run`` sets them)."""
    if STORES and kind not in STORES:
        pytest.skip(f"WF_TEST_STORES={','.join(STORES)} leaves out the {kind} store")
    reason = {"postgres": _POSTGRES_SKIP, "redis": _REDIS_SKIP}.get(kind)
    if reason is None:
        return
    if os.environ.get(f"WF_REQUIRE_{kind.upper()}"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(params=["memory", "local", "postgres", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    only = request.node.get_closest_marker("stores")
    if only is not None and kind not in only.args:
        pytest.skip(f"runs on the {', '.join(only.args)} store only")
    require_server(kind)
    return kind


@pytest_asyncio.fixture
async def engine_store(store_kind: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store of the kind under test."""
    if store_kind == "memory":
        yield MemoryStore()
        return
    if store_kind == "local":
        local = LocalStore(tmp_path / ".workflows", creation_log=CREATION_LOG)
        try:
            yield local
        finally:
            await local.close()
        return
    if store_kind == "redis":
        from tests.store.helpers import drop_redis_keys
        from wf.store.redis import RedisStore

        prefix = f"wf_engine:{uuid.uuid4().hex[:12]}:"
        redis_store = RedisStore(REDIS_URL, prefix=prefix)
        try:
            yield redis_store
        finally:
            await redis_store.close()
            drop_redis_keys(REDIS_URL, prefix)
        return
    import psycopg

    from wf.store.postgres import PostgresStore

    schema = f"wf_engine_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(POSTGRES_DSN, schema=schema)
    try:
        yield store
    finally:
        await store.close()
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest_asyncio.fixture
async def wf_engine(engine_store: Store, mock_clock: MockClock) -> AsyncIterator[TestEngine]:
    """A ``TestEngine`` on each store in turn, current for the test."""
    async with TestEngine(engine_store, mock_clock) as eng:
        with eng.installed():
            yield eng
