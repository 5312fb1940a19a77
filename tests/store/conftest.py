"""Fixtures for the local store's own tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from wf.store.local import LocalStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Where the local store lives."""
    return tmp_path / ".workflows"


@pytest_asyncio.fixture
async def local(root: Path) -> AsyncIterator[LocalStore]:
    """A fresh ``LocalStore``."""
    store = LocalStore(root)
    try:
        yield store
    finally:
        await store.close()
