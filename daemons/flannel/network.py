"""The overlay's pure decisions: flannel's etcd records, which subnet a node takes, and what the kernel should hold.

Nothing here does I/O, so the agent's every choice can be checked by calling
these functions with plain values.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

BACKEND = "vxlan"
VXLAN_OVERHEAD = 50  # outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14)
MULTICAST = IPv4Network("224.0.0.0/4")
POSTROUTING_CHAIN = "FLANNEL-POSTRTG"
FORWARD_CHAIN = "FLANNEL-FWD"

T = TypeVar("T")


@dataclass(frozen=True)
class NetworkConfig:
    """``<prefix>/config``: the cluster network every node carves its subnet from."""

    network: IPv4Network
    subnet_len: int = 24
    vni: int = 1
    port: int = 8472

    def __post_init__(self) -> None:
        if not self.network.prefixlen < self.subnet_len <= 30:
            raise ValueError(f"SubnetLen {self.subnet_len} does not fit in Network {self.network}")

    def to_json(self) -> bytes:
        return json.dumps({
            "Network": str(self.network), "SubnetLen": self.subnet_len,
            "Backend": {"Type": BACKEND, "VNI": self.vni, "Port": self.port},
        }).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> NetworkConfig:
        """Parse a stored config; flannel's defaults fill what it leaves out (SubnetLen 24, VNI 1, port 8472)."""
        data = json.loads(raw)
        backend = data.get("Backend") or {}
        kind = backend.get("Type", BACKEND)
        if kind != BACKEND:
            raise ValueError(f"backend {kind!r} is not supported, only {BACKEND!r}")
        return cls(
            network=IPv4Network(data["Network"]),
            subnet_len=int(data.get("SubnetLen", 24)),
            vni=int(backend.get("VNI", 1)),
            port=int(backend.get("Port") or 8472),  # flannel's 0 means the kernel's default, 8472 on Linux
        )


@dataclass(frozen=True)
class Lease:
    """One node's ``<prefix>/subnets/<a.b.c.d>-<len>`` record: its subnet, its underlay address, its VTEP."""

    subnet: IPv4Network
    public_ip: IPv4Address
    vtep_mac: str
    vni: int

    def to_json(self) -> bytes:
        return json.dumps({
            "PublicIP": str(self.public_ip), "BackendType": BACKEND,
            "BackendData": {"VNI": self.vni, "VtepMAC": self.vtep_mac},
        }).encode()


def subnets_prefix(prefix: str) -> str:
    return f"{prefix.rstrip('/')}/subnets/"


def subnet_key(prefix: str, subnet: IPv4Network) -> str:
    return f"{subnets_prefix(prefix)}{subnet.network_address}-{subnet.prefixlen}"


def parse_subnet_key(key: str) -> IPv4Network | None:
    """``.../subnets/10.244.3.0-24`` -> 10.244.3.0/24; None for anything else."""
    name = key.rsplit("/", 1)[-1]
    address, _, length = name.partition("-")
    try:
        return IPv4Network(f"{address}/{length}")
    except ValueError:
        return None


def parse_lease(key: str, raw: bytes | str) -> Lease | None:
    """A lease record, or None (logged) when it is not a vxlan lease this agent can route to."""
    subnet = parse_subnet_key(key)
    try:
        data = json.loads(raw)
        if subnet is None or data.get("BackendType") != BACKEND:
            raise ValueError(f"not a {BACKEND} subnet lease")
        backend = data.get("BackendData") or {}
        return Lease(subnet, IPv4Address(data["PublicIP"]), normalize_mac(backend["VtepMAC"]), int(backend["VNI"]))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        log.warning("ignoring %s: %s", key, error)
        return None


def normalize_mac(mac: str) -> str:
    parts = mac.lower().split(":")
    if len(parts) != 6 or any(len(part) != 2 or any(c not in "0123456789abcdef" for c in part) for part in parts):
        raise ValueError(f"bad MAC address {mac!r}")
    return ":".join(parts)


def vtep_mac(public_ip: IPv4Address, vni: int) -> str:
    """A stable, locally administered unicast MAC for this node's VTEP.

    Derived from the node's address, so a recreated device keeps the MAC that
    every peer's neighbour and FDB entries already point at.
    """
    digest = hashlib.sha256(f"{public_ip}/{vni}".encode()).digest()
    first = (digest[0] | 0x02) & 0xFE
    return ":".join(f"{byte:02x}" for byte in (first, *digest[1:6]))


def assignable_subnets(config: NetworkConfig) -> Iterator[IPv4Network]:
    """Every subnet of the network, skipping the first (10.244.0.0/24), as flannel does."""
    subnets = config.network.subnets(new_prefix=config.subnet_len)
    next(subnets)
    return subnets


def is_assignable(config: NetworkConfig, subnet: IPv4Network) -> bool:
    first = next(config.network.subnets(new_prefix=config.subnet_len))
    return subnet.prefixlen == config.subnet_len and subnet.subnet_of(config.network) and subnet != first


def choose_subnet(config: NetworkConfig, taken: Iterable[IPv4Network], public_ip: IPv4Address) -> IPv4Network | None:
    """A free subnet for ``public_ip``, or None when the network is full.

    Random-looking (rendezvous hashing of the node's address with each subnet)
    so that nodes spread over the network, yet deterministic so that a node
    asking twice against the same leases gets the same answer.
    """
    used = set(taken)

    def rank(subnet: IPv4Network) -> bytes:
        return hashlib.sha256(f"{public_ip}|{subnet}".encode()).digest()

    return min((subnet for subnet in assignable_subnets(config) if subnet not in used), key=rank, default=None)


