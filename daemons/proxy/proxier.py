"""The proxy's loop: informers over Services, Endpoints and DNS objects mark the node's state dirty; one thread
re-programs it.

Events never program anything themselves. Any change to a Service, an
Endpoints or a DNS object sets a dirty flag; the sync thread wakes, waits out
``min_sync_period_seconds`` since the last sync began (a burst of changes is
applied together), reads the caches into one ``ClusterView`` and hands it to
every programmer, which rewrites its part of the node from scratch.
Every ``sync_period_seconds`` it does so even when nothing changed, which
repairs whatever someone else removed. A failed sync is retried with back-off.

Programmers are the ways the node is told about services: iptables rules,
nginx's configuration, dnsmasq's hosts file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from daemons.api.client import ApiClient
from daemons.api.resources import require
from daemons.machinery.informer import Informer, Obj, wait_all_synced
from daemons.proxy.names import ClusterView, DroppedPath, VirtualHost, cluster_view
from daemons.proxy.services import ServicePort
from daemons.proxy.settings import ProxySettings

log = logging.getLogger(__name__)

RETRY_MIN_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0
INFORMER_STOP_SECONDS = 1.0
LOGGED_CHANGES = 20  # a first sync of a big cluster changes every port: name a few, count the rest

SYNC_SECONDS = Histogram("minik8s_proxy_sync_proxy_rules_duration_seconds",
                         "Time to render and apply the node's service state, every programmer included",
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
LAST_SYNC = Gauge("minik8s_proxy_sync_proxy_rules_last_timestamp_seconds",
                  "Unix time of the last sync that every programmer completed")
SYNC_FAILURES = Counter("minik8s_proxy_sync_proxy_rules_failures_total", "Syncs that a programmer failed",
                        ["programmer"])


class Programmer(Protocol):
    """Puts the node in the state the cluster view asks for; each call converges from scratch."""

    name: str

    def sync(self, view: ClusterView) -> None: ...

    def cleanup(self) -> None: ...


SERVICES = require("v1", "Service")
ENDPOINTS = require("v1", "Endpoints")
DNS = require("minik8s.io/v1", "DNS")


def _key(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def describe_changes(old: Sequence[ServicePort], new: Sequence[ServicePort]) -> list[str]:
    """One line per service port added, removed, or whose address or endpoints changed."""
    before = {port.key: port for port in old}
    after = {port.key: port for port in new}
    lines = [f"{key}: removed" for key in before if key not in after]
    for key, port in after.items():
        if before.get(key) != port:
            target = f"{port.cluster_ip or '-'}:{port.port}/{port.protocol}"
            if port.node_port:
                target += f" (node port {port.node_port})"
            lines.append(f"{key}: {'added' if key not in before else 'changed'}, {target} -> "
                         f"{len(port.endpoints)} ready endpoints")
    return lines


def describe_host_changes(old: Sequence[VirtualHost], new: Sequence[VirtualHost]) -> list[str]:
    """One line per virtual host added, removed, or whose routes changed."""
    before = {vhost.host: vhost for vhost in old}
    after = {vhost.host: vhost for vhost in new}
    lines = [f"host {host}: removed" for host in before if host not in after]
    for host, vhost in after.items():
        if before.get(host) != vhost:
            routes = ", ".join(f"{route.path} -> {route.service_key}:{route.service_port} "
                               f"({route.target or 'no target'})" for route in vhost.routes)
            lines.append(f"host {host}: {'added' if host not in before else 'changed'}, {routes}")
    return lines


class Proxier:
    """Keeps every programmer in step with the cluster's Services, Endpoints and DNS objects until ``stop``."""

    def __init__(self, client: ApiClient, settings: ProxySettings, programmers: Sequence[Programmer]) -> None:
        self.programmers = list(programmers)
        self.cluster_domain = settings.cluster_domain
        self.node_ip = settings.node_ip
        self.sync_period = settings.sync_period_seconds
        self.min_sync_period = settings.min_sync_period_seconds
        # Every node's proxy needs every event: the queues are per node.
        prefix = f"proxy.{settings.node_name}"
        self.services = Informer(client, SERVICES, amqp_url=settings.amqp_url, queue_name=f"{prefix}.services",
                                 resync_seconds=settings.sync_period_seconds, on_add=self._changed,
                                 on_update=self._updated("spec"), on_delete=self._changed)
        self.endpoints = Informer(client, ENDPOINTS, amqp_url=settings.amqp_url, queue_name=f"{prefix}.endpoints",
                                  resync_seconds=settings.sync_period_seconds, on_add=self._changed,
                                  on_update=self._updated("subsets"), on_delete=self._changed)
        self.dns = Informer(client, DNS, amqp_url=settings.amqp_url, queue_name=f"{prefix}.dns",
                            resync_seconds=settings.sync_period_seconds, on_add=self._changed,
                            on_update=self._updated("spec"), on_delete=self._changed)
        self.informers = (self.services, self.endpoints, self.dns)
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._view = ClusterView()
        self._dropped: tuple[DroppedPath, ...] = ()

    # --- lifecycle ----------------------------------------------------------------------------------

    def run(self) -> None:
        """Sync until ``stop``; the first sync waits for every cache, so nothing is programmed half-known."""
        for informer in self.informers:
            informer.start()
        try:
            if wait_all_synced(self.informers, self._stopping):
                log.info("proxying %d services with %s", len(self.services.store),
                         ", ".join(programmer.name for programmer in self.programmers))
                self._loop()
        finally:
            for informer in self.informers:
                informer.stop(INFORMER_STOP_SECONDS)

    def stop(self) -> None:
        """End the loop; whatever was programmed stays in place, so traffic keeps flowing while we are away."""
        self._stopping.set()
        self._dirty.set()

    # --- informer handlers --------------------------------------------------------------------------

    def _changed(self, obj: Obj) -> None:
        log.debug("%s %s changed", obj.get("kind"), _key(obj))
        self._dirty.set()

    def _updated(self, field: str) -> Callable[[Obj, Obj], None]:
        """An update handler that ignores updates leaving ``field`` as it was (status writes, resyncs)."""
        def handler(old: Obj, new: Obj) -> None:
            if old.get(field) != new.get(field):
                self._changed(new)
        return handler

    # --- the sync loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        last_start = float("-inf")
        next_full = time.monotonic()  # the first sync runs at once
        delay = RETRY_MIN_SECONDS
        while not self._stopping.is_set():
            self._dirty.wait(max(0.0, next_full - time.monotonic()))
            if self._stopping.is_set():
                break
            # Let a burst of changes gather until the minimum period since the last sync began is over.
            if self._stopping.wait(max(0.0, last_start + self.min_sync_period - time.monotonic())):
                break
            self._dirty.clear()
            last_start = time.monotonic()
            if self.sync_once():
                next_full = last_start + self.sync_period
                delay = RETRY_MIN_SECONDS
            else:
                next_full = time.monotonic() + delay
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    def sync_once(self) -> bool:
        """Hand the current cluster view to every programmer; False if any of them failed."""
        started = time.monotonic()
        view = cluster_view(self.services.store.list(), self.endpoints.store.list(), self.dns.store.list(),
                            domain=self.cluster_domain, node_ip=self.node_ip)
        for dropped in sorted(set(view.dropped) - set(self._dropped), key=str):
            log.warning("%s", dropped)
        self._dropped = view.dropped
        changes = describe_changes(self._view.ports, view.ports) + describe_host_changes(self._view.hosts, view.hosts)
        for line in changes[:LOGGED_CHANGES]:
            log.info("%s", line)
        if len(changes) > LOGGED_CHANGES:
            log.info("and %d more service ports and hosts changed", len(changes) - LOGGED_CHANGES)
        failed = False
        for programmer in self.programmers:
            try:
                programmer.sync(view)
            except Exception:
                failed = True
                SYNC_FAILURES.labels(programmer.name).inc()
                log.exception("%s: sync of %d service ports and %d hosts failed; retrying", programmer.name,
                              len(view.ports), len(view.hosts))
        elapsed = time.monotonic() - started
        SYNC_SECONDS.observe(elapsed)
        if not failed:
            self._view = view
            LAST_SYNC.set(time.time())
            log.debug("synced %d service ports and %d hosts in %.3fs", len(view.ports), len(view.hosts), elapsed)
        return not failed
