"""wf.ai's place in the package: optional, imported only when used, public names exported."""

from __future__ import annotations

import subprocess
import sys

from tests.test_layers import ROOT, _imports


def test_import_wf_does_not_import_pydantic_ai_until_wf_ai_is_used() -> None:
    code = (
        "import sys, wf; wf.step; assert 'pydantic_ai' not in sys.modules, 'imported'; "
        "wf.ai.DurableAgent; assert 'pydantic_ai' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)


def test_wf_ai_is_reached_from_the_facade() -> None:
    import wf.ai

    assert wf.ai.DurableAgent is wf.ai._agent.DurableAgent
    assert wf.ai.__all__ == sorted(wf.ai.__all__)
    for name in wf.ai.__all__:
        assert getattr(wf.ai, name) is not None
        assert getattr(wf.ai, name).__doc__, f"wf.ai.{name} has no docstring"


def test_wf_ai_imports_no_cli_and_no_concrete_store() -> None:
    forbidden = ("wf.cli", "wf.store.local", "wf.store.postgres", "wf.store.memory", "wf.check")
    for path in (ROOT / "ai").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(forbidden)]
        assert not bad, f"{path.name} imports {bad}"


# Imports wf.ai where Pydantic AI is not installed (a None in sys.modules stops its import).
_WITHOUT_PYDANTIC_AI = (
    "import sys\n"
    "sys.modules['pydantic_ai'] = None\n"
    "from wf._extras import missing_extra\n"
    "try:\n"
    "    import wf.ai\n"
    "except ImportError as error:\n"
    "    print(missing_extra(error))\n"
    "    print(error)\n"
)


def test_wf_ai_without_pydantic_ai_names_the_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYDANTIC_AI],
        cwd=ROOT.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    extra, message = done.stdout.splitlines()
    assert extra == "ai"  # the CLI's missing-extra error, exit 2, reads it
    assert "pip install 'wf-durable[ai]'" in message
