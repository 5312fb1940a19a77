"""The reference in-memory store against the conformance kit."""

from __future__ import annotations

from pathlib import Path

from wf.store import Store
from wf.store.conformance import StoreConformance
from wf.store.memory import MemoryStore


class TestMemoryStore(StoreConformance):
    """``MemoryStore`` lives in one object: its peer is itself."""

    async def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()
