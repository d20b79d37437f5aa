"""The node's whole iptables ruleset for Services, rendered without I/O, in kube-proxy's iptables layout.

nat table::

    PREROUTING, OUTPUT -> KUBE-SERVICES
        ! -s <clusterCIDR> -d <clusterIP>/32 -p tcp --dport <port> -> KUBE-MARK-MASQ   (per service port)
        -d <clusterIP>/32 -p tcp --dport <port> -> KUBE-SVC-<hash>
        -m addrtype --dst-type LOCAL -> KUBE-NODEPORTS                                 (always last)
    KUBE-NODEPORTS: -p tcp --dport <nodePort> -> KUBE-MARK-MASQ, then -> KUBE-SVC-<hash>
    KUBE-SVC-<hash>: -m statistic --probability 1/(n-i) -> KUBE-SEP-<hash>         (the last one unconditional)
    KUBE-SEP-<hash>: -s <podIP>/32 -> KUBE-MARK-MASQ (hairpin), -p tcp -> DNAT podIP:port
    KUBE-MARK-MASQ: set the masquerade mark
    POSTROUTING -> KUBE-POSTROUTING: RETURN unless marked, clear the mark, MASQUERADE

filter table: FORWARD -> KUBE-FORWARD accepts marked and established traffic (Docker's FORWARD policy is
DROP); INPUT, FORWARD and OUTPUT -> KUBE-SERVICES REJECTs new connections to service ports with no ready
endpoint, so clients fail at once instead of timing out.

Rules are spelled as ``iptables-save`` prints them (``str(rule)``), so a rendered ruleset can be compared
with what the kernel holds; statistic probabilities are given at the kernel's precision for that reason.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from daemons.proxy.services import Obj, ServicePort, service_ports

NAT = "nat"
FILTER = "filter"
TABLES = (NAT, FILTER)
CHAIN_PREFIX = "KUBE-"  # every chain of ours, and only ours, starts with this
SERVICES = "KUBE-SERVICES"
NODEPORTS = "KUBE-NODEPORTS"
MARK_MASQ = "KUBE-MARK-MASQ"
POSTROUTING = "KUBE-POSTROUTING"
FORWARD = "KUBE-FORWARD"
SERVICE_CHAIN_PREFIX = "KUBE-SVC-"
ENDPOINT_CHAIN_PREFIX = "KUBE-SEP-"

PORTALS_COMMENT = "kubernetes service portals"
NODEPORTS_COMMENT = "kubernetes service nodeports; NOTE: this must be the last rule in this chain"
# iptables-save prints a probability as the kernel stores it: a fraction of 2^31.
PROBABILITY_SCALE = 0x80000000
TEXT_OPTIONS = ("comment",)  # the only values iptables-save quotes
SAFE_WORD = frozenset("_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

Options = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class NodeFacts:
    """What the ruleset needs to know about the node's network."""

    cluster_cidr: str = "10.244.0.0/16"
    masquerade_bit: int = 14

    @property
    def mark(self) -> int:
        return 1 << self.masquerade_bit


def _text(value: str) -> str:
    """A free-text value (a comment) as iptables-save writes it: bare when it is a plain word, else quoted."""
    if value and set(value) <= SAFE_WORD:
        return value
    return '"' + "".join("\\" + char if char in "\"\\'" else char for char in value) + '"'


def _options(options: Options) -> str:
    """``--name value`` pairs; a value starting with ``!`` negates the option (python-iptables' convention too)."""
    parts = []
    for name, value in options:
        negated = value.startswith("!")
        value = value[1:] if negated else value
        if name in TEXT_OPTIONS:
            value = _text(value)
        parts.append(("! " if negated else "") + f"--{name}" + (f" {value}" if value else ""))
    return " ".join(parts)


@dataclass(frozen=True)
class Match:
    """One ``-m module --option value ...`` of a rule."""

    module: str
    options: Options = ()
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.module, self.options)))

    def __hash__(self) -> int:  # matches and rules key the encoder's caches: hashed once, not at every lookup
        return self._hash

    def __str__(self) -> str:
        return " ".join(filter(None, (f"-m {self.module}", _options(self.options))))


@dataclass(frozen=True)
class Rule:
    """One rule; ``source``/``destination`` may start with ``!``, ``target`` is a chain, verdict or extension."""

    target: str
    target_options: Options = ()
    source: str | None = None
    destination: str | None = None
    protocol: str | None = None
    matches: tuple[Match, ...] = ()

    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.target, self.target_options, self.source, self.destination,
                                                 self.protocol, self.matches)))

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        parts = []
        for flag, address in (("-s", self.source), ("-d", self.destination)):
            if address:
                parts.append(f"! {flag} {address[1:]}" if address.startswith("!") else f"{flag} {address}")
        if self.protocol:
            parts.append(f"-p {self.protocol}")
        parts.extend(str(match) for match in self.matches)
        parts.append(f"-j {self.target}")
        if self.target_options:
            parts.append(_options(self.target_options))
        return " ".join(parts)


