"""Runs that took an approval decision under wf before the decision reading changed (journals
exported from 8a5d24a1, ``wf inspect RUN --journal``) replay as they ran: ``{"approved": true}``
was a map naming a call "approved" (the real call denied), and a map naming no pending call was
taken (the real call denied as undecided), not refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ai import flows
from wf.testing import replay

JOURNALS = Path(__file__).parent / "journals"


@pytest.mark.parametrize("name", ["old_approved", "old_typo", "old_empty"])
async def test_a_run_that_took_a_decision_before_the_new_reading_replays_as_it_ran(
    name: str,
) -> None:
    await replay(JOURNALS / f"{name}.jsonl", flows.ask, timeout=10)
