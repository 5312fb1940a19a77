"""``wf worker``'s and ``wf serve``'s line per drive of a run."""

from __future__ import annotations

import logging

import pytest

from wf._events import waiting
from wf.cli._worker import report_drive
from wf.store import RunRecord, RunStatus


def test_a_drive_line_shows_a_long_hook_token_shortened_and_a_name_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A generated token (a webhook's is all that authorises its URL) is not for the log.
    secret = "nLL-eKHgq3uZ0x7v1Jm2Yb9dWcTQpA4s"
    record = RunRecord(
        "wrun_1",
        "orders",
        RunStatus.SUSPENDED,
        waiting_for=[waiting("hook", secret, None), waiting("hook", "approval", None)],
    )
    caplog.set_level(logging.INFO)
    report_drive(record, 0.5)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "hook 'nLL-eKHg…'" in text and "hook 'approval'" in text
    assert secret not in text
