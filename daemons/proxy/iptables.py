"""Applying a rendered ``Ruleset`` to the kernel with python-iptables: one libiptc commit per table.

Each sync reads the table, flushes our chains (``KUBE-*``), creates the missing
ones, refills them, deletes the ones no longer rendered, makes sure the jumps
from the built-in chains are there exactly once, and commits the table in one
atomic replace. Nothing that is not ours (Docker's chains and rules, anyone
else's) is touched.

python-iptables builds a rule in Python through ctypes and re-reads every
match's parameters through the extension's save hook when the rule is
appended: about 1.3 ms a rule on this 2-CPU machine, 15 s for a thousand
services of three endpoints. So the ``Encoder`` parses each distinct match and
target once with python-iptables (parse, then the extension's final check),
keeps the bytes, and assembles an entry from them and the fixed ``ipt_entry``
header (python-iptables' struct); DNAT targets, one per endpoint, are filled
into a template learnt from python-iptables' own encodings. Entries of rules
that did not change are reused from the previous sync, so a periodic resync
costs little more than the libiptc calls.
"""

from __future__ import annotations

import ctypes as ct
import logging
import socket
import struct
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import iptc

from daemons.proxy.names import ClusterView
from daemons.proxy.rules import CHAIN_PREFIX, TABLES, Jump, Match, NodeFacts, Options, Rule, Ruleset, render_ports

log = logging.getLogger(__name__)

