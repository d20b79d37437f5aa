"""Events: what happened to an object, written by its controllers and kubelets."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource
from daemons.api.times import human_duration, parse_time

Obj = dict[str, Any]


def _event_last_seen(event: Obj, now: datetime) -> str:
    when = parse_time(event.get("lastTimestamp") or event.get("eventTime")
                      or event.get("metadata", {}).get("creationTimestamp"))
    return human_duration((now - when).total_seconds()) if when else "<unknown>"


def _event_object(event: Obj, _now: datetime) -> str:
    involved = event.get("involvedObject") or {}
    return f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}"


def _event_source(event: Obj, _now: datetime) -> str:
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    return f"{component}, {source['host']}" if source.get("host") else component


COLUMNS = (
    Column("Last Seen", "string", _event_last_seen),
    Column("Type", "string", lambda o, _n: o.get("type") or "Normal"),
    Column("Reason", "string", lambda o, _n: o.get("reason") or ""),
    Column("Object", "string", _event_object),
    Column("Subobject", "string", lambda o, _n: (o.get("involvedObject") or {}).get("fieldPath") or "", priority=1),
    Column("Source", "string", _event_source, priority=1),
    Column("Message", "string", lambda o, _n: (o.get("message") or "").strip()),
    Column("First Seen", "string", lambda o, now: human_duration(
        (now - (parse_time(o.get("firstTimestamp")) or now)).total_seconds()), priority=1),
    Column("Count", "string", lambda o, _n: str(o.get("count") or 1), priority=1),
    Column("Name", "string", tables.name, priority=1, format="name"),
)

RESOURCE = Resource("Event", "events", models.Event, short_names=("ev",), has_status=False, columns=COLUMNS,
                    propagates_deletion=False)
