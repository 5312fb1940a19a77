"""The runs screen: one page of runs, filters, id search, and live updates.

Only the page on screen is ever loaded (``_query.fetch_page``), so it opens and pages as fast on
a store of 100,000 runs as on one of ten. It reloads when the client reports activity
(``Admin.changes``: file-system events for the local store, the server's change stream over
HTTP), coalescing bursts, and otherwise every ``LIVE_TIMEOUT`` seconds so the durations of
running runs keep counting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.widgets import DataTable, Footer, Input, Static

from wf._exceptions import StoreError
from wf.admin._words import damaged_counts, visible, waiting_text
from wf.cli.tui._live import follow_changes
from wf.cli.tui._query import PAGE_SIZE, STATUS_CYCLE, RunsQuery, fetch_page
from wf.cli.tui._text import duration, error_text, plain, relative, short, status_text, timestamp

if TYPE_CHECKING:
    from wf import RunRecord
    from wf.cli.tui._app import InspectApp

LIVE_TIMEOUT = 5.0
"""Reload at least this often (seconds) even without activity: running durations grow."""

COLUMNS = ("status", "workflow", "id", "started", "duration", "resumes", "waiting on / error")


class SuggestingInput(Input):
    """An input whose Tab accepts the greyed-out suggestion (→ does too), as a shell does;
    with nothing to complete, Tab moves the focus on as usual."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "accept_suggestion", "complete", show=False)
    ]

    def action_accept_suggestion(self) -> None:
        """Take the suggestion, or move the focus on when there is none."""
        suggestion = self._suggestion
        if suggestion and suggestion != self.value:
            self.value = suggestion
            self.cursor_position = len(suggestion)
        else:
            self.screen.focus_next()


