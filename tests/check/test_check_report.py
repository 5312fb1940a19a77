"""Output formats, usage errors and exit codes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wf.check import (
    CheckConfig,
    CheckResult,
    CheckUsageError,
    Finding,
    check_paths,
    check_source,
    format_json,
    format_text,
)

WriteTree = Callable[[dict[str, str]], Path]

FLOW = """\
import time

import wf


@wf.workflow
async def order(n: int):
    return time.time()
"""


def test_text_format_is_ruff_style(write_tree: WriteTree) -> None:
    root = write_tree({"flows.py": FLOW, "clean.py": "x = 1\n"})
    text = format_text(check_paths([root / "flows.py", root / "clean.py"]))
    first, hint, blank, summary = text.splitlines()
    assert first.startswith(f"{root / 'flows.py'}:8:12: WF101 `time.time()` reads the clock")
    assert hint == "  hint: use `wf.now()`"
    assert blank == ""
    assert summary == "Found 1 problem in 1 file"


def test_text_summary_when_clean(write_tree: WriteTree) -> None:
    root = write_tree({"a.py": "x = 1\n", "b.py": "y = 2\n"})
    assert format_text(check_paths([root])) == "All checks passed (2 files)"


def test_text_summary_when_there_was_nothing_to_check(tmp_path: Path) -> None:
    """`wf check` in a directory without Python files (a subdirectory of the project, say)
    said "All checks passed", which reads as if the project's code had been checked."""
    (tmp_path / "notes.txt").write_text("x\n")
    assert format_text(check_paths([tmp_path])) == "No Python files found: nothing was checked"


def test_columns_count_characters_not_bytes() -> None:
    source = FLOW.replace("return time.time()", 'x = "héllo"; return time.time()')
    [finding] = check_source(source)
    assert finding.col == len('    x = "héllo"; return ') + 1


def test_json_shape(write_tree: WriteTree) -> None:
    root = write_tree({"flows.py": FLOW, "broken.py": "def f(:\n"})
    document = json.loads(format_json(check_paths([root])))
    keys = {"version", "files_checked", "summary", "findings", "errors", "notes"}
    assert set(document) == keys
    assert document["version"] == 1
    assert document["files_checked"] == 1
    summary = {"findings": 1, "files_with_findings": 1, "errors": 1, "notes": 0}
    assert document["summary"] == summary
    [finding] = document["findings"]
    assert finding == {
        "path": str(root / "flows.py"),
        "line": 8,
        "col": 12,
        "code": "WF101",
        "name": "clock-read",
        "message": finding["message"],
        "hint": "use `wf.now()`",
    }
    [error] = document["errors"]
    assert error["code"] == "syntax-error"
    assert (error["path"], error["line"]) == (str(root / "broken.py"), 1)
    assert set(error) == {"path", "line", "col", "code", "message"}


def test_syntax_error_is_reported_with_its_location(write_tree: WriteTree) -> None:
    root = write_tree({"ok.py": FLOW, "pkg/broken.py": "import wf\n\n\nasync def f(:\n    pass\n"})
    result = check_paths([root])
    [error] = result.errors
    assert error.path == str(root / "pkg" / "broken.py")
    assert (error.line, error.col) == (4, 13)
    assert error.code == "syntax-error"
    assert result.files_checked == 1
    assert [f.code for f in result.findings] == ["WF101"]
    assert result.exit_code == 2
    text = format_text(result)
    assert f"{root / 'pkg' / 'broken.py'}:4:13: syntax-error syntax error:" in text
    assert text.endswith("Found 1 problem in 1 file; 1 file could not be checked")


@pytest.mark.parametrize("operator", ["-", "~", "not "])
def test_thousands_of_nested_unary_operators_are_a_syntax_error(
    tmp_path: Path, operator: str
) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    (tmp_path / "deep.py").write_text("x = " + operator * 50_000 + "1\n")  # parser: MemoryError
    result = check_paths([tmp_path])
    [error] = result.errors
    assert (error.code, error.path) == ("syntax-error", str(tmp_path / "deep.py"))
    assert error.message.startswith("cannot parse: nested too deeply")
    assert result.files_checked == 1
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("body", "where", "why"),
    [
        ("    g = lambda x: await step(x)\n", (6, 19), "'await' outside async function"),
        ("    g = lambda: [await step(x) for x in xs]\n", (6, 17), "asynchronous comprehension"),
        ("    nonlocal xs\n", (6, 5), "is parameter and nonlocal"),
    ],
)
def test_code_the_parser_accepts_but_python_cannot_compile_is_a_syntax_error(
    tmp_path: Path, body: str, where: tuple[int, int], why: str
) -> None:
    # `ast.parse` accepts these; importing the module would fail, so the check must too.
    source = "import wf\n\n\n@wf.workflow\nasync def f(xs: list[int]) -> None:\n" + body
    (tmp_path / "flows.py").write_text(source)
    result = check_paths([tmp_path])
    [error] = result.errors
    assert error.code == "syntax-error"
    assert (error.line, error.col) == where
    assert why in error.message
    assert result.exit_code == 2


