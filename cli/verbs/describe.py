"""``kubectl describe``: an object as readable text, followed by the events about it."""

from __future__ import annotations

import contextlib
import re
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from cli.printers import cell_text, tabwrite
from cli.session import Session, resource_type, type_and_names
from cli.verbs import Selector
from daemons.api.errors import NotFound
from daemons.api.resources import Resource
from daemons.api.times import age

SHOWN_FIRST = ("name", "namespace", "labels", "annotations", "managedFields")
ACRONYMS = ("API", "URL", "UID", "OSB", "GUID", "IP", "CIDR", "DNS")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|-")


def describe(
    ctx: typer.Context,
    args: Annotated[list[str], typer.Argument(help="TYPE [NAME...] or TYPE/NAME...")],
    selector: Selector = None,
) -> None:
    """Show details of objects, and the events that concern them."""
    session: Session = ctx.obj
    first = True
    for row, names in type_and_names(args):
        for obj in _objects(session, row, names, selector):
            sections = _routes(session, obj) if row.kind == "DNS" else []
            text = describe_text(obj, row.namespaced, _events(session, row, obj), datetime.now(UTC), sections)
            print(text if first else f"\n\n{text}")
            first = False
    if first and not session.failed:
        print(f"No resources found in {session.namespace} namespace.", file=sys.stderr)


def _objects(session: Session, row: Resource, names: list[str], selector: str | None) -> list[dict[str, Any]]:
    if not names:
        return session.client.list(row, session.namespace, label_selector=selector).get("items") or []
    found = []
    for name in names:
        with session.each_object():
            found.append(session.client.get(row, name, session.namespace))
    return found


