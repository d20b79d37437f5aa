"""Services: a stable virtual IP (and node ports) in front of the pods their selector picks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource

Obj = dict[str, Any]


def service_ports(service: Obj) -> str:
    parts = []
    for port in service.get("spec", {}).get("ports") or []:
        text = str(port.get("port"))
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        parts.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(parts) or tables.NONE


def _service_external_ip(service: Obj, _now: datetime) -> str:
    """EXTERNAL-IP as kubectl prints it for each type: load balancer ingress only for LoadBalancer."""
    spec = service.get("spec", {})
    kind = spec.get("type") or "ClusterIP"
    external = spec.get("externalIPs") or []
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or tables.NONE
    if kind == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        addresses = [entry.get("ip") or entry.get("hostname") or "" for entry in ingress] + external
        return ",".join(a for a in addresses if a) or "<pending>"
    if kind == "ExternalName":
        return spec.get("externalName") or ""
    return "<unknown>"


def _service_cluster_ip(service: Obj, _now: datetime) -> str:
    spec = service.get("spec", {})
    return (spec.get("clusterIPs") or [spec.get("clusterIP")])[0] or tables.NONE


COLUMNS = (
    Column("Type", "string", lambda o, _n: o.get("spec", {}).get("type") or "ClusterIP"),
    Column("Cluster-IP", "string", _service_cluster_ip),
    Column("External-IP", "string", _service_external_ip),
    Column("Port(s)", "string", lambda o, _n: service_ports(o)),
    tables.AGE,
    Column("Selector", "string", lambda o, _n: ",".join(
        f"{k}={v}" for k, v in sorted((o.get("spec", {}).get("selector") or {}).items())) or tables.NONE, priority=1),
)

RESOURCE = Resource("Service", "services", models.Service, short_names=("svc",), subresources=("status",),
                    categories=("all",), name_format="dns1035", columns=COLUMNS,
                    initial_status=lambda _obj: {"loadBalancer": {}})
