"""The torture suite: short by default (part of every test run), long with ``--long``.

``pytest tests/reliability --long`` (or ``WF_TORTURE_LONG=1 pytest``: pytest only accepts an
option from a conftest it loads at start-up, which this one is not when the whole suite runs
from the repository root) multiplies runs, steps, kills and examples; see docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="run the reliability torture suite in its long form",
    )


def is_long(config: pytest.Config) -> bool:
    flag = False
    with contextlib.suppress(ValueError):  # not registered: see the module docstring
        flag = bool(config.getoption("--long"))
    return flag or os.environ.get("WF_TORTURE_LONG", "") not in ("", "0")


@pytest.fixture(scope="session")
def long_form(pytestconfig: pytest.Config) -> bool:
    """True when the long form was asked for."""
    return is_long(pytestconfig)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the long form the suite's tests may outlast the global per-test timeout: give them
    an hour each (a hang still fails, later)."""
    if not is_long(config):
        return
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(pytest.mark.timeout(3600))


def report(line: str) -> None:
    """Print a figure of the suite where ``pytest -s`` (and CI logs) show it, and keep it for
    the terminal summary."""
    _FIGURES.append(line)
    print(f"\n[reliability] {line}")


_FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES:
        terminalreporter.section("reliability figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)
