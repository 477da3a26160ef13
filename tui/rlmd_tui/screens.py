"""The screens: runs, trajectory, launch, workspace and help."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Input,
    Label,
    Select,
    Static,
    TextArea,
    Tree,
)
from textual.widgets.tree import TreeNode

from rlmd.cli.render import fmt_cost, fmt_duration, fmt_tokens, run_duration, status_text
from rlmd_tui.backend import describe
from rlmd_tui.format import (
    detail_lines,
    detail_text,
    node_label,
    one_line,
    run_label,
    source_refs,
    summary_text,
    tokens_of,
    when,
)
from rlmd_tui.lineview import LineView

COLUMNS: list[tuple[str, str]] = [
    ("status", "status"),
    ("question", "question"),
    ("tokens", "tokens"),
    ("cost", "cost"),
    ("time", "duration"),
    ("depth", "depth"),
    ("iter", "iterations"),
    ("sub", "subcalls"),
    ("model", "model"),
    ("workspace", "workspace"),
    ("started", "started"),
]


def sort_value(run: dict[str, Any], key: str) -> Any:
    tree = run.get("tree") or {}
    return {
        "status": run.get("status") or "",
        "question": run.get("question") or "",
        "workspace": run.get("workspace") or "",
        "model": run.get("root_model") or "",
        "depth": tree.get("max_depth") or 0,
        "iterations": tree.get("iterations") or run.get("iterations") or 0,
        "subcalls": tree.get("subcalls") or run.get("subcalls") or 0,
        "tokens": tokens_of(run),
        "cost": tree.get("cost_usd") or run.get("cost_usd") or 0,
        "duration": run_duration(run) or 0,
        "started": run.get("started_at") or 0,
    }[key]


def parse_filter(text: str) -> dict[str, str | None]:
    """``status:completed ws:proj model:qwen free words`` → filters and the FTS query."""
    out: dict[str, str | None] = {"status": None, "workspace": None, "model": None}
    words = []
    try:
        parts = shlex.split(text)
    except ValueError:
        parts = text.split()
    for part in parts:
        name, sep, value = part.partition(":")
        if sep and value and name in ("status", "ws", "workspace", "model"):
            out["workspace" if name == "ws" else name] = value
        else:
            words.append(part)
    out["search"] = " ".join(words) or None
    return out


class RunsTable(DataTable):
    """The runs: Home and End move the cursor to the first and last run (a plain DataTable
    only scrolls, leaving the cursor where it was)."""

    BINDINGS = [
        Binding("home", "first", "First run", show=False),
        Binding("end", "last", "Last run", show=False),
    ]

    def action_first(self) -> None:
        if self.row_count:
            self.move_cursor(row=0, animate=False)

    def action_last(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1, animate=False)


class RunsScreen(Screen):
    """Every run: a sortable, filterable table with full-text search; live with a daemon."""

    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("/", "focus_filter", "Search"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("n", "app.launch", "New task"),
        Binding("x", "cancel", "Cancel"),
        Binding("w", "app.workspace", "Workspace"),
        Binding("r", "reload", "Reload", show=False),
        Binding("?", "app.help", "Help"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__(id="runs-screen")
        self.runs: list[dict[str, Any]] = []
        self.sort_key = "started"
        self.sort_reverse = True
        self.filters: dict[str, str | None] = parse_filter("")
        self._pending = False

    def compose(self) -> ComposeResult:
        yield Static(id="runs-title")
        yield Input(
            placeholder="search…  status:completed  ws:NAME  model:NAME  (enter)", id="filter"
        )
        table: DataTable = RunsTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        for label, key in COLUMNS:
            table.add_column(label, key=key)
        self.query_one("#filter", Input).cursor_blink = not self.app.is_headless
        table.focus()
        self.reload()

    def show_title(self) -> None:
        arrow = "↓" if self.sort_reverse else "↑"
        f = {k: v for k, v in self.filters.items() if v}
        shown = "  ".join(f"{k}={v}" for k, v in f.items())
        self.query_one("#runs-title", Static).update(
            Text.assemble(
                ("rlmd runs", "bold"),
                f"  {len(self.runs)} shown  sort {self.sort_key}{arrow}  ",
                (shown, "yellow"),
                (f"  [{self.app.backend.label}]", "dim"),
            )
        )

    @work(exclusive=True, group="runs")
    async def reload(self) -> None:
        self._pending = False
        f = self.filters
        try:
            runs = await self.app.backend.list_runs(
                search=f.get("search"), status=f.get("status"), workspace=None, limit=500
            )
        except Exception as exc:  # noqa: BLE001 - shown to the user
            if not getattr(self.app.backend, "lost", None):  # the loss is announced once
                self.notify(f"could not list runs: {describe(exc)}", severity="error")
            self.show_title()
            return
        if f.get("workspace"):
            runs = [r for r in runs if f["workspace"] in (r.get("workspace") or "")]
        if f.get("model"):
            runs = [r for r in runs if f["model"] in (r.get("root_model") or "")]
        self.runs = runs
        self.fill()

    def fill(self) -> None:
        table = self.query_one("#runs", DataTable)
        current = None
        if table.row_count and table.cursor_row >= 0:
            current = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        runs = sorted(
            self.runs, key=lambda r: sort_value(r, self.sort_key), reverse=self.sort_reverse
        )
        table.clear()
        for run in runs:
            tree = run.get("tree") or {}
            # Text cells: a question like "[b]x[/b]" is shown as typed, never as markup.
            table.add_row(
                status_text(run.get("status")),
                Text(one_line(run.get("question"), 24)),
                fmt_tokens(tokens_of(run)),
                fmt_cost(tree.get("cost_usd") or run.get("cost_usd")),
                fmt_duration(run_duration(run)),
                str(tree.get("max_depth") or 0),
                str(tree.get("iterations") or run.get("iterations") or 0),
                str(tree.get("subcalls") or run.get("subcalls") or 0),
                Text(one_line(run.get("root_model") or "-", 20)),
                Text(Path(run.get("workspace") or "-").name),
                when(run.get("started_at")),
                key=run["id"],
            )
        if current is not None:
            try:
                table.move_cursor(row=table.get_row_index(current), animate=False)
            except Exception:  # noqa: BLE001 - the row is gone
                pass
        self.show_title()

    def schedule_reload(self) -> None:
        if not self._pending:
            self._pending = True
            self.set_timer(0.3, self.reload)

    def selected_run(self) -> str | None:
        table = self.query_one("#runs", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    @on(Input.Submitted, "#filter")
    def apply_filter(self, event: Input.Submitted) -> None:
        self.filters = parse_filter(event.value)
        self.query_one("#runs", DataTable).focus()
        self.reload()

    def action_sort(self) -> None:
        keys = [k for _, k in COLUMNS]
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.fill()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.fill()

    @on(DataTable.HeaderSelected)
    def header_sort(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        self.sort_key = key
        self.fill()

    def action_reload(self) -> None:
        self.reload()

    def action_open(self) -> None:
        run_id = self.selected_run()
        if run_id:
            self.app.open_run(run_id)

    @on(DataTable.RowSelected, "#runs")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.open_run(str(event.row_key.value))

    def action_cancel(self) -> None:
        run_id = self.selected_run()
        if run_id:
            self.app.cancel_run(run_id)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Offer Cancel only for a running run, and only with a daemon."""
        if action == "cancel":
            run = next((r for r in self.runs if r["id"] == self.selected_run()), None)
            return self.app.backend.live and (run or {}).get("status") == "running"
        return True

    @on(DataTable.RowHighlighted, "#runs")
    def _highlighted(self) -> None:
        self.refresh_bindings()


