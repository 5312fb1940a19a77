"""The package's shape: the facade's contract and the direction of imports."""

from __future__ import annotations

import ast
import pathlib

import wf

ROOT = pathlib.Path(wf.__file__).parent

CONTRACT = {
    "workflow",
    "step",
    "FatalError",
    "RetryableError",
    "step_id",
    "sleep",
    "sleep_until",
    "now",
    "random",
    "uuid4",
    "start",
    "Run",
    "RunStatus",
    "get_run",
    "NondeterminismError",
    "RunFailed",
    "RunCancelled",
    "RunNotFound",
    "RunAlreadyExists",
    "StoreVersionError",
}


def test_every_contract_name_is_exported() -> None:
    missing = CONTRACT - set(wf.__all__)
    assert not missing
    for name in wf.__all__:
        assert getattr(wf, name) is not None, name


def test_all_is_sorted_and_has_no_private_names() -> None:
    assert wf.__all__ == sorted(wf.__all__)
    assert not [n for n in wf.__all__ if n.startswith("_")]


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_engine_imports_no_cli_and_no_concrete_store() -> None:
    forbidden = ("wf.cli", "wf.store.local", "wf.store.postgres", "wf.store.memory", "wf.check")
    for path in (ROOT / "engine").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(forbidden)]
        assert not bad, f"{path.name} imports {bad}"


def test_stores_import_nothing_from_engine_or_cli() -> None:
    for path in (ROOT / "store").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(("wf.engine", "wf.cli"))]
        assert not bad, f"{path.name} imports {bad}"


def test_admin_imports_no_front_end() -> None:
    forbidden = ("wf.cli", "wf.serve", "wf.store.local", "wf.store.postgres")
    for path in (ROOT / "admin").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(forbidden)]
        assert not bad, f"{path.name} imports {bad}"
