"""The static analyzer behind ``wf check``.

It reads workflow code without running it and flags what would break replay: clocks and
randomness (WF1xx), I/O outside steps (WF2xx), concurrency that does not replay (WF3xx), badly
declared steps (WF4xx) and workflows (WF5xx). Workflow code is every ``@wf.workflow`` body plus
the plain functions of the checked files it calls, transitively; steps are never flagged.

Typical use, as the CLI does it::

    config = load_config(Path.cwd()).with_overrides(select=..., ignore=...)
    result = check_paths([Path("src")], config)
    print(format_text(result))
    raise SystemExit(result.exit_code)  # 0 clean, 1 findings, 2 unparsable files

It depends on the standard library only: nothing from the engine, stores or CLI.
"""

from __future__ import annotations

from wf.check._api import check_paths, check_source
from wf.check._config import load_config, load_settings, parse_selectors
from wf.check._model import CheckConfig, CheckResult, CheckUsageError, Finding, Rule
from wf.check._report import format_json, format_text
from wf.check._rules import RULES

__all__ = [
    "RULES",
    "CheckConfig",
    "CheckResult",
    "CheckUsageError",
    "Finding",
    "Rule",
    "check_paths",
    "check_source",
    "format_json",
    "format_text",
    "load_config",
    "load_settings",
    "parse_selectors",
]
