"""pytest fixtures for testing workflows: ``wf_engine`` and ``mock_clock``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from wf.engine._engine import Engine
from wf.testing import MockClock, engine


@pytest.fixture
def mock_clock() -> MockClock:
    """A fresh auto-jumping fake clock."""
    return MockClock()


@pytest.fixture
async def wf_engine(mock_clock: MockClock) -> AsyncIterator[Engine]:
    """A memory-store engine on ``mock_clock``, current for the test."""
    async with engine(clock=mock_clock) as eng:
        yield eng