class RunsScreen(Screen[None]):
    """The table of runs, newest first."""

    DEFAULT_CSS = """
    RunsScreen #bar { height: 1; background: $panel; padding: 0 1; }
    RunsScreen #filters { height: 1; }
    RunsScreen #filters Input { width: 1fr; height: 1; border: none; padding: 0 1; }
    RunsScreen #filters #status-filter { width: 22; padding: 0 1; background: $boost; }
    """
    AUTO_FOCUS = "#runs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_search", "search"),
        Binding("s", "cycle_status", "status"),
        Binding("f", "focus_workflow", "workflow"),
        Binding("x", "clear_filters", "clear"),
        Binding("right_square_bracket,n", "next_page", "older"),
        Binding("left_square_bracket,p", "previous_page", "newer"),
        Binding("c", "cancel", "cancel"),
        Binding("w", "wake", "wake"),
        Binding("y", "copy", "copy id"),
        Binding("S", "schedules", "schedules"),
        Binding("escape", "leave_input", "table", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.query_state = RunsQuery()
        self._cursors: list[str | None] = [None]
        self._rows: list[RunRecord] = []
        self._has_more = False
        self._next_before: str | None = None
        self._searched = 0
        self._damaged = (0, 0)  # runs, other items (``damaged_counts``)
        self._shown: tuple[Any, ...] = ()
        self._workflows: set[str] = set()
        self._reads = 0
        """Reads begun: the live loop and the keys read concurrently, and only the newest
        read's answer is drawn (a slower, older one would show rows of a query left behind)."""

    @property
    def inspect_app(self) -> InspectApp:
        """The app, typed (the screens sit below the app, which imports them)."""
        return cast("InspectApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static("", id="bar")
        with Horizontal(id="filters"):
            yield Input(placeholder="/ search id or workflow", id="search")
            yield SuggestingInput(placeholder="f workflow (tab completes)", id="workflow")
            yield Static("s status: all", id="status-filter")
        table: DataTable[Any] = DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table
        yield Footer()

    async def on_mount(self) -> None:
        """Load the first page, then follow the store (the live loop reads as it starts).

        Under ``wf inspect RUN_ID`` a run is shown first: the table loads when it is shown.
        """
        self._live()

    async def on_screen_resume(self) -> None:
        """Coming back from a run: show what changed meanwhile."""
        await self.reload()

    # -- loading ---------------------------------------------------------------------------

    async def reload(self) -> None:
        """Read the current page again and redraw it if anything changed."""
        app = self.inspect_app
        self._reads += 1
        read = self._reads
        try:
            page = await fetch_page(app.client, self.query_state, self._cursors[-1], PAGE_SIZE)
        except StoreError as failed:  # a server gone, an I/O error: said, and tried again
            if read == self._reads:
                text = f"the runs cannot be listed now: {visible(failed)} (trying again)"
                self.query_one("#bar", Static).update(Text(text))
            return
        if read != self._reads:  # a newer read began meanwhile: its answer is the one to show
            return
        self._rows, self._has_more = page.runs, page.has_more
        self._next_before = page.next_before
        self._searched = page.searched if page.exhausted else 0
        self._damaged = damaged_counts(page.damaged, "run")
        self._workflows.update(record.workflow for record in page.runs)
        self._draw(app.now())

    @work(exclusive=True, group="live")
    async def _live(self) -> None:
        client = self.inspect_app.client
        await follow_changes(client.changes, self._reload_if_shown, timeout=LIVE_TIMEOUT)

    async def _reload_if_shown(self) -> None:
        if self.app.screen is self:
            await self.reload()

    def _draw(self, now: float) -> None:
        table = self.query_one("#runs", DataTable)
        rows = [self._cells(record, now) for record in self._rows]
        keys = [record.id for record in self._rows]
        shown = (tuple(keys), tuple(tuple(str(c) for c in row) for row in rows))
        if shown != self._shown:
            self._shown = shown
            selected = self.selected_id()
            index = table.cursor_row
            table.clear()
            for key, row in zip(keys, rows, strict=True):
                table.add_row(*row, key=key)
            if selected in keys:
                table.move_cursor(row=keys.index(selected), animate=False)
            elif keys:
                table.move_cursor(row=min(index, len(keys) - 1), animate=False)
        self._draw_bar()

    def _cells(self, record: RunRecord, now: float) -> tuple[Any, ...]:
        status = record.status.value
        end = record.updated_at if record.status.is_terminal else now
        # Recorded text as Text: a str cell is read as markup (``[@click=...]``, ``[/]``).
        return (
            status_text(status),
            plain(record.workflow, 40),
            record.id,
            timestamp(record.created_at),
            duration(end - record.created_at),
            str(record.resumes or ""),
            Text(_info(record, now)),  # one line, controls shown (``short``)
        )

    def _draw_bar(self) -> None:
        page = len(self._cursors)
        count = len(self._rows)
        first = (page - 1) * PAGE_SIZE + 1
        if count:
            span = f"runs {first}–{first + count - 1}"
        else:
            span = "no runs match" if page == 1 else "no more runs"
        more = " · ] older" if self._has_more else ""
        if self._searched and self._has_more:
            # As the web UI says it: the bounded search stopped before the page filled.
            more = f" · searched {self._searched:,} runs · ] search further"
        newer = " · [ newer" if page > 1 else ""
        damaged = ""
        runs, others = self._damaged
        if runs or others:
            # As `wf runs` and the web UI say it: left out, never hiding the rest; a stray
            # name in the index is no damaged run.
            said = []
            if runs:
                said.append(f"{runs} damaged run{'s' if runs > 1 else ''} not listed")
            if others:
                said.append(f"{others} damaged item{'s' if others > 1 else ''} passed over")
            damaged = f" · {', '.join(said)} (wf store verify)"
        text = f"{self.query_state.describe()} · page {page}: {span}{more}{newer}{damaged}"
        self.query_one("#bar", Static).update(Text(visible(text)))  # holds the typed filters
        status = self.query_state.status or "all"
        self.query_one("#status-filter", Static).update(Text(f"s status: {status}"))

    def selected_id(self) -> str | None:
        """The id of the run under the cursor."""
        record = self._selected()
        return record.id if record else None

    def _selected(self) -> RunRecord | None:
        table = self.query_one("#runs", DataTable)
        if not self._rows or table.cursor_row < 0 or table.cursor_row >= len(self._rows):
            return None
        return self._rows[table.cursor_row]

    async def _set_query(self, query: RunsQuery) -> None:
        self.query_state = query
        self._cursors = [None]
        await self.reload()

    # -- keys --------------------------------------------------------------------------------

    @on(DataTable.RowSelected, "#runs")
    def _open(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.inspect_app.open_run(event.row_key.value)

    def action_focus_search(self) -> None:
        """Type part of an id or workflow name; the table narrows as you type."""
        self.query_one("#search", Input).focus()

    def action_focus_workflow(self) -> None:
        """Type a workflow name (tab completes from the names seen so far); enter applies."""
        field = self.query_one("#workflow", Input)
        field.suggester = SuggestFromList(sorted(self._workflows), case_sensitive=False)
        field.focus()

    def action_leave_input(self) -> None:
        """Back to the table."""
        self.query_one("#runs", DataTable).focus()

    async def action_cycle_status(self) -> None:
        """All → running → suspended → failed → pending → completed → cancelled → all."""
        index = STATUS_CYCLE.index(self.query_state.status)
        status = STATUS_CYCLE[(index + 1) % len(STATUS_CYCLE)]
        await self._set_query(RunsQuery(status, self.query_state.workflow, self.query_state.search))

    async def action_clear_filters(self) -> None:
        """Show all runs again."""
        self.query_one("#search", Input).value = ""
        self.query_one("#workflow", Input).value = ""
        await self._set_query(RunsQuery())

    async def action_next_page(self) -> None:
        """Older runs: the next page starts below this page's last id."""
        if self._next_before is not None:
            self._cursors.append(self._next_before)
            await self.reload()
            self.query_one("#runs", DataTable).move_cursor(row=0, animate=False)

    async def action_previous_page(self) -> None:
        """Newer runs."""
        if len(self._cursors) > 1:
            self._cursors.pop()
            await self.reload()

    def action_cancel(self) -> None:
        """Cancel the run under the cursor (asks first)."""
        if (record := self._selected()) is not None:
            self.inspect_app.confirm_cancel(record)

    def action_wake(self) -> None:
        """Wake the run under the cursor (asks first)."""
        if (record := self._selected()) is not None:
            self.inspect_app.confirm_wake(record)

    def action_schedules(self) -> None:
        """The schedules screen (escape comes back here)."""
        from wf.cli.tui._schedules import SchedulesScreen

        self.app.push_screen(SchedulesScreen())

    def action_copy(self) -> None:
        """Copy the id of the run under the cursor."""
        if (run_id := self.selected_id()) is not None:
            self.inspect_app.copy_run_id(run_id)

    @on(Input.Changed, "#search")
    async def _search(self, event: Input.Changed) -> None:
        query = self.query_state
        await self._set_query(RunsQuery(query.status, query.workflow, event.value.strip()))

    @on(Input.Submitted, "#search")
    def _search_done(self) -> None:
        self.action_leave_input()

    @on(Input.Submitted, "#workflow")
    async def _workflow(self, event: Input.Submitted) -> None:
        query = self.query_state
        await self._set_query(RunsQuery(query.status, event.value.strip() or None, query.search))
        self.action_leave_input()


def _info(record: RunRecord, now: float) -> str:
    """What a run waits on, or why it failed: the table's last column."""
    status = record.status.value
    if record.cancel_requested and not record.status.is_terminal:
        return "cancellation requested"
    if status == "suspended":
        what = waiting_text(record.waiting_for) or "waiting"
        if record.wake_at is not None:
            what = f"wakes {relative(record.wake_at, now)} · {what}"
        return short(what, 60)
    if status == "failed":
        return short(error_text(record.error), 60)
    if status == "pending":
        return "queued"
    return ""
