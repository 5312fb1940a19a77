"""One configuration: ``[tool.wf]`` in pyproject.toml < ``WF_*`` variables < ``wf.configure()``.

The project is found like git finds a repository: walk up from the current directory to the
first directory holding a ``pyproject.toml`` with a ``[tool.wf]`` table, a ``wf.toml`` (the older
spelling, still read), or an existing ``.workflows`` store. Paths in the table are relative to
that directory, and the store defaults to ``.workflows`` beside it, so every command finds the
same store from any subdirectory. No project found: the current directory is the project.

Every key has one row in :data:`KEYS` (``docs/configuration.md`` has the same rows; a test
keeps them in agreement): its dotted name in the table, its ``WF_*`` variable (the name
upper-cased, dots as underscores) and its type. A command reads a value with
:func:`setting`; ``wf info`` prints :func:`project_settings` with where each value came from.
Kept outside the kernel so that the engine never depends on a concrete store or on the file
system layout.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wf._exceptions import UsageError

if TYPE_CHECKING:
    from wf.store import Store

STORE_DIR = ".workflows"
LEGACY_FILE = "wf.toml"


@dataclasses.dataclass(frozen=True)
class Key:
    """One configuration key: dotted name in ``[tool.wf]``, type, default, what it sets."""

    name: str
    type: str  # "str" | "int" | "float" | "bool" | "list" | "duration" | "path" | "any"
    default: Any
    help: str
    above: float | None = None
    """A number must be finite and greater than this (``worker.poll``: a wait that ends);
    None: any number. An integer key with ``above=0`` is a count of at least 1."""
    least: float | None = None
    """A number must be finite and at least this (``dev.grace``: 0 is no wait); None: any."""

    @property
    def env(self) -> str | None:
        """The ``WF_*`` variable overriding this key (None: the table only)."""
        if self.type in ("any",):
            return None
        return "WF_" + self.name.upper().replace(".", "_")


KEYS: tuple[Key, ...] = (
    Key("dir", "path", STORE_DIR, "store directory (relative to the project)"),
    Key("postgres_dsn", "str", None, "use the PostgreSQL store at this DSN instead"),
    Key("redis_url", "str", None, "use the Redis store at this URL instead"),
    Key(
        "redis_prefix", "str", "wf", "prefix of the Redis store's keys (projects sharing a server)"
    ),
    Key(
        "concurrency",
        "int",
        None,
        "runs driven at once across every worker on the store",
        above=0,
    ),
    Key("retention", "duration", None, "finished runs are deleted this long after they end"),
    Key(
        "max_recoveries",
        "int",
        10,
        "deaths of a run's driving process in a row, without progress, before it fails stalled",
        above=0,
    ),
    Key(
        "step_threads",
        "int",
        None,
        "sync steps one process runs at once (default: a worker's concurrency)",
        above=0,
    ),
    Key("deployment", "str", None, "the deployment id runs started here are pinned to"),
    Key("modules", "list", [], "runner modules imported by `wf dev` and `wf worker`"),
    Key("paths", "list", ["."], "what `wf dev` watches and checks"),
    Key("worker.concurrency", "int", 100, "runs one `wf worker` drives at once", above=0),
    Key("worker.poll", "float", 2.0, "seconds between looks at the queue", above=0),
    Key("dev.run", "str", None, "`wf dev` starts a run of this target after each reload"),
    Key("dev.input", "any", None, "... with this input (any TOML value)"),
    Key(
        "dev.grace",
        "float",
        30.0,
        "seconds running steps get to finish before a reload, 0 or more and finite",
        least=0,
    ),
    Key("dev.poll", "bool", False, "watch files by polling (network or container mounts)"),
    Key("dev.concurrency", "int", 100, "runs `wf dev` drives at once", above=0),
    Key("check.select", "list", None, "`wf check` rules to run (code prefixes)"),
    Key("check.ignore", "list", [], "`wf check` rules to skip (code prefixes)"),
    Key("check.exclude", "list", [], "globs `wf check` skips"),
    Key("serve.host", "str", "127.0.0.1", "address `wf serve` binds"),
    Key("serve.port", "int", 8420, "port `wf serve` listens on"),
    Key("serve.token", "str", None, "bearer token `wf serve` requires"),
    Key("serve.forwarded_allow_ips", "str", None, "proxies whose X-Forwarded-* `wf serve` trusts"),
)
"""Every key. A command adding a setting adds its row here and to docs/configuration.md."""

_BY_NAME = {key.name: key for key in KEYS}
_TABLES = frozenset(name.partition(".")[0] for name in _BY_NAME if "." in name)

# Values set by ``wf.configure()`` for this process (the highest precedence).
_overrides: dict[str, Any] = {}


@dataclasses.dataclass(frozen=True)
class Project:
    """Where the configuration comes from."""

    root: Path
    """The project directory (the current directory when no project was found)."""
    source: Path | None
    """The ``pyproject.toml`` or ``wf.toml`` read, or None."""
    table: Mapping[str, Any]
    """Its ``[tool.wf]`` table (empty without one)."""
    found_by: str
    """``"pyproject.toml"``, ``"wf.toml"``, ``".workflows"`` or ``"current directory"``."""

    @property
    def deprecated(self) -> str | None:
        """A note when the configuration is in a spelling kept only for compatibility."""
        if self.found_by == LEGACY_FILE:
            return (
                f"{self.source}: wf.toml is deprecated; move its keys into [tool.wf] in "
                "pyproject.toml (same keys)"
            )
        return None

    def unknown_keys(self) -> list[str]:
        """Keys of the table that no row of :data:`KEYS` describes (typos, usually)."""
        unknown: list[str] = []
        for name, value in self.table.items():
            if name in _TABLES and isinstance(value, dict):
                unknown += [f"{name}.{k}" for k in value if f"{name}.{k}" not in _BY_NAME]
            elif name not in _BY_NAME:
                unknown.append(name)
        return unknown


def find_project(start: Path | None = None) -> Project:
    """The project around ``start`` (default: the current directory); see the module docstring.

    Raises ``UsageError`` for a configuration file that cannot be read.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        # wf.toml (deprecated) is read first when both are in one directory, as it always was.
        legacy = folder / LEGACY_FILE
        if legacy.is_file():
            return _checked(Project(folder, legacy, _read_toml(legacy), LEGACY_FILE))
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            section = _read_toml(pyproject).get("tool", {}).get("wf")
            if section is not None:
                if not isinstance(section, dict):
                    raise UsageError(f"{pyproject}: [tool.wf] must be a table")
                return _checked(Project(folder, pyproject, section, "pyproject.toml"))
        if (folder / STORE_DIR).is_dir():
            return Project(folder, None, {}, STORE_DIR)
    return Project(here, None, {}, "current directory")


