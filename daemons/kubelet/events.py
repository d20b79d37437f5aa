"""Events recorded off the sync path: a pod's sync never waits for the apiserver to store one."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from daemons.api.client import ApiClient
from daemons.machinery.events import EventRecorder, EventType

log = logging.getLogger(__name__)

MAX_PENDING = 1000


class BackgroundRecorder(EventRecorder):
    """An ``EventRecorder`` whose ``record`` queues the event for a thread of its own, in order."""

    def __init__(self, client: ApiClient, component: str, host: str | None = None) -> None:
        super().__init__(client, component, host)
        self._pending: queue.Queue[tuple[dict[str, Any], EventType, str, str, str | None]] = queue.Queue(MAX_PENDING)
        threading.Thread(target=self._drain, name="events", daemon=True).start()

    def record(self, obj: dict[str, Any], event_type: EventType, reason: str, message: str,
               field_path: str | None = None) -> None:
        try:
            self._pending.put_nowait((obj, event_type, reason, message, field_path))
        except queue.Full:
            metadata = obj.get("metadata") or {}
            log.warning("dropping event %s for %s/%s: %d events wait already", reason, metadata.get("namespace"),
                        metadata.get("name"), MAX_PENDING)

    def _drain(self) -> None:
        while True:
            super().record(*self._pending.get())
