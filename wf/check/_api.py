"""The entry points: check files on disk, or a string of source."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from wf.check._analyzer import analyze
from wf.check._config import rule_enabled, validate_selection, validate_selectors
from wf.check._files import discover, load, parse
from wf.check._index import ModuleIndex
from wf.check._model import CheckConfig, CheckResult, CheckUsageError, Finding
from wf.check._resolve import Project


def check_paths(paths: Sequence[Path], config: CheckConfig | None = None) -> CheckResult:
    """Check the Python files at ``paths`` (files, or directories walked recursively).

    All files are analyzed together, so a helper in one module called from a workflow in
    another is checked as workflow code. ``config=None`` means every rule and no excludes; it
    does not read pyproject.toml — call :func:`load_config` for that.

    Raises :class:`CheckUsageError` for a missing path or an unknown rule selector. Files that
    cannot be parsed do not raise: they are listed in ``CheckResult.errors`` with a location.
    """
    config = _validated(config)
    files, errors = discover(paths, config)
    modules: list[ModuleIndex] = []
    notes: list[Finding] = []
    with _collector_paused():
        for source_file in files:
            loaded = load(source_file)
            if isinstance(loaded, ModuleIndex):
                modules.append(loaded)
                notes.extend(loaded.notes)
            else:
                errors.append(loaded)
        aliases = {f.display: list(f.aliases) for f in files}
        found, analysis_notes = analyze(Project(modules, aliases))
    notes = sorted([*notes, *analysis_notes], key=Finding.sort_key)
    return CheckResult(
        findings=_selected(found, config), files_checked=len(modules), errors=errors, notes=notes
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    # Parsing allocates millions of long-lived AST nodes and no garbage cycles worth collecting;
    # the cyclic collector would re-scan them over and over (70% of the time on large trees).
    # Pausing it for the duration of one check is safe: cycles are collected right after.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def check_source(
    source: str, path: str = "<string>", config: CheckConfig | None = None
) -> list[Finding]:
    """Check one module given as text; ``path`` is used in findings and to name the module.

    Raises :class:`CheckUsageError` (``path:line:col: syntax error: ...``) if it does not parse.
    Only findings are returned: notes on code nested too deeply to analyse are not (use
    :func:`check_paths`, whose ``CheckResult.notes`` has them).
    """
    config = _validated(config)
    name = Path(path).stem if path.endswith(".py") else path
    loaded = parse(source, path, name, is_package=False)
    if isinstance(loaded, Finding):
        raise CheckUsageError(f"{loaded.path}:{loaded.line}:{loaded.col}: {loaded.message}")
    return _selected(analyze(Project([loaded], {}))[0], config)


def _validated(config: CheckConfig | None) -> CheckConfig:
    config = config or CheckConfig()
    # Selectors built in code rather than by load_config/parse_selectors get checked here, so
    # a typo such as "WF9" fails loudly instead of silently selecting nothing.
    if config.select is not None:
        validate_selectors(config.select)
    validate_selectors(config.ignore)
    validate_selection(config.select, config.ignore)
    return config


def _selected(findings: list[Finding], config: CheckConfig) -> list[Finding]:
    return [f for f in findings if rule_enabled(f.code, config)]