def _checked(project: Project) -> Project:
    """``project`` once every key its table sets is valid: of its type, in its range, and what
    the key means (a duration for ``retention``, a deployment id, a directory for ``dir``).
    Checked here, when any command (``wf info`` too) or program finds the project, so that no
    command runs on a table another refuses; else ``UsageError`` naming the file and the key.
    A key no row describes is refused too: ``store = "postgresql://..."`` would otherwise leave
    every run on the local store without a word."""
    where = _table_where(project)
    for name, value in project.table.items():
        if name in _TABLES and not isinstance(value, dict):
            raise UsageError(f"{where}: {name} must be a table ([tool.wf.{name}]), not {value!r}")
    unknown = project.unknown_keys()
    if unknown:
        raise _unknown_key_error(project, unknown[0])
    for key in KEYS:
        present, value = _from_table(project.table, key.name)
        if present:
            _check_value(key, value, where)
    return project


_INSTEAD = {
    "store": ("postgres_dsn", "redis_url", "dir"),
    "url": ("postgres_dsn", "redis_url"),
    "dsn": ("postgres_dsn",),
    "database_url": ("postgres_dsn", "redis_url"),
}
"""Names people reach for that wf spells otherwise (close spellings are found by difflib)."""


def _did_you_mean(name: str, table: str = "") -> str:
    """``"; did you mean 'postgres_dsn'?"`` for a key no row describes (``table``: of
    ``[tool.wf.TABLE]``, matched among that table's keys)."""
    import difflib

    prefix = f"{table}." if table else ""
    names = [k.name.removeprefix(prefix) for k in KEYS if k.name.startswith(prefix)]
    if not table:
        names = [n for n in names if "." not in n] + sorted(_TABLES)
    close = [] if table else list(_INSTEAD.get(name.lower(), ()))
    close += [n for n in difflib.get_close_matches(name, names, n=3) if n not in close]
    if not close:
        return f" (expected one of {', '.join(names)})"
    said = [repr(n) for n in close]
    either = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " or " + said[-1]
    return f"; did you mean {either}? (wf help config)"


