"""Modal prompts: confirm an action, and type a JSON payload for a hook.

Every action that changes a run asks first: a stray key must never cancel a production run.
The payload prompt checks the JSON itself, then hands it to ``wf.resume_hook``; a ``HookError``
(unknown token, payload not of the hook's type) is shown in the prompt, which stays open so the
payload can be fixed.

What the prompts show holds recorded text (workflow names, hook tokens, errors, values): it is
never read as markup, and its control characters are shown (``visible``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from wf._exceptions import HookError, WFError
from wf.admin._words import visible

_DIALOG_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 72; height: auto; padding: 1 2;
    border: thick $accent; background: $surface;
}}
{name} .title {{ text-style: bold; margin-bottom: 1; }}
{name} .hint {{ color: $text-muted; margin-top: 1; }}
{name} #error {{ color: $error; height: auto; }}
{name} Horizontal {{ height: auto; align-horizontal: right; margin-top: 1; }}
{name} Button {{ margin-left: 2; }}
"""


class ConfirmScreen(ModalScreen[bool]):
    """``question`` with yes (``y``) and no (``n``, ``escape``); dismissed with the answer."""

    DEFAULT_CSS = _DIALOG_CSS.format(name="ConfirmScreen")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self._question = question
        self._detail = detail

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(visible(self._question, newlines=True), classes="title", markup=False)
            if self._detail:
                yield Static(visible(self._detail, newlines=True), markup=False)
            with Horizontal():
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def action_answer(self, answer: bool) -> None:
        """Close the prompt with the answer."""
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """Mouse users answer with the buttons."""
        self.dismiss(event.button.id == "yes")


class PayloadScreen(ModalScreen[str | None]):
    """A JSON payload for hook ``token``; ``send`` delivers it and returns a message to show.

    Dismissed with that message once delivered, or with None on ``escape``.
    """

    DEFAULT_CSS = _DIALOG_CSS.format(name="PayloadScreen")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "cancel")]

    def __init__(
        self, token: str, schema: dict[str, Any] | None, send: Callable[[Any], Awaitable[str]]
    ) -> None:
        super().__init__()
        self._token = token
        self._schema = schema or {}
        self._send = send

    def compose(self) -> ComposeResult:
        with Vertical():
            title = f"Resume hook `{visible(self._token)}`"
            yield Static(title, classes="title", markup=False)
            yield Static(visible(_describe_schema(self._schema)), markup=False)
            yield Input(placeholder='the payload as JSON, e.g. {"approved": true}', id="payload")
            yield Static("", id="error", markup=False)
            yield Static("enter: send · escape: cancel", classes="hint")

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """Check the JSON, deliver it, and close; or say what is wrong and stay open."""
        event.stop()
        error = self.query_one("#error", Static)
        text = event.value.strip()
        if not text:
            error.update('Type a JSON value: "yes", 42, {"approved": true}, …')
            return
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as exc:
            error.update(f"Not JSON: {exc.msg} (column {exc.colno}).")
            return
        try:
            message = await self._send(payload)
        except HookError as exc:
            error.update(f"Refused: {visible(exc, newlines=True)}")
            return
        except WFError as exc:  # a server gone, the store failing: nothing was delivered
            error.update(f"Not delivered: {visible(exc, newlines=True)}")
            return
        self.dismiss(message)

    def action_close(self) -> None:
        """Leave without sending anything."""
        self.dismiss(None)


def _describe_schema(schema: dict[str, Any]) -> str:
    """``payload type: Approval`` and the JSON schema's properties, in one or two lines."""
    kind = schema.get("type") or "any JSON value"
    shape = schema.get("json") or {}
    properties = shape.get("properties") if isinstance(shape, dict) else None
    if isinstance(properties, dict) and properties:
        fields = ", ".join(
            f"{name}: {info.get('type', '?') if isinstance(info, dict) else '?'}"
            for name, info in properties.items()
        )
        return f"payload type: {kind} {{{fields}}}"
    if isinstance(shape, dict) and shape.get("type"):
        return f"payload type: {kind} (JSON {shape['type']})"
    return f"payload type: {kind}"


class DetailScreen(ModalScreen[None]):
    """Read-only text (an event as JSON, an operation's tracebacks); any of escape/q/enter
    closes it."""

    DEFAULT_CSS = """
    DetailScreen { align: center middle; }
    DetailScreen > VerticalScroll {
        width: 90%; height: 80%; padding: 0 1; border: thick $accent; background: $surface;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "close", "close")]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self._title = title
        self._body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = Text(visible(self._title))  # a str title is markup
            yield Static(visible(self._body, newlines=True), markup=False)

    def action_close(self) -> None:
        """Back to the run."""
        self.dismiss(None)
