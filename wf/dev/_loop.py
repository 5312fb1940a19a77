"""The dev loop: serve runs on the current code, and on every change check, drain, reload,
replay-check and serve again.

One change goes through these stages (each reported as an event, see ``_events``)::

    change seen -> wf check -> (refused: the previous code keeps serving)
                -> drain the worker -> purge and re-import the project's modules
                -> (import fails: roll back, the previous code keeps serving)
                -> replay-check the runs in flight -> start a worker on the new code
                -> (--run: start a run of the target)

Changes that arrive while a reload is under way are merged and handled right after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wf._exceptions import WFError
from wf.check import Finding
from wf.check._files import resolved
from wf.dev._checking import Checker, CheckOutcome
from wf.dev._events import (
    ChangeSeen,
    Checked,
    DevEvent,
    ImportFailed,
    Kept,
    Loaded,
    Ready,
    Reloaded,
    RunRequested,
    Sink,
    Started,
    StepsRestarted,
    Stopped,
    Stopping,
)
from wf.dev._modules import IMPORT_WAIT, ProjectModules
from wf.dev._replay import check_in_flight
from wf.dev._serving import DevEngine, WorkerHost
from wf.dev._watch import Change, ChangeKind, Watcher, choose_polling
from wf.engine._current import use_engine
from wf.store import Store


@dataclasses.dataclass
class DevOptions:
    """How ``wf dev`` runs (the CLI builds this from its arguments and the configuration)."""

    modules: list[str] = dataclasses.field(default_factory=list)
    """Runner modules: dotted names or ``.py`` paths."""
    paths: list[Path] = dataclasses.field(default_factory=list)
    """Watched and checked paths (default: the current directory)."""
    run: str | None = None
    """Start a run of this target after every successful (re)load."""
    run_input: Any = None
    """Decoded input of those runs (``None``: no arguments)."""
    grace: float = 30.0
    poll: bool = False
    concurrency: int = 100
    store_path: Path | None = None
    """The store directory, so it is never watched."""
    config: Path | None = None
    debounce_ms: int | None = None
    step_ms: int | None = None
    restart_hint: str | None = None
    """How the user restarts the steps a reload waits for (``press r``), shown meanwhile."""
    import_wait: float = IMPORT_WAIT
    """Seconds an import may take before it is said to be stuck and given up."""


class DevLoop:
    """Runs until :meth:`stop`; reports everything through ``sink``."""

    def __init__(self, store: Store, options: DevOptions, sink: Sink) -> None:
        self.store = store
        self.options = options
        self._sink = sink
        self.root = Path.cwd().resolve()
        self.roots = [p.resolve() for p in options.paths] or [self.root]
        # A runner given as a file outside the project is project code all the same: its
        # directory counts, or its module would never be purged, hence never reloaded.
        runner_dirs = [Path(m).resolve().parent for m in options.modules if m.endswith(".py")]
        self._stop = asyncio.Event()
        self.stop_asked: Callable[[], bool] = lambda: False
        """Whether a stop signal came, which the loop has not seen yet: said by the signal
        handler (the CLI sets it), so that an import the loop waits for is waited for no
        longer."""
        self.modules = ProjectModules(
            [self.root, *self.roots, *runner_dirs],
            options.modules,
            import_wait=options.import_wait,
            stop_asked=lambda: self._stop.is_set() or self.stop_asked(),
        )
        self.checker = Checker(self.root)
        # Notes (code too deep to analyse) already shown, by place: each is shown once.
        self._noted: set[tuple[str, int, int, str]] = set()
        self.engine = DevEngine(store, self.emit)
        self.host = WorkerHost(
            self.engine,
            concurrency=options.concurrency,
            grace=options.grace,
            restart_hint=options.restart_hint,
        )
        self.generation = 0
        self._run_failed = False
        """The last ``--run`` could not start (its module missing, say): the next change that
        reloads nothing tries it again."""
        self._stop_reason = "stopped"
        self.cut_short: list[str] = []
        """Runs whose step was cut short when the loop stopped (a sync step's thread may still
        be running: the process then exits without waiting for it)."""

    def emit(self, event: DevEvent) -> None:
        """Hand an event to the sink (the console)."""
        self._sink(event)

    def stop(self, reason: str = "stopped") -> None:
        """Ask the loop to drain and return from :meth:`run` (safe from a signal handler)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    async def run(self) -> None:
        """Serve and watch until stopped."""
        with use_engine(self.engine):
            watcher = self._watcher()
            await watcher.start(self._stop)
            try:
                await self._first_load()
                async for _seen, changes in watcher.batches(self._stop):
                    await self._guarded_change(changes)
            finally:
                self._stop.set()
                await watcher.close()
                await self._shutdown()

    # -- start ------------------------------------------------------------------------------

    def _watcher(self) -> Watcher:
        options = self.options
        choice = choose_polling(self.roots, requested=options.poll)
        ignore = [options.store_path] if options.store_path is not None else []
        tuning: dict[str, int] = {}
        if options.debounce_ms is not None:
            tuning["debounce_ms"] = options.debounce_ms
        if options.step_ms is not None:
            tuning["step_ms"] = options.step_ms
        # A runner file outside the watched paths is watched too: it is the code being served.
        extra = [Path(m) for m in options.modules if m.endswith(".py")]
        outside = [p for p in extra if not any(p.resolve().is_relative_to(r) for r in self.roots)]
        watcher = Watcher([*self.roots, *outside], polling=choice.polling, ignore=ignore, **tuning)
        self.emit(
            Started(
                watching=[self.modules.display(p) or "." for p in self.roots],
                polling=choice.polling,
                polling_reason=choice.reason,
                store=str(options.store_path or ""),
                modules=list(self.modules.runners),
                config=str(options.config) if options.config else None,
            )
        )
        return watcher

    async def _first_load(self) -> None:
        outcome = self.modules.load()
        if outcome.ok:
            self.emit(Loaded(outcome.modules, outcome.took, self._nothing_to_load_hint()))
        else:
            self.emit(ImportFailed(outcome.error or "import failed", initial=True))
        self._serve()
        await self._start_requested_run()
        # The baseline, taken while runs are already served (the watcher queues changes
        # meanwhile): problems already in the code are shown once and do not block reloads.
        checked = await asyncio.to_thread(self.checker.check, self._check_scope(self.roots))
        self.checker.accept(checked)
        self.emit(self._checked(checked, initial=True))

    def _nothing_to_load_hint(self) -> str | None:
        if self.modules.runners:
            return None
        how = "add them to [tool.wf] modules in pyproject.toml, or name them: wf dev app/flows.py"
        if self.options.run:
            module = self.options.run.rpartition(":")[0] or self.options.run
            return f"no modules configured: --run imports {module}; {how}"
        return f"no modules configured: {how} (a workflow's module loads when a run needs it)"

    def _serve(self) -> None:
        self.generation += 1
        self.engine.new_generation()
        self.host.start()
        self.emit(Ready(self.generation))

    # -- one change -------------------------------------------------------------------------

    async def _guarded_change(self, changes: Sequence[Change]) -> None:
        # One bad reload (a store error during the replay check, a bug) must not end the
        # session: report it and keep a worker serving.
        try:
            await self._on_change(changes)
        except Exception as exc:
            self.modules.refused()
            self.emit(Kept(self.generation, f"reload failed: {type(exc).__name__}: {exc}"))
            if not self.host.running:
                self.host.start()

    async def _on_change(self, changes: Sequence[Change]) -> None:
        paths = [c.path for c in changes]
        affected = self.modules.affected(paths)
        self.emit(
            ChangeSeen(
                [self.modules.display(p) for p in paths],
                [self.modules.display(p) for p in affected],
            )
        )
        if not affected:
            # Nothing the serving code is made of changed: nothing to reload, but the changed
            # files are still checked (a new module with a syntax error, a new workflow reading
            # the clock), and a --run that could not start is tried again (its file may be
            # the one just written).
            await self._check_unloaded(changes)
            return
        saved = _last_save(changes)
        timings: dict[str, float] = {"detect": max(0.0, time.time() - saved)}

        # Modules the new code imports for the first time are checked with it, before it is
        # imported: their import-time code does not run for a reload that is refused.
        new_imports = await asyncio.to_thread(
            self.modules.first_imports, [*affected, *self.modules.runner_files()]
        )
        scope = self._check_scope([*affected, *new_imports])
        checked = await asyncio.to_thread(self.checker.check, scope)
        timings["check"] = checked.took
        report = self._checked(checked, initial=False)
        self.emit(report)
        missing = self.modules.missing_runners()
        if missing:
            # Said first, whatever the check found: no check result would make it reload.
            # Checked before the drain: runs keep going on the serving code meanwhile.
            names = ", ".join(missing)
            self.emit(ImportFailed(f"runner module(s) {names} no longer exist", initial=False))
            self.modules.refused()
            self.emit(Kept(self.generation, f"runner module {missing[0]} is gone"))
            return
        if checked.blocking:
            self.modules.refused()
            self.emit(Kept(self.generation, _refusal(report)))
            return

        # The new code is imported before the drain (and kept aside until after it), so code
        # that no longer imports refuses the reload without stopping anything.
        outcome = self.modules.prepare(affected)
        timings["import"] = outcome.took
        if not outcome.ok:
            self.emit(ImportFailed(outcome.error or "import failed", initial=False))
            self.modules.refused()
            if outcome.stuck:
                self.emit(Kept(self.generation, "the new code's import did not return"))
            else:
                self.emit(Kept(self.generation, "the new code does not import"))
            return
        # Modules the new code imported for the first time that its import statements did
        # not name (importlib.import_module): check them now, before they serve.
        asked = {resolved(p) for p in scope}
        pulled = [f for f in outcome.files() if f not in asked]
        if pulled:
            scope = self._check_scope([*affected, *pulled])
            checked = await asyncio.to_thread(self.checker.check, scope)
            timings["check"] += checked.took
            report = self._checked(checked, initial=False)
            self.emit(report)
            if checked.blocking:
                self.modules.refused()
                self.emit(Kept(self.generation, _refusal(report)))
                return

        drained = await self.host.drain()
        timings["drain"] = drained.took
        self.emit(drained)
        self.modules.commit(outcome)
        self.checker.accept(checked)

        began = time.perf_counter()
        replayed, problems = await check_in_flight(self.store, set(outcome.modules))
        timings["replay_check"] = time.perf_counter() - began
        self.engine.hold(replayed, problems)
        for problem in problems:
            self.emit(problem)
        self.generation += 1
        self.engine.new_generation()
        self.host.start()
        self.emit(
            Reloaded(
                generation=self.generation,
                files=[self.modules.display(p) for p in affected],
                modules=outcome.modules,
                latency=max(0.0, time.time() - saved),
                timings=timings,
                replayed=len(replayed),
                dropped=outcome.dropped,
            )
        )
        await self._start_requested_run()

    async def _check_unloaded(self, changes: Sequence[Change]) -> None:
        present = [c.path for c in changes if c.kind is not ChangeKind.DELETED and c.path.is_file()]
        errors = False
        if present:
            checked = await asyncio.to_thread(self.checker.check, present)
            # Not accepted into the baseline: this code does not serve yet, so its findings
            # stay new (and block the reload that starts serving it).
            self.emit(self._checked(checked, initial=False))
            errors = bool(checked.result.errors)
        if self._run_failed and not errors:
            importlib.invalidate_caches()  # the import system may not have seen the new file
            await self._start_requested_run()

    def _check_scope(self, extra: Sequence[Path]) -> list[Path]:
        """What a check looks at: the given paths and every file the serving code is made of
        (a helper in one module called from a workflow in another is workflow code)."""
        return list(
            dict.fromkeys([*extra, *self.modules.loaded_files(), *self.modules.runner_files()])
        )

    def _checked(self, outcome: CheckOutcome, *, initial: bool) -> Checked:
        result = outcome.result
        # Paths as the user sees them (relative to the project); the same object for a
        # finding in ``findings`` and in ``new``, which renderers rely on to mark new ones.
        shown = {
            id(f): dataclasses.replace(f, path=self.modules.display(f.path))
            for f in [*result.findings, *result.errors, *result.notes]
        }
        return Checked(
            files=result.files_checked,
            findings=[shown[id(f)] for f in result.findings],
            new=[shown[id(f)] for f in outcome.new],
            errors=[shown[id(f)] for f in result.errors],
            took=outcome.took,
            initial=initial,
            config_error=outcome.config_error,
            notes=self._unseen([shown[id(f)] for f in result.notes]),
        )

    def _unseen(self, notes: list[Finding]) -> list[Finding]:
        fresh = [n for n in notes if (n.path, n.line, n.col, n.message) not in self._noted]
        self._noted.update((n.path, n.line, n.col, n.message) for n in fresh)
        return fresh

    async def _start_requested_run(self) -> None:
        target = self.options.run
        if target is None:
            return
        from wf.admin._start import run_request, start_run, workflow_at

        try:
            workflow, canonical = workflow_at(target)
            request = run_request(workflow, self.options.run_input, target=canonical)
            # Driven here (not detached): wf dev is the worker of the runs it starts.
            run = await start_run(self.engine, request, detach=False)
        except WFError as exc:
            self._run_failed = True
            self.emit(RunRequested(target, None, str(exc)))
            return
        self._run_failed = False
        self.emit(RunRequested(target, run.id))

    def restart_steps(self) -> None:
        """Abandon the steps a reload (or a stop) waits for, so that it goes ahead now and the
        steps run again on the new code (safe from a signal handler or a key press)."""
        self.emit(StepsRestarted(self.host.restart_steps(), stopping=self._stop.is_set()))

    # -- stop -------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        self.emit(Stopping(self._stop_reason))
        with contextlib.suppress(Exception):
            drained = await self.host.drain(stopping=True)
            self.cut_short = drained.interrupted
            self.emit(drained)
        self.emit(Stopped(self.engine.drives))


def _last_save(changes: Sequence[Change]) -> float:
    """When the newest of the changed files was saved (wall clock); now for deletions."""
    times = []
    for change in changes:
        if change.kind is ChangeKind.DELETED:
            continue
        with contextlib.suppress(OSError):
            times.append(os.stat(change.path).st_mtime)
    return max(times) if times else time.time()


def _refusal(checked: Checked) -> str:
    if checked.errors:
        first = checked.errors[0]
        return f"{first.path}:{first.line}:{first.col}: {first.message}"
    first = checked.new[0]
    more = f" (and {len(checked.new) - 1} more)" if len(checked.new) > 1 else ""
    return f"{first.path}:{first.line}:{first.col}: {first.code} {first.message}{more}"
