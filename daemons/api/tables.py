"""Server-side ``Table`` rendering from a row's columns, and the cell helpers the kinds' columns share.

Pure functions of the objects and the current time, so both kubectls print
the same thing and unit tests can check every column.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemons.api import times
from daemons.api.bundle import Column
from daemons.api.selectors import LabelSelectorQuery

if TYPE_CHECKING:
    from daemons.api.bundle import Resource

Obj = dict[str, Any]

NONE = "<none>"
UNKNOWN = "<unknown>"


def age(obj: Obj, now: datetime) -> str:
    """AGE: since the object's creationTimestamp."""
    return times.age(obj.get("metadata", {}).get("creationTimestamp"), now)


def name(obj: Obj, _now: datetime) -> str:
    return obj.get("metadata", {}).get("name", "")


NAME = Column("Name", "string", name, format="name")
AGE = Column("Age", "string", age)


def columns_of(resource: Resource) -> tuple[Column, ...]:
    """The row's columns with NAME first, unless the row places NAME itself (Events show it last); a row
    without columns gets NAME and AGE."""
    columns = resource.columns or (AGE,)
    if any(column.name == "Name" for column in columns):
        return columns
    return (NAME, *columns)


def column_definitions(resource: Resource) -> list[dict[str, Any]]:
    return [{"name": column.name, "type": column.type, "format": column.format, "description": column.description,
             "priority": column.priority} for column in columns_of(resource)]


def partial_metadata(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table(resource: Resource, objects: list[Obj], resource_version: str, now: datetime | None = None,
          include_object: str = "Metadata") -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``objects``; ``include_object`` as the query parameter says."""
    now = now or datetime.now(UTC)
    columns = columns_of(resource)
    rows = []
    for obj in objects:
        row: Obj = {"cells": [column.cell(obj, now) for column in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": column_definitions(resource),
        "rows": rows,
    }


def template_containers(obj: Obj) -> tuple[str, str]:
    """CONTAINERS and IMAGES of a workload: its pod template's container names and images."""
    containers = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    return (",".join(c.get("name", "") for c in containers) or NONE,
            ",".join(c.get("image", "") for c in containers) or NONE)


def selector_text(obj: Obj) -> str:
    """SELECTOR of a workload: its label selector as kubectl prints it."""
    return str(LabelSelectorQuery.from_label_selector(obj.get("spec", {}).get("selector"))) or NONE