@dataclass(frozen=True)
class Jump:
    """A rule of ours in a built-in chain (PREROUTING, FORWARD, ...), kept at the top of that chain."""

    table: str
    chain: str
    rule: Rule


@dataclass(frozen=True)
class Ruleset:
    """Table -> our chain -> its rules, in a fixed order, plus the jumps into our chains from built-in ones."""

    tables: Mapping[str, Mapping[str, tuple[Rule, ...]]]
    jumps: tuple[Jump, ...] = field(default=())

    def chain(self, table: str, name: str) -> tuple[Rule, ...]:
        return tuple(self.tables[table][name])

    def lines(self, table: str) -> list[str]:
        """``table`` as ``iptables-save`` would print our part of it (chain declarations, then rules)."""
        chains = self.tables[table]
        lines = [f":{name} - [0:0]" for name in chains]
        lines += [f"-A {jump.chain} {jump.rule}" for jump in self.jumps if jump.table == table]
        lines += [f"-A {name} {rule}" for name, rules in chains.items() for rule in rules]
        return lines

    def save(self) -> str:
        """The whole ruleset in ``iptables-save`` form, for logs and diffs."""
        blocks = [f"*{table}\n" + "\n".join(self.lines(table)) + "\nCOMMIT\n" for table in self.tables]
        return "".join(blocks)


# --- names ------------------------------------------------------------------------------------------


def _name_hash(text: str) -> str:
    """The first 16 characters of the base32 SHA-256 of ``text``: kube-proxy's chain name suffix.

    Base32 turns each 5 bytes into 8 characters on their own, so 10 bytes give those 16.
    """
    return base64.b32encode(hashlib.sha256(text.encode()).digest()[:10]).decode()


def service_chain(port: ServicePort) -> str:
    return SERVICE_CHAIN_PREFIX + _name_hash(port.key + port.protocol)


def endpoint_chain(port: ServicePort, endpoint: str) -> str:
    return ENDPOINT_CHAIN_PREFIX + _name_hash(port.key + port.protocol + endpoint)


@functools.lru_cache(maxsize=256)
def probability(remaining: int) -> str:
    """``1/remaining`` as iptables-save prints it once the kernel has it (``1/3`` is ``0.33333333349``)."""
    scaled = int(PROBABILITY_SCALE / remaining + 0.5)  # the C library's lround, for positive values
    return f"{scaled / PROBABILITY_SCALE:.11f}"


# --- rendering --------------------------------------------------------------------------------------


_LOCAL = Match("addrtype", (("dst-type", "LOCAL"),))  # addressed to this node: its NodePorts


def _comment(text: str) -> Match:
    return Match("comment", (("comment", text),))


@functools.lru_cache(maxsize=256)
def _chance(remaining: int) -> Match:
    """The statistic match that picks one of ``remaining`` endpoints."""
    return Match("statistic", (("mode", "random"), ("probability", probability(remaining))))


def _dport(protocol: str, port: int) -> Match:
    return Match(protocol, (("dport", str(port)),))


def jumps() -> tuple[Jump, ...]:
    """The rules in built-in chains that lead into ours, in the order they sit at the top of each chain."""
    new = Match("conntrack", (("ctstate", "NEW"),))
    portals = _comment(PORTALS_COMMENT)
    return (
        Jump(NAT, "PREROUTING", Rule(SERVICES, matches=(portals,))),
        Jump(NAT, "OUTPUT", Rule(SERVICES, matches=(portals,))),
        Jump(NAT, "POSTROUTING", Rule(POSTROUTING, matches=(_comment("kubernetes postrouting rules"),))),
        Jump(FILTER, "INPUT", Rule(SERVICES, matches=(new, portals))),
        Jump(FILTER, "FORWARD", Rule(FORWARD, matches=(_comment("kubernetes forwarding rules"),))),
        Jump(FILTER, "FORWARD", Rule(SERVICES, matches=(new, portals))),
        Jump(FILTER, "OUTPUT", Rule(SERVICES, matches=(new, portals))),
    )


def _fixed_chains(facts: NodeFacts) -> tuple[dict[str, tuple[Rule, ...]], dict[str, tuple[Rule, ...]]]:
    """The chains whose rules do not depend on any service: nat and filter."""
    marked = f"{facts.mark:#x}/{facts.mark:#x}"
    nat = {
        MARK_MASQ: (Rule("MARK", (("set-xmark", marked),)),),
        POSTROUTING: (
            Rule("RETURN", matches=(Match("mark", (("mark", "!" + marked),)),)),
            Rule("MARK", (("set-xmark", f"{facts.mark:#x}/0x0"),)),  # clear it: the packet may be re-routed
            Rule("MASQUERADE", matches=(_comment("kubernetes service traffic requiring SNAT"),)),
        ),
    }
    filter_ = {
        FORWARD: (
            Rule("ACCEPT", matches=(_comment("kubernetes forwarding rules"), Match("mark", (("mark", marked),)))),
            Rule("ACCEPT", matches=(_comment("kubernetes forwarding conntrack rule"),
                                    Match("conntrack", (("ctstate", "RELATED,ESTABLISHED"),)))),
        ),
    }
    return nat, filter_


