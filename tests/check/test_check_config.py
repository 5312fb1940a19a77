"""Configuration, rule selection, excludes and inline suppression."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from wf.check import (
    CheckConfig,
    CheckUsageError,
    check_paths,
    check_source,
    load_config,
    parse_selectors,
)

WriteTree = Callable[[dict[str, str]], Path]

MANY = """\
import asyncio
import os
import random
import time

import wf


@wf.workflow
async def order(n: int):
    await asyncio.sleep(1)
    return time.time(), random.random(), os.getenv("X")
"""
# line 11: WF302, line 12: WF101, WF102, WF205


def codes(config: CheckConfig | None = None, source: str = MANY) -> set[str]:
    return {f.code for f in check_source(source, "flows.py", config)}


# --- select / ignore -------------------------------------------------------------------------


def test_default_selects_every_rule() -> None:
    assert codes() == {"WF101", "WF102", "WF205", "WF302"}


def test_select_takes_prefixes() -> None:
    assert codes(CheckConfig(select=frozenset({"WF1"}))) == {"WF101", "WF102"}
    assert codes(CheckConfig(select=frozenset({"WF101", "WF3"}))) == {"WF101", "WF302"}


def test_ignore_takes_prefixes() -> None:
    assert codes(CheckConfig(ignore=frozenset({"WF1"}))) == {"WF205", "WF302"}
    with pytest.raises(CheckUsageError, match="selects no rule"):  # was: no finding, a pass
        codes(CheckConfig(ignore=frozenset({"ALL"})))


def test_the_more_specific_selector_wins() -> None:
    config = CheckConfig(select=frozenset({"WF101"}), ignore=frozenset({"WF1"}))
    assert codes(config) == {"WF101"}
    config = CheckConfig(select=frozenset({"WF1"}), ignore=frozenset({"WF102"}))
    assert codes(config) == {"WF101"}


def test_with_overrides_replaces_select_and_extends_ignore() -> None:
    base = CheckConfig(select=frozenset({"WF1"}), ignore=frozenset({"WF101"}))
    merged = base.with_overrides(select=["WF1", "WF3"], ignore=["WF302"])
    assert merged.select == frozenset({"WF1", "WF3"})
    assert merged.ignore == {"WF101", "WF302"}
    assert base.with_overrides() == base


def test_parse_selectors_splits_commas_and_normalises_case() -> None:
    assert parse_selectors("wf1, WF203,") == {"WF1", "WF203"}


@pytest.mark.parametrize("bad", ["WF9", "E501", "XX"])
def test_unknown_selectors_are_usage_errors(bad: str) -> None:
    with pytest.raises(CheckUsageError, match="unknown rule selector"):
        parse_selectors(bad)
    with pytest.raises(CheckUsageError, match="unknown rule selector"):
        check_source(MANY, config=CheckConfig(ignore=frozenset({bad})))


# --- suppression -----------------------------------------------------------------------------


def suppressed_source(comment: str) -> str:
    return MANY.replace(
        'return time.time(), random.random(), os.getenv("X")',
        f'return time.time(), random.random(), os.getenv("X")  {comment}',
    )


@pytest.mark.parametrize(
    ("comment", "left"),
    [
        ("# wf: ignore", set()),
        ("# wf: ignore[WF101]", {"WF102", "WF205"}),
        ("# wf: ignore[WF101, WF205]", {"WF102"}),
        ("# wf:ignore[wf102]", {"WF101", "WF205"}),
        ("# wf: ignore[WF1]", {"WF205"}),
        ("# wf: ignore[WF999]", {"WF101", "WF102", "WF205"}),
        ("# noqa", {"WF101", "WF102", "WF205"}),
    ],
)
def test_suppression_comment_on_the_flagged_line(comment: str, left: set[str]) -> None:
    found = {f.code for f in check_source(suppressed_source(comment)) if f.line == 12}
    assert found == left


def test_suppression_only_covers_its_own_line() -> None:
    source = MANY.replace("await asyncio.sleep(1)", "await asyncio.sleep(1)  # wf: ignore")
    assert {f.line for f in check_source(source)} == {12}


# --- pyproject.toml --------------------------------------------------------------------------


def test_load_config_reads_the_section(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "pyproject.toml": """\
                [project]
                name = "demo"

                [tool.wf.check]
                select = ["WF1", "wf3"]
                ignore = ["WF102"]
                exclude = ["generated", "legacy/*.py"]
            """,
            "src/app/flows.py": "",
        }
    )
    config = load_config(root / "src" / "app")
    assert config.select == frozenset({"WF1", "WF3"})
    assert config.ignore == {"WF102"}
    assert config.exclude == ("generated", "legacy/*.py")
    assert config.root == root.resolve()
    assert load_config(root / "src" / "app" / "flows.py") == config


def test_load_config_skips_pyprojects_without_the_section(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "pyproject.toml": '[tool.wf.check]\nignore = ["WF5"]\n',
            "sub/pyproject.toml": '[project]\nname = "sub"\n',
        }
    )
    assert load_config(root / "sub").ignore == {"WF5"}


def test_load_config_defaults_without_any_section(write_tree: WriteTree) -> None:
    root = write_tree({"pyproject.toml": "[tool.ruff]\nline-length = 100\n"})
    config = load_config(root)
    assert config.select is None
    assert config.ignore == frozenset()
    assert config.exclude == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tool.wf.check]\nselcet = ['WF1']\n", "unknown key 'selcet'"),
        ("[tool.wf.check]\nselect = 'WF1'\n", "select must be a list of strings"),
        ("[tool.wf.check]\nignore = ['WF9']\n", "unknown rule selector 'WF9'"),
        ("[tool.wf.check\n", "cannot read configuration"),
    ],
)
def test_bad_configuration_is_a_usage_error(write_tree: WriteTree, text: str, message: str) -> None:
    root = write_tree({"pyproject.toml": text})
    with pytest.raises(CheckUsageError, match=message) as caught:
        load_config(root)
    assert "pyproject.toml" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_select_from_config_applies_to_check_paths(write_tree: WriteTree) -> None:
    root = write_tree({"pyproject.toml": '[tool.wf.check]\nselect = ["WF3"]\n', "f.py": MANY})
    result = check_paths([root], load_config(root))
    assert {f.code for f in result.findings} == {"WF302"}


# --- excludes --------------------------------------------------------------------------------


def test_exclude_patterns_skip_files_found_by_walking(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "pyproject.toml": (
                '[tool.wf.check]\nexclude = ["generated", "legacy/old_*.py", "*_pb2.py"]\n'
            ),
            "flows.py": MANY,
            "generated/flows.py": MANY,
            "legacy/old_flows.py": MANY,
            "legacy/new_flows.py": MANY,
            "api_pb2.py": MANY,
            ".venv/lib/flows.py": MANY,
            "__pycache__/flows.py": MANY,
        }
    )
    result = check_paths([root], load_config(root))
    files = {Path(f.path).relative_to(root).as_posix() for f in result.findings}
    assert files == {"flows.py", "legacy/new_flows.py"}
    assert result.files_checked == 2


def test_explicitly_named_files_are_checked_even_if_excluded(write_tree: WriteTree) -> None:
    root = write_tree({"pyproject.toml": '[tool.wf.check]\nexclude = ["*.py"]\n', "f.py": MANY})
    config = load_config(root)
    assert check_paths([root], config).files_checked == 0
    assert check_paths([root / "f.py"], config).files_checked == 1


# --- an empty selection ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_an_empty_select_on_the_command_line_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # Was: every rule off and "All checks passed" (an unset CI variable, `--select "$RULES"`).
    from wf.check._config import load_settings

    with pytest.raises(CheckUsageError, match="selects no rule") as caught:
        load_settings(tmp_path, select=value)
    assert str(caught.value).startswith("--select ")
    monkeypatch.setenv("WF_CHECK_SELECT", ",")
    with pytest.raises(CheckUsageError, match=r"WF_CHECK_SELECT .* selects no rule"):
        load_settings(tmp_path)


def test_an_empty_select_in_configuration_is_a_usage_error(write_tree: WriteTree) -> None:
    root = write_tree({"pyproject.toml": "[tool.wf.check]\nselect = []\n"})
    with pytest.raises(CheckUsageError, match="select = \\[\\] selects no rule") as caught:
        load_config(root)
    assert "pyproject.toml" in str(caught.value) and "\n" not in str(caught.value)


def test_an_empty_select_given_in_code_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(CheckUsageError, match="selects no rule"):
        check_paths([tmp_path], CheckConfig(select=frozenset()))
    with pytest.raises(CheckUsageError, match="selects no rule"):
        check_source(MANY, "flows.py", CheckConfig().with_overrides(select=[]))
    assert codes(CheckConfig().with_overrides(ignore=[])) == {"WF101", "WF102", "WF205", "WF302"}


def test_a_selection_every_rule_of_which_is_ignored_is_a_usage_error(
    tmp_path: Path, write_tree: WriteTree
) -> None:
    # `select = ["ALL"]` with `ignore = ["ALL"]` turns every rule off, as `select = []` would.
    from wf.check._config import load_settings

    with pytest.raises(CheckUsageError, match="select ALL with ignore ALL selects no rule"):
        load_settings(tmp_path, select="ALL", ignore="ALL")
    with pytest.raises(CheckUsageError, match="selects no rule"):
        check_paths([tmp_path], CheckConfig(ignore=frozenset({"WF"})))
    with pytest.raises(CheckUsageError, match="selects no rule"):
        check_source(
            MANY, "flows.py", CheckConfig(select=frozenset({"WF1"}), ignore=frozenset({"WF1"}))
        )
    root = write_tree({"pyproject.toml": '[tool.wf.check]\nselect = ["ALL"]\nignore = ["ALL"]\n'})
    with pytest.raises(CheckUsageError, match="selects no rule") as caught:
        load_settings(root)
    assert "\n" not in str(caught.value)
