"""Output as kubectl lays it out: tab-aligned tables, ages, YAML/JSON dumps and ``kind/name`` lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

OUTPUT_FORMATS = ("json", "name", "wide", "yaml")


def tabwrite(lines: list[str], padding: int) -> list[str]:
    """Align tab-separated cells the way Go's ``text/tabwriter`` (which kubectl prints through) does.

    A column is as wide as its widest cell plus ``padding``, measured over each run of consecutive
    lines that have a cell in that column; the last cell of a line is never padded.
    """
    cells = [line.split("\t") for line in lines]
    out = ["" for _ in cells]

    def block(first: int, last: int, column: int) -> None:
        line = first
        while line < last:
            if len(cells[line]) - 1 <= column:
                line += 1
                continue
            start = line
            while line < last and len(cells[line]) - 1 > column:
                line += 1
            width = max(len(cells[i][column]) for i in range(start, line)) + padding
            for i in range(start, line):
                out[i] += cells[i][column].ljust(width)
            block(start, line, column + 1)

    block(0, len(cells), 0)
    for i, row in enumerate(cells):
        out[i] += row[-1]
    return [line.rstrip() if not cells[i][-1] else line for i, line in enumerate(out)]


def cell_text(value: Any) -> str:
    """A value as Go's ``%v`` shows it in a table cell; a missing value is ``<none>``."""
    if value is None:
        return "<none>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def labels_text(labels: dict[str, str] | None) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted((labels or {}).items())) or "<none>"


@dataclass(frozen=True)
class TableLayout:
    """Which columns of a server-side ``Table`` to show and what to add, for the first page and every watch event.

    ``columns`` are the Table's ``columnDefinitions``; ``priority > 0`` columns only show with ``-o wide``.
    """

    columns: list[dict[str, Any]]
    wide: bool = False
    namespace: bool = False
    labels: bool = False
    kind: str | None = None  # prefix NAME cells with "pod/" when several kinds are printed

    def _shown(self) -> list[int]:
        return [i for i, column in enumerate(self.columns) if self.wide or not column.get("priority")]

    def header(self) -> str:
        names = [self.columns[i]["name"].upper() for i in self._shown()]
        return "\t".join((["NAMESPACE"] if self.namespace else []) + names + (["LABELS"] if self.labels else []))

    def row(self, row: dict[str, Any]) -> str:
        cells = row.get("cells") or []
        metadata = (row.get("object") or {}).get("metadata") or {}
        shown = []
        for i in self._shown():
            text = cell_text(cells[i] if i < len(cells) else None)
            if self.kind and self.columns[i].get("format") == "name":
                text = f"{self.kind}/{text}"
            shown.append(text)
        if self.namespace:
            shown.insert(0, metadata.get("namespace") or "")
        if self.labels:
            shown.append(labels_text(metadata.get("labels")))
        return "\t".join(shown)


class _KubeDumper(yaml.SafeDumper):
    """Quote with double quotes where quoting is needed, as kubectl's YAML does."""

    def choose_scalar_style(self) -> str:
        style = super().choose_scalar_style()
        return '"' if style == "'" else style


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Several objects as kubectl prints them: one ``v1`` ``List``."""
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def dump(obj: dict[str, Any], output: str) -> str:
    """``-o yaml`` (keys sorted, as kubectl's YAML is) or ``-o json`` (4-space indent, wire order)."""
    if output == "json":
        return json.dumps(obj, indent=4, ensure_ascii=False)
    return yaml.dump(obj, Dumper=_KubeDumper, sort_keys=True, default_flow_style=False, allow_unicode=True,
                     width=1 << 20).rstrip("\n")
