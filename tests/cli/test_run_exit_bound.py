"""``wf run``'s exit at Ctrl-C or SIGTERM is bounded whatever the store does: a frozen
PostgreSQL (psycopg holds a cancellation for seconds) kept it for 19 s. Here a store whose
every wait ignores its cancellation for 5 s stands for it."""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any

import pytest

from wf import Engine
from wf.store.memory import MemoryStore

pytestmark = pytest.mark.timeout(60)

_run = importlib.import_module("wf.cli._run")  # the package names a function so too


async def deaf_wait() -> None:
    """Five seconds, a cancellation ignored once (as psycopg's handling of a frozen server)."""
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        await asyncio.sleep(5)


class FrozenStore(MemoryStore):
    async def close(self) -> None:
        await deaf_wait()


class Client:
    """What ``wf run``'s exit uses of its client, over a frozen store."""

    def __init__(self) -> None:
        self.store = FrozenStore()
        self.engine = Engine(self.store)

    async def explain(self, run_id: str) -> Any:
        await deaf_wait()
        raise AssertionError("not reached")


class Exited(Exception):
    pass


async def test_the_exit_at_a_signal_ends_within_3_s_over_a_frozen_store(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def exit_now(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(_run.os, "_exit", exit_now)
    began = time.monotonic()
    with pytest.raises(Exited):
        await _run._interrupted(Client(), "r1")  # type: ignore[arg-type]
    took = time.monotonic() - began
    assert took < 3.0, took
    assert "interrupted: run r1 continues durably" in capsys.readouterr().err
