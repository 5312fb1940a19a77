"""Configuration: ``[tool.wf.check]`` in pyproject.toml, rule selection and inline suppression."""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

from wf.check._model import CheckConfig, CheckUsageError
from wf.check._rules import RULES

_KEYS = ("select", "ignore", "exclude")
ALL = "ALL"

# `# wf: ignore` or `# wf: ignore[WF101, WF2]`; codes may be prefixes, like --ignore.
_SUPPRESS = re.compile(r"#\s*wf:\s*ignore\b(?:\[([^\]]*)\])?", re.IGNORECASE)


def load_config(start: Path) -> CheckConfig:
    """Read ``[tool.wf.check]`` from the nearest pyproject.toml at or above ``start``.

    As with ruff, the nearest pyproject.toml that *has* the section wins, so a sub-project
    without wf settings inherits its parent's. No such file gives the defaults (every rule).
    Keys: ``select``, ``ignore`` (lists of code prefixes) and ``exclude`` (list of globs).
    Raises :class:`CheckUsageError` for unreadable TOML, unknown keys or unknown codes.
    """
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    for folder in (directory, *directory.parents):
        candidate = folder / "pyproject.toml"
        if not candidate.is_file():
            continue
        try:
            document = tomllib.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise CheckUsageError(f"{candidate}: cannot read configuration: {exc}") from None
        section = document.get("tool", {}).get("wf", {}).get("check")
        if section is not None:
            return _parse_section(section, candidate)
    return CheckConfig()


def load_settings(
    start: Path, *, select: str | None = None, ignore: str | None = None
) -> CheckConfig:
    """The check settings of ``wf check`` and ``wf dev``, with one precedence:
    ``[tool.wf.check]`` (:func:`load_config`) < ``WF_CHECK_*`` variables < ``select`` /
    ``ignore`` given here (the command line's ``--select`` / ``--ignore``).

    ``WF_CHECK_SELECT`` and ``select`` replace the configured selection; ``WF_CHECK_IGNORE`` and
    ``ignore`` add to the configured ignores (the command line's replacing the variable's), as
    ruff's ``--select`` / ``--extend-ignore`` do. ``WF_CHECK_EXCLUDE`` (comma-separated globs)
    replaces the configured ``exclude``. Raises :class:`CheckUsageError` for a bad value.
    """
    config = load_config(start)
    origin = "--select"
    if select is None and os.environ.get("WF_CHECK_SELECT"):
        origin, select = "WF_CHECK_SELECT", os.environ["WF_CHECK_SELECT"]
    if select is not None and not parse_selectors(select):
        raise CheckUsageError(f"{origin} {select!r} {_EMPTY}")
    ignore = ignore if ignore is not None else os.environ.get("WF_CHECK_IGNORE") or None
    config = config.with_overrides(
        select=parse_selectors(select) if select is not None else None,
        ignore=parse_selectors(ignore) if ignore is not None else None,
    )
    validate_selection(config.select, config.ignore)
    exclude = os.environ.get("WF_CHECK_EXCLUDE")
    if exclude:
        globs = tuple(part.strip() for part in exclude.split(",") if part.strip())
        root = config.root or (start if start.is_dir() else start.parent).resolve()
        config = dataclasses.replace(config, exclude=globs, root=root)
    return config


def _parse_section(section: object, origin: Path) -> CheckConfig:
    where = f"{origin}: [tool.wf.check]"
    if not isinstance(section, dict):
        raise CheckUsageError(f"{where} must be a table")
    unknown = sorted(set(section) - set(_KEYS))
    if unknown:
        raise CheckUsageError(f"{where}: unknown key {unknown[0]!r} (expected one of {_KEYS})")
    values: dict[str, list[str]] = {}
    for key in _KEYS:
        value = section.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CheckUsageError(f"{where}: {key} must be a list of strings")
        values[key] = value
    try:
        select = validate_selectors(values["select"]) if "select" in section else None
        if select is not None and not select:
            raise CheckUsageError(f"select = [] {_EMPTY}")
        ignore = validate_selectors(values["ignore"])
    except CheckUsageError as exc:
        raise CheckUsageError(f"{where}: {exc}") from None
    return CheckConfig(
        select=select, ignore=ignore, exclude=tuple(values["exclude"]), root=origin.parent
    )


_EMPTY = (
    "selects no rule, which would turn every check off: select codes or prefixes "
    "(WF1,WF301) or ALL, and ignore only some of them (wf help check)"
)


def validate_selection(select: frozenset[str] | None, ignore: frozenset[str] = frozenset()) -> None:
    """Refuse a selection that turns every rule off — an empty ``select``, or an ``ignore``
    that covers every selected rule (``--select ALL --ignore ALL``): a typo or an unset
    variable must not pass for a clean check."""
    if select is not None and not select:
        raise CheckUsageError(f"an empty select {_EMPTY}")
    chosen = CheckConfig(select=select, ignore=ignore)
    if not any(rule_enabled(code, chosen) for code in RULES):
        selected = ",".join(sorted(select)) if select is not None else ALL
        raise CheckUsageError(f"select {selected} with ignore {','.join(sorted(ignore))} {_EMPTY}")


def parse_selectors(text: str) -> frozenset[str]:
    """Parse a command-line value such as ``"WF1,WF203"`` into validated selectors."""
    return validate_selectors(part for part in text.split(",") if part.strip())


def validate_selectors(selectors: Iterable[str]) -> frozenset[str]:
    """Upper-case the selectors and check each one names at least one rule."""
    result = set()
    for raw in selectors:
        selector = raw.strip().upper()
        if selector != ALL and not any(code.startswith(selector) for code in RULES):
            raise CheckUsageError(f"unknown rule selector {raw.strip()!r} (wf help check)")
        result.add(selector)
    return frozenset(result)


def rule_enabled(code: str, config: CheckConfig) -> bool:
    """Whether ``config`` turns ``code`` on: the most specific matching selector decides."""
    chosen = _specificity(code, config.select) if config.select is not None else 0
    ignored = _specificity(code, config.ignore)
    return chosen >= 0 and chosen > ignored


def _specificity(code: str, selectors: Iterable[str]) -> int:
    # -1 means no selector matches; ALL matches with the lowest specificity.
    best = -1
    for selector in selectors:
        if selector == ALL:
            best = max(best, 0)
        elif code.startswith(selector):
            best = max(best, len(selector))
    return best


def suppressed(line_text: str, code: str) -> bool:
    """Whether a ``# wf: ignore`` comment on the line covers ``code``."""
    if "wf" not in line_text:  # cheap test first: almost no line carries a comment
        return False
    match = _SUPPRESS.search(line_text)
    if match is None:
        return False
    codes = match.group(1)
    if codes is None:
        return True
    return any(code.startswith(c.strip().upper()) for c in codes.split(",") if c.strip())


def excluded(path: Path, patterns: tuple[str, ...], root: Path) -> bool:
    """Whether a path found by walking a directory matches an exclude pattern."""
    if not patterns:
        return False
    try:
        relative = path.resolve().relative_to(root).as_posix()
    except ValueError:
        relative = path.resolve().as_posix()
    for raw in patterns:
        pattern = raw.rstrip("/")
        if "/" in pattern:
            if fnmatchcase(relative, pattern) or relative.startswith(pattern + "/"):
                return True
        elif fnmatchcase(path.name, pattern):
            return True
    return False