def test_compiler_warnings_are_not_printed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "flows.py").write_text("def f(x: int) -> bool:\n    return x is 1\n")
    assert check_paths([tmp_path]).exit_code == 0
    assert capfd.readouterr().err == ""


def test_check_source_raises_on_syntax_error() -> None:
    with pytest.raises(CheckUsageError, match=r"^flows\.py:2:\d+: syntax error"):
        check_source("x = 1\nx = (\n", "flows.py")


def test_undecodable_file_is_a_read_error(tmp_path: Path) -> None:
    (tmp_path / "latin.py").write_bytes(b"x = '\xff'\n")
    [error] = check_paths([tmp_path]).errors
    assert error.code == "read-error"


@pytest.mark.timeout(20)
def test_a_fifo_named_like_a_module_is_a_read_error_never_a_wait(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.py")  # reading it would wait for a writer for ever
    (tmp_path / "flows.py").write_text("x = 1\n")
    result = check_paths([tmp_path])
    [error] = result.errors
    assert (error.code, error.path) == ("read-error", str(tmp_path / "pipe.py"))
    assert "not a regular file" in error.message
    assert result.files_checked == 1


def test_a_symlink_loop_is_a_read_error_and_the_other_files_are_checked(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    (tmp_path / "loop.py").symlink_to("loop.py")  # was: the whole check aborted (RuntimeError)
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("a.py")
    result = check_paths([tmp_path])
    assert [(e.code, e.path) for e in result.errors] == [
        ("read-error", str(tmp_path / name)) for name in ("a.py", "b.py", "loop.py")
    ]
    assert all(e.message.startswith("cannot read file: ") for e in result.errors)
    assert result.files_checked == 1
    assert [f.code for f in result.findings] == ["WF101"]
    assert result.exit_code == 2


def test_a_directory_that_cannot_be_listed_is_a_read_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "inner.py").write_text(FLOW)
    # Refused as for a mode-0 directory (root is never refused, so the refusal is made here).
    scandir = os.scandir

    def refusing(path: Any = ".") -> Any:
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    result = check_paths([tmp_path])  # was: the directory skipped unsaid
    [error] = result.errors
    assert (error.code, error.path) == ("read-error", str(locked))
    assert error.message == "cannot read directory: Permission denied"
    assert result.files_checked == 1
    assert result.exit_code == 2
    [error] = check_paths([locked]).errors  # was: "All checks passed (0 files)", exit 0
    assert error.path == str(locked)
    assert format_text(check_paths([locked])).endswith("1 directory could not be checked")
    # Was "2 files could not be checked": the directory was counted as a file.
    (tmp_path / "broken.py").write_text("def (:\n")
    assert format_text(check_paths([tmp_path])).endswith(
        "; 1 file and 1 directory could not be checked"
    )


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(CheckUsageError) as caught:
        check_paths([tmp_path, missing])
    assert str(caught.value) == f"{missing}: no such file or directory"


def test_a_path_that_is_neither_file_nor_directory_is_a_usage_error() -> None:
    with pytest.raises(CheckUsageError) as caught:
        check_paths([Path("/dev/null")])  # was "All checks passed (0 files)"
    assert str(caught.value) == "/dev/null: not a file or a directory"


def test_exit_codes() -> None:
    finding = Finding("a.py", 1, 1, "WF101", "m", "h")
    assert CheckResult().exit_code == 0
    assert CheckResult(findings=[finding]).exit_code == 1
    assert CheckResult(findings=[finding], errors=[finding]).exit_code == 2


def test_findings_are_sorted_and_files_deduplicated(write_tree: WriteTree) -> None:
    root = write_tree({"b.py": FLOW, "a.py": FLOW.replace("order", "other")})
    result = check_paths([root / "b.py", root, root / "a.py"])
    assert result.files_checked == 2
    assert [Path(f.path).name for f in result.findings] == ["a.py", "b.py"]


def _elif_chain(arms: int) -> str:
    arms_text = "".join(f"    elif n == {i}:\n        return {i}\n" for i in range(1, arms))
    last = "    else:\n        return time.time()\n"
    return f"{FLOW.split('@wf.workflow')[0]}@wf.workflow\nasync def order(n: int):\n" + (
        "    if n == 0:\n        return 0\n" + arms_text + last
    )


def _operator_chain(terms: int) -> str:
    total = " + ".join(["n"] * terms)
    return f"{FLOW.split('@wf.workflow')[0]}X = {'+'.join(['1'] * terms)}\n\n\n" + (
        f"@wf.workflow\nasync def order(n: int):\n    return {total} + time.time()\n"
    )


def _gathered_chain(arms: int, terms: int) -> str:
    # A concurrent branch's operations are followed through the function it runs (WF305).
    elifs = "".join(f"    elif x == {i}:\n        return {i}\n" for i in range(1, arms))
    total = " + ".join(["x"] * terms)
    return (
        "import asyncio\n\nimport wf\n\n\n@wf.step\nasync def s(x: int) -> int:\n"
        "    return x\n\n\nasync def pick(x: int) -> int:\n    if x == 0:\n        return 0\n"
        f"{elifs}    await s({total})\n    return await s(x)\n\n\n"
        "@wf.workflow\nasync def order(n: int) -> list[int]:\n"
        "    return await asyncio.gather(pick(1), pick(2))\n"
    )


@pytest.mark.parametrize(
    ("source", "codes"),
    [
        (_elif_chain(250), ["WF101"]),  # the clock read at the far end
        (_elif_chain(2000), ["WF101"]),
        (_operator_chain(500), ["WF101"]),
        (_operator_chain(990), ["WF101"]),
        (_gathered_chain(400, 900), ["WF305", "WF305"]),  # both branches
    ],
    ids=["elif-250", "elif-2000", "plus-500", "plus-990", "gathered"],
)
def test_long_elif_and_operator_chains_are_analysed_like_any_code(
    tmp_path: Path, source: str, codes: list[str]
) -> None:
    # Python imports these; the check called them syntax errors ("cannot analyze: nested too
    # deeply", "maximum recursion depth exceeded while traversing 'expr' node").
    compile(source, "flows.py", "exec")
    (tmp_path / "flows.py").write_text(source)
    result = check_paths([tmp_path])
    assert (result.errors, result.notes) == ([], [])
    assert [f.code for f in result.findings] == codes
    assert result.exit_code == 1


def test_a_latin1_byte_in_a_comment_is_checked_as_python_imports_it(tmp_path: Path) -> None:
    # Python 3 imports this file: its tokenizer does not decode comments. It was a read-error
    # "cannot decode file" at 1:1.
    data = FLOW.encode().replace(b"import wf\n", b"import wf\n# caf\xe9\n")
    compile(data, "flows.py", "exec")
    (tmp_path / "flows.py").write_bytes(data)
    result = check_paths([tmp_path])
    assert result.errors == []
    [finding] = result.findings
    assert (finding.code, finding.line) == ("WF101", 9)


def test_a_coding_line_is_honoured(tmp_path: Path) -> None:
    data = b"# -*- coding: latin-1 -*-\n" + FLOW.encode().replace(b"n: int", b"n\xe9: int")
    (tmp_path / "flows.py").write_bytes(data)
    result = check_paths([tmp_path])
    assert result.errors == []
    [finding] = result.findings
    assert (finding.code, finding.line, finding.col) == ("WF101", 9, 12)


def test_an_undecodable_string_is_reported_on_its_line(tmp_path: Path) -> None:
    (tmp_path / "latin.py").write_bytes(b"x = 1\ny = 'caf\xe9'\n")
    with pytest.raises(SyntaxError) as python:
        compile((tmp_path / "latin.py").read_bytes(), "latin.py", "exec")
    [error] = check_paths([tmp_path]).errors
    assert (error.code, error.line) == ("read-error", 2) == ("read-error", python.value.lineno)
    assert error.message.startswith("cannot decode file:")


def test_code_nested_past_what_the_analyzer_walks_is_a_note_not_an_error(
    tmp_path: Path,
) -> None:
    chain = "x = y" + ".f()" * 1000 + "\n"  # Python imports it; the walk cannot go that deep
    source = f"y = None\n{chain}{FLOW}"
    compile(source, "flows.py", "exec")
    (tmp_path / "flows.py").write_text(source)
    result = check_paths([tmp_path])
    assert result.errors == []
    [note] = result.notes
    assert (note.path, note.line, note.col, note.code) == (str(tmp_path / "flows.py"), 2, 1, "note")
    assert note.message.startswith("not analysed: nested too deeply")
    assert [(f.code, f.line) for f in result.findings] == [("WF101", 10)]  # the rest is checked
    assert result.exit_code == 1
    text = format_text(result)
    assert f"{tmp_path / 'flows.py'}:2:1: note not analysed: nested too deeply" in text
    assert text.endswith("Found 1 problem in 1 file; 1 note")
    document = json.loads(format_json(result))
    assert document["summary"]["notes"] == 1
    assert document["notes"][0]["line"] == 2
    clean = check_paths([tmp_path], CheckConfig(ignore=frozenset({"WF101"})))
    assert format_text(clean).endswith("All checks passed (1 file); 1 note")
    assert clean.exit_code == 0


_CHAIN = "x" + ".real" * 1200


@pytest.mark.parametrize(
    "body",
    [
        f"    x = n\n    return {_CHAIN}()\n",
        f"    x = n\n    return await {_CHAIN}\n",
        f"    return helper(n)\n\n\ndef helper(x):\n    return {_CHAIN}()\n",
    ],
    ids=["called", "awaited", "in-helper"],
)
def test_a_long_attribute_chain_is_no_crash(tmp_path: Path, body: str) -> None:
    # Each `.attr` used to be a recursive call of the resolver, past Python's recursion limit.
    source = f"import wf\n\n\n@wf.workflow\nasync def chain(n: int):\n{body}"
    compile(source, "chain.py", "exec")
    (tmp_path / "chain.py").write_text(source)
    (tmp_path / "other.py").write_text(FLOW)
    result = check_paths([tmp_path])
    assert result.errors == []
    assert [(Path(f.path).name, f.code) for f in result.findings] == [("other.py", "WF101")]


@pytest.mark.parametrize(
    "where", ["_awaits._operation", "_awaits.resolve_expr", "_analyzer._callees"]
)
def test_a_pass_too_deep_for_one_workflow_is_a_note_for_it(
    tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever pass runs out of stack on one workflow, that workflow gets a note and the
    # rest of the project is still checked: never a crash of the whole check.
    import importlib

    module_name, _, attr = where.partition(".")
    module = importlib.import_module(f"wf.check.{module_name}")

    def deep(*args: object, **kwargs: object) -> object:
        raise RecursionError

    monkeypatch.setattr(module, attr, deep)
    source = "import wf\n\n\n@wf.workflow\nasync def chain(n: int):\n    f()\n    await f\n"
    (tmp_path / "chain.py").write_text(source)
    (tmp_path / "other.py").write_text(FLOW)
    result = check_paths([tmp_path / "chain.py", tmp_path / "other.py"])
    assert result.errors == []
    [note] = [n for n in result.notes if Path(n.path).name == "chain.py"]
    assert note.line == 5
    # Not "the rest is checked": the rules after the point it ran out are skipped for `chain`.
    assert note.message.startswith("`chain` partly analysed: nested too deeply")
    assert [(Path(f.path).name, f.code) for f in result.findings] == [("other.py", "WF101")]


@pytest.mark.parametrize("literal", ['"C:\\Users\\me"', "'\\N{NO SUCH NAME}'"])
def test_a_bad_escape_in_a_string_is_a_syntax_error_not_a_read_error(
    tmp_path: Path, literal: str
) -> None:
    (tmp_path / "paths.py").write_text(f"x = 1\np = {literal}\n")
    with pytest.raises(SyntaxError) as python:
        compile((tmp_path / "paths.py").read_bytes(), "paths.py", "exec")
    [error] = check_paths([tmp_path]).errors
    assert (error.code, error.line) == ("syntax-error", 2) == ("syntax-error", python.value.lineno)
    assert error.message == f"syntax error: {python.value.msg}"
