"""``RedisStore``: the conformance kit, and what only a shared server can get wrong.

Each test works under a key prefix of its own (its keys are deleted afterwards), so tests may
run in parallel and leave nothing behind. The server is ``WF_TEST_REDIS_URL`` (default: the
local server's database 0); when it cannot be reached every test here is skipped, unless
``WF_REQUIRE_REDIS=1`` (``.ci/run``), which makes that a failure.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

redis = pytest.importorskip("redis")

import wf  # noqa: E402
from tests.store.helpers import acquire, drop_redis_keys  # noqa: E402
from wf._exceptions import StoreError, StoreVersionError  # noqa: E402
from wf.engine._current import use_engine  # noqa: E402
from wf.engine._engine import Engine  # noqa: E402
from wf.store._base import HookRecord, RunRecord, RunStatus, Store  # noqa: E402
from wf.store.conformance import FAR, StoreConformance, event, record  # noqa: E402
from wf.store.redis import RedisStore  # noqa: E402

URL = os.environ.get("WF_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def reachable(url: str) -> str | None:
    """None if the test server answers, else why not."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        client.ping()
        client.close()
        return None
    except Exception as exc:  # any failure to connect means: skip with the reason
        return f"Redis not reachable at WF_TEST_REDIS_URL={url}: {exc}"


@pytest.fixture(scope="module")
def redis_url() -> str:
    why = reachable(URL)
    if why is not None:
        if os.environ.get("WF_REQUIRE_REDIS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return URL


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix for one test; its keys are deleted afterwards."""
    name = f"wft:{uuid.uuid4().hex[:12]}:"
    yield name
    drop_redis_keys(redis_url, name)


def make(prefix: str, **options: Any) -> RedisStore:
    """A store instance under the test's prefix: one per simulated process."""
    return RedisStore(URL, prefix=prefix, **options)


class TestRedisStore(StoreConformance):
    """A peer is a second ``RedisStore`` on the same prefix, as another process opens it."""

    @pytest.fixture(autouse=True)
    def _use_prefix(self, prefix: str) -> None:
        self.prefix = prefix

    async def make_store(self, tmp_path: Path) -> Store:
        store = make(self.prefix)
        await store.open()
        return store

    async def make_peer(self, store: Store, tmp_path: Path) -> Store:
        peer = make(self.prefix)
        await peer.open()
        return peer
