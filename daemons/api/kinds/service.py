"""Services: a stable virtual IP (and node ports) in front of the pods their selector picks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, FieldError, Resource
from daemons.api.defaults import default_service

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


def check(obj: Obj, current: Obj | None) -> list[FieldError]:
    """This cluster is IPv4 single-stack."""
    spec = obj.get("spec") or {}
    problems = [FieldError.invalid(f"spec.ipFamilies[{index}]", family, "not configured on this cluster")
                for index, family in enumerate(spec.get("ipFamilies") or []) if family != "IPv4"]
    if spec.get("ipFamilyPolicy") == "RequireDualStack":
        problems.append(FieldError.invalid("spec.ipFamilyPolicy", "RequireDualStack",
                                           "this cluster is not configured for dual-stack services"))
    if len(spec.get("clusterIPs") or []) > 1:
        problems.append(FieldError("FieldValueInvalid", "spec.clusterIPs", "Invalid value: may only hold one address, "
                                   "this cluster is not configured for dual-stack services"))
    return problems


def check_update(obj: Obj, current: Obj) -> list[FieldError]:
    """The primary cluster IP never changes, except to or from ExternalName."""
    spec, old = obj.get("spec") or {}, current.get("spec") or {}
    if "ExternalName" in (spec.get("type"), old.get("type")) or not old.get("clusterIP"):
        return []
    if spec.get("clusterIP") != old["clusterIP"]:
        return [FieldError.invalid("spec.clusterIP", spec.get("clusterIP", ""), "field is immutable")]
    return []


RESOURCE = Resource("Service", "services", models.Service, short_names=("svc",), subresources=("status",),
                    categories=("all",), name_format="dns1035", columns=COLUMNS,
                    initial_status=lambda _obj: {"loadBalancer": {}}, defaults=default_service,
                    check=check, check_update=check_update)
