"""The one configuration: project discovery, ``[tool.wf]`` < ``WF_*`` < ``wf.configure()``."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from wf import UsageError
from wf._config import (
    KEYS,
    Project,
    default_store,
    describe_store,
    find_project,
    resolve,
    set_overrides,
    setting,
    store_dir,
)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in KEYS:
        if key.env:
            monkeypatch.delenv(key.env, raising=False)
    yield
    set_overrides(dir=None, postgres_dsn=None)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def test_the_project_is_found_from_a_subdirectory(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.wf]\ndir = "state"\n')
    deep = tmp_path / "src" / "app"
    deep.mkdir(parents=True)
    project = find_project(deep)
    assert project.root == tmp_path.resolve()
    assert project.found_by == "pyproject.toml"
    assert store_dir(project) == tmp_path.resolve() / "state"


def test_a_pyproject_without_tool_wf_is_passed_over(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.wf]\n")
    write(tmp_path / "lib" / "pyproject.toml", '[project]\nname = "lib"\n')
    assert find_project(tmp_path / "lib").root == tmp_path.resolve()


def test_an_existing_store_marks_the_project(tmp_path: Path) -> None:
    (tmp_path / ".workflows").mkdir()
    (tmp_path / "sub").mkdir()
    project = find_project(tmp_path / "sub")
    assert (project.root, project.found_by) == (tmp_path.resolve(), ".workflows")
    assert store_dir(project) == tmp_path.resolve() / ".workflows"


def test_no_project_means_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    project = find_project()
    assert project.found_by == "current directory" and project.source is None
    assert setting("worker.concurrency", project) == 100


def test_precedence_table_then_environment_then_configure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        tmp_path / "pyproject.toml",
        '[tool.wf]\ndir = "from-table"\n[tool.wf.worker]\nconcurrency = 7\n',
    )
    monkeypatch.chdir(tmp_path)
    assert resolve("worker.concurrency").value == 7
    assert resolve("worker.concurrency").origin.endswith("pyproject.toml")
    monkeypatch.setenv("WF_WORKER_CONCURRENCY", "9")
    assert resolve("worker.concurrency").value == 9
    assert resolve("worker.concurrency").origin == "WF_WORKER_CONCURRENCY"
    assert store_dir() == tmp_path.resolve() / "from-table"
    monkeypatch.setenv("WF_DIR", "from-env")
    assert store_dir() == tmp_path.resolve() / "from-env"
    set_overrides(dir=str(tmp_path / "from-configure"))
    assert store_dir() == tmp_path / "from-configure"
    assert resolve("dir").origin == "wf.configure()"


def test_wf_configure_dir_selects_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wf
    from wf.store.local import LocalStore

    monkeypatch.chdir(tmp_path)
    engine = wf.configure(dir=tmp_path / "mine")
    try:
        assert isinstance(engine.store, LocalStore)
        assert Path(engine.store.root) == (tmp_path / "mine").resolve()
    finally:
        set_overrides(dir=None)


@pytest.mark.parametrize("store", ["postgresql://postgres@127.0.0.1:5432/test", Path("x"), 3])
def test_wf_configure_refuses_a_store_that_is_not_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: object
) -> None:
    import wf

    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        wf.UsageError, match=r"^wf.configure\(store=...\) takes a wf.store.Store, "
    ) as caught:
        wf.configure(store=store)  # type: ignore[call-overload]
    if not isinstance(store, int):
        assert "postgres_dsn='postgresql://...' or redis_url='redis://...'" in str(caught.value)


@pytest.mark.parametrize(
    ("table", "env", "message"),
    [
        (
            '[tool.wf.worker]\nconcurrency = "lots"\n',
            {},
            "worker.concurrency must be an integer, not 'lots'",
        ),
        ("[tool.wf]\nmodules = 3\n", {}, "modules must be a list of strings"),
        ("[tool.wf]\n", {"WF_WORKER_CONCURRENCY": "x"}, "WF_WORKER_CONCURRENCY='x': expected an"),
        ("[tool.wf]\n", {"WF_DEV_POLL": "maybe"}, "WF_DEV_POLL='maybe': expected true or false"),
        # Out of range: a worker with no slots, or a poll that never ends or spins, would hang.
        (
            "[tool.wf.worker]\nconcurrency = 0\n",
            {},
            r"pyproject.toml \[tool.wf\]: worker.concurrency must be an integer >= 1, not 0",
        ),
        ("[tool.wf]\n", {"WF_WORKER_CONCURRENCY": "-1"}, "must be an integer >= 1, not -1"),
        ("[tool.wf.worker]\npoll = nan\n", {}, "worker.poll must be a number > 0, not nan"),
        ("[tool.wf]\n", {"WF_WORKER_POLL": "-5"}, "WF_WORKER_POLL='-5': worker.poll must be a"),
        ("[tool.wf]\n", {"WF_WORKER_POLL": "inf"}, "worker.poll must be a number > 0, not inf"),
        ("[tool.wf.dev]\nconcurrency = 0\n", {}, "dev.concurrency must be an integer >= 1"),
        # A grace of 0 is no wait (steps restarted on every reload); NaN, inf or < 0 is none.
        ("[tool.wf.dev]\ngrace = nan\n", {}, "dev.grace must be a number >= 0, not nan"),
        ("[tool.wf]\n", {"WF_DEV_GRACE": "inf"}, "dev.grace must be a number >= 0, not inf"),
        ("[tool.wf]\n", {"WF_DEV_GRACE": "-5"}, "WF_DEV_GRACE='-5': dev.grace must be a number"),
        ("[tool.wf\n", {}, "cannot read configuration"),
        ("[tool]\nwf = 3\n", {}, r"\[tool.wf\] must be a table"),
    ],
)
def test_bad_settings_name_the_key_and_the_value(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
    env: dict[str, str],
    message: str,
) -> None:
    write(tmp_path / "pyproject.toml", table)
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=message):
        for key in (
            "worker.concurrency",
            "worker.poll",
            "modules",
            "dev.poll",
            "dev.concurrency",
            "dev.grace",
        ):
            setting(key)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'store = "postgresql://u@h/db"',
            "pyproject.toml [tool.wf]: unknown key 'store'; did you mean 'postgres_dsn', "
            "'redis_url' or 'dir'?",
        ),
        ("concurency = 3", "[tool.wf]: unknown key 'concurency'; did you mean 'concurrency'?"),
        ("[tool.wf.dev]\ngrase = 1", "[tool.wf.dev]: unknown key 'grase'; did you mean 'grace'?"),
        ("zzz = 1", "unknown key 'zzz' (expected one of dir, postgres_dsn, "),
    ],
)
def test_an_unknown_key_is_refused_naming_the_file_and_close_keys(
    tmp_path: Path, text: str, message: str
) -> None:
    write(tmp_path / "pyproject.toml", f"[tool.wf]\n{text}\n")
    with pytest.raises(UsageError) as caught:
        find_project(tmp_path)
    assert message in str(caught.value)
    assert str(tmp_path) in str(caught.value) and "\n" not in str(caught.value)


def test_unknown_keys_are_listed_and_wf_toml_is_deprecated(tmp_path: Path) -> None:
    project = Project(tmp_path, None, {"concurency": 3, "dev": {"grase": 1}}, "pyproject.toml")
    assert project.unknown_keys() == ["concurency", "dev.grase"]
    assert project.deprecated is None
    write(tmp_path / "wf.toml", 'modules = ["a"]\n')
    legacy = find_project(tmp_path)
    assert legacy.found_by == "wf.toml"
    assert legacy.deprecated is not None and "[tool.wf]" in legacy.deprecated
    assert setting("modules", legacy) == ["a"]


@pytest.mark.parametrize(
    ("variable", "instead"),
    [("WF_STORE", "WF_POSTGRES_DSN, WF_REDIS_URL or WF_DIR"), ("WF_DSN", "WF_POSTGRES_DSN")],
)
def test_a_variable_meant_to_choose_the_store_says_the_one_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, instead: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, "redis://127.0.0.1:6379/0")
    with pytest.raises(UsageError, match=f"^{variable} is not a wf variable: set {instead} "):
        default_store()
    with pytest.raises(UsageError, match=f"^{variable} is not a wf variable"):
        describe_store()


def test_every_key_is_in_the_documented_table() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    for key in KEYS:
        assert f"`{key.name}`" in text, f"{key.name} is missing from docs/configuration.md"
        if key.env:
            assert f"`{key.env}`" in text, f"{key.env} is missing from docs/configuration.md"


def test_max_recoveries_comes_from_the_table_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf._config import max_recoveries_setting

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WF_MAX_RECOVERIES", raising=False)
    assert max_recoveries_setting() == 10
    write(tmp_path / "pyproject.toml", "[tool.wf]\nmax_recoveries = 3\n")
    assert max_recoveries_setting() == 3
    monkeypatch.setenv("WF_MAX_RECOVERIES", "5")
    assert max_recoveries_setting() == 5
    monkeypatch.setenv("WF_MAX_RECOVERIES", "0")
    with pytest.raises(UsageError, match=r"WF_MAX_RECOVERIES.*max_recoveries must be an integer"):
        max_recoveries_setting()


def test_step_threads_comes_from_the_table_or_the_environment_to_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf._config import step_threads_setting
    from wf._setup import default_engine

    monkeypatch.chdir(tmp_path)
    assert step_threads_setting() is None
    write(tmp_path / "pyproject.toml", "[tool.wf]\nstep_threads = 3\n")
    assert step_threads_setting() == 3
    monkeypatch.setenv("WF_STEP_THREADS", "7")
    engine = default_engine()
    assert engine.step_threads == 7
    engine.want_step_threads(100)  # a worker's concurrency: the setting wins
    assert engine.step_pool().size == 7
    monkeypatch.setenv("WF_STEP_THREADS", "0")
    with pytest.raises(UsageError, match=r"WF_STEP_THREADS.*step_threads must be an integer"):
        step_threads_setting()


@pytest.mark.parametrize("table", ['[tool.wf]\ndir = ""\n', '[tool.wf]\ndir = " "\n'])
def test_an_empty_dir_is_refused_not_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    # Path("") is "." : the store would be made among the project's own files.
    write(tmp_path / "pyproject.toml", table)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"pyproject.toml \[tool.wf\]: dir must name a direc"):
        store_dir()
    write(tmp_path / "pyproject.toml", "[tool.wf]\n")  # (a bad file is refused first)
    monkeypatch.setenv("WF_DIR", "  ")
    with pytest.raises(UsageError, match=r"^WF_DIR='  ': dir must name a directory for the sto"):
        store_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('retention = "forever"', r"retention \(.*\): 'forever' is not a duration"),
        ("[tool.wf.worker]\nconcurrency = -3", r"worker.concurrency must be an integer >= 1"),
        ('modules = "os"', r"modules must be a list of strings, not 'os'"),
        ("worker = 3", r"worker must be a table"),
        ("concurrency = 0", r"concurrency must be an integer >= 1"),
        ("max_recoveries = 0", r"max_recoveries must be an integer >= 1"),
        ('deployment = "*"', r"deployment cannot be '\*'"),
        ('deployment = ""', r"deployment cannot be empty"),
        ('deployment = " "', r"deployment ' ' starts or ends with whitespace"),
        ('deployment = "v1 "', r"deployment 'v1 ' starts or ends with whitespace"),
        ('dir = "a\\u0000b"', r"dir must name a directory, not 'a\\x00b' \(a NUL character\)"),
        ("[tool.wf.serve]\nport = 'x'", r"serve.port must be an integer"),
    ],
)
def test_the_whole_table_is_checked_when_the_project_is_found(
    tmp_path: Path, table: str, message: str
) -> None:
    # Whatever a command reads: wf run never reads worker.concurrency nor modules, wf info
    # reads nothing but prints; each refuses the same table with the same line.
    write(tmp_path / "pyproject.toml", f"[tool.wf]\n{table}\n")
    with pytest.raises(UsageError) as caught:
        find_project(tmp_path)
    text = str(caught.value)
    assert f"{tmp_path}/pyproject.toml [tool.wf]" in text  # the file, and the key:
    assert re.search(message, text), text
    assert "\n" not in text


def test_an_empty_or_padded_wf_deployment_is_refused_not_taken_for_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf._config import deployment_setting

    # A release variable that expanded to nothing would run on the table's id silently.
    write(tmp_path / "pyproject.toml", '[tool.wf]\ndeployment = "tbl"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WF_DEPLOYMENT", "")
    with pytest.raises(UsageError, match=r"^WF_DEPLOYMENT='': deployment cannot be empty \(unset"):
        deployment_setting()
    monkeypatch.setenv("WF_DEPLOYMENT", " v2")
    with pytest.raises(UsageError, match=r"^WF_DEPLOYMENT=' v2': deployment ' v2' starts or"):
        deployment_setting()
    monkeypatch.setenv("WF_DEPLOYMENT", "v2")
    assert deployment_setting() == "v2"
    monkeypatch.delenv("WF_DEPLOYMENT")
    assert deployment_setting() == "tbl"


def test_a_malformed_postgres_dsn_is_a_usage_error_where_the_store_is_described(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("psycopg")
    from wf._config import describe_store

    write(tmp_path / "pyproject.toml", '[tool.wf]\npostgres_dsn = "garbage"\n')
    with pytest.raises(UsageError, match=r"^invalid PostgreSQL DSN: missing \"=\""):
        describe_store(find_project(tmp_path))
