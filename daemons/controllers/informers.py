"""One informer per resource for the whole daemon, shared by every controller that reads the resource.

Controllers ask the factory for the informers they need while they are built and
subscribe their handlers; the manager then starts them all and waits for their
first LIST. Sharing keeps one cache and one durable RabbitMQ queue per resource
(``controller-manager.<resource>``) however many controllers read it.
"""

from __future__ import annotations

import logging
import threading

from daemons.api.client import ApiClient
from daemons.api.resources import Resource
from daemons.machinery.informer import Informer, wait_all_synced

log = logging.getLogger(__name__)

QUEUE_PREFIX = "controller-manager"


class InformerFactory:
    """Creates each resource's informer once, on first request, and runs them together."""

    def __init__(self, client: ApiClient, amqp_url: str | None = None, resync_seconds: float = 30.0,
                 queue_prefix: str = QUEUE_PREFIX) -> None:
        self.client = client
        self.amqp_url = amqp_url
        self.resync_seconds = resync_seconds
        self.queue_prefix = queue_prefix
        self._informers: dict[str, Informer] = {}
        self._lock = threading.Lock()

    def informer(self, resource: Resource) -> Informer:
        """The daemon's informer of ``resource`` (all namespaces), created on first use."""
        with self._lock:
            informer = self._informers.get(resource.qualified_name)
            if informer is None:
                informer = Informer(self.client, resource, amqp_url=self.amqp_url,
                                    queue_name=f"{self.queue_prefix}.{resource.qualified_name}",
                                    resync_seconds=self.resync_seconds)
                self._informers[resource.qualified_name] = informer
            return informer

    @property
    def informers(self) -> list[Informer]:
        with self._lock:
            return list(self._informers.values())

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def wait_synced(self, stopping: threading.Event) -> bool:
        """Block until every informer has filled its cache; False if ``stopping`` was set first."""
        return wait_all_synced(self.informers, stopping)

    def stop(self, timeout: float) -> None:
        for informer in self.informers:
            informer.stop(timeout)