class TrajectoryScreen(Screen):
    """One run as a tree (iterations, cells, model calls, child runs) with a detail pane."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("f", "follow", "Follow"),
        Binding("c", "copy_answer", "Copy answer"),
        Binding("e", "export", "Export"),
        Binding("x", "cancel", "Cancel"),
        Binding("v", "open_source", "Open path:line"),
        Binding("o", "focus_detail", "Output"),
        Binding("t", "focus_tree", "Tree", show=False),
        Binding("w", "workspace", "Workspace", show=False),
        Binding("?", "app.help", "Help"),
    ]

    def __init__(self, run_id: str, follow: bool = False) -> None:
        super().__init__()
        self.run_id = run_id
        self.follow = follow
        self.run: dict[str, Any] | None = None
        self.items: dict[str, TreeNode] = {}
        self._populated: set[str] = set()
        self._pending = False

    def compose(self) -> ComposeResult:
        yield Static("loading…", id="summary")
        with Horizontal(id="panes"):
            yield Tree(Text("run"), id="tree")
            yield LineView(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tree", Tree).focus()
        self.reload()

    @work(exclusive=True, group="tree")
    async def reload(self) -> None:
        self._pending = False
        try:
            tree = await self.app.backend.tree(self.run_id)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            if self.follow and self.run is None:  # a queued task is not in the store yet
                self.query_one("#summary", Static).update(f"waiting for {self.run_id} to start…")
                return
            self.notify(f"could not open run {self.run_id}: {exc}", severity="error")
            return
        first = self.run is None
        self.run = tree
        self.run_id = tree["id"]
        self.sync(tree)
        detail = self.query_one("#detail", LineView)
        if first:
            detail.set_lines(detail_lines("run", tree))
        else:  # the highlighted item as it is now (a finished run shows its answer)
            node = self.query_one("#tree", Tree).cursor_node
            kind, item = node.data if node is not None and node.data else ("run", tree)
            detail.update_lines(detail_lines(kind, item))
        if self.follow and tree.get("status") not in (None, "running"):
            self.follow = False
            self.notify(f"run finished: {tree.get('status')}")
        self._summary()
        self.refresh_bindings()

    def _summary(self) -> None:
        if self.run is not None:
            self.query_one("#summary", Static).update(summary_text(self.run, self.follow))

    def schedule_reload(self) -> None:
        if not self._pending:
            self._pending = True
            self.set_timer(0.3, self.reload)

    # -- the tree, built lazily and kept in sync on reload ------------------------------------
    @staticmethod
    def children_of(kind: str, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if kind == "run":
            return [("node", n) for n in item.get("nodes") or []] + [
                ("run", r) for r in item.get("runs") or []
            ]
        return [("node", n) for n in item.get("children") or []] + [
            ("run", r) for r in item.get("runs") or []
        ]

    def sync(self, tree: dict[str, Any]) -> None:
        widget = self.query_one("#tree", Tree)
        root = widget.root
        root.set_label(run_label(tree, child=False))
        root.data = ("run", tree)
        key = "run:" + tree["id"]
        self.items[key] = root
        if key not in self._populated:
            self.populate(root)
            root.expand()
            small = len(tree.get("nodes") or []) <= 50
            if small:
                for child in root.children:
                    if child.data and child.data[0] == "node":
                        self.populate(child)
                        child.expand()
        else:
            self._sync_children(root, tree.get("id"))
        if self.follow:
            # Open the path to the newest step, down through a busy cell's sub-calls and
            # child runs, so what is running now is in view.
            node = root
            while node.children:
                node = node.children[-1]
                if node.allow_expand and not node.is_expanded:
                    self.populate(node)
                    node.expand()
            widget.scroll_end(animate=False)

    def _key(self, kind: str, item: dict[str, Any]) -> str:
        return f"{kind}:{item.get('id')}"

    def _label(self, kind: str, item: dict[str, Any]) -> Text:
        return run_label(item, child=True) if kind == "run" else node_label(item)

    def populate(self, node: TreeNode) -> None:
        kind, item = node.data
        key = self._key(kind, item)
        if key in self._populated:
            return
        self._populated.add(key)
        for child_kind, child in self.children_of(kind, item):
            self._add(node, child_kind, child)

    def _add(self, parent: TreeNode, kind: str, item: dict[str, Any]) -> None:
        has_kids = bool(self.children_of(kind, item))
        child = parent.add(self._label(kind, item), data=(kind, item), allow_expand=has_kids)
        self.items[self._key(kind, item)] = child

    def _sync_children(self, node: TreeNode, _id: Any) -> None:
        kind, item = node.data
        present = {self._key(*c.data) for c in node.children if c.data}
        for child_kind, child in self.children_of(kind, item):
            key = self._key(child_kind, child)
            if key not in present:
                self._add(node, child_kind, child)
                continue
            existing = self.items[key]
            existing.data = (child_kind, child)
            existing.set_label(self._label(child_kind, child))
            existing.allow_expand = bool(self.children_of(child_kind, child))
            if key in self._populated:
                self._sync_children(existing, None)

    @on(Tree.NodeExpanded, "#tree")
    def expanded(self, event: Tree.NodeExpanded) -> None:
        if event.node.data:
            self.populate(event.node)

    @on(Tree.NodeHighlighted, "#tree")
    def highlighted(self, event: Tree.NodeHighlighted) -> None:
        if event.node.data:
            kind, item = event.node.data
            self.query_one("#detail", LineView).set_lines(detail_lines(kind, item))
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Offer Follow and Cancel only while the run runs, Copy only with an answer, Open
        only when the highlighted item cites a ``path:line``."""
        run = self.run or {}
        running = run.get("status") in (None, "running")
        if action == "cancel":
            return running and self.app.backend.live
        if action == "follow":
            return running or self.follow
        if action == "copy_answer":
            return run.get("answer") is not None
        if action == "open_source":
            return bool(self.source_refs())
        return True

    def source_refs(self) -> list[tuple[Path, int]]:
        """``path:line`` references in the highlighted item (else the run's answer) that name
        a file in the run's workspace."""
        node = self.query_one("#tree", Tree).cursor_node
        kind, item = node.data if node is not None and node.data else ("run", self.run or {})
        return source_refs(detail_text(kind, item), (self.run or {}).get("workspace"))

    def action_open_source(self) -> None:
        refs = self.source_refs()
        if not refs:
            self.notify("no path:line here", severity="warning")
            return
        path, line = refs[0]
        self.app.open_in_editor(path, line)

    # -- actions ------------------------------------------------------------------------------
    def action_follow(self) -> None:
        self.follow = not self.follow
        self._summary()
        if self.follow:
            self.reload()

    def action_copy_answer(self) -> None:
        answer = (self.run or {}).get("answer")
        if answer is None:
            self.notify("no answer yet", severity="warning")
            return
        self.app.copy_text(str(answer))

    def action_export(self) -> None:
        if self.run is not None:
            self.app.export_tree(self.run)

    def action_cancel(self) -> None:
        if (self.run or {}).get("status") not in (None, "running"):
            self.notify(f"the run has already ended ({(self.run or {}).get('status')})")
            return
        self.app.cancel_run(self.run_id)

    def action_focus_detail(self) -> None:
        self.query_one("#detail", LineView).focus()

    def action_focus_tree(self) -> None:
        self.query_one("#tree", Tree).focus()

    def action_workspace(self) -> None:
        ws = (self.run or {}).get("workspace")
        self.app.action_workspace(ws)


