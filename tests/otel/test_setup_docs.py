"""docs/observability.md's set-up runs as written after the one install it documents."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.test_docs import REPO, blocks_of


def _otel_extra() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["otel"])


def test_the_otel_extra_brings_everything_the_set_up_imports() -> None:
    [setup] = [
        b for b in blocks_of(REPO / "docs" / "observability.md") if "ConsoleSpanExporter" in b.text
    ]
    # opentelemetry.sdk.trace -> opentelemetry-sdk: each package the program imports from.
    imported = set(re.findall(r"^from (opentelemetry\.\w+|opentelemetry) import", setup.text, re.M))
    needed = {
        name.replace(".", "-") if name != "opentelemetry" else "opentelemetry-api"
        for name in imported
    }
    provided = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in _otel_extra()}
    assert needed <= provided, (needed, provided)


def _console_setup() -> str:
    """The console set-up docs/observability.md shows."""
    [setup] = [
        b for b in blocks_of(REPO / "docs" / "observability.md") if "ConsoleSpanExporter" in b.text
    ]
    return setup.text


def _run_script(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """``text`` run as a program of its own, without wf's or OpenTelemetry's settings."""
    (tmp_path / "traced.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WF_", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "traced.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_the_console_set_up_prints_the_spans_of_a_run(tmp_path: Path) -> None:
    result = _run_script(tmp_path, _console_setup())
    for span in ("start traced:onboarding", "run traced:onboarding", "step fetch_user"):
        assert f'"name": "{span}"' in result.stdout, result.stdout
    assert "user u1" in result.stdout


def test_the_console_set_up_exports_off_the_event_loop(tmp_path: Path) -> None:
    # A slow or blocked exporter must not stall the runs: the documented processor exports
    # from a thread of its own, never inside span.end() on the loop that drives the runs.
    setup = _console_setup()
    spy = (
        "import sys, threading\n"
        "from opentelemetry.sdk.trace.export import ConsoleSpanExporter as _Console\n"
        "class Spy(_Console):\n"
        "    def export(self, spans):\n"
        "        main = threading.current_thread() is threading.main_thread()\n"
        "        where = 'main' if main else 'thread'\n"
        "        print(f'exported on {where}', file=sys.stderr)\n"
        "        return super().export(spans)\n"
    )
    text = setup.replace("ConsoleSpanExporter()", "Spy()")
    assert text != setup
    result = _run_script(tmp_path, spy + text)
    assert "exported on thread" in result.stderr, result.stderr
    assert "exported on main" not in result.stderr, result.stderr


def test_wf_otel_without_opentelemetry_names_the_install() -> None:
    # A None in sys.modules stops the import, as if OpenTelemetry were not installed.
    script = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from wf._extras import missing_extra\n"
        "try:\n"
        "    import wf.otel\n"
        "except ImportError as error:\n"
        "    print(missing_extra(error))\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    extra, message = done.stdout.splitlines()
    assert extra == "otel"  # the CLI's missing-extra error, exit 2, reads it
    assert "pip install 'wf-durable[otel]'" in message
