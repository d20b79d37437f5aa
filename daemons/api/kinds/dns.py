"""DNS (minik8s.io): a host whose paths route to Services, served by every node's nginx."""

from __future__ import annotations

from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource

Obj = dict[str, Any]


def _dns_paths(dns: Obj) -> list[Obj]:
    return dns.get("spec", {}).get("paths") or []


COLUMNS = (
    Column("Host", "string", lambda o, _n: o.get("spec", {}).get("host") or tables.NONE),
    Column("Paths", "string", lambda o, _n: ",".join(str(p.get("path", "")) for p in _dns_paths(o)) or tables.NONE),
    tables.AGE,
    Column("Services", "string", lambda o, _n: ",".join(
        f"{p.get('serviceName', '')}:{p.get('servicePort', '')}" for p in _dns_paths(o)) or tables.NONE, priority=1),
)

RESOURCE = Resource("DNS", "dns", models.DNS, group="minik8s.io", has_status=False, columns=COLUMNS)
