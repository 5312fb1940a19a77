"""Declaring a workflow: what ``@wf.workflow`` refuses, and how it says so."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import wf
import wf.engine._workflow


def test_a_plain_function_is_refused_as_one() -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(
        wf.UsageError, match=r"needs an async def; '[^']*plain' is a plain function$"
    ):
        wf.workflow(plain)


def test_an_async_generator_is_refused_as_one() -> None:
    # Was: "needs an async def; '...gen' is a plain function", of an `async def`.
    async def gen(x: int) -> AsyncIterator[int]:
        yield x

    with pytest.raises(wf.UsageError) as refused:
        wf.workflow(gen)
    message = str(refused.value)
    assert "'test_an_async_generator_is_refused_as_one.<locals>.gen' is an async generator" in (
        message
    )
    assert "plain function" not in message
    assert "return" in message  # what to do instead


def test_a_generator_is_refused_as_one() -> None:
    def gen(x: int) -> Iterator[int]:
        yield x

    with pytest.raises(wf.UsageError, match=r"is a generator function"):
        wf.workflow(gen)


# -- one name, one workflow ----------------------------------------------------------------------


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Workflow names a test declares: forgotten after it (the registry is process-wide)."""
    from wf.engine._workflow import _registry

    declared: list[str] = []
    yield declared
    for name in declared:
        _registry.pop(name, None)


