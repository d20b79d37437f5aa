"""What the proxy programs, read from Services and Endpoints: one ``ServicePort`` per port of a service.

Every programmer of the node (iptables now) starts from this list, so they all
agree on which ports exist, where they point and which endpoints are ready.
Pure functions over the plain dicts the API serves.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemons.api.models import HEADLESS, NODE_PORT_TYPES

Obj = dict[str, Any]

# SCTP needs a kernel module and a conntrack helper that nodes do not load; ports of other protocols are skipped.
PROTOCOLS = ("TCP", "UDP")


@dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int

    def __str__(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass(frozen=True)
class ServicePort:
    """One port of one Service, with the ready endpoints that serve it (sorted by address)."""

    namespace: str
    name: str
    port_name: str
    protocol: str  # lower case, as iptables spells it: "tcp" or "udp"
    cluster_ip: str | None  # None: headless, not allocated, or not IPv4
    port: int
    node_port: int | None
    endpoints: tuple[Endpoint, ...]

    @property
    def key(self) -> str:
        """``namespace/name:port`` (``namespace/name`` for an unnamed port), as Kubernetes names a service port."""
        return f"{self.namespace}/{self.name}" + (f":{self.port_name}" if self.port_name else "")


def ipv4(value: object) -> str | None:
    """``value`` if it is a dotted-quad IPv4 address (IPv6 is not proxied)."""
    if not isinstance(value, str):
        return None
    try:
        socket.inet_pton(socket.AF_INET, value)
    except OSError:
        return None
    return value


def _ready_endpoints(endpoints: Obj | None, port_name: str, protocol: str) -> tuple[Endpoint, ...]:
    """The ready addresses of ``endpoints`` on the port named like the service port (port numbers already resolved).

    Not-ready addresses are left out: a pod failing readiness takes no new connections.
    """
    found: set[Endpoint] = set()
    for subset in (endpoints or {}).get("subsets") or []:
        numbers = [port.get("port") for port in subset.get("ports") or []
                   if (port.get("name") or "") == port_name and (port.get("protocol") or "TCP") == protocol]
        for address in subset.get("addresses") or []:
            ip = ipv4(address.get("ip"))
            for number in numbers:
                if ip and isinstance(number, int) and 0 < number < 65536:
                    found.add(Endpoint(ip, number))
    return tuple(sorted(found, key=lambda endpoint: (socket.inet_pton(socket.AF_INET, endpoint.ip), endpoint.port)))


def service_ports(services: Iterable[Obj], endpoints: Iterable[Obj]) -> list[ServicePort]:
    """Every TCP and UDP port of every proxied Service, ordered by namespace, name and port order.

    ExternalName and headless (``clusterIP: None``) services are not proxied. A NodePort or
    LoadBalancer service's ports carry their ``nodePort``.
    """
    by_key = {object_key(obj): obj for obj in endpoints}
    ports: list[ServicePort] = []
    for service in sorted(services, key=object_key):
        metadata, spec = service.get("metadata") or {}, service.get("spec") or {}
        kind = spec.get("type") or "ClusterIP"
        if kind == "ExternalName" or spec.get("clusterIP") == HEADLESS:
            continue
        cluster_ip = ipv4(spec.get("clusterIP"))
        for port in spec.get("ports") or []:
            protocol = port.get("protocol") or "TCP"
            number = port.get("port")
            if protocol not in PROTOCOLS or not isinstance(number, int):
                continue
            node_port = port.get("nodePort") if kind in NODE_PORT_TYPES else None
            port_name = port.get("name") or ""
            ports.append(ServicePort(
                namespace=metadata.get("namespace") or "default", name=metadata.get("name") or "",
                port_name=port_name, protocol=protocol.lower(), cluster_ip=cluster_ip, port=number,
                node_port=node_port if isinstance(node_port, int) and node_port > 0 else None,
                endpoints=_ready_endpoints(by_key.get(object_key(service)), port_name, protocol),
            ))
    return ports


def object_key(obj: Obj) -> tuple[str, str]:
    """``(namespace, name)`` of an object, ``default`` when the namespace is missing."""
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "default", metadata.get("name") or ""
