"""wf's parses never overlap: CPython 3.11 fails one of two ``ast.parse`` calls made at once in
two threads with ``SystemError: AST constructor recursion depth mismatch`` (its depth counter
is the interpreter's), and ``wf dev`` checks in a thread while other threads parse."""

from __future__ import annotations

import ast
import threading
import time
from typing import Any

import pytest

from wf.check import check_source

SOURCE = "import wf\n\n\n@wf.workflow\nasync def flow(n: int) -> int:\n    return n\n" * 20


def test_checks_in_many_threads_parse_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ast.parse
    inside = 0
    most = 0
    guard = threading.Lock()

    def parse(*args: Any, **kwargs: Any) -> ast.Module:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        try:
            time.sleep(0.002)  # a long parse: another thread would start its own meanwhile
            return real(*args, **kwargs)
        finally:
            with guard:
                inside -= 1

    monkeypatch.setattr(ast, "parse", parse)
    errors: list[BaseException] = []

    def check() -> None:
        try:
            for _ in range(5):
                check_source(SOURCE, "flows.py")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=check) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert most == 1
