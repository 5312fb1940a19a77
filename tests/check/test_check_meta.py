"""The analyzer's own contracts: layering, documentation, rule table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from wf.check import RULES

PACKAGE = Path(__file__).resolve().parents[2] / "wf" / "check"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "check.md"


# Modules of wf the analyzer shares with the runtime, each importing only the standard library:
# wf._guard, the reading of `if __name__ == "__main__":` that WF506 and the loader agree on;
# wf._syntax, the one parse of the process at a time.
SHARED = {"wf._guard", "wf._syntax"}


def _wf_imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [name for name in names if name == "wf" or name.startswith("wf.")]


def test_check_imports_only_the_standard_library_and_itself() -> None:
    for path in PACKAGE.glob("*.py"):
        for name in _wf_imports(path):
            ok = name.startswith("wf.check") or name in SHARED
            assert ok, f"{path.name} imports {name}"
    for name in SHARED:
        shared = PACKAGE.parent / f"{name.removeprefix('wf.')}.py"
        assert _wf_imports(shared) == [], f"{name} imports {_wf_imports(shared)}"


def test_rule_codes_are_well_formed_and_grouped() -> None:
    for code, rule in RULES.items():
        assert re.fullmatch(r"WF[1-5]\d\d", code)
        assert rule.code == code
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.name)
        assert rule.summary and rule.hint
    assert len({rule.name for rule in RULES.values()}) == len(RULES)


def test_every_rule_is_documented() -> None:
    text = DOCS.read_text()
    for code, rule in RULES.items():
        assert f"### {code}" in text, f"{code} has no section in docs/check.md"
        assert rule.name in text