VERDICTS = ("ACCEPT", "DROP", "RETURN")
PROTOCOL_NUMBERS = {"": 0, "tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP}
IP = iptc.ip4tc.ipt_ip
ENTRY_SIZE = iptc.ip4tc.xt_align(ct.sizeof(iptc.ip4tc.ipt_entry))
IP_HEADER_SIZE = ct.sizeof(IP)  # addresses, interfaces, protocol, flags: what a rule matches on
TARGET_OFFSET_AT = iptc.ip4tc.ipt_entry.target_offset.offset  # followed by next_offset, both u16
MATCH_HEADER_SIZE = ct.sizeof(iptc.xtables.xt_entry_match)  # size (u16), name (29 chars), revision (u8)
Chains = Mapping[str, Sequence[Rule]]
PROBES = ("10.1.2.3", "172.20.30.40", "192.168.200.100")  # addresses whose bytes occur nowhere else in a target
COMMIT_ATTEMPTS = 3
BUILTIN_CHAINS = {"nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
                  "filter": ("INPUT", "FORWARD", "OUTPUT")}


@dataclass(frozen=True)
class ApplyStats:
    """What one apply did: rules written, entries newly encoded (the rest came from the cache), seconds."""

    chains: int
    rules: int
    encoded: int
    encode_seconds: float
    commit_seconds: float


class Encoder:
    """Turns ``Rule``s into libiptc entries, building each distinct match and target once with python-iptables.

    Not thread-safe, like libxtables underneath: one encoder per thread that applies rules.
    """

    def __init__(self) -> None:
        # Extensions see the rule they are parsed for (DNAT to a port wants -p tcp or udp): a scratch one.
        self._context = iptc.Rule()
        self._context_protocol = ""
        self._matches: dict[str, iptc.Match] = {}
        self._targets: dict[str, iptc.Target] = {}
        self._standard = iptc.Target(self._context, "ACCEPT")  # a verdict or a jump: only its name changes
        self._fresh: dict[Any, Any] = {}
        self._stale: dict[Any, Any] = {}
        self.encoded = 0

    def entry(self, rule: Rule, chains: Container[str]) -> ct.Array[ct.c_char]:
        """The libiptc entry of ``rule``; ``chains`` are the table's chains, which a target may jump to."""
        return self._cached(rule, lambda: self._build(rule, chains))

    def end_sync(self, committed: bool) -> None:
        """Forget parts the last sync did not use; after a failed sync keep everything for the retry."""
        if committed:
            self._stale, self._fresh = self._fresh, {}
        else:
            self._stale.update(self._fresh)
            self._fresh = {}
        self.encoded = 0

    def _cached(self, key: Any, build: Callable[[], Any]) -> Any:
        value = self._fresh.get(key)
        if value is None:
            value = self._stale.pop(key, None)
            if value is None:
                value = build()
            self._fresh[key] = value
        return value

    def _build(self, rule: Rule, chains: Container[str]) -> ct.Array[ct.c_char]:
        self.encoded += 1
        protocol = PROTOCOL_NUMBERS[rule.protocol or ""]
        matches = b"".join(self._cached(("match", match, protocol), lambda match=match: self._match(match, protocol))
                           for match in rule.matches)
        standard = rule.target in VERDICTS or rule.target in chains
        target = self._cached(("target", rule.target, rule.target_options, protocol, standard),
                              lambda: self._target(rule, protocol, standard))
        header = self._cached(("header", rule.source, rule.destination, protocol),
                              lambda: _header(rule.source, rule.destination, protocol))
        entry = ct.create_string_buffer(header + matches + target, len(header) + len(matches) + len(target))
        struct.pack_into("=HH", entry, TARGET_OFFSET_AT, len(header) + len(matches),
                         len(header) + len(matches) + len(target))
        return entry

    def _set_context(self, protocol: int) -> None:
        if self._context_protocol != str(protocol):
            self._context_protocol = self._context.protocol = str(protocol)

    def _match(self, match: Match, protocol: int) -> bytes:
        self._set_context(protocol)
        built = self._matches.get(match.module)
        if built is None:
            built = self._matches[match.module] = iptc.Match(self._context, match.module)
        built.reset()  # also points the extension, which all matches of its kind share, back at this buffer
        for name, value in match.options:
            built.set_parameter(name, value)
        # The public final_check() first re-reads the parameters through the extension's save hook, which is
        # only needed when another rule's parse ran in between; here the check follows the parse directly.
        built._final_check()
        return bytes(built.match_buf)

    def _target(self, rule: Rule, protocol: int, standard: bool) -> bytes:
        if rule.target == "DNAT" and len(rule.target_options) == 1 and rule.target_options[0][0] == "to-destination":
            address, _, port = rule.target_options[0][1].rpartition(":")
            template = self._cached(("dnat", port, protocol), lambda: self._dnat_template(port, protocol))
            if template is not None:
                return template.fill(address)
        if standard:
            # The property's setter itself: Target's __setattr__ would first list every attribute with dir().
            iptc.Target.standard_target.fset(self._standard, rule.target)
            return ct.string_at(ct.addressof(self._standard.target), self._standard.size)
        return self._extension(rule.target, rule.target_options, protocol)

    def _extension(self, name: str, options: Options, protocol: int) -> bytes:
        """A target extension (DNAT, MARK, ...) parsed and checked by python-iptables."""
        self._set_context(protocol)
        built = self._targets.get(name)
        if built is None:
            built = self._targets[name] = iptc.Target(self._context, name)
        built.reset()
        for option, value in options:
            built.set_parameter(option, value)
        built._final_check()
        return ct.string_at(ct.addressof(built.target), built.size)

    def _dnat_template(self, port: str, protocol: int) -> AddressTemplate | None:
        """Where the address sits in a DNAT target to ``port``, learnt from python-iptables' own encodings.

        A target per endpoint costs a parse each (a third of a cold sync); endpoints of a port differ only in
        the address. None (parse every time) unless filling the template reproduces a third encoding exactly.
        """
        def encode(address: str) -> bytes:
            return self._extension("DNAT", (("to-destination", f"{address}:{port}"),), protocol)

        first, second = encode(PROBES[0]), encode(PROBES[1])
        offsets = [offset for offset in range(len(first) - 3)
                   if first[offset:offset + 4] == socket.inet_aton(PROBES[0])
                   and second[offset:offset + 4] == socket.inet_aton(PROBES[1])]
        template = AddressTemplate(first, tuple(offsets))
        if not offsets or template.fill(PROBES[2]) != encode(PROBES[2]) or template.fill(PROBES[1]) != second:
            log.warning("DNAT targets to port %s: no address template, each endpoint is parsed", port)
            return None
        return template


@dataclass(frozen=True)
class AddressTemplate:
    """An encoded target and the offsets of the IPv4 address in it (a NAT range has it as first and last)."""

    data: bytes
    offsets: tuple[int, ...]

    def fill(self, address: str) -> bytes:
        packed = socket.inet_aton(address)
        data = bytearray(self.data)
        for offset in self.offsets:
            data[offset:offset + 4] = packed
        return bytes(data)


def _address(spec: str | None) -> tuple[int, int, bool]:
    """``[!]a.b.c.d[/len]`` as (address, mask) in network byte order, and whether it is negated."""
    if not spec:
        return 0, 0, False
    negated = spec.startswith("!")
    address, _, length = spec.lstrip("!").partition("/")
    bits = int(length or 32)
    if not 0 <= bits <= 32:
        raise ValueError(f"invalid prefix length in {spec}")
    mask = struct.unpack("=I", struct.pack("!I", (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF))[0]
    return struct.unpack("=I", socket.inet_pton(socket.AF_INET, address))[0] & mask, mask, negated


def _header(source: str | None, destination: str | None, protocol: int) -> bytes:
    """The fixed part of an entry (python-iptables' ``ipt_entry``): addresses, masks, protocol, inversions."""
    entry = iptc.ip4tc.ipt_entry()
    ip = entry.ip
    ip.src.s_addr, ip.smsk.s_addr, not_source = _address(source)
    ip.dst.s_addr, ip.dmsk.s_addr, not_destination = _address(destination)
    ip.proto = protocol
    ip.invflags = (IP.IPT_INV_SRCIP if not_source else 0) | (IP.IPT_INV_DSTIP if not_destination else 0)
    return ct.string_at(ct.addressof(entry), ENTRY_SIZE)


class IptablesApplier:
    """Makes the kernel's tables hold a ``Ruleset``: our chains exactly as rendered, everything else as it was."""

    def __init__(self) -> None:
        self.encoder = Encoder()

    def apply(self, ruleset: Ruleset) -> ApplyStats:
        """Write every table of ``ruleset``, nat first: a new DNAT is in place before its REJECT goes away."""
        return self._write({table: ruleset.tables.get(table, {}) for table in TABLES}, ruleset.jumps)

    def cleanup(self) -> ApplyStats:
        """Remove every ``KUBE-*`` chain and every jump to one, in every table we write."""
        return self._write({table: {} for table in TABLES}, ())

    def _write(self, tables: Mapping[str, Chains], jumps: Sequence[Jump]) -> ApplyStats:
        encode_seconds = commit_seconds = 0.0
        committed = False
        try:
            for name, chains in tables.items():
                encoding, committing = self._write_table(name, chains, [jump for jump in jumps if jump.table == name])
                encode_seconds += encoding
                commit_seconds += committing
            committed = True
        finally:
            encoded = self.encoder.encoded
            self.encoder.end_sync(committed)
        return ApplyStats(chains=sum(len(chains) for chains in tables.values()),
                          rules=sum(len(rules) for chains in tables.values() for rules in chains.values()),
                          encoded=encoded, encode_seconds=encode_seconds, commit_seconds=commit_seconds)

    def _write_table(self, name: str, chains: Chains, jumps: Sequence[Jump]) -> tuple[float, float]:
        """Read, rewrite and commit one table; seconds spent building it and committing it."""
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            table = iptc.Table(name, autocommit=False)
            table.refresh()  # the kernel's current table; drops whatever a failed attempt left in the handle
            started = time.perf_counter()
            self._fill(table, chains, jumps)
            filled = time.perf_counter()
            try:
                table.commit()
                return filled - started, time.perf_counter() - filled
            except iptc.IPTCError as error:
                if attempt == COMMIT_ATTEMPTS:
                    raise
                log.info("%s table changed while we wrote it (%s); writing it again", name, error)
        raise AssertionError("unreachable")

    def _fill(self, table: iptc.Table, chains: Chains, jumps: Sequence[Jump]) -> None:
        existing = {chain.name for chain in table.chains}
        for name in chains:
            if name in existing:
                table.flush_entries(name)
            else:
                table.create_chain(name)
        stale = sorted(name for name in existing if name.startswith(CHAIN_PREFIX) and name not in chains)
        for name in stale:
            table.flush_entries(name)  # drops its references to other chains of ours, so each can go
        self._ensure_jumps(table, chains, jumps)
        for name, rules in chains.items():
            for rule in rules:
                table.append_entry(name, self.encoder.entry(rule, chains))
        for name in stale:
            table.delete_chain(name)

    def _ensure_jumps(self, table: iptc.Table, chains: Chains, jumps: Sequence[Jump]) -> None:
        """Each built-in chain holds exactly our jumps, in order; ones already right stay where they are."""
        for name in BUILTIN_CHAINS[table.name]:
            chain = iptc.Chain(table, name)
            wanted = [(self.encoder.entry(jump.rule, chains), jump.rule.target) for jump in jumps
                      if jump.chain == chain.name]
            present = _our_jumps(table, chain.name)
            if len(present) == len(wanted) and all(
                    _same_rule(entry, target, *want) for (entry, target), want in zip(present, wanted, strict=True)):
                continue
            for entry, _target in reversed(present):
                chain.delete_rule(table.create_rule(entry, chain))
            for position, (buffer, _target) in enumerate(wanted):
                table.insert_entry(chain.name, buffer, position)
            log.info("%s %s: jumps into our chains %s", table.name, chain.name, "written" if wanted else "removed")


def _our_jumps(table: iptc.Table, chain: str) -> list[tuple[Any, str]]:
    """The rules of built-in ``chain`` that jump to a chain of ours, with their targets, in chain order."""
    found = []
    entry = table.first_rule(chain)
    while entry:
        target = (table.get_target(entry) or b"").decode()
        if target.startswith(CHAIN_PREFIX):
            found.append((entry, target))
        entry = table.next_rule(entry)
    return found


def _same_rule(entry: Any, target: str, wanted: ct.Array[ct.c_char], wanted_target: str) -> bool:
    """Whether a rule read from the kernel is the one we would write: same addresses, matches and target."""
    present = ct.string_at(ct.addressof(entry), entry.target_offset)
    expected = wanted.raw[:ct.cast(wanted, ct.POINTER(iptc.ip4tc.ipt_entry))[0].target_offset]
    return (target == wanted_target and present[:IP_HEADER_SIZE] == expected[:IP_HEADER_SIZE]
            and _matches(present) == _matches(expected))


def _matches(entry: bytes) -> list[tuple[bytes, int, bytes]]:
    """The (name, revision, data) of each match of an encoded entry, up to its target.

    Compared field by field: the kernel hands a match's name back as a C string, with whatever the
    buffer held after its end.
    """
    found = []
    offset = ENTRY_SIZE
    while offset + MATCH_HEADER_SIZE <= len(entry):
        (size,) = struct.unpack_from("=H", entry, offset)
        if size < MATCH_HEADER_SIZE:
            break
        name = entry[offset + 2:offset + MATCH_HEADER_SIZE - 1].split(b"\0", 1)[0]
        found.append((name, entry[offset + MATCH_HEADER_SIZE - 1], entry[offset + MATCH_HEADER_SIZE:offset + size]))
        offset += size
    return found


class IptablesProgrammer:
    """The iptables side of the proxy: renders the ruleset for the view's service ports and applies it."""

    name = "iptables"

    def __init__(self, facts: NodeFacts) -> None:
        self.facts = facts
        self.applier = IptablesApplier()

    def sync(self, view: ClusterView) -> None:
        stats = self.applier.apply(render_ports(view.ports, self.facts))
        log.debug("iptables: %d rules in %d chains (%d newly encoded) in %.3fs, commits %.3fs", stats.rules,
                  stats.chains, stats.encoded, stats.encode_seconds, stats.commit_seconds)

    def cleanup(self) -> None:
        self.applier.cleanup()
        log.info("iptables: our chains in %s and every jump into them removed", " and ".join(TABLES))
