"""The watch cache: every object under ``/registry/``, kept current by one etcd watch.

Writes read their preconditions (the current object, whether the namespace
exists) from here instead of paying an etcd round trip. The cache may lag etcd
by a moment, so it is only ever a first guess: a compare-and-swap that fails
against it is retried with a fresh read from etcd, and a miss falls through to
etcd as well. Reads that clients make (GET, LIST) stay consistent reads from
etcd, as Kubernetes serves them by default.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from daemons.api.errors import Gone, ServiceUnavailable
from daemons.apiserver.storage import Storage

log = logging.getLogger(__name__)

PREFIX = "/registry/"


class WatchCache:
    def __init__(self, storage: Storage, max_backoff: float = 5.0) -> None:
        self.storage = storage
        self.max_backoff = max_backoff
        self.revision = 0
        self._objects: dict[str, dict[str, Any]] = {}
        self._synced = False

    @property
    def synced(self) -> bool:
        return self._synced

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached object (shared: callers must not mutate it), or None when absent or not synced."""
        return self._objects.get(key) if self._synced else None

    async def run(self) -> None:
        """List, then follow the watch; relist after any interruption. Runs until cancelled."""
        backoff = 0.2
        while True:
            try:
                items, revision = await self.storage.list_keyed(PREFIX)
                self._objects = dict(items)
                self.revision = revision
                self._synced = True
                log.info("watch cache holds %d objects at revision %d", len(self._objects), revision)
                backoff = 0.2
                events = await self.storage.watch(PREFIX, revision + 1)
                async for event in events:
                    if event.type == "DELETED":
                        self._objects.pop(event.key, None)
                    else:
                        self._objects[event.key] = event.object
                    self.revision = event.revision
            except (Gone, ServiceUnavailable) as error:
                log.warning("watch cache interrupted (%s); relisting in %.1fs", error, backoff)
            except Exception:
                log.exception("watch cache failed unexpectedly; relisting in %.1fs", backoff)
            self._synced = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)
