"""``wf dev`` (the hot-reload loop) and ``wf init`` (a starter ``wf.toml``).

Thin by design: this module turns arguments and configuration into ``wf.dev.DevOptions``,
picks a renderer (a live console on a terminal, greppable lines otherwise), installs the
signal handlers and runs ``wf.dev.DevLoop``. Everything else lives in ``wf.dev``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.cli._errors import EXIT_INTERRUPTED, guarded
from wf.cli._stopping import finite_seconds

if TYPE_CHECKING:
    from wf._interrupts import StopSignals
    from wf.dev import DevConfig, DevLoop, DevOptions, Sink

_INPUT_HELP = (
    "Input of the --run runs as JSON (as `wf run --input`): an object maps parameters by name, "
    "an array gives them by position. '@path' reads a file."
)


def register(app: typer.Typer) -> None:
    """Add ``wf dev`` and ``wf init`` to the app."""
    app.command("dev")(dev_command)
    app.command("init")(init_command)


@guarded
def dev_command(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="MODULES_OR_PATHS",
            help="Runner modules ('app.flows' or 'app/flows.py'), imported now and on every "
            "reload, and directories to watch (default: [tool.wf] modules/paths, else '.').",
            show_default=False,
        ),
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            metavar="TARGET",
            help="Start a run of this workflow ('module:attr') after every successful reload.",
            show_default=False,
        ),
    ] = None,
    input_: Annotated[
        str | None,
        typer.Option("--input", "-i", metavar="JSON", help=_INPUT_HELP, show_default=False),
    ] = None,
    poll: Annotated[
        bool,
        typer.Option(
            "--poll",
            help="Watch by polling (network and container mounts, where file events do not "
            "arrive; also WF_DEV_POLL=1).",
        ),
    ] = False,
    grace: Annotated[
        float | None,
        typer.Option(
            "--grace",
            min=0.0,
            callback=finite_seconds,
            metavar="SECONDS",
            help="How long running steps may take to finish before a reload [default: 30].",
            show_default=False,
        ),
    ] = None,
    plain: Annotated[
        bool,
        typer.Option("--plain", help="One line per event, even on a terminal (as in a pipe)."),
    ] = False,
) -> None:
    """Serve runs on the current code and reload it on every change (checked first).

    Running steps finish before a reload; runs in flight resume on the new code, and those that
    no longer replay are reported at once. Ctrl-C stops cleanly.
    """
    from wf.cli._input import read_input
    from wf.cli._store import open_store, say_local
    from wf.dev import load_dev_config

    say_local("wf dev")  # like `wf worker`, it drives the store here, never a server
    config = load_dev_config(Path.cwd())
    options = _options(config, targets or [], run, grace, poll)
    if input_ is not None:
        options.run_input = read_input(input_)
    elif run is None and config.has_input:
        options.run_input = config.input
    if input_ is not None and options.run is None:
        from wf._exceptions import UsageError

        raise UsageError("--input needs --run TARGET (the workflow the input is for)")

    from wf.admin._engines import require_otel, run_contained

    require_otel()  # WF_OTEL=1 without OpenTelemetry: every drive would fail on it
    options.import_wait = _import_wait()  # bad input, before the store is opened
    store = open_store()
    from wf._config import store_dir

    options.store_path = store_dir().resolve()
    sink, close = _renderer(plain)

    def serve() -> None:
        try:
            # Code in a run cannot end wf dev (a SystemExit left to the loop): as `wf worker`.
            run_contained(
                _serve(store, options, sink), logging.getLogger("wf.dev").error, who="wf dev"
            )
        finally:
            close()

    from wf.cli._stopping import ended_despite_threads

    # Threads a step started run on after the loop closed: never wait for them past the
    # grace, however the loop ended (as ``wf worker``).
    code = ended_despite_threads(serve, options.grace, logging.getLogger("wf.dev").warning)
    if code:
        raise typer.Exit(code)


def _import_wait() -> float:
    """``WF_DEV_IMPORT_WAIT``: seconds an import may take before it is given up as stuck."""
    from wf._remote import seconds_variable
    from wf.dev._modules import IMPORT_WAIT

    return seconds_variable("WF_DEV_IMPORT_WAIT", IMPORT_WAIT)


def _options(
    config: DevConfig, targets: list[str], run: str | None, grace: float | None, poll: bool
) -> DevOptions:
    """Arguments first, the configuration second. Raises ``UsageError`` for a bad target."""
    from wf._exceptions import UsageError
    from wf._loader import split_target
    from wf.dev import DevOptions

    modules: list[str] = []
    paths: list[Path] = []
    for target in targets:
        if Path(target).is_dir():
            paths.append(Path(target))
        elif target.endswith(".py") or "/" in target or os.sep in target:
            if not Path(target).is_file():
                raise UsageError(f"cannot watch {target!r}: no such file or directory")
            modules.append(target)
        else:
            _require_module(target)
            modules.append(target)
    if not targets:
        modules, paths = list(config.modules), list(config.paths)
    options = DevOptions(
        modules=modules,
        paths=paths,
        run=run if run is not None else config.run,
        grace=grace if grace is not None else config.grace,
        poll=poll or config.poll,
        concurrency=config.concurrency,
        config=config.source,
    )
    if options.run is not None:
        split_target(options.run)  # a malformed target is bad usage, before anything starts
    return options


def _require_module(name: str) -> None:
    from wf._exceptions import UsageError

    if not all(part.isidentifier() for part in name.split(".")):
        raise UsageError(f"{name!r} is neither a module name, a .py file nor a directory")
    from wf._loader import ensure_on_path

    ensure_on_path(Path.cwd())
    # Only the top-level package is looked up: finding 'a.b' would import 'a', running project
    # code before the loop (which reports import errors properly) has started.
    if importlib.util.find_spec(name.split(".")[0]) is None:
        raise UsageError(
            f"no module named {name.split('.')[0]!r} (run wf dev from the project "
            "directory, or give the file: path/to/module.py)"
        )


def _renderer(plain: bool) -> tuple[Sink, Any]:
    from wf.dev import LineRenderer

    if plain or not sys.stdout.isatty():
        return LineRenderer(sys.stdout), lambda: None
    from wf.dev._live import LiveRenderer

    live = LiveRenderer()
    return live, live.close


async def _serve(store: Any, options: DevOptions, sink: Sink) -> None:
    from wf.dev import DevLoop

    try:
        keys = _Keys.on_terminal()
        options.restart_hint = "press r" if keys is not None else _signal_hint()
        loop = DevLoop(store, options, sink)
        restart = _restart_signal(loop)
        if keys is not None:
            keys.start({"r": loop.restart_steps})
        try:
            with _stop_signals(loop) as signals:
                loop.stop_asked = signals.asked
                await loop.run()
        finally:
            if keys is not None:
                keys.close()
            if restart is not None:
                asyncio.get_running_loop().remove_signal_handler(restart)
    finally:
        await store.close()
    if loop.cut_short:
        # A sync step cut short runs on in its thread, which asyncio.run would wait for at
        # exit: "wf dev stopped" is said, the store is closed, so end the process now (the
        # step's run resumes from its journal, as after a crash).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _signal_hint() -> str | None:
    """How to restart the steps a reload waits for without a terminal: a signal."""
    if not hasattr(signal, "SIGUSR1"):
        return None
    return f"kill -USR1 {os.getpid()}"


class _Keys:
    """Single key presses on the terminal (``r``: restart the steps a reload waits for).

    The terminal is put in cbreak mode (one key at a time, no echo; Ctrl-C still signals) for
    as long as ``wf dev`` runs, and restored at the end, also on a second Ctrl-C.
    """

    active: _Keys | None = None
    """The one in use (restored by the second-Ctrl-C exit)."""

    def __init__(self, fd: int, saved: Any) -> None:
        self.fd = fd
        self.saved = saved
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def on_terminal(cls) -> _Keys | None:
        """Keys from stdin when it is a terminal this process may read (not in the
        background); None otherwise."""
        try:
            import termios
        except ImportError:  # not POSIX
            return None
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, ValueError, OSError):
            return None
        if not os.isatty(fd):
            return None
        try:
            # A background job reading its terminal would be stopped (SIGTTIN).
            if os.tcgetpgrp(fd) != os.getpgrp():
                return None
        except OSError:
            pass  # not our controlling terminal: no job control to upset
        try:
            saved = termios.tcgetattr(fd)
        except termios.error:
            return None
        return cls(fd, saved)

    def start(self, actions: dict[str, Any]) -> None:
        """Read keys, calling ``actions[key]()`` for each key pressed that has one."""
        import tty

        tty.setcbreak(self.fd)
        _Keys.active = self
        self._loop = asyncio.get_running_loop()

        def on_key() -> None:
            try:
                data = os.read(self.fd, 64)
            except OSError:
                data = b""
            if not data:  # end of input: stop listening
                self._stop_reading()
                return
            for char in data.decode(errors="ignore").lower():
                action = actions.get(char)
                if action is not None:
                    action()

        self._loop.add_reader(self.fd, on_key)

    def _stop_reading(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.fd)
            self._loop = None

    def close(self) -> None:
        """Stop reading keys and give the terminal back as it was."""
        self._stop_reading()
        self.restore()

    def restore(self) -> None:
        """Put the terminal's settings back (safe to call twice)."""
        import termios

        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
        _Keys.active = None


