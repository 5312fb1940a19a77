"""What every test shares: failure reports that pytest-xdist can carry, and a quiet disk.

The fuzz tests feed wf lone surrogates (names, bodies, paths). When such a test fails,
Hypothesis's falsifying example and the captured output hold them, and xdist, which sends each
report from its worker as UTF-8, crashes the whole session (``strings must be utf-8
encodable``) instead of reporting the failure. Reports are made encodable here, once, with
each unencodable character written as its escape.

Whether the local store flushes a batch in one ``syncfs`` or file by file depends on what else
writes to the disk at the time (``wf.store.local._pressure``); tests that check the system
calls made must not depend on the machine's other work, so every test sees a quiet disk unless
it asks for a busy one.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from wf.store.local import _pressure


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.longrepr is not None and not isinstance(report.longrepr, str):
        text = str(report.longrepr)
        if _encodable(text) != text:
            report.longrepr = _encodable(text)
    elif isinstance(report.longrepr, str):
        report.longrepr = _encodable(report.longrepr)
    report.sections = [(_encodable(title), _encodable(body)) for title, body in report.sections]
    return report


@pytest.fixture(autouse=True)
def _quiet_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: True)