def pick_lease(
    config: NetworkConfig, leases: Iterable[Lease], public_ip: IPv4Address, previous: IPv4Network | None
) -> tuple[IPv4Network | None, bool]:
    """The subnet this node should hold and whether it already holds it in etcd.

    Order of preference: the subnet of the previous run (subnet file) if it is
    free or ours, then any lease already carrying this node's address, then a
    new free subnet.
    """
    by_subnet = {lease.subnet: lease for lease in leases}
    if previous is not None and is_assignable(config, previous):
        holder = by_subnet.get(previous)
        if holder is None:
            return previous, False
        if holder.public_ip == public_ip:
            return previous, True
    ours = sorted((lease.subnet for lease in by_subnet.values() if lease.public_ip == public_ip
                   and is_assignable(config, lease.subnet)), key=lambda subnet: int(subnet.network_address))
    if ours:
        return ours[0], True
    return choose_subnet(config, by_subnet, public_ip), False


def stale_leases(leases: Iterable[Lease], own_subnet: IPv4Network, public_ip: IPv4Address) -> list[Lease]:
    """Older leases of this node (same address, other subnet): left alone they would hold a subnet for a whole TTL."""
    return [lease for lease in leases if lease.public_ip == public_ip and lease.subnet != own_subnet]


def subnet_gateway(subnet: IPv4Network) -> IPv4Address:
    """The first host address: Docker's bridge (bip) on the node owning the subnet."""
    return subnet.network_address + 1


def render_subnet_file(config: NetworkConfig, subnet: IPv4Network, mtu: int, ip_masq: bool) -> str:
    """flannel's subnet.env, which Docker's bip and mtu are configured from."""
    return (
        f"FLANNEL_NETWORK={config.network}\n"
        f"FLANNEL_SUBNET={subnet_gateway(subnet)}/{subnet.prefixlen}\n"
        f"FLANNEL_MTU={mtu}\n"
        f"FLANNEL_IPMASQ={'true' if ip_masq else 'false'}\n"
    )


def parse_subnet_file(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            values[name.strip()] = value.strip()
    return values


def previous_subnet(text: str) -> IPv4Network | None:
    """The subnet a subnet file records (FLANNEL_SUBNET=10.244.3.1/24 -> 10.244.3.0/24), if it records one."""
    value = parse_subnet_file(text).get("FLANNEL_SUBNET")
    try:
        return IPv4Network(value, strict=False) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Route:
    """``<subnet> via <subnet's .0> dev flannel.N onlink``."""

    dst: IPv4Network
    gateway: IPv4Address


@dataclass(frozen=True)
class Neighbour:
    """Permanent ARP entry: the peer's VTEP address answers at the peer's VTEP MAC."""

    ip: IPv4Address
    mac: str


@dataclass(frozen=True)
class FdbEntry:
    """VXLAN forwarding entry: frames for the peer's VTEP MAC go to the peer's underlay address."""

    mac: str
    dst: IPv4Address


@dataclass(frozen=True)
class PeerState:
    """What the vxlan device should carry for the other nodes."""

    routes: frozenset[Route] = frozenset()
    neighbours: frozenset[Neighbour] = frozenset()
    fdb: frozenset[FdbEntry] = frozenset()


def desired_peers(
    config: NetworkConfig, leases: Iterable[Lease], own_subnet: IPv4Network, own_ip: IPv4Address
) -> PeerState:
    """Routes, neighbours and FDB entries for every other node's lease.

    A lease outside the network, on another VNI, or carrying this node's own
    address (a stale lease of ours) would route traffic back into this node,
    so it is left out.
    """
    routes, neighbours, fdb = set(), set(), set()
    for lease in leases:
        if (lease.subnet == own_subnet or lease.public_ip == own_ip or lease.vni != config.vni
                or not is_assignable(config, lease.subnet)):
            continue
        vtep = lease.subnet.network_address
        routes.add(Route(lease.subnet, vtep))
        neighbours.add(Neighbour(vtep, lease.vtep_mac))
        fdb.add(FdbEntry(lease.vtep_mac, lease.public_ip))
    return PeerState(frozenset(routes), frozenset(neighbours), frozenset(fdb))


@dataclass(frozen=True)
class Changes(Generic[T]):
    add: frozenset[T] = field(default_factory=frozenset)
    remove: frozenset[T] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.add or self.remove)


def diff(desired: Iterable[T], actual: Iterable[T]) -> Changes[T]:
    wanted, present = frozenset(desired), frozenset(actual)
    return Changes(wanted - present, present - wanted)


@dataclass(frozen=True)
class RuleSpec:
    """An iptables rule of ours: optional (negated) source and destination, a target."""

    target: str
    src: IPv4Network | None = None
    dst: IPv4Network | None = None
    not_src: bool = False
    not_dst: bool = False

    def args(self) -> str:
        parts = []
        if self.src is not None:
            parts.append(f"{'! ' if self.not_src else ''}-s {self.src}")
        if self.dst is not None:
            parts.append(f"{'! ' if self.not_dst else ''}-d {self.dst}")
        return " ".join([*parts, f"-j {self.target}"])


def postrouting_rules(network: IPv4Network) -> list[RuleSpec]:
    """FLANNEL-POSTRTG: pod-to-pod traffic keeps its addresses; pods reaching outside are masqueraded."""
    return [
        RuleSpec("RETURN", src=network, dst=network),
        RuleSpec("RETURN", src=network, dst=MULTICAST),
        RuleSpec("MASQUERADE", src=network, dst=network, not_dst=True),
    ]


def forward_rules(network: IPv4Network) -> list[RuleSpec]:
    """FLANNEL-FWD: pod traffic is forwarded even when Docker sets the FORWARD policy to DROP."""
    return [RuleSpec("ACCEPT", src=network), RuleSpec("ACCEPT", dst=network)]

