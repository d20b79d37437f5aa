"""Printers: kubectl's table alignment, server Table layouts, YAML/JSON dumps."""

from __future__ import annotations

import json

import pytest
import yaml

from cli.printers import TableLayout, as_list, cell_text, dump, tabwrite

pytestmark = pytest.mark.unit

COLUMNS = [
    {"name": "Name", "type": "string", "format": "name", "priority": 0},
    {"name": "Ready", "type": "string", "format": "", "priority": 0},
    {"name": "IP", "type": "string", "format": "", "priority": 1},
    {"name": "Age", "type": "string", "format": "", "priority": 0},
]
ROW = {"cells": ["web", "1/1", "10.0.0.5", "5m"],
       "object": {"metadata": {"name": "web", "namespace": "prod", "labels": {"tier": "front", "app": "web"}}}}


def test_tabwrite_pads_to_widest_cell_plus_padding_and_leaves_last_column_bare():
    lines = tabwrite(["NAME\tREADY\tAGE", "a-long-name\t1/1\t5m", "b\t10/10\t3d"], 3)
    assert lines == ["NAME          READY   AGE", "a-long-name   1/1     5m", "b             10/10   3d"]


def test_tabwrite_aligns_runs_of_lines_separately_as_go_tabwriter_does():
    lines = tabwrite(["Name:\tweb", "Annotations:\t<none>", "Spec:", "  Replicas:\t3", "Events:\t<none>"], 2)
    assert lines == ["Name:         web", "Annotations:  <none>", "Spec:", "  Replicas:  3", "Events:      <none>"]


def test_cells_print_like_go():
    assert [cell_text(v) for v in (None, True, 3.0, 2.5, "x", 7)] == ["<none>", "true", "3", "2.5", "x", "7"]


def test_layout_hides_priority_columns_unless_wide():
    layout = TableLayout(COLUMNS)
    assert layout.header() == "NAME\tREADY\tAGE"
    assert layout.row(ROW) == "web\t1/1\t5m"
    wide = TableLayout(COLUMNS, wide=True)
    assert wide.header() == "NAME\tREADY\tIP\tAGE"
    assert wide.row(ROW) == "web\t1/1\t10.0.0.5\t5m"


def test_layout_adds_namespace_labels_and_kind_prefix():
    layout = TableLayout(COLUMNS, namespace=True, labels=True, kind="pod")
    assert layout.header() == "NAMESPACE\tNAME\tREADY\tAGE\tLABELS"
    assert layout.row(ROW) == "prod\tpod/web\t1/1\t5m\tapp=web,tier=front"
    assert TableLayout(COLUMNS, labels=True).row({"cells": ["x", "0/1", None, "1s"]}) == "x\t0/1\t1s\t<none>"


def test_dumps():
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web", "creationTimestamp": "2024-01-01T00:00:00Z"}}
    text = dump(obj, "yaml")
    assert text.splitlines()[0] == "apiVersion: v1"
    assert 'creationTimestamp: "2024-01-01T00:00:00Z"' in text
    assert yaml.safe_load(text) == obj
    assert dump(obj, "json").splitlines()[1] == '    "kind": "Pod",'
    assert json.loads(dump(as_list([obj]), "json")) == {"apiVersion": "v1", "items": [obj], "kind": "List",
                                                        "metadata": {"resourceVersion": ""}}