class LaunchScreen(ModalScreen[dict | None]):
    """A form that starts a task (question, workspace, models, sandbox, budgets)."""

    BINDINGS = [
        Binding("escape", "dismiss_none", "Close"),
        Binding("ctrl+s", "start", "Start"),
    ]

    FIELDS = [
        ("question", "question", ""),
        ("workspace", "workspace", ""),
        ("root", "root model", ""),
        ("sub", "sub model", ""),
        ("max_iterations", "max iterations", ""),
        ("max_depth", "max depth", ""),
        ("max_seconds", "max seconds", ""),
        ("max_usd", "max USD", ""),
    ]

    def __init__(self, workspace: str | None = None, root_model: str | None = None) -> None:
        super().__init__()
        self.defaults = {"workspace": workspace or os.getcwd(), "root": root_model or ""}

    def compose(self) -> ComposeResult:
        with Vertical(id="launch"):
            yield Label("Start a task", classes="title")
            with VerticalScroll():
                for key, label, _ in self.FIELDS:
                    with Horizontal(classes="field"):
                        yield Label(label, classes="name")
                        yield Input(
                            value=self.defaults.get(key, ""),
                            id=f"f-{key}",
                            classes="compact",
                            type="integer" if key in ("max_iterations", "max_depth") else "text",
                        )
                with Horizontal(classes="field"):
                    yield Label("sandbox", classes="name")
                    yield Select(
                        [("default", ""), ("subprocess", "subprocess"), ("inprocess", "inprocess")],
                        value="",
                        allow_blank=False,
                        id="f-sandbox",
                    )
            with Horizontal(classes="buttons"):
                yield Button("Start (ctrl+s)", variant="primary", id="start")
                yield Button("Close (esc)", id="close")

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = not self.app.is_headless
        self.query_one("#f-question", Input).focus()

    def params(self) -> dict[str, Any]:
        def val(key: str) -> str:
            return self.query_one(f"#f-{key}", Input).value.strip()

        params: dict[str, Any] = {"question": val("question"), "workspace": val("workspace")}
        models = {k: val(k) for k in ("root", "sub") if val(k)}
        if models:
            params["models"] = models
        sandbox = self.query_one("#f-sandbox", Select).value
        if sandbox:
            params["sandbox"] = sandbox
        budgets: dict[str, Any] = {}
        for key in ("max_iterations", "max_depth"):
            if val(key):
                budgets[key] = int(val(key))
        for key in ("max_seconds", "max_usd"):
            if val(key):
                budgets[key] = float(val(key))
        if budgets:
            params["budgets"] = budgets
        return params

    def action_start(self) -> None:
        try:
            params = self.params()
        except ValueError as exc:
            self.notify(f"bad budget: {exc}", severity="error")
            return
        if not params["question"]:
            self.notify("a question is needed", severity="error")
            return
        self.dismiss(params)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#start")
    def _start(self) -> None:
        self.action_start()

    @on(Button.Pressed, "#close")
    def _close(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_start()


class WorkspaceScreen(Screen):
    """A workspace's variables (type, size, preview), a page at a time with a name filter,
    and a cell to run by hand."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("ctrl+r", "run_cell", "Run cell"),
        Binding("ctrl+n", "more", "More vars"),
        Binding("f5", "refresh", "Refresh"),
        Binding("?", "app.help", "Help"),
    ]

    def __init__(self, workspace: str | None = None) -> None:
        super().__init__()
        self.workspace = workspace or ""
        self.match = ""
        self.shown: set[str] = set()
        self.total: int | None = None
        self.next_offset: int | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(classes="field"):
            yield Label("workspace", classes="name")
            yield Input(value=self.workspace, id="ws", classes="compact")
        with Horizontal(classes="field"):
            yield Label("name contains", classes="name")
            yield Input(id="match", classes="compact", placeholder="all variables")
            yield Label("", id="vars-count")
        yield DataTable(id="vars", cursor_type="row")
        yield TextArea.code_editor("", language="python", id="cell")
        yield LineView(id="cell-output")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#vars", DataTable)
        for name in ("name", "type", "size", "preview"):
            table.add_column(name, key=name)
        for box in ("#ws", "#match"):
            self.query_one(box, Input).cursor_blink = not self.app.is_headless
        self.query_one("#cell", TextArea).cursor_blink = not self.app.is_headless
        self.query_one("#cell-output", LineView).set_lines(
            [("ctrl+r runs the cell in the workspace's REPL", None)]
        )
        if self.workspace:
            self.refresh_vars()

    @on(Input.Submitted, "#ws")
    def _ws(self, event: Input.Submitted) -> None:
        self.workspace = event.value.strip()
        self.refresh_vars()

    @on(Input.Submitted, "#match")
    def _match(self, event: Input.Submitted) -> None:
        self.match = event.value.strip()
        self.refresh_vars()

    def action_refresh(self) -> None:
        self.refresh_vars()

    def action_more(self) -> None:
        if self.next_offset is None:
            self.notify("every variable is shown")
            return
        self.load_vars(self.next_offset)

    def refresh_vars(self) -> None:
        self.load_vars(0)

    @work(exclusive=True, group="vars")
    async def load_vars(self, offset: int) -> None:
        """Show the page of variables from ``offset``: the table starts again at 0, else the
        page is added below what is shown (a name already shown is not added twice: a cell
        may have added variables before it in between)."""
        table = self.query_one("#vars", DataTable)
        try:
            result = await self.app.backend.variables(self.workspace, offset, self.match)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.notify(str(exc), severity="error")
            return
        if offset == 0:
            table.clear()
            self.shown = set()
            for name, reason in (result.get("not_restored") or {}).items():
                table.add_row(
                    Text(name, style="red"), "not restored", "-", Text(one_line(reason, 60))
                )
        for var in result.get("variables") or []:
            name = str(var.get("name", ""))
            if name in self.shown:
                continue
            self.shown.add(name)
            table.add_row(
                Text(name),
                Text(str(var.get("type", ""))),
                "-" if var.get("size") is None else str(var["size"]),
                Text(one_line(var.get("preview"), 60)),
                key=name,
            )
        # a daemon from before paging sends them all, without total or next_offset
        self.total = result.get("total", len(self.shown))
        self.next_offset = result.get("next_offset")
        self.query_one("#vars-count", Label).update(self.count_text())

    def count_text(self) -> str:
        """``"1,000 of 200,000 · ctrl+n more"``, ``"12 of 12"``."""
        text = f"{len(self.shown):,} of {self.total or 0:,}"
        return text + (" · ctrl+n more" if self.next_offset is not None else "")

    def action_run_cell(self) -> None:
        self.run_cell(self.query_one("#cell", TextArea).text)

    @work(exclusive=True, group="cell")
    async def run_cell(self, code: str) -> None:
        out = self.query_one("#cell-output", LineView)
        out.set_lines([("running…", None)])
        try:
            result = await self.app.backend.exec(self.workspace, code)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            out.set_lines([(str(exc), Style(color="red", bold=True))])
            return
        red, yellow = Style(color="red", bold=True), Style(color="yellow")
        lines: list = list((result.get("stdout") or "").splitlines())
        lines += [(line, yellow) for line in (result.get("stderr") or "").splitlines()]
        lines += [(line, red) for line in (result.get("error") or "").splitlines()]
        lines.append((f"done in {fmt_duration(result.get('duration_s'))}", Style(dim=True)))
        out.set_lines(lines)
        self.refresh_vars()


HELP = """\
[b]rlmd tui[/b] — browse, search and follow trajectories; launch tasks

[b]Runs[/b]
  enter open run   / search (prefix/substring; status:X ws:X model:X filters)
  home/end first/last run
  s next sort column   S reverse   r reload   n new task
  x cancel the selected task   w workspace   q quit
[b]Trajectory[/b]
  ↑↓ move   enter/space expand   o output pane   t tree
  f follow a running run   c copy answer   e export JSON (to $RLMD_HOME/exports)
  v open the path:line cited here in $EDITOR   x cancel   w workspace   esc back
[b]Output pane[/b]
  ↑↓ pgup pgdn scroll   home/end top/bottom   ←→ sideways
[b]Launch[/b]  ctrl+s start   esc close
[b]Workspace[/b]  enter load / filter names   ctrl+n more variables
  ctrl+r run cell   f5 refresh   esc back

Without a daemon the TUI browses the store read-only.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,?", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(HELP)


def dump_tree(tree: dict[str, Any]) -> str:
    return json.dumps(tree, indent=2, default=str)
