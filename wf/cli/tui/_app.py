"""The ``wf inspect`` app: the runs screen, run screens pushed on top, and the actions.

The app renders one ``wf.admin.Admin`` client, whichever backend it has: every read and every
action is one of its methods, so the screens read and act on the same runs, in the store here
(``LocalAdmin``) or through a ``wf serve`` (``HttpAdmin``, ``WF_URL``). With the store here,
cancel and wake (which, like ``wf cancel``, drive the run in this process when no other
process does) and a hook payload (then driven here too, so it moves without a worker) start
drives in this process: they are abandoned when the app exits, each noted as interrupted on
purpose (no death of its run), which the journal makes safe: the next worker finishes them. A
server drives its runs itself.

Notifications carry recorded text (hook tokens, errors): they are sent with ``markup=False``
(``_say``), their control characters shown, or ``[@click=...]`` in an error would be an action.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from wf._exceptions import WFError
from wf.admin import Admin, LocalAdmin
from wf.admin._words import visible
from wf.cli.tui._prompts import ConfirmScreen, PayloadScreen

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from wf import Engine, RunRecord


class InspectApp(App[None]):
    """Runs, steps, hooks and streams, live; act on runs from the keyboard.

    ``client``: the ``Admin`` every screen reads and acts through (an ``Engine`` stands for a
    ``LocalAdmin`` on it, whose clock is "now" on every screen: a test's fake clock gives
    stable screens). ``run_id``: open that run over the runs table. ``owns_engine``: stop this
    process's drivers and close the store on exit (for an engine made for the app).
    """

    TITLE = "wf inspect"
    CSS = """
    Screen { background: $background; }
    DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False),
    ]
    ENABLE_COMMAND_PALETTE = False

    def __init__(
        self,
        client: Admin | Engine,
        *,
        run_id: str | None = None,
        location: str = "",
        owns_engine: bool = False,
    ) -> None:
        super().__init__()
        from wf import Engine

        # An engine is the one other thing the app takes (tests and benches build one).
        self.client: Admin = LocalAdmin(client) if isinstance(client, Engine) else client
        self.sub_title = location
        self._start_run = run_id
        self._owns_engine = owns_engine

    def now(self) -> float:
        """The time every screen computes against: the engine's clock with the store here,
        else this machine's."""
        if isinstance(self.client, LocalAdmin):
            return self.client.now()
        return time.time()

    def on_mount(self) -> None:
        """The runs table, or the requested run (the table is built when escape leaves it)."""
        from wf.cli.tui._runs import RunsScreen

        if self._start_run is not None:
            self.open_run(self._start_run)
        else:
            self.push_screen(RunsScreen())

    def show_runs(self) -> None:
        """Replace the run the app opened on (``wf inspect RUN_ID``) by the runs table."""
        from wf.cli.tui._runs import RunsScreen

        self.switch_screen(RunsScreen())

    def open_run(self, run_id: str) -> None:
        """Push the screen of one run (escape comes back)."""
        from wf.cli.tui._run import RunScreen

        self.push_screen(RunScreen(run_id))

    async def on_unmount(self) -> None:
        """Leave runs this process drives to the workers (interrupted on purpose) and close up."""
        if not self._owns_engine or not isinstance(self.client, LocalAdmin):
            return
        await self.client.engine.aclose()
        await self.client.store.close()

    # -- actions (confirmed first) ----------------------------------------------------------

    def confirm_cancel(self, record: RunRecord | dict[str, Any]) -> None:
        """Ask, then cancel the run."""
        run_id, workflow = _id_and_workflow(record)
        question = f"Cancel run {run_id}?"
        detail = (
            f"{workflow}: it stops at its next durable operation; finally blocks and "
            "rollbacks still run."
        )
        self._confirm(question, detail, lambda: self._control(run_id, "cancel"))

    def confirm_wake(self, record: RunRecord | dict[str, Any]) -> None:
        """Ask, then end the run's current sleeps now."""
        run_id, workflow = _id_and_workflow(record)
        detail = f"{workflow}: its current sleeps (and retry delays) end now; the run continues."
        self._confirm(f"Wake run {run_id}?", detail, lambda: self._control(run_id, "wake"))

    def prompt_payload(self, token: str, schema: dict[str, Any] | None) -> None:
        """Ask for a JSON payload and deliver it to the hook ``token``."""

        def done(message: str | None) -> None:
            if message:
                self._say(message, title="hook resumed")

        async def send(payload: Any) -> str:
            return await self._send_payload(token, payload)

        self.push_screen(PayloadScreen(token, schema, send), done)

    def copy_run_id(self, run_id: str) -> None:
        """Put the run id on the clipboard (OSC 52: works over ssh in most terminals)."""
        self.copy_to_clipboard(run_id)
        self._say(f"copied {run_id}", title="clipboard")

    def _say(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
    ) -> None:
        """A notification of text that may be recorded: never markup, controls shown."""
        self.notify(
            visible(message, newlines=True),
            title=visible(title),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def _confirm(self, question: str, detail: str, action: Any) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(action(), group="actions")
            else:
                self._say("nothing done", title=question)

        self.push_screen(ConfirmScreen(question, detail), answered)

    async def _control(self, run_id: str, kind: str) -> None:
        client = self.client
        try:
            if kind == "cancel":
                sent = (await client.cancel(run_id))[0].sent
            else:
                sent = (await client.wake(run_id)).sent
        except WFError as exc:
            self._say(str(exc), title=f"{kind} failed", severity="error")
            return
        self._report_driver(run_id)
        if not sent:
            self._say(f"run {run_id} has already ended", title=kind, severity="warning")
        elif kind == "cancel":
            self._say(f"cancellation of {run_id} requested", title="cancel")
        else:
            self._say(f"wake-up of {run_id} requested", title="wake")

    async def _send_payload(self, token: str, payload: Any) -> str:
        """Deliver ``payload`` (raises ``HookError`` for the prompt to show); with the store
        here, drive the run here if nobody else does, as ``Run.cancel`` does, so it moves
        without a worker (a server drives its runs itself)."""
        run_id = await self.client.resume_hook(token, payload)
        if isinstance(self.client, LocalAdmin):
            self.client.drive(run_id)
        self._report_driver(run_id)
        return f"payload delivered to hook {token!r} of run {run_id}"

    def _report_driver(self, run_id: str) -> None:
        # A drive started here fails loudly in the app rather than in an unread task.
        if not isinstance(self.client, LocalAdmin):
            return
        task = self.client.driving(run_id)
        if task is None:
            return

        def finished(done: asyncio.Task[Any]) -> None:
            if done.cancelled() or done.exception() is None:
                return
            error = done.exception()
            self._say(
                f"driving run {run_id} here failed: {type(error).__name__}: {error}",
                severity="error",
                timeout=10,
            )

        task.add_done_callback(finished)


def _id_and_workflow(record: RunRecord | dict[str, Any]) -> tuple[str, str]:
    if isinstance(record, dict):
        return str(record["id"]), str(record["workflow"])
    return record.id, record.workflow
