"""The byte-stream viewer: a run's streams, each chunk with its index, as text or hex, live.

Chunks are read with ``Admin.follow_stream``, which follows a stream until it is closed, waiting
on the store's change notifications (or the server) in between (no polling loop here). Only the last
``MAX_CHUNKS`` chunks are kept, so following a chatty stream for hours stays cheap.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import OptionList, RichLog, Static
from textual.widgets.option_list import Option

from wf.admin._words import stream_state, visible

if TYPE_CHECKING:
    from wf.admin import Admin

MAX_CHUNKS = 2000
GUTTER = 8


def text_lines(index: int, chunk: bytes) -> list[Text]:
    """A chunk as text: ``#3 │ first line`` then ``   │ next line`` (tabs and junk made safe)."""
    decoded = chunk.decode("utf-8", errors="replace").replace("\t", "    ")
    lines = decoded.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # a chunk ending in a newline does not draw an empty line
    out = []
    for n, line in enumerate(lines):
        gutter = f"#{index}" if n == 0 else ""
        row = Text(gutter.rjust(GUTTER - 2) + " │ ", style="dim")
        row.append("".join(c if c.isprintable() else "·" for c in line))
        out.append(row)
    return out


def hex_lines(index: int, chunk: bytes) -> list[Text]:
    """A chunk as a hex dump, 16 bytes a line: ``#3 0000  6c 69 6e 65 …  line…``."""
    out = []
    for offset in range(0, max(len(chunk), 1), 16):
        part = chunk[offset : offset + 16]
        gutter = f"#{index}" if offset == 0 else ""
        row = Text(gutter.rjust(GUTTER - 2) + " │ ", style="dim")
        row.append(f"{offset:04x}  ", style="cyan")
        row.append(" ".join(f"{b:02x}" for b in part).ljust(16 * 3))
        row.append(" " + "".join(chr(b) if 32 <= b < 127 else "." for b in part), style="green")
        out.append(row)
    return out


@dataclasses.dataclass
class _Shown:
    name: str
    first: int = 0
    chunks: list[bytes] = dataclasses.field(default_factory=list)
    closed: bool = False
    incomplete: str | None = None
    """The step that was cut off writing it, if it ended so (``wf.StreamIncomplete``)."""


class StreamViewer(Vertical):
    """Stream names on the left, the chosen stream's chunks on the right."""

    DEFAULT_CSS = """
    StreamViewer { height: 1fr; }
    StreamViewer #stream-status { height: 1; background: $panel; padding: 0 1; }
    StreamViewer OptionList { width: 28; height: 1fr; }
    StreamViewer RichLog { height: 1fr; background: $surface; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "toggle_mode", "text/hex"),
        Binding("f", "toggle_follow", "follow"),
    ]

    hex_mode: reactive[bool] = reactive(False, init=False)
    follow: reactive[bool] = reactive(True, init=False)

    def __init__(self, client: Admin, run_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client = client
        self._run_id = run_id
        self._streams: dict[str, dict[str, Any]] = {}
        self._shown: _Shown | None = None

    def compose(self) -> ComposeResult:
        yield Static("no stream chosen", id="stream-status")
        with Horizontal():
            yield OptionList(id="stream-names")
            yield RichLog(id="stream-log", wrap=False, markup=False, auto_scroll=True)

    def set_streams(self, streams: dict[str, dict[str, Any]]) -> None:
        """Update the list of streams (name -> ``{"chunks", "closed"}``); open the first one."""
        names = self.query_one("#stream-names", OptionList)
        if list(streams) != list(self._streams):
            highlighted = names.highlighted
            names.clear_options()
            # A stream's name is anyone's text: a str prompt would be read as markup.
            names.add_options([Option(Text(visible(name)), id=name) for name in streams])
            if streams:
                names.highlighted = highlighted if highlighted is not None else 0
        self._streams = streams
        if self._shown is None and streams:
            self.open(next(iter(streams)))
        self._update_status()

    def open(self, name: str) -> None:
        """Show stream ``name`` from its last ``MAX_CHUNKS`` chunks, following it live."""
        count = int(self._streams.get(name, {}).get("chunks", 0))
        self._shown = _Shown(name, first=max(0, count - MAX_CHUNKS))
        self.query_one("#stream-log", RichLog).clear()
        self._follow(self._shown)
        self._update_status()

    @property
    def shown(self) -> tuple[str, list[bytes], bool] | None:
        """(name, chunks kept, closed) of the stream on screen: for tests and screenshots."""
        if self._shown is None:
            return None
        return self._shown.name, list(self._shown.chunks), self._shown.closed

    @work(exclusive=True, group="stream")
    async def _follow(self, shown: _Shown) -> None:
        from wf._exceptions import StreamIncomplete

        index = shown.first
        chunks = self._client.follow_stream(self._run_id, shown.name, shown.first)
        try:
            async for chunk in chunks:
                if shown is not self._shown:
                    return
                shown.chunks.append(chunk)
                self._write(index, chunk)
                index += 1
                if len(shown.chunks) > MAX_CHUNKS:
                    del shown.chunks[0]
                    shown.first += 1
                self._update_status()
        except StreamIncomplete as cut:
            shown.incomplete = cut.step
        shown.closed = True
        self._update_status()

    def _write(self, index: int, chunk: bytes) -> None:
        log = self.query_one("#stream-log", RichLog)
        for line in (hex_lines if self.hex_mode else text_lines)(index, chunk):
            log.write(line)

    def _redraw(self) -> None:
        log = self.query_one("#stream-log", RichLog)
        log.clear()
        if self._shown is not None:
            for offset, chunk in enumerate(self._shown.chunks):
                self._write(self._shown.first + offset, chunk)
        self._update_status()

    def _update_status(self) -> None:
        status = self.query_one("#stream-status", Static)
        if self._shown is None:
            status.update("this run has no byte streams" if not self._streams else "")
            return
        shown = self._shown
        last = shown.first + len(shown.chunks)
        state = "closed" if shown.closed else "open"
        if shown.incomplete:
            state = stream_state({"closed": True, "complete": False, "cut_step": shown.incomplete})
        span = f"chunks {shown.first}–{last - 1}" if shown.chunks else "no chunks yet"
        mode = "hex" if self.hex_mode else "text"
        follow = "following" if self.follow else "paused"
        status.update(Text(f"{visible(shown.name)} · {span} · {state} · {mode} (t) · {follow} (f)"))

    def action_toggle_mode(self) -> None:
        """Switch between text and hex dump."""
        self.hex_mode = not self.hex_mode

    def action_toggle_follow(self) -> None:
        """Keep the newest chunk in view, or hold the view still to read."""
        self.follow = not self.follow

    def watch_hex_mode(self) -> None:
        self._redraw()

    def watch_follow(self, follow: bool) -> None:
        log = self.query_one("#stream-log", RichLog)
        log.auto_scroll = follow
        if follow:
            log.scroll_end(animate=False)
        self._update_status()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter on a stream name opens it."""
        if event.option.id is not None:
            self.open(event.option.id)
