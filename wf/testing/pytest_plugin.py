"""pytest fixtures for testing workflows: ``wf_engine`` and ``mock_clock``.

The fixtures are plain (synchronous) fixtures, so they work whatever pytest-asyncio's mode is,
or without pytest-asyncio at all: an ``async def`` test that uses them (or is marked
``@pytest.mark.wf``, for a test that makes its own engine) and that no other plugin runs
(pytest-asyncio in auto mode, or strict mode with ``@pytest.mark.asyncio``, runs its own) is
run here on a fresh event loop, and the engine's drivers are closed at its end.

pytest loads this plugin (an entry point) in every session where wf is installed, so it imports
nothing of the engine at load: the fixtures import it when a test uses them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from wf.testing._clock import MockClock
    from wf.testing._engine import TestEngine

_FIXTURES = frozenset({"wf_engine", "mock_clock"})


@pytest.fixture
def mock_clock() -> MockClock:
    """A fresh auto-jumping fake clock."""
    from wf.testing._clock import MockClock

    return MockClock()


@pytest.fixture
def wf_engine(mock_clock: MockClock) -> Iterator[TestEngine]:
    """A ``TestEngine`` on a fresh memory store and ``mock_clock``, current for the test."""
    from wf.testing._engine import TestEngine

    eng = TestEngine(clock=mock_clock)
    try:
        with eng.installed():
            yield eng
    finally:
        _close_leftovers(eng)


def _close_leftovers(eng: TestEngine) -> None:
    """Abandon drivers a test left running, on their own loop if it is still open."""
    tasks = [t for t in eng.drivers.values() if not t.done()]
    if not tasks:
        return
    loop = tasks[0].get_loop()
    if loop.is_closed() or loop.is_running():
        return  # the loop went with its test; its tasks went with it
    with contextlib.suppress(BaseException):
        loop.run_until_complete(eng.aclose())


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``wf`` marker (``--strict-markers`` knows it)."""
    config.addinivalue_line(
        "markers", "wf: run this async def test on a fresh event loop (wf's pytest plugin)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``async def`` test that uses wf's fixtures, or is marked ``@pytest.mark.wf``,
    when no other plugin has taken it."""
    function = pyfuncitem.obj
    if not inspect.iscoroutinefunction(function):
        return None  # a sync test, or one another async plugin has wrapped already
    if not _FIXTURES & set(pyfuncitem.fixturenames) and not pyfuncitem.get_closest_marker("wf"):
        return None
    if pyfuncitem.get_closest_marker("asyncio") or pyfuncitem.get_closest_marker("anyio"):
        return None
    arguments: dict[str, Any] = {
        name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames
    }
    import asyncio

    from wf.testing._engine import TestEngine

    engine = pyfuncitem.funcargs.get("wf_engine")

    async def run() -> None:
        try:
            await function(**arguments)
        finally:
            if isinstance(engine, TestEngine):
                await engine.aclose()

    asyncio.run(run())
    return True
