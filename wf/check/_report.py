"""Rendering a :class:`CheckResult` for people (text) and for programs (JSON)."""

from __future__ import annotations

import json
from typing import Any

from wf.check._model import UNLISTED_DIRECTORY, CheckResult, Finding
from wf.check._rules import RULES

JSON_VERSION = 1


def format_text(result: CheckResult) -> str:
    """ruff-style text: one ``path:line:col: CODE message`` line per finding, each followed by
    an indented ``hint:`` line, then files that could not be checked, then notes (code not
    analysed), then a summary line."""
    lines: list[str] = []
    for finding in result.findings:
        lines.append(_location_line(finding))
        lines.append(f"  hint: {finding.hint}")
    lines.extend(_location_line(error) for error in result.errors)
    lines.extend(_location_line(note) for note in result.notes)
    if lines:
        lines.append("")
    summary = _summary(result)
    if result.notes:
        summary += f"; {_plural(len(result.notes), 'note')}"
    lines.append(summary)
    return "\n".join(lines)


def _location_line(finding: Finding) -> str:
    return f"{finding.path}:{finding.line}:{finding.col}: {finding.code} {finding.message}"


def _plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word[:-1]}ies" if word.endswith("y") else f"{count} {word}s"


def _summary(result: CheckResult) -> str:
    parts = []
    if result.findings:
        files = len({f.path for f in result.findings})
        parts.append(
            f"Found {_plural(len(result.findings), 'problem')} in {_plural(files, 'file')}"
        )
    if result.errors:
        directories = sum(e.message.startswith(UNLISTED_DIRECTORY) for e in result.errors)
        unreadable = len(result.errors) - directories
        counts = [_plural(unreadable, "file")] if unreadable else []
        counts += [_plural(directories, "directory")] if directories else []
        parts.append(f"{' and '.join(counts)} could not be checked")
    if not parts and not result.files_checked:
        # Not "passed": a directory without Python files (a subdirectory, a typo) checked nothing.
        return "No Python files found: nothing was checked"
    if not parts:
        return f"All checks passed ({_plural(result.files_checked, 'file')})"
    return "; ".join(parts)


def format_json(result: CheckResult) -> str:
    """The result as a JSON document, shape version 1 (documented in docs/check.md).

    Top-level keys: ``version``, ``files_checked``, ``summary`` (``findings``,
    ``files_with_findings``, ``errors``, ``notes`` counts), ``findings`` (objects with ``path``,
    ``line``, ``col``, ``code``, ``name``, ``message``, ``hint``), ``errors`` and ``notes``
    (objects with ``path``, ``line``, ``col``, ``code``, ``message``).
    """
    document = {
        "version": JSON_VERSION,
        "files_checked": result.files_checked,
        "summary": {
            "findings": len(result.findings),
            "files_with_findings": len({f.path for f in result.findings}),
            "errors": len(result.errors),
            "notes": len(result.notes),
        },
        "findings": [_finding(f) for f in result.findings],
        "errors": [
            {"path": e.path, "line": e.line, "col": e.col, "code": e.code, "message": e.message}
            for e in result.errors
        ],
        "notes": [
            {"path": n.path, "line": n.line, "col": n.col, "code": n.code, "message": n.message}
            for n in result.notes
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def _finding(finding: Finding) -> dict[str, Any]:
    rule = RULES.get(finding.code)
    return {
        "path": finding.path,
        "line": finding.line,
        "col": finding.col,
        "code": finding.code,
        "name": rule.name if rule is not None else finding.code,
        "message": finding.message,
        "hint": finding.hint,
    }
