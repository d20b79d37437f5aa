"""Service cluster IPs and node ports, allocated as Kubernetes' apiserver allocates them.

Every allocated value is one etcd key (``/minik8s/ranges/serviceips/<ip>``,
``/minik8s/ranges/servicenodeports/<port>``) taken and given back in the same
transaction as the Service itself (``storage.Claims``): two apiservers sharing
etcd never hand out one value twice, and a write that fails takes nothing.
Everything here is pure: the registry reads which values other Services hold
and writes the claims.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemons.api import errors
from daemons.api.bundle import FieldError
from daemons.api.models import HEADLESS, NODE_PORT_TYPES
from daemons.apiserver.storage import Claims
from daemons.apiserver.validation import invalid

Obj = dict[str, Any]

RANGES_PREFIX = "/minik8s/ranges/service"
CLUSTER_IP_PREFIX = RANGES_PREFIX + "ips/"
NODE_PORT_PREFIX = RANGES_PREFIX + "nodeports/"
DEFAULT_CLUSTER_IP_RANGE = "10.96.0.0/16"
DEFAULT_NODE_PORT_RANGE = "30000-32767"


def static_band(size: int, minimum: int, maximum: int, step: int) -> int:
    """How many values at the bottom of a range dynamic allocation leaves to users who ask for them (KEP-3070)."""
    return 0 if size < minimum else min(max(minimum, size // step), maximum)


def parse_cidr(text: str) -> ipaddress.IPv4Network:
    """A service cluster IP range: IPv4, between /12 (a million addresses) and /30."""
    network = ipaddress.ip_network(text.strip(), strict=True)
    if not isinstance(network, ipaddress.IPv4Network):
        raise ValueError("only IPv4 ranges are supported")
    if not 12 <= network.prefixlen <= 30:
        raise ValueError("the prefix length must be between /12 and /30")
    return network


def parse_port_range(text: str) -> tuple[int, int]:
    """``FIRST-LAST``, both ends included."""
    first, _, last = text.strip().partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"expected FIRST-LAST, e.g. {DEFAULT_NODE_PORT_RANGE}") from None
    if not 1 <= low <= high <= 65535:
        raise ValueError("must be ports between 1 and 65535, the first not above the last")
    return low, high


@dataclass(frozen=True)
class ServiceNetwork:
    """The service cluster IP range and the node port range of one cluster."""

    cidr: ipaddress.IPv4Network
    first_port: int
    last_port: int

    @classmethod
    def parse(cls, cidr: str, node_ports: str) -> ServiceNetwork:
        """From ``--service-cluster-ip-range`` and ``--service-node-port-range``; ValueError says what is wrong."""
        return cls(parse_cidr(cidr), *parse_port_range(node_ports))

    @property
    def ip_count(self) -> int:
        """Usable addresses: all but the network and broadcast addresses."""
        return self.cidr.num_addresses - 2

    def ip_at(self, offset: int) -> str:
        return str(self.cidr.network_address + 1 + offset)

    def ip_offset(self, ip: str) -> int | None:
        """The offset of ``ip`` among the usable addresses, None when it is not one of them."""
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return None
        if address not in self.cidr or address in (self.cidr.network_address, self.cidr.broadcast_address):
            return None
        return int(address) - int(self.cidr.network_address) - 1

    @property
    def kubernetes_ip(self) -> str:
        """The first address, kept for the ``default/kubernetes`` Service."""
        return self.ip_at(0)

    @property
    def port_range(self) -> str:
        return f"{self.first_port}-{self.last_port}"

    def has_port(self, port: int) -> bool:
        return self.first_port <= port <= self.last_port


@dataclass(frozen=True)
class Held:
    """The cluster IPs and node ports that other Services hold."""

    ips: frozenset[str] = frozenset()
    ports: frozenset[int] = frozenset()


def needs_cluster_ip(spec: Obj) -> bool:
    return spec.get("type", "ClusterIP") != "ExternalName" and spec.get("clusterIP") != HEADLESS


def needs_node_ports(spec: Obj) -> bool:
    return spec.get("type") in NODE_PORT_TYPES


def cluster_ip_of(spec: Obj) -> str | None:
    ip = spec.get("clusterIP")
    return ip if ip and ip != HEADLESS and spec.get("type") != "ExternalName" else None


def node_ports_of(spec: Obj) -> set[int]:
    if not needs_node_ports(spec):
        return set()
    return {port["nodePort"] for port in spec.get("ports") or [] if port.get("nodePort")}


def claim_keys(service: Obj | None) -> set[str]:
    """The etcd keys a stored Service holds."""
    spec = (service or {}).get("spec") or {}
    ip = cluster_ip_of(spec)
    return ({CLUSTER_IP_PREFIX + ip} if ip else set()) | {f"{NODE_PORT_PREFIX}{port}" for port in node_ports_of(spec)}


def held_by_others(keys: Iterable[str], current: Obj | None) -> Held:
    """What the claim keys under ``RANGES_PREFIX`` say is held, less what ``current`` itself holds."""
    own = claim_keys(current)
    ips, ports = set(), set()
    for key in keys:
        if key in own:
            continue
        if key.startswith(CLUSTER_IP_PREFIX):
            ips.add(key.removeprefix(CLUSTER_IP_PREFIX))
        elif key.startswith(NODE_PORT_PREFIX) and key.removeprefix(NODE_PORT_PREFIX).isdigit():
            ports.add(int(key.removeprefix(NODE_PORT_PREFIX)))
    return Held(frozenset(ips), frozenset(ports))


def asks_for_new_values(desired: Obj, current: Obj | None) -> bool:
    """Whether a write needs a value ``current`` does not hold yet (so what others hold must be read)."""
    spec, old = desired.get("spec") or {}, (current or {}).get("spec") or {}
    if needs_cluster_ip(spec) and (not spec.get("clusterIP") or spec.get("clusterIP") != cluster_ip_of(old)):
        return True
    if needs_node_ports(spec):
        ports = spec.get("ports") or []
        return any(not port.get("nodePort") for port in ports) or not node_ports_of(spec) <= node_ports_of(old)
    return False


def pick(size: int, taken: set[int], band: int, rng: random.Random) -> int | None:
    """A free offset in ``[0, size)``: from above the static band first, at a random place, else below it."""
    for low, high in ((band, size), (0, band)):
        if high <= low:
            continue
        start = rng.randrange(low, high)
        for step in range(high - low):
            candidate = low + (start - low + step) % (high - low)
            if candidate not in taken:
                return candidate
    return None


def carry_over(current: Obj, desired: Obj) -> Obj:
    """What an update of a Service means, read as Kubernetes reads it, before validation.

    Allocated values the request leaves out stay (``kubectl replace`` of a manifest without clusterIP keeps
    it; node ports are matched by port name), and values only the old type had go with it when the request
    still carries them unchanged (NodePort -> ClusterIP drops the node ports, -> ExternalName the cluster IP).
    """
    spec, old = desired.get("spec"), current.get("spec") or {}
    if not isinstance(spec, dict):
        return desired
    spec = dict(spec)
    old_type, new_type = old.get("type", "ClusterIP"), spec.get("type", "ClusterIP")
    if "ExternalName" not in (old_type, new_type) and not spec.get("clusterIP") and not spec.get("clusterIPs"):
        for field in ("clusterIP", "clusterIPs"):
            if field in old:
                spec[field] = old[field]
    if new_type == "ExternalName" and old_type != "ExternalName":
        for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"):
            if spec.get(field) in (None, "", [], old.get(field)):
                spec.pop(field, None)
    ports = spec.get("ports")
    if isinstance(ports, list) and all(isinstance(port, dict) for port in ports):
        spec["ports"] = _carry_node_ports(old, spec, [dict(port) for port in ports])
    if new_type not in NODE_PORT_TYPES and old_type in NODE_PORT_TYPES \
            and spec.get("externalTrafficPolicy") == old.get("externalTrafficPolicy"):
        spec.pop("externalTrafficPolicy", None)
    if new_type != "LoadBalancer" and old_type == "LoadBalancer" \
            and spec.get("allocateLoadBalancerNodePorts") == old.get("allocateLoadBalancerNodePorts"):
        spec.pop("allocateLoadBalancerNodePorts", None)
    return {**desired, "spec": spec}


def _carry_node_ports(old: Obj, spec: Obj, ports: list[Obj]) -> list[Obj]:
    old_ports = node_ports_of(old)
    if not old_ports:
        return ports
    if spec.get("type") not in NODE_PORT_TYPES:
        if {port.get("nodePort") for port in ports if port.get("nodePort")} <= old_ports:
            for port in ports:
                port.pop("nodePort", None)
        return ports
    by_name = {port.get("name") or "": port["nodePort"] for port in old.get("ports") or [] if port.get("nodePort")}
    used = {port.get("nodePort") for port in ports if port.get("nodePort")}
    for port in ports:
        previous = by_name.get(port.get("name") or "")
        if not port.get("nodePort") and previous and previous not in used:
            port["nodePort"] = previous
            used.add(previous)
    return ports


def _cause(field: str, message: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, f"Invalid value: {message}")


def allocate(network: ServiceNetwork, desired: Obj, current: Obj | None, held: Held | None,
             rng: random.Random) -> tuple[Obj, Claims]:
    """``desired`` with its cluster IP and node ports filled in, and the claims its write takes and gives back.

    ``held`` (what other Services hold) may be None only when ``asks_for_new_values`` is false. Values asked
    for must be free and in range (422 naming the field); a full range is a 500, as in Kubernetes.
    """
    service = {**desired, "spec": dict(desired.get("spec") or {})}
    spec = service["spec"]
    old = (current or {}).get("spec") or {}
    held = held or Held()
    causes: list[FieldError] = []
    if needs_cluster_ip(spec):
        causes += _assign_cluster_ip(network, spec, old, held, rng)
    if needs_node_ports(spec):
        causes += _assign_node_ports(network, spec, old, held, rng)
    if causes:
        raise invalid("Service", service["metadata"].get("name"), causes)
    owner = "{}/{}".format(service["metadata"].get("namespace"), service["metadata"].get("name")).encode()
    wanted, had = claim_keys(service), claim_keys(current)
    return service, Claims(take=dict.fromkeys(sorted(wanted - had), owner), release=tuple(sorted(had - wanted)))


def _assign_cluster_ip(network: ServiceNetwork, spec: Obj, old: Obj, held: Held,
                       rng: random.Random) -> list[FieldError]:
    ip = spec.get("clusterIP")
    if ip and ip == cluster_ip_of(old):
        return []
    if ip:
        problem = None
        if network.ip_offset(ip) is None:
            problem = (f"the provided IP ({ip}) is not in the valid range. The range of valid IPs is "
                       f"{network.cidr}")
        elif ip in held.ips:
            problem = "provided IP is already allocated"
        return [_cause("spec.clusterIPs", f'[]string{{"{ip}"}}: failed to allocate IP {ip}: {problem}')] \
            if problem else []
    taken = {offset for offset in map(network.ip_offset, held.ips) if offset is not None} | {0}
    offset = pick(network.ip_count, taken, static_band(network.ip_count, 16, 256, 16), rng)
    if offset is None:
        raise errors.ServerError("Internal error occurred: failed to allocate a serviceIP: range is full")
    spec["clusterIP"] = network.ip_at(offset)
    spec["clusterIPs"] = [spec["clusterIP"]]
    return []


def _assign_node_ports(network: ServiceNetwork, spec: Obj, old: Obj, held: Held,
                       rng: random.Random) -> list[FieldError]:
    causes: list[FieldError] = []
    ports = [dict(port) for port in spec.get("ports") or []]
    own = node_ports_of(old)
    for index, port in enumerate(ports):
        value = port.get("nodePort")
        if not value or value in own:
            continue
        if not network.has_port(value):
            causes.append(_cause(f"spec.ports[{index}].nodePort", f"{value}: provided port is not in the valid "
                                                                  f"range. The range of valid ports is "
                                                                  f"{network.port_range}"))
        elif value in held.ports:
            causes.append(_cause(f"spec.ports[{index}].nodePort", f"{value}: provided port is already allocated"))
    automatic = spec.get("type") == "NodePort" or spec.get("allocateLoadBalancerNodePorts") is not False
    size = network.last_port - network.first_port + 1
    taken = {port - network.first_port for port in held.ports | {p.get("nodePort") or 0 for p in ports}
             if network.has_port(port)}
    for port in ports:
        if port.get("nodePort") or not automatic:
            continue
        offset = pick(size, taken, static_band(size, 16, 128, 32), rng)
        if offset is None:
            raise errors.ServerError("Internal error occurred: failed to allocate a nodePort: range is full")
        taken.add(offset)
        port["nodePort"] = network.first_port + offset
    spec["ports"] = ports
    return causes
