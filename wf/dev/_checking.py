"""``wf check`` before every reload, and which of its findings block the reload.

A reload is refused when the changed code does not parse, or when the check finds a problem
that was not there before. "Before" is a *baseline*: the findings of the code that is serving
(taken at start, then after each reload). Findings are compared by file, rule and message,
never by line, so that editing above a known finding (which moves it) does not block, while a
second copy of the same problem does. Known findings are shown, but a project with an old
finding it has decided to live with can still be edited.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Iterable
from pathlib import Path

from wf.check import (
    CheckConfig,
    CheckResult,
    CheckUsageError,
    Finding,
    check_paths,
    load_settings,
)
from wf.check._files import resolved

FindingKey = tuple[str, str]
"""A finding without its position: (rule code, message)."""


@dataclasses.dataclass
class CheckOutcome:
    """One check: everything found, what is new (blocking), and how long it took."""

    result: CheckResult
    new: list[Finding]
    took: float
    files: list[Path]
    config_error: str | None = None

    @property
    def blocking(self) -> bool:
        """True when the reload must not happen (syntax errors, new findings)."""
        return bool(self.result.errors or self.new)


def _file(finding: Finding) -> Path:
    return resolved(Path(finding.path))  # a symlink loop's read-error names a path with none


class Checker:
    """Runs the analyzer on a set of files, keeping the baseline of the serving code per file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._baseline: dict[Path, collections.Counter[FindingKey]] = {}

    def config(self) -> tuple[CheckConfig, str | None]:
        """``[tool.wf.check]`` of the project and the ``WF_CHECK_*`` variables, as for
        ``wf check`` (the file is re-read each time: it may have been edited)."""
        try:
            return load_settings(self.root), None
        except CheckUsageError as exc:
            return CheckConfig(), f"{exc} (checking with every rule)"

    def check(self, paths: Iterable[Path]) -> CheckOutcome:
        """Check ``paths`` (files or directories) together; missing and excluded files are
        skipped."""
        began = time.perf_counter()
        config, config_error = self.config()
        chosen = sorted(
            {resolved(p) for p in paths if p.is_dir() or (p.is_file() and not _excluded(p, config))}
        )
        try:
            result = check_paths(chosen, config) if chosen else CheckResult()
        except CheckUsageError as exc:  # a file deleted since it was listed, say
            result, config_error = CheckResult(), str(exc)
        new: list[Finding] = []
        remaining = {path: collections.Counter(c) for path, c in self._baseline.items()}
        for finding in result.findings:
            known = remaining.setdefault(_file(finding), collections.Counter())
            key = (finding.code, finding.message)
            if known[key] > 0:
                known[key] -= 1
            else:
                new.append(finding)
        return CheckOutcome(result, new, time.perf_counter() - began, chosen, config_error)

    def accept(self, outcome: CheckOutcome) -> None:
        """The checked code now serves: its findings become the baseline of the files it
        checked (files it did not look at keep theirs)."""
        checked = {p for p in outcome.files if p.is_file()}
        checked |= {_file(f) for f in outcome.result.findings}
        for path in checked:
            self._baseline[path] = collections.Counter()
        for finding in outcome.result.findings:
            self._baseline[_file(finding)][(finding.code, finding.message)] += 1


def _excluded(path: Path, config: CheckConfig) -> bool:
    # The analyzer always checks files named explicitly; wf dev names the changed files
    # explicitly, so it applies the project's exclude patterns itself.
    if not config.exclude:
        return False
    from wf.check._config import excluded

    return excluded(path, config.exclude, config.root or Path.cwd())