@dataclass(frozen=True)
class PortRules:
    """One service port's share of the ruleset."""

    services: tuple[Rule, ...] = ()  # nat KUBE-SERVICES
    nodeports: tuple[Rule, ...] = ()  # nat KUBE-NODEPORTS
    rejects: tuple[Rule, ...] = ()  # filter KUBE-SERVICES
    chains: tuple[tuple[str, tuple[Rule, ...]], ...] = ()  # its KUBE-SVC chain, then its KUBE-SEP chains


@functools.lru_cache(maxsize=16384)
def render_port(port: ServicePort, cluster_cidr: str) -> PortRules:
    """The rules of one service port; remembered, so an unchanged port costs a lookup and yields the same objects."""
    comment = _comment(port.key)
    if not port.endpoints:
        no_endpoints = _comment(f"{port.key} has no endpoints")
        reject = (("reject-with", "icmp-port-unreachable"),)
        rejects = []
        if port.cluster_ip:
            rejects.append(Rule("REJECT", reject, destination=f"{port.cluster_ip}/32", protocol=port.protocol,
                                matches=(no_endpoints, _dport(port.protocol, port.port))))
        if port.node_port:
            rejects.append(Rule("REJECT", reject, protocol=port.protocol,
                                matches=(no_endpoints, _LOCAL, _dport(port.protocol, port.node_port))))
        return PortRules(rejects=tuple(rejects))
    svc = service_chain(port)
    services: tuple[Rule, ...] = ()
    nodeports: tuple[Rule, ...] = ()
    if port.cluster_ip:
        to_service = (comment, _dport(port.protocol, port.port))
        destination = f"{port.cluster_ip}/32"
        services = (Rule(MARK_MASQ, source="!" + cluster_cidr, destination=destination, protocol=port.protocol,
                         matches=to_service),
                    Rule(svc, destination=destination, protocol=port.protocol, matches=to_service))
    if port.node_port:
        to_node_port = (comment, _dport(port.protocol, port.node_port))
        nodeports = (Rule(MARK_MASQ, protocol=port.protocol, matches=to_node_port),
                     Rule(svc, protocol=port.protocol, matches=to_node_port))
    spread: list[Rule] = []
    endpoint_chains: list[tuple[str, tuple[Rule, ...]]] = []
    for index, endpoint in enumerate(port.endpoints):
        sep = endpoint_chain(port, str(endpoint))
        remaining = len(port.endpoints) - index
        spread.append(Rule(sep, matches=(comment, _chance(remaining)) if remaining > 1 else (comment,)))
        endpoint_chains.append((sep, (
            Rule(MARK_MASQ, source=f"{endpoint.ip}/32", matches=(comment,)),
            Rule("DNAT", (("to-destination", str(endpoint)),), protocol=port.protocol, matches=(comment,)),
        )))
    return PortRules(services, nodeports, (), ((svc, tuple(spread)), *endpoint_chains))


def render_ports(ports: Iterable[ServicePort], facts: NodeFacts) -> Ruleset:
    """The ruleset for ``ports`` (see the module's docstring for its layout)."""
    cluster_cidr = str(ipaddress.IPv4Network(facts.cluster_cidr, strict=False))
    services: list[Rule] = []
    nodeports: list[Rule] = []
    rejects: list[Rule] = []
    per_service: dict[str, tuple[Rule, ...]] = {}
    for port in ports:
        if port.cluster_ip is None and port.node_port is None:
            continue
        rules = render_port(port, cluster_cidr)
        services.extend(rules.services)
        nodeports.extend(rules.nodeports)
        rejects.extend(rules.rejects)
        per_service.update(rules.chains)
    services.append(Rule(NODEPORTS, matches=(_comment(NODEPORTS_COMMENT), _LOCAL)))
    nat, filter_ = _fixed_chains(facts)
    nat_chains = {SERVICES: tuple(services), NODEPORTS: tuple(nodeports), **nat, **per_service}
    filter_chains = {SERVICES: tuple(rejects), **filter_}
    return Ruleset({NAT: nat_chains, FILTER: filter_chains}, jumps())


def render(services: Iterable[Obj], endpoints: Iterable[Obj], facts: NodeFacts | None = None) -> Ruleset:
    """The whole ruleset for Services and Endpoints as the API serves them."""
    return render_ports(service_ports(services, endpoints), facts or NodeFacts())
