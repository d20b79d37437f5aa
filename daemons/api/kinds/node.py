"""Nodes: registered by their kubelet, which owns their status from the first write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource

Obj = dict[str, Any]


NODE_ROLE_PREFIX = "node-role.kubernetes.io/"
NODE_ROLE_LABEL = "kubernetes.io/role"


def node_status(node: Obj) -> str:
    """Ready while the Ready condition is True, NotReady for False or Unknown, Unknown without one; cordoned
    nodes add SchedulingDisabled."""
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    text = "Unknown" if "Ready" not in conditions else "Ready" if conditions["Ready"] == "True" else "NotReady"
    if node.get("spec", {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def node_roles(node: Obj) -> str:
    """The ``node-role.kubernetes.io/<role>`` keys and the ``kubernetes.io/role`` value, sorted, as kubectl."""
    roles: set[str] = set()
    for key, value in (node.get("metadata", {}).get("labels") or {}).items():
        if key.startswith(NODE_ROLE_PREFIX) and key.removeprefix(NODE_ROLE_PREFIX):
            roles.add(key.removeprefix(NODE_ROLE_PREFIX))
        elif key == NODE_ROLE_LABEL and value:
            roles.add(value)
    return ",".join(sorted(roles)) or tables.NONE


def _node_address(kind: str) -> Callable[[Obj, datetime], str]:
    def cell(node: Obj, _now: datetime) -> str:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == kind:
                return address.get("address", tables.NONE)
        return tables.NONE

    return cell


def _node_info(field: str) -> Callable[[Obj, datetime], str]:
    return lambda node, _now: ((node.get("status") or {}).get("nodeInfo") or {}).get(field) or "<unknown>"


COLUMNS = (
    Column("Status", "string", lambda o, _n: node_status(o)),
    Column("Roles", "string", lambda o, _n: node_roles(o)),
    tables.AGE,
    Column("Version", "string",
           lambda o, _n: ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")),
    Column("Internal-IP", "string", _node_address("InternalIP"), priority=1),
    Column("External-IP", "string", _node_address("ExternalIP"), priority=1),
    Column("OS-Image", "string", _node_info("osImage"), priority=1),
    Column("Kernel-Version", "string", _node_info("kernelVersion"), priority=1),
    Column("Container-Runtime", "string", _node_info("containerRuntimeVersion"), priority=1),
    # Not in upstream's table; last, so every upstream column keeps its place.
    Column("Pod-CIDR", "string", lambda o, _n: o.get("spec", {}).get("podCIDR") or tables.NONE, priority=1),
)

RESOURCE = Resource("Node", "nodes", models.Node, namespaced=False, short_names=("no",), subresources=("status",),
                    columns=COLUMNS, creator_owns_status=True, propagates_deletion=False)
