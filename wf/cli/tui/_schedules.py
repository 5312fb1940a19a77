"""The schedules screen (``S`` on the runs screen): every cron schedule, its next and last fire
(in the schedule's zone, or ``ended`` once its series has ended), its last run's status and what
was skipped; enter opens the last run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from wf.cli.tui._text import plain, status_text

if TYPE_CHECKING:
    from wf.cli.tui._app import InspectApp

COLUMNS = ("id", "workflow", "cron", "tz", "next run", "last fire", "last run", "skipped")


class SchedulesScreen(Screen[None]):
    """A table of the schedules (``Admin.schedule_page``), read again with ``g``."""

    DEFAULT_CSS = """
    SchedulesScreen #bar { height: 1; background: $panel; padding: 0 1; }
    """
    AUTO_FOCUS = "#schedules"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "back", "back"),
        Binding("g", "reload", "reload"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._last_runs: dict[str, str] = {}

    @property
    def inspect_app(self) -> InspectApp:
        """The app, typed (the screens sit below the app, which imports them)."""
        return cast("InspectApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static("schedules", id="bar")
        table: DataTable[Any] = DataTable(id="schedules", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        yield Footer()

    async def on_mount(self) -> None:
        await self.action_reload()

    async def action_reload(self) -> None:
        """Read the schedules (and each last run's status) again."""
        from wf.admin._words import last_run_waiting, next_run_text, schedule_time

        app = self.inspect_app
        page = await app.client.schedule_page()
        rows = page.schedules
        table = self.query_one("#schedules", DataTable)
        table.clear()
        self._last_runs = {}
        for row in rows:
            last: str | Text = "-"
            if row["last_run_id"]:
                self._last_runs[row["id"]] = row["last_run_id"]
                last = status_text(row["last_run_status"] or "missing")
                if waiting := last_run_waiting(row):
                    last = Text.assemble(last, (f" ({waiting})", "yellow"))
            skipped = str(row["skipped"])
            if row["skipped"] and row.get("last_skip_reason"):
                skipped += f" ({row['last_skip_reason']})"
            if row.get("last_error"):
                skipped += f" error: {row['last_error']}"
            # Recorded text as Text: a str cell is read as markup (``[@click=...]``, ``[/]``).
            table.add_row(
                plain(row["id"]),
                plain(row["workflow"]),
                plain(row["cron"]),
                plain(row["tz"] or "UTC"),
                next_run_text(row),
                schedule_time(row["last_fire_at"], row["tz"]),
                last,
                plain(skipped),
                key=row["id"],
            )
        count = len(rows)
        damaged = ""
        if page.damaged:  # left out, not fired; named by ``wf store verify``
            s = "s" if len(page.damaged) > 1 else ""
            damaged = f" · {len(page.damaged)} damaged schedule{s} not listed (wf store verify)"
        self.query_one("#bar", Static).update(
            f"{count} schedule{'s' if count != 1 else ''}{damaged} · enter: last run · escape: back"
        )

    @on(DataTable.RowSelected)
    def open_last(self, event: DataTable.RowSelected) -> None:
        """Enter: open the last run of the schedule under the cursor."""
        run_id = self._last_runs.get(str(event.row_key.value))
        if run_id is None:
            self.notify("this schedule has not started a run yet", severity="warning")
            return
        self.inspect_app.open_run(run_id)

    def action_back(self) -> None:
        """Back to the runs table."""
        self.app.pop_screen()