def test_a_second_function_under_a_taken_name_is_refused_naming_both(names: list[str]) -> None:
    # Was: silently replaced, so `wf run one.py:a` ran b's code.
    names.append("tests.names:same")

    @wf.workflow(name="tests.names:same")
    async def a() -> str:
        return "I am a"

    async def b() -> str:
        return "I am b"

    with pytest.raises(wf.UsageError) as refused:
        wf.workflow(name="tests.names:same")(b)
    message = str(refused.value)
    assert "'tests.names:same'" in message
    assert f"{__name__}:{a.fn.__qualname__}" in message  # the first, with its line
    assert f"{__name__}:{b.__qualname__}" in message
    assert message.count("test_workflow.py:") == 2
    assert "name=" in message  # what to do
    assert wf.engine._workflow.registered("tests.names:same") is a  # the first one stays


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` for modules a test writes; they are forgotten after it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _module(directory: Path, name: str, text: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(text))
    importlib.invalidate_caches()


def test_two_modules_declaring_one_name_is_refused_at_the_second_import(
    modules: Path, names: list[str]
) -> None:
    names.append("tests.names:shared")
    declaring = 'import wf\n@wf.workflow(name="tests.names:shared")\nasync def a() -> int:\n'
    _module(modules, "names_two", declaring + "    return 2\n")
    _module(modules, "names_three", "import names_two\n" + declaring + "    return 3\n")
    with pytest.raises(wf.UsageError) as refused:
        importlib.import_module("names_three")
    message = str(refused.value)
    assert "names_two:a (names_two.py:2)" in message
    assert "names_three:a (names_three.py:3)" in message


def test_the_same_definition_declared_again_replaces_the_old_one(
    modules: Path, names: list[str]
) -> None:
    # A module imported again (importlib.reload, wf dev's purge and re-import, a fixture that
    # declares its workflow for every test) declares the same function: it replaces the old.
    names.append("tests.names:again")
    _module(
        modules,
        "names_again",
        'import wf\n@wf.workflow(name="tests.names:again")\nasync def a() -> int:\n    return 1\n',
    )
    first = importlib.import_module("names_again")
    old = first.a
    reloaded = importlib.reload(first)
    assert reloaded.a is not old
    assert wf.engine._workflow.registered("tests.names:again") is reloaded.a
    del sys.modules["names_again"]
    fresh = importlib.import_module("names_again")  # purged and imported again
    assert wf.engine._workflow.registered("tests.names:again") is fresh.a


def test_one_file_imported_under_two_module_names_declares_one_workflow(
    modules: Path, names: list[str]
) -> None:
    # A script run as __main__ that its own code imports by its module name again; a file
    # loaded by path and by module: one definition, two module objects.
    import importlib.util

    names.append("tests.names:twice")
    _module(
        modules,
        "names_twice",
        'import wf\n@wf.workflow(name="tests.names:twice")\nasync def a() -> int:\n    return 1\n',
    )
    spec = importlib.util.spec_from_file_location("names_twice_alias", modules / "names_twice.py")
    assert spec is not None and spec.loader is not None
    alias = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(alias)
    module = importlib.import_module("names_twice")
    assert wf.engine._workflow.registered("tests.names:twice") is module.a
    assert alias.a.name == module.a.name


def _returning(value: str) -> wf.Workflow[[], str]:
    async def flow() -> str:
        return value

    return wf.workflow(name="tests.names:factory")(flow)


async def test_a_start_runs_the_workflow_object_it_was_given(
    wf_engine: wf.Engine, names: list[str]
) -> None:
    # Was: the run looked its workflow up by name, and ran whatever was declared last.
    names.append("tests.names:factory")
    old = _returning("old")
    _returning("new")  # the same definition declared again: the name now maps to it
    run = await wf.start(old)
    assert await run.result() == "old"


def test_a_reload_after_renaming_the_function_under_its_kept_name_replaces_it(
    modules: Path, names: list[str]
) -> None:
    # The rename the docs prescribe: the function gets a new name, name= keeps the old one.
    # Was: "declared twice" at the reload (the module's earlier declaration looked live).
    names.append("tests.names:nightly")
    text = (
        'import wf\n@wf.workflow(name="tests.names:nightly")\n'
        "async def {}() -> int:\n    return 1\n"
    )
    _module(modules, "names_renamed", text.format("build"))
    first = importlib.import_module("names_renamed")
    _module(modules, "names_renamed", "\n\n" + text.format("build_all"))
    reloaded = importlib.reload(first)
    assert wf.engine._workflow.registered("tests.names:nightly") is reloaded.build_all


_LOGGED = """
def logged(fn):
    async def wrapper(*a, **k):  # no functools.wraps: every wrapper is logged.<locals>.wrapper
        return await fn(*a, **k)
    return wrapper
"""


def test_two_functions_under_one_wrapper_without_wraps_are_two_definitions(
    modules: Path, names: list[str]
) -> None:
    # Was: one module, one qualname (logged.<locals>.wrapper): refund silently replaced charge.
    names.append("tests.names:billing")
    _module(
        modules,
        "names_wrapped",
        "import wf\n"
        + _LOGGED
        + '@wf.workflow(name="tests.names:billing")\n@logged\nasync def charge() -> str:\n'
        + '    return "charge"\n'
        + '@wf.workflow(name="tests.names:billing")\n@logged\nasync def refund() -> str:\n'
        + '    return "refund"\n',
    )
    with pytest.raises(wf.UsageError, match="declared twice") as refused:
        importlib.import_module("names_wrapped")
    assert "wrapping names_wrapped:charge" in str(refused.value)  # tells the two apart
    assert "wrapping names_wrapped:refund" in str(refused.value)


def test_a_shared_wrapper_in_two_modules_is_not_one_file_definition(
    modules: Path, names: list[str]
) -> None:
    # Both wrappers' code is the helper's (one file, one line): what they wrap differs.
    names.append("tests.names:wrapped2")
    _module(modules, "names_helper", _LOGGED)
    declaring = (
        'import wf\nfrom names_helper import logged\n@wf.workflow(name="tests.names:wrapped2")\n'
        "@logged\nasync def {}() -> int:\n    return 1\n"
    )
    _module(modules, "names_w1", declaring.format("one"))
    _module(modules, "names_w2", "import names_w1\n" + declaring.format("two"))
    with pytest.raises(wf.UsageError, match="declared twice"):
        importlib.import_module("names_w2")


def test_one_file_executed_as_two_live_modules_declares_one_workflow(
    modules: Path, names: list[str]
) -> None:
    # The file branch for real: both module objects stay in sys.modules (a script run as
    # __main__ that is imported by its module name too), so neither declaration is gone.
    import importlib.util

    names.append("tests.names:live_twice")
    _module(
        modules,
        "names_live",
        "import wf\n"
        + _LOGGED
        + '@wf.workflow(name="tests.names:live_twice")\n@logged\nasync def a() -> int:\n'
        + "    return 1\n",
    )
    spec = importlib.util.spec_from_file_location("names_live_alias", modules / "names_live.py")
    assert spec is not None and spec.loader is not None
    alias = importlib.util.module_from_spec(spec)
    sys.modules["names_live_alias"] = alias  # live, like __main__
    spec.loader.exec_module(alias)
    module = importlib.import_module("names_live")
    assert wf.engine._workflow.registered("tests.names:live_twice") is module.a
    assert not wf.engine._workflow._gone(alias.a.fn)  # the file branch decided it
