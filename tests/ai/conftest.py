"""The agent tests need Pydantic AI (``pip install 'wf-durable[ai]'``, part of the ``test``
extra)."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai", reason="wf.ai needs Pydantic AI: pip install 'wf-durable[ai]'")


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    from tests.ai import flows

    flows.LOG.clear()