def _stop_signals(dev: DevLoop) -> StopSignals:
    """First Ctrl-C / SIGTERM drains and stops; a second one exits at once, also while code
    blocks the event loop (a module that never finishes importing), which is safe: runs
    resume from their journals."""
    from wf._interrupts import StopSignals, signal_name

    def on_signal(sig: signal.Signals) -> None:
        name = signal_name(sig)
        hint = dev.options.restart_hint
        cut = f"{hint} or {name} again" if hint else f"{name} again"
        dev.stop(f"{name}: running steps finish first; {cut} cuts them short")

    def before_exit() -> None:
        if _Keys.active is not None:
            _Keys.active.restore()
        if sys.stdout.isatty():
            sys.stdout.write("\x1b[?25h")  # the live console hid the cursor
            sys.stdout.flush()

    def say(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    return StopSignals(on_signal, say=say, before_exit=before_exit, code=EXIT_INTERRUPTED)


def _restart_signal(dev: DevLoop) -> signal.Signals | None:
    """SIGUSR1 restarts the steps a reload waits for: the key press of a terminal, for a
    wf dev that has none (in a pipe, under a supervisor, in an editor's task runner). The
    signal handled (None: none)."""
    restart: signal.Signals | None = getattr(signal, "SIGUSR1", None)
    if restart is None:
        return None
    try:
        asyncio.get_running_loop().add_signal_handler(restart, dev.restart_steps)
    except (RuntimeError, ValueError, NotImplementedError):
        return None
    return restart


@guarded
def init_command(
    force: Annotated[
        bool, typer.Option("--force", help="Deprecated: a [tool.wf] table is never overwritten.")
    ] = False,
) -> None:
    """Add a starter [tool.wf] table to pyproject.toml (modules that declare workflows and
    import cleanly, wf dev settings)."""
    from wf.dev import write_starter
    from wf.dev._config import discover_workflow_modules

    path, data = write_starter(Path.cwd(), force=force)
    modules = ", ".join(data["modules"]) or "none found"
    typer.echo(f"wrote [tool.wf] to {path.name} (modules: {modules})")
    for name in discover_workflow_modules(Path.cwd()):
        if name not in data["modules"]:  # it declares workflows but failed to import
            typer.echo(
                f"note: left out {name}: it does not import cleanly "
                f"(python -c 'import {name}' says why); add it to modules once it does",
                err=True,
            )
    if not data["modules"]:
        typer.echo("hint: list the modules that declare workflows in `modules`", err=True)
    if (Path.cwd() / "wf.toml").is_file():
        typer.echo(
            "note: wf.toml is deprecated and read first; move its keys to [tool.wf]", err=True
        )
    typer.echo("next: wf info (what is configured), wf dev", err=True)
