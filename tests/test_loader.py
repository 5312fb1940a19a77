"""``wf._loader``'s hints on a project file that hides a module: which importer of a file named
like a standard module is taken for a library's, and that no module is made to import (the
end-to-end cases are in tests/cli/test_shadowed_stdlib.py and tests/cli/test_errors.py)."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from wf._loader import load_target, shadowing, split_target, stdlib_hint

# A standard module this process has not imported: a project file of its name is what an
# import of it gets.
NAME = next(n for n in ("wave", "sndhdr", "nntplib", "colorsys") if n not in sys.modules)


def error_of_import(project: Path, importer: str) -> BaseException:
    """What ``import NAME``, run as code of the file ``importer``, raises, the project's
    ``NAME.py`` failing as it is imported."""
    (project / f"{NAME}.py").write_text("x = {}['k']\n")
    try:
        exec(compile(f"import {NAME}\n", importer, "exec"), {})
    except KeyError as exc:
        return exc
    raise AssertionError(f"the project's {NAME}.py was not imported")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_standard_library_importer_is_a_library(project: Path) -> None:
    exc = error_of_import(project, os.path.join(os.path.dirname(os.__file__), "shelf.py"))
    assert stdlib_hint(exc) == (
        f"; {NAME}.py of the project is imported in place of the standard library module "
        f"{NAME!r}: rename that file"
    )


@pytest.mark.parametrize("importer", ["<string>", "<stdin>", "flows.py"])
def test_code_of_no_file_or_of_the_project_is_the_users(project: Path, importer: str) -> None:
    """``python -c``, a notebook's cell and the project's own modules import the project's
    file on purpose: no hint."""
    exc = error_of_import(project, str(project / importer) if importer[0] != "<" else importer)
    assert stdlib_hint(exc) == ""


def test_a_lazy_module_is_not_asked_for_its_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module whose ``__getattr__`` imports on demand (here it fails) is not made to: the
    error it is named in stays the error reported."""
    lazy = types.ModuleType("wf_lazy_probe")

    def __getattr__(name: str) -> object:
        raise ImportError(f"importing {name} on demand")

    lazy.__getattr__ = __getattr__  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "wf_lazy_probe", lazy)
    for exc in (
        ModuleNotFoundError("No module named 'wf_lazy_probe.sub'", name="wf_lazy_probe.sub"),
        AttributeError("module 'wf_lazy_probe' has no attribute 'x'", name="x", obj=lazy),
    ):
        assert shadowing(exc) is None
        assert stdlib_hint(exc) == ""


def test_an_entry_of_sys_modules_that_is_no_module_gets_no_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A package may put any object in ``sys.modules`` (one without a ``__dict__`` here): the
    hint is left out, the error it would have followed is not turned into another."""
    monkeypatch.setitem(sys.modules, "wf_odd_probe", object())
    exc = ModuleNotFoundError("No module named 'wf_odd_probe.sub'", name="wf_odd_probe.sub")
    assert stdlib_hint(exc) == ""


@pytest.mark.parametrize(
    ("target", "parts"),
    [
        ("shop.flows:order", ("shop.flows", "order")),
        ("flows.py:Order.run", ("flows.py", "Order.run")),
        ("C:\\shop\\flows.py:order", ("C:\\shop\\flows.py", "order")),  # a drive's colon
        ("c:/shop/flows.py:order", ("c:/shop/flows.py", "order")),
    ],
)
def test_a_target_splits_at_its_one_colon(target: str, parts: tuple[str, str]) -> None:
    assert split_target(target) == parts


def test_a_file_path_with_a_colon_splits_at_the_last_colon(tmp_path: Path) -> None:
    """A colon inside a file's path (``odd:dir/job.py``) is the path's: the target names a
    file all the same (runs queued by such a path still load)."""
    odd = tmp_path / "odd:dir"
    odd.mkdir()
    source = "import wf\n\n@wf.workflow\nasync def job() -> int:\n    return 7\n"
    (odd / "job.py").write_text(source)
    (odd / "plain").write_text("")
    assert split_target(f"{odd}/job.py:job") == (f"{odd}/job.py", "job")
    assert split_target(f"{odd}/plain:job") == (f"{odd}/plain", "job")  # an existing file
    assert load_target(f"{odd}/job.py:job").__name__ == "job"


@pytest.mark.parametrize("target", ["flows.py:buy:extra", "a:b:c", "C:\\x.py:a:b", "flows:buy:"])
def test_a_target_with_a_colon_too_many_says_so(target: str) -> None:
    import wf

    with pytest.raises(wf.UsageError, match="one colon too many"):
        split_target(target)


_STARTS = """\
import asyncio
import wf


@wf.workflow
async def w() -> int:
    return 1


async def main() -> None:
    await wf.start(w)


"""


@pytest.mark.parametrize(
    "guarded",
    [
        'if "__main__" == __name__:\n    asyncio.run(main())',
        'if __name__ == "__main__" and len(__file__) > 1:\n    asyncio.run(main())',
        'if __name__ != "__main__":\n    pass\nelse:\n    asyncio.run(main())',
        'if __name__ in {"__main__", "tool"}:\n    asyncio.run(main())',
        'if __name__ in ("__main__",):\n    asyncio.run(main())',
        'if __name__ in ["__main__"]:\n    asyncio.run(main())',
        # A nested function the top level never calls runs nothing.
        "def make_cli():\n    def go():\n        asyncio.run(main())\n    return go\n\n"
        "cli = make_cli()",
    ],
)
def test_a_start_that_runs_only_as_a_script_is_guarded(tmp_path: Path, guarded: str) -> None:
    # Was: only `__name__ == "__main__"` exactly was a guard, and a runner anywhere in a
    # called function's body (nested functions too) counted: the script kept `__main__`.
    from wf._loader import unguarded_start

    script = tmp_path / "guarded.py"
    script.write_text(_STARTS + guarded + "\n")
    assert unguarded_start(str(script)) is None


@pytest.mark.parametrize(
    ("unguarded", "what"),
    [
        ('if __name__ != "__main__":\n    asyncio.run(main())', "asyncio.run(...)"),
        ("from asyncio import run\nrun(main())", "asyncio.run(...)"),
        ("import asyncio as aio\naio.run(main())", "asyncio.run(...)"),
        ("with asyncio.Runner() as r:\n    r.run(main())", "asyncio.Runner(...)"),
        ("def go():\n    asyncio.run(main())\n\ndef deeper():\n    go()\n\ndeeper()", "deeper()"),
    ],
)
def test_a_start_the_import_runs_is_found_however_spelled(
    tmp_path: Path, unguarded: str, what: str
) -> None:
    # Was: `from asyncio import run`, an `asyncio` alias and `asyncio.Runner` went unseen.
    from wf._loader import unguarded_start

    script = tmp_path / "unguarded.py"
    script.write_text(_STARTS + unguarded + "\n")
    found = unguarded_start(str(script))
    assert found is not None and found.startswith(what), found
