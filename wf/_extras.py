"""wf's optional extras: which one adds a module, and the ``pip install`` that adds it.

The distribution's name is written here once, so every message that names an install command
(``wf serve`` without starlette, a PostgreSQL DSN without psycopg, ``WF_OTEL=1`` without
OpenTelemetry) says the same thing, and a rename is one line.
"""

from __future__ import annotations

DISTRIBUTION = "wf-durable"
"""The name ``pip install`` knows wf by (``wf`` on the package index is another project)."""

EXTRA_OF_MODULE: dict[str, str] = {
    "psycopg": "postgres",
    "psycopg_binary": "postgres",
    "starlette": "serve",
    "uvicorn": "serve",
    "httpx": "serve",
    "multipart": "serve",
    "opentelemetry": "otel",
    "pydantic_ai": "ai",
    "redis": "redis",
}
"""Top-level module -> the extra (``[project.optional-dependencies]``) that installs it."""


def install_hint(extra: str) -> str:
    """The command that adds ``extra``: ``pip install 'wf-durable[serve]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_extra(exc: BaseException) -> str | None:
    """The extra whose module ``exc`` failed to import, or None if it is no such failure.

    Only a module that is not there counts (``ModuleNotFoundError``, or an import that
    ``sys.modules`` blocks): an extra that is installed but fails inside is a bug to show.
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    return EXTRA_OF_MODULE.get(exc.name.partition(".")[0])


def missing_extra_message(exc: BaseException) -> str | None:
    """One line for a missing extra: the module and the ``pip install`` that adds it."""
    extra = missing_extra(exc)
    if extra is None:
        return None
    assert isinstance(exc, ModuleNotFoundError) and exc.name
    module = exc.name.partition(".")[0]
    return f"{module} is not installed: {install_hint(extra)} adds it"


def extra_needed(
    error: ModuleNotFoundError, extra: str, needed_by: str, also: str = ""
) -> ModuleNotFoundError:
    """What ``needed_by`` (``wf.otel``...) raises when a module of ``extra`` is not there: the
    same ``ModuleNotFoundError`` (``missing_extra`` recognises it), its message naming the
    ``pip install`` that adds it (and ``also``, more it needs)."""
    return ModuleNotFoundError(
        f"{needed_by} needs {install_hint(extra)}{also} ({error})", name=error.name, path=error.path
    )
