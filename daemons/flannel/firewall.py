"""flanneld's iptables chains (python-iptables): FLANNEL-POSTRTG in nat, FLANNEL-FWD in filter.

Only these two chains and the one jump into each are ever written or
removed; every other chain and rule on the host is left as it is.
"""

from __future__ import annotations

import logging
from ipaddress import IPv4Network

import iptc

from daemons.flannel.network import FORWARD_CHAIN, POSTROUTING_CHAIN, RuleSpec, forward_rules, postrouting_rules

log = logging.getLogger(__name__)

ANYWHERE = "0.0.0.0/0.0.0.0"


class FirewallError(Exception):
    """iptables refused a change."""


def _network(value: str) -> tuple[IPv4Network | None, bool]:
    negated = value.startswith("!")
    address = value.lstrip("!")
    return (None if address == ANYWHERE else IPv4Network(address)), negated


def _spec(rule: iptc.Rule) -> RuleSpec | None:
    """A rule in our RuleSpec shape, or None when it carries anything RuleSpec cannot say (so it is not ours)."""
    if rule.matches or rule.in_interface or rule.out_interface or rule.protocol not in ("ip", None) or not rule.target:
        return None
    src, not_src = _network(rule.src)
    dst, not_dst = _network(rule.dst)
    return RuleSpec(rule.target.name, src, dst, not_src, not_dst)


def _rule(spec: RuleSpec) -> iptc.Rule:
    rule = iptc.Rule()
    if spec.src is not None:
        rule.src = f"{'!' if spec.not_src else ''}{spec.src}"
    if spec.dst is not None:
        rule.dst = f"{'!' if spec.not_dst else ''}{spec.dst}"
    rule.target = rule.create_target(spec.target)
    return rule


def _jump_rules(chain: iptc.Chain, target: str) -> list[iptc.Rule]:
    return [rule for rule in chain.rules if _spec(rule) == RuleSpec(target)]


def _commit(table: iptc.Table, changes: list[str]) -> list[str]:
    if changes:
        table.commit()
    table.refresh()
    return changes


def _ensure(table_name: str, builtin: str, name: str, specs: list[RuleSpec], *, append: bool = False) -> list[str]:
    """Chain ``name`` holds exactly ``specs`` and ``builtin`` jumps to it once (first, or last with ``append``)."""
    table = iptc.Table(table_name)
    table.autocommit = False
    table.refresh()
    changes = []
    if not table.is_chain(name):
        table.create_chain(name)
        changes.append(f"created {table_name} {name}")
    chain = iptc.Chain(table, name)
    if [_spec(rule) for rule in chain.rules] != specs:
        chain.flush()
        for spec in specs:
            chain.append_rule(_rule(spec))
        changes.append(f"wrote {table_name} {name}: " + "; ".join(spec.args() for spec in specs))
    parent = iptc.Chain(table, builtin)
    jumps = _jump_rules(parent, name)
    for extra in jumps[1:]:
        parent.delete_rule(extra)
        changes.append(f"removed a duplicate jump {table_name} {builtin} -> {name}")
    if not jumps and append:
        parent.append_rule(_rule(RuleSpec(name)))
        changes.append(f"appended {table_name} {builtin} -j {name}")
    elif not jumps:
        parent.insert_rule(_rule(RuleSpec(name)))
        changes.append(f"inserted {table_name} {builtin} -j {name}")
    return _commit(table, changes)


def _remove(table_name: str, builtin: str, name: str) -> list[str]:
    table = iptc.Table(table_name)
    table.autocommit = False
    table.refresh()
    changes = []
    parent = iptc.Chain(table, builtin)
    for jump in _jump_rules(parent, name):
        parent.delete_rule(jump)
        changes.append(f"removed {table_name} {builtin} -j {name}")
    if table.is_chain(name):
        chain = iptc.Chain(table, name)
        chain.flush()
        chain.delete()
        changes.append(f"deleted {table_name} {name}")
    return _commit(table, changes)


def ensure_rules(network: IPv4Network, ip_masq: bool) -> list[str]:
    """Converge both chains; what changed, for the log. Masquerading is removed when ``ip_masq`` is off."""
    try:
        # Appended, as flannel does: the proxy's FORWARD rules (REJECT for Services without endpoints) come first.
        changes = _ensure(iptc.Table.FILTER, "FORWARD", FORWARD_CHAIN, forward_rules(network), append=True)
        if ip_masq:
            return changes + _ensure(iptc.Table.NAT, "POSTROUTING", POSTROUTING_CHAIN, postrouting_rules(network))
        return changes + _remove(iptc.Table.NAT, "POSTROUTING", POSTROUTING_CHAIN)
    except (iptc.IPTCError, iptc.xtables.XTablesError, ValueError) as error:
        raise FirewallError(str(error)) from None


def remove_rules() -> list[str]:
    """Delete both chains and the jumps into them."""
    try:
        return _remove(iptc.Table.NAT, "POSTROUTING", POSTROUTING_CHAIN) + _remove(
            iptc.Table.FILTER, "FORWARD", FORWARD_CHAIN
        )
    except (iptc.IPTCError, iptc.xtables.XTablesError, ValueError) as error:
        raise FirewallError(str(error)) from None
