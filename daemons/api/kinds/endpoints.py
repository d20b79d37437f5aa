"""Endpoints: the ready addresses behind a Service, written by the endpoints controller."""

from __future__ import annotations

from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource
from daemons.api.defaults import default_endpoints

Obj = dict[str, Any]


def endpoints_text(endpoints: Obj, limit: int = 3) -> str:
    """ENDPOINTS as kubectl prints it: ``ip:port`` for each port of each subset, then ``+ N more...``."""
    subsets = endpoints.get("subsets") or []
    if not subsets:
        return tables.NONE
    shown: list[str] = []
    count = 0
    for subset in subsets:
        addresses = [address.get("ip", "") for address in subset.get("addresses") or []]
        ports = [port.get("port") for port in subset.get("ports") or []] or [None]
        for port in ports:
            count += len(addresses)
            for ip in addresses:
                if len(shown) < limit:
                    shown.append(ip if port is None else (f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"))
    return ",".join(shown) + (f" + {count - limit} more..." if count > limit else "")


COLUMNS = (
    Column("Endpoints", "string", lambda o, _n: endpoints_text(o)),
    tables.AGE,
)

RESOURCE = Resource("Endpoints", "endpoints", models.Endpoints, short_names=("ep",), has_status=False,
                    columns=COLUMNS, defaults=default_endpoints)
