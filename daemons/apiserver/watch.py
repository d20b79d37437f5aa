"""WATCH for HTTP clients: etcd history from a resourceVersion, filtered by selectors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from daemons.api.errors import BadRequest
from daemons.api.resources import Resource
from daemons.api.selectors import FieldSelectorQuery, LabelSelectorQuery
from daemons.apiserver.registry import Registry, parse_selectors
from daemons.apiserver.storage import StoredEvent

Obj = dict[str, Any]


def selected_event(event: StoredEvent, labels: LabelSelectorQuery,
                   fields: FieldSelectorQuery) -> tuple[str, Obj] | None:
    """The event a selecting watcher sees: an object moving out of the selection is DELETED for it, into it ADDED."""
    def selected(obj: Obj | None) -> bool:
        return obj is not None and labels.matches(obj.get("metadata", {}).get("labels")) and fields.matches(obj)

    now_selected = selected(event.object)
    if event.type == "ADDED":
        return ("ADDED", event.object) if now_selected else None
    if event.type == "DELETED":
        return ("DELETED", event.object) if now_selected else None
    was_selected = selected(event.previous)
    if now_selected:
        return ("MODIFIED" if was_selected else "ADDED"), event.object
    if was_selected:
        return "DELETED", event.object
    return None


def belongs(resource: Resource, namespace: str | None, key: str) -> bool:
    """Whether an etcd key under the resource prefix is an object of this watch (not a longer-named sibling)."""
    rest = key[len(resource.storage_prefix(namespace)):]
    expected_slashes = 1 if resource.namespaced and not namespace else 0
    return rest.count("/") == expected_slashes


async def object_events(
    registry: Registry,
    resource: Resource,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    resource_version: str | None,
) -> AsyncIterator[tuple[str, Obj]]:
    """Yield ``(type, object)`` from ``resource_version`` on; without one, the current state first as ADDED.

    ``Gone`` is raised before the first yield when the revision is compacted.
    """
    labels, fields = parse_selectors(label_selector, field_selector)
    initial: list[Obj] = []
    if resource_version in (None, "", "0"):
        initial, revision = await registry.list(resource, namespace, label_selector, field_selector)
    else:
        try:
            revision = int(resource_version)
        except ValueError:
            raise BadRequest(f"invalid resourceVersion {resource_version!r}") from None
    events = await registry.storage.watch(resource.storage_prefix(namespace), revision + 1)
    return _stream(initial, events, resource, namespace, labels, fields)


async def _stream(initial: list[Obj], events: AsyncIterator[StoredEvent], resource: Resource,
                  namespace: str | None, labels: LabelSelectorQuery,
                  fields: FieldSelectorQuery) -> AsyncIterator[tuple[str, Obj]]:
    for obj in initial:
        yield "ADDED", obj
    async for event in events:
        if not belongs(resource, namespace, event.key):
            continue
        chosen = selected_event(event, labels, fields)
        if chosen:
            yield chosen
