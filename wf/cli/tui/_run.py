"""The run screen: why the run is where it is, then its steps, journal, values, hooks, related
runs, byte streams and step logs, in tabs; live.

It reloads when the app's client says the run changed (``Admin.changes``: file-system events
for the local store, the server's change stream over HTTP), and at least every ``LIVE_TIMEOUT``
seconds so countdowns ("in 3s") and child
statuses stay current. The journal is append-only, so the events table only ever appends.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar, cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Log, Static, TabbedContent, TabPane

from wf._exceptions import ResultExpired, RunNotFound, StoreCorrupted, StoreError
from wf.admin._words import visible
from wf.cli.tui import _rows
from wf.cli.tui._live import follow_changes
from wf.cli.tui._model import RunView, load_run
from wf.cli.tui._prompts import DetailScreen
from wf.cli.tui._streams import StreamViewer
from wf.cli.tui._values import ValuesTree

if TYPE_CHECKING:
    from wf.cli.tui._app import InspectApp
    from wf.store import LogEntry

LIVE_TIMEOUT = 2.0
"""Reload at least this often (seconds): countdowns and child statuses move without events."""
MAX_EVENTS = 5000
"""The journal tab lists the newest this many events (each keeps its index in the journal)."""
TABS = ("steps", "events", "values", "hooks", "runs", "streams", "logs")
MAX_LOG_LINES = 10_000
"""The logs tab keeps the newest this many lines."""


class RunScreen(Screen[None]):
    """Everything about one run."""

    DEFAULT_CSS = """
    RunScreen #header { height: auto; max-height: 12; padding: 0 1; background: $panel; }
    RunScreen TabbedContent { height: 1fr; }
    RunScreen TabPane { padding: 0; }
    """
    AUTO_FOCUS = "#steps-table"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "back", "back"),
        Binding("c", "cancel", "cancel"),
        Binding("w", "wake", "wake"),
        Binding("r", "resume", "resume hook"),
        Binding("y", "copy", "copy id"),
        Binding("u", "parent", "parent"),
        Binding("p", "replay", "replay check"),
        *[Binding(str(n), f"tab('{tab}')", tab, show=False) for n, tab in enumerate(TABS, 1)],
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.view: RunView | None = None
        self._events_shown = 0
        self._chunks: tuple[tuple[Any, ...], int, int] | None = None
        """The stream_write burst the last events row stands for: (group, first index, count)."""
        self._logs_read = 0
        self._log_attempt: tuple[Any, ...] | None = None
        self._shown: dict[str, Any] = {}
        self._replays: dict[str, Any] | None = None
        """The last replay check (``p``), shown in the header until the run changes."""
        self._resumed = False
        """Whether the screen was shown once (``on_screen_resume``)."""
        self._reading = asyncio.Lock()
        """Held by a read: the live loop, keys and the screen coming back read concurrently,
        and two reads at once would both append the log lines written since the last."""

    @property
    def inspect_app(self) -> InspectApp:
        """The app, typed (the screens sit below the app, which imports them)."""
        return cast("InspectApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static(f"loading {self.run_id}…", id="header")
        with TabbedContent(initial="steps"):
            with TabPane("Steps", id="steps"):
                yield _table("steps-table", _rows.STEP_COLUMNS)
            with TabPane("Events", id="events"):
                yield _table("events-table", _rows.EVENT_COLUMNS)
            with TabPane("Values", id="values"):
                yield ValuesTree(id="values-tree")
            with TabPane("Hooks", id="hooks"):
                yield _table("hooks-table", _rows.HOOK_COLUMNS)
            with TabPane("Runs", id="runs"):
                yield _table("runs-table", _rows.FAMILY_COLUMNS)
            with TabPane("Streams", id="streams"):
                yield StreamViewer(self.inspect_app.client, self.run_id, id="stream-viewer")
            with TabPane("Logs", id="logs"):
                yield Log(id="logs-view", max_lines=MAX_LOG_LINES, auto_scroll=True)
        yield Footer()

    async def on_mount(self) -> None:
        """Load the run, then follow it."""
        if await self.reload():
            self._live()

    async def on_screen_resume(self) -> None:
        """Back from a child run or a prompt: show what changed. Not as the screen is first
        shown: it has just loaded (a long run's load takes a while, and ran three times)."""
        if not self._resumed:
            self._resumed = True
            return
        if self.view is not None:
            await self.reload()

    # -- loading ---------------------------------------------------------------------------

    async def reload(self) -> bool:
        """Read the run again and update every tab; False if the run does not exist (or cannot
        be read: damaged), True too when it cannot be read now (the store or the server
        failed: the screen says so and tries again)."""
        async with self._reading:
            return await self._read()

    async def _read(self) -> bool:
        app = self.inspect_app
        try:
            view = await load_run(app.client, self.run_id)
        except ResultExpired as expired:  # retention deleted it: say when
            self.query_one("#header", Static).update(Text(visible(expired)))
            return False
        except RunNotFound:
            text = f"no run with id {self.run_id!r}"
            self.query_one("#header", Static).update(Text(visible(text)))  # str: markup
            return False
        except StoreCorrupted as damaged:  # this run only: the app, and every other run, go on
            self.query_one("#header", Static).update(
                Text(
                    f"this run cannot be read: {visible(damaged)} "
                    "(wf store verify names every damaged item)"
                )
            )
            return False
        except StoreError as failed:  # a server gone, an I/O error: said, and tried again
            self.query_one("#header", Static).update(
                Text(f"this run cannot be read now: {visible(failed)} (trying again)")
            )
            return True
        if self.view is not None and len(view.data["events"]) != len(self.view.data["events"]):
            self._replays = None  # the journal grew (append-only): the check is about an older one
        self.view = view
        self.query_one("#header", Static).update(_rows.header(view, self._replays))
        self._fill("steps-table", _rows.step_rows(view))
        self._append_events(view.data["events"])
        self.query_one("#values-tree", ValuesTree).show(view.run)
        self._fill("hooks-table", _rows.hook_rows(view))
        self._fill("runs-table", _rows.family_rows(view))
        self.query_one("#stream-viewer", StreamViewer).set_streams(view.data["streams"])
        await self._append_logs()
        self._label_tabs(view)
        keys = (view.run["status"], bool(view.data["hooks"]), bool(view.run.get("parent_id")))
        if keys != self._shown.get("keys"):
            self._shown["keys"] = keys
            self.refresh_bindings()  # the footer is rebuilt: only when a key's state changed
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Show only the keys that apply to this run: no cancel or wake once it has ended, no
        resume without a live hook, no parent for a top-level run (hidden, and inert)."""
        if self.view is None:
            return True
        ended = self.view.run["status"] in ("completed", "failed", "cancelled")
        if action in ("cancel", "wake"):
            return not ended
        if action == "resume":
            return bool(self.view.data["hooks"])
        if action == "parent":
            return bool(self.view.run.get("parent_id"))
        return True

    @work(exclusive=True, group="live")
    async def _live(self) -> None:
        client = self.inspect_app.client
        await follow_changes(
            lambda: client.changes(self.run_id),
            self._reload_if_shown,
            timeout=LIVE_TIMEOUT,
            loaded=True,  # on_mount's load; a change since shows within LIVE_TIMEOUT
        )

    async def _reload_if_shown(self) -> None:
        if self.app.screen is self:
            try:
                await self.reload()
            except NoMatches:
                # The screen composes every widget reload() updates, so one is missing only
                # while the app closes and removes them under a reload a change started (seen
                # under load, as a crash at exit): nothing is left to show it in.
                return

    def _fill(self, table_id: str, rows: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Replace a table's rows when they changed, keeping the cursor on the same row."""
        signature = [(key, tuple(str(c) for c in cells)) for key, cells in rows]
        if self._shown.get(table_id) == signature:
            return
        self._shown[table_id] = signature
        table = self.query_one(f"#{table_id}", DataTable)
        keys = [key for key, _ in rows]
        row = table.cursor_row
        selected = _row_key(table, row)
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if selected in keys:
            table.move_cursor(row=keys.index(selected), animate=False)
        elif keys:
            table.move_cursor(row=min(max(row, 0), len(keys) - 1), animate=False)

    def _append_events(self, events: list[dict[str, Any]]) -> None:
        table = self.query_one("#events-table", DataTable)
        if len(events) < self._events_shown:  # never happens to a journal; redraw if it does
            table.clear()
            self._events_shown = 0
            self._chunks = None
        start = max(self._events_shown, len(events) - MAX_EVENTS)
        for index in range(start, len(events)):
            event = events[index]
            group = _rows.chunk_group(event)
            if group is not None and self._chunks is not None and self._chunks[0] == group:
                # One row per burst of chunks of one stream, not one per chunk: a streaming
                # step would flood the tab. The row grows as chunks arrive.
                _, first, count = self._chunks
                self._chunks = (group, first, count + 1)
                cells = _rows.chunk_row(first, index, count + 1, event)
                row = table.get_row_index(str(first))
                for column, value in enumerate(cells):
                    table.update_cell_at(Coordinate(row, column), value)
                continue
            self._chunks = (group, index, 1) if group is not None else None
            table.add_row(*_rows.event_row(index, event), key=str(index))
        self._events_shown = len(events)

    async def _append_logs(self) -> None:
        """Add the step log lines written since the last load (logs only ever grow)."""
        from wf.admin._words import log_attempt, log_header, log_line

        client = self.inspect_app.client
        entries: list[LogEntry] = []
        while True:  # every entry since the last load, a page at a time
            page = await client.log_page(self.run_id, start=self._logs_read + len(entries))
            entries += page.entries
            if not page.more or not page.entries:
                break
        if not entries:
            return
        self._logs_read += len(entries)
        lines: list[str] = []
        for entry in entries:
            if log_attempt(entry) != self._log_attempt:
                self._log_attempt = log_attempt(entry)
                lines.append(visible(log_header(entry)))
            # What a step printed is anyone's text: its control characters shown.
            lines.extend(visible(line) for line in log_line(entry).splitlines() or [""])
        self.query_one("#logs-view", Log).write_lines(lines)

    def _label_tabs(self, view: RunView) -> None:
        tabs = self.query_one(TabbedContent)
        counts = {
            "steps": len(view.data["steps"]),
            "events": len(view.data["events"]),
            "hooks": len(view.data["hooks"]),
            "runs": len(view.data["children"]) + (1 if view.run.get("parent_id") else 0),
            "streams": len(view.data["streams"]),
            "logs": self._logs_read,
        }
        for number, tab in enumerate(TABS, 1):
            count = f" {counts[tab]}" if tab in counts else ""
            tabs.get_tab(
                tab
            ).label = f"{number} {tab.capitalize()}{count and f' ({count.strip()})'}"

    # -- keys --------------------------------------------------------------------------------

    def action_back(self) -> None:
        """Back to the previous screen: the run this one was opened from, or the runs table."""
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.inspect_app.show_runs()  # opened by `wf inspect RUN_ID`: the table comes next

    def action_tab(self, tab: str) -> None:
        """Show one tab (keys 1 to 7)."""
        self.query_one(TabbedContent).active = tab

    @on(TabbedContent.TabActivated)
    def _focus_tab(self, event: TabbedContent.TabActivated) -> None:
        # Keys act on what is shown: focus the table (or tree, stream list, log) of the new tab.
        # Never leave the focus in the pane just hidden: focusing a widget of a hidden pane
        # shows that pane again (the Streams tab took key 7 back that way).
        pane = event.pane
        if pane.id == "streams":
            self.query_one("#stream-viewer", StreamViewer).activate()
        for widget in pane.query("DataTable, ValuesTree, OptionList, Log"):
            widget.focus()
            return

    def action_cancel(self) -> None:
        """Cancel this run (asks first)."""
        if self.view is not None:
            self.inspect_app.confirm_cancel(self.view.run)

    def action_wake(self) -> None:
        """Wake this run (asks first)."""
        if self.view is not None:
            self.inspect_app.confirm_wake(self.view.run)

    @work(exclusive=True, group="replay")
    async def action_replay(self) -> None:
        """Check that the code here still replays this run (as ``wf inspect --replay`` does:
        it imports the workflow's module, and never executes a step or writes anything). Not
        over HTTP: a server never imports the workflow's code (``Admin.run_detail``)."""
        if self.view is None:
            return
        header = self.query_one("#header", Static)
        header.update(_rows.header(self.view, {"status": "checking…"}))
        try:
            replays = (await self.inspect_app.client.run_detail(self.run_id, replay=True)).replays
        except Exception as error:  # a store error: say so where the answer would be
            replays = {"status": "error", "message": str(error)}
        self._replays = replays or {
            "status": "error",
            "message": "not checked through a wf serve (it never imports the workflow's "
            "code): run wf inspect where the code is",
        }
        header.update(_rows.header(self.view, self._replays))

    def action_copy(self) -> None:
        """Copy this run's id."""
        self.inspect_app.copy_run_id(self.run_id)

    def action_parent(self) -> None:
        """Open the run that started this one."""
        if self.view is not None and self.view.run.get("parent_id"):
            self.inspect_app.open_run(self.view.run["parent_id"])
        else:
            self.notify("this run has no parent", severity="warning")

    def action_resume(self) -> None:
        """Send a payload to a live hook: the one under the cursor on the hooks tab, else the
        only one."""
        if self.view is None:
            return
        hooks = self.view.data["hooks"]
        if not hooks:
            self.notify("this run has no live hook", severity="warning")
            return
        hook = hooks[0]
        table = self.query_one("#hooks-table", DataTable)
        if len(hooks) > 1 and 0 <= table.cursor_row < len(hooks):
            hook = hooks[table.cursor_row]
        self.inspect_app.prompt_payload(hook["token"], hook.get("schema"))

    @on(DataTable.RowSelected)
    def _open_row(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        if self.view is None or key is None:
            return
        table = event.data_table.id
        if table == "runs-table":
            self.inspect_app.open_run(key)
        elif table == "hooks-table":
            hook = next(h for h in self.view.data["hooks"] if h["token"] == key)
            self.inspect_app.prompt_payload(hook["token"], hook.get("schema"))
        elif table == "events-table":
            event_data = self.view.data["events"][int(key)]
            import json

            body = json.dumps(event_data, indent=2, ensure_ascii=False, default=str)
            if _rows.chunk_group(event_data) is not None:
                body = (
                    f"the first of a burst of chunk writes (the Streams tab shows them)\n\n{body}"
                )
            self.app.push_screen(DetailScreen(f"event {key}: {event_data.get('type')}", body))
        elif table == "steps-table":
            self._open_op(int(key.removeprefix("op")))

    def _open_op(self, op: int) -> None:
        assert self.view is not None
        row = next(r for r in self.view.data["steps"] if r["op"] == op)
        live = [h for h in self.view.data["hooks"] if h["token"] == row["name"]]
        if row["kind"] == "child":
            self.inspect_app.open_run(row["name"])
        elif row["kind"] == "hook" and live:
            self.inspect_app.prompt_payload(live[0]["token"], live[0].get("schema"))
        else:
            title = f"op {op}: {row['kind']} {row['name']}"
            self.app.push_screen(DetailScreen(title, _rows.op_detail(self.view, op)))


def _table(table_id: str, columns: tuple[str, ...]) -> DataTable[Any]:
    table: DataTable[Any] = DataTable(id=table_id, cursor_type="row", zebra_stripes=True)
    for column in columns:
        table.add_column(column, key=column)
    return table


def _row_key(table: DataTable[Any], row: int) -> str | None:
    if not 0 <= row < table.row_count:
        return None
    return table.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value
