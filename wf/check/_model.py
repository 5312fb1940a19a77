"""The plain data the analyzer hands out: findings, rules, configuration, results."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path


class CheckUsageError(Exception):
    """The analyzer was asked for something it cannot do (a missing path, a bad selector).

    The message is one line, ready to print; the CLI maps it to exit code 2.
    """


@dataclass(frozen=True)
class Finding:
    """One problem at one place. ``line`` and ``col`` are 1-based; ``col`` counts characters."""

    path: str
    line: int
    col: int
    code: str
    message: str
    hint: str

    def sort_key(self) -> tuple[str, int, int, str]:
        """The order findings are reported in: by file, then position, then code."""
        return (self.path, self.line, self.col, self.code)


UNLISTED_DIRECTORY = "cannot read directory"
"""How the ``read-error`` of a directory that could not be listed begins (not a file's)."""


@dataclass(frozen=True)
class Rule:
    """Documentation of one rule code: what it flags and the usual fix."""

    code: str
    name: str
    summary: str
    hint: str


@dataclass
class CheckConfig:
    """Which rules run and which files are skipped.

    ``select`` and ``ignore`` hold code prefixes (``"WF1"`` means every WF1xx rule, ``"ALL"``
    every rule); ``select=None`` selects all. When a code matches both, the longer (more
    specific) prefix wins, and an exact tie goes to ``ignore`` — the same tie-breaking as ruff.
    ``exclude`` holds glob patterns for files and directories found while walking a directory;
    paths named explicitly are always checked. Patterns containing ``/`` are matched against the
    path relative to ``root`` (the directory of the pyproject.toml that set them, else the current
    directory); other patterns are matched against every path component.
    """

    select: frozenset[str] | None = None
    ignore: frozenset[str] = frozenset()
    exclude: tuple[str, ...] = ()
    root: Path | None = None

    def with_overrides(
        self, select: Iterable[str] | None = None, ignore: Iterable[str] | None = None
    ) -> CheckConfig:
        """Apply command-line options: ``select`` replaces the configured selection, ``ignore``
        adds to the configured ignores (as ruff's ``--select`` / ``--extend-ignore`` do)."""
        return replace(
            self,
            select=self.select if select is None else frozenset(select),
            ignore=self.ignore if ignore is None else self.ignore | frozenset(ignore),
        )


@dataclass
class CheckResult:
    """The outcome of :func:`check_paths`.

    ``findings`` are rule violations sorted by path, line and column. ``errors`` are files that
    could not be analyzed (syntax errors, unreadable or undecodable files, directories that
    could not be listed); they use the :class:`Finding` shape with code ``syntax-error`` or
    ``read-error`` and are never filtered by select/ignore. ``notes`` (code ``note``) name code
    that Python runs but the analyzer did not look into (nested too deeply for it); they do not
    change the exit code.
    """

    findings: list[Finding] = field(default_factory=list)
    files_checked: int = 0
    errors: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """What ``wf check`` exits with: 2 if a file could not be checked, 1 on findings, else 0."""
        if self.errors:
            return 2
        return 1 if self.findings else 0