def _events(session: Session, row: Resource, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The events whose involvedObject is this object (for a cluster-scoped one, in any namespace)."""
    metadata = obj["metadata"]
    selector = f"involvedObject.name={metadata['name']},involvedObject.kind={row.kind}"
    if row.namespaced:
        selector += f",involvedObject.namespace={metadata.get('namespace', '')}"
    listed = session.client.list(resource_type("events"), metadata.get("namespace"), field_selector=selector,
                                 all_namespaces=not row.namespaced)
    return listed.get("items") or []


def _routes(session: Session, dns: dict[str, Any]) -> list[str]:
    """The Routes section of a DNS object, from the Services and Endpoints its paths name, read now."""
    namespace = dns["metadata"].get("namespace")
    services: dict[str, dict[str, Any]] = {}
    endpoints: dict[str, dict[str, Any]] = {}
    for name in sorted({path.get("serviceName", "") for path in (dns.get("spec") or {}).get("paths") or []}):
        for kind, found in (("services", services), ("endpoints", endpoints)):
            with contextlib.suppress(NotFound):
                found[name] = session.client.get(resource_type(kind), name, namespace)
    return route_lines(dns, services, endpoints)


def _ready_endpoints(service_port: dict[str, Any], endpoints: dict[str, Any] | None) -> int:
    """Ready addresses behind one port of a Service: those of the subsets that carry the port's name."""
    name = service_port.get("name") or ""
    ready: set[str] = set()
    for subset in (endpoints or {}).get("subsets") or []:
        if any((port.get("name") or "") == name for port in subset.get("ports") or []):
            ready.update(address.get("ip", "") for address in subset.get("addresses") or [])
    return len(ready)


def route_lines(dns: dict[str, Any], services: dict[str, dict[str, Any]],
                endpoints: dict[str, dict[str, Any]]) -> list[str]:
    """``Routes:`` then ``http://<host><path> -> <svc>:<port> (<ClusterIP>:<port>, N ready endpoints)`` per path;
    ``services`` and ``endpoints`` by name hold those that exist."""
    spec = dns.get("spec") or {}
    lines = []
    for path in spec.get("paths") or []:
        name, port = path.get("serviceName", ""), path.get("servicePort")
        target = f"  http://{spec.get('host', '')}{path.get('path', '')} -> {name}:{port}"
        service = services.get(name)
        if service is None:
            lines.append(f"{target} (service not found)")
            continue
        service_spec = service.get("spec") or {}
        service_port = next((entry for entry in service_spec.get("ports") or [] if entry.get("port") == port), None)
        if service_port is None:
            lines.append(f"{target} (service has no port {port})")
            continue
        ready = _ready_endpoints(service_port, endpoints.get(name))
        cluster_ip = service_spec.get("clusterIP") or "<none>"
        lines.append(f"{target} ({cluster_ip}:{port}, {ready} ready endpoint{'' if ready == 1 else 's'})")
    return ["Routes:", *lines] if lines else ["Routes:\t<none>"]


def smart_label(field: str) -> str:
    """``podIP`` → ``Pod IP``, ``apiVersion`` → ``API Version``; keys with other characters stay as they are."""
    if not re.fullmatch(r"[A-Za-z-]+", field):
        return field
    words = [word for word in _WORD.findall(field) if word != "-"]
    return " ".join(word.upper() if word.upper() in ACRONYMS else word[0].upper() + word[1:] for word in words)


def _content(mapping: dict[str, Any], level: int) -> list[str]:
    """Nested fields as ``Label:<tab>value`` lines, two spaces deeper per level; list items start with ``- ``."""
    indent = "  " * level
    lines = []
    for key in sorted(mapping):
        value = mapping[key]
        if not isinstance(value, dict | list):
            lines.append(f"{indent}{smart_label(key)}:\t{cell_text(value)}")
            continue
        lines.append(f"{indent}{smart_label(key)}:")
        if isinstance(value, dict):
            lines.extend(_content(value, level + 1))
            continue
        for item in value:
            if isinstance(item, dict) and item:
                nested = _content(item, level + 1)
                nested[0] = f"{indent}- {nested[0][len(indent) + 2:]}"
                lines.extend(nested)
            else:
                lines.append(f"{indent}  {cell_text(item)}")
    return lines


def _multiline(title: str, entries: list[str]) -> list[str]:
    """``Labels:<tab>a=b`` then one ``<tab>c=d`` line per further entry, as kubectl aligns them."""
    if not entries:
        return [f"{title}:\t<none>"]
    return [f"{title}:\t{entries[0]}"] + [f"\t{entry}" for entry in entries[1:]]


def _event_row(event: dict[str, Any], now: datetime) -> str:
    source = event.get("source") or {}
    first = event.get("eventTime") or event.get("firstTimestamp") or event["metadata"].get("creationTimestamp")
    interval = age(first, now)
    if (event.get("count") or 1) > 1:
        interval = f"{age(event.get('lastTimestamp') or first, now)} (x{event['count']} over {interval})"
    origin = source.get("component") or event.get("reportingController") or ""
    host = source.get("host") or event.get("reportingInstance")
    if host:
        origin = f"{origin}, {host}"
    return "\t".join(["  " + (event.get("type") or ""), event.get("reason") or "", interval, origin,
                      (event.get("message") or "").strip()])


def describe_text(obj: dict[str, Any], namespaced: bool, events: list[dict[str, Any]], now: datetime,
                  sections: list[str] | None = None) -> str:
    """The whole description: identity, labels, annotations, every other field, the kind's own ``sections``
    (lines read from other objects), then the events table."""
    metadata = obj.get("metadata") or {}
    lines = [f"Name:\t{metadata.get('name', '')}"]
    if namespaced:
        lines.append(f"Namespace:\t{metadata.get('namespace', '')}")
    lines += _multiline("Labels", [f"{key}={value}" for key, value in sorted((metadata.get("labels") or {}).items())])
    lines += _multiline("Annotations", [f"{key}: {value}" for key, value in
                                        sorted((metadata.get("annotations") or {}).items())])
    rest = {key: value for key, value in obj.items() if key != "metadata"}
    if set(metadata) - set(SHOWN_FIRST):
        rest["metadata"] = {key: value for key, value in metadata.items() if key not in SHOWN_FIRST}
    lines += _content(rest, 0)
    lines += sections or []
    if not events:
        return "\n".join(tabwrite([*lines, "Events:\t<none>"], 2))

    def when(event: dict[str, Any]) -> str:
        return event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or ""

    table = ["  Type\tReason\tAge\tFrom\tMessage", "  ----\t------\t----\t----\t-------"]
    table += [_event_row(event, now) for event in sorted(events, key=when)]
    return "\n".join([*tabwrite(lines, 2), "Events:", *tabwrite(table, 2)])
