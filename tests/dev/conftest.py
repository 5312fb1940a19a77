"""Fixtures for the ``wf dev`` tests: a temporary project, and ``wf dev`` as a subprocess whose
greppable output (``wf-dev KIND key=value ...``) is read line by line."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
WAIT = 20.0
"""Longest any one observation may take (generous: the suite also runs on loaded CI hosts)."""

Event = tuple[str, dict[str, str]]


def parse(line: str) -> Event | None:
    """``wf-dev kind k=v ...`` -> (kind, fields); None for other lines."""
    if not line.startswith("wf-dev "):
        return None
    words = shlex.split(line)
    fields: dict[str, str] = {}
    for word in words[2:]:
        key, _, value = word.partition("=")
        fields[key] = value
    return words[1], fields


class DevProcess:
    """A running ``wf dev``; its stdout lines are collected by a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read, args=(proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(proc.stderr, self.errors), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self, stream: Any, into: list[str]) -> None:
        for line in stream:
            with self._lock:
                into.append(line.rstrip("\n"))

    def events(self) -> list[Event]:
        with self._lock:
            parsed = [parse(line) for line in self.lines]
        return [e for e in parsed if e is not None]

    def wait(
        self, kind: str, after: int = 0, timeout: float = WAIT, **match: str
    ) -> tuple[int, dict[str, str]]:
        """The first event of ``kind`` at position >= ``after`` whose fields match; returns its
        position and fields."""
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        while True:
            for index, (found, fields) in enumerate(self.events()):
                if index < after or found != kind:
                    continue
                if all(fields.get(k) == v for k, v in match.items()):
                    return index, fields
            if self.proc.poll() is not None:
                # Give the reader threads a moment to hand over the last lines.
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > 0.5:
                    raise AssertionError(
                        f"wf dev exited ({self.proc.returncode}) before "
                        f"{kind} {match}\n{self.dump()}"
                    )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {kind} {match} within {timeout} s\n{self.dump()}")
            time.sleep(0.02)

    def count(self) -> int:
        """How many events so far (to wait for the next ones only)."""
        return len(self.events())

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig`` (SIGTERM or SIGINT: both drain) and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"wf dev did not stop on SIGTERM\n{self.dump()}") from None
        for thread in self._threads:
            thread.join(timeout=5)
        return code

    def dump(self) -> str:
        with self._lock:
            return "stdout:\n" + "\n".join(self.lines) + "\nstderr:\n" + "\n".join(self.errors)


class DevProject:
    """A project directory with its own store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store_dir = root / ".workflows"
        self.env = {
            **os.environ,
            "WF_DIR": str(self.store_dir),
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        for name in ("WF_DEBUG", "WF_DEV_POLL", "WF_SUSPEND_AFTER", "WF_POLL_INTERVAL"):
            self.env.pop(name, None)
        self._running: list[DevProcess] = []

    def write(self, name: str, source: str) -> Path:
        path = self.root / name
        path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
        return path

    def edit(self, name: str, old: str, new: str) -> None:
        path = self.root / name
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not in {name}"
        path.write_text(text.replace(old, new), encoding="utf-8")

    def dev(self, *args: str, stdin: int | None = subprocess.DEVNULL, **env: str) -> DevProcess:
        """Start ``wf dev ARGS`` and wait until it serves (``stdin``: a file descriptor, a
        terminal's to press keys)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "wf", "dev", *args],
            cwd=self.root,
            env={**self.env, **env},
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        dev = DevProcess(proc)
        self._running.append(dev)
        dev.wait("ready")
        # The initial check runs after `ready`; waiting for it keeps its output from
        # interleaving with what a test looks for next.
        dev.wait("checked", initial="yes")
        return dev

    def close(self) -> None:
        for dev in self._running:
            if dev.proc.poll() is None:
                dev.proc.kill()
                dev.proc.wait()

    # -- the store, read and written from the test process ---------------------------------

    def _store(self) -> Any:
        from wf.store.local import LocalStore

        return LocalStore(self.store_dir)

    def enqueue(self, workflow: str, *args: Any) -> str:
        """Queue a run of the workflow named ``workflow`` (``module:qualname``), as another
        process would, without importing its module (which may not even parse right now)."""
        from wf import Engine, Workflow

        async def stand_in(*args: Any) -> Any:
            raise AssertionError("never run here")

        async def go() -> str:
            store = self._store()
            try:
                flow = Workflow(stand_in, name=workflow)
                run = await Engine(store).start(flow, args, {}, detach=True, target=workflow)
                return run.id
            finally:
                await store.close()

        return asyncio.run(go())

    def wake(self, run_id: str) -> None:
        """Post a wake-up to the run, as ``wf wake --no-wait`` does: it becomes due at once."""

        async def go() -> None:
            store = self._store()
            try:
                await store.post(run_id, "wake", {})
            finally:
                await store.close()

        asyncio.run(go())

    def record(self, run_id: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            store = self._store()
            try:
                return (await store.get_run(run_id)).to_json()  # type: ignore[no-any-return]
            finally:
                await store.close()

        return asyncio.run(go())

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)


def output(fields: dict[str, str]) -> Any:
    """The decoded ``output=`` of a run-completed line."""
    return json.loads(fields["output"])


@pytest.fixture
def project(tmp_path: Path) -> Iterator[DevProject]:
    proj = DevProject(tmp_path)
    try:
        yield proj
    finally:
        proj.close()
