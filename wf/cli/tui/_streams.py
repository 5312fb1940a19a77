"""The byte-stream viewer: a run's streams, each chunk with its index, as text or hex, live.

Chunks are read with ``Admin.follow_stream``, which follows a stream until it is closed, waiting
on the store's change notifications (or the server) in between (no polling loop here). A stream
is read once its tab is first shown (a run screen opens as fast whatever its streams hold), and
only its tail is kept and drawn: the last ``TAIL_BYTES`` of its last ``MAX_CHUNKS`` chunks (a
chunk bigger than that, its end), so a stream of many MB, or followed for hours, stays cheap; the
status line says what was left out, and that ``wf stream`` writes it all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from shlex import quote
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
TAIL_BYTES = 256 * 1024
"""The bytes of a stream kept and drawn at most: drawing a 2 MB chunk took Textual 0.8 s."""
MAX_LINES = 40_000
"""The lines drawn at most (a tail in hex is 16,384 lines; new chunks add to it)."""
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


def hex_lines(index: int, chunk: bytes, start: int = 0) -> list[Text]:
    """A chunk as a hex dump, 16 bytes a line: ``#3 0000  6c 69 6e 65 …  line…`` (``start``:
    the offset of ``chunk`` in the chunk it is the end of)."""
    out = []
    for offset in range(0, max(len(chunk), 1), 16):
        part = chunk[offset : offset + 16]
        gutter = f"#{index}" if offset == 0 else ""
        row = Text(gutter.rjust(GUTTER - 2) + " │ ", style="dim")
        row.append(f"{start + offset:04x}  ", style="cyan")
        row.append(" ".join(f"{b:02x}" for b in part).ljust(16 * 3))
        row.append(" " + "".join(chr(b) if 32 <= b < 127 else "." for b in part), style="green")
        out.append(row)
    return out


@dataclasses.dataclass
class _Shown:
    name: str
    first: int = 0
    """The index of the first chunk kept."""
    chunks: list[bytes] = dataclasses.field(default_factory=list)
    """The chunks kept, from ``first``: the first of them may be a chunk's end (``cut``)."""
    size: int = 0
    """Their bytes."""
    cut: int = 0
    """The bytes of chunk ``first`` left out (its start)."""
    caught_up: bool = False
    """The chunks the stream had when opened were read (and drawn): new ones are drawn as
    they come."""
    closed: bool = False
    incomplete: str | None = None
    """The step that was cut off writing it, if it ended so (``wf.StreamIncomplete``)."""

    def keep(self, chunk: bytes) -> None:
        """Keep the next chunk, and of those before as much as ``TAIL_BYTES`` leaves room for."""
        self.chunks.append(chunk)
        self.size += len(chunk)
        while len(self.chunks) > 1 and (
            self.size - len(self.chunks[0]) >= TAIL_BYTES or len(self.chunks) > MAX_CHUNKS
        ):
            self.size -= len(self.chunks.pop(0))
            self.first += 1
            self.cut = 0
        if self.size > TAIL_BYTES:  # the first kept is needed in part: its end
            head = self.size - TAIL_BYTES
            self.chunks[0] = self.chunks[0][head:]
            self.size -= head
            self.cut += head

    @property
    def left_out(self) -> bool:
        """Some of the stream before what is kept is not shown."""
        return self.first > 0 or self.cut > 0


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
        self._active = False

    def compose(self) -> ComposeResult:
        yield Static("no stream chosen", id="stream-status")
        with Horizontal():
            yield OptionList(id="stream-names")
            yield RichLog(
                id="stream-log", wrap=False, markup=False, auto_scroll=True, max_lines=MAX_LINES
            )

    def set_streams(self, streams: dict[str, dict[str, Any]]) -> None:
        """Update the list of streams (name -> ``{"chunks", "closed"}``); once shown
        (``activate``), open the first one."""
        names = self.query_one("#stream-names", OptionList)
        if list(streams) != list(self._streams):
            highlighted = names.highlighted
            names.clear_options()
            # A stream's name is anyone's text: a str prompt would be read as markup.
            names.add_options([Option(Text(visible(name)), id=name) for name in streams])
            if streams:
                names.highlighted = highlighted if highlighted is not None else 0
        self._streams = streams
        self._open_first()
        self._update_status()

    def activate(self) -> None:
        """The viewer is shown (its tab chosen): read the first stream, if none is open. Not
        before: a run's streams may hold many MB, which a screen opened on its steps never
        needs."""
        self._active = True
        self._open_first()

    def _open_first(self) -> None:
        if self._active and self._shown is None and self._streams:
            self.open(next(iter(self._streams)))

    def open(self, name: str) -> None:
        """Show the tail of stream ``name`` (see ``TAIL_BYTES``), following it live."""
        count = int(self._streams.get(name, {}).get("chunks", 0))
        self._shown = _Shown(name, first=max(0, count - MAX_CHUNKS))
        self.query_one("#stream-log", RichLog).clear()
        self._follow(self._shown, count)
        self._update_status()

    @property
    def shown(self) -> tuple[str, list[bytes], bool] | None:
        """(name, chunks kept, closed) of the stream on screen: for tests and screenshots."""
        if self._shown is None:
            return None
        return self._shown.name, list(self._shown.chunks), self._shown.closed

    @work(exclusive=True, group="stream")
    async def _follow(self, shown: _Shown, count: int) -> None:
        """Read the stream from ``shown.first``: what it had when opened (``count`` chunks) is
        kept, and drawn once read, only its tail; then each new chunk as it comes."""
        from wf._exceptions import StreamIncomplete

        shown.first = await self._tail_start(shown.name, shown.first, count)
        index = shown.first
        if index >= count:
            self._caught_up(shown)
        chunks = self._client.follow_stream(self._run_id, shown.name, shown.first)
        try:
            async for chunk in chunks:
                if shown is not self._shown:
                    return
                shown.keep(chunk)
                index += 1
                if shown.caught_up:  # a chunk bigger than the tail is the first kept, cut
                    cut = shown.cut if len(shown.chunks) == 1 else 0
                    self._write(index - 1, shown.chunks[-1], cut)
                elif index >= count:
                    self._caught_up(shown)
                self._update_status()
        except StreamIncomplete as cut:
            shown.incomplete = cut.step
        if shown is self._shown and not shown.caught_up:
            self._caught_up(shown)
        shown.closed = True
        self._update_status()

    async def _tail_start(self, name: str, first: int, count: int) -> int:
        """Where the tail of the stream's first ``count`` chunks begins: the last chunks from
        1, 2, 4, ... before the end are read until they hold ``TAIL_BYTES`` (from ``first`` at
        most), so that the tail of a stream of many MB is found reading about that much, not
        the stream. A chunk at a time: what is read is not kept."""
        from wf._exceptions import StreamIncomplete

        back = 1
        while count - back > first:
            size = 0
            chunks = self._client.follow_stream(self._run_id, name, count - back, follow=False)
            try:
                async for chunk in chunks:
                    size += len(chunk)
                    if size >= TAIL_BYTES:
                        return count - back
            except StreamIncomplete:
                pass
            finally:
                if isinstance(chunks, AsyncGenerator):  # left early: let go of its reads now
                    await chunks.aclose()
            back *= 2
        return first

    def _caught_up(self, shown: _Shown) -> None:
        shown.caught_up = True
        self._redraw()

    def _write(self, index: int, chunk: bytes, cut: int = 0) -> None:
        log = self.query_one("#stream-log", RichLog)
        if cut:
            log.write(Text(f"… the first {cut:,} bytes of #{index} not shown", style="dim"))
        lines = hex_lines(index, chunk, cut) if self.hex_mode else text_lines(index, chunk)
        for line in lines:
            log.write(line)

    def _redraw(self) -> None:
        log = self.query_one("#stream-log", RichLog)
        log.clear()
        shown = self._shown
        if shown is not None and shown.caught_up:
            if shown.first > 0:
                log.write(
                    Text(f"… chunks 0–{shown.first - 1} not shown ({self._everything()})", "dim")
                )
            for offset, chunk in enumerate(shown.chunks):
                self._write(shown.first + offset, chunk, shown.cut if offset == 0 else 0)
        self._update_status()

    def _everything(self) -> str:
        """How to get the whole stream."""
        shown = self._shown
        name = "" if shown is None or shown.name == "default" else f" --name {quote(shown.name)}"
        return f"wf stream {self._run_id}{name} writes it all"

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
        if not shown.caught_up and shown.chunks:
            span = f"reading chunk {last - 1}…"
        elif shown.left_out:
            span = f"{span}, its last {shown.size:,} bytes ({self._everything()})"
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
