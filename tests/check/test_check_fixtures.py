"""Each fixture file marks the lines that must be flagged; every other line must not be."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wf.check import check_paths

FIXTURES = Path(__file__).parent / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(WF\d{3}(?:\s*,\s*WF\d{3})*)\s*$")


def expected(path: Path) -> set[tuple[int, str]]:
    """(line, code) pairs from trailing `# expect: WF101[, WF102]` comments."""
    pairs: set[tuple[int, str]] = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            pairs.update((number, code.strip()) for code in match.group(1).split(","))
    return pairs


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("wf*.py")), ids=lambda p: p.stem)
def test_fixture_flags_exactly_the_marked_lines(fixture: Path) -> None:
    result = check_paths([fixture])
    assert result.errors == []
    found = {(f.line, f.code) for f in result.findings}
    assert found == expected(fixture)


def test_every_rule_has_a_fixture_line() -> None:
    from wf.check import RULES

    covered = {code for path in FIXTURES.glob("wf*.py") for _, code in expected(path)}
    assert covered == set(RULES)


def test_fixtures_checked_together_give_the_same_findings() -> None:
    # One project-wide run must not change what each file reports on its own.
    fixtures = sorted(FIXTURES.glob("wf*.py"))
    together = check_paths(fixtures)
    assert together.files_checked == len(fixtures)
    found = {(Path(f.path).name, f.line, f.code) for f in together.findings}
    assert found == {(p.name, line, code) for p in fixtures for line, code in expected(p)}
