"""What the apiserver puts in place at every start: the system namespaces and ``default/kubernetes``.

The ``kubernetes`` Service (the first address of the service range, port 443) and its Endpoints (this
apiserver's advertised address and secure port) are how pods find the API, as in Kubernetes. Every step is
idempotent, so any number of apiservers may start at once over one etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from daemons.api import errors
from daemons.api.resources import NODE_LEASE_NAMESPACE, Resource, require, resolve
from daemons.apiserver.registry import Registry, clone

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NAMESPACES = require("v1", "Namespace")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", NODE_LEASE_NAMESPACE)
SERVICES = resolve("services")
ENDPOINTS = resolve("endpoints")
KUBERNETES = "kubernetes"
# An address no host route covers (TEST-NET-1): the kernel picks the default route's source address for it.
OUTSIDE_ADDRESS = ("192.0.2.1", 9)


def default_advertise_address() -> str:
    """The address of the default route (a UDP socket's connect sends nothing), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(OUTSIDE_ADDRESS)
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def kubernetes_service(cluster_ip: str, secure_port: int) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": KUBERNETES, "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "sessionAffinity": "None",
                 "ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": secure_port}]},
    }


def kubernetes_endpoints(address: str, secure_port: int) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": KUBERNETES, "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": address}],
                     "ports": [{"name": "https", "port": secure_port, "protocol": "TCP"}]}],
    }


async def bootstrap(registry: Registry, secure_port: int, advertise_address: str) -> None:
    """Create what every cluster has, waiting for etcd as long as it takes and retrying whatever else fails."""
    delay = 1.0
    while True:
        try:
            await ensure_namespaces(registry)
            await ensure(registry, SERVICES, kubernetes_service(registry.network.kubernetes_ip, secure_port),
                         ("spec", "ports"))
            await ensure(registry, ENDPOINTS, kubernetes_endpoints(advertise_address, secure_port), ("subsets",))
            return
        except errors.ServiceUnavailable:
            await asyncio.sleep(1)
        except errors.APIError as error:  # /readyz stays 503 until this succeeds: say why and keep trying
            log.warning("default/%s: %s; retrying in %.0f s", KUBERNETES, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


async def ensure_namespaces(registry: Registry) -> None:
    for name in SYSTEM_NAMESPACES:
        with contextlib.suppress(errors.AlreadyExists):
            await registry.create(NAMESPACES, None, {"metadata": {"name": name}})


async def ensure(registry: Registry, resource: Resource, desired: Obj, path: tuple[str, ...]) -> None:
    """Create ``desired``, or bring the part at ``path`` of the stored object to it (the last apiserver wins).

    It looks before it creates: creating a Service that exists would be refused for its address, not as existing.
    """
    namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
    wanted = _at(desired, path)
    while True:
        try:
            try:
                current = await registry.get(resource, namespace, name)
            except errors.NotFound:
                await registry.create(resource, namespace, desired)
                log.info("created %s %s/%s", resource.kind, namespace, name)
                return
            if _at(current, path) == wanted:
                return
            updated = clone(current)
            _at(updated, path[:-1])[path[-1]] = clone(wanted)
            await registry.update(resource, namespace, name, updated)
            log.info("updated %s of %s %s/%s", ".".join(path), resource.kind, namespace, name)
            return
        except (errors.NotFound, errors.Conflict):
            continue  # created, changed or deleted meanwhile: look again
        except errors.Invalid as error:
            log.error("cannot keep %s %s/%s in place: %s", resource.kind, namespace, name, error)
            return

def _at(obj: Obj, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) or {}
    return obj