def _unknown_key_error(project: Project, name: str) -> UsageError:
    """The error for the key ``name`` (dotted for a sub-table's) that no row describes."""
    table, _, key = name.rpartition(".")
    if not table:
        where = _table_where(project)
    elif project.found_by == "pyproject.toml":
        where = f"{project.source} [tool.wf.{table}]"
    else:
        where = f"{project.source} [{table}]"
    return UsageError(f"{where}: unknown key {key!r}{_did_you_mean(key, table)}")


def _table_where(project: Project) -> str:
    return f"{project.source}" + (" [tool.wf]" if project.found_by == "pyproject.toml" else "")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read configuration: {exc}") from None


def _from_table(table: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    head, _, tail = name.partition(".")
    if not tail:
        return (name in table, table.get(name))
    sub = table.get(head)
    if isinstance(sub, dict) and tail in sub:
        return True, sub[tail]
    return False, None


def _parse_env(key: Key, raw: str) -> Any:
    variable = key.env
    if key.type == "int":
        try:
            return int(raw)
        except ValueError:
            raise UsageError(f"{variable}={raw!r}: expected an integer") from None
    if key.type == "float":
        try:
            return float(raw)
        except ValueError:
            raise UsageError(f"{variable}={raw!r}: expected a number") from None
    if key.type == "bool":
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise UsageError(f"{variable}={raw!r}: expected true or false")
    if key.type == "list":
        return [part.strip() for part in raw.split(",") if part.strip()]
    return raw


def _fits(kind: str, value: Any) -> bool:
    if kind in ("str", "path"):
        return isinstance(value, str)
    if kind == "duration":
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    return True


def _check_type(key: Key, value: Any, where: str) -> Any:
    if not _fits(key.type, value):
        expected = {
            "list": "a list of strings",
            "duration": "a duration like '30d'",
            "int": "an integer",
            "float": "a number",
            "bool": "true or false",
        }.get(key.type, "a string")
        raise UsageError(f"{where}: {key.name} must be {expected}, not {value!r}")
    return value


def _check_dir(value: Any, where: str) -> Any:
    if not str(value).strip():
        # Path("") is ".": the store's directories would be made among the project's files.
        raise UsageError(
            f"{where}: dir must name a directory for the store, not {value!r} "
            f"(leave it out for {STORE_DIR!r})"
        )
    if "\0" in str(value):
        raise UsageError(f"{where}: dir must name a directory, not {value!r} (a NUL character)")
    return value


def _check_retention(value: Any, where: str) -> Any:
    from wf.engine._durations import parse_retention

    parse_retention(value, what=f"retention ({where})")
    return value


def _check_deployment(value: Any, where: str) -> Any:
    from wf.engine._deployments import check_deployment

    try:
        check_deployment(value)
    except UsageError as error:
        raise UsageError(f"{where}: {error}") from None
    return value


_MEANING = {"dir": _check_dir, "retention": _check_retention, "deployment": _check_deployment}
"""Checks of what a key's value means, beyond its type and range."""


def _check_value(key: Key, value: Any, where: str) -> Any:
    """``value`` of ``key`` from ``where``, checked: type, range, meaning; else ``UsageError``."""
    value = _check_range(key, _check_type(key, value, where), where)
    meaning = _MEANING.get(key.name)
    return value if meaning is None else meaning(value, where)


@dataclasses.dataclass(frozen=True)
class Value:
    """A setting's value and where it came from."""

    value: Any
    origin: str
    """``"default"``, the configuration file, the ``WF_*`` variable or ``"wf.configure()"``."""


def resolve(name: str, project: Project | None = None) -> Value:
    """The value of the key ``name`` with its origin (precedence as in the module docstring)."""
    key = _BY_NAME.get(name)
    if key is None:
        raise KeyError(f"unknown configuration key {name!r}")
    if name in _overrides:
        return Value(_overrides[name], "wf.configure()")
    variable = key.env
    if variable is not None and os.environ.get(variable):
        raw = os.environ[variable]
        return Value(_check_value(key, _parse_env(key, raw), f"{variable}={raw!r}"), variable)
    project = project if project is not None else find_project()
    present, value = _from_table(project.table, name)
    if present:
        value = _check_value(key, value, _table_where(project))
        return Value(value, str(project.source))
    return Value(key.default, "default")


def _check_range(key: Key, value: Any, where: str) -> Any:
    """``value`` if it is in the key's range (``Key.above``, ``Key.least``); else
    ``UsageError`` naming where it came from. Checked here, where every reader gets it: a
    worker with a concurrency of 0 or a poll of -5 or nan would wait forever or spin."""
    if not isinstance(value, int | float):
        return value
    if key.least is not None:
        if math.isfinite(value) and value >= key.least:
            return value
        raise UsageError(f"{where}: {key.name} must be a number >= {key.least:g}, not {value!r}")
    if key.above is None:
        return value
    if math.isfinite(value) and value > key.above:
        return value
    if key.type == "int":
        raise UsageError(
            f"{where}: {key.name} must be an integer >= {int(key.above) + 1}, not {value!r}"
        )
    raise UsageError(f"{where}: {key.name} must be a number > {key.above:g}, not {value!r}")


def setting(name: str, project: Project | None = None) -> Any:
    """The value of the configuration key ``name`` (see :data:`KEYS`)."""
    return resolve(name, project).value


def project_settings(project: Project | None = None) -> dict[str, Value]:
    """Every key with its value and origin, for ``wf info``."""
    project = project if project is not None else find_project()
    return {key.name: resolve(key.name, project) for key in KEYS}


def set_overrides(**values: Any) -> None:
    """Record ``wf.configure()``'s settings (None leaves a key to the lower layers)."""
    for name, value in values.items():
        if name not in _BY_NAME:
            raise TypeError(f"wf.configure() got an unknown setting {name!r}")
        if value is None:
            _overrides.pop(name, None)
        else:
            _overrides[name] = value


def store_dir(project: Project | None = None) -> Path:
    """The local store's directory: ``dir`` made absolute against the project root."""
    project = project if project is not None else find_project()
    found = resolve("dir", project)
    if found.origin == "wf.configure()":  # the file's and the variable's are checked already
        _check_dir(found.value, found.origin)
    path = Path(str(found.value)).expanduser()
    if path.is_absolute():
        return path
    if found.origin == "default" or found.origin == str(project.source):
        return project.root / path
    return Path.cwd() / path  # WF_DIR / wf.configure(dir=...) are relative to where one runs


_NOT_VARIABLES = {
    "WF_STORE": "WF_POSTGRES_DSN, WF_REDIS_URL or WF_DIR",
    "WF_DSN": "WF_POSTGRES_DSN",
    "WF_DATABASE_URL": "WF_POSTGRES_DSN or WF_REDIS_URL",
    "WF_POSTGRES_URL": "WF_POSTGRES_DSN",
    "WF_REDIS_DSN": "WF_REDIS_URL",
}
"""Variables wf does not read that people set to choose the store, and what to set instead."""


def _remote_store(project: Project | None) -> tuple[str, str] | None:
    """``("postgres", dsn)`` or ``("redis", url)`` when the configuration names a server store;
    naming both is an error (which one would the runs be on?). A variable of
    :data:`_NOT_VARIABLES` is refused: ignored, the runs would go to the local store."""
    for variable, instead in _NOT_VARIABLES.items():
        if os.environ.get(variable):
            raise UsageError(f"{variable} is not a wf variable: set {instead} to choose the store")
    dsn = setting("postgres_dsn", project)
    url = setting("redis_url", project)
    if dsn and url:
        raise UsageError(
            "both postgres_dsn and redis_url are set: a project's runs live in one store, so "
            "unset one of them"
        )
    if dsn:
        return "postgres", str(dsn)
    if url:
        return "redis", str(url)
    return None


class ExtraMissing(UsageError):
    """The configuration names a server store whose extra is not installed (one line, exit 2);
    ``wf info`` prints the rest of the configuration with it."""

    def __init__(self, kind: str, package: str) -> None:
        from wf._extras import install_hint

        super().__init__(f"{package} is not installed: {install_hint(kind)} adds it")
        self.kind = kind


def _import_store(kind: str) -> Any:
    """``wf.store.postgres`` or ``wf.store.redis``; a missing extra is a one-line usage error.

    Imported by name so that type checks pass without the optional dependency."""
    import importlib

    extra, package = {"postgres": ("postgres", "psycopg"), "redis": ("redis", "redis")}[kind]
    try:
        return importlib.import_module(f"wf.store.{kind}")
    except ModuleNotFoundError as error:
        if error.name is None or error.name.partition(".")[0] != package:
            raise
        raise ExtraMissing(extra, package) from None


def describe_store(project: Project | None = None) -> str:
    """Where the store is, for messages: the directory, the DSN's host and database, or the
    Redis URL (without its password) and key prefix."""
    remote = _remote_store(project)
    if remote is not None and remote[0] == "postgres":
        try:
            from psycopg import ProgrammingError
            from psycopg.conninfo import conninfo_to_dict
        except ModuleNotFoundError as error:
            if error.name is None or error.name.partition(".")[0] != "psycopg":
                raise
            raise ExtraMissing("postgres", "psycopg") from None

        try:
            info = conninfo_to_dict(remote[1])
        except ProgrammingError as error:  # as the store itself says it (wf runs): exit 2
            raise UsageError(f"invalid PostgreSQL DSN: {error}") from None
        return f"postgresql://{info.get('host', 'localhost')}/{info.get('dbname', '')}"
    if remote is not None:
        store: Any = _import_store("redis").RedisStore(
            remote[1], prefix=str(setting("redis_prefix", project))
        )
        return str(store.location)
    return str(store_dir(project))


def default_store() -> Store:
    """The store the configuration names: PostgreSQL when ``postgres_dsn`` is set, Redis when
    ``redis_url`` is, else the local store in ``store_dir()``."""
    project = find_project()
    remote = _remote_store(project)
    if remote is not None and remote[0] == "postgres":
        store: Store = _import_store("postgres").PostgresStore(remote[1])
        return store
    if remote is not None:
        prefix = str(setting("redis_prefix", project))
        store = _import_store("redis").RedisStore(remote[1], prefix=prefix)
        return store
    from wf.store.local import LocalStore

    return LocalStore(store_dir(project))


def _positive_int(key: str, project: Project | None) -> int | None:
    """The setting ``key``, an integer >= 1, or None when unset; else ``UsageError`` naming
    where it was set."""
    found = resolve(key, project)
    value = found.value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{found.origin}: {key} must be an integer >= 1, not {value!r}")
    return value


def store_wide_concurrency(project: Project | None = None) -> int | None:
    """The store-wide cap (``concurrency``: runs driven at once by every process on the
    store), or None when none is configured."""
    return _positive_int("concurrency", project)


def step_threads_setting(project: Project | None = None) -> int | None:
    """Threads one process runs sync steps in at once (key ``step_threads``), or None: a
    worker's concurrency where a worker runs, asyncio's default size elsewhere."""
    return _positive_int("step_threads", project)


def deployment_setting(project: Project | None = None) -> str | None:
    """The deployment id of this process (key ``deployment``, e.g. a git sha or a release tag):
    runs started here are pinned to it, and ``wf worker`` drives only those and unpinned runs.
    None (unset): runs are unpinned. A malformed id raises ``UsageError``, an empty one too:
    ``WF_DEPLOYMENT=`` set but empty (a release variable that expanded to nothing) would
    otherwise fall back to the table's id or to unpinned runs without a word."""
    from wf.engine._deployments import check_deployment

    if os.environ.get("WF_DEPLOYMENT", None) == "":
        raise UsageError(
            "WF_DEPLOYMENT='': deployment cannot be empty (unset the variable to use [tool.wf] "
            "deployment, or leave both out for unpinned runs)"
        )
    found = resolve("deployment", project)
    value = found.value
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{found.origin}: deployment must be a string, not {value!r}")
    try:
        return check_deployment(value)
    except UsageError as error:
        raise UsageError(f"{found.origin}: {error}") from None


def overridden_deployment(project: Project | None = None) -> str | None:
    """The ``[tool.wf] deployment`` that ``WF_DEPLOYMENT`` overrides with another id, or None
    (no variable, no table id, or the same one). The variable winning is the rule, but a
    leftover one makes a release's workers serve another release's runs on this code: the
    commands that serve runs say so (``wf worker``'s start line, ``wf info``)."""
    variable = os.environ.get("WF_DEPLOYMENT")
    if not variable:
        return None
    project = project if project is not None else find_project()
    present, value = _from_table(project.table, "deployment")
    if present and isinstance(value, str) and value != variable:
        return value
    return None


def max_recoveries_setting(project: Project | None = None) -> int:
    """How many times in a row a run's driving process may die without the run recording
    progress before it fails with ``wf.RunStalled`` (key ``max_recoveries``, default 10; a
    workflow's own ``max_recoveries`` wins). A malformed value raises ``UsageError``."""
    value = _positive_int("max_recoveries", project)
    assert value is not None  # it has a default
    return value


def retention_setting(project: Project | None = None) -> float | None:
    """The store-wide retention in seconds (key ``retention``: ``wf.configure(retention=...)`` <
    ``WF_RETENTION`` < ``[tool.wf] retention``); None keeps finished runs forever. A malformed
    value raises ``UsageError`` naming where it came from."""
    from wf.engine._durations import parse_retention

    found = resolve("retention", project)
    if found.value is None:
        return None
    return parse_retention(found.value, what=f"retention ({found.origin})")
