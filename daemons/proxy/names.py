"""The cluster as every programmer of the node sees it: service ports, virtual hosts and DNS names.

Pure functions over the plain dicts the API serves. ``cluster_view`` builds one
immutable ``ClusterView`` per sync, so iptables, nginx and dnsmasq are all
programmed from the same snapshot.

Virtual hosts follow Ingress "Prefix" routing: several DNS objects may name the
same host and their paths merge; when two claim the same path prefix the older
object (creationTimestamp, then namespace/name) keeps it and the other path is
dropped, so nginx never sees a location twice. A path whose Service or port is
missing, or whose Service has no ClusterIP, keeps its route without a target
(nginx answers 503).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from daemons.api.models import HEADLESS, path_prefix
from daemons.proxy.services import Obj, ServicePort, ipv4, object_key, service_ports


@dataclass(frozen=True)
class Route:
    """One path of a virtual host and where it goes: ``target`` is ``ClusterIP:port``, None when there is none."""

    path: str
    prefix: str  # the path without trailing slashes: what the route matches
    namespace: str
    service: str
    service_port: int
    target: str | None
    owner: str  # namespace/name of the DNS object the path comes from

    @property
    def service_key(self) -> str:
        return f"{self.namespace}/{self.service}"


@dataclass(frozen=True)
class VirtualHost:
    """A host name and its routes, longest prefix first."""

    host: str
    routes: tuple[Route, ...]

    @property
    def has_root(self) -> bool:
        """Whether a route matches every path; without one, paths no route matches answer 404."""
        return any(route.prefix == "/" for route in self.routes)


@dataclass(frozen=True)
class DroppedPath:
    """A path left out because an older DNS object claims the same prefix of the same host."""

    host: str
    path: str
    owner: str
    winner: str

    def __str__(self) -> str:
        return f"DNS {self.owner}: path {self.path} of host {self.host} is left out, DNS {self.winner} claims it"


@dataclass(frozen=True)
class NameRecord:
    """An address record dnsmasq answers."""

    name: str
    ip: str


@dataclass(frozen=True)
class ClusterView:
    """Everything the node is programmed from, taken at one moment."""

    ports: tuple[ServicePort, ...] = ()
    hosts: tuple[VirtualHost, ...] = ()
    records: tuple[NameRecord, ...] = ()
    dropped: tuple[DroppedPath, ...] = ()


def _target(service: Obj | None, port: int) -> str | None:
    """``ClusterIP:port`` of the Service's TCP port numbered ``port``; None if there is no such address or port."""
    spec = (service or {}).get("spec") or {}
    cluster_ip = ipv4(spec.get("clusterIP"))
    if cluster_ip is None:
        return None
    for entry in spec.get("ports") or []:
        if entry.get("port") == port and (entry.get("protocol") or "TCP") == "TCP":
            return f"{cluster_ip}:{port}"
    return None


def virtual_hosts(dns_objects: Iterable[Obj], services: Iterable[Obj]) -> tuple[tuple[VirtualHost, ...],
                                                                                  tuple[DroppedPath, ...]]:
    """Every host the DNS objects name with its merged routes (hosts by name), and the paths that lost a conflict."""
    by_key = {object_key(service): service for service in services}

    def age(obj: Obj) -> tuple[str, str, str]:
        return ((obj.get("metadata") or {}).get("creationTimestamp") or "", *object_key(obj))

    claimed: dict[str, dict[str, Route]] = {}
    dropped: list[DroppedPath] = []
    for obj in sorted(dns_objects, key=age):
        namespace, name = object_key(obj)
        spec = obj.get("spec") or {}
        host = str(spec.get("host") or "").lower()
        if not host:
            continue
        routes = claimed.setdefault(host, {})
        for entry in spec.get("paths") or []:
            path, service, port = entry.get("path"), entry.get("serviceName"), entry.get("servicePort")
            if not isinstance(path, str) or not isinstance(service, str) or not isinstance(port, int):
                continue
            prefix = path_prefix(path)
            owner = f"{namespace}/{name}"
            if prefix in routes:
                if routes[prefix].owner != owner:
                    dropped.append(DroppedPath(host, path, owner, routes[prefix].owner))
                continue
            routes[prefix] = Route(path, prefix, namespace, service, port, _target(by_key.get((namespace, service)),
                                                                                 port), owner)
    hosts = tuple(VirtualHost(host, tuple(sorted(routes.values(), key=lambda route: (-len(route.prefix),
                                                                                       route.prefix))))
                  for host, routes in sorted(claimed.items()))
    return hosts, tuple(dropped)


def name_records(services: Iterable[Obj], endpoints: Iterable[Obj], domain: str) -> tuple[NameRecord, ...]:
    """``<svc>.<ns>.svc.<domain>`` and ``<svc>.<ns>`` of every Service: its ClusterIP, or for a headless
    Service every ready endpoint address. Services without an address have no names (NXDOMAIN)."""
    by_key = {object_key(obj): obj for obj in endpoints}
    records: list[NameRecord] = []
    for service in sorted(services, key=object_key):
        namespace, name = object_key(service)
        cluster_ip = ((service.get("spec") or {}).get("clusterIP"))
        if cluster_ip == HEADLESS:
            subsets = (by_key.get((namespace, name)) or {}).get("subsets") or []
            found = {ipv4(address.get("ip")) for subset in subsets for address in subset.get("addresses") or []}
            addresses = sorted((ip for ip in found if ip), key=ipaddress.IPv4Address)
        else:
            addresses = [ip] if (ip := ipv4(cluster_ip)) else []
        for address in addresses:
            records += [NameRecord(f"{name}.{namespace}.svc.{domain}", address),
                        NameRecord(f"{name}.{namespace}", address)]
    return tuple(records)


def hosts_file(records: Iterable[NameRecord]) -> str:
    """``/etc/hosts`` format for the file dnsmasq reads (hostsdir): one line per address with all its names."""
    names: dict[str, list[str]] = {}
    for record in records:
        names.setdefault(record.ip, [])
        if record.name not in names[record.ip]:
            names[record.ip].append(record.name)
    lines = [f"{ip} {' '.join(hostnames)}\n" for ip, hostnames in names.items()]
    return "# Written by minik8s-proxy: the cluster's Services and DNS hosts.\n" + "".join(lines)


def cluster_view(services: Iterable[Obj], endpoints: Iterable[Obj], dns_objects: Iterable[Obj], *,
                 domain: str, node_ip: str) -> ClusterView:
    """The view every programmer syncs from; DNS hosts resolve to ``node_ip``, where nginx answers them."""
    services, endpoints = list(services), list(endpoints)
    hosts, dropped = virtual_hosts(dns_objects, services)
    records = name_records(services, endpoints, domain) + tuple(NameRecord(vhost.host, node_ip) for vhost in hosts)
    return ClusterView(ports=tuple(service_ports(services, endpoints)), hosts=hosts, records=records,
                       dropped=dropped)
