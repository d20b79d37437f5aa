"""Recording Kubernetes Events (Scheduled, Pulled, BackOff, ...) the way components do.

A repeat of the same reason and message for the same object bumps the count of
the existing Event instead of creating another, as Kubernetes' event recorder
does; a failure to record is logged and never fails the caller's work.
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any, Literal

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, ConnectionFailed, NotFound
from daemons.api.resources import by_kind
from daemons.api.times import rfc3339

log = logging.getLogger(__name__)

EVENTS = by_kind("v1", "Event")
EventType = Literal["Normal", "Warning"]


def involved_object(obj: dict[str, Any], field_path: str | None = None) -> dict[str, Any]:
    metadata = obj.get("metadata", {})
    reference = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", ""), "name": metadata.get("name"),
                 "uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")}
    if metadata.get("namespace"):
        reference["namespace"] = metadata["namespace"]
    if field_path:
        reference["fieldPath"] = field_path
    return reference


class EventRecorder:
    """Creates Events for one component (and host); thread-safe."""

    def __init__(self, client: ApiClient, component: str, host: str | None = None) -> None:
        assert EVENTS is not None
        self.client = client
        self.component = component
        self.host = host
        self._recent: dict[tuple[str, str, str, str], str] = {}
        self._lock = threading.Lock()

    def record(self, obj: dict[str, Any], event_type: EventType, reason: str, message: str,
               field_path: str | None = None) -> None:
        """Record that ``reason`` happened to ``obj``; never raises."""
        metadata = obj.get("metadata", {})
        namespace = metadata.get("namespace") or "default"
        key = (str(metadata.get("uid")), reason, message, field_path or "")
        try:
            with self._lock:
                existing = self._recent.get(key)
            if existing and self._bump(namespace, existing):
                return
            name = f"{metadata.get('name')}.{secrets.token_hex(8)}"
            now = rfc3339()
            event = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": involved_object(obj, field_path),
                "reason": reason, "message": message, "type": event_type, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": self.component, **({"host": self.host} if self.host else {})},
                "reportingComponent": self.component, "reportingInstance": self.host or "",
            }
            self.client.create(EVENTS, event, namespace)
            with self._lock:
                if len(self._recent) > 4096:
                    self._recent.clear()
                self._recent[key] = name
            log.debug("event %s %s for %s/%s: %s", event_type, reason, namespace, metadata.get("name"), message)
        except (APIError, ConnectionFailed) as error:
            log.warning("could not record event %s for %s/%s: %s", reason, namespace, metadata.get("name"), error)

    def _bump(self, namespace: str, name: str) -> bool:
        try:
            current = self.client.get(EVENTS, name, namespace)
            self.client.patch(EVENTS, name, {"count": int(current.get("count") or 1) + 1, "lastTimestamp": rfc3339(),
                                             "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}},
                              namespace)
            return True
        except NotFound:
            return False
        except APIError:
            return True  # a lost race on the count: the event is recorded either way
