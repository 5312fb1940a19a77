"""Fixtures for the local store's own tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from wf.store.local import LocalStore

CREATION_LOG = os.environ.get("WF_TEST_CREATION_LOG") == "1"
"""Run the local store's tests on the creation-log prototype (``LocalStore(creation_log=True)``)."""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Where the local store lives."""
    return tmp_path / ".workflows"


@pytest_asyncio.fixture
async def local(root: Path) -> AsyncIterator[LocalStore]:
    """A fresh ``LocalStore``."""
    store = LocalStore(root, creation_log=CREATION_LOG)
    try:
        yield store
    finally:
        await store.close()
