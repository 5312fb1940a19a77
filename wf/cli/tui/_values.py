"""A run's input, output and error as a tree of pretty JSON, large values collapsed.

Values are wf's tagged JSON (``{"$t": "datetime", "v": ...}``); a tag is shown as a dim
``‹datetime›`` before its value. A container is drawn expanded only while it is small; bigger ones
start collapsed and their items are built when the user expands them, so a megabyte of output
costs nothing until asked for.

Every label is ``rich.text.Text`` (never markup), its control characters shown (``visible``):
a value is anyone's text.
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from wf.admin._words import visible

SMALL = 12
"""A container with at most this many items (and not too deep) starts expanded."""
SHOWN = 200
"""Items listed per container; the rest are summarised in one line."""
STRING = 160
"""Characters of a string shown in a leaf before it is cut."""

_Pending = tuple[Any, int]
"""Data of a collapsed container not built yet: (its value, its depth)."""


class ValuesTree(Tree[Any]):
    """Input, output and error of one run. ``show`` replaces what it displays."""

    DEFAULT_CSS = """
    ValuesTree { background: $surface; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("values", **kwargs)
        self.show_root = False
        self.guide_depth = 3
        self._shown: Any = object()

    def show(self, run: dict[str, Any]) -> None:
        """Display the run's values (a no-op when they did not change: keeps the expansion)."""
        values = (run.get("input"), run.get("output"), run.get("error"), run["status"])
        if values == self._shown:
            return
        self._shown = values
        self.clear()
        self.root.expand()
        _add_input(self.root, run.get("input"))
        if run["status"] == "completed":
            _add(self.root, "output", run.get("output"), 0)
        else:
            self.root.add_leaf(Text.assemble(("output", "bold"), ": ", ("none yet", "dim")))
        if run.get("error"):
            _add_error(self.root, run["error"])

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[Any]) -> None:
        """Build a collapsed container's items the first time it is opened."""
        node = event.node
        if isinstance(node.data, tuple):
            value, depth = node.data
            node.data = None
            _fill(node, value, depth)


def _add_input(root: TreeNode[Any], encoded: Any) -> None:
    # The record stores the call as {"args": [...], "kwargs": {...}}: show the two parts.
    if isinstance(encoded, dict) and set(encoded) == {"args", "kwargs"}:
        node = root.add(Text("input", style="bold"), expand=True)
        if encoded["args"]:
            _add(node, "args", encoded["args"], 1)
        if encoded["kwargs"] or not encoded["args"]:
            _add(node, "kwargs", encoded["kwargs"], 1)
    else:
        _add(root, "input", encoded, 0)


def _add_error(root: TreeNode[Any], error: dict[str, Any]) -> None:
    node = root.add(Text("error", style="bold red"), expand=True)
    for key in ("type", "message"):
        if error.get(key) is not None:
            node.add_leaf(Text.assemble((key, "bold"), ": ", visible(error[key])))
    if error.get("fields"):
        _add(node, "fields", error["fields"], 1)
    traceback = error.get("traceback")
    if traceback:
        lines = str(traceback).rstrip().splitlines()
        trace = node.add(Text.assemble(("traceback", "bold"), f" ({len(lines)} lines)"))
        for line in lines:
            trace.add_leaf(Text(visible(line), style="dim"))


def _add(parent: TreeNode[Any], key: str, value: Any, depth: int) -> None:
    tag, inner = _untag(value)
    label = Text.assemble((visible(key), "bold"), ": ")
    if tag:
        label.append(f"‹{visible(tag)}› ", style="dim")
    if isinstance(inner, dict | list) and inner:
        label.append(_summary(inner), style="dim")
        expand = len(inner) <= SMALL and depth < 3 and _small(inner)
        node = parent.add(label, expand=expand)
        if expand:
            _fill(node, inner, depth + 1)
        else:
            node.data = (inner, depth + 1)
            node.allow_expand = True
        return
    label.append_text(_scalar(inner))
    parent.add_leaf(label)


def _fill(node: TreeNode[Any], value: dict[str, Any] | list[Any], depth: int) -> None:
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    for key, item in items[:SHOWN]:
        _add(node, str(key), item, depth)
    if len(items) > SHOWN:
        node.add_leaf(Text(f"… {len(items) - SHOWN} more (see wf inspect --json)", style="dim"))


def _untag(value: Any) -> tuple[str | None, Any]:
    """``("datetime", "2027-…")`` for a tagged value, ``(None, value)`` for plain JSON."""
    if isinstance(value, dict) and "$t" in value:
        tag = str(value["$t"])
        if value.get("cls"):
            tag += f" {value['cls']}"
        inner = value.get("v", value.get("json"))
        if tag == "dict" and isinstance(inner, dict):
            return None, inner  # an escaped user dict: show it as the dict it is
        return tag, inner
    return None, value


def _summary(value: dict[str, Any] | list[Any]) -> str:
    if isinstance(value, dict):
        return f"{{{len(value)} key{'s' if len(value) != 1 else ''}}}"
    return f"[{len(value)} item{'s' if len(value) != 1 else ''}]"


def _small(value: Any) -> bool:
    try:
        return len(json.dumps(value)) <= 2000
    except (TypeError, ValueError):
        return False


def _scalar(value: Any) -> Text:
    if isinstance(value, str):
        shown = value if len(value) <= STRING else value[:STRING] + f"… ({len(value)} chars)"
        return Text(visible(json.dumps(shown, ensure_ascii=False)), style="green")
    if value is None or isinstance(value, bool):
        return Text(json.dumps(value), style="italic magenta")
    if isinstance(value, int | float):
        return Text(json.dumps(value), style="cyan")
    if isinstance(value, dict | list):
        return Text(json.dumps(value), style="dim")  # empty container
    return Text(visible(repr(value)))
